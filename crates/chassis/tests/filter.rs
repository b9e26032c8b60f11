//! Metadata and filtered search against brute force: every operator, on the writer (with
//! pending adds, deletes and metadata replacements), on a reader in the same process, after a
//! reopen and after a compaction; every strategy (scan, graph, graph then scan, two hops); exact answers
//! where the search scans, recall ≥ 0.95 where it walks the graph, and never fewer than
//! min(k, live vectors that pass).

mod common;

use std::collections::BTreeMap;

use chassis::filter::search::Strategy;
use chassis::graph::distance::reference;
use chassis::{
    CompactOptions, Error, Filter, Index, IndexReader, Metadata, Metric, Options, Value,
};
use common::{clustered, Rng};

const N: usize = 4000;
const DIMS: usize = 16;
const K: usize = 10;
const EF: usize = 64;

fn doc(i: usize, rng: &mut Rng) -> Metadata {
    let mut m = Metadata::new();
    let tenants = ["acme", "globex", "initech", "umbrella", "hooli"];
    m.insert("tenant".into(), Value::from(tenants[i % 5]));
    m.insert("year".into(), Value::Int(2000 + (i % 25) as i64));
    m.insert("score".into(), Value::Float(rng.uniform() as f64));
    m.insert("draft".into(), Value::Bool(i.is_multiple_of(3)));
    let tags: Vec<Value> = (0..(i % 4))
        .map(|j| Value::from(format!("t{}", (i * 7 + j * 13) % 40)))
        .collect();
    m.insert("tags".into(), Value::List(tags));
    if i.is_multiple_of(20) {
        m.insert("rare".into(), Value::Int(i as i64));
    }
    if i % 50 == 1 {
        m.insert("rare".into(), Value::Null);
    }
    // Integers and floats in one field.
    m.insert(
        "mixed".into(),
        if i.is_multiple_of(2) {
            Value::Int((i % 100) as i64)
        } else {
            Value::Float((i % 100) as f64 + 0.5)
        },
    );
    // Two fields that never hold 1 together: each passes half, their $and nothing.
    m.insert("odd".into(), Value::Int((i % 2) as i64));
    m.insert("even".into(), Value::Int(((i + 1) % 2) as i64));
    // Five documents with long lists of distinct integers (too many for a bitmap each, so
    // they go to sorted arrays, where a range counts list elements): the estimate takes
    // "burst ≥ 0" for most of the index, the graph search gives up and scans.
    if i % 800 == 5 {
        m.insert(
            "burst".into(),
            Value::List(
                (0..1000)
                    .map(|j| Value::Int((i * 1000 + j) as i64))
                    .collect(),
            ),
        );
    }
    m
}

fn filters() -> Vec<&'static str> {
    vec![
        r#"{}"#,
        r#"{"tenant": "acme"}"#,
        r#"{"tenant": {"$ne": "acme"}}"#,
        r#"{"tenant": {"$in": ["globex", "hooli"]}}"#,
        r#"{"tenant": {"$nin": ["globex", "hooli", "acme"]}}"#,
        r#"{"tenant": {"$gt": "h"}}"#,
        r#"{"year": 2010}"#,
        r#"{"year": {"$gte": 2020}}"#,
        r#"{"year": {"$gt": 2003, "$lte": 2005.5}}"#,
        r#"{"score": {"$lt": 0.01}}"#,
        r#"{"score": {"$gte": 0.5}}"#,
        r#"{"draft": true}"#,
        r#"{"draft": {"$ne": true}}"#,
        r#"{"tags": {"$contains": "t7"}}"#,
        r#"{"tags": {"$in": ["t1", "t2", "t3"]}}"#,
        r#"{"tags": {"$exists": true}}"#,
        r#"{"rare": {"$exists": true}}"#,
        r#"{"rare": null}"#,
        r#"{"rare": {"$gt": 3000}}"#,
        r#"{"nope": {"$exists": false}}"#,
        r#"{"nope": 1}"#,
        r#"{"mixed": 10}"#,
        r#"{"mixed": 11.5}"#,
        r#"{"mixed": {"$gt": 97}}"#,
        r#"{"$or": [{"tenant": "acme", "year": 2001}, {"rare": {"$exists": true}}]}"#,
        r#"{"$and": [{"tags": {"$contains": "t3"}}, {"year": {"$lt": 2012}}]}"#,
        r#"{"$not": {"tenant": {"$in": ["acme", "globex"]}}}"#,
        r#"{"year": {"$not": {"$gte": 2002}}}"#,
        r#"{"odd": 1, "even": 1}"#,
        r#"{"burst": {"$gte": 0}}"#,
    ]
}

