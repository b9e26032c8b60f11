//! Online backup and incremental sync (`Index::backup`, `IndexReader::backup`).
//!
//! What must hold: a backup holds exactly the source's committed state at one sequence (ids,
//! vectors, metadata, deletes), opens, and passes `check`; taken from a quiet source it
//! answers every search exactly as the source does; a repeat backup ships only what changed
//! and a repeat with nothing new ships nothing; taken while a writer adds, deletes and
//! flushes, each backup is one of the states the writer committed; a destination that is not
//! an earlier backup is replaced whole (or refused when it is not a Chassis file); and a
//! crash at any point of a sync, or an I/O error, leaves the destination at its previous
//! state or the new one (the power-loss simulator's crash images).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chassis::format::patch::Patch;
use chassis::os::{FaultKind, MemStorage, Storage};
use chassis::storage::{replay, Recorder, SyncOutcome};
use chassis::{apply_patch, Error, Index, IndexReader, Metadata, Metric, Options, Value};
use common::{clustered, Moment, Rng};

/// Live ids with their vectors and metadata.
type State = BTreeMap<u64, (Vec<f32>, Metadata)>;

fn meta(n: usize) -> Metadata {
    Metadata::from([
        ("n".to_string(), Value::Int(n as i64)),
        ("text".to_string(), Value::Str("b".repeat(n * 31 % 300))),
    ])
}

fn state_of_index(ix: &Index) -> State {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, (ix.get(id).unwrap(), ix.get_metadata(id).unwrap())))
        .collect()
}

fn state_of_reader(r: &IndexReader) -> State {
    let snap = r.snapshot().unwrap();
    r.ids_in(&snap)
        .unwrap()
        .into_iter()
        .map(|id| (id, (r.get(id).unwrap(), r.get_metadata(id).unwrap())))
        .collect()
}

fn add_rows(ix: &Index, data: &[Vec<f32>], from: usize) {
    for (i, v) in data.iter().enumerate() {
        ix.add_with_metadata(v, &meta(from + i)).unwrap();
    }
}

fn assert_clean(path: &std::path::Path) {
    // Both header copies valid (a full copy writes both, as a created file has them).
    let copies =
        chassis::storage::read_header_copies(&chassis::os::FileStorage::open(path, false).unwrap())
            .unwrap();
    assert!(
        copies.a.is_ok() && copies.b.is_ok(),
        "a header copy is invalid"
    );
    let ix = Index::open(path).unwrap();
    let report = ix.check(20).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.unreachable, 0);
    ix.close().unwrap();
}

#[test]
fn backup_of_a_quiet_index_answers_exactly_as_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let data = clustered(1500, 12, 10, 1);
    let ix = Index::create(&src, Options::new(12, Metric::Cosine).m(8)).unwrap();
    add_rows(&ix, &data[..1200], 0);
    ix.flush().unwrap();
    for id in (0..1200).step_by(7) {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    let report = ix.backup(&dst).unwrap();
    assert!(report.full_copy && report.replaced_because.is_none());
    assert_eq!(report.sync.live, ix.len() as u64);
    assert!(report.sync.bytes_shipped >= report.sync.committed_bytes / 2);

    let copy = IndexReader::open(&dst).unwrap();
    assert_eq!(state_of_reader(&copy), state_of_index(&ix));
    for q in data[1200..].iter().take(60) {
        assert_eq!(
            copy.search(q, 10, 64).unwrap(),
            ix.search(q, 10, 64).unwrap()
        );
    }
    drop(copy);
    assert_clean(&dst);
}

