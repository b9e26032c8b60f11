//! Taking a [`Snapshot`] (ADR-0008 decision 5), the protocol every reader search starts with:
//!
//! 1. copy both header copies word by word into local memory: the sequence and checksum words
//!    first (acquire), then the rest (the writer stores every other word first, then a release
//!    fence, then the checksum and the sequence); verify each checksum on the copy, re-read a
//!    copy that fails a bounded number of times (the writer may be in the middle of it), take
//!    the valid one with the higher sequence, and issue an acquire fence. Every snapshot field
//!    comes from that local copy. The read version is re-checked; `pending_delete_epoch` is
//!    ignored (an intent header carries the previous commit's N and E);
//! 2. never adopt a header older than one already used: the previous snapshot stays valid,
//!    because committed data never changes;
//! 3. load R from the live page (acquire) and the writer's region counts and table page
//!    offsets; map any segment, heap chunk or table page not mapped yet, and remap an
//!    uncommitted one whose table entry changed (a restarted writer reuses that space);
//! 4. when neither header copy's sequence or checksum word nor the live page's words differ
//!    from those of the local copies step 1 decoded, reuse the previous snapshot (the fast
//!    path: a mutex and eight atomic loads). Comparing with the words of the local copies,
//!    not with words loaded before them, is what keeps a reader from going stale: a copy read
//!    while the writer was still writing it shows words the writer's last store changes, so
//!    the next snapshot reads it again. The fast path is off while the header says the file
//!    is superseded: each snapshot then checks the path, and follows a compaction the moment
//!    its file is there.
//!
//! Invariants: a snapshot's N, E, entry point and region list never change once built; its
//! committed regions (index below the header's counts) are never remapped; a snapshot's
//! sequence never decreases across the snapshots one reader hands out.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::codes::{self, CodeKind, Codebook};
use crate::format::geometry::{Geometry, SegmentLayout};
use crate::format::header::{self, Header};
use crate::format::vector::VectorLayout;
use crate::format::{self, align_region, live, record, table, DATA_START};
use crate::graph::Metric;
use crate::os::{FileIdentity, FileStorage, Region, Storage};

use super::{lock, IndexReader};

/// How many times a snapshot re-reads a header copy that fails its checksum before treating
/// it as invalid (the writer rewrites a copy in well under a microsecond).
pub const HEADER_REREADS: u32 = 64;

/// A mapped region and where it is in the file.
#[derive(Clone, Debug)]
pub(super) struct Mapped {
    pub(super) offset: u64,
    pub(super) region: Region,
}

/// The regions a snapshot reads: segments and upper-heap chunks, in table order.
#[derive(Debug, Default)]
pub(super) struct Regions {
    pub(super) segments: Vec<(SegmentLayout, Mapped)>,
    pub(super) upper_chunks: Vec<Mapped>,
    /// Committed metadata-heap chunks (only committed slots' documents are ever read).
    pub(super) metadata_chunks: Vec<crate::storage::Mapped>,
    /// The committed codebook and its offset, once the header names one: searches walk the
    /// committed slots by their codes from then on.
    pub(super) codebook: Option<(u64, Arc<Codebook>)>,
}

/// One consistent view of the file: a committed header, the routing count R, and the regions
/// mapped when it was taken. Cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub(super) header: Arc<Header>,
    pub(super) routing: u32,
    pub(super) regions: Arc<Regions>,
    pub(super) file: Arc<ReaderFile>,
}

