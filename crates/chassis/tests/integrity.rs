//! Integrity round three: a backup, a patch or a replacement never mixes files or
//! half-applies.
//!
//! What must hold: a file rebuilt at the source's path (same options, same number of
//! flushes, or one more) is a new file, so the next backup is a full copy holding the new
//! vectors; a sync patch of file A is refused by a replica of file B at the same sequence,
//! leaving it untouched; a full patch, a backup's full copy or a forced full patch never
//! renames over a file a writer holds (`Locked`, and that writer's flush lands); a file at the
//! destination that is not a Chassis file, however short, is never overwritten; a compacted
//! source is a new lineage; a file written before identities is only ever copied whole until
//! its writer commits once. The identity check is what catches these: with the
//! `SyncIgnoresIdentity` mutant the rebuilt-source backup goes wrong.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chassis::mutants::{self, Mutant};
use chassis::{apply_patch, CompactOptions, Error, Index, IndexReader, Metric, Options};
use common::clustered;

type State = BTreeMap<u64, Vec<f32>>;

fn state(path: &Path) -> State {
    let r = IndexReader::open(path).unwrap();
    let snap = r.snapshot().unwrap();
    r.ids_in(&snap)
        .unwrap()
        .into_iter()
        .map(|id| (id, r.get(id).unwrap()))
        .collect()
}

fn opts() -> Options {
    Options::new(8, Metric::L2Squared).m(8)
}

/// Creates a file at `path` holding `data` in `flushes` flushes (ids 0, 1, 2, …).
fn build(path: &Path, data: &[Vec<f32>], flushes: usize) -> Index {
    let ix = Index::create(path, opts()).unwrap();
    let per = data.len().div_ceil(flushes);
    for part in data.chunks(per) {
        ix.add_batch(&part.concat(), 1).unwrap();
        ix.flush().unwrap();
    }
    ix
}

fn assert_check(path: &Path) {
    let ix = Index::open(path).unwrap();
    let report = ix.check(20).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    ix.close().unwrap();
}

/// The nightly "re-embed and rebuild" job: back up `src`, delete it, rebuild it with the same
/// options and new vectors (in as many flushes, or one more), back up again. Returns whether
/// the destination then holds the new vectors.
fn rebuilt_source_backup_holds_new_vectors(extra_flush: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let old = clustered(300, 8, 4, 1);
    let new = clustered(300, 8, 4, 2);
    let ix = build(&src, &old, 3);
    let first = ix.backup(&dst).unwrap();
    assert!(first.full_copy);
    drop(ix);
    std::fs::remove_file(&src).unwrap();
    let ix = build(&src, &new, if extra_flush { 4 } else { 3 });
    let report = ix.backup(&dst).map_err(|e| e.to_string())?;
    let want = state(&src);
    let got = state(&dst);
    if got != want {
        return Err(format!(
            "the backup kept other vectors (full copy: {}, unchanged: {})",
            report.full_copy, report.sync.unchanged
        ));
    }
    if !report.full_copy {
        return Err("a rebuilt source was synced incrementally".into());
    }
    let why = report.replaced_because.unwrap_or_default();
    if !why.contains("identity") {
        return Err(format!("replaced for another reason: {why}"));
    }
    assert_check(&dst);
    Ok(())
}

#[test]
fn a_rebuilt_source_gets_a_full_backup_with_its_new_vectors() {
    for extra_flush in [false, true] {
        rebuilt_source_backup_holds_new_vectors(extra_flush).unwrap();
    }
}

/// The check that makes the test above pass is the identity's: skip it and the same job
/// leaves the old vectors (same number of flushes) or ships a graph over them (one more).
#[test]
fn a_sync_that_ignores_the_identity_is_caught() {
    mutants::set(Some(Mutant::SyncIgnoresIdentity));
    let results: Vec<_> = [false, true]
        .into_iter()
        .map(rebuilt_source_backup_holds_new_vectors)
        .collect();
    mutants::set(None);
    for r in results {
        assert!(r.is_err(), "the mutant went unnoticed");
    }
}

