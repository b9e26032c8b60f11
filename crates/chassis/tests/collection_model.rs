//! Model-based property test of collections (integrity round three): random sequences of
//! batch adds (automatic or chosen ids), upserts, metadata changes and deletes, some of them
//! failing (a bad row, an id given twice or already live, an id not live, a shard whose write
//! fails after it succeeded), flushes, drops without a flush and reopens, against an exact
//! model. After every step the collection holds exactly the model's ids, vectors and metadata
//! (a failed call changes nothing), every stored vector is its own nearest neighbor, automatic
//! ids are never handed out twice by one handle, and a reopen shows exactly the last flush.
//! `PROPTEST_CASES` sets the cases.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chassis::{Collection, Error, Metadata, Metric, Value};
use proptest::prelude::*;

const SHARDS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    /// Rows (vector numbers), chosen ids or automatic, a row made NaN.
    Add(Vec<u8>, Option<Vec<u16>>, Option<usize>),
    /// Ids (from a small space, so some are live) with vector and document numbers.
    Upsert(Vec<(u16, u8, u8)>, Option<usize>),
    SetMetadata(Vec<u16>, u8),
    Delete(Vec<u16>),
    /// The next write fails in this shard after the shard's part succeeded.
    FailShard(usize),
    Flush,
    DropUnflushed,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let rows = proptest::collection::vec(any::<u8>(), 1..8);
    prop_oneof![
        3 => (rows.clone(), proptest::option::of(proptest::collection::vec(0u16..96, 1..8)),
              proptest::option::weighted(0.2, 0usize..8))
            .prop_map(|(r, ids, bad)| {
                let ids = ids.map(|mut i| { i.resize(r.len(), 0); i });
                Op::Add(r, ids, bad)
            }),
        2 => (proptest::collection::vec((0u16..96, any::<u8>(), any::<u8>()), 1..6),
              proptest::option::weighted(0.15, 0usize..6))
            .prop_map(|(r, bad)| Op::Upsert(r, bad)),
        1 => (proptest::collection::vec(0u16..96, 1..4), any::<u8>())
            .prop_map(|(ids, m)| Op::SetMetadata(ids, m)),
        2 => proptest::collection::vec(0u16..96, 1..4).prop_map(Op::Delete),
        1 => (0usize..SHARDS).prop_map(Op::FailShard),
        2 => Just(Op::Flush),
        1 => Just(Op::DropUnflushed),
        1 => Just(Op::Reopen),
    ]
}

fn vector(n: u8) -> Vec<f32> {
    let x = f32::from(n);
    vec![
        (x * 0.37).sin() * 3.0 + x * 0.01,
        (x * 0.11).cos() * 3.0,
        x * 0.05,
        (x * 1.7).sin(),
    ]
}

fn document(m: u8) -> Metadata {
    Metadata::from([
        ("m".to_string(), Value::Int(i64::from(m))),
        ("s".to_string(), Value::from(format!("d{}", m % 7))),
    ])
}

type Model = BTreeMap<u64, (Vec<f32>, Metadata)>;

fn check(c: &Collection, model: &Model, touched: &BTreeSet<u64>) -> Result<(), TestCaseError> {
    prop_assert_eq!(c.len().unwrap(), model.len() as u64);
    for id in touched {
        match model.get(id) {
            Some((v, d)) => {
                prop_assert_eq!(&c.get(*id).unwrap(), v);
                prop_assert_eq!(&c.get_metadata(*id).unwrap(), d);
            }
            None => prop_assert!(!c.contains(*id).unwrap(), "{} should not be live", id),
        }
    }
    for (id, (v, _)) in model {
        let hits = c.search(v, 1, 64, None, 1).unwrap();
        prop_assert!(
            hits.len() == 1 && hits[0].distance == 0.0 && model.contains_key(&hits[0].id),
            "{} not its own nearest: {:?}",
            id,
            hits
        );
    }
    Ok(())
}

fn open(dir: &Path) -> Collection {
    Collection::open(dir).unwrap()
}

