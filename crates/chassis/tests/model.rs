//! Model-based property test (hardening issue, item 4; metadata issue): random sequences of
//! add (with or without metadata), add_with_id, set_metadata, upsert, delete, flush,
//! drop-without-flush, reopen, compact, search and filtered search, against a model that keeps
//! the live vectors and their metadata in a map and searches exactly (filters evaluated on the
//! model's documents). After every step the index holds exactly the model's ids, vectors and
//! metadata; deleted ids are never returned; every stored vector is found as its own nearest
//! neighbor; a filtered search returns min(k, passing) ids that all pass, the nearest at the
//! model's distance; a reopen shows exactly the last flush. `PROPTEST_CASES` sets the cases.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use chassis::{CompactOptions, Filter, Index, Metadata, Metric, Value};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    AddWithMetadata(u8, u8),
    AddWithId(u16, u8),
    SetMetadata(u16, u8),
    Upsert(u16, u8, u8),
    Delete(u16),
    Flush,
    DropUnflushed,
    Reopen,
    Compact(bool),
    Search(u8),
    SearchFiltered(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Add),
        4 => (any::<u8>(), any::<u8>()).prop_map(|(v, m)| Op::AddWithMetadata(v, m)),
        2 => (any::<u16>(), any::<u8>()).prop_map(|(i, v)| Op::AddWithId(i % 512, v)),
        1 => (any::<u16>(), any::<u8>()).prop_map(|(k, m)| Op::SetMetadata(k, m)),
        1 => (any::<u16>(), any::<u8>(), any::<u8>()).prop_map(|(i, v, m)| Op::Upsert(i % 512, v, m)),
        3 => any::<u16>().prop_map(Op::Delete),
        2 => Just(Op::Flush),
        1 => Just(Op::DropUnflushed),
        1 => Just(Op::Reopen),
        1 => any::<bool>().prop_map(Op::Compact),
        2 => any::<u8>().prop_map(Op::Search),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(n, f)| Op::SearchFiltered(n, f)),
    ]
}

/// Document number `m` (a fixed table: every value type, and sometimes none).
fn document(m: u8) -> Metadata {
    let mut d = Metadata::new();
    if m.is_multiple_of(9) {
        return d;
    }
    d.insert("g".into(), Value::Int(i64::from(m % 4)));
    d.insert("x".into(), Value::Float(f64::from(m) / 10.0));
    d.insert(
        "s".into(),
        Value::from(["red", "green", "blue"][usize::from(m % 3)]),
    );
    d.insert(
        "t".into(),
        Value::List(
            (0..m % 3)
                .map(|j| Value::from(format!("t{}", (m + j) % 5)))
                .collect(),
        ),
    );
    if m.is_multiple_of(5) {
        d.insert("n".into(), Value::Null);
    }
    d
}

/// The filters a filtered search draws from.
fn filter(f: u8) -> Filter {
    let all = [
        r#"{"g": 1}"#,
        r#"{"g": {"$in": [0, 3]}}"#,
        r#"{"x": {"$gte": 5, "$lt": 15.5}}"#,
        r#"{"s": {"$ne": "red"}}"#,
        r#"{"t": {"$contains": "t2"}}"#,
        r#"{"n": {"$exists": true}}"#,
        r#"{"$or": [{"g": 2}, {"s": "blue"}]}"#,
        r#"{"$not": {"t": {"$exists": true}}}"#,
        r#"{"g": 99}"#,
        r#"{}"#,
    ];
    Filter::parse(all[usize::from(f) % all.len()]).unwrap()
}

/// Vector number `n` (a fixed table, so ids map to known vectors).
fn vector(n: u8) -> Vec<f32> {
    let x = f32::from(n);
    vec![
        (x * 0.37).sin() * 3.0,
        (x * 0.11).cos() * 3.0,
        x * 0.05,
        (x * 1.7).sin(),
    ]
}

type Model = BTreeMap<u64, (Vec<f32>, Metadata)>;

fn state(ix: &Index) -> Model {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, (ix.get(id).unwrap(), ix.get_metadata(id).unwrap())))
        .collect()
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn check(ix: &Index, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(&state(ix), model);
    for (id, (v, _)) in model {
        let hits = ix.search(v, 1, 64).unwrap();
        // Duplicate vectors may tie: the hit must be at distance 0 and stored.
        prop_assert!(
            hits.len() == 1 && hits[0].distance == 0.0 && model.contains_key(&hits[0].id),
            "id {} not found as its own nearest: {:?}",
            id,
            hits
        );
    }
    Ok(())
}

