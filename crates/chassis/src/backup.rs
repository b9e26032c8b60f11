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
//! Invariant: nothing here writes the source; the destination is only ever written under its
//! writer lock.

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
    Ok(sync_path(src, h, dst, false)?.0)
}

/// [`to_path`], recording what it wrote to `dst` as a [`Patch`] that brings another copy of
/// `dst` (at the same sequence) to the same state ([`apply_patch`]). With `full`, `dst` is
/// removed first, so the patch is a full copy.
pub(crate) fn to_path_with_patch(
    src: &dyn Storage,
    h: &Header,
    dst: &Path,
    full: bool,
) -> Result<(BackupReport, Vec<u8>)> {
    if full {
        remove_if_there(dst)?;
    }
    let (report, patch) = sync_path(src, h, dst, true)?;
    Ok((report, patch.unwrap_or_default().encode()))
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A destination opened for a sync, and the recorder in front of it when there is one.
type Target = (Arc<dyn Storage>, Option<Arc<Recorder>>);

/// Opens `path` for a sync (writable, locked), behind a recorder when asked.
fn target(path: &Path, create: bool, record: bool) -> Result<Target> {
    let file = if create {
        FileStorage::create(path)?
    } else {
        FileStorage::open(path, true)?
    };
    file.try_lock_exclusive()?;
    let file: Arc<dyn Storage> = Arc::new(file);
    if record {
        let r = Arc::new(Recorder::new(Arc::clone(&file)));
        Ok((Arc::clone(&r) as Arc<dyn Storage>, Some(r)))
    } else {
        Ok((file, None))
    }
}

fn sync_path(
    src: &dyn Storage,
    h: &Header,
    dst: &Path,
    record: bool,
) -> Result<(BackupReport, Option<Patch>)> {
    if let (Some(a), Some(b)) = (src.identity()?, os::path_identity(dst)?) {
        if (a.dev, a.ino) == (b.dev, b.ino) {
            return Err(Error::InvalidArgument(
                "the backup destination is the source file itself".into(),
            ));
        }
    }
    let mut replaced_because = None;
    if dst.exists() {
        refuse_other_files(dst)?;
        let (t, recorder) = target(dst, false, record)?;
        match storage::sync_state(src, h, &*t)? {
            SyncOutcome::Synced(sync) => {
                let clean = storage::closed_cleanly_at(&*t, sync.sequence)?;
                let patch = recorder.map(|r| Patch {
                    full: false,
                    base_sequence: sync.previous_sequence.unwrap_or(patch::NO_BASE),
                    base_copy: sync.previous_copy.unwrap_or(0),
                    sequence: sync.sequence,
                    ops: r.take_ops(),
                });
                drop(t);
                let repaired_lists = if clean { 0 } else { repair(dst)? };
                let report = BackupReport {
                    sync,
                    full_copy: false,
                    replaced_because: None,
                    repaired_lists,
                };
                return Ok((report, patch));
            }
            SyncOutcome::Mismatch(why) => replaced_because = Some(why),
        }
    }
    let tmp = temp_path(dst);
    remove_if_there(&tmp)?;
    let (t, recorder) = target(&tmp, true, record)?;
    let sync = match storage::sync_state(src, h, &*t)? {
        SyncOutcome::Synced(s) => s,
        SyncOutcome::Mismatch(why) => {
            return Err(Error::corrupt(
                format!("a new backup file mismatched: {why}"),
                0,
            ))
        }
    };
    let patch = recorder.map(|r| Patch {
        full: true,
        base_sequence: patch::NO_BASE,
        base_copy: 0,
        sequence: sync.sequence,
        ops: r.take_ops(),
    });
    drop(t);
    let repaired_lists = repair(&tmp)?;
    os::rename_durably(&tmp, dst)?;
    let report = BackupReport {
        sync,
        full_copy: true,
        replaced_because,
        repaired_lists,
    };
    Ok((report, patch))
}

/// Refuses to overwrite a file that exists and is not a Chassis file.
fn refuse_other_files(dst: &Path) -> Result<()> {
    let head = FileStorage::open(dst, false)?;
    if head.len()? >= 8 {
        let mut magic = [0u8; 8];
        head.read_at(0, &mut magic)?;
        if magic != crate::format::MAGIC {
            return Err(Error::InvalidArgument(format!(
                "{} exists and is not a Chassis file; not overwriting it",
                dst.display()
            )));
        }
    }
    Ok(())
}

/// Replays a patch made by [`crate::Index::backup_patch`] on the copy at `dst` (on another
/// machine): a full patch writes a new file beside `dst` and renames it over; an incremental
/// one needs `dst` to hold exactly the patch's base sequence, stamped by a backup
/// ([`Error::InvalidArgument`] otherwise: ask for a full patch). The fsyncs are replayed
/// where the sync made them, so a crash leaves `dst` at its previous state or the new one;
/// then the repair pass runs, as after a backup.
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
        if dst.exists() {
            refuse_other_files(dst)?;
        }
        let tmp = temp_path(dst);
        remove_if_there(&tmp)?;
        let (t, _) = target(&tmp, true, false)?;
        storage::replay(&*t, &p)?;
        drop(t);
        let lists = repair(&tmp)?;
        os::rename_durably(&tmp, dst)?;
        return Ok(report(None, lists));
    }
    if !dst.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} is missing and the patch is incremental (from sequence {}): ask for a full one",
            dst.display(),
            p.base_sequence
        )));
    }
    refuse_other_files(dst)?;
    let (t, _) = target(dst, false, false)?;
    let (sequence, copy, stamped) = storage::stamped_sequence(&*t)?;
    if sequence != p.base_sequence || copy != p.base_copy || !stamped {
        return Err(Error::InvalidArgument(format!(
            "the patch applies to a backup at sequence {}, {} holds {}{}: ask for a full one",
            p.base_sequence,
            dst.display(),
            sequence,
            if stamped {
                ""
            } else {
                " and changed since its last sync"
            }
        )));
    }
    storage::replay(&*t, &p)?;
    let clean = storage::closed_cleanly_at(&*t, p.sequence)?;
    drop(t);
    let lists = if clean { 0 } else { repair(dst)? };
    Ok(report(Some(sequence), lists))
}

/// The repair pass of a writer's open, then a clean close (the sequence stays the same).
fn repair(path: &Path) -> Result<u64> {
    let ix = Index::open(path)?;
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
