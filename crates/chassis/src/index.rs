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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::format::geometry::Geometry;
use crate::format::header::{self, Header, FLAG_CUSTOM_IDS};
use crate::format::vector::{VectorLayout, VectorRef};
use crate::format::{self, record};
use crate::graph::{self, AlignedVector, Distance, GraphStore, Metric, Params, Scored, Scratch};
use crate::os::{FileStorage, MemStorage, Storage};
use crate::storage::{NewFile, Store};

/// Default M.
pub const DEFAULT_M: usize = 16;

/// Slots a parallel batch add links before publishing R (readers route through them from then).
const PARALLEL_CHUNK: usize = 16_384;
/// Default ef_construction.
pub const DEFAULT_EF_CONSTRUCTION: usize = 200;
/// Default ef for searches that don't name one.
pub const DEFAULT_EF_SEARCH: usize = 64;
/// Default most layers per node.
pub const DEFAULT_MAX_LAYERS: usize = 16;
/// Default seed of the level generator.
pub const DEFAULT_SEED: u64 = 0x00C4_A551_5EED;

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
    /// `Some(VectorLayout::SplitHalves)` turns a format 3 file into format 4.
    pub vector_layout: Option<VectorLayout>,
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

/// What [`Index::check`] found: every problem as one precise line, and what it looked at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// Problems, one line each; empty when all is well.
    pub problems: Vec<String>,
    /// Committed slots checked.
    pub slots: u64,
    /// Neighbor words checked (all layers).
    pub edges: u64,
    /// Neighbor words naming a slot at or past N but below R: routing hints an unflushed
    /// writer left, harmless (the next writer reuses those slots).
    pub hints: u64,
    /// Live vectors no path from the entry point reaches.
    pub unreachable: u64,
    /// Up to ten of them.
    pub unreachable_sample: Vec<u64>,
    /// recall@10 of searches for sampled stored vectors against brute force, if asked.
    pub recall: Option<f64>,
}

/// The name a migration writes its new file under before renaming: `<name>.migrating`.
pub fn migrating_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".migrating");
    path.with_file_name(name)
}

/// How to create an index.
#[derive(Clone, Debug)]
pub struct Options {
    /// Vector dimensions (1..=65,536).
    pub dims: usize,
    /// Distance metric; fixed for the life of the file.
    pub metric: Metric,
    /// M: neighbors per node on upper layers (2..=32,767); layer 0 keeps 2M.
    pub m: usize,
    /// Beam width while building (≥ 1).
    pub ef_construction: usize,
    /// Seed of the level generator: the same seed and inserts give the same graph.
    pub seed: u64,
    /// Most layers per node (1..=64).
    pub max_layers: usize,
    /// Segment and heap geometry; `None` for the production layout. Tests use
    /// [`Geometry::small_for_tests`] to cross many regions with few vectors.
    pub geometry: Option<Geometry>,
    /// How vectors are stored. The default, [`VectorLayout::SplitHalves`] (format 4), lets
    /// searches read half of each vector while they walk the graph; [`VectorLayout::F32`]
    /// writes a format 3 file, which releases that read only format 3 can open.
    pub vector_layout: VectorLayout,
}

impl Options {
    /// Defaults: M = 16, ef_construction = 200, 16 layers, production geometry.
    pub fn new(dims: usize, metric: Metric) -> Options {
        Options {
            dims,
            metric,
            m: DEFAULT_M,
            ef_construction: DEFAULT_EF_CONSTRUCTION,
            seed: DEFAULT_SEED,
            max_layers: DEFAULT_MAX_LAYERS,
            geometry: None,
            vector_layout: VectorLayout::default(),
        }
    }

    /// Sets the vector layout.
    pub fn vector_layout(mut self, layout: VectorLayout) -> Options {
        self.vector_layout = layout;
        self
    }

    /// Sets M.
    pub fn m(mut self, m: usize) -> Options {
        self.m = m;
        self
    }

    /// Sets ef_construction.
    pub fn ef_construction(mut self, ef: usize) -> Options {
        self.ef_construction = ef;
        self
    }

    /// Sets the level seed.
    pub fn seed(mut self, seed: u64) -> Options {
        self.seed = seed;
        self
    }

    /// Sets the geometry.
    pub fn geometry(mut self, g: Geometry) -> Options {
        self.geometry = Some(g);
        self
    }

    fn validate(&self) -> Result<NewFile> {
        if self.dims == 0 || self.dims > header::MAX_DIMS as usize {
            return Err(Error::InvalidArgument(format!(
                "dims must be 1..=65536, got {}",
                self.dims
            )));
        }
        if self.m < 2 || self.m > header::MAX_M as usize {
            return Err(Error::InvalidArgument(format!(
                "M must be 2..=32767 (M0 = 2M must fit in a u16), got {}",
                self.m
            )));
        }
        if self.ef_construction == 0 || self.ef_construction > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "ef_construction must be at least 1".into(),
            ));
        }
        if self.max_layers == 0 || self.max_layers > header::MAX_LAYERS_LIMIT as usize {
            return Err(Error::InvalidArgument("max_layers must be 1..=64".into()));
        }
        let (dims, m, layers) = (self.dims as u32, self.m as u32, self.max_layers as u32);
        let geometry = self
            .geometry
            .unwrap_or_else(|| Geometry::for_layout(dims, m, layers));
        if let Some(why) = geometry.validate(m, layers) {
            return Err(Error::InvalidArgument(format!("geometry: {why}")));
        }
        Ok(NewFile {
            dims,
            metric: metric_code(self.metric),
            m,
            max_layers: layers,
            ef_construction: self.ef_construction as u32,
            seed: self.seed,
            geometry,
            layout: self.vector_layout,
        })
    }
}

/// Why this release must not modify a file with this header, if it must not: a newer write
/// version, or flag bits it doesn't know (decision 7; docs/FORMAT.md, "Compatibility").
fn not_ours_to_write(h: &Header) -> Option<&'static str> {
    if h.write_version > format::WRITE_VERSION {
        Some("the file's write version is newer than this release")
    } else if h.flags & !header::KNOWN_FLAGS != 0 {
        Some("the file has flag bits this release does not know")
    } else {
        None
    }
}

