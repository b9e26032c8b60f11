//! Experiment 3 of ADR-0008: readers in other processes tolerating a writer.
//!
//! One writer and `--readers` reader processes on one file. The writer builds a base index,
//! then, while the readers search continuously at ef ∈ {16, 32, 64, 128}:
//!
//! 1. `--flushes` flushes of `--adds` adds and `--deletes` deletes (small flushed batches);
//! 2. parallel batch adds of `--batch` vectors in calls of `--batch-step` on two threads (R
//!    published as slots are linked), each paused unflushed, then flushed;
//! 3. a compaction (`compact()`: the ADR's rebuild_graph(), a new file renamed over the path),
//!    which the readers follow;
//! 4. an unflushed bulk load of `--bulk` × N new vectors (N: the live vectors at that point)
//!    in five chunks, pausing (without flushing) after each.
//!
//! Before every flush and the compaction, and after the compaction, the writer waits while
//! each reader searches the same queries on the same snapshot with the writer idle; after the
//! batch and every bulk chunk, while it searches them with the writer paused. Every concurrent
//! query is paired with that idle (or paused) query on the same snapshot (for the compaction:
//! the same file and sequence, before or after); recall@10 is against the exact top 10 of the
//! snapshot's live vectors. Half the concurrent passes run with routing off: the control.
//!
//! Pass: zero reader errors; at every ef, mean paired loss ≤ 1 recall point and ≤ 1% of
//! queries losing ≥ 0.5.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin readers
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chassis::{CompactOptions, Index, IndexReader, Metric, Options};
use chassis_bench::{bootstrap_mean, dot, pypi_minilm, read_fvecs, synthetic, Vectors};

const EFS: [usize; 4] = [16, 32, 64, 128];
const K: usize = 10;