fn run(dir: &Path, ops: &[Op]) -> Result<(), TestCaseError> {
    let opts = common::small(4, Metric::L2Squared, 8, 32);
    let mut c = Collection::create(dir, opts, SHARDS).unwrap();
    let mut model = Model::new();
    let mut flushed = Model::new();
    let mut touched = BTreeSet::new();
    // Automatic ids this handle gave out (or may have: a failed call's).
    let mut handed_out: BTreeSet<u64> = BTreeSet::new();
    let mut fail_next = false;
    for op in ops {
        match op {
            Op::Add(rows, ids, bad) => {
                let mut flat: Vec<f32> = rows.iter().flat_map(|&n| vector(n)).collect();
                let bad = bad.filter(|&b| b < rows.len());
                if let Some(b) = bad {
                    flat[b * 4 + 1] = f32::NAN;
                }
                let docs: Vec<Metadata> = rows.iter().map(|&n| document(n)).collect();
                let ids: Option<Vec<u64>> = ids
                    .as_ref()
                    .map(|i| i.iter().map(|&x| u64::from(x)).collect());
                let expect_dup = ids.as_ref().is_some_and(|i| {
                    let set: BTreeSet<u64> = i.iter().copied().collect();
                    set.len() != i.len() || i.iter().any(|id| model.contains_key(id))
                });
                let injected = std::mem::take(&mut fail_next);
                let r = c.add(ids.as_deref(), &flat, Some(&docs));
                let io = matches!(r, Err(Error::Io(_)));
                match r {
                    Ok(got) => {
                        prop_assert!(bad.is_none() && !expect_dup && !injected, "{:?}", op);
                        if ids.is_none() {
                            for id in &got {
                                prop_assert!(handed_out.insert(*id), "id {} given twice", id);
                            }
                        }
                        for (id, (&n, d)) in got.iter().zip(rows.iter().zip(docs)) {
                            prop_assert!(!model.contains_key(id));
                            model.insert(*id, (vector(n), d));
                            touched.insert(*id);
                        }
                    }
                    Err(Error::InvalidVector { .. }) => prop_assert!(bad.is_some()),
                    Err(Error::DuplicateId { .. }) => prop_assert!(expect_dup),
                    Err(Error::Io(_)) => {
                        prop_assert!(injected, "{:?}", op);
                        // The ids a failed call got are never handed out again.
                        if ids.is_none() {
                            let next = handed_out.iter().max().map_or(0, |m| m + 1);
                            handed_out.extend(next..next + rows.len() as u64);
                        }
                    }
                    Err(e) => prop_assert!(false, "{:?}: {}", op, e),
                }
                if injected && !io {
                    // The call failed its checks before any shard: the failure stays armed.
                    fail_next = true;
                }
            }
            Op::Upsert(rows, bad) => {
                let ids: Vec<u64> = rows.iter().map(|r| u64::from(r.0)).collect();
                let mut flat: Vec<f32> = rows.iter().flat_map(|r| vector(r.1)).collect();
                let bad = bad.filter(|&b| b < rows.len());
                if let Some(b) = bad {
                    flat[b * 4] = f32::INFINITY;
                }
                let docs: Vec<Metadata> = rows.iter().map(|r| document(r.2)).collect();
                let dup = ids.iter().collect::<BTreeSet<_>>().len() != ids.len();
                let injected = std::mem::take(&mut fail_next);
                let r = c.upsert(&ids, &flat, Some(&docs));
                let io = matches!(r, Err(Error::Io(_)));
                match r {
                    Ok(()) => {
                        prop_assert!(bad.is_none() && !dup && !injected, "{:?}", op);
                        for (r, d) in rows.iter().zip(docs) {
                            model.insert(u64::from(r.0), (vector(r.1), d));
                            touched.insert(u64::from(r.0));
                        }
                    }
                    Err(Error::InvalidVector { .. }) => prop_assert!(bad.is_some()),
                    Err(Error::DuplicateId { .. }) => prop_assert!(dup),
                    Err(Error::Io(_)) => prop_assert!(injected),
                    Err(e) => prop_assert!(false, "{:?}: {}", op, e),
                }
                if injected && !io {
                    fail_next = true;
                }
            }
            Op::SetMetadata(ids, m) => {
                let ids: Vec<u64> = ids.iter().map(|&i| u64::from(i)).collect();
                let docs = vec![document(*m); ids.len()];
                let missing = ids.iter().any(|id| !model.contains_key(id));
                let dup = ids.iter().collect::<BTreeSet<_>>().len() != ids.len();
                let injected = std::mem::take(&mut fail_next);
                let r = c.set_metadata(&ids, &docs);
                let io = matches!(r, Err(Error::Io(_)));
                match r {
                    Ok(()) => {
                        prop_assert!(!missing && !dup && !injected, "{:?}", op);
                        for id in &ids {
                            if let Some(e) = model.get_mut(id) {
                                e.1 = document(*m);
                            }
                        }
                    }
                    Err(Error::NotFound { .. }) => prop_assert!(missing),
                    Err(Error::DuplicateId { .. }) => prop_assert!(dup),
                    Err(Error::Io(_)) => prop_assert!(injected),
                    Err(e) => prop_assert!(false, "{:?}: {}", op, e),
                }
                if injected && !io {
                    fail_next = true;
                }
            }
            Op::Delete(ids) => {
                let ids: Vec<u64> = ids.iter().map(|&i| u64::from(i)).collect();
                let missing = ids.iter().any(|id| !model.contains_key(id));
                let injected = std::mem::take(&mut fail_next);
                let r = c.delete(&ids);
                let io = matches!(r, Err(Error::Io(_)));
                match r {
                    Ok(()) => {
                        prop_assert!(!missing && !injected, "{:?}", op);
                        for id in &ids {
                            model.remove(id);
                        }
                    }
                    Err(Error::NotFound { .. }) => prop_assert!(missing),
                    Err(Error::Io(_)) => prop_assert!(injected),
                    Err(e) => prop_assert!(false, "{:?}: {}", op, e),
                }
                if injected && !io {
                    fail_next = true;
                }
            }
            Op::FailShard(s) => {
                c.fail_next_write_in_shard(*s);
                fail_next = true;
            }
            Op::Flush => {
                c.flush().unwrap();
                flushed = model.clone();
            }
            Op::DropUnflushed => {
                drop(c);
                c = open(dir);
                model = flushed.clone();
                handed_out.clear();
                fail_next = false;
            }
            Op::Reopen => {
                c.flush().unwrap();
                flushed = model.clone();
                c.close().unwrap();
                c = open(dir);
                handed_out.clear();
                fail_next = false;
            }
        }
        check(&c, &model, &touched)?;
    }
    drop(c);
    let c = open(dir);
    prop_assert_eq!(c.len().unwrap(), flushed.len() as u64);
    check(&c, &flushed, &touched)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_collection_behaves_like_its_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), &ops)?;
    }
}