fn metric_code(m: Metric) -> u32 {
    match m {
        Metric::L2Squared => header::METRIC_L2_SQUARED,
        Metric::Cosine => header::METRIC_COSINE,
        Metric::InnerProduct => header::METRIC_INNER_PRODUCT,
    }
}

pub(crate) fn metric_from_code(c: u32) -> Result<Metric> {
    match c {
        header::METRIC_L2_SQUARED => Ok(Metric::L2Squared),
        header::METRIC_COSINE => Ok(Metric::Cosine),
        header::METRIC_INNER_PRODUCT => Ok(Metric::InnerProduct),
        _ => Err(Error::corrupt(
            format!("unknown metric code {c}"),
            header::at::METRIC as u64,
        )),
    }
}

/// One search hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbor {
    /// The stored id.
    pub id: u64,
    /// Distance to the query (smaller is nearer; see [`Metric`]).
    pub distance: f32,
}

/// A summary of an open index, for `chassis info` and bindings.
#[derive(Clone, Debug)]
pub struct Info {
    /// Dimensions.
    pub dims: usize,
    /// Metric.
    pub metric: Metric,
    /// M.
    pub m: usize,
    /// M0.
    pub m0: usize,
    /// ef_construction.
    pub ef_construction: usize,
    /// Live vectors this index sees (pending adds and deletes included).
    pub count: u64,
    /// Deleted slots this index sees (pending deletes included).
    pub deleted: u64,
    /// Committed slot count N.
    pub committed_count: u64,
    /// Committed deleted count.
    pub committed_deleted: u64,
    /// Slots written (N plus pending adds).
    pub slots: u64,
    /// Delete epoch E.
    pub delete_epoch: u64,
    /// Pending delete epoch in the header.
    pub pending_delete_epoch: u64,
    /// Header sequence.
    pub sequence: u64,
    /// Which copy holds the newest header (`A` or `B`).
    pub header_copy: char,
    /// Entry point's top layer.
    pub max_layer: usize,
    /// Segment geometry: β, K, and slots per steady segment C.
    pub geometry: Geometry,
    /// Segments mapped.
    pub segments: u64,
    /// Upper-heap chunks mapped.
    pub upper_heap_chunks: u64,
    /// Table pages mapped.
    pub table_pages: u64,
    /// Whether ids were ever given by the caller.
    pub custom_ids: bool,
    /// Why the index is read-only, if it is.
    pub read_only: Option<&'static str>,
    /// Logical file length in bytes.
    pub file_bytes: u64,
    /// Read and write versions of the file.
    pub versions: (u32, u32),
    /// How the file stores vectors.
    pub vector_layout: VectorLayout,
    /// Whether searches walk this file's split vectors by exact distances (its data proved
    /// too fine for their high halves; see docs/ARCHITECTURE.md).
    pub exact_walk: bool,
}

/// What opening an index as its writer found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Whether recovery ran: the newest header was the intent of an interrupted delete flush.
    pub recovered: bool,
    /// Delete marks recovery reset to 0 (marks of the delete flush that never committed).
    pub marks_reset: u64,
    /// Committed nodes whose neighbor lists named slots past N: edges toward inserts that
    /// never committed, whose pruning may have dropped committed edges (ADR-0005 amendment).
    /// Every writer open looks (one pass over the committed neighbor lists); each such list is
    /// emptied of those edges and relinked as an insert would link it. `None` for read-only.
    pub repaired_lists: Option<u64>,
    /// Committed live vectors that no layer-0 path from the entry point reached when the file
    /// was opened, counted when lists were repaired, recovery ran, or the live page shows (or
    /// can't rule out) an earlier writer that inserted without flushing. Each is linked back
    /// at open; the new edges are committed by the next flush (until then a reader may still
    /// miss them). `None` when not counted.
    pub unreachable: Option<u64>,
    /// Live vectors still unreachable after reconnecting (normally 0). `None` when not checked.
    pub still_unreachable: Option<u64>,
}

type IdMap = HashMap<u64, u32, IdHashBuilder>;

/// The hash of the id → slot tables (writer and readers): a folded 64×64→128-bit multiply of
/// the id mixed with a per-process random seed. Building a table at 10M slots is dominated by
/// cache misses, and SipHash's rounds on top made it miss ADR-0008's 1 s (experiment 5,
/// docs/PERFORMANCE.md). The seed keeps a file's ids from choosing their own collisions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdHashBuilder {
    seed: u64,
}

impl Default for IdHashBuilder {
    fn default() -> IdHashBuilder {
        use std::hash::BuildHasher;
        IdHashBuilder {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5EED_u64) | 1,
        }
    }
}

impl std::hash::BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.seed)
    }
}

/// See [`IdHashBuilder`].
pub(crate) struct IdHasher(u64);

impl IdHasher {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    #[inline]
    fn mix(&mut self, x: u64) {
        let m = u128::from(x ^ self.0) * u128::from(Self::K);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Checks a vector or query against the index (dimensions, finite components) and returns
/// what is stored or searched: the unit vector under cosine, the vector itself otherwise.
pub(crate) fn prepare_vector(metric: Metric, dims: usize, v: &[f32]) -> Result<Vec<f32>> {
    if v.len() != dims {
        return Err(Error::DimensionMismatch {
            expected: dims,
            got: v.len(),
        });
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::InvalidVector {
            reason: format!("component {i} is {} (must be finite)", v[i]),
        });
    }
    if metric == Metric::Cosine {
        let norm = graph::distance::reference::dot(v, v).sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            return Err(Error::InvalidVector {
                reason: "a zero vector has no direction under the cosine metric".into(),
            });
        }
        return Ok(v.iter().map(|x| x / norm).collect());
    }
    Ok(v.to_vec())
}

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
    /// Distance computations made by searches on this handle (for benchmarks).
    search_distances: AtomicU64,
    report: OpenReport,
    /// Whether this file's split vectors are walked exactly, and the inserts deciding it.
    walk: WalkCheck,
}

