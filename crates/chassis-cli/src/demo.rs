//! `chassis demo`: the main job on built-in data. Makes a clustered synthetic dataset, builds
//! an index file, reopens it, searches it, and reports recall@10 against brute force, QPS,
//! build time and file size.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use chassis::graph::distance::{Distance, Metric};
use chassis::{Index, Options};

pub struct DemoArgs {
    pub n: usize,
    pub dims: usize,
    pub queries: usize,
    pub k: usize,
    pub ef: usize,
    pub path: Option<PathBuf>,
    pub json: bool,
}

/// xorshift64* + Box–Muller: a fixed, dependency-free generator so every run sees the same data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
}

/// `n` points around `n / 100` Gaussian centres, with noise as wide as the spread of the
/// centres along many directions, so neighbors are not trivially separable.
pub fn dataset(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng(seed | 1);
    let clusters = (n / 1000).max(1);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dims).map(|_| rng.normal()).collect())
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[(rng.next() % clusters as u64) as usize];
            c.iter().map(|x| x + rng.normal()).collect()
        })
        .collect()
}

pub fn run(a: DemoArgs) -> Result<()> {
    let tmp;
    let path = match a.path {
        Some(p) => p,
        None => {
            tmp = tempfile::Builder::new()
                .prefix("chassis-demo")
                .tempdir()
                .context("no temp dir")?;
            tmp.path().join("demo.chassis")
        }
    };
    if path.exists() {
        std::fs::remove_file(&path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
    }
    let say = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    say(format!(
        "chassis demo: {} base vectors + {} queries, {} dims, squared L2, M=16, ef_construction=200",
        a.n, a.queries, a.dims
    ));
    let all = dataset(a.n + a.queries, a.dims, 0x5EED_0001);
    let (base, queries) = all.split_at(a.n);

    let t = Instant::now();
    let index = Index::create(&path, Options::new(a.dims, Metric::L2Squared))?;
    let bar = crate::progress(a.n as u64, "building");
    for v in base {
        index.add(v)?;
        bar.inc(1);
    }
    index.flush()?;
    bar.finish_and_clear();
    let build_s = t.elapsed().as_secs_f64();
    drop(index);
    say(format!(
        "built and flushed {} in {:.2} s ({:.0} vectors/s)",
        path.display(),
        build_s,
        a.n as f64 / build_s
    ));

    let index = Index::open_read_only(&path)?;
    let dist = Distance::new(Metric::L2Squared);
    let truth: Vec<Vec<u64>> = queries
        .iter()
        .map(|q| {
            let mut d: Vec<(f32, u64)> = base
                .iter()
                .enumerate()
                .map(|(i, v)| (dist.eval(q, v), i as u64))
                .collect();
            d.select_nth_unstable_by(a.k - 1, |x, y| x.0.total_cmp(&y.0));
            d.truncate(a.k);
            d.into_iter().map(|(_, i)| i).collect()
        })
        .collect();
    // Warm-up pass, then a timed pass.
    for q in queries {
        index.search(q, a.k, a.ef)?;
    }
    let t = Instant::now();
    let mut hits = 0usize;
    for (q, tr) in queries.iter().zip(&truth) {
        let res = index.search(q, a.k, a.ef)?;
        hits += res.iter().filter(|h| tr.contains(&h.id)).count();
    }
    let search_s = t.elapsed().as_secs_f64();
    let recall = hits as f64 / (a.k * a.queries) as f64;
    let qps = a.queries as f64 / search_s;
    let meta = std::fs::metadata(&path)?;
    let allocated = chassis::os::FileStorage::open(&path, false)?.allocated_bytes()?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "n": a.n, "dims": a.dims, "queries": a.queries, "k": a.k, "ef": a.ef,
                "recall_at_k": recall, "qps": qps, "build_seconds": build_s,
                "file_bytes": meta.len(), "allocated_bytes": allocated,
                "simd": format!("{:?}", dist.level()),
            })
        );
    } else {
        println!(
            "recall@{}: {:.4} at ef={} (against brute force)",
            a.k, recall, a.ef
        );
        println!(
            "search: {:.0} queries/s, one thread ({:?} kernels)",
            qps,
            dist.level()
        );
        println!("build: {:.2} s", build_s);
        println!(
            "file: {:.1} MiB logical, {:.1} MiB allocated ({:.0} bytes per vector allocated)",
            meta.len() as f64 / 1048576.0,
            allocated as f64 / 1048576.0,
            allocated as f64 / a.n as f64
        );
    }
    Ok(())
}