#[test]
fn repeat_backups_ship_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let data = clustered(6000, 32, 20, 2);
    let ix = Index::create(&src, Options::new(32, Metric::L2Squared).m(8)).unwrap();
    add_rows(&ix, &data[..5000], 0);
    ix.flush().unwrap();
    let first = ix.backup(&dst).unwrap();
    assert!(first.full_copy);

    // A tenth more, some deletes and one replaced document.
    add_rows(&ix, &data[5000..5500], 5000);
    for id in (0..5000).step_by(50) {
        ix.delete(id).unwrap();
    }
    ix.set_metadata(1, &meta(99_999)).unwrap();
    ix.flush().unwrap();
    let second = ix.backup(&dst).unwrap();
    assert!(!second.full_copy && !second.sync.unchanged);
    assert_eq!(second.sync.previous_sequence, Some(first.sync.sequence));
    let added = second.sync.committed_bytes - first.sync.committed_bytes;
    assert!(
        second.sync.bytes_shipped < added + second.sync.committed_bytes / 4,
        "shipped {} for {} added of {}",
        second.sync.bytes_shipped,
        added,
        second.sync.committed_bytes
    );
    let copy = IndexReader::open(&dst).unwrap();
    assert_eq!(state_of_reader(&copy), state_of_index(&ix));
    drop(copy);
    assert_clean(&dst);

    let third = ix.backup(&dst).unwrap();
    assert!(third.sync.unchanged && !third.full_copy);
    assert_eq!(third.sync.bytes_shipped, 0);
    assert_eq!(third.repaired_lists, 0);

    // The backup's own writer may use it; a later backup replaces what it did only if the
    // file moved past the source (here it did: a flush of its own).
    let own = Index::open(&dst).unwrap();
    own.add(&data[5500]).unwrap();
    own.flush().unwrap();
    own.close().unwrap();
    ix.add_with_metadata(&data[5501], &meta(5501)).unwrap();
    ix.flush().unwrap();
    ix.add_with_metadata(&data[5502], &meta(5502)).unwrap();
    ix.flush().unwrap();
    let fourth = ix.backup(&dst).unwrap();
    assert!(fourth.full_copy, "{fourth:?}");
    let copy = IndexReader::open(&dst).unwrap();
    assert_eq!(state_of_reader(&copy), state_of_index(&ix));
}

