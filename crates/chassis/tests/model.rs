//! Model-based property test (hardening issue, item 4): random sequences of add, add_with_id,
//! delete, flush, drop-without-flush, reopen, compact and search, against a model that keeps
//! the live vectors in a map and searches exactly. After every step the index holds exactly
//! the model's ids; deleted ids are never returned; every stored vector is found as its own
//! nearest neighbor; a reopen shows exactly the last flush. `PROPTEST_CASES` sets the cases.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use chassis::{CompactOptions, Index, Metric};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    AddWithId(u16, u8),
    Delete(u16),
    Flush,
    DropUnflushed,
    Reopen,
    Compact(bool),
    Search(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u8>().prop_map(Op::Add),
        2 => (any::<u16>(), any::<u8>()).prop_map(|(i, v)| Op::AddWithId(i % 512, v)),
        3 => any::<u16>().prop_map(Op::Delete),
        2 => Just(Op::Flush),
        1 => Just(Op::DropUnflushed),
        1 => Just(Op::Reopen),
        1 => any::<bool>().prop_map(Op::Compact),
        2 => any::<u8>().prop_map(Op::Search),
    ]
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

type Model = BTreeMap<u64, Vec<f32>>;

fn state(ix: &Index) -> Model {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, ix.get(id).unwrap()))
        .collect()
}

fn check(ix: &Index, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(&state(ix), model);
    for (id, v) in model {
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
                model.insert(id, vector(*n));
            }
            Op::AddWithId(id, n) => {
                let id = u64::from(*id);
                let r = ix.add_with_id(id, &vector(*n));
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(id) {
                    r.unwrap();
                    e.insert(vector(*n));
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
                    .map(|w| {
                        w.iter()
                            .zip(vector(*n))
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum::<f32>()
                    })
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
