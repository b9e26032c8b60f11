//! Filtered search on pypi-minilm's attributes and filtered queries, Chassis alone (the peers
//! are in `bench/ann`'s filtered mode): recall@10 and QPS per filter kind, how each query was
//! answered (scan, graph, graph then scan), and the time to build the filter index. Also the
//! filter-index build at 1,000,000 vectors with three indexed fields (synthetic, 4-d vectors).
//! `--codes` builds (and searches) the file with int8 codes (`--codes int4`: int4 codes):
//! filtered searches walk by the codes and rank exactly (int8 scans score codes too; int4 scans
//! read vectors).
//!
//! `--kind` searches one kind only; `--reuse` keeps the file a previous run built; `--scan-test`
//! times `graph::scan` alone over every n-th slot and over random 1% to 10% of the slots.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin filtered -- [--ef 64] [--reps 3] [--codes [int8|int4]] [--kind KIND] [--reuse]
//! cargo run --release --manifest-path bench/Cargo.toml --bin filtered -- --reuse --scan-test
//! cargo run --release --manifest-path bench/Cargo.toml --bin filtered -- --index-build 1000000
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use chassis::filter::search::Strategy;
use chassis::format::metadata::{parse_json, Metadata, Value};
use chassis::{CodeKind, Filter, Index, IndexReader, Metric, Options};
use chassis_bench::{median, pypi_minilm, read_fvecs, read_ivecs};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Per kind: recall sum, queries, seconds per counted pass, how queries were answered.
type PerKind = (f64, usize, Vec<f64>, BTreeMap<String, usize>);

