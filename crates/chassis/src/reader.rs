//! [`IndexReader`]: searches from any process, without a lock, while one writer works
//! (ADR-0008 decision 5).
//!
//! A reader opens the file read-only and never writes, locks or recovers. Every search takes a
//! [`Snapshot`]:
//!
//! 1. copy both header copies word by word (the writer stores them as aligned u64 words after a
//!    release fence) into local memory, verify each checksum on the copy, re-read a copy that
//!    fails a bounded number of times (the writer may be in the middle of it), take the valid
//!    one with the higher sequence, and issue an acquire fence. Every snapshot field comes from
//!    that local copy. The read version is re-checked; `pending_delete_epoch` is ignored (an
//!    intent header carries the previous commit's N and E);
//! 2. never adopt a header older than one already used: the previous snapshot stays valid,
//!    because committed data never changes;
//! 3. load R from the live page (acquire) and the writer's region counts and table page
//!    offsets; map any segment, heap chunk or table page not mapped yet, and remap an
//!    uncommitted one whose table entry changed (a restarted writer reuses that space);
//! 4. when neither header copy's sequence or checksum word nor the live page's words changed,
//!    reuse the previous snapshot (the fast path: a mutex and eight atomic loads).
//!
//! A search traverses slots below R but returns only slots below N whose deleted epoch is 0 or
//! above E. Records at or past N are hints: they may be rewritten under the reader by a
//! restarted writer, so anything that fails to decode is skipped (every access is
//! bounds-checked), and their contents never reach a result.
//!
//! Invariants: a snapshot's N, E, entry point and region list never change once built; its
//! committed regions (index below the header's counts) are never remapped; a snapshot's
//! sequence never decreases across the snapshots one reader hands out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::format::geometry::{Geometry, SegmentLayout};
use crate::format::header::{self, Header, FLAG_CUSTOM_IDS};
use crate::format::vector::{VectorLayout, VectorRef};
use crate::format::{self, align_region, live, record, table, DATA_START};
use crate::graph::{self, AlignedVector, Distance, GraphStore, Metric, Scored, Scratch};
use crate::index::{metric_from_code, prepare_vector, IdHashBuilder, Neighbor};
use crate::os::{FileIdentity, FileStorage, Region, Storage};

/// How many times a snapshot re-reads a header copy that fails its checksum before treating
/// it as invalid (the writer rewrites a copy in well under a microsecond).
pub const HEADER_REREADS: u32 = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A mapped region and where it is in the file.
#[derive(Clone, Debug)]
struct Mapped {
    offset: u64,
    region: Region,
}

/// The regions a snapshot reads: segments and upper-heap chunks, in table order.
#[derive(Debug, Default)]
struct Regions {
    segments: Vec<(SegmentLayout, Mapped)>,
    upper_chunks: Vec<Mapped>,
}

/// One consistent view of the file: a committed header, the routing count R, and the regions
/// mapped when it was taken. Cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct Snapshot {
    header: Arc<Header>,
    routing: u32,
    regions: Arc<Regions>,
    file: Arc<ReaderFile>,
}

impl Snapshot {
    /// The header sequence this snapshot came from.
    pub fn sequence(&self) -> u64 {
        self.header.sequence
    }
    /// Committed slot count N.
    pub fn committed_count(&self) -> u64 {
        self.header.committed_count
    }
    /// Delete epoch E.
    pub fn delete_epoch(&self) -> u64 {
        self.header.delete_epoch
    }
    /// Routing count R ≥ N: slots a search may route through.
    pub fn routing_count(&self) -> u64 {
        u64::from(self.routing)
    }
    /// Live vectors in this snapshot: N minus the committed deleted count.
    pub fn len(&self) -> u64 {
        self.header
            .committed_count
            .saturating_sub(self.header.deleted_count)
    }
    /// Whether the snapshot holds no live vector.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How many files the reader had moved through when it took this snapshot (0 for the file
    /// it opened; each compaction that replaced the file at its path adds one).
    pub fn file_generation(&self) -> u64 {
        self.file.generation
    }
    /// M of the file this snapshot reads.
    pub fn m(&self) -> usize {
        self.file.m as usize
    }
    /// File offsets of the segments this snapshot has mapped.
    pub fn segment_offsets(&self) -> Vec<u64> {
        self.regions
            .segments
            .iter()
            .map(|(_, m)| m.offset)
            .collect()
    }
}

