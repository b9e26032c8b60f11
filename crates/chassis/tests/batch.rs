//! Batch adds: checked before anything is added, one thread reproducing the loop of single
//! adds exactly, several threads building a graph as good as one thread's while readers keep
//! searching.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chassis::graph::{GraphStore, EMPTY};
use chassis::os::MemStorage;
use chassis::{Error, Index, IndexReader, Metric, Options};
use common::{brute_force, clustered};

fn flat(rows: &[Vec<f32>]) -> Vec<f32> {
    rows.iter().flatten().copied().collect()
}

fn recall(index: &Index, base: &[Vec<f32>], queries: &[Vec<f32>], metric: Metric) -> f64 {
    let mut hit = 0;
    for q in queries {
        let truth = brute_force(base, q, 10, metric);
        let got = index.search(q, 10, 64).unwrap();
        hit += got
            .iter()
            .filter(|h| truth.contains(&(h.id as usize)))
            .count();
    }
    hit as f64 / (10 * queries.len()) as f64
}

/// Fails if a batch skips the checks: a bad row or id anywhere fails the whole batch, and
/// nothing of it is added.
#[test]
fn a_bad_row_or_id_adds_nothing() {
    let dims = 8;
    let data = clustered(200, dims, 4, 1);
    let index = Index::in_memory(Options::new(dims, Metric::L2Squared), 1 << 26).unwrap();
    index.add_batch(&flat(&data[..50]), 2).unwrap();
    assert_eq!(index.len(), 50);

    let mut bad = flat(&data[50..100]);
    let last = bad.len() - 1;
    bad[last] = f32::NAN;
    for threads in [1, 2] {
        assert!(matches!(
            index.add_batch(&bad, threads),
            Err(Error::InvalidVector { .. })
        ));
        assert!(matches!(
            index.add_batch(&bad[..bad.len() - 3], threads),
            Err(Error::InvalidArgument(_))
        ));
        let ids: Vec<u64> = (1000..1050).collect();
        let mut repeated = ids.clone();
        repeated[49] = 1000;
        let good = flat(&data[50..100]);
        assert!(matches!(
            index.add_batch_with_ids(&repeated, &good, threads),
            Err(Error::DuplicateId { id: 1000 })
        ));
        let mut live = ids.clone();
        live[30] = 7;
        assert!(matches!(
            index.add_batch_with_ids(&live, &good, threads),
            Err(Error::DuplicateId { id: 7 })
        ));
        assert!(matches!(
            index.add_batch_with_ids(&ids[..49], &good, threads),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(index.len(), 50, "nothing of a failed batch is added");
        assert!(!index.contains(1000).unwrap());
    }

    // Custom ids through a parallel batch: stored, found, and kept across a reopen.
    let mem = MemStorage::new(1 << 26).unwrap();
    let index = Index::create_in(
        Arc::new(mem.reopen(true)),
        Options::new(dims, Metric::L2Squared),
    )
    .unwrap();
    let ids: Vec<u64> = (0..200u64).map(|i| i * 1_000_003 + 17).collect();
    index.add_batch_with_ids(&ids, &flat(&data), 2).unwrap();
    index.flush().unwrap();
    drop(index);
    let index = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    assert_eq!(index.len(), 200);
    for (id, v) in ids.iter().zip(&data) {
        assert_eq!(&index.get(*id).unwrap(), v);
        assert_eq!(index.search(v, 1, 32).unwrap()[0].id, *id);
    }
}

/// Fails if a one-thread batch takes a different path from single adds: the graphs, and so
/// every search result, are identical.
#[test]
fn a_one_thread_batch_is_the_loop_of_single_adds() {
    let dims = 16;
    let data = clustered(3_000, dims, 20, 2);
    let opts = Options::new(dims, Metric::Cosine).ef_construction(64);
    let single = Index::in_memory(opts.clone(), 1 << 28).unwrap();
    for v in &data {
        single.add(v).unwrap();
    }
    let batch = Index::in_memory(opts, 1 << 28).unwrap();
    let ids = batch.add_batch(&flat(&data), 1).unwrap();
    assert_eq!(ids, (0..3_000).collect::<Vec<u64>>());
    for q in data.iter().step_by(37) {
        let a = single.search(q, 10, 32).unwrap();
        let b = batch.search(q, 10, 32).unwrap();
        assert_eq!(a, b);
    }
}

/// Fails if parallel insertion loses or corrupts edges (no per-node locks, the new node's
/// list written over a concurrent link) or the entry point: recall matches a one-thread
/// build, every list holds distinct in-range slots, every node is reachable.
#[test]
fn a_parallel_batch_builds_as_good_a_graph() {
    let (n, dims, queries) = (20_000, 32, 200);
    let data = clustered(n + queries, dims, 50, 7);
    let (base, qs) = data.split_at(n);
    let metric = Metric::L2Squared;
    let opts = Options::new(dims, metric).ef_construction(100);

    let serial = Index::in_memory(opts.clone(), 1 << 30).unwrap();
    serial.add_batch(&flat(base), 1).unwrap();
    let serial_recall = recall(&serial, base, qs, metric);
    serial.flush().unwrap();
    // Pruning leaves a few nodes with no edge toward them in any HNSW build (hnswlib's too).
    let serial_unreachable = serial.check(0).unwrap().unreachable;
    drop(serial);

    let mem = MemStorage::new(1 << 30).unwrap();
    let index = Index::create_in(Arc::new(mem.reopen(true)), opts).unwrap();
    // In pieces, so later batches link into a graph earlier ones built.
    let mut ids = Vec::new();
    for piece in base.chunks(6_000) {
        ids.extend(index.add_batch(&flat(piece), 4).unwrap());
    }
    assert_eq!(ids, (0..n as u64).collect::<Vec<u64>>());
    index.flush().unwrap();
    let parallel_recall = recall(&index, base, qs, metric);
    assert!(parallel_recall >= 0.95, "recall@10 = {parallel_recall}");
    assert!(
        parallel_recall >= serial_recall - 0.01,
        "parallel {parallel_recall} vs one thread {serial_recall}"
    );
    let report = index.check(0).unwrap();
    assert!(
        report.unreachable <= serial_unreachable + 5,
        "{} unreachable, {serial_unreachable} after one thread",
        report.unreachable
    );
    let other: Vec<&String> = report
        .problems
        .iter()
        .filter(|p| !p.contains("unreachable"))
        .collect();
    assert!(other.is_empty(), "{other:?}");

    let reader = IndexReader::open_in(Arc::new(mem.reopen(false))).unwrap();
    let snap = reader.snapshot().unwrap();
    let graph = reader.graph(&snap);
    assert_eq!(graph.routing_count(), n as u32);
    let mut edges = 0;
    for slot in 0..n as u32 {
        let mut lists = vec![graph.level0(slot).unwrap()];
        lists.extend((1..16).map_while(|l| graph.upper(slot, l)));
        for list in lists {
            let words: Vec<u32> = list
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .filter(|&w| w != EMPTY)
                .collect();
            let distinct: HashSet<u32> = words.iter().copied().collect();
            assert_eq!(
                distinct.len(),
                words.len(),
                "slot {slot} lists an edge twice"
            );
            assert!(words.iter().all(|&w| w < n as u32 && w != slot));
            edges += words.len();
        }
    }
    assert!(edges > n * 12, "{edges} edges");
}

/// Fails if a parallel batch publishes R before its nodes are linked or readers see unflushed
/// slots: a reader searching throughout gets only committed ids and keeps finding committed
/// vectors, then sees the whole batch after the flush.
#[test]
fn readers_search_throughout_a_parallel_batch() {
    let dims = 16;
    let data = clustered(22_000, dims, 40, 3);
    let (old, new) = data.split_at(2_000);
    let mem = MemStorage::new(1 << 30).unwrap();
    let index = Index::create_in(
        Arc::new(mem.reopen(true)),
        Options::new(dims, Metric::L2Squared).ef_construction(64),
    )
    .unwrap();
    index.add_batch(&flat(old), 2).unwrap();
    index.flush().unwrap();
    let reader = IndexReader::open_in(Arc::new(mem.reopen(false))).unwrap();
    let done = AtomicBool::new(false);
    let (searches, self_hits) = std::thread::scope(|s| {
        let searching = s.spawn(|| {
            let (mut searches, mut self_hits) = (0usize, 0usize);
            while !done.load(Ordering::Acquire) || searches < 200 {
                let i = (searches * 7919) % old.len();
                let hits = reader.search(&old[i], 5, 48).unwrap();
                assert_eq!(hits.len(), 5);
                assert!(
                    hits.iter().all(|h| h.id < 2_000),
                    "an unflushed id came back"
                );
                self_hits += usize::from(hits[0].id == i as u64);
                searches += 1;
            }
            (searches, self_hits)
        });
        index.add_batch(&flat(new), 2).unwrap();
        done.store(true, Ordering::Release);
        searching.join().unwrap()
    });
    assert!(
        self_hits as f64 >= 0.98 * searches as f64,
        "{self_hits} of {searches} searches found their own vector"
    );
    index.flush().unwrap();
    assert_eq!(reader.len().unwrap(), 22_000);
    let mut found = 0;
    for (i, v) in new.iter().enumerate().step_by(50) {
        found += usize::from(reader.search(v, 1, 48).unwrap()[0].id == 2_000 + i as u64);
    }
    assert!(
        found >= 395,
        "{found} of 400 new vectors found by the reader"
    );
}

/// Fails if a batch that runs out of space part-way leaves some of its rows added: slots are
/// all written before any is linked or counted, so a full disk adds nothing and the index
/// goes on as it was.
#[test]
fn a_batch_that_runs_out_of_space_adds_nothing() {
    for threads in [1, 2] {
        out_of_space(threads);
    }
}

fn out_of_space(threads: usize) {
    let dims = 8;
    let data = clustered(4_000, dims, 8, 4);
    let mem = MemStorage::new(1 << 20).unwrap();
    let index = Index::create_in(
        Arc::new(mem.reopen(true)),
        common::small(dims, Metric::L2Squared, 8, 32),
    )
    .unwrap();
    let mut added = 0;
    let failed = loop {
        let rows = &data[added..added + 200];
        match index.add_batch(&flat(rows), threads) {
            Ok(ids) => {
                assert_eq!(ids.len(), 200);
                added += 200;
                index.flush().unwrap();
            }
            Err(e) => break e,
        }
        assert!(added < 4_000, "1 MiB should not hold 4,000 slots");
    };
    assert!(added > 0);
    assert!(
        matches!(failed, Error::Full { .. } | Error::Io(_)),
        "{failed:?}"
    );
    assert_eq!(index.len(), added, "nothing of the failed batch is added");
    assert!(!index.contains(added as u64).unwrap());
    index.flush().unwrap();
    for (i, v) in data[..added].iter().enumerate().step_by(97) {
        assert_eq!(index.search(v, 1, 32).unwrap()[0].id, i as u64);
    }
}