impl Snapshot {
    /// The header sequence this snapshot came from.
    pub fn sequence(&self) -> u64 {
        self.header.sequence
    }
    /// The user version this snapshot's flush committed ([`crate::Index::set_user_version`]).
    pub fn user_version(&self) -> u64 {
        self.header.user_version
    }
    /// The file's identity as 32 hex digits (`None` for a file without one).
    pub fn file_id(&self) -> Option<String> {
        crate::index::file_id_hex(&self.header.file_id)
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
    /// Bytes of the committed metadata heap.
    pub fn metadata_bytes(&self) -> u64 {
        self.file
            .geometry
            .metadata_heap_bytes(self.header.metadata_heap_next)
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

/// One open file: a reader moves to a new one when a compaction replaces the file at its path.
pub(super) struct ReaderFile {
    pub(super) storage: Arc<dyn Storage>,
    pub(super) meta: Region,
    pub(super) m: u32,
    pub(super) geometry: Geometry,
    /// How the file stores vectors (fixed for its life; a replacing file may differ).
    pub(super) layout: VectorLayout,
    /// The codes the file keeps (fixed for its life too: it decides the segment layout).
    pub(super) codes: CodeKind,
    pub(super) record_bytes: u64,
    pub(super) ef_construction: u32,
    /// Which file on disk (None for storage without a path).
    pub(super) identity: Option<FileIdentity>,
    /// Counts the files this reader has had open.
    pub(super) generation: u64,
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
    pub(super) fn open(
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
        let (first, _, _) = read_headers(&meta, counters)?;
        let identity = storage.identity()?;
        Ok((
            ReaderFile {
                storage,
                meta,
                m: first.m,
                geometry: first.geometry,
                layout: first.layout(),
                codes: first.code_kind(),
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
pub(super) struct Cache {
    pub(super) file: Arc<ReaderFile>,
    /// Fast-path snapshots since the last slow one (every so often the slow path runs anyway,
    /// to notice a file replaced without the superseded flag).
    pub(super) fast_streak: u32,
    pub(super) last: Option<Snapshot>,
    /// Sequence and checksum words of copies A and B when the last header was read.
    pub(super) header_words: [u64; 4],
    /// Live page words (R, segment count, upper chunk count, table page count) last seen.
    pub(super) live_words: [u64; 4],
    /// Table pages by position in the writer's list: kind and mapping.
    pub(super) table_pages: Vec<(u32, Mapped)>,
}

impl Cache {
    pub(super) fn new(file: Arc<ReaderFile>) -> Cache {
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
pub(super) struct Counters {
    pub(super) snapshots: AtomicU64,
    pub(super) fast: AtomicU64,
    pub(super) header_reads: AtomicU64,
    pub(super) rereads: AtomicU64,
    pub(super) maps: AtomicU64,
    pub(super) remaps: AtomicU64,
    pub(super) reopens: AtomicU64,
}

impl IndexReader {
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
            // A superseded file is left as soon as the path names its replacement, so while
            // the header says so every snapshot takes the slow path (which checks the path).
            if header_words == cache.header_words
                && live_words == cache.live_words
                && cache.fast_streak < LINK_CHECK_EVERY
                && last.header.flags & header::FLAG_SUPERSEDED == 0
            {
                cache.fast_streak += 1;
                self.counters.fast.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(last.clone()));
            }
        }
        cache.fast_streak = 0;
        // The words the next fast path compares: those of the copies this header came from
        // (a copy read torn keeps its torn words, which the writer's finishing store changes).
        let mut seen_words = header_words;
        let header = match &cache.last {
            Some(last) if header_words == cache.header_words => Arc::clone(&last.header),
            _ => {
                let (h, _, words) = read_headers(&file.meta, &self.counters)?;
                seen_words = words;
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
        cache.header_words = seen_words;
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
        if first.dims != self.dims || Metric::from_code(first.metric)? != self.metric {
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
                && old.metadata_chunks.len() as u64 == h.metadata_heap_chunk_count
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
            let layout = SegmentLayout::of(
                file.geometry.segment_slots(k),
                self.dims,
                file.m,
                file.layout,
                file.codes,
            );
            match self.map(file, offset, align_region(layout.bytes), at, &mut file_len) {
                Ok(m) => {
                    crate::storage::keep_walk_resident(&m.region, &layout);
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
        // Metadata-heap chunks: committed ones only, which never move.
        let mut metadata_chunks =
            Vec::with_capacity(h.metadata_heap_chunk_count.min(1024) as usize);
        for k in 0..h.metadata_heap_chunk_count {
            let Some((offset, at)) = entry(table::KIND_METADATA_HEAP, k) else {
                return Err(Error::corrupt(
                    format!("metadata heap chunk {k} has no table entry"),
                    0,
                ));
            };
            if let Some(c) = old_regions.metadata_chunks.get(k as usize) {
                if c.offset == offset {
                    metadata_chunks.push(c.clone());
                    continue;
                }
            }
            let bytes = align_region(file.geometry.metadata_chunk_bytes(k));
            let m = self.map(file, offset, bytes, at, &mut file_len)?;
            let mut head = [0u8; record::HEAP_CHUNK_HEAD_BYTES as usize];
            m.region.read(0, &mut head)?;
            if head[..8] != record::HEAP_CHUNK_MAGIC {
                return Err(Error::corrupt("heap chunk has no CHHEAP magic", offset));
            }
            metadata_chunks.push(crate::storage::Mapped {
                offset,
                region: m.region,
            });
            changed = true;
        }
        changed |= metadata_chunks.len() != old_regions.metadata_chunks.len();
        // The codebook: written once, before the commit that names it, and never changed.
        // A codebook of a kind this release doesn't know is ignored with its codes.
        let codebook = match (&old_regions.codebook, h.codebook) {
            (_, 0) => None,
            _ if h.code_kind() == CodeKind::None => None,
            (Some((off, book)), want) if *off == want => Some((want, Arc::clone(book))),
            (_, want) => {
                let bytes = codes::codebook_bytes(self.dims);
                let len = match file_len {
                    Some(l) => l,
                    None => file.storage.len()?,
                };
                table::check_region(want, bytes, len, header::at::CODEBOOK as u64)?;
                let mut b = vec![0u8; bytes as usize];
                file.storage.read_at(want, &mut b)?;
                changed = true;
                Some((
                    want,
                    Arc::new(Codebook::decode(&b, h.code_kind(), self.dims, want)?),
                ))
            }
        };
        changed |= codebook.is_some() != old_regions.codebook.is_some();
        match old {
            Some(old) if !changed => Ok(old),
            _ => Ok(Arc::new(Regions {
                segments,
                upper_chunks: chunks,
                metadata_chunks,
                codebook,
            })),
        }
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

/// Copies one header copy out of the mapping word by word (the writer stores whole words):
/// the sequence and checksum words first (acquire; the writer stores them last, after a
/// release fence), then the rest. Returns the bytes and the two words as they were read.
fn copy_header(meta: &Region, copy: usize) -> Result<(Vec<u8>, [u64; 2])> {
    let base = format::header_offset(copy);
    let seq_at = header::at::SEQUENCE as u64;
    let sum_at = header::at::CHECKSUM as u64;
    let seq = meta.u64_at(base + seq_at)?.load(Ordering::Acquire);
    let sum = meta.u64_at(base + sum_at)?.load(Ordering::Acquire);
    let word = |i: u64| -> Result<[u8; 8]> {
        Ok(match 8 * i {
            at if at == seq_at => seq,
            at if at == sum_at => sum,
            at => meta.u64_at(base + at)?.load(Ordering::Relaxed),
        }
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
    Ok((buf, [seq, sum]))
}

/// Both copies, each verified on its local copy and re-read up to [`HEADER_REREADS`] times
/// if it fails; the valid one with the higher sequence, then an acquire fence. Also returns
/// the sequence and checksum words of the local copies that were decoded (A's, then B's): the
/// words the fast path later compares with the mapping, so a copy read torn is read again as
/// soon as the writer finishes it.
fn read_headers(meta: &Region, counters: &Counters) -> Result<(Header, usize, [u64; 4])> {
    counters.header_reads.fetch_add(1, Ordering::Relaxed);
    let mut copies = Vec::with_capacity(2);
    let mut words = [0u64; 4];
    for copy in 0..2 {
        let base = format::header_offset(copy);
        let (bytes, w) = copy_header(meta, copy)?;
        let mut result = Header::decode(&bytes, base);
        let mut seen = w;
        let mut tries = 0;
        while matches!(result, Err(Error::Corrupt { .. })) && tries < HEADER_REREADS {
            tries += 1;
            counters.rereads.fetch_add(1, Ordering::Relaxed);
            std::hint::spin_loop();
            let (bytes, w) = copy_header(meta, copy)?;
            result = Header::decode(&bytes, base);
            seen = w;
        }
        words[2 * copy] = seen[0];
        words[2 * copy + 1] = seen[1];
        copies.push(result);
    }
    fence(Ordering::Acquire);
    let b = copies.pop().unwrap_or(Err(Error::NotChassisFile));
    let a = copies.pop().unwrap_or(Err(Error::NotChassisFile));
    let (h, which) = header::choose_decoded(a, b)?;
    Ok((h, which, words))
}
