//! [`IndexReader`]: searches from any process, without a lock, while one writer works
//! (ADR-0008 decision 5).
//!
//! A reader opens the file read-only and never writes, locks or recovers. Every search runs on
//! a [`Snapshot`] ([`snapshot`] holds the protocol that takes one): a committed header, the
//! routing count R, and the regions mapped when it was taken.
//!
//! A search traverses slots below R but returns only slots below N whose deleted epoch is 0 or
//! above E. Records at or past N are hints: they may be rewritten under the reader by a
//! restarted writer, so anything that fails to decode is skipped (every access is
//! bounds-checked), and their contents never reach a result.
//!
//! Invariants: a search's results are live in its snapshot; ids of committed slots never
//! change, so the custom-id table only ever grows per file.

mod snapshot;
mod text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::filter::index::{Compiled, DocSource, FilterIndex};
use crate::filter::search::{Strategy, Target};
use crate::filter::Filter;
use crate::format::codes::Codebook;
use crate::format::geometry::{Geometry, SegmentLayout};
use crate::format::header::{self, Header, FLAG_CUSTOM_IDS};
use crate::format::metadata::{DocRef, Metadata, ValueRef};
use crate::format::record;
use crate::format::vector::{Halves, VectorLayout, VectorRef};
use crate::graph::{self, AlignedVector, Distance, GraphStore, Metric, Scored, Scratch};
use crate::idmap::IdHashBuilder;
use crate::os::{FileStorage, Region, Storage};
use crate::query::{prepare_vector, Neighbor};
use crate::storage::VectorRanges;

use snapshot::{Cache, Counters, ReaderFile};
pub use snapshot::{Snapshot, HEADER_REREADS};

/// The custom-id table of one file: (file generation, slots scanned, id → newest slot).
type IdTable = (u64, u64, HashMap<u64, u32, IdHashBuilder>);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// What [`IndexReader::metadata_summary`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataSummary {
    /// Bytes of the committed metadata heap.
    pub bytes: u64,
    /// Live vectors with metadata.
    pub vectors: u64,
    /// Every field, by name.
    pub fields: Vec<FieldSummary>,
    /// Fields this reader has indexed for filters so far.
    pub indexed: Vec<String>,
}

/// One metadata field of [`MetadataSummary`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSummary {
    /// Its key.
    pub name: String,
    /// Live vectors that have it.
    pub vectors: u64,
    /// Its value types, in the order first seen: null, bool, int, float, string, list.
    pub types: Vec<&'static str>,
}

/// What a reader's snapshots have done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Snapshots taken.
    pub snapshots: u64,
    /// Snapshots that reused the previous one (nothing changed).
    pub fast: u64,
    /// Times both header copies were copied and verified.
    pub header_reads: u64,
    /// Re-reads of a copy that failed its checksum.
    pub rereads: u64,
    /// Regions mapped.
    pub maps: u64,
    /// Uncommitted regions remapped because their table entry changed.
    pub remaps: u64,
    /// Moves to a new file that replaced the old one at the path (compaction).
    pub reopens: u64,
}

/// A read-only view of an index file that follows its writer: every search runs on a fresh
/// snapshot of what is committed, routing through what the writer has added since.
///
/// Open it in as many processes and threads as you like, also while an [`crate::Index`] holds
/// the file's lock; it takes no lock, never writes, and never runs recovery.
pub struct IndexReader {
    path: Option<PathBuf>,
    dims: u32,
    metric: Metric,
    dist: Distance,
    cache: Mutex<Cache>,
    scratch: Mutex<Vec<Scratch>>,
    /// Distance computations made by searches on this handle (for benchmarks).
    search_distances: AtomicU64,
    /// The custom-id table: (file generation, slots scanned, id → newest slot).
    ids: Mutex<Option<IdTable>>,
    /// Field indexes of one file's committed metadata: (file generation, index).
    filters: RwLock<Option<(u64, FilterIndex)>>,
    counters: Counters,
    routing: AtomicBool,
    /// The full-text index of the newest snapshot that searched it: (file generation, root,
    /// view). Later roots of the same file reuse its open segments.
    text: Mutex<Option<(u64, u64, crate::text::TextView)>>,
    text_scratch: Mutex<Vec<crate::text::TextScratch>>,
}

impl std::fmt::Debug for IndexReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexReader")
            .field("path", &self.path)
            .field("dims", &self.dims)
            .field("metric", &self.metric)
            .finish()
    }
}

/// Slots as one snapshot sees them: places, ids, liveness, documents. `Sync`, so threads
/// that build a filter index can share it.
struct Slots<'a> {
    reader: &'a IndexReader,
    snap: &'a Snapshot,
    /// Slots a search may traverse: R, or N with routing off.
    routing: u32,
    /// What every neighbor's lookup reads, copied out of the snapshot once per view (each
    /// behind one or two `Arc`s there: a chain of loads per neighbor otherwise). N, the
    /// committed codebook with its codes' packed bytes, the segments and their geometry.
    committed: u64,
    codebook: Option<(&'a Codebook, usize)>,
    segments: &'a [(SegmentLayout, snapshot::Mapped)],
    geometry: &'a Geometry,
}

