//! Build time, recall and unreachable vectors on real data (hardening issue, item 1): builds
//! pypi-minilm (or a prefix of it) with M = 16, ef_construction = 200 in memory, on one
//! thread and on several, several times each, and prints the median build time, recall@10 at
//! a few ef against the exact ground truth, and how many live vectors no search can reach.
//!
//! Only API that every release since format 4 has, so the same program built against an
//! earlier commit measures it the same way (for an A/B, see docs/performance/hardening-and-node.md).
//!
//!   cargo run --release --bin reachability -- [--data DIR] [--n N] [--threads 1,2] [--reps 3]

use chassis_bench::{arg, median};
use std::path::PathBuf;
use std::time::Instant;

use chassis::{Index, Metric, Options};

fn read_vecs(path: &PathBuf, int: bool) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let d = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        let row: Vec<f32> = bytes[at..at + 4 * d]
            .chunks_exact(4)
            .map(|c| {
                let b: [u8; 4] = c.try_into().unwrap();
                if int {
                    i32::from_le_bytes(b) as f32
                } else {
                    f32::from_le_bytes(b)
                }
            })
            .collect();
        at += 4 * d;
        out.push(row);
    }
    out
}

/// CPU seconds this process has used (user and system, all threads), from /proc.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the name, in ticks.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn main() {
    let dir = PathBuf::from(arg("--data").unwrap_or("../shared/data/pypi-minilm".into()));
    let base = read_vecs(&dir.join("pypi-minilm_base.fvecs"), false);
    let queries = read_vecs(&dir.join("pypi-minilm_query.fvecs"), false);
    let truth = read_vecs(&dir.join("pypi-minilm_groundtruth.ivecs"), true);
    let n: usize = arg("--n").map_or(base.len(), |s| s.parse().unwrap());
    let reps: usize = arg("--reps").map_or(3, |s| s.parse().unwrap());
    let threads: Vec<usize> = arg("--threads")
        .unwrap_or("1,2".into())
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let dims = base[0].len();
    let flat: Vec<f32> = base[..n].iter().flatten().copied().collect();
    // Ground truth is over the whole base: with a prefix, recall is measured against brute
    // force over the prefix.
    let truth: Vec<Vec<u64>> = if n == base.len() {
        truth
            .iter()
            .map(|t| t.iter().take(10).map(|&x| x as u64).collect())
            .collect()
    } else {
        queries
            .iter()
            .map(|q| {
                let qn = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                let mut d: Vec<(f32, u64)> = base[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let vn = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                        let dot: f32 = q.iter().zip(v).map(|(a, b)| a * b).sum();
                        (1.0 - dot / (qn * vn), i as u64)
                    })
                    .collect();
                d.sort_by(|a, b| a.0.total_cmp(&b.0));
                d.iter().take(10).map(|x| x.1).collect()
            })
            .collect()
    };
    println!("reachability: {n} x {dims} cosine, M 16, ef_construction 200, {reps} builds each");
    println!("threads | build s (median, range) | build CPU s | edges | unreachable | recall@10 ef 16 / 32 / 64 / 128");
    for &t in &threads {
        let mut times = Vec::new();
        let mut cpus = Vec::new();
        let mut last = None;
        for _ in 0..reps {
            let opts = Options::new(dims, Metric::Cosine)
                .m(16)
                .ef_construction(200)
                .seed(42);
            let ix = Index::in_memory(opts, 4 << 30).unwrap();
            let start = Instant::now();
            let cpu0 = cpu_s();
            ix.add_batch(&flat, t).unwrap();
            ix.flush().unwrap();
            times.push(start.elapsed().as_secs_f64());
            cpus.push(cpu_s() - cpu0);
            last = Some(ix);
        }
        let ix = last.unwrap();
        let unreachable = ix.unreachable_count();
        let edges = ix.check(0).unwrap().edges;
        let mut recalls = Vec::new();
        for ef in [16, 32, 64, 128] {
            let mut hit = 0;
            for (q, t) in queries.iter().zip(&truth) {
                let got = ix.search(q, 10, ef).unwrap();
                hit += got.iter().filter(|h| t.contains(&h.id)).count();
            }
            recalls.push(hit as f64 / (10 * queries.len()) as f64);
        }
        let lo = times.iter().cloned().fold(f64::MAX, f64::min);
        let hi = times.iter().cloned().fold(0.0, f64::max);
        println!(
            "{t} | {:.1} ({lo:.1}-{hi:.1}) | {:.1} | {edges} | {unreachable} | {}",
            median(times.clone()),
            median(cpus.clone()),
            recalls
                .iter()
                .map(|r| format!("{r:.4}"))
                .collect::<Vec<_>>()
                .join(" / ")
        );
    }
}
