//! Collections: many shard files searched as one (`chassis::Collection`).
//!
//! What must hold: rows route to shards by id and every shard gets some; a search merges the
//! shards' exact lists into the exact global top k (checked against brute force with a beam
//! wide enough to make each shard exact, and for recall at ordinary beams); get, contains,
//! delete and filters reach the right shard; flush publishes a manifest naming every shard's
//! sequence; a flush that stopped between shards is taken up by the next writer; a read-only
//! collection serves one consistent set of shard states until it refreshes.

mod common;

use chassis::collection::{merge, shard_of, Manifest, MANIFEST};
use chassis::{Collection, Error, Filter, Metadata, Metric, Neighbor, Options, Value};
use common::{brute_force, clustered};

fn meta(n: usize) -> Metadata {
    Metadata::from([("n".to_string(), Value::Int(n as i64))])
}

fn flat(rows: &[Vec<f32>]) -> Vec<f32> {
    rows.iter().flatten().copied().collect()
}

#[test]
fn a_collection_answers_as_one_index() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(2400, 16, 12, 1);
    let c = Collection::create(dir.path(), Options::new(16, Metric::L2Squared).m(8), 4).unwrap();
    let metas: Vec<Metadata> = (0..2000).map(meta).collect();
    let ids = c.add(None, &flat(&data[..2000]), Some(&metas)).unwrap();
    assert_eq!(ids, (0..2000).collect::<Vec<u64>>());
    for ix in c.shard_indexes() {
        assert!(ix.len() > 300, "shard sizes {}", ix.len());
    }
    assert_eq!(c.len().unwrap(), 2000);
    // Wide beams make every shard exact, so the merge must be the exact global top k.
    for q in data[2000..2040].iter() {
        let got: Vec<u64> = c
            .search(q, 10, 2000, None, 0)
            .unwrap()
            .iter()
            .map(|n| n.id)
            .collect();
        let want: Vec<u64> = brute_force(&data[..2000], q, 10, Metric::L2Squared)
            .into_iter()
            .map(|i| i as u64)
            .collect();
        assert_eq!(got, want);
    }
    // Ordinary beams: recall against brute force, one thread and several alike.
    let queries = &data[2000..2200];
    let mut hits = 0;
    for q in queries {
        let one = c.search(q, 10, 64, None, 1).unwrap();
        assert_eq!(one, c.search(q, 10, 64, None, 0).unwrap());
        let want = brute_force(&data[..2000], q, 10, Metric::L2Squared);
        hits += one
            .iter()
            .filter(|n| want.contains(&(n.id as usize)))
            .count();
    }
    let recall = hits as f64 / (10 * queries.len()) as f64;
    assert!(recall > 0.95, "recall {recall}");
    let many = c
        .search_many(&flat(queries), queries.len(), 10, 64, None, 0)
        .unwrap();
    for (q, got) in queries.iter().zip(&many) {
        assert_eq!(*got, c.search(q, 10, 64, None, 1).unwrap());
    }

    // Point reads, deletes and filters reach the right shard.
    assert_eq!(c.get(77).unwrap(), data[77]);
    assert_eq!(c.get_metadata(77).unwrap(), meta(77));
    c.delete(&[77, 78]).unwrap();
    assert!(!c.contains(77).unwrap() && c.contains(79).unwrap());
    assert!(matches!(c.delete(&[77]), Err(Error::NotFound { id: 77 })));
    let f = Filter::parse(r#"{"n": {"$lt": 100}}"#).unwrap();
    let hits = c.search(&data[5], 10, 64, Some(&f), 0).unwrap();
    assert_eq!(hits[0].id, 5);
    assert!(hits.iter().all(|n| n.id < 100 && n.id != 77 && n.id != 78));

    // Custom ids route the same way; the next assigned id is above every stored one.
    c.add(Some(&[10_000, 10_001]), &flat(&data[2000..2002]), None)
        .unwrap();
    assert_eq!(c.add(None, &data[2002], None).unwrap(), vec![10_002]);
    assert!(matches!(
        c.add(Some(&[5]), &data[2003], None),
        Err(Error::DuplicateId { id: 5 })
    ));

    c.flush().unwrap();
    let m = c.manifest();
    for (e, ix) in m.shards.iter().zip(c.shard_indexes()) {
        assert_eq!(e.sequence, ix.info().unwrap().sequence);
    }
    let before = c.search(&data[2100], 10, 64, None, 0).unwrap();
    c.close().unwrap();

    let c = Collection::open(dir.path()).unwrap();
    assert_eq!(c.len().unwrap(), 2001);
    assert_eq!(c.search(&data[2100], 10, 64, None, 0).unwrap(), before);
    assert_eq!(c.add(None, &data[2004], None).unwrap(), vec![10_003]);
    assert!(matches!(Collection::open(dir.path()), Err(Error::Locked)));
    drop(c);
    let r = Collection::open_read_only(dir.path()).unwrap();
    assert!(r.pinned_generation().1);
    assert_eq!(
        r.len().unwrap(),
        2001,
        "the unflushed add is not in the flushed set"
    );
    assert_eq!(r.search(&data[2100], 10, 64, None, 0).unwrap(), before);
    assert!(matches!(
        r.add(None, &data[0], None),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn a_flush_that_stopped_between_shards() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(600, 8, 4, 2);
    let c = Collection::create(dir.path(), Options::new(8, Metric::L2Squared), 3).unwrap();
    c.add(None, &flat(&data[..300]), None).unwrap();
    c.flush().unwrap();
    let flushed = c.manifest();
    let reader = Collection::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.len().unwrap(), 300);

    // More rows; only shard 0 commits before the "crash".
    c.add(None, &flat(&data[300..600]), None).unwrap();
    let in_shard0 = (300..600u64).filter(|&id| shard_of(id, 3) == 0).count() as u64;
    c.shard_indexes()[0].flush().unwrap();
    // A reader refreshing now finds shard 0 past the manifest: it can't pin a consistent set.
    assert!(!reader.refresh().unwrap());
    drop(c); // the other shards' rows are lost, as an unflushed single file's are
    assert_eq!(Manifest::read_from(dir.path()).unwrap(), flushed);

    let c = Collection::open(dir.path()).unwrap();
    assert_eq!(c.len().unwrap(), 300 + in_shard0);
    let m = c.manifest();
    assert_eq!(m.generation, flushed.generation + 1);
    for (e, ix) in m.shards.iter().zip(c.shard_indexes()) {
        assert_eq!(e.sequence, ix.info().unwrap().sequence);
    }
    assert!(reader.refresh().unwrap());
    assert_eq!(reader.len().unwrap(), 300 + in_shard0);
}

#[test]
fn manifests_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Collection::open(dir.path()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(Collection::create(dir.path(), Options::new(4, Metric::Cosine), 0).is_err());
    let c = Collection::create(dir.path(), Options::new(4, Metric::Cosine), 2).unwrap();
    drop(c);
    assert!(Collection::create(dir.path(), Options::new(4, Metric::Cosine), 2).is_err());
    let text = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
    assert!(text.contains("\"shard-0001.chassis\""), "{text}");
    std::fs::write(
        dir.path().join(MANIFEST),
        text.replace("shard-0001", "../x"),
    )
    .unwrap();
    assert!(matches!(
        Collection::open(dir.path()),
        Err(Error::InvalidArgument(_))
    ));

    let n = |id, distance| Neighbor { id, distance };
    let a = [n(1, 0.1), n(4, 0.5), n(6, 0.9)];
    let b = [n(2, 0.2), n(3, 0.5), n(5, 0.6)];
    let got: Vec<u64> = merge([&a[..], &b[..]].into_iter(), 4)
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(got, [1, 2, 3, 4]);
    // Ids spread over shards.
    let mut counts = [0usize; 8];
    for id in 0..8000 {
        counts[shard_of(id, 8)] += 1;
    }
    assert!(
        counts.iter().all(|&c| (800..1200).contains(&c)),
        "{counts:?}"
    );
}
