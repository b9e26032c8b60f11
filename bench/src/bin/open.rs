//! Opening a large file, warm page cache (hardening issue, item 1): a reader's open and first
//! snapshot, the writer's open of a cleanly closed file (no pass over the lists), and the
//! writer's open after a writer stopped without closing (the repair pass), each the median of
//! several opens.
//!
//!   cargo run --release --bin open -- [--n 1000000] [--dims 16] [--path FILE] [--reps 7]
//!
//! The file is built once (random vectors, M = 16, ef_construction = 32, on every core) and
//! kept at `--path` for later runs.

use chassis_bench::{arg, median};
use std::path::PathBuf;
use std::time::Instant;

use chassis::{Index, IndexReader, Metric, Options};

fn timed<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, f64, f64) {
    let mut ms = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let x = f();
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        drop(x);
    }
    let lo = ms.iter().cloned().fold(f64::MAX, f64::min);
    let hi = ms.iter().cloned().fold(0.0, f64::max);
    (median(ms), lo, hi)
}

fn main() {
    let path = PathBuf::from(arg("--path").unwrap_or("/tmp/chassis-open-bench.chassis".into()));
    if std::env::args().any(|a| a == "--stop-without-closing") {
        // The child: a writer that adds without flushing, then its process ends.
        let ix = Index::open(&path).unwrap();
        ix.add(&vec![0.5; ix.dims()]).unwrap();
        std::process::exit(0);
    }
    let n: usize = arg("--n").map_or(1_000_000, |s| s.parse().unwrap());
    let dims: usize = arg("--dims").map_or(16, |s| s.parse().unwrap());
    let reps: usize = arg("--reps").map_or(7, |s| s.parse().unwrap());
    if !path.exists() {
        eprintln!("building {n} x {dims} at {} ...", path.display());
        let start = Instant::now();
        let opts = Options::new(dims, Metric::L2Squared)
            .m(16)
            .ef_construction(32);
        let ix = Index::create(&path, opts).unwrap();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        for _ in 0..n.div_ceil(100_000) {
            let rows: Vec<f32> = (0..100_000.min(n) * dims).map(|_| next()).collect();
            ix.add_batch(&rows, 0).unwrap();
        }
        ix.close().unwrap();
        eprintln!("built in {:.0} s", start.elapsed().as_secs_f64());
    }
    let bytes = std::fs::metadata(&path).unwrap().len();
    // Warm the page cache.
    let _ = std::fs::read(&path);
    println!(
        "open: {} ({:.0} MiB), page cache warm, median of {reps} (range)",
        path.display(),
        bytes as f64 / (1 << 20) as f64
    );
    let reader = timed(reps, || {
        let r = IndexReader::open(&path).unwrap();
        r.snapshot().unwrap();
        r
    });
    println!(
        "reader open + first snapshot     | {:8.2} ms ({:.2}-{:.2})",
        reader.0, reader.1, reader.2
    );
    let clean = timed(reps, || {
        let ix = Index::open(&path).unwrap();
        assert!(ix.open_report().clean, "{:?}", ix.open_report());
        ix
    });
    println!(
        "writer open, closed cleanly      | {:8.2} ms ({:.2}-{:.2})",
        clean.0, clean.1, clean.2
    );
    let exe = std::env::current_exe().unwrap();
    let mut unclean = Vec::new();
    let mut len = 0;
    for _ in 0..reps.min(3) {
        let status = std::process::Command::new(&exe)
            .arg("--stop-without-closing")
            .arg("--path")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        let ix = Index::open(&path).unwrap();
        unclean.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(!ix.open_report().clean);
        len = ix.len();
        // Back to a cleanly closed file (the repair pass may have relinked lists).
        ix.close().unwrap();
    }
    let lo = unclean.iter().cloned().fold(f64::MAX, f64::min);
    let hi = unclean.iter().cloned().fold(0.0, f64::max);
    println!(
        "writer open after an unclean stop | {:8.2} ms ({lo:.2}-{hi:.2}), repair pass over {len} vectors",
        median(unclean)
    );
}