/// The graph as one snapshot sees it (one search's view: not shared between threads).
///
/// Vectors of committed slots (below N) are lent straight from the mapping: they never change.
/// Vectors of hint slots (N up to R) are copied out word by word with atomic loads into
/// `hints`, an arena that lives as long as the view: a writer that restarted after a crash may
/// be rewriting those slots while this search reads them, and a torn copy is only a poor
/// routing hint (hint slots are never returned), whereas a shared slice over memory being
/// written is undefined behaviour.
struct View<'a> {
    slots: Slots<'a>,
    /// Copies of hint-slot vectors (allocates only when one is read).
    hints: bumpalo::Bump,
}

impl<'a> std::ops::Deref for View<'a> {
    type Target = Slots<'a>;
    fn deref(&self) -> &Slots<'a> {
        &self.slots
    }
}

impl<'a> View<'a> {
    fn new(reader: &'a IndexReader, snap: &'a Snapshot) -> View<'a> {
        let routing = if reader.routing.load(Ordering::Relaxed) {
            snap.routing
        } else {
            snap.header.committed_count.min(u64::from(u32::MAX)) as u32
        };
        View {
            slots: Slots {
                reader,
                snap,
                routing,
                committed: snap.header.committed_count,
                codebook: snap
                    .regions
                    .codebook
                    .as_ref()
                    .map(|(_, book)| (&**book, book.packed_bytes())),
                segments: &snap.regions.segments,
                geometry: &snap.file.geometry,
            },
            hints: bumpalo::Bump::new(),
        }
    }

    /// A hint slot's vector (at or past N) whose parts lie at `parts` in `region`, copied out
    /// of the mapping with atomic loads.
    #[cold]
    fn hint_vector(&self, region: &Region, parts: [(u64, u64); 2]) -> Option<VectorRef<'_>> {
        let d = self.reader.dims as usize;
        // Every part takes a whole number of words at a 4-aligned offset (dims words, ⌈dims/2⌉
        // in half precision, dims/2 words each for a planar split vector's two).
        let halves = |(at, bytes): (u64, u64)| -> Option<&[u16]> {
            let words = region.u32_words(at, bytes as usize / 4).ok()?;
            let load = |w: &AtomicU32| w.load(Ordering::Relaxed).to_ne_bytes();
            Some(self.hints.alloc_slice_fill_with(bytes as usize / 2, |i| {
                let b = load(&words[i / 2]);
                let at = 2 * (i % 2);
                u16::from_ne_bytes([b[at], b[at + 1]])
            }))
        };
        let split = |h| self.walked(VectorRef::Split(h));
        Some(match self.snap.file.layout {
            VectorLayout::F16 => VectorRef::F16(&halves(parts[0])?[..d]),
            VectorLayout::F32 => {
                let words = region.u32_words(parts[0].0, d).ok()?;
                VectorRef::F32(
                    self.hints.alloc_slice_fill_iter(
                        words
                            .iter()
                            .map(|w| f32::from_bits(w.load(Ordering::Relaxed))),
                    ),
                )
            }
            VectorLayout::SplitHalves => split(Halves::side_by_side(halves(parts[0])?)),
            VectorLayout::SplitPlanar => split(Halves {
                high: halves(parts[0])?,
                low: halves(parts[1])?,
            }),
        })
    }

    /// `v` as a search walks it: a split vector exactly in a file whose header says so
    /// (flag `exact_walk`).
    #[inline]
    fn walked<'v>(&self, v: VectorRef<'v>) -> VectorRef<'v> {
        match v {
            VectorRef::Split(h) if self.snap.header.flags & header::FLAG_EXACT_WALK != 0 => {
                VectorRef::SplitExact(h)
            }
            v => v,
        }
    }
}

