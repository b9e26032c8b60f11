//! Online backup and incremental sync to a path ([`Index::backup`], [`IndexReader::backup`],
//! `chassis backup`): SQLite's online backup, for Chassis files.
//!
//! A backup copies one committed state of the source (the newest the handle sees when it
//! starts) while a writer keeps adding and flushing: it reads the source's committed regions
//! with positional reads and takes no lock the writer uses. Into a destination that holds an
//! earlier state of the same file it ships only what changed ([`crate::storage::sync_state`]
//! says what that is and why the order of its writes survives a crash); into a missing file,
//! or one that holds something else, it makes a full copy beside it and renames it over, so
//! the path always names a file that opens. Last, the destination's neighbor lists get the
//! repair pass a writer's open makes (the source's lists may have gained edges toward slots
//! added after the copied state), and the destination is closed cleanly at the copied
//! sequence: it opens, passes `chassis check`, and holds exactly the source's vectors, ids,
//! metadata and deletes at that sequence.
//!
//! Invariants: nothing here writes the source; the destination is only ever written under its
//! writer lock, and a destination replaced whole keeps that lock from the decision to replace
//! it until the rename over it is durable (so no writer is left writing to an orphaned
//! inode); a path where nothing was found is filled only by a rename that refuses to replace
//! whatever appeared there meanwhile; a file at the path that is not a Chassis file is never
//! overwritten. Incremental sync needs the destination to carry the source's file identity
//! (docs/FORMAT.md, "File identity").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::header::Header;
use crate::format::patch::{self, Patch};
use crate::os::{self, FileStorage, Storage};
use crate::storage::{self, Recorder, SyncOutcome, SyncReport};
use crate::Index;

/// What a backup did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupReport {
    /// What the copy or sync shipped, and the state the destination now holds.
    pub sync: SyncReport,
    /// True when the destination was written as a new file and renamed over the path (it
    /// was missing, or held something that is not an earlier state of the source).
    pub full_copy: bool,
    /// Why an existing destination was replaced rather than synced, if it was.
    pub replaced_because: Option<String>,
    /// Neighbor lists the repair pass changed (0 when the copied lists were complete).
    pub repaired_lists: u64,
}

/// Brings the file at `dst` to the committed state `h` of `src` (see the module doc).
pub(crate) fn to_path(src: &dyn Storage, h: &Header, dst: &Path) -> Result<BackupReport> {
    Ok(sync_path(src, h, dst, false, false)?.0)
}

/// [`to_path`], recording what it wrote to `dst` as a [`Patch`] that brings another copy of
/// `dst` (at the same sequence) to the same state ([`apply_patch`]). With `full`, `dst` is
/// rewritten whole (under its lock, as any full copy), so the patch is a full copy.
pub(crate) fn to_path_with_patch(
    src: &dyn Storage,
    h: &Header,
    dst: &Path,
    full: bool,
) -> Result<(BackupReport, Vec<u8>)> {
    let (report, patch) = sync_path(src, h, dst, true, full)?;
    Ok((report, patch.unwrap_or_default().encode()))
}

/// A destination opened for a sync or a replacement: the file, holding its writer lock, and
/// the recorder in front of it when there is one.
struct Target {
    file: Arc<FileStorage>,
    recorder: Option<Arc<Recorder>>,
}

impl Target {
    /// What the sync writes through: the recorder when recording, else the file.
    fn storage(&self) -> Arc<dyn Storage> {
        match &self.recorder {
            Some(r) => Arc::clone(r) as Arc<dyn Storage>,
            None => Arc::clone(&self.file) as Arc<dyn Storage>,
        }
    }
}

/// Opens the existing file at `path` for a sync, takes its writer lock ([`Error::Locked`]
/// while a writer has it) and checks that the path still names the file locked (locks
/// follow the inode; decision 8). The lock is held as long as the target lives.
fn lock_existing(path: &Path, record: bool) -> Result<Target> {
    for _ in 0..100 {
        let file = FileStorage::open(path, true)?;
        file.try_lock_exclusive()?;
        if file.still_at_path()? {
            return Ok(Target::new(file, record));
        }
    }
    Err(Error::Io(std::io::Error::other(format!(
        "{} keeps being replaced while locking it",
        path.display()
    ))))
}

