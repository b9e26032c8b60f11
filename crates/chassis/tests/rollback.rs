//! `rollback()`, the user version, all-or-nothing writes and automatic ids at the top of the
//! id space (integrity round three).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use chassis::os::{FaultKind, MemStorage};
use chassis::{Error, Index, IndexReader, Metadata, Metric, Value};
use common::{clustered, Rng};

type State = BTreeMap<u64, (Vec<f32>, Metadata)>;

fn state_of(ix: &Index) -> State {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, (ix.get(id).unwrap(), ix.get_metadata(id).unwrap())))
        .collect()
}

fn doc(n: i64) -> Metadata {
    Metadata::from([("n".to_string(), Value::Int(n))])
}

/// Every stored vector is found as its own nearest neighbor and every id returned is live.
fn searches_agree(ix: &Index, state: &State, what: &str) {
    for (&id, (v, _)) in state.iter().step_by(7) {
        let hits = ix.search(v, 3, 64).unwrap();
        assert_eq!(hits.first().map(|h| h.id), Some(id), "{what}: {id}");
        for h in hits {
            assert!(state.contains_key(&h.id), "{what}: {} not live", h.id);
        }
    }
}

#[test]
fn rollback_discards_every_change_since_the_flush_and_keeps_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    let data = clustered(600, 8, 6, 1);
    let ix = Index::create(&path, common::small(8, Metric::L2Squared, 8, 32)).unwrap();
    let first: Vec<f32> = data[..300].concat();
    let docs: Vec<Metadata> = (0..300).map(doc).collect();
    ix.add_batch_with_metadata(None, &first, &docs, 1).unwrap();
    ix.set_user_version(41).unwrap();
    ix.flush().unwrap();
    let flushed = state_of(&ix);
    assert_eq!(ix.info().unwrap().user_version, 41);

    // Adds (batch and single), deletes, a metadata change, an upsert, a new user version.
    let rest: Vec<f32> = data[300..550].concat();
    let more = ix.add_batch(&rest, 2).unwrap();
    ix.add(&data[550]).unwrap();
    ix.delete_many(&[3, 4, 5, more[0]]).unwrap();
    ix.set_metadata(10, &doc(-1)).unwrap();
    ix.upsert(11, &data[560], &doc(-2)).unwrap();
    ix.set_user_version(42).unwrap();
    assert_eq!(ix.user_version(), 42);
    assert!(ix.has_pending_changes());

    ix.rollback().unwrap();
    assert!(!ix.has_pending_changes());
    assert_eq!(ix.user_version(), 41);
    assert_eq!(
        state_of(&ix),
        flushed,
        "the writer sees the flushed state again"
    );
    searches_agree(&ix, &flushed, "after rollback");
    assert!(
        matches!(Index::open(&path), Err(Error::Locked)),
        "the lock is kept"
    );

    // The discarded adds' ids and slots are reused (ids are slots in this file).
    let id = ix.add(&data[570]).unwrap();
    assert_eq!(id, more[0]);
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open(&path).unwrap();
    let mut want = flushed.clone();
    want.insert(id, (data[570].clone(), Metadata::new()));
    assert_eq!(state_of(&ix), want);
    assert_eq!(ix.info().unwrap().user_version, 41);
    let report = ix.check(50).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    searches_agree(&ix, &want, "reopened");
}

#[test]
fn rollback_with_nothing_pending_does_nothing_and_a_clean_close_follows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    let data = clustered(200, 4, 3, 2);
    let ix = Index::create(&path, common::small(4, Metric::Cosine, 8, 32)).unwrap();
    ix.add_batch(&data.concat(), 1).unwrap();
    ix.flush().unwrap();
    let before = state_of(&ix);
    ix.rollback().unwrap();
    assert_eq!(state_of(&ix), before);
    // Adds then a rollback then a close: the marker it leaves must be true (check reads
    // every list; a list naming a discarded slot would be a problem).
    ix.add_batch(&clustered(50, 4, 3, 3).concat(), 1).unwrap();
    ix.rollback().unwrap();
    ix.close().unwrap();
    let ix = Index::open(&path).unwrap();
    assert!(ix.open_report().clean);
    assert_eq!(state_of(&ix), before);
    assert!(ix.check(20).unwrap().problems.is_empty());
}

