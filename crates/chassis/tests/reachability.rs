//! Every committed vector stays findable, and a cleanly closed file opens without a repair
//! pass (hardening issue, item 1).
//!
//! The builds here are small (M = 6, ef_construction = 24) on clustered data with many
//! duplicates of direction, where HNSW's pruning alone leaves vectors no search can reach: on
//! every metric, with one thread and several, with deletes. After every flush the writer's
//! graph must hold the support invariant (`graph::support`) and `check` must find no live
//! vector unreachable.

mod common;

use std::sync::Arc;

use chassis::graph::support;
use chassis::os::MemStorage;
use chassis::{Index, IndexReader, Metric, Options};
use common::{clustered, Rng};

fn opts(metric: Metric) -> Options {
    Options::new(8, metric).m(6).ef_construction(24).seed(3)
}

/// Data where plain HNSW leaves vectors unreachable on every metric: clusters of vectors of
/// very different lengths (under inner product short ones are nobody's near neighbor), and a
/// quarter of them near-copies of an earlier one (a near-copy crowds its twin out of lists).
fn data(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let mut rows: Vec<Vec<f32>> = Vec::with_capacity(n);
    for v in clustered(n, 8, 40, seed) {
        let row = if rows.len() > 10 && rng.below(4) == 0 {
            let twin = &rows[rng.below(rows.len())];
            twin.iter().map(|x| x + 1e-4 * rng.normal()).collect()
        } else {
            let scale = 0.2 + 3.0 * rng.uniform();
            v.into_iter().map(|x| x * scale).collect()
        };
        rows.push(row);
    }
    rows
}

fn assert_whole(ix: &Index, what: &str) {
    assert_eq!(ix.unreachable_count(), 0, "{what}: unreachable vectors");
    let check = ix.check(0).unwrap();
    assert!(check.problems.is_empty(), "{what}: {:?}", check.problems);
}

#[test]
fn every_vector_is_reachable_after_every_flush() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for threads in [1, 4] {
            let what = format!("{metric:?}, {threads} thread(s)");
            let ix = Index::in_memory(opts(metric), 256 << 20).unwrap();
            let rows = data(6000, 11);
            let mut rng = Rng::new(5);
            for (round, chunk) in rows.chunks(1500).enumerate() {
                let flat: Vec<f32> = chunk.iter().flatten().copied().collect();
                ix.add_batch(&flat, threads).unwrap();
                for _ in 0..150 {
                    let id = rng.below(ix.len() + 150 * round) as u64;
                    let _ = ix.delete(id);
                }
                ix.flush().unwrap();
                assert_whole(&ix, &format!("{what}, flush {round}"));
                let entry = ix.store().header().entry_point;
                let n = ix.store().header().committed_count as u32;
                let lacking = support::unsupported(&ix.graph(), n, entry);
                assert!(lacking.is_empty(), "{what}: no supporter: {lacking:?}");
            }
            // Single adds on top (the path a service takes).
            for v in data(300, 99) {
                ix.add(&v).unwrap();
            }
            ix.flush().unwrap();
            assert_whole(&ix, &format!("{what}, single adds"));
        }
    }
}

#[test]
fn a_cleanly_closed_file_opens_without_a_repair_pass() {
    let mem = MemStorage::new(64 << 20).unwrap();
    let rows = data(800, 4);
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts(Metric::L2Squared)).unwrap();
    for v in &rows[..500] {
        ix.add(v).unwrap();
    }
    ix.close().unwrap();

    // Clean: nothing is repaired or even looked at.
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    let report = ix.open_report().clone();
    assert!(report.clean, "{report:?}");
    assert_eq!(report.repaired_lists, None);
    assert_eq!(report.unreachable, None);
    assert_whole(&ix, "clean open");
    // A writer that changes nothing and stops without closing (its process ends: the page
    // cache keeps what it wrote) leaves the marker standing.
    let crashed = MemStorage::from_image(&mem.current_image(), 64 << 20).unwrap();
    drop(ix);
    let probe = Index::open_in(Arc::new(crashed)).unwrap();
    assert!(probe.open_report().clean, "a writer that changed nothing");
    drop(probe);
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    // Readers see a cleanly closed file as one with no writer.
    let reader = IndexReader::open_in(Arc::new(mem.reopen(false))).unwrap();
    let snap = reader.snapshot().unwrap();
    assert_eq!((snap.committed_count(), snap.routing_count()), (500, 500));

    // Adds without a flush, then the process ends: the next writer sees that lists may have
    // changed and makes its repair pass.
    for v in &rows[500..600] {
        ix.add(v).unwrap();
    }
    assert_eq!(
        reader.snapshot().unwrap().routing_count(),
        600,
        "R published again"
    );
    let crashed = MemStorage::from_image(&mem.current_image(), 64 << 20).unwrap();
    drop(ix);
    let ix = Index::open_in(Arc::new(crashed)).unwrap();
    let report = ix.open_report().clone();
    assert!(!report.clean, "{report:?}");
    assert!(report.repaired_lists.unwrap() > 0, "{report:?}");
    assert_eq!(report.still_unreachable, Some(0));
    assert_eq!(ix.len(), 500);
    assert_whole(&ix, "after repair");
    ix.flush().unwrap();
    drop(ix);
    // (The original file: its writer dropped the adds without flushing.)
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    assert!(!ix.open_report().clean, "dropped with changes pending");
    assert_eq!(ix.len(), 500);

    // A flush then a drop leaves the marker.
    ix.add(&rows[701]).unwrap();
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    assert!(ix.open_report().clean);
    assert_eq!(ix.len(), 501);
    assert_whole(&ix, "after a flush and a drop");

    // A marker for another header (a writer without the marker committed since) is no
    // marker: a release before this one flushes without touching the live page.
    drop(ix);
    let mut img = mem.current_image();
    let seq_at = 128 * 1024 + 8;
    let seq = u64::from_le_bytes(img[seq_at..seq_at + 8].try_into().unwrap());
    img[seq_at..seq_at + 8].copy_from_slice(&(seq - 1).to_le_bytes());
    let older = MemStorage::from_image(&img, 64 << 20).unwrap();
    let ix = Index::open_in(Arc::new(older)).unwrap();
    assert!(!ix.open_report().clean);
    assert!(ix.open_report().repaired_lists.is_some());
}

/// A new entry point supports the old one, in a parallel batch too, where two nodes of the
/// top level may arrive together (the one with the smaller slot becomes the entry point).
#[test]
fn the_entry_point_is_the_node_of_lowest_rank() {
    for threads in [1, 3] {
        let ix = Index::in_memory(opts(Metric::L2Squared).seed(17), 64 << 20).unwrap();
        let flat: Vec<f32> = data(4000, 8).into_iter().flatten().collect();
        ix.add_batch(&flat, threads).unwrap();
        ix.flush().unwrap();
        let h = ix.store().header().clone();
        let n = h.committed_count as u32;
        let view = ix.graph();
        for s in 0..n {
            assert!(
                s == h.entry_point || support::outranks(&view, h.entry_point, s),
                "{threads} threads: slot {s} outranks the entry point {}",
                h.entry_point
            );
        }
        assert!(support::unsupported(&view, n, h.entry_point).is_empty());
    }
}