fn index_build(n: usize) {
    let dir = std::env::temp_dir().join("chassis-filtered-bench");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("build-{n}.chassis"));
    if !path.exists() {
        let t = Instant::now();
        let ix = Index::create(
            &path,
            Options::new(4, Metric::L2Squared).m(4).ef_construction(8),
        )
        .expect("create");
        let mut s = 1u64;
        for start in (0..n).step_by(100_000) {
            let rows = 100_000.min(n - start);
            let mut flat = Vec::with_capacity(rows * 4);
            let mut docs = Vec::with_capacity(rows);
            for i in start..start + rows {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                flat.extend([
                    (s % 1000) as f32,
                    (s >> 20) as f32 % 77.0,
                    1.0,
                    i as f32 * 1e-6,
                ]);
                let mut m = Metadata::new();
                m.insert("bucket".into(), Value::Int((s % 1000) as i64));
                m.insert("chars".into(), Value::Int(12 + (s >> 10) as i64 % 150));
                m.insert(
                    "tags".into(),
                    Value::List(
                        (0..(s % 6))
                            .map(|j| Value::Str(format!("tag{}", (s >> (j * 5)) % 2000)))
                            .collect(),
                    ),
                );
                docs.push(m);
            }
            ix.add_batch_with_metadata(None, &flat, &docs, 0)
                .expect("add");
        }
        ix.flush().expect("flush");
        eprintln!(
            "built {n} vectors with metadata in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let f =
        Filter::parse(r#"{"bucket": 5, "chars": {"$gt": 40}, "tags": "tag7"}"#).expect("filter");
    let mut times = Vec::new();
    for rep in 0..6 {
        let reader = IndexReader::open(&path).expect("open");

        let t = Instant::now();
        let hits = reader
            .search_filtered(&[1.0, 2.0, 3.0, 4.0], 10, 64, &f)
            .expect("search");
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            times.push(dt);
        }
        eprintln!(
            "  first filtered search of a fresh reader: {:.3} s ({} hits)",
            dt,
            hits.len()
        );
    }
    let (lo, hi) = times
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
    println!(
        "filter index build, {n} vectors, 3 fields (bucket, chars, tags), page cache warm, \
         {} threads: median {:.3} s of {} fresh readers ({lo:.3} to {hi:.3}; goal < 1 s)",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        median(times.clone()),
        times.len()
    );
}

fn main() {
    if flag("--index-build") {
        index_build(arg("--index-build", 1_000_000));
        return;
    }
    let ef = arg("--ef", 64);

    let reps = arg("--reps", 3);
    let Some(dir) = pypi_minilm() else {
        eprintln!("pypi-minilm is not in ../shared/data; nothing to measure");
        return;
    };
    let base = read_fvecs(&dir.join("pypi-minilm_base.fvecs")).expect("base");
    let queries = read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries");
    let attrs: Vec<Metadata> = std::fs::read_to_string(dir.join("pypi-minilm_attrs.jsonl"))
        .expect("attrs")
        .lines()
        .map(|l| parse_json(l).expect("attrs line"))
        .collect();
    let fq: Vec<(String, String)> =
        std::fs::read_to_string(dir.join("pypi-minilm_filtered_queries.jsonl"))
            .expect("filtered queries")
            .lines()
            .map(|l| {
                let kind = l
                    .split("\"kind\": \"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .expect("kind");
                let f = l.split("\"filter\": ").nth(1).expect("filter");
                let f = &f[..f.rfind(", \"matches\"").expect("matches")];
                (kind.to_string(), f.to_string())
            })
            .collect();
    let truth = read_ivecs(&dir.join("pypi-minilm_filtered_groundtruth.ivecs"));
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/filtered");
    std::fs::create_dir_all(&out).expect("out dir");
    // `--codes` alone means int8; `--codes int4` names the kind.
    let codes = if flag("--codes") {
        let args: Vec<String> = std::env::args().collect();
        args.iter()
            .position(|a| a == "--codes")
            .and_then(|i| args.get(i + 1))
            .and_then(|k| CodeKind::parse(k))
            .unwrap_or(CodeKind::Int8)
    } else {
        CodeKind::None
    };
    let path = out.join(format!("pypi-minilm-attrs-{}.chassis", codes.name()));
    if !path.exists() || !flag("--reuse") {
        let _ = std::fs::remove_file(&path);
        let t = Instant::now();
        let opts = Options::new(base.dims, Metric::Cosine).codes(codes);
        let ix = Index::create(&path, opts).expect("create");
        ix.add_batch_with_metadata(None, &base.data, &attrs, 0)
            .expect("add");
        ix.flush().expect("flush");
        eprintln!("built in {:.1} s", t.elapsed().as_secs_f64());
    }
    let reader = IndexReader::open(&path).expect("open");
    if flag("--scan-test") {
        let queries = read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries");
        let snap = reader.snapshot().expect("snapshot");
        let g = reader.graph(&snap);
        let dist = chassis::graph::Distance::new(Metric::Cosine);
        let mut scratch = chassis::graph::Scratch::default();
        let q = chassis::graph::AlignedVector::new(queries.row(0));
        for step in [1u32, 2, 10, 100] {
            let mut times = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                for qi in 0..5 {
                    let q = chassis::graph::AlignedVector::new(queries.row(qi));
                    let _ = chassis::graph::scan(
                        &g,
                        &dist,
                        &q,
                        (0..100_000u32).step_by(step as usize),
                        10,
                        &mut scratch,
                    );
                }
                times.push(t.elapsed().as_secs_f64() / 5.0);
            }
            let n = 100_000 / step;
            let m = median(times);
            println!(
                "scan every {step}th slot: {n} vectors in {:.3} ms: {:.0} ns per vector",
                m * 1e3,
                m * 1e9 / n as f64
            );
        }
        for pct in [10u64, 3, 1] {
            let slots: Vec<u32> = (0..100_000u32)
                .filter(|&s| (u64::from(s).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 100 < pct)
                .collect();
            let mut times = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                for qi in 0..5 {
                    let q = chassis::graph::AlignedVector::new(queries.row(qi));
                    let _ = chassis::graph::scan(
                        &g,
                        &dist,
                        &q,
                        slots.iter().copied(),
                        10,
                        &mut scratch,
                    );
                }
                times.push(t.elapsed().as_secs_f64() / 5.0);
            }
            let m = median(times);
            println!(
                "scan a random {pct}%: {} vectors in {:.3} ms: {:.0} ns per vector",
                slots.len(),
                m * 1e3,
                m * 1e9 / slots.len() as f64
            );
        }
        let _ = q;
        return;
    }
    let filters: Vec<Filter> = fq
        .iter()
        .map(|(_, f)| Filter::parse(f).expect("filter"))
        .collect();
    let t = Instant::now();
    let snap = reader.snapshot().expect("snapshot");
    for f in &filters {
        reader
            .search_in_filtered(&snap, queries.row(0), 10, ef, f)
            .expect("warm");
    }
    eprintln!(
        "filter index built and every filter run once in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    // kind -> (recall sum, queries, seconds per rep, strategies)
    // kind -> (recall sum, queries, seconds per pass, strategies)
    let mut per: BTreeMap<String, PerKind> = BTreeMap::new();
    for rep in 0..=reps {
        let mut times: BTreeMap<String, f64> = BTreeMap::new();
        let only = std::env::args().skip_while(|a| a != "--kind").nth(1);
        for (j, f) in filters.iter().enumerate() {
            let kind = &fq[j].0;
            if only.as_ref().is_some_and(|o| o != kind) {
                continue;
            }
            let t = Instant::now();
            let (hits, strategy) = reader
                .search_in_filtered(&snap, queries.row(j), 10, ef, f)
                .expect("search");
            *times.entry(kind.clone()).or_default() += t.elapsed().as_secs_f64();

            if rep == 0 {
                let want: Vec<i64> = truth[j]
                    .iter()
                    .take(10)
                    .filter(|&&x| x >= 0)
                    .map(|&x| i64::from(x))
                    .collect();
                let found = hits
                    .iter()
                    .filter(|h| want.contains(&(h.id as i64)))
                    .count();
                let e = per.entry(kind.clone()).or_default();
                e.0 += if want.is_empty() {
                    1.0
                } else {
                    found as f64 / want.len() as f64
                };
                e.1 += 1;
                *e.3.entry(format!("{strategy:?}")).or_default() += 1;
                let _ = Strategy::Scan;
            }
        }
        if rep > 0 {
            for (k, s) in times {
                per.entry(k).or_default().2.push(s);
            }
        }
    }
    println!("pypi-minilm filtered queries, ef {ef}, one thread, median of {reps} passes");
    println!(
        "{:<14} {:>8} {:>10} {:>10}  strategies",
        "kind", "recall", "QPS", "ms/query"
    );
    let (mut all_secs, mut all_q, mut all_recall) = (0.0, 0usize, 0.0);
    for (k, (r, n, secs, strat)) in &per {
        let s = median(secs.clone());
        all_secs += s;
        all_q += n;
        all_recall += r;
        println!(
            "{:<14} {:>8.3} {:>10.0} {:>10.3}  {:?}",
            k,
            r / *n as f64,
            *n as f64 / s,
            1000.0 * s / *n as f64,
            strat
        );
    }
    println!(
        "{:<14} {:>8.3} {:>10.0} {:>10.3}",
        "overall",
        all_recall / all_q as f64,
        all_q as f64 / all_secs,
        1000.0 * all_secs / all_q as f64
    );
}