type Searcher<'a> = dyn Fn(&[f32], &Filter) -> (Vec<chassis::Neighbor>, Strategy) + 'a;

struct World {
    data: Vec<Vec<f32>>,
    docs: Vec<Metadata>,
    /// id → (row in data, metadata row) for live ids.
    live: BTreeMap<u64, (usize, usize)>,
}

impl World {
    /// The exact top k among live ids whose document passes.
    fn truth(&self, q: &[f32], k: usize, f: &Filter) -> Vec<(u64, f32)> {
        let mut d: Vec<(f32, u64)> = self
            .live
            .iter()
            .filter(|(_, (_, m))| f.matches_metadata(&self.docs[*m]))
            .map(|(id, (row, _))| (reference::l2sq(&self.data[*row], q), *id))
            .collect();
        d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        d.into_iter().take(k).map(|(x, id)| (id, x)).collect()
    }

    fn passing(&self, f: &Filter) -> usize {
        self.live
            .values()
            .filter(|(_, m)| f.matches_metadata(&self.docs[*m]))
            .count()
    }
}

/// Checks every filter on `search`; returns the strategies seen.
fn check_all(w: &World, what: &str, search: &Searcher<'_>) -> Vec<Strategy> {
    let mut rng = Rng::new(77);
    let mut seen = Vec::new();
    for text in filters() {
        let f = Filter::parse(text).unwrap();
        let passing = w.passing(&f);
        let (mut found, mut total) = (0, 0);
        for _ in 0..12 {
            let base = &w.data[rng.below(w.data.len())];
            let q: Vec<f32> = base.iter().map(|x| x + 0.3 * rng.normal()).collect();
            let truth = w.truth(&q, K, &f);
            let (hits, strategy) = search(&q, &f);
            seen.push(strategy);
            assert_eq!(
                hits.len(),
                K.min(passing),
                "{what} {text}: min(k, passing) results"
            );
            for h in &hits {
                let (_, m) = w.live[&h.id];
                assert!(
                    f.matches_metadata(&w.docs[m]),
                    "{what} {text}: {} fails",
                    h.id
                );
            }
            if strategy != Strategy::Graph {
                let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
                let want: Vec<u64> = truth.iter().map(|t| t.0).collect();
                assert_eq!(got, want, "{what} {text} ({strategy:?}): exact");
            }
            for (h, t) in hits.iter().zip(&truth) {
                // Every returned distance is exact (to float summation order).
                let (row, _) = w.live[&h.id];
                let d = reference::l2sq(&w.data[row], &q);
                assert!((h.distance - d).abs() <= 1e-4 * d.max(1.0), "{what} {text}");
                let _ = t;
            }
            let want: std::collections::HashSet<u64> = truth.iter().map(|t| t.0).collect();
            found += hits.iter().filter(|h| want.contains(&h.id)).count();
            total += truth.len();
        }
        let recall = if total == 0 {
            1.0
        } else {
            found as f64 / total as f64
        };
        assert!(recall >= 0.95, "{what} {text}: recall {recall:.3}");
    }
    seen
}

fn build(path: &std::path::Path) -> (Index, World) {
    let data = clustered(N, DIMS, 12, 5);
    let mut rng = Rng::new(9);
    let docs: Vec<Metadata> = (0..N).map(|i| doc(i, &mut rng)).collect();
    let opts = Options::new(DIMS, Metric::L2Squared).ef_construction(100);
    let ix = Index::create(path, opts).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let ids = ix
        .add_batch_with_metadata(None, &flat[..flat.len() / 2], &docs[..N / 2], 2)
        .unwrap();
    // The other half one by one, some without metadata.
    let mut w = World {
        data: data.clone(),
        docs: docs.clone(),
        live: ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, (i, i)))
            .collect(),
    };
    w.docs.push(Metadata::new()); // row N: the empty document
    for i in N / 2..N {
        let id = if i % 97 == 0 {
            let id = ix.add(&data[i]).unwrap();
            w.live.insert(id, (i, N));
            continue;
        } else {
            ix.add_with_metadata(&data[i], &docs[i]).unwrap()
        };
        w.live.insert(id, (i, i));
    }
    (ix, w)
}