/// The custom-id table of one file: (file generation, slots scanned, id → newest slot).
type IdTable = (u64, u64, HashMap<u64, u32, IdHashBuilder>);

/// One open file: a reader moves to a new one when a compaction replaces the file at its path.
struct ReaderFile {
    storage: Arc<dyn Storage>,
    meta: Region,
    m: u32,
    geometry: Geometry,
    /// How the file stores vectors (fixed for its life; a replacing file may differ).
    layout: VectorLayout,
    record_bytes: u64,
    ef_construction: u32,
    /// Which file on disk (None for storage without a path).
    identity: Option<FileIdentity>,
    /// Counts the files this reader has had open.
    generation: u64,
}

impl std::fmt::Debug for ReaderFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderFile")
            .field("identity", &self.identity)
            .field("generation", &self.generation)
            .finish()
    }
}

impl ReaderFile {
    fn open(
        storage: Arc<dyn Storage>,
        generation: u64,
        counters: &Counters,
    ) -> Result<(ReaderFile, Header)> {
        let len = storage.len()?;
        if len < DATA_START {
            // Let the header code say what is wrong (empty, not Chassis, too new, truncated).
            crate::storage::read_current_header(&*storage)?;
            return Err(Error::corrupt(
                format!("file of {len} bytes ends inside its fixed area"),
                len,
            ));
        }
        let meta = storage.map(0, DATA_START, false)?;
        let (first, _) = read_headers(&meta, counters)?;
        let identity = storage.identity()?;
        Ok((
            ReaderFile {
                storage,
                meta,
                m: first.m,
                geometry: first.geometry,
                layout: first.layout(),
                record_bytes: record::level0_record_bytes(first.m),
                ef_construction: first.ef_construction,
                identity,
                generation,
            },
            first,
        ))
    }
}

/// Mutable state behind the reader's mutex: the open file, the last snapshot and what it was
/// built from.
struct Cache {
    file: Arc<ReaderFile>,
    /// Fast-path snapshots since the last slow one (every so often the slow path runs anyway,
    /// to notice a file replaced without the superseded flag).
    fast_streak: u32,
    last: Option<Snapshot>,
    /// Sequence and checksum words of copies A and B when the last header was read.
    header_words: [u64; 4],
    /// Live page words (R, segment count, upper chunk count, table page count) last seen.
    live_words: [u64; 4],
    /// Table pages by position in the writer's list: kind and mapping.
    table_pages: Vec<(u32, Mapped)>,
}

impl Cache {
    fn new(file: Arc<ReaderFile>) -> Cache {
        Cache {
            file,
            fast_streak: 0,
            last: None,
            header_words: [0; 4],
            live_words: [0; 4],
            table_pages: Vec::new(),
        }
    }
}

/// Fast-path snapshots between checks that the file is still linked at its path.
const LINK_CHECK_EVERY: u32 = 1024;

/// Counters for tests and `chassis info`: what snapshots cost.
#[derive(Debug, Default)]
struct Counters {
    snapshots: AtomicU64,
    fast: AtomicU64,
    header_reads: AtomicU64,
    rereads: AtomicU64,
    maps: AtomicU64,
    remaps: AtomicU64,
    reopens: AtomicU64,
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
    counters: Counters,
    routing: AtomicBool,
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

/// The graph as one snapshot sees it.
struct View<'a> {
    reader: &'a IndexReader,
    snap: &'a Snapshot,
    /// Slots a search may traverse: R, or N with routing off.
    routing: u32,
}

