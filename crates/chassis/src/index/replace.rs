//! Replacing the file (ADR-0008 decision 8): compaction (the project's ADR-0011), which
//! rebuilds the live vectors into a new file and renames it over the path, and the migration
//! of an hnswlib file, which converts its graph instead of rebuilding it.
//!
//! Invariants: the file at the path is complete at every step (the old one until the rename,
//! the new one after); the old file commits "superseded" before the rename; ids survive.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format;
use crate::format::codes::CodeKind;
use crate::format::header::{self, FLAG_CUSTOM_IDS};
use crate::format::vector::VectorLayout;
use crate::graph::{self, Metric, EMPTY};
use crate::os::{FileStorage, Storage};
use crate::storage::{NewFile, Store};

use super::add::PARALLEL_CHUNK;
use super::{lock, Index, Options, View, Writer};

/// What [`Index::compact`] may change; `None` keeps the index's current value.
#[derive(Clone, Debug, Default)]
pub struct CompactOptions {
    /// New M (changing it is what compaction is for: max_connections can't change in place).
    pub m: Option<usize>,
    /// New ef_construction for the rebuilt graph.
    pub ef_construction: Option<usize>,
    /// Threads that link the rebuilt graph, as in [`Index::add_batch`] (0, the default: one
    /// per CPU; 1: the same graph on every run).
    pub threads: usize,
    /// The new file's vector layout; `None` keeps the index's own (a format 3 file stays
    /// format 3, so the releases that read only format 3 still open it).
    /// `Some(VectorLayout::SplitPlanar)` turns a format 3 or 4 file into format 6.
    pub vector_layout: Option<VectorLayout>,
    /// The new file's codes; `None` keeps the index's own. `Some(CodeKind::Int8)` adds codes
    /// to a file without them (its codebook trained from the live vectors), `Some(None)`
    /// drops them.
    pub codes: Option<CodeKind>,
    /// Whether the new file keeps the graph (every list, edge for edge) instead of building
    /// a new one, its slots renumbered so that neighbors sit near each other in the file
    /// (`graph/order.rs`): no distance is computed, and searches read fewer pages and cache
    /// lines. Needs every slot live (no deletes since the last compaction) and the same M and
    /// ef_construction, or the compaction fails with [`Error::InvalidArgument`] and changes
    /// nothing. `false`, the default: rebuild the graph, in the old slot order.
    pub keep_graph: bool,
}

/// What a compaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// Live vectors copied into the new file.
    pub live: u64,
    /// Slots the old file held (live, deleted and routing-only).
    pub old_slots: u64,
    /// Length of the old file in bytes.
    pub old_bytes: u64,
    /// Length of the new file in bytes.
    pub new_bytes: u64,
}

/// The name a compaction writes its new file under, beside the index: `<name>.compacting`.
pub fn compacting_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compacting");
    path.with_file_name(name)
}

/// The name a migration writes its new file under before renaming: `<name>.migrating`.
pub fn migrating_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".migrating");
    path.with_file_name(name)
}

impl Writer {
    pub(super) fn compact(&mut self, options: CompactOptions) -> Result<CompactReport> {
        self.compact_with_progress(options, |_, _| {})
    }

    pub(super) fn compact_with_progress(
        &mut self,
        options: CompactOptions,
        progress: impl FnMut(usize, usize),
    ) -> Result<CompactReport> {
        self.compact_at_path(options, progress, crate::os::rename)
    }