/// The writer's running check that walking by high halves suits its data (format 4).
///
/// Every insert reports the gap between the nearest and the tenth nearest node it found, by
/// high halves and exactly. High halves keep each value to within 2⁻⁷ of itself, which moves
/// such a gap by a few percent at most when neighbors are far apart compared with the vectors'
/// size (pypi-minilm: no insert of 100,000 off by 10%), and by more than itself when they
/// nearly coincide (vectors sharing a large offset). A graph starts walked exactly, and is
/// walked by high halves once [`WalkCheck::SAMPLES`] inserts were checked (so its first links
/// are chosen by exact distances whatever the data). Whenever more than a fifth of all checked
/// inserts missed by over 10%, the file is walked exactly for good: the writer at once, readers
/// from the flush that commits [`header::FLAG_EXACT_WALK`]. Inner-product files are walked
/// exactly from the start.
#[derive(Debug, Default)]
struct WalkCheck {
    /// Decided for good: walk exactly (the header flag).
    forced: AtomicBool,
    /// Enough inserts were checked (or the file already held that many when opened).
    settled: AtomicBool,
    samples: AtomicU64,
    misses: AtomicU64,
}

impl WalkCheck {
    const SAMPLES: u64 = 64;

    fn new(flags: u32, committed: u64, metric: Metric) -> WalkCheck {
        WalkCheck {
            // Inner product on vectors of any length: a dot product's error grows with the
            // norms, and walking by high halves cost recall (0.95 to 0.905 at ef 128 on the
            // Python tests' data) where the gap check saw nothing wrong.
            forced: AtomicBool::new(
                flags & header::FLAG_EXACT_WALK != 0 || metric == Metric::InnerProduct,
            ),
            settled: AtomicBool::new(committed >= Self::SAMPLES),
            ..WalkCheck::default()
        }
    }

    fn exact(&self) -> bool {
        self.forced.load(AtomicOrdering::Relaxed) || !self.settled.load(AtomicOrdering::Relaxed)
    }

    fn note(&self, walked_gap: f32, exact_gap: f32) {
        let miss = u64::from((walked_gap - exact_gap).abs() > 0.1 * exact_gap.abs());
        let samples = self.samples.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        let misses = self.misses.fetch_add(miss, AtomicOrdering::Relaxed) + miss;
        if samples >= Self::SAMPLES {
            if misses * 5 > samples {
                self.forced.store(true, AtomicOrdering::Relaxed);
            }
            self.settled.store(true, AtomicOrdering::Relaxed);
        }
    }
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
    fn note_walk(&self, walked_gap: f32, exact_gap: f32) {
        self.walk.note(walked_gap, exact_gap);
    }
}

