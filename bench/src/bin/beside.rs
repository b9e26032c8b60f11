//! Searches beside writes in one process (docs/READERS.md, "Searches beside writes"): one
//! thread adds pypi-minilm in batches of 1,000 while another searches, against each alone.
//!
//! The index starts from the first half of the base set (flushed); the writer adds the second
//! half in calls of `--batch` rows (one linking thread) and flushes every `--flush-every`
//! calls. The searcher runs the held-out queries round robin (k = 10, ef = `--ef`) on
//! 1. the writer's own `Index` handle, idle (no writer), then during the adds;
//! 2. a separate `IndexReader` on the same file in the same process, idle, then during the adds
//!    (it sees what the writer published for readers: flushed state plus linked rows).
//!
//! Reported per case: search p50 / p99 latency and QPS, and the add throughput beside the
//! add-alone figure. Each case starts from the same copy of the half-built file and one second
//! of warm-up searches; the order of the cases is alternated over `--rounds` rounds and
//! medians are reported.
//!
//! `cargo run --release --bin beside [-- --rounds 3 --batch 1000 --ef 64]`

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chassis::{Index, IndexReader, Metric, Options};
use chassis_bench::{pypi_minilm, read_fvecs, synthetic, Vectors};

const K: usize = 10;

struct Args {
    rounds: usize,
    batch: usize,
    ef: usize,
    flush_every: usize,
    idle_secs: f64,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 3,
        batch: 1000,
        ef: 64,
        flush_every: 10,
        idle_secs: 5.0,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let n: f64 = v[i + 1].parse().expect("a number");
        match v[i].as_str() {
            "--rounds" => a.rounds = n as usize,
            "--batch" => a.batch = n as usize,
            "--ef" => a.ef = n as usize,
            "--flush-every" => a.flush_every = n as usize,
            "--idle-secs" => a.idle_secs = n,
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

fn data() -> (Vectors, Vectors, &'static str) {
    if let Some(dir) = pypi_minilm() {
        let base = read_fvecs(&dir.join("pypi-minilm_base.fvecs")).expect("base");
        let q = read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries");
        return (base, q, "pypi-minilm (384-d, cosine)");
    }
    (
        synthetic(20_000, 64, 1),
        synthetic(200, 64, 2),
        "synthetic (64-d; ../shared absent)",
    )
}

/// Search latencies in microseconds, and the wall time they took.
struct Searched {
    lat: Vec<f64>,
    wall: f64,
}

impl Searched {
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat.clone();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    }
    fn qps(&self) -> f64 {
        self.lat.len() as f64 / self.wall
    }
}

/// Searches round robin until `stop` (or for `secs` when `stop` is never set).
fn search_loop(
    search: &dyn Fn(&[f32]) -> usize,
    queries: &Vectors,
    stop: &AtomicBool,
    secs: f64,
) -> Searched {
    let start = Instant::now();
    let mut lat = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) && start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        let n = search(queries.row(i % queries.len()));
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(n > 0);
        i += 1;
    }
    Searched {
        lat,
        wall: start.elapsed().as_secs_f64(),
    }
}

/// Adds rows `from..` in calls of `batch`, flushing every `flush_every` calls; vectors/s.
fn add_all(ix: &Index, base: &Vectors, from: usize, a: &Args) -> f64 {
    let t = Instant::now();
    let mut calls = 0;
    for start in (from..base.len()).step_by(a.batch) {
        let end = (start + a.batch).min(base.len());
        ix.add_batch(&base.data[start * base.dims..end * base.dims], 1)
            .expect("add");
        calls += 1;
        if calls % a.flush_every == 0 {
            ix.flush().expect("flush");
        }
    }
    ix.flush().expect("flush");
    (base.len() - from) as f64 / t.elapsed().as_secs_f64()
}

fn fresh(seed_file: &Path, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    std::fs::copy(seed_file, &p).expect("copy");
    p
}