impl<'a> View<'a> {
    fn new(reader: &'a IndexReader, snap: &'a Snapshot) -> View<'a> {
        let routing = if reader.routing.load(Ordering::Relaxed) {
            snap.routing
        } else {
            snap.header.committed_count.min(u64::from(u32::MAX)) as u32
        };
        View {
            reader,
            snap,
            routing,
        }
    }

    #[inline]
    fn place(&self, slot: u32) -> Option<(&SegmentLayout, &Region, u64)> {
        let (k, off) = self.snap.file.geometry.locate(u64::from(slot));
        let (layout, m) = self.snap.regions.segments.get(k as usize)?;
        Some((layout, &m.region, off))
    }

    fn slot_word(&self, slot: u32, field: u64) -> Option<u64> {
        let (layout, region, off) = self.place(slot)?;
        let at = layout.headers_at + off * record::SLOT_HEADER_BYTES + field;
        region.u64_at(at).ok().map(|w| w.load(Ordering::Relaxed))
    }

    /// Whether `slot` is returnable: below N, and not deleted at or before E.
    #[inline]
    fn live(&self, slot: u32) -> bool {
        if u64::from(slot) >= self.snap.header.committed_count {
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

impl GraphStore for View<'_> {
    #[inline]
    fn routing_count(&self) -> u32 {
        self.routing
    }
    #[inline]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        let (layout, region, off) = self.place(slot)?;
        let d = u64::from(self.reader.dims);
        let at = layout.vectors_at + off * 4 * d;
        // Committed vectors never change. A vector at or past N may be rewritten by a
        // restarted writer while a search reads it: a hint that costs routing, never results.
        match self.snap.file.layout {
            VectorLayout::F32 => region
                .f32s(at, self.reader.dims as usize)
                .ok()
                .map(VectorRef::F32),
            VectorLayout::SplitHalves => {
                let h = region.u16s(at, 2 * self.reader.dims as usize).ok()?;
                Some(if self.snap.header.flags & header::FLAG_EXACT_WALK != 0 {
                    VectorRef::SplitExact(h)
                } else {
                    VectorRef::Split(h)
                })
            }
        }
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
        let metric = metric_from_code(first.metric)?;
        let reader = IndexReader {
            path,
            dims: first.dims,
            metric,
            dist: Distance::new(metric),
            cache: Mutex::new(Cache::new(Arc::new(file))),
            scratch: Mutex::new(Vec::new()),
            search_distances: AtomicU64::new(0),
            ids: Mutex::new(None),
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

    /// Takes a snapshot of what is committed now (never older than one already taken from
    /// the same file). When a compaction has replaced the file at the path (the old file says
    /// "superseded", or it has no links left), the reader moves to the new file.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
        let mut cache = lock(&self.cache);
        for _ in 0..8 {
            match self.snapshot_locked(&mut cache)? {
                Some(snap) => return Ok(snap),
                None => continue, // moved to the replacement file: take its snapshot
            }
        }
        Err(Error::Io(std::io::Error::other(
            "the index file keeps being replaced under a reader",
        )))
    }

    /// One snapshot of the cached file, or `None` after moving to a replacement file.
    fn snapshot_locked(&self, cache: &mut Cache) -> Result<Option<Snapshot>> {
        let file = Arc::clone(&cache.file);
        let header_words = header_words(&file.meta)?;
        let live_words = live_words(&file.meta)?;
        if let Some(last) = &cache.last {
            if header_words == cache.header_words
                && live_words == cache.live_words
                && cache.fast_streak < LINK_CHECK_EVERY
            {
                cache.fast_streak += 1;
                self.counters.fast.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(last.clone()));
            }
        }
        cache.fast_streak = 0;
        let header = match &cache.last {
            Some(last) if header_words == cache.header_words => Arc::clone(&last.header),
            _ => {
                let (h, _) = read_headers(&file.meta, &self.counters)?;
                self.check_same_index(&file, &h)?;
                match &cache.last {
                    // Never go back: the older header's state is already superseded.
                    Some(last) if h.sequence < last.header.sequence => Arc::clone(&last.header),
                    _ => Arc::new(h),
                }
            }
        };
        if self.move_if_replaced(cache, &header)? {
            return Ok(None);
        }
        let regions = self.map_regions(&file, cache, &header, &live_words)?;
        let slots = file
            .geometry
            .segment_first_slot(regions.segments.len() as u64);
        let n = header.committed_count;
        let routing = if live_words[0] == u64::MAX {
            n
        } else {
            live_words[0].clamp(n, slots.max(n))
        };
        let snap = Snapshot {
            header,
            routing: routing.min(u64::from(u32::MAX)) as u32,
            regions,
            file,
        };
        cache.header_words = header_words;
        cache.live_words = live_words;
        cache.last = Some(snap.clone());
        Ok(Some(snap))
    }

    /// If the file says it is superseded, or has no links left, and the path now names another
    /// file, opens that one in its place (decision 8) and returns true. A superseded file
    /// still at the path (a compaction stopped between its flag and its rename) stays in use:
    /// it is complete, and the next writer clears the flag.
    fn move_if_replaced(&self, cache: &mut Cache, h: &Header) -> Result<bool> {
        let (Some(path), Some(mine)) = (&self.path, cache.file.identity) else {
            return Ok(false);
        };
        let superseded = h.flags & header::FLAG_SUPERSEDED != 0;
        let unlinked = cache
            .file
            .storage
            .identity()?
            .is_some_and(|now| now.nlink == 0);
        if !superseded && !unlinked {
            return Ok(false);
        }
        let Some(at_path) = crate::os::path_identity(path)? else {
            return Ok(false);
        };
        if (at_path.dev, at_path.ino) == (mine.dev, mine.ino) {
            return Ok(false);
        }
        let storage = Arc::new(FileStorage::open(path, false)?);
        let (file, first) = ReaderFile::open(storage, cache.file.generation + 1, &self.counters)?;
        if first.dims != self.dims || metric_from_code(first.metric)? != self.metric {
            return Err(Error::corrupt(
                "the file at the path was replaced by an index of other dimensions or metric",
                0,
            ));
        }
        self.counters.reopens.fetch_add(1, Ordering::Relaxed);
        *cache = Cache::new(Arc::new(file));
        Ok(true)
    }

    fn check_same_index(&self, file: &ReaderFile, h: &Header) -> Result<()> {
        if h.dims != self.dims
            || h.m != file.m
            || h.geometry != file.geometry
            || h.layout() != file.layout
        {
            return Err(Error::corrupt(
                "the header's dimensions, M, geometry or vector layout changed under a reader",
                0,
            ));
        }
        Ok(())
    }

    fn map(
        &self,
        file: &ReaderFile,
        offset: u64,
        bytes: u64,
        at: u64,
        file_len: &mut Option<u64>,
    ) -> Result<Mapped> {
        // The file length is read only to map a region, and once per snapshot.
        let len = match *file_len {
            Some(l) => l,
            None => {
                let l = file.storage.len()?;
                *file_len = Some(l);
                l
            }
        };
        table::check_region(offset, bytes, len, at)?;
        let region = file.storage.map(offset, bytes, false)?;
        self.counters.maps.fetch_add(1, Ordering::Relaxed);
        Ok(Mapped { offset, region })
    }

    /// Maps what `header` and the live page name; committed regions must map, uncommitted
    /// ones are hints (a failure stops routing there). Reuses `cache.last`'s regions when
    /// nothing changed.
    fn map_regions(
        &self,
        file: &ReaderFile,
        cache: &mut Cache,
        h: &Header,
        live_words: &[u64; 4],
    ) -> Result<Arc<Regions>> {
        let mut file_len = None;
        let cap = file.geometry.table_page_entries;
        let page_len = align_region(table::page_bytes(cap));
        // Table pages: the header's (committed, immutable), then the live page's.
        let committed_pages = h.table_pages.len();
        let live_pages = if live_words[0] == u64::MAX {
            0
        } else {
            (live_words[3].min(live::MAX_TABLE_PAGES)) as usize
        };
        let mut changed = false;
        // Each new region's head is a random read on a cold cache: ask for them all first so
        // they overlap (see Store::open).
        for (i, &offset) in h.table_pages.iter().enumerate() {
            if cache
                .table_pages
                .get(i)
                .is_none_or(|(_, m)| m.offset != offset)
            {
                file.storage.will_need(offset, crate::storage::HEAD_READ);
            }
        }
        for i in 0..committed_pages.max(live_pages) {
            let (offset, at) = if i < committed_pages {
                (
                    h.table_pages[i],
                    header::at::TABLE_PAGE_OFFSETS as u64 + 8 * i as u64,
                )
            } else {
                let at = format::LIVE_PAGE_OFFSET + live::TABLE_PAGE_OFFSETS_AT + 8 * i as u64;
                (file.meta.u64_at(at)?.load(Ordering::Acquire), at)
            };
            if cache
                .table_pages
                .get(i)
                .is_some_and(|(_, m)| m.offset == offset)
            {
                continue;
            }
            let mapped = self
                .map(file, offset, page_len, at, &mut file_len)
                .and_then(|m| {
                    let mut head = [0u8; table::HEAD_BYTES as usize];
                    m.region.read(0, &mut head)?;
                    Ok((table::decode_head(&head, offset, cap)?, m))
                });
            match mapped {
                Ok(page) => {
                    if i < cache.table_pages.len() {
                        self.counters.remaps.fetch_add(1, Ordering::Relaxed);
                        cache.table_pages[i] = page;
                    } else {
                        cache.table_pages.push(page);
                    }
                    changed = true;
                }
                Err(e) if i < committed_pages => return Err(e),
                // An uncommitted page that doesn't map or decode: stop at it.
                Err(_) => {
                    cache.table_pages.truncate(i);
                    break;
                }
            }
        }
        let old = cache.last.as_ref().map(|s| Arc::clone(&s.regions));
        let empty = Regions::default();
        let old_regions = old.as_deref().unwrap_or(&empty);
        let entry = |kind: u32, index: u64| -> Option<(u64, u64)> {
            let cap = u64::from(cap);
            let (_, page) = cache
                .table_pages
                .iter()
                .filter(|(k, _)| *k == kind)
                .nth((index / cap) as usize)?;
            let at = table::entry_at(index % cap);
            let off = page.region.u64_at(at).ok()?.load(Ordering::Acquire);
            Some((off, page.offset + at))
        };
        let routing = live_words[0] != u64::MAX;
        // The live page has no checksum: its counts are hints, bounded by what the file can
        // hold (every region is at least 64 KiB), never trusted for an allocation.
        let live_bound = |n: u64| -> Result<u64> {
            if !routing || n == 0 {
                return Ok(0);
            }
            Ok(n.min(file.storage.len()? / format::REGION_ALIGN))
        };
        let segments_wanted = h.segment_count.max(live_bound(live_words[1])?);
        let chunks_wanted = h.upper_heap_chunk_count.max(live_bound(live_words[2])?);
        // The common case while a writer inserts (R moved, nothing else): the same regions,
        // checked wherever the old snapshot mapped them uncommitted. Invariant: a region
        // committed in the old snapshot never moves; one that was uncommitted there may have
        // been committed since at another offset (by a restarted writer), so it is checked
        // even when it is committed now.
        if let (Some(old), Some(last)) = (&old, &cache.last) {
            let (old_segs, old_chunks) = (
                last.header.segment_count,
                last.header.upper_heap_chunk_count,
            );
            let segs_same = (old_segs..old.segments.len() as u64).all(|k| {
                entry(table::KIND_SEGMENTS, k).map(|e| e.0)
                    == Some(old.segments[k as usize].1.offset)
            });
            let chunks_same = (old_chunks..old.upper_chunks.len() as u64).all(|k| {
                entry(table::KIND_UPPER_HEAP, k).map(|e| e.0)
                    == Some(old.upper_chunks[k as usize].offset)
            });
            if !changed
                && old.segments.len() as u64 == segments_wanted
                && old.upper_chunks.len() as u64 == chunks_wanted
                && segs_same
                && chunks_same
            {
                return Ok(Arc::clone(old));
            }
        }
        // Segments.
        let want = segments_wanted;
        let mut segments = Vec::with_capacity(want.min(1024) as usize);
        for k in 0..want {
            let committed = k < h.segment_count;
            let Some((offset, at)) = entry(table::KIND_SEGMENTS, k) else {
                if committed {
                    return Err(Error::corrupt(format!("segment {k} has no table entry"), 0));
                }
                break;
            };
            if let Some(s) = old_regions.segments.get(k as usize) {
                if s.1.offset == offset {
                    segments.push(s.clone());
                    continue;
                }
                if !committed {
                    self.counters.remaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            let layout = SegmentLayout::new(file.geometry.segment_slots(k), self.dims, file.m);
            match self.map(file, offset, align_region(layout.bytes), at, &mut file_len) {
                Ok(m) => {
                    segments.push((layout, m));
                    changed = true;
                }
                Err(e) if committed => return Err(e),
                Err(_) => break,
            }
        }
        changed |= segments.len() != old_regions.segments.len();
        // Upper-heap chunks.
        let want = chunks_wanted;
        for k in 0..want {
            if let Some((offset, _)) = entry(table::KIND_UPPER_HEAP, k) {
                if old_regions
                    .upper_chunks
                    .get(k as usize)
                    .is_none_or(|c| c.offset != offset)
                {
                    file.storage.will_need(offset, crate::storage::HEAD_READ);
                }
            }
        }
        let mut chunks = Vec::with_capacity(want.min(1024) as usize);
        for k in 0..want {
            let committed = k < h.upper_heap_chunk_count;
            let Some((offset, at)) = entry(table::KIND_UPPER_HEAP, k) else {
                if committed {
                    return Err(Error::corrupt(
                        format!("heap chunk {k} has no table entry"),
                        0,
                    ));
                }
                break;
            };
            if let Some(c) = old_regions.upper_chunks.get(k as usize) {
                if c.offset == offset {
                    chunks.push(c.clone());
                    continue;
                }
                if !committed {
                    self.counters.remaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            let bytes = align_region(file.geometry.heap_chunk_bytes(k));
            let mapped = self
                .map(file, offset, bytes, at, &mut file_len)
                .and_then(|m| {
                    let mut head = [0u8; record::HEAP_CHUNK_HEAD_BYTES as usize];
                    m.region.read(0, &mut head)?;
                    if head[..8] != record::HEAP_CHUNK_MAGIC {
                        return Err(Error::corrupt("heap chunk has no CHHEAP magic", offset));
                    }
                    Ok(m)
                });
            match mapped {
                Ok(m) => {
                    chunks.push(m);
                    changed = true;
                }
                Err(e) if committed => return Err(e),
                Err(_) => break,
            }
        }
        changed |= chunks.len() != old_regions.upper_chunks.len();
        match old {
            Some(old) if !changed => Ok(old),
            _ => Ok(Arc::new(Regions {
                segments,
                upper_chunks: chunks,
            })),
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

    fn brute_force(&self, view: &View<'_>, q: &[f32], k: usize) -> Vec<Scored> {
        let n = view.snap.header.committed_count.min(u64::from(u32::MAX)) as u32;
        let mut buf = Vec::new();
        let mut all: Vec<Scored> = (0..n)
            .filter(|&s| view.live(s))
            .filter_map(|s| {
                view.vector(s).map(|v| Scored {
                    distance: self.dist.exact(q, v, &mut buf),
                    slot: s,
                })
            })
            .collect();
        all.sort_unstable();
        all.truncate(k);
        all
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
        View::new(self, &snap)
            .vector(slot)
            .map(|v| v.to_vec())
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))
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

/// Sequence and checksum words of both copies (acquire: they publish the rest).
fn header_words(meta: &Region) -> Result<[u64; 4]> {
    let mut w = [0u64; 4];
    for copy in 0..2 {
        let base = format::header_offset(copy);
        w[2 * copy] = meta
            .u64_at(base + header::at::SEQUENCE as u64)?
            .load(Ordering::Acquire);
        w[2 * copy + 1] = meta
            .u64_at(base + header::at::CHECKSUM as u64)?
            .load(Ordering::Acquire);
    }
    Ok(w)
}

/// R, segment count, upper chunk count and table page count from the live page; R is
/// `u64::MAX` when no writer has published.
fn live_words(meta: &Region) -> Result<[u64; 4]> {
    let base = format::LIVE_PAGE_OFFSET;
    let magic = meta.u64_at(base)?.load(Ordering::Acquire);
    if magic.to_le_bytes() != live::MAGIC {
        return Ok([u64::MAX, 0, 0, 0]);
    }
    // Table page count last: the writer stores it (release) after the offsets and counts.
    let pages = u64::from(
        meta.u32_at(base + live::TABLE_PAGE_COUNT_AT)?
            .load(Ordering::Acquire),
    );
    Ok([
        meta.u64_at(base + live::ROUTING_COUNT_AT)?
            .load(Ordering::Acquire),
        meta.u64_at(base + live::SEGMENT_COUNT_AT)?
            .load(Ordering::Acquire),
        meta.u64_at(base + live::UPPER_HEAP_CHUNK_COUNT_AT)?
            .load(Ordering::Acquire),
        pages,
    ])
}

/// Copies one header copy out of the mapping word by word (the writer stores whole words).
fn copy_header(meta: &Region, copy: usize) -> Result<Vec<u8>> {
    let base = format::header_offset(copy);
    let word = |i: u64| -> Result<[u8; 8]> {
        Ok(meta
            .u64_at(base + 8 * i)?
            .load(Ordering::Relaxed)
            .to_le_bytes())
    };
    let mut buf = Vec::with_capacity(header::FIXED_BYTES);
    for i in 0..(header::FIXED_BYTES as u64).div_ceil(8) {
        buf.extend_from_slice(&word(i)?);
    }
    let len = u32::from_le_bytes(
        buf[header::at::HEADER_LEN..header::at::HEADER_LEN + 4]
            .try_into()
            .map_err(|_| Error::corrupt("header length unreadable", base))?,
    ) as u64;
    let len = len.min(format::HEADER_COPY_BYTES);
    for i in (buf.len() as u64 / 8)..len.div_ceil(8) {
        buf.extend_from_slice(&word(i)?);
    }
    Ok(buf)
}

/// Both copies, each verified on its local copy and re-read up to [`HEADER_REREADS`] times
/// if it fails; the valid one with the higher sequence, then an acquire fence.
fn read_headers(meta: &Region, counters: &Counters) -> Result<(Header, usize)> {
    counters.header_reads.fetch_add(1, Ordering::Relaxed);
    let mut copies = Vec::with_capacity(2);
    for copy in 0..2 {
        let base = format::header_offset(copy);
        let mut result = Header::decode(&copy_header(meta, copy)?, base);
        let mut tries = 0;
        while matches!(result, Err(Error::Corrupt { .. })) && tries < HEADER_REREADS {
            tries += 1;
            counters.rereads.fetch_add(1, Ordering::Relaxed);
            std::hint::spin_loop();
            result = Header::decode(&copy_header(meta, copy)?, base);
        }
        copies.push(result);
    }
    fence(Ordering::Acquire);
    let b = copies.pop().unwrap_or(Err(Error::NotChassisFile));
    let a = copies.pop().unwrap_or(Err(Error::NotChassisFile));
    header::choose_decoded(a, b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn readers_and_snapshots_cross_threads() {
        fn is<T: Send + Sync>() {}
        is::<super::IndexReader>();
        is::<super::Snapshot>();
    }
}
