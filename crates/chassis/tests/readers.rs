//! Readers beside a writer (ADR-0008 decision 5): one targeted test per rule, in one process
//! over the in-memory backend, plus a reader over a real file while a writer holds its lock.

mod common;

use std::sync::Arc;

use chassis::os::{MemStorage, Storage};
use chassis::{Error, Index, IndexReader, Metric, Options, HEADER_REREADS};
use common::clustered;

const CAP: usize = 64 << 20;

fn opts() -> Options {
    common::small(4, Metric::L2Squared, 8, 32)
}

fn writer(mem: &MemStorage) -> Index {
    Index::open_in(Arc::new(mem.reopen(true))).unwrap()
}

fn reader(mem: &MemStorage) -> IndexReader {
    IndexReader::open_in(Arc::new(mem.reopen(false))).unwrap()
}

fn new_file() -> MemStorage {
    let mem = MemStorage::new(CAP).unwrap();
    drop(Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap());
    mem
}

/// Fails if a search reuses a stale snapshot or snapshot filtering is off: unflushed adds are
/// never returned, and each flush is seen by the very next search.
#[test]
fn each_search_sees_the_last_flush_and_nothing_unflushed() {
    let mem = new_file();
    let data = clustered(300, 4, 5, 1);
    let w = writer(&mem);
    for v in &data[..100] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    let r = reader(&mem);
    assert_eq!(r.len().unwrap(), 100);
    for v in &data[100..200] {
        w.add(v).unwrap();
    }
    let snap = r.snapshot().unwrap();
    assert_eq!(snap.committed_count(), 100);
    for (i, v) in data[100..200].iter().enumerate() {
        // The unflushed vector itself is the nearest slot; it must never come back.
        let hits = r.search(v, 5, 32).unwrap();
        assert_eq!(hits.len(), 5);
        assert!(
            hits.iter().all(|h| h.id < 100),
            "unflushed id returned for {i}"
        );
        assert!(!r.contains(100 + i as u64).unwrap());
    }
    w.flush().unwrap();
    for (i, v) in data[100..200].iter().enumerate() {
        let hits = r.search(v, 1, 32).unwrap();
        assert_eq!(hits[0].id, 100 + i as u64, "the flush is visible at once");
    }
    assert_eq!(r.len().unwrap(), 200);
    assert_eq!(r.get(150).unwrap(), data[150]);
}

/// Fails if routing is disabled: a reader's snapshot routes through every slot the writer has
/// published (R), and maps the uncommitted segments the live page lists.
#[test]
fn readers_route_through_published_unflushed_slots() {
    let mem = new_file();
    let data = clustered(400, 4, 5, 2);
    let w = writer(&mem);
    for v in &data[..40] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &data[40..400] {
        w.add(v).unwrap();
    }
    let r = reader(&mem);
    let snap = r.snapshot().unwrap();
    assert_eq!(snap.committed_count(), 40);
    assert_eq!(snap.routing_count(), 400);
    assert_eq!(snap.segment_offsets(), w.store().region_offsets().0);
    // Region publishing: the live page mirrors the writer's regions.
    assert_eq!(w.store().live_routing_count(), Some(400));
    // Search still returns committed ids only, and finds each committed vector.
    for (i, v) in data[..40].iter().enumerate() {
        let hits = r.search_in(&snap, v, 1, 16).unwrap();
        assert_eq!(hits[0].id, i as u64);
    }
}

/// The writer resets R to N when it opens, before it reuses any ghost slot.
#[test]
fn a_new_writer_resets_routing_before_reusing_ghost_slots() {
    let mem = new_file();
    let data = clustered(200, 4, 5, 3);
    let w = writer(&mem);
    for v in &data[..50] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &data[50..200] {
        w.add(v).unwrap();
    }
    assert_eq!(w.store().live_routing_count(), Some(200));
    drop(w); // unflushed
    let w = writer(&mem);
    assert_eq!(w.store().live_routing_count(), Some(50));
    let r = reader(&mem);
    assert_eq!(r.snapshot().unwrap().routing_count(), 50);
}

