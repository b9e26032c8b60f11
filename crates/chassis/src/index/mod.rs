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
//! The writer's code, one module per ADR decision it carries out: [`open`] (lock, versions,
//! recovery, repair), [`id_table`] (decision 3), [`add`] (single and batch inserts), [`flush`]
//! (deletes and the all-or-nothing flush), [`replace`] (compaction and migration, decision 8),
//! [`walk`] (how a format 4 file is walked), [`check`] (the integrity check) and [`search`].

mod add;
mod check;
mod flush;
mod id_table;
mod open;
mod options;
mod replace;
mod search;
mod walk;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, RwLock};

use crate::error::{Error, Result};
use crate::filter::index::FilterIndex;
use crate::format::header::FLAG_CUSTOM_IDS;
use crate::format::record;
use crate::format::vector::{VectorLayout, VectorRef};
use crate::graph::{Distance, GraphStore, Metric, Params, Scratch};
use crate::query::prepare_vector;
use crate::storage::Store;

pub use check::CheckReport;
pub use open::OpenReport;
pub use options::{
    Info, Options, DEFAULT_EF_CONSTRUCTION, DEFAULT_EF_SEARCH, DEFAULT_M, DEFAULT_MAX_LAYERS,
    DEFAULT_SEED,
};
pub use replace::{compacting_path, migrating_path, CompactOptions, CompactReport};

use id_table::IdMap;
use walk::WalkCheck;

/// An HNSW index over one Chassis file, opened as its single writer (or read-only).
pub struct Index {
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
    ids: Mutex<Option<IdMap>>,
    scratch: Mutex<Vec<Scratch>>,
    /// Field indexes of the metadata, built as filters name fields (never stored).
    filters: RwLock<FilterIndex>,
    /// Distance computations made by searches on this handle (for benchmarks).
    search_distances: AtomicU64,
    report: OpenReport,
    /// Whether this file's split vectors are walked exactly, and the inserts deciding it.
    walk: WalkCheck,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("path", &self.path)
            .field("dims", &self.dims())
            .field("metric", &self.metric())
            .field("len", &self.len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer's own view of the graph: every slot it has written.
struct View<'a> {
    store: &'a Store,
    count: u32,
    walk: &'a WalkCheck,
}

impl GraphStore for View<'_> {
    #[inline]
    fn routing_count(&self) -> u32 {
        self.count
    }
    #[inline]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        match self.store.vector(slot)? {
            VectorRef::Split(h) if self.walk.exact() => Some(VectorRef::SplitExact(h)),
            v => Some(v),
        }
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

impl Index {
    fn writable(&self) -> Result<()> {
        match self.read_only {
            Some(reason) => Err(Error::ReadOnly { reason }),
            None => Ok(()),
        }
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.store.header().dims as usize
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.dist.metric()
    }

    /// The path, for file-backed indexes.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether this index refuses writes, and why.
    pub fn read_only(&self) -> Option<&'static str> {
        self.read_only
    }

    /// Live vectors (this index's pending adds and deletes included).
    pub fn len(&self) -> usize {
        let deleted = self.store.header().deleted_count as usize + self.pending_deletes.len();
        self.count as usize - deleted.min(self.count as usize)
    }

    /// Whether no live vector is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether adds or deletes are waiting for a flush.
    pub fn has_pending_changes(&self) -> bool {
        self.dirty
    }

    fn check_vector(&self, v: &[f32]) -> Result<Vec<f32>> {
        prepare_vector(self.metric(), self.dims(), v)
    }

    /// Whether `slot` is live in this index's view.
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
        lock(&self.scratch).pop().unwrap_or_default()
    }

    fn put_scratch(&self, s: Scratch) {
        lock(&self.scratch).push(s);
    }

    /// A summary of the index and its file.
    pub fn info(&self) -> Result<Info> {
        let h = self.store.header();
        Ok(Info {
            dims: self.dims(),
            metric: self.metric(),
            m: self.params.m,
            m0: self.params.m0,
            ef_construction: self.params.ef_construction,
            count: self.len() as u64,
            deleted: h.deleted_count + self.pending_deletes.len() as u64,
            committed_count: h.committed_count,
            committed_deleted: h.deleted_count,
            slots: u64::from(self.count),
            delete_epoch: h.delete_epoch,
            pending_delete_epoch: h.pending_delete_epoch,
            sequence: h.sequence,
            header_copy: if self.store.header_copy() == 0 {
                'A'
            } else {
                'B'
            },
            max_layer: self.entry.map_or(0, |e| e.1),
            geometry: self.store.geometry(),
            segments: self.store.segment_count(),
            upper_heap_chunks: self.store.upper_chunk_count(),
            table_pages: self.store.table_page_count(),
            custom_ids: self.flags & FLAG_CUSTOM_IDS != 0,
            read_only: self.read_only,
            file_bytes: self.store.storage().len()?,
            versions: (h.read_version, h.write_version),
            vector_layout: h.layout(),
            exact_walk: h.layout() == VectorLayout::SplitHalves && self.walk.exact(),
            metadata_bytes: self.store.metadata_bytes(),
            metadata_chunks: self.store.metadata_chunk_count(),
            indexed_fields: self.indexed_fields(),
        })
    }

    /// The writer's graph as searches see it (every written slot), for inspection and tests.
    pub fn graph(&self) -> impl GraphStore + '_ {
        View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        }
    }

    /// The storage layer (inspection and tests).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Upper layers of a slot's node (inspection and tests).
    pub fn node_level(&self, slot: u32) -> usize {
        self.store.upper_layers(slot)
    }

    /// Level-0 neighbor slots of a slot (inspection and tests).
    pub fn level0_neighbors(&self, slot: u32) -> Vec<u32> {
        self.store.level0(slot).map_or_else(Vec::new, |w| {
            w.iter()
                .map(|x| x.load(std::sync::atomic::Ordering::Relaxed))
                .filter(|&n| n != record::EMPTY)
                .collect()
        })
    }
}
