//! Flush, reopen, unflushed work, deletes, custom ids and growth across regions, on real files.

mod common;

use chassis::{Error, Index, Metric, Options};
use common::{brute_force, clustered, Rng};

fn small(dims: usize, metric: Metric) -> Options {
    common::small(dims, metric, 8, 64)
}

#[test]
fn flush_reopen_everything_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.chassis");
    let data = clustered(500, 12, 8, 1);
    {
        let ix = Index::create(&path, small(12, Metric::L2Squared)).unwrap();
        for (i, v) in data.iter().enumerate() {
            assert_eq!(ix.add(v).unwrap(), i as u64);
        }
        ix.flush().unwrap();
    }
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 500);
    assert_eq!(ix.dims(), 12);
    assert_eq!(ix.metric(), Metric::L2Squared);
    for (i, v) in data.iter().enumerate() {
        assert_eq!(&ix.get(i as u64).unwrap(), v);
        assert!(ix.contains(i as u64).unwrap());
        let hit = ix.search(v, 1, 32).unwrap();
        assert_eq!(hit[0].id, i as u64);
        assert_eq!(hit[0].distance, 0.0);
    }
    assert!(!ix.contains(500).unwrap());
}

#[test]
fn unflushed_work_is_gone_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.chassis");
    let data = clustered(300, 8, 4, 2);
    {
        let ix = Index::create(&path, small(8, Metric::Cosine)).unwrap();
        for v in &data[..100] {
            ix.add(v).unwrap();
        }
        ix.flush().unwrap();
        for v in &data[100..] {
            ix.add(v).unwrap();
        }
        ix.delete(5).unwrap();
        assert_eq!(ix.len(), 299, "visible in this process before the flush");
        assert!(ix
            .search(&data[5], 3, 32)
            .unwrap()
            .iter()
            .all(|h| h.id != 5));
        // dropped without flush
    }
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 100);
    assert!(ix.contains(5).unwrap(), "the unflushed delete is gone");
    assert!(!ix.contains(100).unwrap(), "the unflushed adds are gone");
    for v in &data[100..] {
        let hits = ix.search(v, 10, 64).unwrap();
        assert!(hits.iter().all(|h| h.id < 100), "only committed ids");
    }
    // Ghost slots are reused: the next add gets id 100 again, in the reused slot.
    assert_eq!(ix.add(&data[299]).unwrap(), 100);
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 101);
    assert_eq!(ix.search(&data[299], 1, 32).unwrap()[0].id, 100);
}

#[test]
fn deleted_ids_are_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.chassis");
    let data = clustered(1_000, 16, 10, 3);
    let ix = Index::create(&path, small(16, Metric::L2Squared)).unwrap();
    for v in &data {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    let mut rng = Rng::new(9);
    let mut deleted = std::collections::HashSet::new();
    while deleted.len() < 600 {
        let id = rng.below(1_000) as u64;
        if deleted.insert(id) {
            ix.delete(id).unwrap();
        }
    }
    assert!(matches!(
        ix.delete(*deleted.iter().next().unwrap()),
        Err(Error::NotFound { .. })
    ));
    let check = |ix: &Index| {
        assert_eq!(ix.len(), 400);
        for q in data.iter().step_by(7) {
            let hits = ix.search(q, 10, 16).unwrap();
            assert_eq!(
                hits.len(),
                10,
                "min(k, live) results even with most slots deleted"
            );
            for h in &hits {
                assert!(!deleted.contains(&h.id), "deleted id {} returned", h.id);
            }
            let live: Vec<Vec<f32>> = Vec::new();
            drop(live);
        }
        for &id in &deleted {
            assert!(!ix.contains(id).unwrap());
            assert!(matches!(ix.get(id), Err(Error::NotFound { .. })));
        }
    };
    check(&ix);
    ix.flush().unwrap();
    check(&ix);
    drop(ix);
    let ix = Index::open(&path).unwrap();
    check(&ix);
    // k above the live count returns every live vector.
    assert_eq!(ix.search(&data[0], 1_000, 10).unwrap().len(), 400);
}

#[test]
fn search_returns_the_exact_nearest_among_live_vectors_when_brute_forced() {
    let data = clustered(200, 6, 3, 4);
    let ix = Index::in_memory(small(6, Metric::InnerProduct), 1 << 26).unwrap();
    for v in &data {
        ix.add(v).unwrap();
    }
    for id in 0..190 {
        ix.delete(id).unwrap();
    }
    let live: Vec<Vec<f32>> = data[190..].to_vec();
    for q in data.iter().take(20) {
        let hits = ix.search(q, 10, 10).unwrap();
        let truth: Vec<u64> = brute_force(&live, q, 10, Metric::InnerProduct)
            .iter()
            .map(|&i| 190 + i as u64)
            .collect();
        let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(got.len(), 10);
        let mut g = got.clone();
        let mut t = truth.clone();
        g.sort();
        t.sort();
        assert_eq!(g, t);
    }
}