    /// [`Index::compact_with_progress`] with the step that makes the new file current given
    /// (tests pass one that fails, or that reads between the flag and the rename).
    pub(super) fn compact_at_path(
        &mut self,
        options: CompactOptions,
        progress: impl FnMut(usize, usize),
        rename: impl FnOnce(&Path, &Path) -> Result<()>,
    ) -> Result<CompactReport> {
        self.writable()?;
        let path = self.path.clone().ok_or_else(|| {
            Error::InvalidArgument("compact() needs an index opened from a path".into())
        })?;
        self.flush()?;
        let opts = self.compact_options(&options)?;
        self.check_keep_graph(options.keep_graph, &opts, self.len())?;
        let new_file = self.compacted_file(&options, &opts)?;
        // Room for the second copy: every live slot, its upper layers on average, the fixed
        // area, region rounding, and one allocation step ahead.
        let live = self.len() as u64;
        let per_slot =
            crate::format::geometry::SegmentLayout::slot_bytes(new_file.dims, new_file.m)
                + 8 * u64::from(new_file.m);
        let need = format::DATA_START
            + live * per_slot * 5 / 4
            + 8 * format::REGION_ALIGN
            + crate::storage::ALLOCATE_STEP;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let free = crate::os::free_space(&dir)?;
        if free < need {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "compact needs about {} MiB free in {} for the new copy, and {} MiB are \
                     available; nothing was changed",
                    need.div_ceil(1 << 20),
                    dir.display(),
                    free >> 20
                ),
            )));
        }
        let tmp = compacting_path(&path);
        // A leftover of a compaction that stopped is emptied and reused, never unlinked
        // under a process that may still hold it.
        let storage = FileStorage::claim_temp(&tmp)?;
        storage.sync_dir()?;
        let (mut new, report) =
            self.compact_into_with_progress(Arc::new(storage), options, progress)?;
        if let Err(e) = rename(&tmp, &path) {
            // This file stays current: take back the superseded flag it just committed, so
            // readers stop checking the path and the next flush doesn't commit it again.
            drop(new);
            let _ = std::fs::remove_file(&tmp);
            self.flags &= !header::FLAG_SUPERSEDED;
            self.dirty = true;
            return match self.flush() {
                Ok(()) => Err(e),
                Err(flush) => Err(Error::Io(std::io::Error::other(format!(
                    "compact could not rename the new file into place ({e}), and clearing the \
                     superseded flag in the old file failed ({flush}); the old file is \
                     complete and still current"
                )))),
            };
        }
        new.path = Some(path.clone());
        // Searches move to the new file with the next publication; those under way finish
        // on the old one (its mappings live as long as their publication).
        new.view = Arc::clone(&self.view);
        *self = new;
        crate::os::sync_dir_of(&path)?;
        Ok(report)
    }

    pub(super) fn compact_into(
        &mut self,
        storage: Arc<dyn Storage>,
        options: CompactOptions,
    ) -> Result<(Writer, CompactReport)> {
        self.compact_into_with_progress(storage, options, |_, _| {})
    }

    pub(super) fn compact_options(&self, options: &CompactOptions) -> Result<Options> {
        let m = options.m.unwrap_or(self.params.m);
        let mut opts = Options::new(self.dims(), self.metric())
            .m(m)
            .ef_construction(
                options
                    .ef_construction
                    .unwrap_or(self.params.ef_construction),
            )
            .seed(self.seed);
        opts.max_layers = self.params.max_layers;
        opts.vector_layout = options.vector_layout.unwrap_or(self.store.layout());
        opts.codes = options.codes.unwrap_or(self.store.code_kind());
        if m == self.params.m && opts.codes == self.store.code_kind() {
            opts = opts.geometry(self.store.header().geometry);
        }
        Ok(opts)
    }

    /// The new file a compaction writes: `opts` validated, and the file's own vector layout
    /// kept as it is where the caller asked for neither another layout nor other codes (a
    /// planar file with codes, written before [`VectorLayout::for_codes`], stays planar).
    fn compacted_file(&self, options: &CompactOptions, opts: &Options) -> Result<NewFile> {
        let mut new_file = opts.validate()?;
        if options.vector_layout.is_none() && opts.codes == self.store.code_kind() {
            new_file.layout = self.store.layout();
        }
        Ok(new_file)
    }

    pub(super) fn compact_into_with_progress(
        &mut self,
        storage: Arc<dyn Storage>,
        options: CompactOptions,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<(Writer, CompactReport)> {
        self.writable()?;
        self.flush()?;
        let opts = self.compact_options(&options)?;
        let live: Vec<u32> = (0..self.count).filter(|&s| self.slot_live(s)).collect();
        let keep = options.keep_graph;
        self.check_keep_graph(keep, &opts, live.len())?;
        let new_file = self.compacted_file(&options, &opts)?;
        let store = Store::create(storage, &new_file)?;
        let mut new = Writer::from_store(store, None, None)?;
        let mut renumbered = false;
        if keep {
            self.copy_graph_into(&mut new, &mut progress)?;
            renumbered = true;
        }
        // Batches of live vectors, linked on `options.threads` threads; the copy of one batch
        // is all the memory the rebuild holds beside the two files.
        for batch in live.chunks(PARALLEL_CHUNK).filter(|_| !keep) {
            let mut ids = Vec::with_capacity(batch.len());
            let mut flat = Vec::with_capacity(batch.len() * self.dims());
            // Metadata is carried as its encoded bytes (checked on the way out).
            let mut docs = Vec::with_capacity(batch.len());
            for &slot in batch {
                docs.push(self.store.metadata(slot)?.bytes().to_vec());
                let id = self.id_of(slot)?;
                let v = self
                    .store
                    .vector(slot)
                    .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
                renumbered |= id != u64::from(new.count) + ids.len() as u64;
                ids.push(id);
                flat.extend_from_slice(&v.to_vec());
            }
            new.insert_batch(&ids, flat, &docs, options.threads)?;
            progress(new.count as usize, live.len());
        }
        progress(live.len(), live.len());
        // The full-text index is rebuilt from the documents the new file holds: one segment
        // per field set, its statistics those of the live documents (all of them now).
        new.set_text_fields(&self.text_fields())?;
        new.next_id = self.next_id;
        // The application's version describes the data, which the new file holds unchanged.
        new.user_version = self.user_version;
        // Without the custom-id flag, lookups rely on id = slot, which also needs the next
        // index-assigned id to be the next slot.
        if renumbered || self.flags & FLAG_CUSTOM_IDS != 0 || new.next_id != u64::from(new.count) {
            new.flags |= FLAG_CUSTOM_IDS;
        }
        new.dirty = true;
        new.flush()?;
        let report = CompactReport {
            live: live.len() as u64,
            old_slots: u64::from(self.count),
            old_bytes: self.store.storage().len()?,
            new_bytes: new.store.storage().len()?,
        };
        // The old file says it is superseded before the path names the new one.
        self.flags |= header::FLAG_SUPERSEDED;
        self.dirty = true;
        self.flush()?;
        Ok((new, report))
    }

    /// Fails where a compaction giving the new file `opts` is asked to `keep` the graph and
    /// can't: it needs every slot to be one of the `live`, and M and ef_construction to stay.
    fn check_keep_graph(&self, keep: bool, opts: &Options, live: usize) -> Result<()> {
        if !keep
            || (live == self.count as usize
                && opts.m == self.params.m
                && opts.ef_construction == self.params.ef_construction)
        {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "compact(keep_graph) keeps every slot and list as they are: it needs no deleted \
             slots ({} of {} are) and the same M and ef_construction; rebuild instead \
             (keep_graph false)",
            self.count as usize - live,
            self.count
        )))
    }

    /// Writes this index's slots and graph into `new` (empty) renumbered in
    /// [`graph::order::locality_order`]: every slot's id, metadata and vector (re-encoded
    /// in `new`'s layout, with this index's codebook where the code kind stays), and every
    /// list with its words mapped to the new slots. The graph is the same graph, edge for
    /// edge, so searches find what they found; the order keeps the support invariant, so no
    /// repair is needed (graph/order.rs's tests). Needs every slot live.
    fn copy_graph_into(
        &mut self,
        new: &mut Writer,
        progress: &mut impl FnMut(usize, usize),
    ) -> Result<()> {
        let n = self.count;
        let Some((entry, top)) = self.entry else {
            return Ok(());
        };
        let view = View {
            store: &self.store,
            count: n,
            walk: &self.shared.walk,
            codes: false,
        };
        let order = graph::order::locality_order(&view, n, entry);
        let new_slot = graph::order::inverse(&order);
        new.store.begin_changes(0)?;
        let d = self.dims();
        let mut ids = Vec::with_capacity(PARALLEL_CHUNK);
        for chunk in order.chunks(PARALLEL_CHUNK) {
            let first = new.count;
            let mut flat = Vec::with_capacity(chunk.len() * d);
            ids.clear();
            for (i, &old) in chunk.iter().enumerate() {
                let slot = first + i as u32;
                new.store.ensure_slot(slot)?;
                let level = self.store.upper_layers(old);
                let upper_ref = if level > 0 {
                    new.store.alloc_upper(level as u32)?
                } else {
                    0
                };
                let id = self.id_of(old)?;
                let metadata_ref = new
                    .store
                    .alloc_metadata(id, self.store.metadata(old)?.bytes())?;
                new.store
                    .write_slot_with_metadata(slot, id, &[], upper_ref, metadata_ref)?;
                let v = self
                    .store
                    .vector(old)
                    .ok_or_else(|| Error::corrupt(format!("slot {old} has no segment"), 0))?;
                flat.extend_from_slice(&v.to_vec());
                ids.push(id);
            }
            new.store.write_vectors(first, &flat)?;
            new.count = first + chunk.len() as u32;
            if let Some(map) = lock(&new.shared.ids).as_mut() {
                for (i, &id) in ids.iter().enumerate() {
                    map.insert(id, first + i as u32);
                }
            }
            progress(new.count as usize, n as usize);
        }
        let map_words = |from: &[AtomicU32], to: &[AtomicU32]| {
            for (t, f) in to.iter().zip(from) {
                let w = f.load(Ordering::Relaxed);
                let mapped = new_slot.get(w as usize).copied().unwrap_or(EMPTY);
                t.store(mapped, Ordering::Relaxed);
            }
        };
        for (j, &old) in order.iter().enumerate() {
            let j = j as u32;
            if let (Some(from), Some(to)) = (self.store.level0(old), new.store.level0(j)) {
                map_words(from, to);
            }
            for layer in 1..=self.store.upper_layers(old) {
                if let (Some(from), Some(to)) =
                    (self.store.upper(old, layer), new.store.upper(j, layer))
                {
                    map_words(from, to);
                }
            }
        }
        let new_entry = new_slot
            .get(entry as usize)
            .copied()
            .ok_or_else(|| Error::corrupt(format!("entry point {entry} past slot {n}"), 0))?;
        new.entry = Some((new_entry, top));
        new.next_id = self.next_id;
        for (to, from) in [
            (&new.shared.walk.forced, &self.shared.walk.forced),
            (&new.shared.walk.settled, &self.shared.walk.settled),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        // The same codes where the kind stays (the walk then reads the bytes it read before);
        // new ones trained from the vectors otherwise.
        match self.store.codebook() {
            Some(book) if book.kind() == new.store.code_kind() => {
                new.store.adopt_codebook(book, n)?;
            }
            _ => new.train_codes_when_due()?,
        }
        new.dirty = true;
        new.publish_routing(n)?;
        Ok(())
    }

    pub(super) fn migrate_hnswlib(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
    ) -> Result<Writer> {
        Writer::migrate_hnswlib_with_progress(src, dst, metric, |_, _| {})
    }

    pub(super) fn migrate_hnswlib_with_progress(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Writer> {
        use crate::format::hnswlib::HnswlibFile;
        let (src, dst) = (src.as_ref(), dst.as_ref());
        if dst.exists() {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists; migrate writes a new file", dst.display()),
            )));
        }
        let bytes = std::fs::read(src)?;
        let h = HnswlibFile::parse(&bytes)?;
        if h.max_m0 != 2 * h.max_m || h.m != h.max_m {
            return Err(Error::InvalidArgument(format!(
                "hnswlib file with M = {}, maxM = {}, maxM0 = {}: Chassis needs maxM0 = 2·maxM = 2·M",
                h.m, h.max_m, h.max_m0
            )));
        }
        let mut opts = Options::new(h.dims, metric)
            .m(h.max_m)
            .ef_construction(h.ef_construction.max(1));
        opts.max_layers = opts.max_layers.max(h.max_level.max(0) as usize + 1);
        let tmp = migrating_path(dst);
        // Claimed, not removed: a migration still writing it keeps it ([`Error::Locked`]).
        let mut ix = Writer::create_at(FileStorage::claim_temp(&tmp)?, &tmp, opts)?;
        let n = u32::try_from(h.count).map_err(|_| Error::Full {
            max: u64::from(u32::MAX),
        })?;
        let mut next_id = 0u64;
        let mut labels = HashSet::new();
        // Pass 1: every slot's header, vector and (empty) lists, in hnswlib's internal order,
        // so internal id i becomes slot i and neighbor ids carry over unchanged.
        for i in 0..n {
            let e = h.element(i as usize)?;
            if !e.deleted && !labels.insert(e.label) {
                return Err(Error::corrupt(
                    format!("hnswlib file: label {} stored twice", e.label),
                    0,
                ));
            }
            let v: Vec<f32> = e
                .vector
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some(j) = v.iter().position(|x| !x.is_finite()) {
                return Err(Error::InvalidVector {
                    reason: format!("hnswlib element {i}: component {j} is not finite"),
                });
            }
            ix.store.ensure_slot(i)?;
            let upper_ref = if e.upper.is_empty() {
                0
            } else {
                ix.store.alloc_upper(e.upper.len() as u32)?
            };
            ix.store.write_slot(i, e.label, &v, upper_ref)?;
            next_id = next_id.max(e.label.saturating_add(1));
            if i % 4096 == 0 {
                progress(i as usize, h.count);
            }
        }
        // Pass 2: the graph, word for word.
        for i in 0..n {
            let e = h.element(i as usize)?;
            let words = ix
                .store
                .level0(i)
                .ok_or_else(|| Error::corrupt("migrated slot unmapped", 0))?;
            for (w, &nb) in words.iter().zip(&e.level0) {
                w.store(nb, std::sync::atomic::Ordering::Relaxed);
            }
            for (layer, list) in e.upper.iter().enumerate() {
                let words = ix
                    .store
                    .upper(i, layer + 1)
                    .ok_or_else(|| Error::corrupt("migrated upper layer missing", 0))?;
                for (w, &nb) in words.iter().zip(list) {
                    w.store(nb, std::sync::atomic::Ordering::Relaxed);
                }
            }
            if e.deleted {
                ix.mark_pending_delete(i);
            }
        }
        ix.count = n;
        ix.entry = (n > 0).then_some((h.entry_point, h.max_level.max(0) as usize));
        ix.next_id = next_id;
        ix.flags |= FLAG_CUSTOM_IDS;
        ix.dirty = true;
        ix.publish_routing(n)?;
        // hnswlib keeps no such guarantee: give every node a supporter (graph/support.rs), so
        // that every migrated vector is reachable from the entry point.
        ix.repair_graph()?;
        ix.check_walk_on_graph();
        ix.flush()?;
        progress(h.count, h.count);
        // Nothing was at `dst` when this began, so no lock there is held: the rename refuses
        // to replace a file that appeared meanwhile.
        crate::os::rename_noreplace_durably(&tmp, dst)?;
        ix.path = Some(dst.to_path_buf());
        Ok(ix)
    }
}