#[derive(Default)]
struct Row {
    p50: Vec<f64>,
    p99: Vec<f64>,
    qps: Vec<f64>,
    add: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn main() {
    let a = args();
    let (base, queries, name) = data();
    let half = base.len() / 2;
    let dir = tempfile_dir();
    let seed_file = dir.join("half.chassis");
    {
        let _ = std::fs::remove_file(&seed_file);
        let ix = Index::create(
            &seed_file,
            Options::new(base.dims, Metric::Cosine)
                .m(16)
                .ef_construction(200),
        )
        .expect("create");
        ix.add_batch(&base.data[..half * base.dims], 2)
            .expect("add");
        ix.close().expect("close");
    }
    println!(
        "data: {name}; {half} vectors flushed, then {} added in calls of {} (1 linking thread, a flush every {} calls) while 1 thread searches (k = {K}, ef = {}); M = 16, ef_construction = 200; {} rounds, medians",
        base.len() - half,
        a.batch,
        a.flush_every,
        a.ef,
        a.rounds
    );
    let mut rows: Vec<(&str, Row)> = [
        "Index, idle",
        "Index, beside adds",
        "IndexReader, idle",
        "IndexReader, beside adds",
        "adds alone",
    ]
    .into_iter()
    .map(|n| (n, Row::default()))
    .collect();
    let never = AtomicBool::new(false);
    for round in 0..a.rounds {
        let mut order: Vec<usize> = vec![0, 1, 2, 3, 4];
        if round % 2 == 1 {
            order.reverse();
        }
        for case in order {
            let path = fresh(&seed_file, &dir, "run.chassis");
            let ix = Index::open(&path).expect("open");
            let searcher = |q: &[f32]| ix.search(q, K, a.ef).expect("search").len();
            match case {
                0 => {
                    // Warm-up, then the measured run.
                    search_loop(&searcher, &queries, &never, 1.0);
                    let s = search_loop(&searcher, &queries, &never, a.idle_secs);
                    record(&mut rows[0].1, &s, None);
                }
                1 => {
                    search_loop(&searcher, &queries, &never, 1.0);
                    let stop = AtomicBool::new(false);
                    let (s, add) = std::thread::scope(|sc| {
                        let w = sc.spawn(|| {
                            let r = add_all(&ix, &base, half, &a);
                            stop.store(true, Ordering::Relaxed);
                            r
                        });
                        let s = search_loop(&searcher, &queries, &stop, f64::INFINITY);
                        (s, w.join().expect("writer"))
                    });
                    record(&mut rows[1].1, &s, Some(add));
                }
                2 | 3 => {
                    let reader = IndexReader::open(&path).expect("reader");
                    let rs = |q: &[f32]| reader.search(q, K, a.ef).expect("search").len();
                    search_loop(&rs, &queries, &never, 1.0);
                    if case == 2 {
                        let s = search_loop(&rs, &queries, &never, a.idle_secs);
                        record(&mut rows[2].1, &s, None);
                    } else {
                        let stop = AtomicBool::new(false);
                        let (s, add) = std::thread::scope(|sc| {
                            let w = sc.spawn(|| {
                                let r = add_all(&ix, &base, half, &a);
                                stop.store(true, Ordering::Relaxed);
                                r
                            });
                            let s = search_loop(&rs, &queries, &stop, f64::INFINITY);
                            (s, w.join().expect("writer"))
                        });
                        record(&mut rows[3].1, &s, Some(add));
                    }
                }
                _ => {
                    // The same warm-up as the other cases (it faults in the mapped pages the
                    // adds then touch), then the adds with no searcher.
                    search_loop(&searcher, &queries, &never, 1.0);
                    let add = add_all(&ix, &base, half, &a);
                    rows[4].1.add.push(add);
                }
            }
            drop(ix);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let alone = median(&rows[4].1.add);
    println!(
        "\n| case | search p50 (µs) | search p99 (µs) | search QPS | adds (vectors/s) |\n|---|---:|---:|---:|---:|"
    );
    for (name, r) in &rows {
        let add = if r.add.is_empty() {
            "".to_string()
        } else {
            format!(
                "{:.0} ({:.2}x alone)",
                median(&r.add),
                median(&r.add) / alone
            )
        };
        if r.qps.is_empty() {
            println!("| {name} | | | | {add} |");
        } else {
            println!(
                "| {name} | {:.0} | {:.0} | {:.0} | {add} |",
                median(&r.p50),
                median(&r.p99),
                median(&r.qps)
            );
        }
    }
    let (i_idle, i_busy) = (median(&rows[0].1.p99), median(&rows[1].1.p99));
    let (r_idle, r_busy) = (median(&rows[2].1.p99), median(&rows[3].1.p99));
    let add_ratio = median(&rows[1].1.add) / alone;
    println!(
        "\nIndex: p99 beside adds / idle p99 = {:.2} (goal <= 3); adds beside searches / alone = {:.2} (goal >= 0.9) => {}",
        i_busy / i_idle,
        add_ratio,
        if i_busy / i_idle <= 3.0 && add_ratio >= 0.9 {
            "PASS"
        } else {
            "FAIL"
        }
    );
    println!(
        "IndexReader: p99 beside adds / idle p99 = {:.2}; adds beside its searches / alone = {:.2}",
        r_busy / r_idle,
        median(&rows[3].1.add) / alone
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn record(r: &mut Row, s: &Searched, add: Option<f64>) {
    r.p50.push(s.pct(0.5));
    r.p99.push(s.pct(0.99));
    r.qps.push(s.qps());
    if let Some(a) = add {
        r.add.push(a);
    }
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("chassis-beside-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