/// Two files of the same shape and the same number of flushes: A's incremental patch is
/// refused by B's replica, which stays byte for byte as it was.
#[test]
fn a_patch_of_another_file_is_refused_and_leaves_the_replica_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let far = tempfile::tempdir().unwrap();
    let (a_path, b_path) = (dir.path().join("a.chassis"), dir.path().join("b.chassis"));
    let (a_stage, b_stage) = (dir.path().join("a.stage"), dir.path().join("b.stage"));
    let (a_rep, b_rep) = (far.path().join("a.chassis"), far.path().join("b.chassis"));
    let a = build(&a_path, &clustered(200, 8, 4, 3), 2);
    let b = build(&b_path, &clustered(200, 8, 4, 4), 2);
    for (ix, stage, rep) in [(&a, &a_stage, &a_rep), (&b, &b_stage, &b_rep)] {
        let (_, full) = ix.backup_patch(stage, false).unwrap();
        apply_patch(rep, &full).unwrap();
    }
    for (ix, data) in [(&a, 5), (&b, 6)] {
        ix.add_batch(&clustered(40, 8, 4, data).concat(), 1)
            .unwrap();
        ix.flush().unwrap();
    }
    let (_, a_patch) = a.backup_patch(&a_stage, false).unwrap();
    let (_, b_patch) = b.backup_patch(&b_stage, false).unwrap();
    let before = std::fs::read(&b_rep).unwrap();
    let r = apply_patch(&b_rep, &a_patch);
    match r {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("identity"), "{why}"),
        other => panic!("a foreign patch was not refused: {other:?}"),
    }
    assert_eq!(
        std::fs::read(&b_rep).unwrap(),
        before,
        "the replica changed"
    );
    // Its own patch applies, and then the replica is the source.
    apply_patch(&b_rep, &b_patch).unwrap();
    assert_eq!(state(&b_rep), state(&b_path));
    apply_patch(&a_rep, &a_patch).unwrap();
    assert_eq!(state(&a_rep), state(&a_path));
    assert_check(&a_rep);
}

/// A patch made against one header is refused by a copy at the same sequence whose header
/// differs (the base checksum), here a copy of the same file whose stamp was forged back.
#[test]
fn a_patch_checks_the_base_header_it_was_made_against() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("s.chassis");
    let stage = dir.path().join("s.stage");
    let rep = dir.path().join("r.chassis");
    let ix = build(&src, &clustered(200, 8, 4, 7), 2);
    let (_, full) = ix.backup_patch(&stage, false).unwrap();
    apply_patch(&rep, &full).unwrap();
    ix.add(&clustered(1, 8, 1, 8)[0]).unwrap();
    ix.flush().unwrap();
    let (_, patch) = ix.backup_patch(&stage, false).unwrap();
    // Change one header field of the replica's current copy and fix its checksum: the same
    // identity, sequence and stamp, another header.
    let mut bytes = std::fs::read(&rep).unwrap();
    let (h, copy) = common::current_header(&bytes);
    let base = copy * 65_536;
    let at = base + chassis::format::header::at::EF_CONSTRUCTION;
    bytes[at..at + 4].copy_from_slice(&(h.ef_construction + 1).to_le_bytes());
    let len = h.encoded_len();
    let sum = chassis::format::header::checksum(&bytes[base..base + len]);
    let c = base + chassis::format::header::at::CHECKSUM;
    bytes[c..c + 8].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&rep, &bytes).unwrap();
    match apply_patch(&rep, &patch) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("header"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&rep).unwrap(), bytes);
}

/// Every path that replaces a file whole takes the destination's writer lock first.
#[test]
fn nothing_replaces_a_file_a_writer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let stage = dir.path().join("stage.chassis");
    let dst = dir.path().join("dst.chassis");
    let ix = build(&src, &clustered(200, 8, 4, 9), 2);
    let (_, full) = ix.backup_patch(&stage, false).unwrap();

    // A writer holds dst (a file of its own, rebuilt: the sync would be a full copy).
    let other = build(&dst, &clustered(50, 8, 2, 10), 1);
    other.add(&clustered(1, 8, 1, 11)[0]).unwrap();
    let inode = |p: &Path| chassis::os::path_identity(p).unwrap().unwrap().ino;
    let before = inode(&dst);
    assert!(matches!(apply_patch(&dst, &full), Err(Error::Locked)));
    assert!(matches!(ix.backup(&dst), Err(Error::Locked)));
    assert!(matches!(ix.backup_patch(&dst, true), Err(Error::Locked)));
    assert_eq!(
        inode(&dst),
        before,
        "the path was replaced under its writer"
    );
    // The writer's flush lands in the file at the path.
    other.flush().unwrap();
    drop(other);
    assert_eq!(state(&dst).len(), 51);
    // Once it is gone, the full patch applies.
    apply_patch(&dst, &full).unwrap();
    assert_eq!(state(&dst), state(&stage));

    // A forced full patch of a staging file a writer holds: refused, the file untouched.
    let held = Index::open(&stage).unwrap();
    assert!(matches!(ix.backup_patch(&stage, true), Err(Error::Locked)));
    drop(held);
    assert!(ix.backup_patch(&stage, true).unwrap().0.full_copy);
}