impl Slots<'_> {
    #[inline]
    fn place(&self, slot: u32) -> Option<(&SegmentLayout, &Region, u64)> {
        let (k, off) = self.geometry.locate(u64::from(slot));
        let (layout, m) = self.segments.get(k as usize)?;
        Some((layout, &m.region, off))
    }

    /// The two words of `slot`'s aux record (codes only), where they lie in the mapping.
    #[inline]
    fn code_aux_words(&self, slot: u32) -> Option<&[AtomicU32]> {
        self.codebook?;
        let (layout, region, off) = self.place(slot)?;
        region
            .u32_words(layout.aux_at + off * crate::format::codes::AUX_BYTES, 2)
            .ok()
    }

    /// Where `slot`'s vector lies: its segment's region and its parts in it.
    #[inline]
    fn vector_ranges(&self, slot: u32) -> Option<VectorRanges<'_>> {
        let (layout, region, off) = self.place(slot)?;
        Some((region, layout.vector_parts(off)))
    }

    fn slot_word(&self, slot: u32, field: u64) -> Option<u64> {
        let (layout, region, off) = self.place(slot)?;
        let at = layout.headers_at + off * record::SLOT_HEADER_BYTES + field;
        region.u64_at(at).ok().map(|w| w.load(Ordering::Relaxed))
    }

    /// Whether `slot` is returnable: below N, and not deleted at or before E.
    #[inline]
    fn live(&self, slot: u32) -> bool {
        if u64::from(slot) >= self.committed {
            return false;
        }
        // At delete epoch 0 no delete was ever committed: a slot's deleted epoch d is live
        // when d == 0 || d > 0, so "below N" is exact and no slot header is read (searches
        // call this for every result candidate).
        if self.snap.header.delete_epoch == 0 {
            return true;
        }
        match self.slot_word(slot, record::SLOT_DELETED_EPOCH_AT) {
            Some(d) => d == 0 || d > self.snap.header.delete_epoch,
            None => false,
        }
    }

    fn id(&self, slot: u32) -> Option<u64> {
        self.slot_word(slot, record::SLOT_ID_AT)
    }
}

impl DocSource for Slots<'_> {
    /// A committed slot's document (only those below N are ever asked for).
    fn doc(&self, slot: u32) -> Result<DocRef<'_>> {
        let unmapped = || Error::corrupt(format!("slot {slot} has no segment"), 0);
        let r = self
            .slot_word(slot, record::SLOT_METADATA_REF_AT)
            .ok_or_else(unmapped)?;
        let id = self.id(slot).ok_or_else(unmapped)?;
        let file = &self.snap.file;
        crate::storage::read_metadata(
            &self.snap.regions.metadata_chunks,
            |k| file.geometry.metadata_chunk_bytes(k),
            r,
            id,
        )
    }
}

impl GraphStore for View<'_> {
    #[inline]
    fn routing_count(&self) -> u32 {
        self.routing
    }
    #[inline(always)]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        // Committed slots are walked by their codes once the header names a codebook; a hint
        // slot (at or past N) by its vector, copied out.
        if let Some((book, packed)) = self.codebook {
            if u64::from(slot) < self.committed {
                let (layout, region, off) = self.place(slot)?;
                let at = layout.codes_at + off * layout.code_bytes;
                return region
                    .bytes(at, packed)
                    .ok()
                    .map(|c| VectorRef::Code(c, book));
            }
        }
        self.exact_vector(slot)
    }
    #[inline]
    fn code_aux(&self, slot: u32) -> Option<(f32, f32)> {
        let w = self.code_aux_words(slot)?;
        Some((
            f32::from_bits(w[0].load(Ordering::Relaxed)),
            f32::from_bits(w[1].load(Ordering::Relaxed)),
        ))
    }
    #[inline]
    fn prefetch_code_aux(&self, slot: u32) {
        if let Some(w) = self.code_aux_words(slot) {
            graph::prefetch(w.as_ptr(), 1);
        }
    }
    #[inline]
    fn will_need_exact(&self, slot: u32) {
        crate::storage::each_vector_part(self.vector_ranges(slot), Region::will_need);
    }
    #[inline]
    fn done_with_exact(&self, slot: u32) {
        crate::storage::each_vector_part(self.vector_ranges(slot), Region::release);
    }
    fn start_exact_batch(&self, slots: &[u32]) -> Option<Box<dyn graph::ExactBatch + '_>> {
        Some(Box::new(crate::storage::start_vectors_direct(
            slots.iter().map(|&s| self.vector_ranges(s)),
            self.snap.file.layout,
            self.reader.dims,
        )?))
    }
    #[inline(always)]
    fn exact_vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        let (layout, region, off) = self.place(slot)?;
        let parts = layout.vector_parts(off);
        // Committed vectors never change and are lent in place; a vector at or past N may be
        // rewritten by a restarted writer while a search reads it, so it is copied out.
        if u64::from(slot) >= self.committed {
            return self.hint_vector(region, parts);
        }
        crate::storage::lend_vector(
            region,
            self.snap.file.layout,
            parts,
            self.reader.dims as usize,
        )
        .map(|v| self.walked(v))
    }
    #[inline]
    fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
        let (layout, region, off) = self.place(slot)?;
        let at =
            layout.records_at + off * self.snap.file.record_bytes + record::RECORD_NEIGHBORS_AT;
        region.u32_words(at, 2 * self.snap.file.m as usize).ok()
    }
    #[inline]
    fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
        let (layout, region, off) = self.place(slot)?;
        let at =
            layout.records_at + off * self.snap.file.record_bytes + record::RECORD_UPPER_REF_AT;
        let r = region.u64_at(at).ok()?.load(Ordering::Acquire);
        if r == 0 || layer == 0 {
            return None;
        }
        let (c, o) = record::split_heap_ref(r);
        let chunk = &self.snap.regions.upper_chunks.get(c as usize)?.region;
        let o = u64::from(o);
        let layers = chunk
            .u32_at(o + record::UPPER_LAYERS_AT)
            .ok()?
            .load(Ordering::Relaxed);
        if layer > layers as usize {
            return None;
        }
        let m = u64::from(self.snap.file.m);
        let at = o + record::UPPER_LISTS_AT + (layer as u64 - 1) * m * 4;
        chunk.u32_words(at, self.snap.file.m as usize).ok()
    }
}

