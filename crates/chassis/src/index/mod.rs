//! The writer: one [`Index`] per file holds its exclusive lock and is the only thing that
//! changes it.
//!
//! Adds and deletes are visible to this index's own searches at once (read-your-writes) and
//! become durable together at [`Index::flush`], all or nothing (ADR-0007). Dropping an index
//! without flushing discards everything since the last flush: the next open sees the last
//! committed state (ghost slots past it are reused).
//!
//! Invariants: `count` ≥ the committed count N and every slot below `count` is fully written
//! (slot header, vector, record) before the graph links to it; the entry point is a slot below
//! `count`; a slot is live when it is below `count`, its deleted epoch is 0 or above the
//! committed epoch E, and no pending delete names it.
//!
//! Searches never wait for writes (the ADR's deferred "in-process lock-free search beside
//! writes"): an [`Index`] is `Send + Sync`; writes run one at a time under the writer mutex,
//! and each publishes what searches read ([`published`]); searches load the newest
//! publication without a lock and never touch the writer's state.
//!
//! The writer's code, one module per ADR decision it carries out: [`open`] (lock, versions,
//! recovery, repair), [`id_table`] (decision 3), [`add`] (single and batch inserts), [`flush`]
//! (deletes and the all-or-nothing flush), [`replace`] (compaction and migration, decision 8),
//! [`walk`] (how a format 4 file is walked), [`check`] (the integrity check), [`published`]
//! (what searches read, and how the writer hands it over) and [`search`].

mod add;
mod check;
mod flush;
mod id_table;
mod open;
mod options;
mod published;
mod replace;
mod rollback;
mod search;
mod text;
mod walk;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use crate::error::{Error, Result};
use crate::format::vector::VectorRef;
use crate::graph::{self, Distance, GraphStore, Metric, Params, Scratch};
use crate::query::prepare_vector;
use crate::storage::{Regions, Store};

pub use check::CheckReport;
pub use open::OpenReport;
pub use options::{
    file_id_hex, Info, Options, Precision, DEFAULT_EF_CONSTRUCTION, DEFAULT_EF_SEARCH, DEFAULT_M,
    DEFAULT_MAX_LAYERS, DEFAULT_SEED,
};
pub use replace::{compacting_path, migrating_path, CompactOptions, CompactReport};

use id_table::IdMap;
use published::{DeleteMarks, Published, Shared};
use walk::WalkCheck;

/// An HNSW index over one Chassis file, opened as its single writer (or read-only).
///
/// `Send + Sync`: share it (`Arc<Index>`, or a scoped borrow) between threads. Searches,
/// [`Index::get`], [`Index::contains`], [`Index::len`] and [`Index::info`] run on any number
/// of threads and never wait for a write; writes (adds, deletes, flush, compaction) run one at
/// a time, in the order their threads take the writer mutex. A search sees the state the last
/// finished write left (read-your-writes), or, while a write is under way, a consistent
/// earlier one: a batch add's rows appear as they are linked, in slot order.
pub struct Index {
    writer: Mutex<Writer>,
    /// The newest publication (the writer stores one after every write).
    view: Arc<ArcSwap<Published>>,
}

/// The writer's state: only the thread holding [`Index`]'s writer mutex touches it.
pub(crate) struct Writer {
    store: Store,
    path: Option<PathBuf>,
    dist: Distance,
    params: Params,
    seed: u64,
    read_only: Option<&'static str>,
    /// Slots written: N plus this session's adds.
    count: u32,
    entry: Option<(u32, usize)>,
    next_id: u64,
    flags: u32,
    pending_deletes: HashSet<u32>,
    dirty: bool,
    /// What the writer shares with searches of this file (replaced with the file at a
    /// compaction).
    shared: Arc<Shared>,
    /// Deletes as searches read them (marked at delete, before the publication).
    deleted: DeleteMarks,
    /// The user version the next flush commits ([`Index::set_user_version`]).
    user_version: u64,
    /// The full-text index as this writer sees it ([`text`]).
    text: text::TextState,
    /// What searches of states a rollback discarded still hold: no discarded slot is
    /// rewritten until each is gone ([`rollback`]).
    discarded: Vec<std::sync::Weak<published::Shared>>,
    /// Publications made so far (the last one's number).
    generation: std::sync::atomic::AtomicU64,
    /// Where this writer publishes (the handle's, kept across a compaction).
    view: Arc<ArcSwap<Published>>,
    report: OpenReport,
    /// What each layer-0 list's last prune kept together ([`graph::PruneMemo`]): the next
    /// prune skips those comparisons. This writer's memory only; cleared at a rollback.
    prune_memo: graph::PruneMemo,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("path", &self.path())
            .field("dims", &self.dims())
            .field("metric", &self.metric())
            .field("len", &self.len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A graph over regions and a routing count: the writer's own (every slot it has written) and
/// a search's (the slots its publication lets it route through).
struct View<'a> {
    store: &'a Regions,
    count: u32,
    walk: &'a WalkCheck,
    /// Walk by codes where the file has them: searches, and an insert's own searches (its
    /// walker, [`graph::insert`]), whose finds are then scored by the vectors, so
    /// selection, links and prunes see the distances they saw before codes.
    codes: bool,
}

/// Vectors a search ranks, read past the page cache (storage::start_vectors_direct), for the
/// writer's and a reader's stores alike.
impl graph::ExactBatch for crate::storage::PendingVectors<'_> {
    fn finish(self: Box<Self>, out: &mut Vec<f32>) -> bool {
        crate::storage::PendingVectors::finish(*self, out)
    }
}

