//! compact(): replacing the file by copy and rename (ADR-0008 decision 8).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use chassis::format::header::{self, Header};
use chassis::os::{FileStorage, Storage};
use chassis::{compacting_path, CompactOptions, Error, Index, IndexReader, Metric, Options};
use common::clustered;

fn build(path: &Path, n: usize, m: usize) -> Vec<Vec<f32>> {
    let data = clustered(n, 16, 10, 5);
    let ix = Index::create(path, Options::new(16, Metric::L2Squared).m(m)).unwrap();
    for v in &data {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    data
}

#[test]
fn compact_reclaims_deleted_vectors_and_keeps_every_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = build(&path, 3000, 12);
    let ix = Index::open(&path).unwrap();
    let deleted: Vec<u64> = (0..3000).filter(|i| i % 3 != 0).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.add_with_id(1_000_000, &data[0]).unwrap(); // pending: compact flushes it first
    let before = fs::metadata(&path).unwrap();
    let report = ix.compact(CompactOptions::default()).unwrap();
    assert_eq!(report.live, 1001);
    assert_eq!(report.old_slots, 3001);
    assert!(report.new_bytes < report.old_bytes, "{report:?}");
    let after = fs::metadata(&path).unwrap();
    assert_ne!(before.ino(), after.ino(), "a new file at the path");
    assert!(!compacting_path(&path).exists());
    let check = |ix: &Index, len: usize| {
        assert_eq!(ix.len(), len);
        for (i, v) in data.iter().enumerate() {
            let id = i as u64;
            if i % 3 != 0 {
                assert!(!ix.contains(id).unwrap());
            } else {
                assert_eq!(&ix.get(id).unwrap(), v, "id {id} keeps its vector");
                if i % 7 == 0 {
                    let hit = ix.search(v, 1, 64).unwrap()[0];
                    assert_eq!((hit.id, hit.distance), (id, 0.0));
                }
            }
        }
        assert_eq!(ix.get(1_000_000).unwrap(), data[0]);
    };
    check(&ix, 1001);
    // Index-assigned ids continue above every id ever stored, never reusing one.
    assert_eq!(ix.add(&data[5]).unwrap(), 1_000_001);
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open(&path).unwrap();
    check(&ix, 1002);
    assert_eq!(ix.info().unwrap().m, 12);
}

/// Fails if a compaction linking on several threads loses vectors, edges or recall against
/// the same compaction on one thread (which is the same graph on every run).
#[test]
fn compact_links_on_several_threads_with_the_recall_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(4000, 16, 10, 6);
    let mut recalls = Vec::new();
    for threads in [1, 2] {
        let path = dir.path().join(format!("t{threads}.chassis"));
        let ix = Index::create(&path, Options::new(16, Metric::L2Squared).m(12)).unwrap();
        ix.add_batch(&data.concat(), 1).unwrap();
        for id in (0..4000).filter(|i| i % 4 == 0) {
            ix.delete(id).unwrap();
        }
        ix.compact(CompactOptions {
            threads,
            ..CompactOptions::default()
        })
        .unwrap();
        let check = ix.check(0).unwrap();
        assert!(check.problems.is_empty(), "{:?}", check.problems);
        assert_eq!(check.unreachable, 0, "threads {threads}");
        assert_eq!(ix.len(), 3000);
        let live: Vec<Vec<f32>> = (0..4000)
            .map(|i| {
                if i % 4 == 0 {
                    vec![1e6; 16]
                } else {
                    data[i].clone()
                }
            })
            .collect();
        let mut found = 0;
        for q in data.iter().skip(1).step_by(40) {
            let want = common::brute_force(&live, q, 10, Metric::L2Squared);
            let got = ix.search(q, 10, 32).unwrap();
            found += got
                .iter()
                .filter(|h| want.contains(&(h.id as usize)))
                .count();
        }
        recalls.push(found as f64 / (100.0 * 10.0));
    }
    assert!(recalls[0] >= 0.9, "{recalls:?}");
    assert!(recalls[1] >= recalls[0] - 0.02, "{recalls:?}");
}

#[test]
fn compact_changes_m_and_rebuilds_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.chassis");
    let data = build(&path, 2000, 8);
    let ix = Index::open(&path).unwrap();
    ix.compact(CompactOptions {
        m: Some(24),
        ef_construction: Some(100),
        threads: 1,
        vector_layout: None,
        codes: None,
        keep_graph: false,
    })
    .unwrap();
    let info = ix.info().unwrap();
    assert_eq!((info.m, info.m0, info.ef_construction), (24, 48, 100));
    for (i, v) in data.iter().enumerate().step_by(13) {
        assert_eq!(ix.search(v, 1, 64).unwrap()[0].id, i as u64);
    }
    drop(ix);
    assert_eq!(Index::open(&path).unwrap().info().unwrap().m, 24);
}