struct Args {
    base: usize,
    flushes: usize,
    adds: usize,
    deletes: usize,
    bulk: f64,
    batch: usize,
    batch_step: usize,
    queries: usize,
    readers: usize,
    dir: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut a = Args {
        base: 20_000,
        flushes: 20,
        adds: 500,
        deletes: 25,
        bulk: 1.0,
        batch: 20_000,
        batch_step: 5_000,
        queries: 200,
        readers: 2,
        dir: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--base" => a.base = v.parse().expect("--base N"),
            "--flushes" => a.flushes = v.parse().expect("--flushes N"),
            "--adds" => a.adds = v.parse().expect("--adds N"),
            "--deletes" => a.deletes = v.parse().expect("--deletes N"),
            "--bulk" => a.bulk = v.parse().expect("--bulk FRACTION"),
            "--batch" => a.batch = v.parse().expect("--batch N"),
            "--batch-step" => a.batch_step = v.parse().expect("--batch-step N"),
            "--queries" => a.queries = v.parse().expect("--queries N"),
            "--readers" => a.readers = v.parse().expect("--readers N"),
            "--dir" => a.dir = Some(PathBuf::from(v)),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

fn dataset(a: &Args) -> (Vectors, Vectors, &'static str) {
    let before_bulk = a.base + a.flushes * a.adds + a.batch;
    let need = before_bulk + (a.bulk * before_bulk as f64) as usize;
    if let Some(dir) = pypi_minilm() {
        let base = read_fvecs(&dir.join("pypi-minilm_base.fvecs")).expect("base");
        let q = read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries");
        if base.len() >= need {
            return (base, q, "pypi-minilm (384-d, cosine)");
        }
    }
    let all = synthetic(need + a.queries, 384, 7);
    let split = need * all.dims;
    let q = Vectors {
        dims: all.dims,
        data: all.data[split..].to_vec(),
    };
    let base = Vectors {
        dims: all.dims,
        data: all.data[..split].to_vec(),
    };
    (base, q, "synthetic clustered (384-d, cosine)")
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).expect("write");
    fs::rename(&tmp, path).expect("rename");
}

/// The writer's phase: (kind, counter). Kinds: build, idle, busy, batch, compact, paused,
/// bulk, done.
fn phase(dir: &Path) -> (String, u64) {
    let t = fs::read_to_string(dir.join("phase")).unwrap_or_default();
    let mut p = t.split_whitespace();
    let kind = p.next().unwrap_or("build").to_string();
    let c = p.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (kind, c)
}

fn wait_acks(dir: &Path, readers: usize, c: u64) {
    let t = Instant::now();
    loop {
        let done = (0..readers).all(|r| {
            fs::read_to_string(dir.join(format!("ack-{r}")))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|a| a >= c)
        });
        if done {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(3600), "readers stalled");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn writer(a: &Args, dir: &Path) {
    let (base, _, _) = dataset(a);
    let ix = Index::open(dir.join("ix.chassis")).expect("open writer");
    let mut c = 0u64;
    let set = |kind: &str, c: &mut u64| {
        *c += 1;
        write_atomic(&dir.join("phase"), &format!("{kind} {c}"));
        *c
    };
    let t = Instant::now();
    for i in 0..a.base {
        ix.add(base.row(i)).expect("add");
    }
    ix.flush().expect("flush");
    eprintln!(
        "writer: base of {} built in {:.1} s",
        a.base,
        t.elapsed().as_secs_f64()
    );
    let mut next = a.base;
    let mut live: Vec<u64> = (0..a.base as u64).collect();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for f in 0..a.flushes {
        let id = set("idle", &mut c);
        wait_acks(dir, a.readers, id);
        set("busy", &mut c);
        for _ in 0..a.adds {
            live.push(ix.add(base.row(next)).expect("add"));
            next += 1;
        }
        for _ in 0..a.deletes {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let victim = live.swap_remove((rng % live.len() as u64) as usize);
            ix.delete(victim).expect("delete");
        }
        ix.flush().expect("flush");
        eprintln!("writer: flush {} of {}", f + 1, a.flushes);
    }
    // A parallel batch add, paused unflushed, then flushed.
    let id = set("idle", &mut c);
    wait_acks(dir, a.readers, id);
    // In calls of `--batch-step` (as the bulk load pauses every fifth): a reference taken
    // only after 20,000 routed adds gains from routing through them all, which a concurrent
    // search early in the batch can't have yet (the ADR's note on judging against pauses).
    let mut left = a.batch;
    while left > 0 {
        let n = left.min(a.batch_step);
        left -= n;
        set("batch", &mut c);
        let rows = base.data[next * base.dims..(next + n) * base.dims].to_vec();
        let t = Instant::now();
        live.extend(ix.add_batch(&rows, 2).expect("batch"));
        next += n;
        let id = set("paused", &mut c);
        eprintln!(
            "writer: parallel batch of {n} in {:.1} s (unflushed), paused",
            t.elapsed().as_secs_f64()
        );
        wait_acks(dir, a.readers, id);
    }
    ix.flush().expect("flush");
    // A compaction while the readers search.
    let id = set("idle", &mut c);
    wait_acks(dir, a.readers, id);
    set("compact", &mut c);
    let t = Instant::now();
    ix.compact(CompactOptions::default()).expect("compact");
    eprintln!("writer: compacted in {:.1} s", t.elapsed().as_secs_f64());
    let id = set("idle", &mut c);
    wait_acks(dir, a.readers, id);
    // A bulk load of N new vectors, never flushed.
    let bulk = ((a.bulk * ix.len() as f64) as usize).min(base.len() - next);
    write_atomic(&dir.join("bulk"), &format!("{bulk} {}", ix.len()));
    for chunk in 0..5 {
        set("bulk", &mut c);
        for _ in 0..bulk / 5 {
            ix.add(base.row(next)).expect("add");
            next += 1;
        }
        let id = set("paused", &mut c);
        eprintln!("writer: bulk chunk {} of 5 (unflushed), paused", chunk + 1);
        wait_acks(dir, a.readers, id);
    }
    set("done", &mut c);
    // Dropped without flushing: the bulk load never commits.
}

/// One pass: every query at every ef on one snapshot. Returns ids per (ef, query).
fn pass(r: &IndexReader, snap: &chassis::Snapshot, q: &Vectors, errors: &mut u64) -> Vec<Vec<u64>> {
    let mut out = Vec::with_capacity(EFS.len() * q.len());
    for &ef in &EFS {
        for i in 0..q.len() {
            match r.search_in(snap, q.row(i), K, ef) {
                Ok(h) => out.push(h.iter().map(|h| h.id).collect()),
                Err(_) => {
                    *errors += 1;
                    out.push(Vec::new());
                }
            }
        }
    }
    out
}

/// A concurrent pass: phase kind, phase counter, (file generation, snapshot sequence), routed,
/// results.
type Pass = (String, u64, (u64, u64), bool, Vec<Vec<u64>>);

struct Reference {
    truth: Vec<Vec<u64>>,
    live: HashSet<u64>,
    results: Vec<Vec<u64>>,
}

fn recall(got: &[u64], truth: &[u64]) -> f64 {
    got.iter().filter(|g| truth.contains(g)).count() as f64 / truth.len().max(1) as f64
}

fn reader(a: &Args, dir: &Path, me: usize) {
    let (base, queries, _) = dataset(a);
    let q = Vectors {
        dims: queries.dims,
        data: queries.data[..a.queries * queries.dims].to_vec(),
    };
    let r = IndexReader::open(dir.join("ix.chassis")).expect("open reader");
    let mut errors = 0u64;
    let mut wrong = 0u64;
    let mut went_back = 0u64;
    let mut searches = 0u64;
    let mut last_seq = (0, 0);
    let mut concurrent: Vec<Pass> = Vec::new();
    // Reference passes by key: idle ones by (file generation, snapshot sequence), paused ones
    // by their phase counter.
    let mut idle: HashMap<(u64, u64), Reference> = HashMap::new();
    let mut paused: HashMap<u64, Reference> = HashMap::new();
    let mut acked = 0;
    let mut routed = true;
    loop {
        let (kind, c) = phase(dir);
        if kind == "done" {
            break;
        }
        let snap = r.snapshot().expect("snapshot");
        // Sequences are per file: a compaction's new file starts its own.
        let at = (snap.file_generation(), snap.sequence());
        if at < last_seq {
            went_back += 1;
        }
        last_seq = at;
        if (kind == "idle" || kind == "paused") && c > acked {
            // The reference: exact top 10 over the snapshot's live vectors, and the searches.
            r.set_routing(true);
            let live: Vec<u64> = r.ids_in(&snap).expect("ids");
            let truth: Vec<Vec<u64>> = (0..q.len())
                .map(|i| {
                    let mut d: Vec<(f32, u64)> = live
                        .iter()
                        .map(|&id| (1.0 - dot(q.row(i), base.row(id as usize)), id))
                        .collect();
                    d.select_nth_unstable_by(K, |a, b| a.0.total_cmp(&b.0));
                    d.truncate(K);
                    d.into_iter().map(|(_, id)| id).collect()
                })
                .collect();
            let results = pass(&r, &snap, &q, &mut errors);
            searches += results.len() as u64;
            let reference = Reference {
                truth,
                live: live.into_iter().collect(),
                results,
            };
            if kind == "idle" {
                idle.insert((snap.file_generation(), snap.sequence()), reference);
            } else {
                paused.insert(c, reference);
            }
            acked = c;
            write_atomic(&dir.join(format!("ack-{me}")), &c.to_string());
            continue;
        }
        if matches!(kind.as_str(), "busy" | "batch" | "compact" | "bulk") {
            r.set_routing(routed);
            let results = pass(&r, &snap, &q, &mut errors);
            searches += results.len() as u64;
            let key = (snap.file_generation(), snap.sequence());
            concurrent.push((kind, c, key, routed, results));
            routed = !routed;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Pair every concurrent query with its reference on the same snapshot.
    let mut lines = String::new();
    for (kind, c, key, routed, results) in &concurrent {
        let (reference, phase) = match kind.as_str() {
            "busy" => (idle.get(key), "flushes"),
            "compact" => (idle.get(key), "compaction"),
            "batch" => (paused.get(&(c + 1)), "parallel-batch"),
            _ => (paused.get(&(c + 1)), "bulk"),
        };
        let Some(reference) = reference else { continue };
        for (e, &ef) in EFS.iter().enumerate() {
            for i in 0..q.len() {
                let at = e * q.len() + i;
                let got = &results[at];
                wrong += got.iter().filter(|id| !reference.live.contains(id)).count() as u64;
                let idle_recall = recall(&reference.results[at], &reference.truth[i]);
                let conc_recall = recall(got, &reference.truth[i]);
                lines.push_str(&format!(
                    "{phase} {ef} {} {}\n",
                    u8::from(*routed),
                    100.0 * (idle_recall - conc_recall)
                ));
            }
        }
    }
    fs::write(dir.join(format!("pairs-{me}")), lines).expect("pairs");
    write_atomic(
        &dir.join(format!("result-{me}")),
        &format!("{searches} {errors} {wrong} {went_back}"),
    );
}

fn main() {
    let a = parse_args();
    if let Ok(role) = std::env::var("CHASSIS_BENCH_ROLE") {
        let dir = PathBuf::from(std::env::var("CHASSIS_BENCH_DIR").expect("dir"));
        match role.as_str() {
            "writer" => writer(&a, &dir),
            r => reader(&a, &dir, r.parse().expect("reader number")),
        }
        return;
    }
    let tmp = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("chassis-readers-{}", std::process::id()))
    });
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).expect("dir");
    let (_, _, name) = dataset(&a);
    drop(Index::create(tmp.join("ix.chassis"), Options::new(384, Metric::Cosine)).expect("create"));
    let exe = std::env::current_exe().expect("exe");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let spawn = |role: String| {
        Command::new(&exe)
            .args(&argv)
            .env("CHASSIS_BENCH_ROLE", role)
            .env("CHASSIS_BENCH_DIR", &tmp)
            .spawn()
            .expect("spawn")
    };
    let t = Instant::now();
    let mut kids: Vec<_> = (0..a.readers).map(|r| spawn(r.to_string())).collect();
    kids.push(spawn("writer".into()));
    let mut failed = 0;
    for mut k in kids {
        if !k.wait().map(|s| s.success()).unwrap_or(false) {
            failed += 1;
        }
    }
    let (mut searches, mut errors, mut wrong, mut back) = (0u64, 0u64, 0u64, 0u64);
    let mut pairs: BTreeMap<(String, usize, u8), Vec<f64>> = BTreeMap::new();
    for r in 0..a.readers {
        let res = fs::read_to_string(tmp.join(format!("result-{r}"))).unwrap_or_default();
        let v: Vec<u64> = res
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        if v.len() == 4 {
            searches += v[0];
            errors += v[1];
            wrong += v[2];
            back += v[3];
        } else {
            failed += 1;
        }
        for line in fs::read_to_string(tmp.join(format!("pairs-{r}")))
            .unwrap_or_default()
            .lines()
        {
            let p: Vec<&str> = line.split(' ').collect();
            pairs
                .entry((
                    p[0].to_string(),
                    p[1].parse().unwrap(),
                    p[2].parse().unwrap(),
                ))
                .or_default()
                .push(p[3].parse().unwrap());
        }
    }
    let bulk: (usize, usize) = fs::read_to_string(tmp.join("bulk"))
        .ok()
        .and_then(|t| {
            let v: Vec<usize> = t
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 2).then(|| (v[0], v[1]))
        })
        .unwrap_or((0, 0));
    println!("# readers experiment (ADR-0008 experiment 3)");
    println!();
    println!(
        "data: {name}; base {}, {} flushes of {} adds and {} deletes, parallel batch adds of {} in calls of {} on 2 threads (flushed), a compaction, then an unflushed bulk load of {} onto N = {} ({}% of N) in 5 chunks; {} reader processes, {} queries x ef {:?}, k = {K}; M = 16, ef_construction = 200",
        a.base,
        a.flushes,
        a.adds,
        a.deletes,
        a.batch,
        a.batch_step,
        bulk.0,
        bulk.1,
        100 * bulk.0 / bulk.1.max(1),
        a.readers,
        a.queries,
        EFS
    );
    println!(
        "searches: {searches}; reader errors: {errors}; ids not live in their snapshot: {wrong}; snapshots that went back: {back}; failed processes: {failed}; wall {:.0} s",
        t.elapsed().as_secs_f64()
    );
    println!();
    println!("| phase | routing | ef | pairs | mean loss (points) [95% CI] | share losing >= 0.5 | pass |");
    println!("|---|---|---|---|---|---|---|");
    let mut pass_all = errors == 0 && wrong == 0 && back == 0 && failed == 0;
    for ((phase, ef, routed), xs) in &pairs {
        let (m, lo, hi) = bootstrap_mean(xs, 1000, 42);
        let share = xs.iter().filter(|&&x| x >= 50.0).count() as f64 / xs.len() as f64;
        let ok = m <= 1.0 && share <= 0.01;
        if *routed == 1 {
            pass_all &= ok;
        }
        println!(
            "| {phase} | {} | {ef} | {} | {m:.2} [{lo:.2}, {hi:.2}] | {:.2}% | {} |",
            if *routed == 1 { "on" } else { "off (control)" },
            xs.len(),
            100.0 * share,
            if *routed == 1 {
                if ok {
                    "yes"
                } else {
                    "NO"
                }
            } else {
                "-"
            }
        );
    }
    println!();
    println!("overall: {}", if pass_all { "PASS" } else { "FAIL" });
    let _ = fs::remove_dir_all(&tmp);
}