impl Target {
    fn new(file: FileStorage, record: bool) -> Target {
        let file = Arc::new(file);
        let recorder =
            record.then(|| Arc::new(Recorder::new(Arc::clone(&file) as Arc<dyn Storage>)));
        Target { file, recorder }
    }
}

fn sync_path(
    src: &dyn Storage,
    h: &Header,
    dst: &Path,
    record: bool,
    force_full: bool,
) -> Result<(BackupReport, Option<Patch>)> {
    if let (Some(a), Some(b)) = (src.identity()?, os::path_identity(dst)?) {
        if (a.dev, a.ino) == (b.dev, b.ino) {
            return Err(Error::InvalidArgument(
                "the backup destination is the source file itself".into(),
            ));
        }
    }
    let mut replaced_because = None;
    // The destination's writer lock, held from the decision to replace it until the new
    // file is renamed over it and the rename is durable (a writer can't be left writing to
    // an orphaned inode).
    let mut held = None;
    if dst.exists() {
        refuse_other_files(dst)?;
        let t = lock_existing(dst, record)?;
        if force_full {
            replaced_because = Some("a full copy was asked for".into());
            held = Some(t);
        } else {
            let base = storage::base_state(&*t.file).ok();
            match storage::sync_state(src, h, &*t.storage())? {
                SyncOutcome::Synced(sync) => {
                    let clean = storage::closed_cleanly_at(&*t.file, sync.sequence)?;
                    let patch = t.recorder.as_ref().map(|r| Patch {
                        full: false,
                        base_sequence: sync.previous_sequence.unwrap_or(patch::NO_BASE),
                        base_copy: sync.previous_copy.unwrap_or(0),
                        sequence: sync.sequence,
                        file_id: h.file_id,
                        base_checksum: base.map_or(0, |b| b.checksum),
                        ops: r.take_ops(),
                    });
                    let repaired_lists = if clean { 0 } else { repair(&t.file)? };
                    drop(t);
                    let report = BackupReport {
                        sync,
                        full_copy: false,
                        replaced_because: None,
                        repaired_lists,
                    };
                    return Ok((report, patch));
                }
                SyncOutcome::Mismatch(why) => {
                    // Nothing was written (a mismatch is found before any write); the
                    // recording starts again with the full copy.
                    replaced_because = Some(why);
                    held = Some(t);
                }
            }
        }
    }
    let tmp = temp_path(dst);
    let t = Target::new(FileStorage::claim_temp(&tmp)?, record);
    let sync = match storage::sync_state(src, h, &*t.storage())? {
        SyncOutcome::Synced(s) => s,
        SyncOutcome::Mismatch(why) => {
            return Err(Error::corrupt(
                format!("a new backup file mismatched: {why}"),
                0,
            ))
        }
    };
    let patch = t.recorder.as_ref().map(|r| Patch {
        full: true,
        base_sequence: patch::NO_BASE,
        base_copy: 0,
        sequence: sync.sequence,
        file_id: h.file_id,
        base_checksum: 0,
        ops: r.take_ops(),
    });
    let repaired_lists = repair(&t.file)?;
    replace(&tmp, dst, held.is_some())?;
    drop((t, held));
    let report = BackupReport {
        sync,
        full_copy: true,
        replaced_because,
        repaired_lists,
    };
    Ok((report, patch))
}

/// Renames the finished temporary file over `dst`: over the file there when the caller
/// holds its writer lock (`locked`), else only if nothing appeared at `dst` meanwhile.
/// Durable (the directory fsynced) when it returns.
fn replace(tmp: &Path, dst: &Path, locked: bool) -> Result<()> {
    if locked {
        os::rename_durably(tmp, dst)
    } else {
        os::rename_noreplace_durably(tmp, dst).inspect_err(|_| {
            let _ = std::fs::remove_file(tmp);
        })
    }
}

/// Refuses to overwrite a file that exists and is not a Chassis file (shorter than the
/// magic, or without it).
fn refuse_other_files(dst: &Path) -> Result<()> {
    let head = FileStorage::open(dst, false)?;
    let mut magic = [0u8; 8];
    let is_chassis = head.len()? >= 8 && {
        head.read_at(0, &mut magic)?;
        magic == crate::format::MAGIC
    };
    if !is_chassis {
        return Err(Error::InvalidArgument(format!(
            "{} exists and is not a Chassis file; not overwriting it",
            dst.display()
        )));
    }
    Ok(())
}