/// A restarted writer reuses the space past the committed counts: a reader that mapped the
/// old writer's uncommitted segments remaps each one whose table entry changed.
#[test]
fn uncommitted_regions_are_remapped_when_their_table_entry_changes() {
    let mem = new_file();
    let data = clustered(600, 4, 5, 4);
    let w = writer(&mem);
    for v in &data[..20] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &data[20..300] {
        w.add(v).unwrap();
    }
    let r = reader(&mem);
    let before = r.snapshot().unwrap();
    let old_offsets = before.segment_offsets();
    assert!(old_offsets.len() > 2);
    drop(w);
    let w = writer(&mem);
    for v in &data[300..600] {
        w.add(v).unwrap();
    }
    let after = r.snapshot().unwrap();
    let new_offsets = w.store().region_offsets().0;
    assert_eq!(after.segment_offsets(), new_offsets);
    assert_ne!(old_offsets, new_offsets);
    assert!(r.stats().remaps > 0, "{:?}", r.stats());
    // Committed segments were not remapped.
    let committed = w.store().header().segment_count as usize;
    assert_eq!(old_offsets[..committed], new_offsets[..committed]);
    // Routing through the new writer's slots returns committed ids with their own vectors'
    // distances. (Not necessarily each vector's own id: the first writer's unflushed inserts
    // may have pruned committed edges toward slots the second writer reused, which
    // `open_report().unreachable` counts; ADR-0005 amendment.)
    for v in &data[..20] {
        for h in r.search(v, 3, 16).unwrap() {
            assert!(h.id < 20);
            let want: f32 = v
                .iter()
                .zip(&data[h.id as usize])
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            assert!(
                (h.distance - want).abs() <= 1e-4 * want.max(1.0),
                "{h:?} vs {want}"
            );
        }
    }
    w.flush().unwrap();
    assert_eq!(r.get(599 - 300 + 20).unwrap(), data[599]);
}

