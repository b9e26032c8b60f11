//! Adds (ADR-0007: pending until a flush): single adds, which are batches of one, and batch
//! adds, whose rows are checked whole, written whole, then linked on one thread (the graph a
//! loop of single adds builds) or several (decision 5: R follows the longest complete run of
//! linked slots; each chunk of 16,384 ends with the support re-check).
//!
//! Invariants: no slot is linked before every slot of its batch is fully written; `count`
//! moves only after the whole batch is written, so a failed batch adds nothing; R never
//! covers a node before its backlinks are written.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::format::header::FLAG_CUSTOM_IDS;
use crate::format::{self, metadata::Metadata};
use crate::graph::{self, support, Scratch};
use crate::idmap::IdHashBuilder;

use super::{lock, Index, View, Writer};

/// Slots a parallel batch add links before publishing R (readers route through them from then).
pub(super) const PARALLEL_CHUNK: usize = 16_384;

impl Writer {
    pub(super) fn add(&mut self, vector: &[f32]) -> Result<u64> {
        self.writable()?;
        let id = self.automatic_ids(1)?[0];
        self.insert(id, vector)?;
        Ok(id)
    }

    /// The next `n` automatic ids: one above every id stored, in order.
    /// [`Error::IdsExhausted`] when they would pass 2^64 − 1. The counter stops at 2^64 − 1
    /// once a caller stored that id, so a live id there means the same. Below it no id can be
    /// live (the counter is one above every id stored), so no other id needs a look-up.
    pub(super) fn automatic_ids(&self, n: usize) -> Result<Vec<u64>> {
        let start = self.next_id;
        let exhausted = || Error::IdsExhausted {
            next: start,
            count: n as u64,
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let last = start.checked_add(n as u64 - 1).ok_or_else(exhausted)?;
        if last == u64::MAX && self.flags & FLAG_CUSTOM_IDS != 0 && self.lookup(u64::MAX)?.is_some()
        {
            return Err(exhausted());
        }
        Ok((start..=last).collect())
    }

    pub(super) fn add_with_id(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        self.writable()?;
        if self.lookup(id)?.is_some() {
            return Err(Error::DuplicateId { id });
        }
        if self.flags & FLAG_CUSTOM_IDS == 0 {
            // From now on ids need the table; build it before the flag changes lookups.
            self.with_ids(|_| ())?;
        }
        self.insert(id, vector)?;
        self.flags |= FLAG_CUSTOM_IDS;
        Ok(())
    }

    pub(super) fn insert(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        let v = self.check_vector(vector)?;
        self.insert_prepared(id, v)
    }

    /// Inserts a vector already checked (and, for cosine, normalised) under `id`: a batch of
    /// one, on this thread.
    pub(super) fn insert_prepared(&mut self, id: u64, v: Vec<f32>) -> Result<()> {
        self.insert_batch(&[id], v, &[], 1)
    }

    pub(super) fn add_batch(&mut self, vectors: &[f32], threads: usize) -> Result<Vec<u64>> {
        self.writable()?;
        let (rows, n) = self.prepare_rows(vectors)?;
        let ids = self.automatic_ids(n)?;
        self.insert_batch(&ids, rows, &[], threads)?;
        Ok(ids)
    }

    pub(super) fn add_batch_with_ids(
        &mut self,
        ids: &[u64],
        vectors: &[f32],
        threads: usize,
    ) -> Result<()> {
        self.writable()?;
        let (rows, n) = self.prepare_rows(vectors)?;
        if n != ids.len() {
            return Err(Error::InvalidArgument(format!(
                "{} ids for {n} vectors",
                ids.len()
            )));
        }
        self.check_new_ids(ids)?;
        if self.flags & FLAG_CUSTOM_IDS == 0 && !ids.is_empty() {
            // From now on ids need the table; build it before the flag changes lookups.
            self.with_ids(|_| ())?;
        }
        self.insert_batch(ids, rows, &[], threads)?;
        if !ids.is_empty() {
            self.flags |= FLAG_CUSTOM_IDS;
        }
        Ok(())
    }

    pub(super) fn add_with_metadata(&mut self, vector: &[f32], metadata: &Metadata) -> Result<u64> {
        let ids = self.add_batch_with_metadata(None, vector, std::slice::from_ref(metadata), 1)?;
        ids.first()
            .copied()
            .ok_or_else(|| Error::InvalidArgument("no vector given".into()))
    }

    pub(super) fn add_with_id_and_metadata(
        &mut self,
        id: u64,
        vector: &[f32],
        metadata: &Metadata,
    ) -> Result<()> {
        self.add_batch_with_metadata(Some(&[id]), vector, std::slice::from_ref(metadata), 1)
            .map(drop)
    }

    pub(super) fn add_batch_with_metadata(
        &mut self,
        ids: Option<&[u64]>,
        vectors: &[f32],
        metadata: &[Metadata],
        threads: usize,
    ) -> Result<Vec<u64>> {
        self.writable()?;
        let (rows, n) = self.prepare_rows(vectors)?;
        if metadata.len() != n {
            return Err(Error::InvalidArgument(format!(
                "{} metadata documents for {n} vectors",
                metadata.len()
            )));
        }
        let docs = metadata
            .iter()
            .enumerate()
            .map(|(i, m)| {
                format::metadata::encode(m).map_err(|e| match e {
                    Error::InvalidArgument(why) if n > 1 => {
                        Error::InvalidArgument(format!("row {i}: {why}"))
                    }
                    e => e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let Some(ids) = ids else {
            let ids = self.automatic_ids(n)?;
            self.insert_batch(&ids, rows, &docs, threads)?;
            return Ok(ids);
        };
        if n != ids.len() {
            return Err(Error::InvalidArgument(format!(
                "{} ids for {n} vectors",
                ids.len()
            )));
        }
        self.check_new_ids(ids)?;
        if self.flags & FLAG_CUSTOM_IDS == 0 && !ids.is_empty() {
            self.with_ids(|_| ())?;
        }
        self.insert_batch(ids, rows, &docs, threads)?;
        if !ids.is_empty() {
            self.flags |= FLAG_CUSTOM_IDS;
        }
        Ok(ids.to_vec())
    }

    /// Fails with [`Error::DuplicateId`] if an id is live or repeated.
    fn check_new_ids(&self, ids: &[u64]) -> Result<()> {
        let mut seen: HashSet<u64, IdHashBuilder> =
            HashSet::with_capacity_and_hasher(ids.len(), IdHashBuilder::default());
        for &id in ids {
            if !seen.insert(id) || self.lookup(id)?.is_some() {
                return Err(Error::DuplicateId { id });
            }
        }
        Ok(())
    }

    pub(super) fn set_metadata(&mut self, id: u64, metadata: &Metadata) -> Result<()> {
        self.writable()?;
        let old = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        let vector = self
            .store
            .vector(old)
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))?
            .to_vec();
        self.replace(id, old, vector, metadata)
    }

    pub(super) fn upsert(&mut self, id: u64, vector: &[f32], metadata: &Metadata) -> Result<()> {
        self.writable()?;
        match self.lookup(id)? {
            Some(old) => {
                let v = self.check_vector(vector)?;
                self.replace(id, old, v, metadata)
            }
            None => self.add_with_id_and_metadata(id, vector, metadata),
        }
    }

    /// Adds `vector` (already prepared) and `metadata` under `id` in a new slot, then deletes
    /// the id's old slot: all or nothing, pending until the next flush.
    fn replace(&mut self, id: u64, old: u32, vector: Vec<f32>, metadata: &Metadata) -> Result<()> {
        let doc = format::metadata::encode(metadata)?;
        if self.flags & FLAG_CUSTOM_IDS == 0 {
            // The id leaves its slot: from now on ids need the table.
            self.with_ids(|_| ())?;
        }
        // The new slot first: if it fails, nothing changed. A single row is not published by
        // `insert_batch`: searches see the new slot and the old one's delete (marked for the
        // next publication) together, in this write's publication.
        self.insert_batch(&[id], vector, std::slice::from_ref(&doc), 1)?;
        self.flags |= FLAG_CUSTOM_IDS;
        self.mark_pending_delete(old);
        self.dirty = true;
        Ok(())
    }

    /// Checks and prepares every row of a flat batch; returns them, still flat, and how many.
    pub(super) fn prepare_rows(&self, vectors: &[f32]) -> Result<(Vec<f32>, usize)> {
        let dims = self.dims();
        if !vectors.len().is_multiple_of(dims) {
            return Err(Error::InvalidArgument(format!(
                "a batch of {} floats is not whole rows of {dims}",
                vectors.len()
            )));
        }
        let mut flat = Vec::with_capacity(vectors.len());
        for v in vectors.chunks(dims) {
            flat.extend(self.check_vector(v)?);
        }
        Ok((flat, vectors.len() / dims))
    }

    /// Inserts checked rows (flat) under ids already known not to be live.
    ///
    /// Phase 1, on this thread: every slot is written (header, empty lists, then the vectors
    /// in one write per segment, which lets the kernel cache them in large pages), so the
    /// graph may link to any of them; a failure here adds nothing (`count` has not moved, and
    /// the slots written are reused by the next add). Phase 2 links them: one thread takes the
    /// single-add path slot by slot (the same graph as a loop of [`Index::add`]); more link in
    /// parallel.
    ///
    /// `docs` holds each row's encoded metadata document, or is empty for none; it is stored
    /// with its slot (phase 1) and never changes afterwards.
    pub(super) fn insert_batch(
        &mut self,
        ids: &[u64],
        flat: Vec<f32>,
        docs: &[Vec<u8>],
        threads: usize,
    ) -> Result<()> {
        let first = self.count;
        self.insert_batch_graph(ids, flat, docs, threads)?;
        // The documents join the full-text index once their slots are linked: text searches
        // see the batch with the write's publication, all at once.
        self.index_text(first, ids.len(), docs)
    }

    fn insert_batch_graph(
        &mut self,
        ids: &[u64],
        flat: Vec<f32>,
        docs: &[Vec<u8>],
        threads: usize,
    ) -> Result<()> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        };
        // Slots a rollback discarded are rewritten only once no search can read them.
        self.fence_discarded()?;
        let first = self.count;
        // Before the first list changes: a crash from here on must show the next writer.
        self.store.begin_changes(u64::from(first))?;
        if u64::from(first) + ids.len() as u64 > u64::from(u32::MAX) {
            return Err(Error::Full {
                max: u64::from(u32::MAX),
            });
        }
        let mut levels = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            let slot = first + i as u32;
            self.store.ensure_slot(slot)?;
            let level = graph::random_level(self.seed, slot, self.params.m, self.params.max_layers);
            let upper_ref = if level > 0 {
                self.store.alloc_upper(level as u32)?
            } else {
                0
            };
            let metadata_ref = match docs.get(i) {
                Some(doc) => self.store.alloc_metadata(id, doc)?,
                None => 0,
            };
            self.store
                .write_slot_with_metadata(slot, id, &[], upper_ref, metadata_ref)?;
            levels.push(level);
        }
        self.store.write_vectors(first, &flat)?;
        drop(flat);
        self.count = first + levels.len() as u32;
        // Codes from the add that brings the file to TRAIN_MIN vectors on (this one's rows
        // included), before any of its rows is routed through.
        self.train_codes_when_due()?;
        self.dirty = true;
        for &id in ids {
            self.next_id = self.next_id.max(id.saturating_add(1));
        }
        if let Some(map) = lock(&self.shared.ids).as_mut() {
            for (i, &id) in ids.iter().enumerate() {
                map.insert(id, first + i as u32);
            }
        }
        // Searches of a batch see its written slots' regions from here on, and route through
        // each slot as it is linked (`publish_routing`). A single row appears with the write's
        // own publication instead: a replacement's new slot and its old slot's delete then
        // flip in one publication, so no search sees the id twice or not at all.
        if ids.len() > 1 {
            self.publish();
        }
        self.prune_memo.ensure(self.count as usize);
        // A file with codes walks each insert's searches by them, as its searches do, and
        // scores what they found by the vectors before selecting (docs/decisions/0013).
        let walk_codes = self.store.codebook().is_some();
        if threads <= 1 || levels.len() < 2 * threads {
            let mut scratch = self.take_scratch();
            for (i, &level) in levels.iter().enumerate() {
                let slot = first + i as u32;
                // As in a single add: the graph is every slot up to this one.
                let view = View {
                    store: &self.store,
                    count: slot + 1,
                    walk: &self.shared.walk,
                    codes: false,
                };
                let before = self.entry;
                let walker = View {
                    codes: true,
                    ..view
                };
                let becomes_entry = graph::insert(
                    &view,
                    walk_codes.then_some(&walker),
                    &self.dist,
                    &self.params,
                    slot,
                    level,
                    before,
                    None,
                    Some(&self.prune_memo),
                    &mut scratch,
                );
                if becomes_entry {
                    self.entry = Some((slot, level));
                }
                let after = self.entry.map_or(slot, |(e, _)| e);
                let near = std::mem::take(&mut scratch.near);
                support::after_insert(
                    &view,
                    &self.dist,
                    &self.params,
                    slot,
                    before.map(|(e, _)| e),
                    after,
                    &near,
                    None,
                    &mut scratch,
                );
                // One thread: what a prune dropped trusting another supporter still has it.
                scratch.rechecks.clear();
                // Decision 5: R after the node and its backlinks.
                self.publish_routing(slot + 1)?;
            }
            self.put_scratch(scratch);
            return Ok(());
        }
        // Parallel: link the slots in chunks. Within a chunk R follows the longest run of
        // slots whose inserts are complete (`Prefix`), so readers route through a node only
        // once it and every node before it are linked with their backlinks (decision 5); each
        // chunk ends with the support re-check, then R at its end.
        let locks = graph::NodeLocks::new(4096 * threads);
        let entry = Mutex::new(self.entry);
        let next = AtomicU64::new(0);
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.shared.walk,
            codes: false,
        };
        let walker = View {
            codes: true,
            ..view
        };
        let mut scratches: Vec<Scratch> = (0..threads).map(|_| self.take_scratch()).collect();
        let prefix = Prefix::new(levels.len());
        for chunk_start in (0..levels.len()).step_by(PARALLEL_CHUNK) {
            let chunk_end = (chunk_start + PARALLEL_CHUNK).min(levels.len());
            next.store(chunk_start as u64, AtomicOrdering::Relaxed);
            scratches = std::thread::scope(|scope| {
                let workers: Vec<_> = scratches
                    .drain(..)
                    .map(|mut scratch| {
                        let (view, walker, locks, entry, next, levels, prefix) =
                            (&view, &walker, &locks, &entry, &next, &levels, &prefix);
                        let store = &self.store;
                        let routed = &self.shared.routed;
                        let (dist, params) = (&self.dist, &self.params);
                        let memo = &self.prune_memo;
                        // Each thread owns its scratch (moved in, handed back): scratches side
                        // by side in one Vec would share cache lines that every distance
                        // computation writes.
                        scope.spawn(move || {
                            loop {
                                let i = next.fetch_add(1, AtomicOrdering::Relaxed) as usize;
                                if i >= chunk_end {
                                    break;
                                }
                                let slot = first + i as u32;
                                let level = levels[i];
                                // A node that will top the graph holds the entry point for its
                                // whole insertion (as hnswlib does); any other lets go at once.
                                // So does one of the entry point's level with a smaller slot:
                                // the entry point is the node of lowest rank (graph::support).
                                let guard = lock(entry);
                                let current = *guard;
                                let tops = current.is_none_or(|(e, top)| {
                                    level > top || (level == top && slot < e)
                                });
                                let held = if tops {
                                    Some(guard)
                                } else {
                                    drop(guard);
                                    None
                                };
                                graph::insert(
                                    view,
                                    walk_codes.then_some(walker),
                                    dist,
                                    params,
                                    slot,
                                    level,
                                    current,
                                    Some(locks),
                                    Some(memo),
                                    &mut scratch,
                                );
                                let after = match held {
                                    Some(mut g) => {
                                        *g = Some((slot, level));
                                        if let Some((old, _)) = current {
                                            scratch.rechecks.push(old);
                                        }
                                        slot
                                    }
                                    None => current.map_or(slot, |(e, _)| e),
                                };
                                let near = std::mem::take(&mut scratch.near);
                                support::after_insert(
                                    view,
                                    dist,
                                    params,
                                    slot,
                                    current.map(|(e, _)| e),
                                    after,
                                    &near,
                                    Some(locks),
                                    &mut scratch,
                                );
                                prefix.finish(i, store, routed, first);
                            }
                            scratch
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            });
            // Threads checked supporters without locking the lists they read: re-check, on
            // this thread, every node the chunk inserted or dropped trusting another edge.
            let ep = lock(&entry).map_or(first, |(e, _)| e);
            let mut todo: Vec<u32> = (first + chunk_start as u32..first + chunk_end as u32)
                .chain(scratches.iter_mut().flat_map(|s| s.rechecks.drain(..)))
                .collect();
            todo.sort_unstable();
            todo.dedup();
            let mut scratch = scratches.pop().unwrap_or_default();
            for x in todo {
                support::ensure_supported(
                    &view,
                    &self.dist,
                    &self.params,
                    x,
                    ep,
                    &[],
                    None,
                    &mut scratch,
                );
                support::settle(&view, &self.dist, &self.params, ep, None, &mut scratch);
            }
            scratch.rechecks.clear();
            scratches.push(scratch);
            self.publish_routing(first + chunk_end as u32)?;
        }
        for s in scratches {
            self.put_scratch(s);
        }
        self.entry = entry.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(())
    }
}

/// Which slots of a parallel batch are linked, and R published over the longest run of them
/// from the batch's first slot: R never passes a slot whose insert (node and backlinks) is
/// still in progress, and readers route through new nodes while the chunk is linked rather
/// than only at its end (experiment 3 measured the difference: docs/READERS.md).
struct Prefix {
    done: Vec<AtomicBool>,
    /// How many slots from the batch's start are linked and published.
    published: Mutex<usize>,
}

impl Prefix {
    fn new(n: usize) -> Prefix {
        Prefix {
            done: (0..n).map(|_| AtomicBool::new(false)).collect(),
            published: Mutex::new(0),
        }
    }

    /// Marks batch slot `i` linked and publishes R over the complete run it may extend.
    fn finish(&self, i: usize, store: &crate::storage::Store, routed: &AtomicU32, first: u32) {
        self.done[i].store(true, AtomicOrdering::Release);
        let mut p = lock(&self.published);
        let before = *p;
        while *p < self.done.len() && self.done[*p].load(AtomicOrdering::Acquire) {
            *p += 1;
        }
        if *p > before {
            // Best effort between chunk ends: the chunk's last publication reports errors.
            let r = first + *p as u32;
            let _ = store.publish_routing_count(u64::from(r));
            routed.store(r, AtomicOrdering::Release);
        }
    }
}

impl Index {
    /// Adds a vector; the index assigns its id (one above every id stored so far, so ids are
    /// 0, 1, 2, … in an index that never used [`Index::add_with_id`]).
    pub fn add(&self, vector: &[f32]) -> Result<u64> {
        self.write_atomic(|w| w.add(vector))
    }

    /// Adds a vector under a caller-chosen id; [`Error::DuplicateId`] if `id` is live.
    pub fn add_with_id(&self, id: u64, vector: &[f32]) -> Result<()> {
        self.write_atomic(|w| w.add_with_id(id, vector))
    }

    /// Adds many vectors at once (`vectors` holds them row after row, `dims()` floats each) and
    /// returns the ids the index assigned, as [`Index::add`] would, in row order. See
    /// [`Index::add_batch_with_ids`] for threads and failures.
    pub fn add_batch(&self, vectors: &[f32], threads: usize) -> Result<Vec<u64>> {
        self.write_atomic(|w| w.add_batch(vectors, threads))
    }

    /// Adds many vectors under caller-chosen ids (`vectors` holds them row after row, `dims()`
    /// floats each, one row per id).
    ///
    /// Every row and id is checked, and every slot written, before anything is added: a row
    /// of the wrong length, a non-finite component, an id that is live or repeated in the
    /// batch, or an I/O error while writing (a full disk) fails the whole call with nothing
    /// added. Like every add, the rows are pending until [`Index::flush`].
    ///
    /// `threads` links the new nodes into the graph on that many threads (0: one per CPU);
    /// 1 gives exactly the graph a loop of single adds builds, more gives an equally good one
    /// that depends on thread timing. Readers keep searching the committed state throughout.
    pub fn add_batch_with_ids(&self, ids: &[u64], vectors: &[f32], threads: usize) -> Result<()> {
        self.write_atomic(|w| w.add_batch_with_ids(ids, vectors, threads))
    }

    /// Adds a vector with its metadata; the index assigns its id, as [`Index::add`] does.
    /// The metadata is checked first ([`Metadata`]: keys of 1 to 255 bytes not starting with
    /// `$`, finite floats, lists of scalars, at most 64 KiB encoded) and is stored with the
    /// vector, durable at the same flush.
    pub fn add_with_metadata(&self, vector: &[f32], metadata: &Metadata) -> Result<u64> {
        self.write_atomic(|w| w.add_with_metadata(vector, metadata))
    }

    /// Adds a vector with its metadata under a caller-chosen id ([`Error::DuplicateId`] if it
    /// is live; [`Index::upsert`] replaces instead).
    pub fn add_with_id_and_metadata(
        &self,
        id: u64,
        vector: &[f32],
        metadata: &Metadata,
    ) -> Result<()> {
        self.write_atomic(|w| w.add_with_id_and_metadata(id, vector, metadata))
    }

    /// Adds many vectors with their metadata (one document per row; an empty one for none),
    /// under `ids` or, without, under ids the index assigns. Everything is checked before
    /// anything is added, as in [`Index::add_batch_with_ids`]; returns the ids in row order.
    pub fn add_batch_with_metadata(
        &self,
        ids: Option<&[u64]>,
        vectors: &[f32],
        metadata: &[Metadata],
        threads: usize,
    ) -> Result<Vec<u64>> {
        self.write_atomic(|w| w.add_batch_with_metadata(ids, vectors, metadata, threads))
    }

    /// Replaces the metadata of `id`, keeping its vector bit for bit. Pending until the next
    /// flush, like an add and a delete together: the id moves to a new slot holding the same
    /// vector and the new metadata, and its old slot is deleted (so this costs about what an
    /// add costs, and the old slot's space comes back at the next compaction).
    /// [`Error::NotFound`] if `id` is not live.
    pub fn set_metadata(&self, id: u64, metadata: &Metadata) -> Result<()> {
        self.write_atomic(|w| w.set_metadata(id, metadata))
    }

    /// Stores `vector` and `metadata` under `id`: an add when `id` is not live, otherwise a
    /// replacement of both (the old vector is deleted at the same flush). Checked like an
    /// add.
    pub fn upsert(&self, id: u64, vector: &[f32], metadata: &Metadata) -> Result<()> {
        self.write_atomic(|w| w.upsert(id, vector, metadata))
    }

    /// [`Index::set_metadata`] for several ids as one write: every id is checked live first
    /// ([`Error::NotFound`], nothing changed), and searches see every replacement at once.
    pub fn set_metadata_many(&self, ids: &[u64], metadata: &[Metadata]) -> Result<()> {
        if ids.len() != metadata.len() {
            return Err(Error::InvalidArgument(format!(
                "{} metadata documents for {} ids",
                metadata.len(),
                ids.len()
            )));
        }
        self.write_atomic(|w| {
            for &id in ids {
                w.lookup(id)?.ok_or(Error::NotFound { id })?;
            }
            for (&id, m) in ids.iter().zip(metadata) {
                w.set_metadata(id, m)?;
            }
            Ok(())
        })
    }

    /// [`Index::upsert`] for several rows (`vectors` row after row) as one write: the ids not
    /// live are added as one batch (checked whole, linked on every core, as
    /// [`Index::add_batch_with_metadata`]: searches see its rows as they are linked), then the
    /// live ones replaced row by row (each replacement's new slot and old delete appear
    /// together, all of them in the write's publication). All or nothing: a row that fails
    /// (a bad vector, an I/O error) leaves the index as it was before the call.
    pub fn upsert_many(&self, ids: &[u64], vectors: &[f32], metadata: &[Metadata]) -> Result<()> {
        let dims = self.dims();
        if ids.len() != metadata.len() || vectors.len() != ids.len() * dims {
            return Err(Error::InvalidArgument(format!(
                "{} ids, {} metadata documents and {} floats (rows of {dims}) do not match",
                ids.len(),
                metadata.len(),
                vectors.len()
            )));
        }
        self.write_atomic(|w| {
            let mut seen: HashSet<u64, IdHashBuilder> =
                HashSet::with_capacity_and_hasher(ids.len(), IdHashBuilder::default());
            if !ids.iter().all(|&id| seen.insert(id)) {
                // An id given twice: each row in turn, the later replacing the earlier.
                for ((&id, v), m) in ids.iter().zip(vectors.chunks(dims.max(1))).zip(metadata) {
                    w.upsert(id, v, m)?;
                }
                return Ok(());
            }
            let mut live = Vec::new();
            for (row, &id) in ids.iter().enumerate() {
                if w.lookup(id)?.is_some() {
                    live.push(row);
                }
            }
            let is_live: HashSet<usize> = live.iter().copied().collect();
            let new: Vec<usize> = (0..ids.len()).filter(|r| !is_live.contains(r)).collect();
            if !new.is_empty() {
                let row = |r: usize| &vectors[r * dims..(r + 1) * dims];
                let flat: Vec<f32> = new.iter().flat_map(|&r| row(r).iter().copied()).collect();
                let new_ids: Vec<u64> = new.iter().map(|&r| ids[r]).collect();
                let docs: Vec<Metadata> = new.iter().map(|&r| metadata[r].clone()).collect();
                w.add_batch_with_metadata(Some(&new_ids), &flat, &docs, 0)?;
            }
            for r in live {
                w.upsert(ids[r], &vectors[r * dims..(r + 1) * dims], &metadata[r])?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::format::geometry::Geometry;
    use crate::graph::Metric;
    use crate::index::{Index, Options};
    use crate::storage::Store;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::Ordering;

    /// Decision 5: R is published only after the new node and its backlinks are written, so a
    /// reader that routes to slot R − 1 finds it linked.
    #[test]
    fn a_parallel_batch_publishes_r_as_its_slots_are_linked_never_past_one_in_progress() {
        use std::sync::{Arc, Mutex as StdMutex};
        // Dimensions no other test uses: the hook sees every store's publications.
        const DIMS: usize = 7;
        let seen: Arc<StdMutex<Vec<u64>>> = Arc::default();
        let log = Arc::clone(&seen);
        *crate::storage::SHARED_PUBLISH_HOOK.lock().unwrap() =
            Some(Arc::new(move |store: &Store, r: u64| {
                if store.header().dims as usize != DIMS || r < 2 {
                    return;
                }
                // Every slot below R is linked both ways: it lists a node, and a node lists it.
                for new in [r - 1, r / 2] {
                    let new = new as u32;
                    let own = store.level0(new).expect("slot mapped");
                    let linked_out = own.iter().any(|w| w.load(Ordering::Relaxed) != u32::MAX);
                    let linked_in = (0..r as u32).any(|s| {
                        s != new
                            && store.level0(s).is_some_and(|ws| {
                                ws.iter().any(|w| w.load(Ordering::Relaxed) == new)
                            })
                    });
                    assert!(
                        linked_out && linked_in,
                        "R = {r} published before slot {new} was linked"
                    );
                }
                log.lock().unwrap().push(r);
            }));
        let opts = Options::new(DIMS, Metric::L2Squared).m(8);
        let ix = Index::in_memory(opts, 64 << 20).unwrap();
        let rows: Vec<f32> = (0..3000 * DIMS)
            .map(|i| ((i as f32) * 0.37).sin() + (i / DIMS) as f32 * 0.001)
            .collect();
        ix.add_batch(&rows, 2).unwrap();
        *crate::storage::SHARED_PUBLISH_HOOK.lock().unwrap() = None;
        let seen = seen.lock().unwrap().clone();
        // One chunk (3,000 < 16,384): before, R was published once, at its end.
        assert!(seen.len() > 100, "R published {} times", seen.len());
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "R never goes back");
        assert_eq!(seen.last(), Some(&3000));
    }

    #[test]
    fn routing_is_published_only_after_the_node_and_its_backlinks() {
        let checked = Rc::new(Cell::new(0u32));
        let seen = Rc::clone(&checked);
        crate::storage::PUBLISH_HOOK.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |store: &Store, r: u64| {
                if r < 2 {
                    return;
                }
                let new = (r - 1) as u32;
                let own = store.level0(new).expect("new slot mapped");
                let linked_out = own.iter().any(|w| w.load(Ordering::Relaxed) < new);
                let linked_in = (0..new).any(|s| {
                    store
                        .level0(s)
                        .is_some_and(|ws| ws.iter().any(|w| w.load(Ordering::Relaxed) == new))
                });
                assert!(
                    linked_out && linked_in,
                    "R = {r} published before slot {new} was linked"
                );
                seen.set(seen.get() + 1);
            }));
        });
        let opts = Options::new(4, Metric::L2Squared)
            .m(8)
            .geometry(Geometry::small_for_tests(8, 16));
        let ix = Index::in_memory(opts, 16 << 20).unwrap();
        for i in 0..200u32 {
            let x = i as f32;
            ix.add(&[x.sin(), x.cos(), (x * 0.3).sin(), 1.0]).unwrap();
        }
        crate::storage::PUBLISH_HOOK.with(|h| *h.borrow_mut() = None);
        assert_eq!(checked.get(), 199);
    }
}