/// Replays a patch made by [`crate::Index::backup_patch`] on the copy at `dst` (on another
/// machine).
///
/// A full patch writes a new file beside `dst` and renames it over, holding `dst`'s writer
/// lock from before it starts until the rename is durable ([`Error::Locked`] while a writer
/// has `dst` open; a file at `dst` that is not a Chassis file is never overwritten).
///
/// An incremental one needs `dst` to be a copy of the patch's source file (the same file
/// identity), at exactly the patch's base state (its sequence, in the same header copy, with
/// the same header checksum) and stamped by a backup (nothing committed to it since);
/// otherwise [`Error::InvalidArgument`] and `dst` is left untouched: ask for a full patch.
/// The fsyncs are replayed where the sync made them, so a crash leaves `dst` at its previous
/// state or the new one; then the repair pass runs, as after a backup.
///
/// A patch is trusted input, like a database file (docs/SCALING.md, "Sync patches"): its
/// checksum catches damage, these checks catch a patch meant for another replica, but the
/// bytes it writes are not otherwise validated.
pub fn apply_patch(dst: impl AsRef<Path>, patch: &[u8]) -> Result<BackupReport> {
    let dst = dst.as_ref();
    let p = Patch::decode(patch)?;
    let shipped = p.bytes_written();
    let report = |previous_sequence, repaired_lists| BackupReport {
        sync: SyncReport {
            sequence: p.sequence,
            previous_sequence,
            bytes_shipped: shipped,
            unchanged: p.ops.is_empty(),
            ..SyncReport::default()
        },
        full_copy: p.full,
        replaced_because: None,
        repaired_lists,
    };
    if p.full {
        let held = if dst.exists() {
            refuse_other_files(dst)?;
            Some(lock_existing(dst, false)?)
        } else {
            None
        };
        let tmp = temp_path(dst);
        let t = Target::new(FileStorage::claim_temp(&tmp)?, false);
        storage::replay(&*t.file, &p)?;
        let lists = repair(&t.file)?;
        replace(&tmp, dst, held.is_some())?;
        drop((t, held));
        return Ok(report(None, lists));
    }
    let refuse = |why: String| {
        Err(Error::InvalidArgument(format!(
            "the patch does not apply to {}: {why}; nothing was written (ask for a full patch)",
            dst.display()
        )))
    };
    if !dst.exists() {
        return refuse(format!(
            "it is missing and the patch is incremental (from sequence {})",
            p.base_sequence
        ));
    }
    if p.file_id == [0u8; 16] {
        return refuse("the patch names no source file (a version 1 patch)".into());
    }
    refuse_other_files(dst)?;
    let t = lock_existing(dst, false)?;
    let base = storage::base_state(&*t.file)?;
    if base.file_id != p.file_id {
        return refuse("it is a copy of another file (its file identity differs)".into());
    }
    if base.sequence != p.base_sequence || base.copy != p.base_copy {
        return refuse(format!(
            "the patch applies to sequence {}, the copy holds {}",
            p.base_sequence, base.sequence
        ));
    }
    if !base.stamped {
        return refuse("something committed to the copy since its last sync".into());
    }
    if base.checksum != p.base_checksum {
        return refuse("its header differs from the one the patch was made against".into());
    }
    storage::replay(&*t.file, &p)?;
    let clean = storage::closed_cleanly_at(&*t.file, p.sequence)?;
    let lists = if clean { 0 } else { repair(&t.file)? };
    drop(t);
    Ok(report(Some(base.sequence), lists))
}

/// The repair pass of a writer's open, then a clean close (the sequence stays the same), on
/// a file the caller holds open and locked (the lock stays the caller's).
fn repair(file: &Arc<FileStorage>) -> Result<u64> {
    let ix = Index::open_in(Arc::clone(file) as Arc<dyn Storage>)?;
    let lists = ix.open_report().repaired_lists.unwrap_or(0);
    ix.close_keeping_sequence()?;
    Ok(lists)
}

/// Where a full copy is written before it is renamed over `dst`: beside it, hidden.
fn temp_path(dst: &Path) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "index".into());
    dst.with_file_name(format!(".{name}.backup-tmp"))
}