#[test]
fn filtered_search_matches_brute_force_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.chassis");
    let (ix, mut w) = build(&path);
    let mut seen = check_all(&w, "writer, unflushed", &|q: &[f32], f: &Filter| {
        ix.search_filtered_with(q, K, EF, f).unwrap()
    });
    ix.flush().unwrap();
    assert_eq!(
        ix.info().unwrap().versions,
        (6, 6),
        "metadata needs write version 5: planar split halves have 6 already"
    );

    // A reader in this process sees the committed state.
    let reader = IndexReader::open(&path).unwrap();
    seen.extend(check_all(&w, "reader", &|q, f| {
        let snap = reader.snapshot().unwrap();
        reader.search_in_filtered(&snap, q, K, EF, f).unwrap()
    }));

    // Deletes and replaced metadata, pending: the writer sees them, the reader does not yet.
    let mut rng = Rng::new(3);
    let ids: Vec<u64> = w.live.keys().copied().collect();
    for &id in ids.iter().step_by(7) {
        ix.delete(id).unwrap();
        w.live.remove(&id);
    }
    let mut replaced = Vec::new();
    for &id in ids.iter().skip(3).step_by(11) {
        if !w.live.contains_key(&id) {
            continue;
        }
        let mut m = doc(rng.below(N), &mut rng);
        m.insert("tenant".into(), Value::from("replaced"));
        w.docs.push(m.clone());
        ix.set_metadata(id, &m).unwrap();
        let (row, _) = w.live[&id];
        w.live.insert(id, (row, w.docs.len() - 1));
        replaced.push(id);
        assert_eq!(ix.get_metadata(id).unwrap(), m);
    }
    let f = Filter::eq("tenant", "replaced");
    assert_eq!(w.passing(&f), replaced.len());
    seen.extend(check_all(
        &w,
        "writer, pending deletes and replacements",
        &|q: &[f32], f: &Filter| ix.search_filtered_with(q, K, EF, f).unwrap(),
    ));
    let before = reader.search_filtered(&w.data[0], K, EF, &f).unwrap();
    assert!(
        before.is_empty(),
        "a reader sees replacements only once flushed"
    );

    ix.flush().unwrap();
    seen.extend(check_all(&w, "reader after the flush", &|q, f| {
        let snap = reader.snapshot().unwrap();
        reader.search_in_filtered(&snap, q, K, EF, f).unwrap()
    }));
    for &id in &replaced {
        assert_eq!(
            reader.get_metadata(id).unwrap(),
            w.docs[w.live[&id].1],
            "reader metadata of {id}"
        );
    }
    drop(ix);

    // Reopened, and compacted: the same answers, the same metadata.
    let ix = Index::open(&path).unwrap();
    seen.extend(check_all(&w, "reopened", &|q: &[f32], f: &Filter| {
        ix.search_filtered_with(q, K, EF, f).unwrap()
    }));
    ix.compact(CompactOptions::default()).unwrap();
    assert_eq!(ix.info().unwrap().versions, (6, 6));
    seen.extend(check_all(&w, "compacted", &|q: &[f32], f: &Filter| {
        ix.search_filtered_with(q, K, EF, f).unwrap()
    }));
    for (&id, &(_, m)) in w.live.iter().step_by(13) {
        assert_eq!(ix.get_metadata(id).unwrap(), w.docs[m], "metadata of {id}");
    }
    let check = ix.check(0).unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);

    for s in [Strategy::Scan, Strategy::Graph, Strategy::GraphThenScan] {
        assert!(seen.contains(&s), "no search took {s:?}");
    }
}