impl IndexReader {
    /// Opens the index file at `path` for reading, with no lock: it works while a writer holds
    /// the file. A file whose read version is newer than this release is [`Error::TooNew`]; a
    /// file whose write version is newer opens normally (readers never write).
    pub fn open(path: impl AsRef<Path>) -> Result<IndexReader> {
        let path = path.as_ref();
        let storage = FileStorage::open(path, false)?;
        IndexReader::open_inner(Arc::new(storage), Some(path.to_path_buf()))
    }

    /// Opens a reader over any [`Storage`] (for example a read-only
    /// [`crate::os::MemStorage`] handle).
    pub fn open_in(storage: Arc<dyn Storage>) -> Result<IndexReader> {
        IndexReader::open_inner(storage, None)
    }

    fn open_inner(storage: Arc<dyn Storage>, path: Option<PathBuf>) -> Result<IndexReader> {
        let counters = Counters::default();
        let (file, first) = ReaderFile::open(storage, 0, &counters)?;
        let metric = Metric::from_code(first.metric)?;
        let reader = IndexReader {
            path,
            dims: first.dims,
            metric,
            dist: Distance::new(metric),
            cache: Mutex::new(Cache::new(Arc::new(file))),
            scratch: Mutex::new(Vec::new()),
            search_distances: AtomicU64::new(0),
            ids: Mutex::new(None),
            filters: RwLock::new(None),
            text: Mutex::new(None),
            text_scratch: Mutex::new(Vec::new()),
            counters,
            routing: AtomicBool::new(true),
        };
        reader.snapshot()?;
        Ok(reader)
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// M of the file currently open (a compaction may change it).
    pub fn m(&self) -> usize {
        lock(&self.cache).file.m as usize
    }

    /// ef_construction the file currently open was built with.
    pub fn ef_construction(&self) -> usize {
        lock(&self.cache).file.ef_construction as usize
    }

    /// The path opened, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Turns routing through the writer's unflushed slots (R) on or off (on by default).
    /// Off, searches traverse only committed slots: the control of the readers experiment,
    /// which measures what routing is worth while a writer inserts. Results are the same kind
    /// either way (committed, live ids only); only recall differs.
    pub fn set_routing(&self, on: bool) {
        self.routing.store(on, Ordering::Relaxed);
    }

    /// What the snapshots have cost so far.
    pub fn stats(&self) -> ReaderStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReaderStats {
            snapshots: l(&c.snapshots),
            fast: l(&c.fast),
            header_reads: l(&c.header_reads),
            rereads: l(&c.rereads),
            maps: l(&c.maps),
            remaps: l(&c.remaps),
            reopens: l(&c.reopens),
        }
    }

    /// The graph as `snap` sees it, for tools and benchmarks that run [`crate::graph`]
    /// directly (experiment 2 searches it beside a flat-array copy of the same graph).
    pub fn graph<'a>(&'a self, snap: &'a Snapshot) -> impl GraphStore + 'a {
        View::new(self, snap)
    }

    /// Distance computations made by every search on this handle so far (graph searches only;
    /// a final scan over all slots is not counted). For benchmarks.
    pub fn search_distance_count(&self) -> u64 {
        self.search_distances.load(Ordering::Relaxed)
    }