#[test]
fn backups_taken_while_a_writer_works_are_states_it_committed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let data = clustered(4000, 16, 12, 3);
    let ix = Arc::new(Index::create(&src, Options::new(16, Metric::L2Squared).m(8)).unwrap());
    add_rows(&ix, &data[..500], 0);
    ix.flush().unwrap();
    // sequence -> state, recorded after every flush (the writer is the only one flushing).
    let states: Arc<Mutex<BTreeMap<u64, State>>> = Arc::default();
    let record = |ix: &Index, states: &Mutex<BTreeMap<u64, State>>| {
        let seq = ix.info().unwrap().sequence;
        states.lock().unwrap().insert(seq, state_of_index(ix));
    };
    record(&ix, &states);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ix, states, done, data) = (ix.clone(), states.clone(), done.clone(), data.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(9);
            let mut next = 500;
            while next + 100 <= data.len() {
                add_rows(&ix, &data[next..next + 100], next);
                next += 100;
                for _ in 0..5 {
                    let ids = ix.ids().unwrap();
                    let _ = ix.delete(ids[rng.below(ids.len())]);
                }
                ix.flush().unwrap();
                record(&ix, &states);
                // Unflushed adds while a backup may run: their edges reach committed lists.
                add_rows(&ix, &data[next..next + 20], next);
                next += 20;
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut backups = 0;
    let reader = IndexReader::open(&src).unwrap();
    while !done.load(Ordering::Acquire) || backups < 3 {
        let report = if backups % 2 == 0 {
            ix.backup(&dst).unwrap()
        } else {
            reader.backup(&dst).unwrap()
        };
        backups += 1;
        let copy = IndexReader::open(&dst).unwrap();
        let snap = copy.snapshot().unwrap();
        assert_eq!(snap.sequence(), report.sync.sequence, "{report:?}");
        let got = state_of_reader(&copy);
        // The writer records a state just after its flush, so wait for a record at or past
        // the copied sequence; an intent header's sequence shows the commit before it.
        let want = state_at(&states, snap.sequence());
        assert_eq!(
            got,
            want,
            "backup {backups} at sequence {}",
            snap.sequence()
        );
        // Searches find every stored vector as its own nearest neighbor.
        for (id, (v, _)) in got.iter().step_by(97) {
            assert_eq!(copy.search(v, 1, 64).unwrap()[0].id, *id);
        }
        drop(copy);
        assert_clean(&dst);
    }
    writer.join().unwrap();
    assert!(backups >= 3);
    // The writer's last adds are unflushed and linked into committed lists: a backup copies
    // those edges and its repair pass removes them.
    let fresh = dir.path().join("fresh.chassis");
    let report = ix.backup(&fresh).unwrap();
    assert!(report.repaired_lists > 0, "{report:?}");
    assert_eq!(
        state_of_reader(&IndexReader::open(&fresh).unwrap()),
        state_at(&states, report.sync.sequence)
    );
    assert_clean(&fresh);
}

fn state_at(states: &Mutex<BTreeMap<u64, State>>, seq: u64) -> State {
    for _ in 0..10_000 {
        {
            let states = states.lock().unwrap();
            if states.range(seq..).next().is_some() {
                return states.range(..=seq).next_back().unwrap().1.clone();
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("no state recorded at or past sequence {seq}");
}

#[test]
fn destinations_that_are_not_earlier_backups() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let data = clustered(300, 8, 4, 4);
    let ix = Index::create(&src, Options::new(8, Metric::L2Squared)).unwrap();
    add_rows(&ix, &data[..200], 0);
    ix.flush().unwrap();

    // Another Chassis file: replaced whole, with the reason.
    let other = dir.path().join("other.chassis");
    let o = Index::create(&other, Options::new(8, Metric::L2Squared)).unwrap();
    o.add(&data[250]).unwrap();
    o.close().unwrap();
    let r = ix.backup(&other).unwrap();
    assert!(r.full_copy && r.replaced_because.is_some(), "{r:?}");
    assert_eq!(IndexReader::open(&other).unwrap().len().unwrap(), 200);

    // Not a Chassis file: refused, untouched.
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"keep me, I am not an index").unwrap();
    assert!(matches!(ix.backup(&notes), Err(Error::InvalidArgument(_))));
    assert_eq!(
        std::fs::read(&notes).unwrap(),
        b"keep me, I am not an index"
    );

    // The source itself.
    assert!(matches!(ix.backup(&src), Err(Error::InvalidArgument(_))));

    // A destination a writer holds.
    let held = Index::open(&other).unwrap();
    assert!(matches!(ix.backup(&other), Err(Error::Locked)));
    drop(held);
    // Unflushed adds are not in a backup.
    ix.add_with_metadata(&data[201], &meta(201)).unwrap();
    let r = ix.backup(&other).unwrap();
    assert!(r.sync.unchanged);
    assert_eq!(IndexReader::open(&other).unwrap().len().unwrap(), 200);
}

const CAP: usize = 64 << 20;

fn opts() -> Options {
    common::small(4, Metric::L2Squared, 8, 32)
}

/// The state an image shows to a reader (no recovery, no repair).
fn image_state(img: &[u8]) -> Result<State, Error> {
    let r = IndexReader::open_in(Arc::new(MemStorage::from_image(img, CAP)?))?;
    let snap = r.snapshot()?;
    r.ids_in(&snap)?
        .into_iter()
        .map(|id| Ok((id, (r.get(id)?, r.get_metadata(id)?))))
        .collect()
}

/// A writer's open of an image (repair), `check`, and the state it shows.
fn repaired_state(img: &[u8]) -> Result<(State, Vec<String>), Error> {
    let ix = Index::open_in(Arc::new(MemStorage::from_image(img, CAP)?))?;
    let problems = ix.check(0)?.problems;
    let state = ix
        .ids()?
        .into_iter()
        .map(|id| Ok((id, (ix.get(id)?, ix.get_metadata(id)?))))
        .collect::<Result<State, Error>>()?;
    Ok((state, problems))
}

/// A source that moved from state A to state B through adds, deletes, a replaced document
/// and unflushed adds (lists edited past N), and a destination holding A.
fn source_and_destination(seed: u64) -> (Index, MemStorage, State, State) {
    let data = clustered(700, 4, 6, seed);
    let ix = Index::in_memory(opts(), CAP).unwrap();
    add_rows(&ix, &data[..300], 0);
    for id in [3, 17, 40] {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    let a = state_of_index(&ix);
    let dst = MemStorage::new(CAP).unwrap();
    dst.try_lock_exclusive().unwrap();
    assert!(matches!(
        ix.backup_into(&dst).unwrap(),
        SyncOutcome::Synced(_)
    ));
    let dst_image = dst.current_image();
    drop(dst);
    {
        let repair = Index::open_in(Arc::new(MemStorage::from_image(&dst_image, CAP).unwrap()));
        drop(repair);
    }
    add_rows(&ix, &data[300..600], 300);
    for id in (0..300).step_by(9) {
        let _ = ix.delete(id);
    }
    ix.set_metadata(5, &meta(5555)).unwrap();
    ix.flush().unwrap();
    let b = state_of_index(&ix);
    add_rows(&ix, &data[600..], 600);
    let dst = MemStorage::from_image(&dst_image, CAP).unwrap();
    (ix, dst, a, b)
}

#[test]
fn a_crash_during_a_sync_leaves_the_previous_state_or_the_new_one() {
    let mut rng = Rng::new(77);
    let mut images = 0;
    for seed in [5, 6] {
        let (ix, dst, a, b) = source_and_destination(seed);
        assert_eq!(image_state(&dst.durable_image()).unwrap(), a);
        dst.try_lock_exclusive().unwrap();
        dst.record_durable_history(true);
        let mut before = dst.durable_image();
        let SyncOutcome::Synced(report) = ix.backup_into(&dst).unwrap() else {
            panic!("not an earlier state");
        };
        assert!(report.bytes_shipped < report.committed_bytes);
        let history = dst.durable_history();
        assert!(
            history.len() >= 3,
            "live page, data, header: {}",
            history.len()
        );
        for after in &history {
            for _ in 0..4 {
                let img = Moment::at_sync(&before, after).crash_image(&mut rng);
                images += 1;
                let seen = image_state(&img).unwrap();
                assert!(seen == a || seen == b, "a crash image shows neither state");
                let (repaired, problems) = repaired_state(&img).unwrap();
                assert_eq!(repaired, seen);
                assert!(problems.is_empty(), "{problems:?}");
                // A sync from the crash image completes to B.
                let again = MemStorage::from_image(&img, CAP).unwrap();
                again.try_lock_exclusive().unwrap();
                assert!(matches!(
                    ix.backup_into(&again).unwrap(),
                    SyncOutcome::Synced(_)
                ));
                let (done, problems) = repaired_state(&again.current_image()).unwrap();
                assert_eq!(done, b);
                assert!(problems.is_empty(), "{problems:?}");
            }
            before = after.clone();
        }
        let (done, problems) = repaired_state(&dst.current_image()).unwrap();
        assert_eq!(done, b);
        assert!(problems.is_empty());
    }
    assert!(images >= 24);
}

#[test]
fn an_io_error_during_a_sync_leaves_the_previous_state_or_the_new_one() {
    let (ix, dst, a, b) = source_and_destination(8);
    let image = dst.durable_image();
    let mut n = 1;
    loop {
        let dst = MemStorage::from_image(&image, CAP).unwrap();
        dst.try_lock_exclusive().unwrap();
        dst.inject_fault(n, FaultKind::Eio, true);
        match ix.backup_into(&dst) {
            Ok(_) => break,
            Err(Error::Io(_)) => {}
            Err(e) => panic!("fault {n}: {e}"),
        }
        for img in [dst.durable_image(), dst.current_image()] {
            let seen = image_state(&img).unwrap();
            assert!(seen == a || seen == b, "fault {n}");
            let (repaired, problems) = repaired_state(&img).unwrap();
            assert_eq!(repaired, seen);
            assert!(problems.is_empty(), "fault {n}: {problems:?}");
        }
        n += 1;
    }
    assert!(n > 5, "the sync made only {n} calls");
}

#[test]
fn patches_keep_a_replica_without_the_file_system_current() {
    let dir = tempfile::tempdir().unwrap();
    let far = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let staging = dir.path().join("staging.chassis");
    let replica = far.path().join("replica.chassis");
    let data = clustered(3000, 16, 8, 11);
    let ix = Index::create(&src, Options::new(16, Metric::L2Squared).m(8)).unwrap();
    let mut patches = Vec::new();
    for round in 0..4 {
        add_rows(&ix, &data[round * 500..round * 500 + 500], round * 500);
        for id in (round as u64 * 500..round as u64 * 500 + 500).step_by(41) {
            ix.delete(id).unwrap();
        }
        ix.flush().unwrap();
        add_rows(
            &ix,
            &data[2500 + round * 10..2510 + round * 10],
            2500 + round * 10,
        );
        let (report, patch) = ix.backup_patch(&staging, false).unwrap();
        assert_eq!(report.full_copy, round == 0);
        if round > 0 {
            assert!((patch.len() as u64) < report.sync.committed_bytes / 2);
        }
        let applied = apply_patch(&replica, &patch).unwrap();
        assert_eq!(applied.sync.sequence, report.sync.sequence);
        // The replica holds the last flush (not the unflushed adds), as the staging copy does.
        let got = state_of_reader(&IndexReader::open(&replica).unwrap());
        assert_eq!(got, state_of_reader(&IndexReader::open(&staging).unwrap()));
        assert_eq!(got.len(), report.sync.live as usize);
        assert_clean(&replica);
        ix.flush().unwrap();
        patches.push(patch);
    }
    // Nothing new: an empty patch, which changes nothing.
    let (r1, catch_up) = ix.backup_patch(&staging, false).unwrap();
    apply_patch(&replica, &catch_up).unwrap();
    let (r2, empty) = ix.backup_patch(&staging, false).unwrap();
    assert!(r2.sync.unchanged && !r1.full_copy);
    assert!(Patch::decode(&empty).unwrap().ops.is_empty());
    let before = std::fs::read(&replica).unwrap();
    assert!(apply_patch(&replica, &empty).unwrap().sync.unchanged);
    assert_eq!(std::fs::read(&replica).unwrap(), before);
    // A patch out of step is refused, and leaves the replica alone; a full one catches up.
    let stale = &patches[1];
    assert!(matches!(
        apply_patch(&replica, stale),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(std::fs::read(&replica).unwrap(), before);
    let (_, full) = ix.backup_patch(&staging, true).unwrap();
    assert!(Patch::decode(&full).unwrap().full);
    apply_patch(&replica, &full).unwrap();
    assert_eq!(
        state_of_reader(&IndexReader::open(&replica).unwrap()),
        state_of_reader(&IndexReader::open(&staging).unwrap())
    );
    // Damaged patches are refused before anything is written.
    let mut bad = full.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    assert!(matches!(
        apply_patch(&replica, &bad),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_crash_while_replaying_a_patch_leaves_the_previous_state_or_the_new_one() {
    let mut rng = Rng::new(78);
    let (ix, dst, a, b) = source_and_destination(12);
    let base = dst.durable_image();
    // The staging copy (here in memory) records the sync as a patch.
    let staging = Arc::new(MemStorage::from_image(&base, CAP).unwrap());
    staging.try_lock_exclusive().unwrap();
    let recorder = Recorder::new(staging.clone());
    let SyncOutcome::Synced(report) = ix.backup_into(&recorder).unwrap() else {
        panic!("not an earlier state");
    };
    let patch = Patch {
        full: false,
        base_sequence: report.previous_sequence.unwrap(),
        base_copy: report.previous_copy.unwrap(),
        sequence: report.sequence,
        file_id: [0; 16],
        base_checksum: 0,
        ops: recorder.take_ops(),
    };
    let patch = Patch::decode(&patch.encode()).unwrap();
    // The replica replays it; every crash image shows A or B.
    let replica = MemStorage::from_image(&base, CAP).unwrap();
    replica.try_lock_exclusive().unwrap();
    replica.record_durable_history(true);
    replay(&replica, &patch).unwrap();
    assert_eq!(replica.current_image(), staging.current_image());
    let mut before = base.clone();
    let mut images = 0;
    for after in replica.durable_history() {
        for _ in 0..4 {
            let img = Moment::at_sync(&before, &after).crash_image(&mut rng);
            images += 1;
            let seen = image_state(&img).unwrap();
            assert!(seen == a || seen == b, "a crash image shows neither state");
            let (repaired, problems) = repaired_state(&img).unwrap();
            assert_eq!(repaired, seen);
            assert!(problems.is_empty(), "{problems:?}");
        }
        before = after;
    }
    assert!(images >= 12);
    assert_eq!(repaired_state(&replica.current_image()).unwrap().0, b);
}

/// Codes travel with backups and patches: a backup taken before the codebook is trained, then
/// incremental ones across the flush that trains it (the codebook region and every slot's
/// code shipped with it) and after it, each a file whose codes `check` finds consistent with
/// its vectors and whose searches, walked by the copied codes, answer as the source's.
#[test]
fn backups_and_patches_carry_codes_across_their_training() {
    let dir = tempfile::tempdir().unwrap();
    let far = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let staging = dir.path().join("staging.chassis");
    let replica = far.path().join("replica.chassis");
    let data = clustered(1_660, 16, 8, 12);
    let opts = Options::new(16, Metric::Cosine)
        .m(8)
        .codes(chassis::CodeKind::Int8);
    let ix = Index::create(&src, opts).unwrap();
    for (round, (from, to)) in [(0, 600), (600, 1_200), (1_200, 1_600)]
        .into_iter()
        .enumerate()
    {
        add_rows(&ix, &data[from..to], from);
        for id in (from as u64..to as u64).step_by(53) {
            ix.delete(id).unwrap();
        }
        ix.flush().unwrap();
        assert_eq!(ix.info().unwrap().codes_trained, to >= 1_000);
        let report = ix.backup(&dst).unwrap();
        assert_eq!(report.full_copy, round == 0);
        let (_, patch) = ix.backup_patch(&staging, false).unwrap();
        apply_patch(&replica, &patch).unwrap();
        for path in [&dst, &replica] {
            let copy = IndexReader::open(path).unwrap();
            assert_eq!(state_of_reader(&copy), state_of_index(&ix));
            for q in &data[1_600..] {
                assert_eq!(
                    copy.search(q, 10, 64).unwrap(),
                    ix.search(q, 10, 64).unwrap()
                );
            }
            drop(copy);
            let info = Index::open_read_only(path).unwrap().info().unwrap();
            assert_eq!(
                (info.codes, info.codes_trained),
                (chassis::CodeKind::Int8, to >= 1_000),
                "round {round}"
            );
            assert_clean(path);
        }
    }
}