#[test]
fn compact_needs_a_path_and_refuses_read_only() {
    let ix = Index::in_memory(Options::new(4, Metric::L2Squared), 1 << 24).unwrap();
    assert!(matches!(
        ix.compact(CompactOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    build(&path, 50, 8);
    let ro = Index::open_read_only(&path).unwrap();
    assert!(matches!(
        ro.compact(CompactOptions::default()),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn a_leftover_compacting_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.chassis");
    build(&path, 300, 8);
    fs::write(
        compacting_path(&path),
        b"half a file from a crashed compaction",
    )
    .unwrap();
    let ix = Index::open(&path).unwrap();
    ix.compact(CompactOptions::default()).unwrap();
    assert_eq!(ix.len(), 300);
    assert!(!compacting_path(&path).exists());
}

#[test]
fn a_reader_finishes_on_the_old_file_and_moves_to_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    let data = build(&path, 1000, 8);
    let r = IndexReader::open(&path).unwrap();
    let old = r.snapshot().unwrap();
    let ix = Index::open(&path).unwrap();
    for id in 0..500 {
        ix.delete(id).unwrap();
    }
    ix.compact(CompactOptions {
        m: Some(16),
        ..CompactOptions::default()
    })
    .unwrap();
    // A search on the snapshot taken before still runs on the old file.
    assert_eq!(r.search_in(&old, &data[3], 1, 32).unwrap()[0].id, 3);
    assert_eq!(old.m(), 8);
    // The next snapshot is the new file's.
    let new = r.snapshot().unwrap();
    assert_eq!(new.file_generation(), 1);
    assert_eq!(new.m(), 16);
    assert_eq!(new.len(), 500);
    assert_eq!(r.stats().reopens, 1);
    assert_eq!(r.search(&data[700], 1, 32).unwrap()[0].id, 700);
    assert!(r
        .search(&data[3], 5, 32)
        .unwrap()
        .iter()
        .all(|h| h.id >= 500));
    // And it follows the new file's writer.
    ix.add_with_id(5_000, &data[3]).unwrap();
    ix.flush().unwrap();
    assert_eq!(r.search(&data[3], 1, 32).unwrap()[0].id, 5_000);
}

/// Writes a header with the superseded flag into the other copy, as a compaction that
/// stopped between committing the flag and renaming would leave.
fn mark_superseded(path: &Path) {
    let st = FileStorage::open(path, true).unwrap();
    let (mut h, copy): (Header, usize) = chassis::storage::read_current_header(&st).unwrap();
    h.flags |= header::FLAG_SUPERSEDED;
    h.sequence += 1;
    st.write_at(chassis::format::header_offset(1 - copy), &h.encode())
        .unwrap();
    st.sync().unwrap();
}

#[test]
fn a_superseded_file_still_at_its_path_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.chassis");
    let data = build(&path, 200, 8);
    mark_superseded(&path);
    // A reader keeps using it (the path still names it) instead of looping.
    let r = IndexReader::open(&path).unwrap();
    assert_eq!(r.search(&data[9], 1, 32).unwrap()[0].id, 9);
    assert_eq!(r.stats().reopens, 0);
    // The next writer's first commit clears the flag.
    let ix = Index::open(&path).unwrap();
    ix.add(&data[1]).unwrap();
    ix.flush().unwrap();
    drop(ix);
    let st = FileStorage::open(&path, false).unwrap();
    let (h, _) = chassis::storage::read_current_header(&st).unwrap();
    assert_eq!(h.flags & header::FLAG_SUPERSEDED, 0);
}

#[test]
fn a_handle_notices_when_its_path_names_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.chassis");
    build(&path, 10, 8);
    let st = FileStorage::open(&path, true).unwrap();
    assert!(st.still_at_path().unwrap());
    let other = dir.path().join("o.chassis");
    build(&other, 10, 8);
    fs::rename(&other, &path).unwrap();
    assert!(!st.still_at_path().unwrap());
    assert_eq!(st.identity().unwrap().unwrap().nlink, 0);
    // A writer opening the path gets the new file, unlocked by the old handle's lock.
    st.try_lock_exclusive().unwrap();
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 10);
}

/// No operation ever makes a file shorter: the original inode's length is checked after each
/// one, compaction included (it replaces the path's file, never truncates one).
#[test]
fn the_file_never_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.chassis");
    let data = clustered(2000, 16, 10, 6);
    let ix = Index::create(&path, Options::new(16, Metric::L2Squared).m(8)).unwrap();
    let watch = fs::File::open(&path).unwrap();
    let mut last = 0;
    let mut check = |what: &str| {
        let len = watch.metadata().unwrap().len();
        assert!(len >= last, "{what} shrank the file from {last} to {len}");
        last = len;
    };
    check("create");
    for v in &data[..1000] {
        ix.add(v).unwrap();
    }
    check("add");
    ix.flush().unwrap();
    check("flush");
    for id in 0..300 {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    check("delete flush");
    for v in &data[1000..1500] {
        ix.add(v).unwrap();
    }
    drop(ix);
    check("drop unflushed");
    let ix = Index::open(&path).unwrap();
    check("reopen");
    for v in &data[1500..] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    check("reuse of ghost slots");
    ix.compact(CompactOptions::default()).unwrap();
    check("compact");
    drop(ix);
    check("drop");
}

/// Found by the model test: compacting away every vector (or the last ones) must keep
/// index-assigned ids unique and findable, even though ids no longer equal slots.
#[test]
fn ids_after_compacting_away_deleted_vectors_stay_findable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.chassis");
    let data = build(&path, 3, 8);
    let ix = Index::open(&path).unwrap();
    for id in 0..3 {
        ix.delete(id).unwrap();
    }
    ix.compact(CompactOptions::default()).unwrap();
    assert_eq!(ix.len(), 0);
    let id = ix.add(&data[0]).unwrap();
    assert_eq!(id, 3, "ids are never reused");
    assert_eq!(ix.get(3).unwrap(), data[0]);
    assert!(ix.contains(3).unwrap() && !ix.contains(0).unwrap());
    ix.flush().unwrap();
    drop(ix);
    assert_eq!(Index::open(&path).unwrap().get(3).unwrap(), data[0]);
}