    /// The `k` nearest live vectors to `query` on a fresh snapshot.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Neighbor>> {
        let snap = self.snapshot()?;
        self.search_in(&snap, query, k, ef)
    }

    /// The `k` nearest vectors live in `snap` (several searches can share one snapshot).
    /// Returns min(k, live) hits: if the graph comes up short it widens the beam, then scans.
    pub fn search_in(
        &self,
        snap: &Snapshot,
        query: &[f32],
        k: usize,
        ef: usize,
    ) -> Result<Vec<Neighbor>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let q = AlignedVector::new(&prepare_vector(self.metric, self.dims as usize, query)?);
        let h = &snap.header;
        let want = (k as u64).min(snap.len()) as usize;
        if want == 0 || h.committed_count == 0 || h.entry_point == header::NO_ENTRY {
            return Ok(Vec::new());
        }
        let (k, ef) = crate::query::bound_k_ef(k, ef, snap.len(), snap.routing_count());
        let view = View::new(self, snap);
        let mut scratch = lock(&self.scratch).pop().unwrap_or_default();
        let distances_before = scratch.distance_count;
        let mut ef = ef.max(k);
        let hits = loop {
            let hits = graph::search(
                &view,
                &self.dist,
                &q,
                h.entry_point,
                h.max_layer as usize,
                k,
                ef,
                |s| view.live(s),
                &mut scratch,
            );
            if hits.len() >= want {
                break hits;
            }
            if ef as u64 >= u64::from(view.routing) {
                break self.brute_force(&view, &q, k);
            }
            ef = ef.saturating_mul(4);
        };
        self.search_distances
            .fetch_add(scratch.distance_count - distances_before, Ordering::Relaxed);
        lock(&self.scratch).push(scratch);
        hits.into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: view
                        .id(s.slot)
                        .ok_or_else(|| Error::corrupt("slot header unreadable", 0))?,
                    distance: s.distance,
                })
            })
            .collect()
    }

    /// The `k` nearest live vectors to each of `queries`, on one fresh snapshot, one after
    /// another on the calling thread: the answers [`IndexReader::search`] gives, faster where
    /// the file is larger than memory, since each query's reads of the vectors it ranks
    /// overlap the next query's walk ([`graph::search_pipelined`]).
    pub fn search_many<Q: AsRef<[f32]>>(
        &self,
        queries: &[Q],
        k: usize,
        ef: usize,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // Not generic below, so compiled in this crate whoever calls (as Index::search_many).
        let rows: Vec<&[f32]> = queries.iter().map(|q| q.as_ref()).collect();
        self.search_rows(&rows, k, ef)
    }

    fn search_rows(&self, queries: &[&[f32]], k: usize, ef: usize) -> Result<Vec<Vec<Neighbor>>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let prepared = queries
            .iter()
            .map(|q| {
                let v = prepare_vector(self.metric, self.dims as usize, q)?;
                Ok(AlignedVector::new(&v))
            })
            .collect::<Result<Vec<_>>>()?;
        let snap = self.snapshot()?;
        let h = &snap.header;
        let want = (k as u64).min(snap.len()) as usize;
        if want == 0 || h.committed_count == 0 || h.entry_point == header::NO_ENTRY {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let (k, ef) = crate::query::bound_k_ef(k, ef, snap.len(), snap.routing_count());
        let view = View::new(self, &snap);
        let mut scratch = lock(&self.scratch).pop().unwrap_or_default();
        let distances_before = scratch.distance_count;
        let mut found = vec![Vec::new(); queries.len()];
        graph::search_pipelined(
            &view,
            &self.dist,
            &prepared,
            h.entry_point,
            h.max_layer as usize,
            k,
            ef.max(k),
            |s| view.live(s),
            &mut scratch,
            |i, hits| found[i] = hits,
        );
        self.search_distances
            .fetch_add(scratch.distance_count - distances_before, Ordering::Relaxed);
        lock(&self.scratch).push(scratch);
        found
            .into_iter()
            .zip(queries)
            .map(|(hits, query)| {
                if hits.len() < want {
                    // Short (many deletes, unreachable nodes): widen as one search would.
                    return self.search_in(&snap, query, k, ef);
                }
                hits.into_iter()
                    .map(|s| {
                        Ok(Neighbor {
                            id: view
                                .id(s.slot)
                                .ok_or_else(|| Error::corrupt("slot header unreadable", 0))?,
                            distance: s.distance,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn brute_force(&self, view: &View<'_>, q: &[f32], k: usize) -> Vec<Scored> {
        let n = view.snap.header.committed_count.min(u64::from(u32::MAX)) as u32;
        let mut buf = Vec::new();
        let mut all: Vec<Scored> = (0..n)
            .filter(|&s| view.live(s))
            .filter_map(|s| {
                view.exact_vector(s).map(|v| Scored {
                    distance: self.dist.exact(q, v, &mut buf),
                    slot: s,
                })
            })
            .collect();
        all.sort_unstable();
        all.truncate(k);
        all
    }

    /// Copies the newest committed state this reader sees to `dst`, while the file's writer
    /// (in any process) keeps working: see [`crate::Index::backup`], whose rules it follows.
    pub fn backup(&self, dst: impl AsRef<Path>) -> Result<crate::BackupReport> {
        let snap = self.snapshot()?;
        crate::backup::to_path(&*snap.file.storage, &snap.header, dst.as_ref())
    }

    /// [`crate::Index::backup_patch`] from this reader's newest committed state.
    pub fn backup_patch(
        &self,
        staging: impl AsRef<Path>,
        full: bool,
    ) -> Result<(crate::BackupReport, Vec<u8>)> {
        let snap = self.snapshot()?;
        crate::backup::to_path_with_patch(&*snap.file.storage, &snap.header, staging.as_ref(), full)
    }

    /// The storage-level step of [`IndexReader::backup`]: see [`crate::Index::backup_into`].
    pub fn backup_into(&self, dst: &dyn Storage) -> Result<crate::storage::SyncOutcome> {
        let snap = self.snapshot()?;
        crate::storage::sync_state(&*snap.file.storage, &snap.header, dst)
    }

    /// The user version the newest flush committed (the writer's
    /// [`crate::Index::set_user_version`]): it always describes the data this reader sees at
    /// the same snapshot ([`Snapshot::user_version`]).
    pub fn user_version(&self) -> Result<u64> {
        Ok(self.snapshot()?.user_version())
    }

    /// Live vectors in the current snapshot.
    pub fn len(&self) -> Result<u64> {
        Ok(self.snapshot()?.len())
    }

    /// Whether the current snapshot holds no live vector.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The slot holding `id` live in `snap`.
    fn lookup(&self, snap: &Snapshot, id: u64) -> Result<Option<u32>> {
        let view = View::new(self, snap);
        if snap.header.flags & FLAG_CUSTOM_IDS == 0 {
            if id >= snap.header.committed_count {
                return Ok(None);
            }
            let slot = id as u32;
            return Ok((view.live(slot) && view.id(slot) == Some(id)).then_some(slot));
        }
        // Ids of committed slots never change; which of them are live depends on E, so the
        // table maps each id to its newest slot and liveness is checked per snapshot.
        let mut ids = lock(&self.ids);
        let n = snap.header.committed_count;
        let generation = snap.file.generation;
        if ids.as_ref().is_some_and(|(g, _, _)| *g != generation) {
            *ids = None;
        }
        let built = ids.as_ref().map_or(0, |(_, b, _)| *b);
        if ids.is_none() || built < n {
            let (_, from, mut map) = ids.take().unwrap_or_default();
            map.reserve(n.saturating_sub(from) as usize);
            for slot in from..n {
                let slot = slot as u32;
                let id = view
                    .id(slot)
                    .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
                map.insert(id, slot);
            }
            *ids = Some((generation, n, map));
        }
        let slot = ids.as_ref().and_then(|(_, _, m)| m.get(&id).copied());
        Ok(slot.filter(|&s| view.live(s)))
    }

    /// Whether `id` is live in the current snapshot.
    pub fn contains(&self, id: u64) -> Result<bool> {
        let snap = self.snapshot()?;
        Ok(self.lookup(&snap, id)?.is_some())
    }

    /// The stored vector of `id` in the current snapshot.
    pub fn get(&self, id: u64) -> Result<Vec<f32>> {
        let snap = self.snapshot()?;
        let slot = self.lookup(&snap, id)?.ok_or(Error::NotFound { id })?;
        // The vector itself, never its code (a walk reads codes; a caller gets what it stored).
        View::new(self, &snap)
            .exact_vector(slot)
            .map(|v| v.to_vec())
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))
    }

    /// The metadata of `id` in the current snapshot (empty when it has none).
    pub fn get_metadata(&self, id: u64) -> Result<Metadata> {
        let snap = self.snapshot()?;
        let slot = self.lookup(&snap, id)?.ok_or(Error::NotFound { id })?;
        Ok(View::new(self, &snap).doc(slot)?.to_metadata())
    }

    /// The `k` nearest live vectors whose metadata passes `filter`, on a fresh snapshot (as
    /// [`crate::Index::search_filtered`]).
    pub fn search_filtered(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: &Filter,
    ) -> Result<Vec<Neighbor>> {
        let snap = self.snapshot()?;
        Ok(self.search_in_filtered(&snap, query, k, ef, filter)?.0)
    }

    /// A filtered search on `snap`, also saying how the answer was found. The reader's field
    /// indexes cover its newest snapshot's committed slots: the first filter naming a field
    /// builds that field's index, later snapshots extend it.
    pub fn search_in_filtered(
        &self,
        snap: &Snapshot,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: &Filter,
    ) -> Result<(Vec<Neighbor>, Strategy)> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        filter.validate()?;
        let q = AlignedVector::new(&prepare_vector(self.metric, self.dims as usize, query)?);
        let (k, ef) = crate::query::bound_k_ef(k, ef, snap.len(), snap.routing_count());
        let view = View::new(self, snap);
        self.with_filter(snap, &view, filter, |compiled| {
            self.filtered_on(&view, snap, &q, k, ef, compiled)
        })?
    }

    /// Runs `f` with `filter` compiled against the reader's field indexes of `snap`'s
    /// committed slots (building the indexes of the fields it names first, when needed).
    fn with_filter<T>(
        &self,
        snap: &Snapshot,
        view: &View<'_>,
        filter: &Filter,
        f: impl FnOnce(&Compiled<'_>) -> T,
    ) -> Result<T> {
        filter.validate()?;
        let n = snap.header.committed_count.min(u64::from(u32::MAX)) as u32;
        let fields = filter.fields();
        let generation = snap.file.generation;
        let ready = read_lock(&self.filters)
            .as_ref()
            .is_some_and(|(g, ix)| *g == generation && ix.ready(&fields, n));
        if !ready {
            let mut guard = write_lock(&self.filters);
            if guard.as_ref().is_none_or(|(g, _)| *g != generation) {
                *guard = Some((generation, FilterIndex::new()));
            }
            if let Some((_, ix)) = guard.as_mut() {
                ix.prepare(&fields, n, &view.slots)?;
            }
        }
        let guard = read_lock(&self.filters);
        let Some((g, index)) = guard.as_ref().filter(|(g, _)| *g == generation) else {
            // Another thread moved the index to a newer file meanwhile: this snapshot's
            // file is gone from it; build a private one.
            drop(guard);
            let mut own = FilterIndex::new();
            own.prepare(&fields, n, &view.slots)?;
            return Ok(f(&own.compile(filter)));
        };
        debug_assert_eq!(*g, generation);
        let compiled = index.compile(filter);
        Ok(f(&compiled))
    }

    fn filtered_on(
        &self,
        view: &View<'_>,
        snap: &Snapshot,
        q: &[f32],
        k: usize,
        ef: usize,
        compiled: &Compiled<'_>,
    ) -> Result<(Vec<Neighbor>, Strategy)> {
        let h = &snap.header;
        let entry = (h.committed_count > 0 && h.entry_point != header::NO_ENTRY)
            .then_some((h.entry_point, h.max_layer as usize));
        let target = Target {
            store: view,
            dist: &self.dist,
            entry,
            live: |s| view.live(s),
            upto: h.committed_count.min(u64::from(u32::MAX)) as u32,
            live_count: snap.len(),
        };
        let mut scratch = lock(&self.scratch).pop().unwrap_or_default();
        let before = scratch.distance_count;
        let (hits, strategy) =
            crate::filter::search::search(&target, q, k, ef, compiled, &mut scratch);
        self.search_distances
            .fetch_add(scratch.distance_count - before, Ordering::Relaxed);
        lock(&self.scratch).push(scratch);
        let hits = hits
            .into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: view
                        .id(s.slot)
                        .ok_or_else(|| Error::corrupt("slot header unreadable", 0))?,
                    distance: s.distance,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((hits, strategy))
    }

    /// What the metadata of `snap`'s live vectors holds: bytes, how many vectors have any,
    /// and each field with how many vectors have it and its value types (one pass over the
    /// documents; for `chassis info`).
    pub fn metadata_summary(&self, snap: &Snapshot) -> Result<MetadataSummary> {
        let view = View::new(self, snap);
        let n = snap.header.committed_count.min(u64::from(u32::MAX)) as u32;
        let mut fields: std::collections::BTreeMap<String, FieldSummary> = Default::default();
        let mut vectors = 0;
        for slot in (0..n).filter(|&s| view.live(s)) {
            let doc = view.doc(slot)?;
            if doc.is_empty() {
                continue;
            }
            vectors += 1;
            for (k, v) in doc.fields() {
                let f = fields.entry(k.to_string()).or_insert_with(|| FieldSummary {
                    name: k.to_string(),
                    vectors: 0,
                    types: Vec::new(),
                });
                f.vectors += 1;
                let t = match v {
                    ValueRef::Null => "null",
                    ValueRef::Bool(_) => "bool",
                    ValueRef::Int(_) => "int",
                    ValueRef::Float(_) => "float",
                    ValueRef::Str(_) => "string",
                    ValueRef::List(_) => "list",
                };
                if !f.types.contains(&t) {
                    f.types.push(t);
                }
            }
        }
        Ok(MetadataSummary {
            bytes: snap.metadata_bytes(),
            vectors,
            fields: fields.into_values().collect(),
            indexed: self.indexed_fields(),
        })
    }

    /// Names of the metadata fields this reader has indexed (those filters named so far).
    pub fn indexed_fields(&self) -> Vec<String> {
        read_lock(&self.filters)
            .as_ref()
            .map(|(_, ix)| ix.fields().map(|(k, _)| k.to_string()).collect())
            .unwrap_or_default()
    }

    /// Every id live in `snap`, in slot order.
    pub fn ids_in(&self, snap: &Snapshot) -> Result<Vec<u64>> {
        let view = View::new(self, snap);
        let n = snap.header.committed_count.min(u64::from(u32::MAX)) as u32;
        (0..n)
            .filter(|&s| view.live(s))
            .map(|s| {
                view.id(s)
                    .ok_or_else(|| Error::corrupt(format!("slot {s} has no segment"), 0))
            })
            .collect()
    }

    /// The header of `snap` (for inspection tools).
    pub fn header_of<'a>(&self, snap: &'a Snapshot) -> &'a Header {
        &snap.header
    }
}

#[cfg(test)]
mod tests {
    use crate::format::geometry::Geometry;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    use crate::graph::Metric;
    use crate::index::{Index, Options};
    use crate::os::MemStorage;

    use super::IndexReader;

    #[test]
    fn readers_and_snapshots_cross_threads() {
        fn is<T: Send + Sync>() {}
        is::<super::IndexReader>();
        is::<super::Snapshot>();
    }

    /// Hint slots are safe to read while a writer writes them (hardening issue, item 2): a
    /// reader lends committed vectors from the mapping but copies the vectors of slots at or
    /// past N out of it, in both layouts, with the values the writer stored.
    #[test]
    fn hint_slot_vectors_are_copied_out_and_committed_ones_lent() {
        use crate::format::vector::{VectorLayout, VectorRef};
        use crate::graph::GraphStore;
        for layout in [VectorLayout::F32, VectorLayout::SplitHalves] {
            let mem = MemStorage::new(64 << 20).unwrap();
            let reader_storage = Arc::new(mem.reopen(false));
            let opts = Options::new(4, Metric::L2Squared)
                .m(8)
                .vector_layout(layout)
                .geometry(Geometry::small_for_tests(8, 16));
            let ix = Index::create_in(Arc::new(mem), opts).unwrap();
            let v = |i: u32| {
                let x = i as f32;
                [x.sin(), x.cos(), (x * 0.3).sin(), 1.0 + x]
            };
            for i in 0..10 {
                ix.add(&v(i)).unwrap();
            }
            ix.flush().unwrap();
            for i in 10..20 {
                ix.add(&v(i)).unwrap();
            }
            let reader = IndexReader::open_in(reader_storage).unwrap();
            let snap = reader.snapshot().unwrap();
            assert_eq!((snap.committed_count(), snap.routing_count()), (10, 20));
            let view = super::View::new(&reader, &snap);
            for slot in 0..20u32 {
                let got = view.vector(slot).unwrap();
                let (_, region, _) = view.place(slot).unwrap();
                let start = region.as_ptr() as usize;
                let inside =
                    (start..start + region.len() as usize).contains(&(got.as_ptr() as usize));
                assert_eq!(inside, slot < 10, "{layout:?} slot {slot}");
                let store = ix.store();
                let want = store.vector(slot).unwrap();
                match (got, want) {
                    (VectorRef::F32(a), VectorRef::F32(b)) => assert_eq!(a, b),
                    (VectorRef::Split(a), VectorRef::Split(b)) => assert_eq!(a, b),
                    other => panic!("{layout:?}: layouts differ: {other:?}"),
                }
            }
            // And a search routes through them.
            let hits = reader.search(&v(15), 1, 16).unwrap();
            assert_eq!(hits[0].id, 9, "the nearest committed vector");
        }
    }

    /// Readers are never stale (hardening issue, item 2): a reader that takes snapshots while
    /// the writer is between any two words of a header copy still moves to the new commit as
    /// soon as it is complete. (Before the fix the writer stored the sequence and checksum
    /// before the table-page offsets; a reader that read the copy torn cached the new words
    /// and served the older snapshot until the next commit.)
    #[test]
    fn a_reader_that_sees_a_header_half_written_catches_up_when_it_is_complete() {
        let mem = MemStorage::new(64 << 20).unwrap();
        let reader_storage = Arc::new(mem.reopen(false));
        let opts = Options::new(4, Metric::L2Squared)
            .m(8)
            .geometry(Geometry::small_for_tests(8, 16));
        let ix = Index::create_in(Arc::new(mem), opts).unwrap();
        let v = |i: u32| {
            let x = i as f32;
            [x.sin(), x.cos(), (x * 0.3).sin(), 1.0]
        };
        ix.add(&v(0)).unwrap();
        ix.flush().unwrap();
        let reader = Arc::new(IndexReader::open_in(reader_storage).unwrap());
        let mut next = 1;
        for round in 0..8 {
            // Enough slots for new segments and new table pages (4 entries each) every round,
            // so the copy being written differs from what it held two commits ago.
            for _ in 0..(24 << (round / 2)) {
                ix.add(&v(next)).unwrap();
                next += 1;
            }
            let seen = Rc::new(RefCell::new(Vec::new()));
            let (r, log) = (Arc::clone(&reader), Rc::clone(&seen));
            crate::storage::HEADER_HOOK.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |_copy, _word| {
                    log.borrow_mut().push(r.snapshot().unwrap().sequence());
                }));
            });
            ix.flush().unwrap();
            crate::storage::HEADER_HOOK.with(|h| *h.borrow_mut() = None);
            let latest = ix.info().unwrap().sequence;
            let seen = seen.borrow();
            assert!(seen.len() > 30, "the hook ran at every word");
            assert!(
                seen.windows(2).all(|w| w[0] <= w[1]),
                "never went back: {seen:?}"
            );
            assert!(
                seen.iter().all(|&s| s + 1 >= latest),
                "older than the previous commit"
            );
            assert_eq!(
                reader.snapshot().unwrap().sequence(),
                latest,
                "round {round}: the reader kept an older snapshot after the commit completed"
            );
            assert_eq!(
                reader.snapshot().unwrap().committed_count(),
                u64::from(next)
            );
        }
    }
}
