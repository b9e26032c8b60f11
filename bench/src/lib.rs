//! Shared pieces of the benchmark programs: datasets, brute force, statistics.

use std::fs;
use std::path::{Path, PathBuf};

/// Vectors stored row by row.
pub struct Vectors {
    /// Dimensions.
    pub dims: usize,
    /// Row-major values.
    pub data: Vec<f32>,
}

impl Vectors {
    /// Rows.
    pub fn len(&self) -> usize {
        self.data.len() / self.dims.max(1)
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dims..(i + 1) * self.dims]
    }
}

/// Reads a `.fvecs` file (each row: little-endian i32 dims, then dims f32).
pub fn read_fvecs(path: &Path) -> std::io::Result<Vectors> {
    let b = fs::read(path)?;
    let dims = i32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
    let row = 4 + 4 * dims;
    let mut data = Vec::with_capacity(b.len() / row * dims);
    for r in b.chunks_exact(row) {
        data.extend(
            r[4..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))),
        );
    }
    Ok(Vectors { dims, data })
}

/// Reads an .ivecs file (ground truth): one list of i32 per row.
pub fn read_ivecs(path: &Path) -> Vec<Vec<i32>> {
    let b = fs::read(path).expect("ground truth");
    let k = i32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
    b.chunks_exact(4 + 4 * k)
        .map(|r| {
            r[4..]
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect()
        })
        .collect()
}

/// Where the shared pypi-minilm data lives, if it is there.
pub fn pypi_minilm() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/pypi-minilm");
    dir.join("pypi-minilm_base.fvecs").exists().then_some(dir)
}

/// A deterministic clustered synthetic set of unit vectors (for when the real data is absent).
pub fn synthetic(n: usize, dims: usize, seed: u64) -> Vectors {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut normal = move || {
        let (u1, u2) = (next().max(1e-12), next());
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    };
    let clusters = (n / 500).max(1);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dims).map(|_| normal()).collect())
        .collect();
    let mut data = Vec::with_capacity(n * dims);
    for i in 0..n {
        let c = &centres[(i * 7919) % clusters];
        let v: Vec<f32> = c.iter().map(|x| x + 0.6 * normal()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        data.extend(v.iter().map(|x| x / norm));
    }
    Vectors { dims, data }
}

/// Dot product, summed in 16 lanes so the compiler vectorizes it (a single running sum is a
/// chain of dependent adds: at 384 dimensions about ten times slower, which in
/// `walk_codes` outweighed the walk it measured).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Mean and a 95% bootstrap interval of `xs` (`rounds` resamples, seeded).
pub fn bootstrap_mean(xs: &[f64], rounds: usize, seed: u64) -> (f64, f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let mut s = seed | 1;
    let mut means: Vec<f64> = (0..rounds)
        .map(|_| {
            let mut sum = 0.0;
            for _ in 0..xs.len() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                sum += xs[(s % xs.len() as u64) as usize];
            }
            sum / xs.len() as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let lo = means[(rounds as f64 * 0.025) as usize];
    let hi = means[((rounds as f64 * 0.975) as usize).min(rounds - 1)];
    (mean, lo, hi)
}

/// Advises the whole 2 MiB pages inside `v`'s allocation `MADV_HUGEPAGE`, as the reader maps
/// its segments, so a control array in memory compares with a file mapped in huge folios.
pub fn advise_huge<T>(v: &Vec<T>) {
    const HUGE: usize = 2 << 20;
    let start = v.as_ptr() as usize;
    let end = start + v.capacity() * std::mem::size_of::<T>();
    let (first, last) = (start.div_ceil(HUGE) * HUGE, end / HUGE * HUGE);
    if last > first {
        // SAFETY: `first..last` lies inside the Vec's own allocation; advice changes no
        // contents.
        let _ = unsafe {
            rustix::mm::madvise(
                first as *mut std::ffi::c_void,
                last - first,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
    }
}

/// The value after `name` on the command line (`--rounds 5` → "5"), if given.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