fn run(path: &Path, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut ix = Index::create(path, common::small(4, Metric::L2Squared, 8, 32)).unwrap();
    let mut model = Model::new();
    let mut flushed = Model::new();
    for op in ops {
        match op {
            Op::Add(n) => {
                let id = ix.add(&vector(*n)).unwrap();
                prop_assert!(!model.contains_key(&id), "add reused live id {}", id);
                model.insert(id, (vector(*n), Metadata::new()));
            }
            Op::AddWithMetadata(n, m) => {
                let id = ix.add_with_metadata(&vector(*n), &document(*m)).unwrap();
                prop_assert!(!model.contains_key(&id), "add reused live id {}", id);
                model.insert(id, (vector(*n), document(*m)));
            }
            Op::SetMetadata(k, m) => {
                let keys: Vec<u64> = model.keys().copied().collect();
                if keys.is_empty() {
                    prop_assert!(ix.set_metadata(u64::from(*k), &document(*m)).is_err());
                } else {
                    let id = keys[*k as usize % keys.len()];
                    ix.set_metadata(id, &document(*m)).unwrap();
                    if let Some(e) = model.get_mut(&id) {
                        e.1 = document(*m);
                    }
                }
            }
            Op::Upsert(id, n, m) => {
                let id = u64::from(*id);
                ix.upsert(id, &vector(*n), &document(*m)).unwrap();
                model.insert(id, (vector(*n), document(*m)));
            }
            Op::AddWithId(id, n) => {
                let id = u64::from(*id);
                let r = ix.add_with_id(id, &vector(*n));
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(id) {
                    r.unwrap();
                    e.insert((vector(*n), Metadata::new()));
                } else {
                    let duplicate = matches!(r, Err(chassis::Error::DuplicateId { .. }));
                    prop_assert!(duplicate, "a live id was added again: {:?}", r);
                }
            }
            Op::Delete(k) => {
                let keys: Vec<u64> = model.keys().copied().collect();
                if keys.is_empty() {
                    prop_assert!(ix.delete(u64::from(*k)).is_err());
                } else {
                    let id = keys[*k as usize % keys.len()];
                    ix.delete(id).unwrap();
                    model.remove(&id);
                }
            }
            Op::Flush => {
                ix.flush().unwrap();
                flushed = model.clone();
            }
            Op::DropUnflushed => {
                drop(ix);
                ix = Index::open(path).unwrap();
                model = flushed.clone();
            }
            Op::Reopen => {
                ix.flush().unwrap();
                flushed = model.clone();
                drop(ix);
                ix = Index::open(path).unwrap();
            }
            Op::Compact(change_m) => {
                let m = if *change_m { Some(12) } else { None };
                ix.compact(CompactOptions {
                    m,
                    ef_construction: None,
                    threads: 1,
                    vector_layout: None,
                    codes: None,
                    keep_graph: false,
                })
                .unwrap();
                flushed = model.clone();
            }
            Op::Search(n) => {
                let hits = ix.search(&vector(*n), 5, 64).unwrap();
                prop_assert_eq!(hits.len(), model.len().min(5));
                for h in &hits {
                    prop_assert!(model.contains_key(&h.id), "returned {} not live", h.id);
                }
                // Exact: the nearest distance equals the model's.
                let best = model
                    .values()
                    .map(|(w, _)| l2(w, &vector(*n)))
                    .fold(f32::INFINITY, f32::min);
                if let Some(h) = hits.first() {
                    prop_assert!(
                        (h.distance - best).abs() <= 1e-4,
                        "{} vs {}",
                        h.distance,
                        best
                    );
                }
            }
            Op::SearchFiltered(n, f) => {
                let f = filter(*f);
                let q = vector(*n);
                let hits = ix.search_filtered(&q, 5, 64, &f).unwrap();
                let passing: Vec<(f32, u64)> = model
                    .iter()
                    .filter(|(_, (_, d))| f.matches_metadata(d))
                    .map(|(id, (w, _))| (l2(w, &q), *id))
                    .collect();
                prop_assert_eq!(hits.len(), passing.len().min(5), "{:?}", f);
                for h in &hits {
                    let entry = model.get(&h.id);
                    prop_assert!(entry.is_some(), "returned {} not live", h.id);
                    if let Some((_, d)) = entry {
                        prop_assert!(f.matches_metadata(d), "{} fails {:?}", h.id, f);
                    }
                }
                let best = passing.iter().map(|p| p.0).fold(f32::INFINITY, f32::min);
                if let Some(h) = hits.first() {
                    prop_assert!(
                        (h.distance - best).abs() <= 1e-4,
                        "{} vs {}",
                        h.distance,
                        best
                    );
                }
            }
        }
        check(&ix, &model)?;
    }
    drop(ix);
    let ix = Index::open(path).unwrap();
    prop_assert_eq!(state(&ix), flushed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_index_behaves_like_its_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        run(&dir.path().join("m.chassis"), &ops)?;
    }
}
