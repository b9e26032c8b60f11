//! Collections against one file (docs/SCALING.md; issue goal: on pypi-minilm with S in
//! {2, 4, 8} shards, merged recall@10 at each ef >= the single file's recall - 0.005).
//!
//! Builds one file and collections of S shards from the same 100,000 rows (same M and
//! ef_construction; the single file links on 2 threads, a collection's shards each on one
//! thread, all shards at once), then for each ef: recall@10 of the 1,000 held-out queries
//! against the exact ground truth, and QPS on one search thread (a collection searches its
//! shards one after another on that thread: total work, not latency), the one file's and the
//! collection's measured alternately, three passes each, medians. Also: the per-shard ef
//! at which each collection first matches the single file's recall at each ef, and the
//! latency with the shards searched in parallel (p50 over the queries).
//!
//! `cargo run --release --bin collection [-- --shards 2,4,8 --m 16 --efc 200]`

use std::time::Instant;

use chassis::{Collection, Index, Metric, Neighbor, Options};
use chassis_bench::{pypi_minilm, read_fvecs, read_ivecs};

const K: usize = 10;
const EFS: [usize; 9] = [10, 16, 24, 32, 48, 64, 96, 128, 192];

fn recall(hits: &[Vec<Neighbor>], truth: &[Vec<i32>]) -> f64 {
    let mut found = 0;
    for (h, t) in hits.iter().zip(truth) {
        let want: Vec<u64> = t.iter().take(K).map(|&i| i as u64).collect();
        found += h.iter().filter(|n| want.contains(&n.id)).count();
    }
    found as f64 / (K * hits.len()) as f64
}

fn main() {
    let mut shards = vec![2usize, 4, 8];
    let (mut m, mut efc) = (16usize, 200usize);
    let v: Vec<String> = std::env::args().skip(1).collect();
    for w in v.chunks(2) {
        match (w[0].as_str(), w.get(1)) {
            ("--shards", Some(s)) => shards = s.split(',').map(|x| x.parse().expect("n")).collect(),
            ("--m", Some(s)) => m = s.parse().expect("n"),
            ("--efc", Some(s)) => efc = s.parse().expect("n"),
            _ => panic!("usage: collection [--shards 2,4,8] [--m 16] [--efc 200]"),
        }
    }
    let dir = pypi_minilm().expect("needs ../shared/data/pypi-minilm");
    let base = read_fvecs(&dir.join("pypi-minilm_base.fvecs")).expect("base");
    let queries = read_fvecs(&dir.join("pypi-minilm_query.fvecs")).expect("queries");
    let truth = read_ivecs(&dir.join("pypi-minilm_groundtruth.ivecs"));
    let d = base.dims;
    let nq = queries.data.len() / d;
    let work = std::env::temp_dir().join(format!("chassis-collection-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("dir");
    let opts = Options::new(d, Metric::Cosine).m(m).ef_construction(efc);
    println!(
        "collections vs one file: pypi-minilm, {} rows x {d}, {nq} queries, M = {m}, ef_construction = {efc}",
        base.data.len() / d
    );

    let t = Instant::now();
    let single = Index::create(work.join("single.chassis"), opts.clone()).expect("create");
    single.add_batch(&base.data, 2).expect("add");
    single.flush().expect("flush");
    println!(
        "single file built in {:.0} s (2 threads)",
        t.elapsed().as_secs_f64()
    );
    let q = |i: usize| &queries.data[i * d..(i + 1) * d];
    let run_single = |ef: usize| -> (Vec<Vec<Neighbor>>, f64) {
        for i in 0..nq.min(100) {
            single.search(q(i), K, ef).expect("search");
        }
        let t = Instant::now();
        let hits: Vec<_> = (0..nq)
            .map(|i| single.search(q(i), K, ef).expect("search"))
            .collect();
        (hits, nq as f64 / t.elapsed().as_secs_f64())
    };
    let single_rows: Vec<(usize, f64)> = EFS
        .iter()
        .map(|&ef| (ef, recall(&run_single(ef).0, &truth)))
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };

    let mut all_pass = true;
    for &s in &shards {
        let path = work.join(format!("c{s}"));
        let t = Instant::now();
        let c = Collection::create(&path, opts.clone(), s).expect("create");
        c.add(None, &base.data, None).expect("add");
        c.flush().expect("flush");
        println!(
            "\nS = {s}: built in {:.0} s ({s} shards at once, one thread each)",
            t.elapsed().as_secs_f64()
        );
        println!(
            "{:>5} {:>10} {:>10} {:>8} {:>10} {:>10} {:>12}",
            "ef", "recall1", "recallS", "diff", "QPS 1", "QPS S", "p50 par ms"
        );
        let mut recalls = Vec::new();
        for &(ef, r1) in &single_rows {
            let run = || {
                for i in 0..nq.min(100) {
                    c.search(q(i), K, ef, None, 1).expect("search");
                }
                let t = Instant::now();
                let hits: Vec<_> = (0..nq)
                    .map(|i| c.search(q(i), K, ef, None, 1).expect("search"))
                    .collect();
                (hits, nq as f64 / t.elapsed().as_secs_f64())
            };
            let (mut q1, mut qs, mut hits) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..3 {
                q1.push(run_single(ef).1);
                let (h, x) = run();
                qs.push(x);
                hits = h;
            }
            let (qps1, qps) = (median(q1), median(qs));
            let mut lat: Vec<f64> = (0..nq.min(300))
                .map(|i| {
                    let t = Instant::now();
                    c.search(q(i), K, ef, None, 0).expect("search");
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            lat.sort_by(|a, b| a.total_cmp(b));
            let rs = recall(&hits, &truth);
            let pass = rs >= r1 - 0.005;
            all_pass &= pass;
            recalls.push((ef, rs));
            println!(
                "{ef:>5} {r1:>10.4} {rs:>10.4} {:>+8.4} {qps1:>10.0} {qps:>10.0} {:>12.3}{}",
                rs - r1,
                lat[lat.len() / 2],
                if pass { "" } else { "  MISS" }
            );
        }
        let matches: Vec<String> = single_rows
            .iter()
            .map(|&(ef, r1)| {
                let at = recalls.iter().find(|&&(_, r)| r >= r1).map(|&(e, _)| e);
                format!("{ef}->{}", at.map_or("-".into(), |e| e.to_string()))
            })
            .collect();
        println!(
            "per-shard ef matching the single file's recall at its ef: {}",
            matches.join(" ")
        );
        c.close().expect("close");
    }
    println!(
        "\ngoal: merged recall@10 >= single - 0.005 at every ef, S in {shards:?}: {}",
        if all_pass { "PASS" } else { "MISS" }
    );
    std::fs::remove_dir_all(&work).ok();
}