/// A destination that exists and is not a Chassis file is never overwritten, whatever its
/// length (an empty file, a few bytes, a longer file without the magic).
#[test]
fn short_files_that_are_not_chassis_are_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let ix = build(&src, &clustered(50, 8, 2, 12), 1);
    let (_, full) = ix.backup_patch(dir.path().join("stage"), false).unwrap();
    for (i, content) in [&b""[..], b"x", b"CHASSIS", b"not an index at all"]
        .into_iter()
        .enumerate()
    {
        let p = dir.path().join(format!("f{i}"));
        std::fs::write(&p, content).unwrap();
        assert!(
            matches!(ix.backup(&p), Err(Error::InvalidArgument(_))),
            "{content:?}"
        );
        assert!(matches!(
            apply_patch(&p, &full),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(std::fs::read(&p).unwrap(), content);
    }
}

/// A compaction makes a new file (a new identity): the next backup copies it whole; the
/// following ones sync incrementally again.
#[test]
fn a_compacted_source_is_a_new_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.chassis");
    let dst = dir.path().join("dst.chassis");
    let ix = build(&src, &clustered(300, 8, 4, 13), 2);
    let id_before = ix.info().unwrap().file_id.unwrap();
    ix.backup(&dst).unwrap();
    ix.delete_many(&[1, 2, 3]).unwrap();
    ix.compact(CompactOptions::default()).unwrap();
    let id_after = ix.info().unwrap().file_id.unwrap();
    assert_ne!(id_before, id_after);
    let r = ix.backup(&dst).unwrap();
    assert!(r.full_copy && r.replaced_because.unwrap().contains("identity"));
    assert_eq!(
        IndexReader::open(&dst)
            .unwrap()
            .snapshot()
            .unwrap()
            .file_id(),
        Some(id_after)
    );
    ix.add(&clustered(1, 8, 1, 14)[0]).unwrap();
    ix.flush().unwrap();
    assert!(!ix.backup(&dst).unwrap().full_copy);
    assert_eq!(state(&dst), state(&src));
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{name}.chassis"))
}

/// A file written before identities has none: it is copied whole every time until its
/// writer's next commit gives it one; from then on its backups are incremental.
#[test]
fn a_file_from_before_identities_gets_one_at_its_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("old.chassis");
    let dst = dir.path().join("dst.chassis");
    std::fs::copy(golden("f4-l2"), &src).unwrap();
    let reader = IndexReader::open(&src).unwrap();
    assert_eq!(reader.snapshot().unwrap().file_id(), None);
    for _ in 0..2 {
        let r = reader.backup(&dst).unwrap();
        assert!(r.full_copy, "{r:?}");
    }
    assert_eq!(state(&dst), state(&src));
    let ix = Index::open(&src).unwrap();
    assert_eq!(ix.info().unwrap().file_id, None);
    let dims = ix.dims();
    ix.add(&vec![0.25; dims]).unwrap();
    ix.flush().unwrap();
    let id = ix.info().unwrap().file_id;
    assert!(id.is_some());
    // The copy has no identity: one more full copy, then incremental.
    assert!(ix.backup(&dst).unwrap().full_copy);
    ix.add(&vec![0.5; dims]).unwrap();
    ix.flush().unwrap();
    let r = ix.backup(&dst).unwrap();
    assert!(!r.full_copy, "{r:?}");
    assert_eq!(state(&dst), state(&src));
    assert_eq!(
        IndexReader::open(&dst)
            .unwrap()
            .snapshot()
            .unwrap()
            .file_id(),
        id
    );
}

/// Migration never replaces a file that appears at its destination while it writes, and a
/// leftover `.migrating` file another migration holds is not taken from it.
#[test]
fn migration_and_temporary_files_never_take_a_file_from_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    // The rename that fills an empty path refuses a file that appeared there.
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"new").unwrap();
    std::fs::write(&b, b"appeared").unwrap();
    let e = chassis::os::rename_noreplace_durably(&a, &b).unwrap_err();
    assert!(matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists));
    assert_eq!(std::fs::read(&b).unwrap(), b"appeared");
    // A temporary file another writer holds is not claimed (nor unlinked).
    let tmp = dir.path().join(".x.backup-tmp");
    let first = chassis::os::FileStorage::claim_temp(&tmp).unwrap();
    assert!(matches!(
        chassis::os::FileStorage::claim_temp(&tmp),
        Err(Error::Locked)
    ));
    drop(first);
    chassis::os::FileStorage::claim_temp(&tmp).unwrap();
}
