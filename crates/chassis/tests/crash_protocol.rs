//! The crash-safe commit protocol step by step (decision 6): the intent header, recovery,
//! crashes inside recovery, poisoning after a failed fsync, and creation in place. Each durable
//! image the in-memory backend recorded at an fsync is a state a power loss can leave.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use chassis::format::header::{self, Header};
use chassis::os::MemStorage;
use chassis::{Error, Index, Metric, Options};
use common::clustered;

const CAP: usize = 64 << 20;

fn opts() -> Options {
    common::small(4, Metric::L2Squared, 4, 16)
}

fn copies(img: &[u8]) -> [Result<Header, Error>; 2] {
    [
        Header::decode(&img[..65_536], 0),
        Header::decode(&img[65_536..131_072], 65_536),
    ]
}

fn live_ids(ix: &Index) -> BTreeSet<u64> {
    ix.ids().unwrap().into_iter().collect()
}

fn open_image(img: &[u8]) -> Index {
    Index::open_in(Arc::new(MemStorage::from_image(img, CAP).unwrap())).unwrap()
}

fn read_only_image(img: &[u8]) -> Index {
    let s = MemStorage::from_image(img, CAP).unwrap();
    // A second handle opened without write access: no lock, no recovery.
    let ro = s.reopen(false);
    drop(s);
    let ix = Index::open_in_read_only(Arc::new(ro)).unwrap();
    assert!(ix.read_only().is_some());
    ix
}

/// Builds 40 committed vectors, then one flush that adds 10 and deletes 3 committed ids and one
/// of its own adds. Returns the storage (recording durable images during that flush), the
/// data, and the states before and after. The history ends with that flush (dropping the
/// writer then adds the clean-close marker's sync, which is not part of the flush).
#[allow(clippy::type_complexity)]
fn delete_flush() -> (
    Arc<MemStorage>,
    Vec<Vec<u8>>,
    Vec<Vec<f32>>,
    BTreeSet<u64>,
    BTreeSet<u64>,
) {
    let mem = Arc::new(MemStorage::new(CAP).unwrap());
    let data = clustered(60, 4, 3, 21);
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    for v in &data[..40] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    let before = live_ids(&ix);
    for v in &data[40..50] {
        ix.add(v).unwrap();
    }
    for id in [3, 17, 29, 45] {
        ix.delete(id).unwrap();
    }
    let after = live_ids(&ix);
    mem.record_durable_history(true);
    ix.flush().unwrap();
    let history = mem.durable_history();
    drop(ix);
    (mem, history, data, before, after)
}