impl Index {
    /// Creates a new index file at `path` (which must not exist, or be empty) and opens it as
    /// the writer. The file is durable, directory entry included, when this returns.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Index> {
        let path = path.as_ref();
        let new = options.validate()?;
        let storage = FileStorage::create(path)?;
        storage.try_lock_exclusive()?;
        let store = Store::create(Arc::new(storage), &new)?;
        Index::from_store(store, Some(path.to_path_buf()), None)
    }

    /// Opens an existing index file as its writer, holding an exclusive lock for the life of
    /// the `Index`. A second writer gets [`Error::Locked`] at once. A file whose write version
    /// is newer than this release opens read-only, as SQLite does, and without the lock (the
    /// newer release's writer must still be able to open it).
    ///
    /// A file with flag bits this release doesn't know opens read-only the same way: rewriting
    /// its header would drop a bit whose meaning this release can't keep (docs/FORMAT.md,
    /// "Compatibility").
    pub fn open(path: impl AsRef<Path>) -> Result<Index> {
        let path = path.as_ref();
        let storage = Index::open_locked(path)?;
        let (current, _) = crate::storage::read_current_header(&storage)?;
        if not_ours_to_write(&current).is_some() {
            // Without the lock: the newer release's writer must still be able to open it.
            drop(storage);
            let storage = FileStorage::open(path, false)?;
            return Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true);
        }
        Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true)
    }

    /// Opens `path` for writing and takes its lock, then re-checks that the path still names
    /// the file locked: a compaction may have renamed a new file over it meanwhile, and locks
    /// follow the inode, not the path (decision 8). Reopens until they agree.
    fn open_locked(path: &Path) -> Result<FileStorage> {
        for _ in 0..100 {
            let storage = FileStorage::open(path, true)?;
            storage.try_lock_exclusive()?;
            if storage.still_at_path()? {
                return Ok(storage);
            }
        }
        Err(Error::Io(std::io::Error::other(format!(
            "{} keeps being replaced while opening it",
            path.display()
        ))))
    }

    /// Opens an existing index file read-only, without a lock and without recovery: searches
    /// see the state committed when it was opened. To follow a writer that keeps working, with
    /// a fresh snapshot per search, use [`crate::IndexReader`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Index> {
        let path = path.as_ref();
        let storage = FileStorage::open(path, false)?;
        Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), false)
    }

    /// Creates an index in any [`Storage`] (for example [`MemStorage`]), taking its lock.
    pub fn create_in(storage: Arc<dyn Storage>, options: Options) -> Result<Index> {
        let new = options.validate()?;
        storage.try_lock_exclusive()?;
        let store = Store::create(storage, &new)?;
        Index::from_store(store, None, None)
    }

    /// Opens an index in any [`Storage`] as its writer, taking its lock.
    pub fn open_in(storage: Arc<dyn Storage>) -> Result<Index> {
        storage.try_lock_exclusive()?;
        Index::open_storage_inner(storage, None, true)
    }

    /// Opens an index in any [`Storage`] read-only: no lock, no recovery.
    pub fn open_in_read_only(storage: Arc<dyn Storage>) -> Result<Index> {
        Index::open_storage_inner(storage, None, false)
    }

    /// A new in-memory index (nothing reaches a disk); handy for tests and scratch work.
    pub fn in_memory(options: Options, capacity_bytes: usize) -> Result<Index> {
        Index::create_in(Arc::new(MemStorage::new(capacity_bytes)?), options)
    }

    fn open_storage_inner(
        storage: Arc<dyn Storage>,
        path: Option<PathBuf>,
        write: bool,
    ) -> Result<Index> {
        // Headers first: a file with a newer write version must not be mapped for writing.
        let (current, _) = crate::storage::read_current_header(&*storage)?;
        let read_only = match (write, not_ours_to_write(&current)) {
            (false, _) => Some("opened read-only"),
            (true, Some(why)) => Some(why),
            (true, None) => None,
        };
        let store = Store::open(storage, read_only.is_none())?;
        Index::from_store(store, path, read_only)
    }

    fn from_store(
        store: Store,
        path: Option<PathBuf>,
        read_only: Option<&'static str>,
    ) -> Result<Index> {
        let h = store.header().clone();
        let metric = metric_from_code(h.metric)?;
        let count = h.committed_count as u32;
        let entry = if count == 0 {
            None
        } else {
            Some((h.entry_point, h.max_layer as usize))
        };
        let index = Index {
            path,
            dist: Distance::new(metric),
            params: Params {
                m: h.m as usize,
                m0: h.m0 as usize,
                ef_construction: (h.ef_construction as usize).max(1),
                max_layers: h.max_layers as usize,
            },
            seed: h.seed,
            read_only,
            count,
            entry,
            next_id: h.next_id,
            // A writer that finds "superseded" on the file at its path is looking at a file a
            // compaction marked but never renamed over (it stopped between the two): the file
            // is complete and current, and the writer's next commit clears the flag.
            // Exact walk means nothing on a format 3 file (earlier releases set it there on
            // inner-product files); the writer's next commit drops it.
            flags: if read_only.is_none() {
                let mut f = h.flags & !header::FLAG_SUPERSEDED;
                if h.layout() == VectorLayout::F32 {
                    f &= !header::FLAG_EXACT_WALK;
                }
                f
            } else {
                h.flags
            },
            pending_deletes: HashSet::new(),
            dirty: false,
            ids: Mutex::new(None),
            scratch: Mutex::new(Vec::new()),
            search_distances: AtomicU64::new(0),
            report: OpenReport::default(),
            walk: WalkCheck::new(h.flags, h.committed_count, metric),
            store,
        };
        let mut index = index;
        if let Some((ep, _)) = index.entry {
            if index.store.vector(ep).is_none() {
                return Err(Error::corrupt("entry point has no segment", 0));
            }
        }
        if index.read_only.is_none() {
            let recovery = index.store.recovery();
            // An earlier writer inserted past N without committing (R > N), or no writer ever
            // published (a live page lost to a power loss looks like that too).
            let unflushed = index
                .store
                .live_routing_count()
                .is_none_or(|r| r > u64::from(count))
                && count > 0;
            // R is not durable: the writer resets it to N before any ghost slot is reused.
            index.store.publish_routing_count(u64::from(count))?;
            index.store.publish_regions()?;
            // Every writer open scans the committed neighbor lists for edges toward slots past
            // N: after a power loss they can be on disk even when the live page is not.
            let suspect = recovery.is_some() || unflushed;
            let (repaired, unreachable) = index.repair_graph(suspect)?;
            let still_unreachable = unreachable.map(|_| index.unreachable_count());
            index.report = OpenReport {
                recovered: recovery.is_some(),
                marks_reset: recovery.unwrap_or(0),
                repaired_lists: Some(repaired),
                unreachable,
                still_unreachable,
            };
        }
        Ok(index)
    }

    /// What opening this index found (recovery, unreachable vectors).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Live vectors that no layer-0 path from the entry point reaches. Layer 0 is where every
    /// search ends (upper layers only choose where it starts), so a vector linked only from
    /// upper layers is as lost to searches as one with no links at all.
    pub fn unreachable_count(&self) -> u64 {
        self.unreachable_slots().len() as u64
    }

    fn unreachable_slots(&self) -> Vec<u32> {
        let Some((ep, _)) = self.entry else {
            return Vec::new();
        };
        let mut seen = vec![false; self.count as usize];
        let mut stack = vec![ep];
        seen[ep as usize] = true;
        while let Some(s) = stack.pop() {
            if let Some(words) = self.store.level0(s) {
                for w in words {
                    let n = w.load(std::sync::atomic::Ordering::Relaxed);
                    if n < self.count && !seen[n as usize] {
                        seen[n as usize] = true;
                        stack.push(n);
                    }
                }
            }
        }
        (0..self.count)
            .filter(|&s| !seen[s as usize] && self.slot_live(s))
            .collect()
    }

    /// Repairs what an interrupted writer left in the committed graph (see [`OpenReport`]):
    /// neighbor words naming slots at or past N (edges toward inserts that never committed)
    /// are emptied and each such node is relinked as an insert would link it, then every live
    /// vector still unreachable on layer 0 is linked back. Returns (lists repaired, vectors
    /// unreachable before). The new edges reach the file with the next flush.
    fn repair_graph(&mut self, suspect: bool) -> Result<(u64, Option<u64>)> {
        let Some(entry) = self.entry else {
            return Ok((0, None));
        };
        let n = self.count;
        let mut damaged = Vec::new();
        for slot in 0..n {
            let mut hit = false;
            let layers = self.store.upper_layers(slot);
            for layer in 0..=layers {
                let words = if layer == 0 {
                    self.store.level0(slot)
                } else {
                    self.store.upper(slot, layer)
                };
                for w in words.into_iter().flatten() {
                    let v = w.load(std::sync::atomic::Ordering::Relaxed);
                    if v != record::EMPTY && v >= n {
                        w.store(record::EMPTY, std::sync::atomic::Ordering::Relaxed);
                        hit = true;
                    }
                }
            }
            if hit {
                damaged.push(slot);
            }
        }
        if damaged.is_empty() && !suspect {
            return Ok((0, None));
        }
        let lost_before = self.unreachable_slots().len() as u64;
        let mut scratch = self.take_scratch();
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        for &slot in &damaged {
            graph::reconnect(&view, &self.dist, &self.params, slot, entry, &mut scratch);
        }
        for slot in self.unreachable_slots() {
            graph::reconnect(&view, &self.dist, &self.params, slot, entry, &mut scratch);
        }
        self.put_scratch(scratch);
        if !damaged.is_empty() || lost_before > 0 {
            self.dirty = true;
        }
        Ok((damaged.len() as u64, Some(lost_before)))
    }

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

    /// Builds the id → slot table from the slot-header arrays alone (ADR-0008 decision 3).
    fn build_id_table(&self) -> Result<IdMap> {
        // slot_live, inlined: one read of each slot header gives both the id and the deleted
        // epoch (this loop runs over every slot, 10M of them in experiment 5). The live pairs
        // are collected first, then the table filled: two passes that each stream through one
        // kind of memory (ADR-0008's experiment 5 measured this as the faster build).
        let e = self.store.header().delete_epoch;
        let pending = !self.pending_deletes.is_empty();
        let mut pairs: Vec<(u64, u32)> = Vec::with_capacity(self.count as usize);
        for slot in 0..self.count {
            let Some((id, d, _)) = self.store.slot_header(slot) else {
                continue;
            };
            if (d != 0 && d <= e) || (pending && self.pending_deletes.contains(&slot)) {
                continue;
            }
            pairs.push((id, slot));
        }
        let mut map = IdMap::with_capacity_and_hasher(pairs.len(), IdHashBuilder::default());
        for (id, slot) in pairs {
            if map.insert(id, slot).is_some() {
                return Err(Error::corrupt(
                    format!("id {id} is stored in two live slots"),
                    0,
                ));
            }
        }
        Ok(map)
    }

    fn with_ids<T>(&self, f: impl FnOnce(&mut IdMap) -> T) -> Result<T> {
        let mut guard = lock(&self.ids);
        if guard.is_none() {
            *guard = Some(self.build_id_table()?);
        }
        match guard.as_mut() {
            Some(map) => Ok(f(map)),
            None => Err(Error::corrupt("id table missing", 0)),
        }
    }

    /// The live slot holding `id`.
    fn lookup(&self, id: u64) -> Result<Option<u32>> {
        if self.flags & FLAG_CUSTOM_IDS != 0 {
            return self.with_ids(|m| m.get(&id).copied());
        }
        // Index-assigned ids: id = slot.
        if id >= u64::from(self.count) {
            return Ok(None);
        }
        let slot = id as u32;
        Ok((self.slot_live(slot) && self.id_of(slot)? == id).then_some(slot))
    }

    /// Whether `id` is stored and not deleted.
    pub fn contains(&self, id: u64) -> Result<bool> {
        Ok(self.lookup(id)?.is_some())
    }

    /// The stored vector of `id` (for cosine, the unit vector that was stored).
    pub fn get(&self, id: u64) -> Result<Vec<f32>> {
        let slot = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        self.store
            .vector(slot)
            .map(|v| v.to_vec())
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))
    }

    /// Adds a vector; the index assigns its id (one above every id stored so far, so ids are
    /// 0, 1, 2, … in an index that never used [`Index::add_with_id`]).
    pub fn add(&mut self, vector: &[f32]) -> Result<u64> {
        self.writable()?;
        let id = self.next_id;
        if self.flags & FLAG_CUSTOM_IDS != 0 && self.lookup(id)?.is_some() {
            return Err(Error::DuplicateId { id });
        }
        self.insert(id, vector)?;
        Ok(id)
    }

    /// Adds a vector under a caller-chosen id; [`Error::DuplicateId`] if `id` is live.
    pub fn add_with_id(&mut self, id: u64, vector: &[f32]) -> Result<()> {
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

    fn insert(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        let v = self.check_vector(vector)?;
        self.insert_prepared(id, v)
    }

    /// Inserts a vector already checked (and, for cosine, normalised) under `id`: a batch of
    /// one, on this thread.
    fn insert_prepared(&mut self, id: u64, v: Vec<f32>) -> Result<()> {
        self.insert_batch(&[id], v, 1)
    }

    /// Adds many vectors at once (`vectors` holds them row after row, `dims()` floats each) and
    /// returns the ids the index assigned, as [`Index::add`] would, in row order. See
    /// [`Index::add_batch_with_ids`] for threads and failures.
    pub fn add_batch(&mut self, vectors: &[f32], threads: usize) -> Result<Vec<u64>> {
        self.writable()?;
        let (rows, n) = self.prepare_rows(vectors)?;
        let start = self.next_id;
        let ids: Vec<u64> = (0..n as u64).map(|i| start.saturating_add(i)).collect();
        if self.flags & FLAG_CUSTOM_IDS != 0 {
            for &id in &ids {
                if self.lookup(id)?.is_some() {
                    return Err(Error::DuplicateId { id });
                }
            }
        }
        self.insert_batch(&ids, rows, threads)?;
        Ok(ids)
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
    pub fn add_batch_with_ids(
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
        let mut seen: HashSet<u64, IdHashBuilder> =
            HashSet::with_capacity_and_hasher(ids.len(), IdHashBuilder::default());
        for &id in ids {
            if !seen.insert(id) || self.lookup(id)?.is_some() {
                return Err(Error::DuplicateId { id });
            }
        }
        if self.flags & FLAG_CUSTOM_IDS == 0 && !ids.is_empty() {
            // From now on ids need the table; build it before the flag changes lookups.
            self.with_ids(|_| ())?;
        }
        self.insert_batch(ids, rows, threads)?;
        if !ids.is_empty() {
            self.flags |= FLAG_CUSTOM_IDS;
        }
        Ok(())
    }

    /// Checks and prepares every row of a flat batch; returns them, still flat, and how many.
    fn prepare_rows(&self, vectors: &[f32]) -> Result<(Vec<f32>, usize)> {
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
    fn insert_batch(&mut self, ids: &[u64], flat: Vec<f32>, threads: usize) -> Result<()> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        };
        let first = self.count;
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
            self.store.write_slot(slot, id, &[], upper_ref)?;
            levels.push(level);
        }
        self.store.write_vectors(first, &flat)?;
        drop(flat);
        self.count = first + levels.len() as u32;
        self.dirty = true;
        for &id in ids {
            self.next_id = self.next_id.max(id.saturating_add(1));
        }
        if let Some(map) = lock(&self.ids).as_mut() {
            for (i, &id) in ids.iter().enumerate() {
                map.insert(id, first + i as u32);
            }
        }
        if threads <= 1 || levels.len() < 2 * threads {
            let mut scratch = self.take_scratch();
            for (i, &level) in levels.iter().enumerate() {
                let slot = first + i as u32;
                // As in a single add: the graph is every slot up to this one.
                let view = View {
                    store: &self.store,
                    count: slot + 1,
                    walk: &self.walk,
                };
                let becomes_entry = graph::insert(
                    &view,
                    &self.dist,
                    &self.params,
                    slot,
                    level,
                    self.entry,
                    None,
                    &mut scratch,
                );
                if becomes_entry {
                    self.entry = Some((slot, level));
                }
                // Decision 5: R after the node and its backlinks.
                self.store.publish_routing_count(u64::from(slot) + 1)?;
            }
            self.put_scratch(scratch);
            return Ok(());
        }
        // Parallel: link the slots in chunks, publishing R after each, so readers route
        // through a chunk only once every node in it and its backlinks are written
        // (decision 5).
        let locks = graph::NodeLocks::new(4096 * threads);
        let entry = Mutex::new(self.entry);
        let next = AtomicU64::new(0);
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        let mut scratches: Vec<Scratch> = (0..threads).map(|_| self.take_scratch()).collect();
        for chunk_start in (0..levels.len()).step_by(PARALLEL_CHUNK) {
            let chunk_end = (chunk_start + PARALLEL_CHUNK).min(levels.len());
            next.store(chunk_start as u64, AtomicOrdering::Relaxed);
            scratches = std::thread::scope(|scope| {
                let workers: Vec<_> = scratches
                    .drain(..)
                    .map(|mut scratch| {
                        let (view, locks, entry, next, levels) =
                            (&view, &locks, &entry, &next, &levels);
                        let (dist, params) = (&self.dist, &self.params);
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
                                let guard = lock(entry);
                                let current = *guard;
                                let tops = current.is_none_or(|(_, top)| level > top);
                                let held = if tops {
                                    Some(guard)
                                } else {
                                    drop(guard);
                                    None
                                };
                                let becomes = graph::insert(
                                    view,
                                    dist,
                                    params,
                                    slot,
                                    level,
                                    current,
                                    Some(locks),
                                    &mut scratch,
                                );
                                if let (true, Some(mut g)) = (becomes, held) {
                                    *g = Some((slot, level));
                                }
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
            self.store
                .publish_routing_count(u64::from(first) + chunk_end as u64)?;
        }
        for s in scratches {
            self.put_scratch(s);
        }
        self.entry = entry.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(())
    }

    /// Deletes `id`. It disappears from this index's searches at once and from the file at the
    /// next flush; its slot stays in the graph for routing until a compaction.
    pub fn delete(&mut self, id: u64) -> Result<()> {
        self.writable()?;
        let slot = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        self.pending_deletes.insert(slot);
        self.dirty = true;
        if let Some(map) = lock(&self.ids).as_mut() {
            map.remove(&id);
        }
        Ok(())
    }

    /// Makes every add and delete since the last flush durable, together (decision 4: data,
    /// fsync, the other header copy, fsync). A flush with nothing pending does nothing.
    pub fn flush(&mut self) -> Result<()> {
        self.writable()?;
        if !self.dirty {
            return Ok(());
        }
        let old = self.store.header().clone();
        let deletes: Vec<u32> = self.pending_deletes.iter().copied().collect();
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
        // The bit is defined for split vectors only (format 4); on a format 3 file it would
        // mean nothing (releases before this one set it there anyway: it is ignored).
        if self.walk.forced.load(AtomicOrdering::Relaxed)
            && self.store.layout() == VectorLayout::SplitHalves
        {
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
            ..old
        };
        self.store.commit(next, &deletes)?;
        self.pending_deletes.clear();
        self.dirty = false;
        Ok(())
    }

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
    pub fn compact(&mut self, options: CompactOptions) -> Result<CompactReport> {
        self.compact_with_progress(options, |_, _| {})
    }

    /// [`Index::compact`], calling `progress(done, total)` as live vectors are copied.
    pub fn compact_with_progress(
        &mut self,
        options: CompactOptions,
        progress: impl FnMut(usize, usize),
    ) -> Result<CompactReport> {
        self.writable()?;
        let path = self.path.clone().ok_or_else(|| {
            Error::InvalidArgument("compact() needs an index opened from a path".into())
        })?;
        self.flush()?;
        let opts = self.compact_options(&options)?;
        let new_file = opts.validate()?;
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
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let storage = FileStorage::create(&tmp)?;
        storage.try_lock_exclusive()?;
        storage.sync_dir()?;
        let (mut new, report) =
            self.compact_into_with_progress(Arc::new(storage), options, progress)?;
        crate::os::rename_durably(&tmp, &path)?;
        new.path = Some(path);
        *self = new;
        Ok(report)
    }

    /// The storage-level half of [`Index::compact`], for any [`Storage`]: builds the
    /// compacted index in `storage` (an empty file, locked by the caller), makes it durable,
    /// then commits the "superseded" flag in this index's file and returns the new index. The
    /// caller then makes the new file current (for a path, by renaming it over the old one
    /// and syncing the directory); until then this file is complete and current.
    pub fn compact_into(
        &mut self,
        storage: Arc<dyn Storage>,
        options: CompactOptions,
    ) -> Result<(Index, CompactReport)> {
        self.compact_into_with_progress(storage, options, |_, _| {})
    }

    fn compact_options(&self, options: &CompactOptions) -> Result<Options> {
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
        if m == self.params.m {
            opts = opts.geometry(self.store.header().geometry);
        }
        Ok(opts)
    }

    fn compact_into_with_progress(
        &mut self,
        storage: Arc<dyn Storage>,
        options: CompactOptions,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<(Index, CompactReport)> {
        self.writable()?;
        self.flush()?;
        let opts = self.compact_options(&options)?;
        let live: Vec<u32> = (0..self.count).filter(|&s| self.slot_live(s)).collect();
        let new_file = opts.validate()?;
        let store = Store::create(storage, &new_file)?;
        let mut new = Index::from_store(store, None, None)?;
        let mut renumbered = false;
        // Batches of live vectors, linked on `options.threads` threads; the copy of one batch
        // is all the memory the rebuild holds beside the two files.
        for batch in live.chunks(PARALLEL_CHUNK) {
            let mut ids = Vec::with_capacity(batch.len());
            let mut flat = Vec::with_capacity(batch.len() * self.dims());
            for &slot in batch {
                let id = self.id_of(slot)?;
                let v = self
                    .store
                    .vector(slot)
                    .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
                renumbered |= id != u64::from(new.count) + ids.len() as u64;
                ids.push(id);
                flat.extend_from_slice(&v.to_vec());
            }
            new.insert_batch(&ids, flat, options.threads)?;
            progress(new.count as usize, live.len());
        }
        progress(live.len(), live.len());
        new.next_id = self.next_id;
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
    /// writer. `dst` must not exist. Searches then return the same ids as hnswlib at the same
    /// ef on the same queries.
    pub fn migrate_hnswlib(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
    ) -> Result<Index> {
        Index::migrate_hnswlib_with_progress(src, dst, metric, |_, _| {})
    }

    /// [`Index::migrate_hnswlib`], calling `progress(done, total)` as elements are converted.
    pub fn migrate_hnswlib_with_progress(
        src: impl AsRef<Path>,
        dst: impl AsRef<Path>,
        metric: Metric,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Index> {
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
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let mut ix = Index::create(&tmp, opts)?;
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
                ix.pending_deletes.insert(i);
            }
        }
        ix.count = n;
        ix.entry = (n > 0).then_some((h.entry_point, h.max_level.max(0) as usize));
        ix.next_id = next_id;
        ix.flags |= FLAG_CUSTOM_IDS;
        ix.dirty = true;
        ix.store.publish_routing_count(u64::from(n))?;
        ix.check_walk_on_graph();
        ix.flush()?;
        progress(h.count, h.count);
        crate::os::rename_durably(&tmp, dst)?;
        ix.path = Some(dst.to_path_buf());
        Ok(ix)
    }

    /// The walk check ([`WalkCheck`]) for a graph that came without inserts (a migrated one):
    /// up to 256 evenly spaced nodes, each with its level-0 neighbors as what an insert would
    /// have found, ordered by exact distance.
    fn check_walk_on_graph(&self) {
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        let mut buf = Vec::new();
        let step = (self.count / 256).max(1);
        for s in (0..self.count).step_by(step as usize) {
            let (Some(v), Some(words)) = (self.store.vector(s), self.store.level0(s)) else {
                continue;
            };
            let q = v.to_vec();
            let mut pairs: Vec<(f32, f32)> = words
                .iter()
                .map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
                .filter(|&n| n < self.count && n != s)
                .filter_map(|n| match self.store.vector(n)? {
                    u @ VectorRef::Split(_) => {
                        Some((self.dist.exact(&q, u, &mut buf), self.dist.walk(&q, u)))
                    }
                    _ => None,
                })
                .collect();
            if pairs.len() < 2 {
                continue;
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let j = 9.min(pairs.len() - 1);
            view.note_walk(pairs[j].1 - pairs[0].1, pairs[j].0 - pairs[0].0);
        }
    }

    /// Checks the committed index the way `PRAGMA integrity_check` checks a database: every
    /// slot header (deleted epochs against E), every neighbor word (in range), every upper-layer
    /// reference and layer count, the entry point, reachability of every live vector from the
    /// entry point, and uniqueness of live ids. With `recall_sample` > 0, also searches for that
    /// many sampled stored vectors (k = 10, ef = 64) and measures recall against brute force.
    /// Header copies, table pages and region offsets are checked when the file is opened.
    pub fn check(&self, recall_sample: usize) -> Result<CheckReport> {
        let h = self.store.header();
        let n = h.committed_count as u32;
        let routing = self
            .store
            .live_routing_count()
            .unwrap_or(u64::from(n))
            .max(u64::from(self.count));
        let mut r = CheckReport {
            slots: u64::from(n),
            ..CheckReport::default()
        };
        let mut problem = |s: String| {
            if r.problems.len() < 1000 {
                r.problems.push(s);
            }
        };
        let top = h.max_layers.saturating_sub(1) as usize;
        let mut ids: HashMap<u64, u32> = HashMap::new();
        let mut deleted = 0u64;
        for slot in 0..n {
            let Some((id, epoch, _)) = self.store.slot_header(slot) else {
                problem(format!("slot {slot}: its segment is not mapped"));
                continue;
            };
            if epoch > h.delete_epoch && h.pending_delete_epoch == 0 {
                problem(format!(
                    "slot {slot}: deleted epoch {epoch} is above the committed epoch {} with no \
                     delete pending",
                    h.delete_epoch
                ));
            }
            let live = epoch == 0 || epoch > h.delete_epoch;
            if live {
                if let Some(other) = ids.insert(id, slot) {
                    problem(format!("id {id} is live in slots {other} and {slot}"));
                }
            } else {
                deleted += 1;
            }
            let mut words: Vec<(usize, Vec<u32>)> = Vec::new();
            if let Some(w) = self.store.level0(slot) {
                words.push((
                    0,
                    w.iter()
                        .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
                        .collect(),
                ));
            }
            let upper = self.store.upper_ref(slot).unwrap_or(0);
            if upper != 0 {
                let (chunk, off) = record::split_heap_ref(upper);
                let layers = self.store.upper_layers_stored(slot).unwrap_or(0) as usize;
                if u64::from(chunk) >= self.store.upper_chunk_count()
                    || u64::from(off) < record::HEAP_CHUNK_HEAD_BYTES
                {
                    problem(format!(
                        "slot {slot}: upper-layer reference {upper:#x} is outside the heap"
                    ));
                } else if layers == 0 || layers > top {
                    problem(format!(
                        "slot {slot}: {layers} upper layers (1..={top} allowed)"
                    ));
                } else {
                    for layer in 1..=layers {
                        match self.store.upper(slot, layer) {
                            Some(w) => words.push((
                                layer,
                                w.iter()
                                    .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
                                    .collect(),
                            )),
                            None => problem(format!(
                                "slot {slot}: layer {layer}'s list lies outside its heap chunk"
                            )),
                        }
                    }
                }
            }
            for (layer, list) in words {
                for w in list {
                    if w == record::EMPTY {
                        continue;
                    }
                    r.edges += 1;
                    if w == slot {
                        problem(format!("slot {slot}: layer {layer} lists itself"));
                    } else if u64::from(w) >= routing {
                        problem(format!(
                            "slot {slot}: layer {layer} neighbor {w} is out of range (N = {n}, R = {routing})"
                        ));
                    } else if w >= n {
                        r.hints += 1;
                    }
                }
            }
        }
        if deleted != h.deleted_count && h.pending_delete_epoch == 0 {
            problem(format!(
                "{deleted} slots are deleted, the header counts {}",
                h.deleted_count
            ));
        }
        if n > 0 {
            if h.entry_point >= n {
                problem(format!(
                    "entry point {} is not below N = {n}",
                    h.entry_point
                ));
            } else if self.store.upper_layers(h.entry_point) != h.max_layer as usize {
                problem(format!(
                    "entry point {} has {} upper layers, the header says {}",
                    h.entry_point,
                    self.store.upper_layers(h.entry_point),
                    h.max_layer
                ));
            }
        } else if h.entry_point != header::NO_ENTRY {
            problem("an empty index names an entry point".into());
        }
        let lost = if r.problems.is_empty() {
            self.unreachable_slots()
        } else {
            Vec::new()
        };
        r.unreachable = lost.len() as u64;
        for &s in lost.iter().take(10) {
            r.unreachable_sample.push(self.id_of(s)?);
        }
        if r.unreachable > 0 {
            r.problems.push(format!(
                "{} live vectors are unreachable from the entry point (ids {:?}…); reopening \
                 as the writer or compacting reconnects them",
                r.unreachable, r.unreachable_sample
            ));
        }
        if recall_sample > 0 && r.problems.is_empty() && !ids.is_empty() {
            let live: Vec<u32> = (0..n).filter(|&s| self.slot_live(s)).collect();
            let step = (live.len() / recall_sample).max(1);
            let (mut found, mut total) = (0usize, 0usize);
            for &s in live.iter().step_by(step).take(recall_sample) {
                let q = self
                    .store
                    .vector(s)
                    .ok_or_else(|| Error::corrupt("vector unreadable", 0))?
                    .to_vec();
                let truth: HashSet<u32> = self.brute_force(&q, 10).iter().map(|x| x.slot).collect();
                let hits = self.search(&q, 10, 64)?;
                for hit in hits {
                    if self
                        .lookup(hit.id)?
                        .is_some_and(|slot| truth.contains(&slot))
                    {
                        found += 1;
                    }
                }
                total += truth.len();
            }
            r.recall = Some(found as f64 / total.max(1) as f64);
        }
        Ok(r)
    }

    /// Distance computations made by every [`Index::search`] on this handle so far (graph
    /// searches only; a final scan over all slots is not counted). For benchmarks: the count
    /// per query measures graph quality independently of the machine.
    pub fn search_distance_count(&self) -> u64 {
        self.search_distances.load(AtomicOrdering::Relaxed)
    }

    fn take_scratch(&self) -> Scratch {
        lock(&self.scratch).pop().unwrap_or_default()
    }

    fn put_scratch(&self, s: Scratch) {
        lock(&self.scratch).push(s);
    }

    /// The `k` nearest live vectors to `query`, nearest first, searching with beam width
    /// `max(ef, k)`. Returns min(k, len()) hits: if the graph search finds fewer (many deletes,
    /// unreachable nodes), it widens the beam and finally scans every live slot.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Neighbor>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let q = AlignedVector::new(&self.check_vector(query)?);
        let want = k.min(self.len());
        let Some((ep, max_layer)) = self.entry else {
            return Ok(Vec::new());
        };
        if want == 0 {
            return Ok(Vec::new());
        }
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        let no_deletes = self.store.header().deleted_count == 0 && self.pending_deletes.is_empty();
        let mut scratch = self.take_scratch();
        let distances_before = scratch.distance_count;
        let mut ef = ef.max(k);
        let hits = loop {
            // Two calls, not one with a runtime branch in the predicate: with no deletes the
            // filter compiles away from the hot loop.
            let hits = if no_deletes {
                graph::search(
                    &view,
                    &self.dist,
                    &q,
                    ep,
                    max_layer,
                    k,
                    ef,
                    |_| true,
                    &mut scratch,
                )
            } else {
                graph::search(
                    &view,
                    &self.dist,
                    &q,
                    ep,
                    max_layer,
                    k,
                    ef,
                    |s| self.slot_live(s),
                    &mut scratch,
                )
            };
            if hits.len() >= want {
                break hits;
            }
            if ef >= self.count as usize {
                break self.brute_force(&q, k);
            }
            ef = ef.saturating_mul(4);
        };
        self.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.put_scratch(scratch);
        hits.into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: self.id_of(s.slot)?,
                    distance: s.distance,
                })
            })
            .collect()
    }

    fn brute_force(&self, q: &[f32], k: usize) -> Vec<Scored> {
        let mut buf = Vec::new();
        let mut all: Vec<Scored> = (0..self.count)
            .filter(|&s| self.slot_live(s))
            .filter_map(|s| {
                self.store.vector(s).map(|v| Scored {
                    distance: self.dist.exact(q, v, &mut buf),
                    slot: s,
                })
            })
            .collect();
        all.sort_unstable();
        all.truncate(k);
        all
    }

    /// Every live id, in slot order.
    pub fn ids(&self) -> Result<Vec<u64>> {
        (0..self.count)
            .filter(|&s| self.slot_live(s))
            .map(|s| self.id_of(s))
            .collect()
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
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::Ordering;

    /// A graph that came without inserts (migration) gets the walk check from its own lists.
    #[test]
    fn a_graph_without_inserts_is_checked_from_its_lists() {
        for (offset, fine) in [(1000.0f32, true), (0.0, false)] {
            let mut ix = Index::in_memory(Options::new(8, Metric::L2Squared), 64 << 20).unwrap();
            let mut x = 7u64;
            for _ in 0..600 {
                let v: Vec<f32> = (0..8)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        offset + 0.01 * ((x >> 40) as f32 / (1u64 << 24) as f32)
                    })
                    .collect();
                ix.add(&v).unwrap();
            }
            assert_eq!(ix.walk.exact(), fine, "from the inserts");
            ix.walk = WalkCheck::new(0, 0, Metric::L2Squared);
            ix.check_walk_on_graph();
            assert!(ix.walk.settled.load(Ordering::Relaxed));
            assert_eq!(ix.walk.exact(), fine, "from the lists");
        }
    }

    /// Decision 5: R is published only after the new node and its backlinks are written, so a
    /// reader that routes to slot R − 1 finds it linked.
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
        let mut ix = Index::in_memory(opts, 16 << 20).unwrap();
        for i in 0..200u32 {
            let x = i as f32;
            ix.add(&[x.sin(), x.cos(), (x * 0.3).sin(), 1.0]).unwrap();
        }
        crate::storage::PUBLISH_HOOK.with(|h| *h.borrow_mut() = None);
        assert_eq!(checked.get(), 199);
    }
}