impl Index {
    /// Rewrites the index into a new file holding only its live vectors, with a freshly built
    /// graph (ADR-0008 decision 8, the project's ADR-0011): this reclaims deleted vectors'
    /// space, reconnects anything a crash left unreachable, and is the only way to change M.
    ///
    /// Pending adds and deletes are flushed first. Every id survives unchanged, index-assigned
    /// ones included. The protocol: check that the disk has room for the second copy; write
    /// `<name>.compacting` beside the index (replacing a leftover one) and make it durable;
    /// commit the "superseded" flag in the old file; rename the new file over the path; fsync
    /// the directory; continue as the writer of the new file. A crash at any step leaves a
    /// complete index at the path: the old one before the rename, the new one after. Readers
    /// in other processes finish their current search on the old file and move to the new one.
    ///
    /// Needs an index opened from a path. The file at the path is replaced, never shrunk.
    pub fn compact(&self, options: CompactOptions) -> Result<CompactReport> {
        self.write(|w| w.compact(options))
    }

    /// [`Index::compact`], calling `progress(done, total)` as live vectors are copied.
    pub fn compact_with_progress(
        &self,
        options: CompactOptions,
        progress: impl FnMut(usize, usize),
    ) -> Result<CompactReport> {
        self.write(|w| w.compact_with_progress(options, progress))
    }

