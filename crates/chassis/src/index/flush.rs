//! Deletes and the flush that makes every pending add and delete durable together (ADR-0007,
//! decisions 4 and 6: the commit itself is [`Store::commit`](crate::storage::Store::commit)).
//!
//! Invariant: a delete names a slot live in this writer's view; it leaves the graph alone
//! (deleted slots are routed through until a compaction).

use std::sync::atomic::Ordering as AtomicOrdering;

use crate::error::{Error, Result};
use crate::format::codes::{self, CodeKind};
use crate::format::header::{self, Header};

use super::{lock, Index, Writer};

impl Writer {
    pub(super) fn delete(&mut self, id: u64) -> Result<()> {
        self.delete_many(&[id])
    }

    /// Deletes every id, or none if one is not live.
    pub(super) fn delete_many(&mut self, ids: &[u64]) -> Result<()> {
        self.writable()?;
        let mut found = Vec::with_capacity(ids.len());
        for &id in ids {
            found.push((id, self.lookup(id)?.ok_or(Error::NotFound { id })?));
        }
        if found.is_empty() {
            return Ok(());
        }
        for &(_, slot) in &found {
            self.mark_pending_delete(slot);
        }
        self.dirty = true;
        // Searches see the deletes from this publication on, all together; only then do the
        // ids leave the shared table (a search on an older publication still finds them).
        self.publish();
        if let Some(map) = lock(&self.shared.ids).as_mut() {
            for (id, _) in &found {
                map.remove(id);
            }
        }
        Ok(())
    }

    pub(super) fn flush(&mut self) -> Result<()> {
        self.writable()?;
        if !self.dirty {
            return Ok(());
        }
        let old = self.store.header().clone();
        let deletes: Vec<u32> = self.pending_deletes.iter().copied().collect();
        // The full-text index's new blobs first: the commit below names its root.
        let (text_root, text) = self.write_text()?;
        // A delete flush commits at epoch E + 1 through the intent header (decision 6).
        let epoch = if deletes.is_empty() {
            old.delete_epoch
        } else {
            old.delete_epoch + 1
        };
        let (entry_point, max_layer) = match self.entry {
            Some((ep, l)) => (ep, l as u32),
            None => (header::NO_ENTRY, 0),
        };
        // The bit is defined for split vectors only (formats 4 and 6); on a format 3 file it would
        // mean nothing (releases before this one set it there anyway: it is ignored).
        if self.shared.walk.forced.load(AtomicOrdering::Relaxed) && self.store.layout().is_split() {
            self.flags |= header::FLAG_EXACT_WALK;
        }
        let next = Header {
            flags: self.flags,
            committed_count: u64::from(self.count),
            entry_point,
            max_layer,
            delete_epoch: epoch,
            pending_delete_epoch: 0,
            deleted_count: old.deleted_count + self.pending_deletes.len() as u64,
            next_id: self.next_id,
            codebook: self.store.codebook_offset(),
            user_version: if crate::mutants::active(crate::mutants::Mutant::UserVersionNotCommitted)
            {
                old.user_version
            } else {
                self.user_version
            },
            text_root,
            ..old
        };
        self.store.commit(next, &deletes)?;
        if let Some(t) = text {
            self.text = t;
        }
        self.pending_deletes.clear();
        self.dirty = false;
        Ok(())
    }

    pub(super) fn close(mut self) -> Result<()> {
        if self.read_only.is_none() {
            self.flush()?;
            self.store.mark_clean()?;
        }
        Ok(())
    }
}

impl Writer {
    /// Trains the file's codebook and codes its slots ([`crate::storage::Store::train_codes`])
    /// once it holds [`codes::TRAIN_MIN`] slots, if it keeps codes and has none yet: at the
    /// add that gets it there, and at open for a file whose codes went missing (a writer that
    /// trained them crashed before its flush). Searches of this handle walk by codes from its
    /// next publication, readers of the file from the flush that names the codebook.
    pub(super) fn train_codes_when_due(&mut self) -> Result<()> {
        if self.read_only.is_none()
            && self.store.code_kind() != CodeKind::None
            && self.store.codebook().is_none()
            && u64::from(self.count) >= codes::TRAIN_MIN
        {
            self.store.train_codes(self.count)?;
            self.dirty = true;
        }
        Ok(())
    }

    /// Closes a writer whose only changes are the repair pass's list edits (see
    /// [`Writer::repair_graph`]) without a commit: makes the lists durable, then writes the
    /// clean-close marker for the current header, so the sequence (and a backup's stamp)
    /// stays. With anything else pending it closes as [`Writer::close`] does.
    pub(crate) fn close_keeping_sequence(mut self) -> Result<()> {
        let h = self.store.header();
        let only_lists = self.pending_deletes.is_empty()
            && !self.text.changed
            && u64::from(self.count) == h.committed_count
            && self.next_id == h.next_id;
        if self.read_only.is_some() || !only_lists {
            return self.close();
        }
        self.store.sync()?;
        self.dirty = false;
        self.store.mark_clean()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.read_only.is_none() && !self.dirty {
            // Best effort: without the marker the next writer makes a repair pass.
            let _ = self.store.mark_clean();
        }
    }
}

impl Index {
    /// Deletes `id`. It disappears from this index's searches at once and from the file at the
    /// next flush; its slot stays in the graph for routing until a compaction.
    pub fn delete(&self, id: u64) -> Result<()> {
        self.write(|w| w.delete(id))
    }

    /// Deletes every id in `ids`, all or nothing: [`Error::NotFound`], with nothing deleted,
    /// if one is not live (an id given twice is deleted once). Searches see them go together.
    pub fn delete_many(&self, ids: &[u64]) -> Result<()> {
        self.write(|w| w.delete_many(ids))
    }

    /// Makes every add and delete since the last flush durable, together (decision 4: data,
    /// fsync, the other header copy, fsync). A flush with nothing pending does nothing.
    pub fn flush(&self) -> Result<()> {
        self.write(|w| w.flush())
    }

    /// Flushes, then leaves the clean-close marker in the file (docs/FORMAT.md, "Live page")
    /// and closes: the next writer opens it without a repair pass. Dropping an index with
    /// nothing pending does the same, ignoring errors; dropping one with changes pending
    /// discards them and leaves no marker (the next writer repairs what they touched).
    pub fn close(self) -> Result<()> {
        let writer = self.writer.into_inner().unwrap_or_else(|p| p.into_inner());
        writer.close()
    }

    /// Closes after a repair pass without committing (a backup's last step).
    pub(crate) fn close_keeping_sequence(self) -> Result<()> {
        let writer = self.writer.into_inner().unwrap_or_else(|p| p.into_inner());
        writer.close_keeping_sequence()
    }
}