impl GraphStore for View<'_> {
    #[inline]
    fn routing_count(&self) -> u32 {
        self.count
    }
    // Always inlined, with `Regions::vector` and `lend_vector` (as the reader's `View`): left
    // to the compiler, a Rust program's build of this crate (`bench`'s `build_search`) called
    // it for every neighbor scored and stalled reading the returned `VectorRef` back from the
    // stack: 13% of a 200k x 128 one-thread build, which inlined took 54 to 60 s against 68 to
    // 77 s (four alternated pairs; pypi-minilm 29 s against 39 to 41 s). The Python
    // extension's build of the same code had inlined it already (its build time unchanged).
    #[inline(always)]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        if self.codes {
            if let Some(c) = self.store.code(slot) {
                return Some(c);
            }
        }
        self.exact_vector(slot)
    }
    #[inline(always)]
    fn exact_vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        match self.store.vector(slot)? {
            VectorRef::Split(h) if self.walk.exact() => Some(VectorRef::SplitExact(h)),
            v => Some(v),
        }
    }
    #[inline]
    fn code_aux(&self, slot: u32) -> Option<(f32, f32)> {
        self.store.code_aux(slot)
    }
    #[inline]
    fn prefetch_code_aux(&self, slot: u32) {
        if let Some(w) = self.store.code_aux_words(slot) {
            graph::prefetch(w.as_ptr(), 1);
        }
    }
    #[inline]
    fn will_need_exact(&self, slot: u32) {
        self.store.will_need_vector(slot)
    }
    #[inline]
    fn done_with_exact(&self, slot: u32) {
        self.store.release_vector(slot)
    }
    fn start_exact_batch(&self, slots: &[u32]) -> Option<Box<dyn graph::ExactBatch + '_>> {
        Some(Box::new(self.store.start_vectors(slots)?))
    }
    #[inline]
    fn level0(&self, slot: u32) -> Option<&[std::sync::atomic::AtomicU32]> {
        self.store.level0(slot)
    }
    #[inline]
    fn upper(&self, slot: u32, layer: usize) -> Option<&[std::sync::atomic::AtomicU32]> {
        self.store.upper(slot, layer)
    }
    #[inline]
    fn level(&self, slot: u32) -> usize {
        self.store.upper_layers(slot)
    }
    fn note_walk(&self, walked_gap: f32, exact_gap: f32) {
        self.walk.note(walked_gap, exact_gap);
    }
}

/// The writer's store, held with the writer mutex ([`Index::store`]).
pub struct StoreGuard<'a>(MutexGuard<'a, Writer>);

impl std::ops::Deref for StoreGuard<'_> {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.0.store
    }
}

impl Index {
    fn from_writer(writer: Writer) -> Index {
        let view = Arc::clone(&writer.view);
        writer.publish();
        Index {
            writer: Mutex::new(writer),
            view,
        }
    }

    /// The newest publication: what a search reads (lock-free).
    fn current(&self) -> arc_swap::Guard<Arc<Published>> {
        self.view.load()
    }

    /// Runs a write under the writer mutex, then publishes what it left, whether it succeeded
    /// or not (a failed batch may have linked part of its rows, or moved nothing).
    fn write<T>(&self, f: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        let mut w = lock(&self.writer);
        let r = f(&mut w);
        w.publish();
        r
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.current().regions.dims()
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.current().shared.dist.metric()
    }

    /// The path, for file-backed indexes.
    pub fn path(&self) -> Option<PathBuf> {
        self.current().path.clone()
    }