    /// The storage-level half of [`Index::compact`], for any [`Storage`]: builds the
    /// compacted index in `storage` (an empty file, locked by the caller), makes it durable,
    /// then commits the "superseded" flag in this index's file and returns the new index. The
    /// caller then makes the new file current (for a path, by renaming it over the old one
    /// and syncing the directory); until then this file is complete and current.
    pub fn compact_into(
        &self,
        storage: Arc<dyn Storage>,
        options: CompactOptions,
    ) -> Result<(Index, CompactReport)> {
        self.write(|w| w.compact_into(storage, options))
            .map(|(w, r)| (Index::from_writer(w), r))
    }

    /// Converts an hnswlib index file (`Index.save_index` of hnswlib 0.7 or 0.8) into a new
    /// Chassis file at `dst`, converting the graph instead of rebuilding it (ADR-0008 decision 8
    /// as the project reads it): labels become custom ids, hnswlib's deleted marks become
    /// deletes, upper layers go into the upper heap; O(n). hnswlib does not store its space, so
    /// the caller names the metric (`l2` → [`Metric::L2Squared`], `ip` →
    /// [`Metric::InnerProduct`], `cosine` → [`Metric::Cosine`]; hnswlib stored cosine vectors
    /// normalised, and they are kept bit for bit).
    ///
    /// The protocol: write `<dst>.migrating` (replacing a leftover one) holding its lock,
    /// flush (fsync), rename it to `dst`, fsync the directory, and return it open as the
    /// writer. `dst` must not exist. The graph is hnswlib's, word for word, plus the edges
    /// that give every node a supporter (graph/support.rs; hnswlib leaves some vectors
    /// unreachable): searches return hnswlib's ids at the same ef on the same queries, except
    /// where those edges lead a search elsewhere (on the test fixtures: none of 100 queries
    /// under l2 and cosine, 5 under inner product, at equal or better recall).
    pub fn migrate_hnswlib(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
    ) -> Result<Index> {
        Writer::migrate_hnswlib(src, dst, metric).map(Index::from_writer)
    }

