//! Walking by int8 codes against walking by format 4's high halves, on the harness's files.
//!
//!     cargo run --release --bin codes -- A.chassis B.chassis [--efs 32,48,64] [--reps 5]
//!         [--queries Q.fvecs --truth T.ivecs] [--many]
//!
//! Opens each file read-only (as the harness's reader does), runs pypi-minilm's 1,000 held-out
//! queries (or `--queries` with their exact neighbors in `--truth`) one at a time on one thread
//! at each ef, files taking turns, and prints per file and ef: recall@10 against the ground
//! truth, the median QPS over `--reps` counted repetitions (after one warm-up), and distance
//! computations per query. `--many`: each file's queries as one `search_many` call (a batch,
//! as Python's `search` runs them) instead of one `search` call each. A quick check between
//! harness runs; the harness (bench/ann) is what docs/PERFORMANCE.md reports.

use std::time::Instant;

use chassis::IndexReader;
use chassis_bench::{pypi_minilm, read_fvecs, read_ivecs};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut files = Vec::new();
    let mut efs = vec![32usize, 48, 64];
    let mut reps = 5;
    let mut sets: Option<(String, String)> = None;
    let mut many = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--efs" => {
                efs = args[i + 1]
                    .split(',')
                    .map(|x| x.parse().expect("ef"))
                    .collect();
                i += 1;
            }
            "--reps" => {
                reps = args[i + 1].parse().expect("reps");
                i += 1;
            }
            "--queries" => {
                let truth = args.get(i + 3).filter(|_| args[i + 2] == "--truth");
                sets = Some((args[i + 1].clone(), truth.expect("--truth T.ivecs").clone()));
                i += 3;
            }
            "--many" => many = true,
            f => files.push(f.to_string()),
        }
        i += 1;
    }
    let (queries, truth) = match sets {
        Some((q, t)) => (
            read_fvecs(std::path::Path::new(&q)).expect("queries"),
            read_ivecs(std::path::Path::new(&t)),
        ),
        None => {
            let dir = pypi_minilm().expect("../shared/data/pypi-minilm");
            (
                read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries"),
                read_ivecs(&dir.join("pypi-minilm_groundtruth.ivecs")),
            )
        }
    };
    let readers: Vec<IndexReader> = files
        .iter()
        .map(|f| IndexReader::open(f).expect("open"))
        .collect();
    for &ef in &efs {
        let mut qps: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
        let mut recall = vec![0.0; readers.len()];
        let mut dist = vec![0.0; readers.len()];
        for rep in 0..=reps {
            for (r, reader) in readers.iter().enumerate() {
                let before = reader.search_distance_count();
                let t = Instant::now();
                let mut hit = 0usize;
                let rows: Vec<&[f32]> = (0..queries.len()).map(|qi| queries.row(qi)).collect();
                let answers = if many {
                    reader.search_many(&rows, 10, ef).expect("search_many")
                } else {
                    rows.iter()
                        .map(|q| reader.search(q, 10, ef).expect("search"))
                        .collect()
                };
                for (got, want) in answers.iter().zip(&truth) {
                    hit += got
                        .iter()
                        .filter(|h| want[..10].contains(&(h.id as i32)))
                        .count();
                }
                let secs = t.elapsed().as_secs_f64();
                if rep > 0 {
                    qps[r].push(queries.len() as f64 / secs);
                }
                recall[r] = hit as f64 / (10 * queries.len()) as f64;
                dist[r] = (reader.search_distance_count() - before) as f64 / queries.len() as f64;
            }
        }
        for (r, f) in files.iter().enumerate() {
            qps[r].sort_by(f64::total_cmp);
            println!(
                "ef {ef:4}  {f}: recall {:.4}  QPS {:8.0} (median of {reps})  distances {:.1}",
                recall[r],
                qps[r][qps[r].len() / 2],
                dist[r]
            );
        }
    }
}