#[test]
fn a_delete_flush_is_intent_marks_commit_with_three_fsyncs() {
    let (_, h, _, before, after) = delete_flush();
    assert_eq!(h.len(), 3, "intent, marks, commit: three fsyncs");
    // After the first fsync: the intent is newest, in the copy not holding the last commit.
    let [a, b] = copies(&h[0]);
    let (a, b) = (a.unwrap(), b.unwrap());
    let (intent, old) = if a.sequence > b.sequence {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(intent.sequence, old.sequence + 1);
    assert_eq!(intent.pending_delete_epoch, old.delete_epoch + 1);
    assert_eq!(
        intent.committed_count, old.committed_count,
        "the intent keeps the old state"
    );
    // After the last: the commit replaced the old commit's copy, never the intent.
    let [a, b] = copies(&h[2]);
    let (a, b) = (a.unwrap(), b.unwrap());
    let seqs: BTreeSet<u64> = [a.sequence, b.sequence].into();
    assert_eq!(seqs, [intent.sequence, intent.sequence + 1].into());
    let commit = if a.sequence > b.sequence { a } else { b };
    assert_eq!(
        (commit.delete_epoch, commit.pending_delete_epoch),
        (old.delete_epoch + 1, 0)
    );
    assert_eq!(commit.committed_count, 50);
    // Each image reopens to the old state or the new one, never anything else.
    for (i, img) in h.iter().enumerate() {
        let ix = open_image(img);
        let want = if i < 2 { &before } else { &after };
        assert_eq!(&live_ids(&ix), want, "image after fsync {}", i + 1);
        assert_eq!(ix.open_report().recovered, i < 2);
    }
}

#[test]
fn recovery_resets_marks_of_an_uncommitted_delete_and_they_never_come_back() {
    let (_, history, data, before, _) = delete_flush();
    let marks_image = &history[1];
    // Without recovery (read-only), the marks above E are ignored: the old state.
    let ro = read_only_image(marks_image);
    assert_eq!(live_ids(&ro), before);
    drop(ro);
    // With recovery: the 3 marks on committed slots are reset (the 4th is past N).
    let storage = MemStorage::from_image(marks_image, CAP).unwrap();
    let ix = Index::open_in(Arc::new(storage.reopen(true))).unwrap();
    let report = ix.open_report().clone();
    assert!(report.recovered);
    assert_eq!(report.marks_reset, 3);
    assert!(
        report.unreachable.is_some(),
        "recovery reports unreachable vectors"
    );
    assert_eq!(live_ids(&ix), before);
    // One more add-and-delete flush: exactly the old state plus it. Had recovery kept the marks,
    // ids 3, 17 and 29 would now count as deleted at the new epoch.
    ix.add(&data[55]).unwrap();
    ix.delete(8).unwrap();
    ix.flush().unwrap();
    let mut want = before.clone();
    want.insert(40);
    want.remove(&8);
    assert_eq!(live_ids(&ix), want);
    drop(ix);
    let ix = Index::open_in(Arc::new(storage.reopen(true))).unwrap();
    assert!(!ix.open_report().recovered);
    assert_eq!(live_ids(&ix), want);
    for id in &want {
        let v = ix.get(*id).unwrap();
        assert_eq!(ix.search(&v, 1, 16).unwrap()[0].id, *id);
    }
}

#[test]
fn a_crash_inside_recovery_recovers_again() {
    let (_, history, _, before, _) = delete_flush();
    let marks_image = history[1].clone();
    let storage = MemStorage::from_image(&marks_image, CAP).unwrap();
    storage.record_durable_history(true);
    drop(Index::open_in(Arc::new(storage.reopen(true))).unwrap());
    let during = storage.durable_history();
    assert_eq!(
        during.len(),
        2,
        "recovery: fsync after the marks, fsync after the header"
    );
    for img in &during {
        let ix = open_image(img);
        assert_eq!(live_ids(&ix), before);
    }
    // After the first recovery fsync the intent is still newest: recovery runs again.
    assert!(open_image(&during[0]).open_report().recovered);
    assert!(!open_image(&during[1]).open_report().recovered);
}

#[test]
fn a_failed_fsync_poisons_until_reopen() {
    let mem = Arc::new(MemStorage::new(CAP).unwrap());
    let data = clustered(30, 4, 2, 22);
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    for v in &data[..10] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    for v in &data[10..20] {
        ix.add(v).unwrap();
    }
    ix.delete(2).unwrap();
    mem.fail_syncs_after(Some(1));
    assert!(matches!(ix.flush(), Err(Error::Io(_))));
    mem.fail_syncs_after(None);
    let syncs = mem.sync_count();
    assert!(matches!(ix.flush(), Err(Error::Poisoned)), "never retried");
    ix.add(&data[20]).unwrap();
    assert!(matches!(ix.flush(), Err(Error::Poisoned)));
    assert_eq!(
        mem.sync_count(),
        syncs,
        "a poisoned index never calls fsync again"
    );
    drop(ix);
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    assert_eq!(
        live_ids(&ix),
        (0..10).collect(),
        "the last acknowledged flush"
    );
    ix.add(&data[21]).unwrap();
    ix.flush().unwrap();
    assert_eq!(ix.len(), 11);
}

#[test]
fn a_failure_at_every_fsync_of_a_delete_flush_poisons_and_keeps_a_committed_state() {
    for fail_at in 1..=3 {
        let mem = Arc::new(MemStorage::new(CAP).unwrap());
        let data = clustered(30, 4, 2, 23);
        let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
        for v in &data[..10] {
            ix.add(v).unwrap();
        }
        ix.flush().unwrap();
        for v in &data[10..15] {
            ix.add(v).unwrap();
        }
        ix.delete(1).unwrap();
        mem.fail_syncs_after(Some(fail_at));
        assert!(ix.flush().is_err());
        assert!(matches!(ix.flush(), Err(Error::Poisoned)));
        drop(ix);
        // What is durable is the last acknowledged flush.
        let ix = open_image(&mem.durable_image());
        assert_eq!(live_ids(&ix), (0..10).collect(), "fsync {fail_at} failed");
    }
}

#[test]
fn creation_in_place_and_never_over_a_damaged_file() {
    // An empty file is new.
    let mem = Arc::new(MemStorage::new(CAP).unwrap());
    Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    // A header-sized file with both copies torn and a zero live page: an interrupted creation.
    let mut img = vec![0u8; 196_608];
    img[..8].copy_from_slice(b"CHASSIS\0");
    img[65_536..65_540].copy_from_slice(b"CHAS");
    let mem = Arc::new(MemStorage::from_image(&img, CAP).unwrap());
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    ix.add(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    ix.flush().unwrap();
    drop(ix);
    // A valid index is never recreated.
    assert!(matches!(
        Index::create_in(Arc::new(mem.reopen(true)), opts()),
        Err(Error::Io(_))
    ));
    assert_eq!(Index::open_in(Arc::new(mem.reopen(true))).unwrap().len(), 1);
    // Both copies invalid but the live page written, or a longer file: corrupt, untouched.
    let mut damaged = mem.current_image();
    damaged[header::at::DIMS] ^= 1;
    damaged[65_536 + header::at::DIMS] ^= 1;
    let d = Arc::new(MemStorage::from_image(&damaged, CAP).unwrap());
    assert!(matches!(
        Index::create_in(d.clone(), opts()),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(d.current_image(), damaged);
    let mut short = damaged[..196_608].to_vec();
    short[131_072..].iter_mut().for_each(|b| *b = 0);
    short[131_072 + 8] = 1;
    let d = Arc::new(MemStorage::from_image(&short, CAP).unwrap());
    assert!(matches!(
        Index::create_in(d.clone(), opts()),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(d.current_image(), short);
}

#[test]
fn an_unflushed_writer_leaves_unreachable_vectors_that_the_next_open_counts_and_reconnects() {
    let mem = Arc::new(MemStorage::new(CAP).unwrap());
    let data = clustered(400, 4, 4, 24);
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    for v in &data[..200] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    assert_eq!(ix.unreachable_count(), 0);
    for v in &data[200..] {
        ix.add(v).unwrap();
    }
    // Strand slots 17 and 42 for certain, as pruning by unflushed inserts can: remove every
    // edge toward them (the writer may rewrite committed neighbor words).
    for s in 0..400u32 {
        for layer in 0..=ix.node_level(s) {
            let store = ix.store();
            let words = if layer == 0 {
                store.level0(s)
            } else {
                store.upper(s, layer)
            };
            for w in words.unwrap() {
                if matches!(w.load(Ordering::Relaxed), 17 | 42) {
                    w.store(u32::MAX, Ordering::Relaxed);
                }
            }
        }
    }
    drop(ix);
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    let r = ix.open_report();
    assert!(!r.recovered);
    let unreachable = r
        .unreachable
        .expect("checked: the live page shows unflushed inserts");
    assert!(unreachable >= 2, "slots 17 and 42 at least: {unreachable}");
    assert_eq!(r.still_unreachable, Some(0));
    assert_eq!(ix.unreachable_count(), 0);
    assert_eq!(ix.len(), 200);
    for (i, v) in data[..200].iter().enumerate() {
        let hit = ix.search(v, 1, 64).unwrap()[0];
        assert_eq!(
            (hit.id, hit.distance),
            (i as u64, 0.0),
            "reconnected and found"
        );
    }
    // A clean reopen after a flush does not check.
    drop(ix);
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    ix.add(&data[0]).unwrap();
    ix.flush().unwrap();
    drop(ix);
    assert_eq!(
        Index::open_in(Arc::new(mem.reopen(true)))
            .unwrap()
            .open_report()
            .unreachable,
        None
    );
}