#[test]
fn custom_ids_survive_reopen_and_reject_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(200, 4, 4, 5);
    {
        let ix = Index::create(&path, small(4, Metric::L2Squared)).unwrap();
        for (i, v) in data.iter().enumerate() {
            ix.add_with_id(1_000_000 + 7 * i as u64, v).unwrap();
        }
        assert!(matches!(
            ix.add_with_id(1_000_000, &data[3]),
            Err(Error::DuplicateId { id: 1_000_000 })
        ));
        // An index-assigned id after custom ones is above every stored id.
        assert_eq!(ix.add(&data[0]).unwrap(), 1_000_000 + 7 * 199 + 1);
        ix.delete(1_000_007).unwrap();
        // A deleted id may be used again.
        ix.add_with_id(1_000_007, &data[150]).unwrap();
        ix.flush().unwrap();
    }
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 201);
    assert!(ix.info().unwrap().custom_ids);
    assert_eq!(ix.get(1_000_007).unwrap(), data[150]);
    assert_eq!(ix.get(1_000_014).unwrap(), data[2]);
    assert!(matches!(ix.get(5), Err(Error::NotFound { id: 5 })));
    assert!(matches!(
        ix.add_with_id(1_000_014, &data[0]),
        Err(Error::DuplicateId { .. })
    ));
    let hit = ix.search(&data[10], 1, 32).unwrap();
    assert_eq!(hit[0].id, 1_000_070);
    ix.add_with_id(u64::MAX, &data[1]).unwrap();
    assert!(
        matches!(ix.add(&data[1]), Err(Error::IdsExhausted { .. })),
        "no id above u64::MAX"
    );
}

#[test]
fn growth_across_many_segments_heap_chunks_and_table_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.chassis");
    let data = clustered(3_000, 8, 20, 6);
    let opts = small(8, Metric::L2Squared);
    let ix = Index::create(&path, opts).unwrap();
    for (round, chunk) in data.chunks(700).enumerate() {
        for v in chunk {
            ix.add(v).unwrap();
        }
        ix.flush().unwrap();
        let info = ix.info().unwrap();
        assert_eq!(info.committed_count, ((round + 1) * 700).min(3_000) as u64);
    }
    let info = ix.info().unwrap();
    // 16 + 32 + 64 then 64-slot segments: 3,000 slots take 3 + 46 = 49 segments (13 table pages).
    assert_eq!(info.segments, 49);
    assert!(
        info.upper_heap_chunks >= 10,
        "{} heap chunks",
        info.upper_heap_chunks
    );
    assert!(info.table_pages >= 15, "{} table pages", info.table_pages);
    let (segs, chunks, pages) = ix.store().region_offsets();
    for off in segs.iter().chain(&chunks).chain(&pages) {
        assert_eq!(off % 65_536, 0, "region at {off} not 64 KiB-aligned");
        assert!(*off >= 196_608);
    }
    drop(ix);
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), 3_000);
    let mut exact = 0;
    for (i, v) in data.iter().enumerate().step_by(11) {
        assert_eq!(&ix.get(i as u64).unwrap(), v);
        if ix.search(v, 1, 32).unwrap()[0].id == i as u64 {
            exact += 1;
        }
    }
    assert!(exact >= 272, "{exact} of 273 found themselves");
    // Some node has upper layers, and they survived.
    assert!((0..3_000).any(|s| ix.node_level(s) > 0));
}

#[test]
fn file_only_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.chassis");
    let data = clustered(400, 8, 4, 8);
    let ix = Index::create(&path, small(8, Metric::L2Squared)).unwrap();
    let mut last = std::fs::metadata(&path).unwrap().len();
    assert_eq!(last, 196_608, "a new file is the fixed area only");
    for (i, v) in data.iter().enumerate() {
        ix.add(v).unwrap();
        if i % 50 == 0 {
            ix.delete(i as u64).unwrap();
            ix.flush().unwrap();
        }
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len >= last);
        last = len;
    }
}

#[test]
fn searches_run_from_many_threads_at_once() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Index>();
    let data = clustered(2_000, 16, 10, 12);
    let ix = Index::in_memory(small(16, Metric::L2Squared), 1 << 28).unwrap();
    for v in &data {
        ix.add(v).unwrap();
    }
    let expected: Vec<Vec<chassis::Neighbor>> =
        data.iter().map(|v| ix.search(v, 5, 32).unwrap()).collect();
    let found_self = expected
        .iter()
        .enumerate()
        .filter(|(i, h)| h[0].id == *i as u64)
        .count();
    assert!(found_self >= 1_990, "{found_self}");
    let ix = &ix;
    std::thread::scope(|s| {
        for t in 0..4 {
            let (data, expected) = (&data, &expected);
            s.spawn(move || {
                for (i, v) in data.iter().enumerate().skip(t).step_by(4) {
                    assert_eq!(
                        ix.search(v, 5, 32).unwrap(),
                        expected[i],
                        "same answer on any thread"
                    );
                }
            });
        }
    });
}