    /// [`Index::migrate_hnswlib`], calling `progress(done, total)` as elements are converted.
    pub fn migrate_hnswlib_with_progress(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
        progress: impl FnMut(usize, usize),
    ) -> Result<Index> {
        Writer::migrate_hnswlib_with_progress(src, dst, metric, progress).map(Index::from_writer)
    }
}

#[cfg(test)]
impl Index {
    /// [`Writer::compact_at_path`] on the handle (tests).
    pub(super) fn compact_at_path(
        &self,
        options: CompactOptions,
        progress: impl FnMut(usize, usize),
        rename: impl FnOnce(&Path, &Path) -> Result<()>,
    ) -> Result<CompactReport> {
        self.write(|w| w.compact_at_path(options, progress, rename))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::error::Error;
    use crate::format::header::FLAG_SUPERSEDED;
    use crate::graph::Metric;
    use crate::index::{CompactOptions, Index, Options};
    use crate::reader::IndexReader;

    fn index_at(path: &Path) -> Index {
        let ix = Index::create(path, Options::new(4, Metric::L2Squared).m(8)).unwrap();
        for i in 0..300u32 {
            let x = i as f32;
            ix.add(&[x.sin(), x.cos(), (x * 0.3).sin(), 1.0]).unwrap();
        }
        for id in (0..300).step_by(3) {
            ix.delete(id).unwrap();
        }
        ix.flush().unwrap();
        ix
    }

    /// Hardening issue, item 3: a compaction whose rename fails leaves the old file current
    /// and no longer flagged superseded (before the fix the flag stayed in the writer's flags
    /// and every later flush committed it again).
    #[test]
    fn a_failed_rename_takes_the_superseded_flag_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.chassis");
        let ix = index_at(&path);
        let err = ix
            .compact_at_path(
                CompactOptions::default(),
                |_, _| {},
                |_, _| Err(Error::Io(std::io::Error::other("rename refused"))),
            )
            .unwrap_err();
        assert!(err.to_string().contains("rename refused"), "{err}");
        assert_eq!(ix.store().header().flags & FLAG_SUPERSEDED, 0);
        assert!(
            !super::compacting_path(&path).exists(),
            "the new copy is removed"
        );
        ix.add(&[0.5, 0.5, 0.5, 1.0]).unwrap();
        ix.flush().unwrap();
        assert_eq!(ix.store().header().flags & FLAG_SUPERSEDED, 0);
        drop(ix);
        let reader = IndexReader::open(&path).unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(reader.header_of(&snap).flags & FLAG_SUPERSEDED, 0);
        assert_eq!(snap.len(), 201);
        assert_eq!(Index::open(&path).unwrap().len(), 201);
    }

    /// Readers are never stale (hardening issue, item 2): a reader that took a snapshot
    /// between the superseded flag and the rename moves to the new file on its very next
    /// snapshot (before the fix, only after up to 1,024 more).
    #[test]
    fn a_reader_follows_a_compaction_on_its_next_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.chassis");
        let ix = index_at(&path);
        let reader = IndexReader::open(&path).unwrap();
        assert_eq!(reader.snapshot().unwrap().len(), 200);
        ix.compact_at_path(
            CompactOptions::default(),
            |_, _| {},
            |from, to| {
                for _ in 0..3 {
                    let snap = reader.snapshot().unwrap();
                    assert_eq!(
                        snap.file_generation(),
                        0,
                        "the path still names the old file"
                    );
                    assert_ne!(reader.header_of(&snap).flags & FLAG_SUPERSEDED, 0);
                }
                crate::os::rename(from, to)
            },
        )
        .unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(snap.file_generation(), 1);
        assert_eq!(snap.committed_count(), 200, "the compacted file");
        assert_eq!(reader.stats().reopens, 1);
    }
}