#[test]
fn metadata_is_checked_before_anything_is_added() {
    let ix = Index::in_memory(Options::new(4, Metric::Cosine), 64 << 20).unwrap();
    let good = Metadata::from([("a".to_string(), Value::Int(1))]);
    let bad = Metadata::from([("$a".to_string(), Value::Int(1))]);
    let err = ix
        .add_batch_with_metadata(
            None,
            &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
            &[good.clone(), bad],
            1,
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("row 1")),
        "{err}"
    );
    assert_eq!(ix.len(), 0);
    let big = Metadata::from([("text".to_string(), Value::Str("x".repeat(70_000)))]);
    assert!(matches!(
        ix.add_with_metadata(&[1.0, 0.0, 0.0, 0.0], &big),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ix.len(), 0);
    let id = ix.add_with_metadata(&[1.0, 0.0, 0.0, 0.0], &good).unwrap();
    assert!(matches!(
        ix.search_filtered(&[1.0, 0.0, 0.0, 0.0], 1, 10, &Filter::gt("a", true)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ix.set_metadata(id + 1, &good),
        Err(Error::NotFound { .. })
    ));
    // A replacement keeps the vector bit for bit (cosine: the stored unit vector).
    let v = ix.get(id).unwrap();
    ix.set_metadata(id, &Metadata::new()).unwrap();
    assert_eq!(ix.get(id).unwrap(), v);
    assert!(ix.get_metadata(id).unwrap().is_empty());
    assert_eq!(ix.len(), 1);
    // Upsert: replaces vector and metadata under the same id.
    ix.upsert(id, &[0.0, 1.0, 0.0, 0.0], &good).unwrap();
    assert_eq!(ix.get(id).unwrap(), vec![0.0, 1.0, 0.0, 0.0]);
    assert_eq!(ix.get_metadata(id).unwrap(), good);
    assert_eq!(ix.len(), 1);
    ix.upsert(77, &[0.0, 0.0, 1.0, 0.0], &good).unwrap();
    assert_eq!(ix.len(), 2);
}

/// Between 3% and 30% passing, past the scan cutoff, the graph search scores only slots that
/// pass, reaching them through two hops: recall ≥ 0.95 against brute force on 20,000
/// clustered vectors at 10%, 20% and 25% passing (ef 24, so each filter is past the scan
/// cutoff), every hit passes and is live, every distance exact.
#[test]
fn two_hop_search_finds_the_slots_that_pass() {
    const N2: usize = 20_000;
    let data = clustered(N2, DIMS, 20, 11);
    let docs: Vec<Metadata> = (0..N2)
        .map(|i| {
            let mut m = Metadata::new();
            m.insert("group".into(), Value::Int((i % 10) as i64));
            m.insert("quarter".into(), Value::Bool(i.is_multiple_of(4)));
            m
        })
        .collect();
    let ix = Index::in_memory(
        Options::new(DIMS, Metric::L2Squared).ef_construction(100),
        256 << 20,
    )
    .unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let ids = ix.add_batch_with_metadata(None, &flat, &docs, 2).unwrap();
    // Deleted slots that pass must never come back.
    let mut deleted = std::collections::HashSet::new();
    for (i, &id) in ids.iter().enumerate().step_by(13) {
        ix.delete(id).unwrap();
        deleted.insert(i);
    }
    ix.flush().unwrap();
    let mut rng = Rng::new(5);
    for (text, pass) in [
        (
            r#"{"group": 3}"#,
            &(|i: usize| i % 10 == 3) as &dyn Fn(usize) -> bool,
        ),
        (r#"{"group": {"$lt": 2}}"#, &|i: usize| i % 10 < 2),
        (r#"{"quarter": true}"#, &|i: usize| i.is_multiple_of(4)),
    ] {
        let f = Filter::parse(text).unwrap();
        let (mut found, mut total) = (0, 0);
        for _ in 0..30 {
            let base = &data[rng.below(N2)];
            let q: Vec<f32> = base.iter().map(|x| x + 0.3 * rng.normal()).collect();
            let (hits, strategy) = ix.search_filtered_with(&q, K, 24, &f).unwrap();
            assert_eq!(strategy, Strategy::TwoHop, "{text}");
            assert_eq!(hits.len(), K, "{text}");
            let mut truth: Vec<(f32, usize)> = (0..N2)
                .filter(|&i| pass(i) && !deleted.contains(&i))
                .map(|i| (reference::l2sq(&data[i], &q), i))
                .collect();
            truth.sort_by(|a, b| a.0.total_cmp(&b.0));
            let want: std::collections::HashSet<u64> =
                truth.iter().take(K).map(|t| ids[t.1]).collect();
            for h in &hits {
                let i = ids.iter().position(|&x| x == h.id).unwrap();
                assert!(pass(i) && !deleted.contains(&i), "{text}: {} fails", h.id);
                let d = reference::l2sq(&data[i], &q);
                assert!((h.distance - d).abs() <= 1e-4 * d.max(1.0), "{text}: exact");
            }
            found += hits.iter().filter(|h| want.contains(&h.id)).count();
            total += K;
        }
        let recall = found as f64 / total as f64;
        assert!(recall >= 0.95, "{text}: recall {recall:.3}");
    }
}