/// Searches on other threads run through the rollback; a later add waits for the ones that
/// could still read the discarded slots before it reuses them.
#[test]
fn searches_run_through_a_rollback_and_never_see_a_mix() {
    let data = clustered(800, 8, 8, 4);
    let ix =
        Arc::new(Index::in_memory(common::small(8, Metric::L2Squared, 8, 32), 64 << 20).unwrap());
    ix.add_batch(&data[..400].concat(), 1).unwrap();
    ix.flush().unwrap();
    let committed = state_of(&ix);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let searchers: Vec<_> = (0..2)
        .map(|t| {
            let (ix, stop, data) = (Arc::clone(&ix), Arc::clone(&stop), data.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(t);
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let q = &data[rng.below(data.len())];
                    let hits = ix.search(q, 5, 32).unwrap();
                    for w in hits.windows(2) {
                        assert!(w[0].distance <= w[1].distance);
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for round in 0..6 {
        ix.add_batch(&data[400..800].concat(), 2).unwrap();
        ix.rollback().unwrap();
        assert_eq!(state_of(&ix), committed, "round {round}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in searchers {
        assert!(s.join().unwrap() > 0);
    }
    ix.add_batch(&data[400..800].concat(), 2).unwrap();
    assert_eq!(ix.len(), 800);
}

/// A write that fails after its checks (an I/O error while writing slots) leaves nothing
/// behind: not in searches, not in the next flush.
#[test]
fn a_failed_batch_or_upsert_leaves_the_index_as_it_was() {
    let data = clustered(500, 8, 5, 5);
    let mem = MemStorage::new(64 << 20).unwrap();
    let ix = Index::create_in(
        Arc::new(mem.reopen(true)),
        common::small(8, Metric::L2Squared, 8, 32),
    )
    .unwrap();
    let ids: Vec<u64> = (0..200).map(|i| 1000 + i).collect();
    let docs: Vec<Metadata> = (0..200).map(doc).collect();
    ix.add_batch_with_metadata(Some(&ids), &data[..200].concat(), &docs, 1)
        .unwrap();
    ix.flush().unwrap();
    ix.add_batch(&data[200..260].concat(), 1).unwrap();
    let before = state_of(&ix);
    let mut failed = 0;
    for n in 1..40 {
        mem.inject_fault(n, FaultKind::NoSpace, false);
        let new: Vec<u64> = (0..150).map(|i| 5000 + i).collect();
        let docs: Vec<Metadata> = (0..150).map(|i| doc(i + 7)).collect();
        let r = ix.add_batch_with_metadata(Some(&new), &data[260..410].concat(), &docs, 2);
        mem.clear_fault();
        match r {
            Err(Error::Io(_)) => {
                failed += 1;
                assert_eq!(state_of(&ix), before, "fault at call {n}");
            }
            Ok(_) => {
                ix.delete_many(&new).unwrap();
                ix.rollback().unwrap();
                ix.add_batch(&data[200..260].concat(), 1).unwrap();
                assert_eq!(ix.len(), before.len());
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed > 0, "no fault hit the batch");

    // upsert_many: the new rows go in as a batch first, then a live row's bad vector fails
    // the call; nothing of it stays.
    let before = state_of(&ix);
    let mut rows = data[410..413].concat();
    rows.extend(std::iter::repeat_n(f32::NAN, 8));
    let r = ix.upsert_many(&[9001, 9002, 9003, 1000], &rows, &vec![doc(1); 4]);
    assert!(matches!(r, Err(Error::InvalidVector { .. })), "{r:?}");
    assert_eq!(state_of(&ix), before);
    ix.flush().unwrap();
    let reopened = Index::open_in(Arc::new(mem.reopen(true)));
    drop(ix);
    let ix = reopened
        .or_else(|_| Index::open_in(Arc::new(mem.reopen(true))))
        .unwrap();
    assert_eq!(
        state_of(&ix),
        before,
        "the flush published nothing of the failed calls"
    );
}

#[test]
fn automatic_ids_never_pass_the_top_of_the_id_space() {
    let data = clustered(8, 4, 2, 6);
    let ix = Index::in_memory(common::small(4, Metric::L2Squared, 8, 32), 8 << 20).unwrap();
    ix.add_with_id(u64::MAX - 3, &data[0]).unwrap();
    let got = ix.add_batch(&data[1..3].concat(), 1).unwrap();
    assert_eq!(got, vec![u64::MAX - 2, u64::MAX - 1]);
    // One more fits exactly (2^64 − 1 itself).
    assert_eq!(ix.add(&data[3]).unwrap(), u64::MAX);
    let before = ix.len();
    for r in [
        ix.add(&data[4]).map(|_| ()),
        ix.add_batch(&data[4..6].concat(), 1).map(|_| ()),
        ix.add_with_metadata(&data[4], &doc(1)).map(|_| ()),
    ] {
        match r {
            Err(Error::IdsExhausted { next, .. }) => assert_eq!(next, u64::MAX),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ix.len(), before);
    // Caller-chosen ids still work; a batch naming one id twice is refused whole.
    ix.add_with_id(7, &data[4]).unwrap();
    assert!(matches!(
        ix.add_batch_with_ids(&[8, 9, 8], &data[5..8].concat(), 1),
        Err(Error::DuplicateId { id: 8 })
    ));
    assert_eq!(ix.len(), before + 1);

    // A batch of automatic ids that would cross the top is refused before anything.
    let ix = Index::in_memory(common::small(4, Metric::L2Squared, 8, 32), 8 << 20).unwrap();
    ix.add_with_id(u64::MAX - 3, &data[0]).unwrap();
    assert!(matches!(
        ix.add_batch(&data[1..5].concat(), 1),
        Err(Error::IdsExhausted { next, count: 4 }) if next == u64::MAX - 2
    ));
    assert_eq!(ix.len(), 1);
}

/// The user version reaches readers only with the flush that commits it, and survives
/// reopening; a file that has one is write version 8.
#[test]
fn the_user_version_is_committed_with_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.chassis");
    let data = clustered(40, 4, 2, 7);
    let ix = Index::create(&path, common::small(4, Metric::L2Squared, 8, 32)).unwrap();
    assert_eq!(ix.info().unwrap().versions.1, 6);
    let reader = IndexReader::open(&path).unwrap();
    ix.add_batch(&data[..20].concat(), 1).unwrap();
    ix.set_user_version(7).unwrap();
    assert_eq!(reader.user_version().unwrap(), 0);
    ix.flush().unwrap();
    assert_eq!(reader.user_version().unwrap(), 7);
    let snap = reader.snapshot().unwrap();
    assert_eq!((snap.user_version(), snap.len()), (7, 20));
    // Setting it alone is a change the next flush commits.
    ix.set_user_version(8).unwrap();
    assert!(ix.has_pending_changes());
    ix.flush().unwrap();
    assert_eq!(reader.user_version().unwrap(), 8);
    assert_eq!(ix.info().unwrap().versions.1, 8);
    drop(ix);
    let ro = Index::open_read_only(&path).unwrap();
    assert_eq!(ro.info().unwrap().user_version, 8);
    assert!(matches!(
        ro.set_user_version(9),
        Err(Error::ReadOnly { .. })
    ));
}