/// A delete flush stopped between its marks and its commit header leaves marks above E: a
/// reader ignores them (and the intent header's pending epoch).
#[test]
fn a_reader_ignores_an_uncommitted_deletes_marks() {
    let mem = new_file();
    let data = clustered(60, 4, 5, 5);
    let w = writer(&mem);
    for v in &data {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    w.delete(7).unwrap();
    w.delete(8).unwrap();
    // Intent fsync succeeds, the fsync after the marks fails: marks written, no commit.
    mem.fail_syncs_after(Some(2));
    assert!(w.flush().is_err());
    mem.fail_syncs_after(None);
    let r = reader(&mem);
    let snap = r.snapshot().unwrap();
    assert_eq!(r.header_of(&snap).pending_delete_epoch, 1);
    assert_eq!(snap.delete_epoch(), 0);
    assert!(r.contains(7).unwrap() && r.contains(8).unwrap());
    assert_eq!(r.search(&data[7], 1, 16).unwrap()[0].id, 7);
    assert_eq!(r.len().unwrap(), 60);
}

fn corrupt_checksum(mem: &MemStorage, copy: u64) -> [u8; 8] {
    let at = copy * 65_536 + chassis::format::header::at::CHECKSUM as u64;
    let mut old = [0u8; 8];
    mem.read_at(at, &mut old).unwrap();
    let mut bad = old;
    bad[0] ^= 0xff;
    mem.reopen(true).write_at(at, &bad).unwrap();
    old
}

/// A copy that fails its checksum is re-read a bounded number of times, then the other copy
/// is used; and a reader never adopts a header older than one it already used.
#[test]
fn a_bad_copy_is_reread_and_snapshots_never_go_back() {
    let mem = new_file();
    let data = clustered(40, 4, 5, 6);
    let w = writer(&mem);
    for v in &data[..20] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &data[20..] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    let newest = w.store().header_copy() as u64;
    let r = reader(&mem);
    let first = r.snapshot().unwrap();
    assert_eq!(first.committed_count(), 40);
    let rereads = r.stats().rereads;
    // Damage the newest copy: the reader re-reads it HEADER_REREADS times, then falls back
    // to the older copy, which it must not adopt: it keeps its snapshot.
    let good = corrupt_checksum(&mem, newest);
    let second = r.snapshot().unwrap();
    assert_eq!(r.stats().rereads - rereads, u64::from(HEADER_REREADS));
    assert_eq!(second.sequence(), first.sequence());
    assert_eq!(second.committed_count(), 40);
    // A new reader, which has used nothing yet, takes the older copy.
    let fresh = reader(&mem);
    assert_eq!(fresh.snapshot().unwrap().committed_count(), 20);
    mem.reopen(true)
        .write_at(
            newest * 65_536 + chassis::format::header::at::CHECKSUM as u64,
            &good,
        )
        .unwrap();
    assert_eq!(fresh.snapshot().unwrap().committed_count(), 40);
}

/// Nothing changed: the snapshot is reused without re-reading headers or mapping anything.
#[test]
fn an_unchanged_file_takes_the_fast_path() {
    let mem = new_file();
    let data = clustered(50, 4, 5, 7);
    let w = writer(&mem);
    for v in &data {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    let r = reader(&mem);
    let s0 = r.stats();
    for _ in 0..100 {
        r.search(&data[3], 1, 16).unwrap();
    }
    let s1 = r.stats();
    assert_eq!(s1.snapshots - s0.snapshots, 100);
    assert_eq!(s1.fast - s0.fast, 100);
    assert_eq!(s1.header_reads, s0.header_reads);
    assert_eq!(s1.maps, s0.maps);
}

/// Regions are mapped lazily: opening maps nothing past what the first snapshot needs, and a
/// snapshot maps only the regions that appeared since the last one.
#[test]
fn regions_are_mapped_on_first_use_only() {
    let mem = new_file();
    let data = clustered(200, 4, 5, 8);
    let r = reader(&mem);
    assert_eq!(r.stats().maps, 0, "an empty file maps no region");
    let w = writer(&mem);
    for v in &data[..100] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    r.snapshot().unwrap();
    let (segs, chunks, pages) = w.store().region_offsets();
    assert_eq!(
        r.stats().maps as usize,
        segs.len() + chunks.len() + pages.len()
    );
    for v in &data[100..] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    r.snapshot().unwrap();
    let (segs, chunks, pages) = w.store().region_offsets();
    assert_eq!(
        r.stats().maps as usize,
        segs.len() + chunks.len() + pages.len(),
        "each region mapped once"
    );
}

/// A reader opens a real file while a writer holds its lock, and follows its flushes.
#[test]
fn a_reader_opens_a_locked_file_and_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    let data = clustered(100, 8, 5, 9);
    let w = Index::create(&path, Options::new(8, Metric::Cosine)).unwrap();
    assert!(matches!(Index::open(&path), Err(Error::Locked)));
    let r = IndexReader::open(&path).unwrap();
    assert_eq!(r.len().unwrap(), 0);
    assert!(r.search(&data[0], 3, 16).unwrap().is_empty());
    for v in &data {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(r.len().unwrap(), 100);
    assert_eq!(r.search(&data[42], 1, 32).unwrap()[0].id, 42);
    w.delete(42).unwrap();
    w.flush().unwrap();
    assert!(r
        .search(&data[42], 10, 32)
        .unwrap()
        .iter()
        .all(|h| h.id != 42));
    assert!(matches!(r.get(42), Err(Error::NotFound { id: 42 })));
    assert!(matches!(
        r.search(&[1.0; 3], 1, 16),
        Err(Error::DimensionMismatch { .. })
    ));
}

/// A restarted writer may commit a segment at another offset than the one the first writer's
/// uncommitted copy had: a reader that mapped the first copy remaps it once it is committed,
/// even when no count changed since its last snapshot. (Found by `reader_stress`: committed
/// slots read through the stale mapping came back as id 0 with another vector's distance.)
#[test]
fn a_segment_committed_at_a_new_offset_is_remapped() {
    let mem = new_file();
    let data = clustered(2000, 4, 5, 9);
    let w = writer(&mem);
    for v in &data[..20] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &data[20..120] {
        w.add(v).unwrap();
    }
    let r = reader(&mem);
    let before = r.snapshot().unwrap().segment_offsets();
    drop(w); // unflushed
    let w = writer(&mem);
    for v in &data[1000..1100] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    let committed = w.store().region_offsets().0;
    assert_eq!(before.len(), committed.len(), "the same segment count");
    assert_ne!(
        before, committed,
        "the scenario needs a segment at a new offset"
    );
    assert_eq!(r.snapshot().unwrap().segment_offsets(), committed);
    for (i, v) in data[1000..1100].iter().enumerate() {
        let hits = r.search(v, 1, 32).unwrap();
        assert_eq!(hits[0].id, 20 + i as u64);
        assert_eq!(hits[0].distance, 0.0);
    }
}