    /// Whether this index refuses writes, and why.
    pub fn read_only(&self) -> Option<&'static str> {
        self.current().shared.read_only
    }

    /// Live vectors (this index's pending adds and deletes included).
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether no live vector is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether adds or deletes are waiting for a flush.
    pub fn has_pending_changes(&self) -> bool {
        self.current().dirty
    }

    /// Copies the newest committed state (the last flush) to `dst` while writes go on: an
    /// online backup that takes no lock a write holds and never writes this file. A `dst`
    /// holding an earlier backup of this file is brought up to date by shipping only what
    /// changed; a missing `dst`, or one holding another Chassis file, gets a full copy written
    /// beside it and renamed over it. `dst` is never left unopenable, even by a crash; it opens
    /// as a plain Chassis file that passes `check` and holds exactly this file's vectors, ids,
    /// metadata and deletes at the copied sequence (see `docs/SCALING.md`).
    ///
    /// Adds and deletes not flushed yet are not in the copy. Errors: [`Error::Locked`] when a
    /// writer has `dst` open, [`Error::InvalidArgument`] when `dst` is this file or a file
    /// that is not a Chassis file.
    pub fn backup(&self, dst: impl AsRef<std::path::Path>) -> Result<crate::BackupReport> {
        let p = self.view.load_full();
        crate::backup::to_path(&*p.shared.storage, &p.header, dst.as_ref())
    }

    /// [`Index::backup`] into `staging` (a file on this machine), also returning what it wrote
    /// there as a patch: bytes that bring another copy of `staging`, on a machine without
    /// access to this file system, to the same state ([`crate::apply_patch`]). A replica
    /// kept current this way ships only what changed. With `full`, `staging` is rewritten
    /// whole, so the patch is a full copy (for a replica that is missing or out of step).
    pub fn backup_patch(
        &self,
        staging: impl AsRef<std::path::Path>,
        full: bool,
    ) -> Result<(crate::BackupReport, Vec<u8>)> {
        let p = self.view.load_full();
        crate::backup::to_path_with_patch(&*p.shared.storage, &p.header, staging.as_ref(), full)
    }

    /// The storage-level step of [`Index::backup`] into any [`crate::os::Storage`] (the
    /// caller holds its writer lock): no rename and no repair pass (open the destination as a
    /// writer for that). For custom storage and the power-loss tests.
    pub fn backup_into(&self, dst: &dyn crate::os::Storage) -> Result<crate::storage::SyncOutcome> {
        let p = self.view.load_full();
        crate::storage::sync_state(&*p.shared.storage, &p.header, dst)
    }

    /// A summary of the index and its file.
    pub fn info(&self) -> Result<Info> {
        self.current().info()
    }

    /// The graph as searches see it now, for inspection and tests.
    pub fn graph(&self) -> impl GraphStore {
        published::Graph::new(self.view.load_full())
    }

    /// The storage layer (inspection and tests); holds the writer mutex while borrowed.
    pub fn store(&self) -> StoreGuard<'_> {
        StoreGuard(lock(&self.writer))
    }

    /// Upper layers of a slot's node (inspection and tests).
    pub fn node_level(&self, slot: u32) -> usize {
        self.current().regions.upper_layers(slot)
    }

    /// Level-0 neighbor slots of a slot (inspection and tests).
    pub fn level0_neighbors(&self, slot: u32) -> Vec<u32> {
        self.current().level0_neighbors(slot)
    }
}

impl Writer {
    fn writable(&self) -> Result<()> {
        match self.read_only {
            Some(reason) => Err(Error::ReadOnly { reason }),
            None => Ok(()),
        }
    }

    /// Vector dimensions.
    fn dims(&self) -> usize {
        self.store.header().dims as usize
    }

    fn metric(&self) -> Metric {
        self.dist.metric()
    }

    /// Live vectors (this index's pending adds and deletes included).
    fn len(&self) -> usize {
        let deleted = self.store.header().deleted_count as usize + self.pending_deletes.len();
        self.count as usize - deleted.min(self.count as usize)
    }

    /// The vector as it will be stored: checked and (cosine) normalised, then in a half
    /// precision file rounded to the nearest half, so that the graph, the codes and every
    /// distance see exactly the stored values.
    fn check_vector(&self, v: &[f32]) -> Result<Vec<f32>> {
        let mut p = prepare_vector(self.metric(), self.dims(), v)?;
        if self.store.layout() == crate::format::vector::VectorLayout::F16 {
            crate::query::round_to_f16(&mut p)?;
        }
        Ok(p)
    }

    /// Whether `slot` is live in this writer's view.
    #[inline]
    fn slot_live(&self, slot: u32) -> bool {
        if slot >= self.count {
            return false;
        }
        let e = self.store.header().delete_epoch;
        match self.store.deleted_epoch(slot) {
            Some(d) if d != 0 && d <= e => return false,
            None => return false,
            _ => {}
        }
        !self.pending_deletes.contains(&slot)
    }

    fn id_of(&self, slot: u32) -> Result<u64> {
        self.store
            .slot_header(slot)
            .map(|(id, _, _)| id)
            .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))
    }

    fn take_scratch(&self) -> Scratch {
        self.shared.take_scratch()
    }

    fn put_scratch(&self, s: Scratch) {
        self.shared.put_scratch(s)
    }

    /// Marks `slot` deleted, for searches from the next publication on.
    fn mark_pending_delete(&mut self, slot: u32) {
        if !self.pending_deletes.contains(&slot) {
            self.unindex_text(slot);
        }
        self.pending_deletes.insert(slot);
        let next = self.generation.load(std::sync::atomic::Ordering::Relaxed) + 1;
        self.deleted.set(slot, next);
    }

    /// Publishes R to readers in other processes (the live page) and to this process's
    /// searches.
    fn publish_routing(&self, r: u32) -> Result<()> {
        self.store.publish_routing_count(u64::from(r))?;
        self.shared
            .routed
            .store(r, std::sync::atomic::Ordering::Release);
        Ok(())
    }
}
