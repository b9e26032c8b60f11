//! Builds a Chassis file from an fvecs file (unless OUT exists), then searches it with a
//! reader: one batch of all queries per ef, median of 3 after a warm-up, with recall@10
//! against the ground truth and distance computations per query. For quick A/B runs of graph
//! and search changes between harness runs (docs/decisions/); pin it: `taskset -c 1`.
//!
//!     cargo run --release --bin build_search -- BASE.fvecs Q.fvecs GT.ivecs OUT.chassis \
//!         METRIC THREADS EFS          # e.g. l2 1 32,48,64
//!
//! `F3=1` builds format 3 (f32 vectors) instead of the default format 6, `F4=1` format 4 (split
//! halves side by side, as files with codes store them), `F16=1` half precision,
//! `CODES=int8|int4` with codes.
use chassis::{Index, IndexReader, Metric, Options};
use chassis_bench::{read_fvecs, read_ivecs};
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let base = read_fvecs(std::path::Path::new(&a[0])).unwrap();
    let qs = read_fvecs(std::path::Path::new(&a[1])).unwrap();
    let gt = read_ivecs(std::path::Path::new(&a[2]));
    let out = &a[3];
    let metric = Metric::parse(&a[4]).unwrap();
    let threads: usize = a[5].parse().unwrap();
    let efs: Vec<usize> = a[6].split(',').map(|x| x.parse().unwrap()).collect();
    let dims = base.dims;
    if !std::path::Path::new(out).exists() {
        let mut o = Options::new(dims, metric).m(16).ef_construction(200);
        if std::env::var("F3").is_ok() {
            o = o.vector_layout(chassis::VectorLayout::F32);
        }
        if std::env::var("F4").is_ok() {
            o = o.vector_layout(chassis::VectorLayout::SplitHalves);
        }
        if std::env::var("F16").is_ok() {
            o = o.precision(chassis::Precision::F16);
        }
        if let Ok(codes) = std::env::var("CODES") {
            o = o.codes(chassis::CodeKind::parse(&codes).expect("CODES: none, int8 or int4"));
        }
        let ix = Index::create(out, o).unwrap();
        let t = Instant::now();
        ix.add_batch(&base.data, threads).unwrap();
        ix.flush().unwrap();
        println!("build {:.1}s", t.elapsed().as_secs_f64());
        ix.close().unwrap();
    }
    let r = IndexReader::open(out).unwrap();
    let rows: Vec<&[f32]> = qs.data.chunks(dims).collect();
    for &ef in &efs {
        r.search_many(&rows, 10, ef).unwrap();
        let d0 = r.search_distance_count();
        let mut best = f64::MAX;
        let mut hits = 0;
        for rep in 0..3 {
            let t = Instant::now();
            let res = r.search_many(&rows, 10, ef).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            if rep == 0 {
                for (h, g) in res.iter().zip(&gt) {
                    hits += h
                        .iter()
                        .filter(|n| g[..10].contains(&(n.id as i32)))
                        .count();
                }
            }
        }
        let dpq = (r.search_distance_count() - d0) as f64 / (3.0 * rows.len() as f64);
        println!(
            "ef {ef}: recall {:.4} qps {:.0} dist/q {:.0}",
            hits as f64 / (10.0 * rows.len() as f64),
            rows.len() as f64 / best,
            dpq
        );
    }
}
