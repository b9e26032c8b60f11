//! The storage layer: regions, allocation of new ones, and the commit protocol.
//!
//! [`Store`] owns one file through the [`Storage`] seam: the fixed area (two header copies and
//! the live page), the mapped segments, upper-heap chunks and table pages, and the newest
//! committed header. It appends regions at the end of the file (64 KiB-aligned, decision 1),
//! records them in append-only table pages, and commits by decision 4: make everything written
//! durable, then write the other header copy with sequence + 1, then make that durable.
//!
//! Invariants:
//! * The file only grows; regions are appended at `file_end`, never moved.
//! * Bytes of committed slots other than neighbor words and delete marks are never rewritten;
//!   slots at or past the committed count N, heap bytes past the committed `upper_heap_next`,
//!   and table entries past the committed counts are the writer's to reuse.
//! * The header copy written by a commit is always the one not holding the newest header.
//! * Every region offset read from the file was checked to be aligned and inside the file
//!   before it was mapped; slot and heap accessors return `None` rather than read outside.
//!
//! Its parts: `headers` (reading the two copies), `heap` (allocation in the upper and the
//! metadata heap, metadata and full-text blobs read back), `coded` (codes and the vectors
//! read past the page cache), `backup` (sync and its patches).

mod backup;
mod coded;
mod headers;
mod heap;

pub(crate) use heap::read_metadata;
pub use heap::HeapBlobs;

pub(crate) use coded::{
    each_vector_part, keep_walk_resident, start_vectors_direct, PendingVectors, VectorRanges,
};
use headers::is_unborn;
pub use headers::{read_current_header, read_header_copies, HeaderCopies};

pub use backup::{
    base_state, closed_cleanly_at, replay, sync_state, BaseState, Recorder, SyncOutcome, SyncReport,
};

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::codes::{self, CodeKind, Codebook};
use crate::format::geometry::{Geometry, SegmentLayout};
use crate::format::header::{self, Header};
use crate::format::metadata::DocRef;
use crate::format::vector::{Halves, VectorLayout, VectorRef};
use crate::format::{self, align_region, live, record, table, vector, DATA_START};
use crate::mutants::{self, Mutant};
use crate::os::{Region, Storage};

/// A test observer of publishing R.
#[cfg(test)]
pub(crate) type PublishHook = Box<dyn Fn(&Store, u64)>;

#[cfg(test)]
thread_local! {
    /// Called with the store and R just before R is published (unit tests of the ordering).
    pub(crate) static PUBLISH_HOOK: std::cell::RefCell<Option<PublishHook>> =
        std::cell::RefCell::new(None);
}

/// A test observer of R's publication on any thread (parallel batches publish from their
/// worker threads); observers filter by the store they watch.
#[cfg(test)]
pub(crate) type SharedPublishHook = std::sync::Arc<dyn Fn(&Store, u64) + Send + Sync>;

/// Called with the store and R just before R is published, from every thread.
#[cfg(test)]
pub(crate) static SHARED_PUBLISH_HOOK: std::sync::Mutex<Option<SharedPublishHook>> =
    std::sync::Mutex::new(None);

/// A test observer of header writes: called with the copy and the word index just stored.
#[cfg(test)]
pub(crate) type HeaderHook = Box<dyn Fn(usize, usize)>;

#[cfg(test)]
thread_local! {
    /// Called after each word of a header copy is stored (unit tests of what readers see).
    pub(crate) static HEADER_HOOK: std::cell::RefCell<Option<HeaderHook>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
fn header_hook(copy: usize, word: usize) {
    HEADER_HOOK.with(|h| {
        if let Some(hook) = h.borrow().as_ref() {
            hook(copy, word)
        }
    });
}

/// A mapped segment.
#[derive(Clone, Debug)]
struct Segment {
    offset: u64,
    layout: SegmentLayout,
    region: Region,
}

/// The writer asks for huge pages under a segment's vector array only: it writes vectors with
/// pwrite, never through the mapping, so huge pages there cost no extra writeback at a flush.
fn advise_vectors_huge(region: &Region, layout: &SegmentLayout) {
    region.advise_huge(layout.vectors_at, layout.records_at - layout.vectors_at);
}

/// Bytes asked for ahead of reading a region's head at open ([`Storage::will_need`]).
pub(crate) const HEAD_READ: u64 = 4096;

/// The most bytes allocated ahead of the write position at once (decision 5).
pub const ALLOCATE_STEP: u64 = 1 << 20;

/// A mapped heap chunk or table page.
#[derive(Clone, Debug)]
pub(crate) struct Mapped {
    pub(crate) offset: u64,
    pub(crate) region: Region,
}

/// A table page and the table it belongs to.
#[derive(Debug)]
struct TablePage {
    kind: u32,
    page: Mapped,
}

/// One open index file: committed header, mapped regions, allocation and commit.
pub struct Store {
    storage: Arc<dyn Storage>,
    writable: bool,
    meta: Region,
    header: Arc<Header>,
    header_copy: usize,
    /// The mapped regions and how to address them; searches take a clone ([`Store::regions`]).
    regions: Regions,
    /// Per segment: slots whose bytes in all three arrays are allocated on disk (decision 5:
    /// space is allocated before it is written).
    allocated_slots: Vec<u64>,
    /// Bytes of each upper-heap chunk allocated on disk.
    upper_allocated: Vec<u64>,
    /// Bytes of each metadata-heap chunk (heap kind 2, table kind 3) allocated on disk.
    metadata_allocated: Vec<u64>,
    /// Heap reference of the first free metadata-heap byte (0 before any chunk).
    metadata_next: u64,
    table_pages: Vec<TablePage>,
    /// The codebook region the next commit names (the header's, or one trained since).
    codebook_offset: u64,
    upper_next: u64,
    file_end: u64,
    /// Set by any failure inside a commit or recovery; every later commit then fails with
    /// [`Error::Poisoned`] (the OS may have dropped dirty pages a retry would claim to commit).
    poisoned: bool,
    /// Delete marks recovery reset when this store was opened.
    marks_reset: u64,
    /// Whether recovery ran when this store was opened.
    recovered: bool,
    /// Whether the live page says durably (or can't claim otherwise) that a writer may be
    /// changing lists: false only while it holds a clean-close marker this writer has not
    /// replaced yet ([`Store::begin_changes`]).
    active: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("header", &self.header)
            .field("segments", &self.segments.len())
            .field("upper_chunks", &self.upper_chunks.len())
            .field("table_pages", &self.table_pages.len())
            .finish()
    }
}

/// What a new file starts with.
#[derive(Clone, Debug)]
pub struct NewFile {
    /// Dimensions.
    pub dims: u32,
    /// Metric code.
    pub metric: u32,
    /// M.
    pub m: u32,
    /// Most layers.
    pub max_layers: u32,
    /// ef_construction.
    pub ef_construction: u32,
    /// Level seed.
    pub seed: u64,
    /// Geometry.
    pub geometry: Geometry,
    /// How vectors are stored (it decides the file's read and write versions).
    pub layout: VectorLayout,
    /// What codes the file keeps (int8 makes its write version 6, int4 7).
    pub codes: CodeKind,
}

/// Says what a failed allocation means when the disk is full.
fn no_space(e: Error) -> Error {
    match e {
        Error::Io(io)
            if io.raw_os_error() == Some(28) || io.kind() == std::io::ErrorKind::StorageFull =>
        {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "no space left on the device for new vectors; nothing committed was touched: \
                 free space, then reopen the index and retry",
            ))
        }
        e => e,
    }
}

/// The vector of `dims` values stored in `layout` whose parts lie at `parts` in `region`
/// ([`SegmentLayout::vector_parts`]), lent in place; `None` where a part is not mapped.
#[inline(always)]
pub(crate) fn lend_vector(
    region: &Region,
    layout: VectorLayout,
    parts: [(u64, u64); 2],
    dims: usize,
) -> Option<VectorRef<'_>> {
    let [(at, _), (low_at, _)] = parts;
    match layout {
        VectorLayout::F32 => region.f32s(at, dims).ok().map(VectorRef::F32),
        VectorLayout::F16 => region.u16s(at, dims).ok().map(VectorRef::F16),
        VectorLayout::SplitHalves => region
            .u16s(at, 2 * dims)
            .ok()
            .map(|h| VectorRef::Split(Halves::side_by_side(h))),
        VectorLayout::SplitPlanar => Some(VectorRef::Split(Halves {
            high: region.u16s(at, dims).ok()?,
            low: region.u16s(low_at, dims).ok()?,
        })),
    }
}

/// The mapped regions of one file and how to address a slot in them: what a search reads.
///
/// Cheap to clone (its region lists are shared `Arc`s). The writer's [`Store`] holds the
/// current one and appends to it copy-on-write, so a clone taken for a search keeps every
/// region it names mapped, and its lists never change under it (ADR-0008's "memory reclaimed
/// under a search": a mapping is unmapped only when the last clone naming it is dropped).
#[derive(Clone, Debug)]
pub struct Regions {
    dims: u32,
    /// The header's vector layout (fixed for the file's life).
    layout: VectorLayout,
    m: u32,
    record_bytes: u64,
    /// The header's layer limit (fixed for the file's life).
    max_layers: u32,
    geometry: Geometry,
    /// The header's code kind (fixed for the file's life): it decides the segment layout.
    codes: CodeKind,
    /// The trained codebook, once there is one: searches walk by codes from then on.
    codebook: Option<Arc<Codebook>>,
    segments: Arc<Vec<Segment>>,
    upper_chunks: Arc<Vec<Mapped>>,
    metadata_chunks: Arc<Vec<Mapped>>,
}

impl Regions {
    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    /// Geometry of this file.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Segments mapped (committed plus appended since).
    pub fn segment_count(&self) -> u64 {
        self.segments.len() as u64
    }

    /// Upper-heap chunks mapped.
    pub fn upper_chunk_count(&self) -> u64 {
        self.upper_chunks.len() as u64
    }

    /// Metadata-heap chunks mapped.
    pub fn metadata_chunk_count(&self) -> u64 {
        self.metadata_chunks.len() as u64
    }

    /// Slots the mapped segments hold.
    pub fn slot_capacity(&self) -> u64 {
        self.geometry.segment_first_slot(self.segments.len() as u64)
    }

    /// The metadata document `r` names (0: the empty document). Committed entries never
    /// change; the checksum in the entry's head is checked on every read.
    pub fn metadata_at(&self, r: u64, id: u64) -> Result<DocRef<'_>> {
        read_metadata(
            &self.metadata_chunks,
            |k| self.geometry.metadata_chunk_bytes(k),
            r,
            id,
        )
    }

    /// The metadata heap as a source of full-text blobs.
    pub fn heap_blobs(&self) -> HeapBlobs<'_> {
        HeapBlobs::new(&self.metadata_chunks, self.geometry)
    }

    /// The metadata document of `slot` (the empty one when it has none).
    pub fn metadata(&self, slot: u32) -> Result<DocRef<'_>> {
        let (id, _, r) = self
            .slot_header(slot)
            .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
        self.metadata_at(r, id)
    }

    fn slot_place(&self, slot: u32) -> Option<(&Segment, u64)> {
        let (k, off) = self.geometry.locate(u64::from(slot));
        self.segments.get(k as usize).map(|s| (s, off))
    }

    /// The vector of `slot`, if its segment is mapped.
    #[inline(always)]
    pub fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        let (seg, off) = self.slot_place(slot)?;
        lend_vector(
            &seg.region,
            self.layout,
            seg.layout.vector_parts(off),
            self.dims as usize,
        )
    }

    /// How this file stores vectors.
    pub fn layout(&self) -> VectorLayout {
        self.layout
    }

    /// Level-0 neighbor words of `slot`.
    #[inline]
    pub fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
        let (seg, off) = self.slot_place(slot)?;
        let at = seg.layout.records_at + off * self.record_bytes + record::RECORD_NEIGHBORS_AT;
        seg.region.u32_words(at, 2 * self.m as usize).ok()
    }

    /// The upper-layer reference in `slot`'s level-0 record (0 = none).
    pub fn upper_ref(&self, slot: u32) -> Option<u64> {
        let (seg, off) = self.slot_place(slot)?;
        let at = seg.layout.records_at + off * self.record_bytes + record::RECORD_UPPER_REF_AT;
        seg.region
            .u64_at(at)
            .ok()
            .map(|w| w.load(Ordering::Acquire))
    }

    /// Layers above 0 that `slot` has (0 when its reference is empty or unreadable).
    ///
    /// A count above the file's layer limit (a damaged entry) reads as that limit, so loops
    /// over a node's layers stay bounded whatever the file holds.
    pub fn upper_layers(&self, slot: u32) -> usize {
        let limit = self.max_layers.saturating_sub(1) as usize;
        match self.upper_entry(slot) {
            Some((chunk, off)) => chunk
                .region
                .u32_at(off)
                .map_or(0, |w| (w.load(Ordering::Relaxed) as usize).min(limit)),
            None => 0,
        }
    }

    /// The layer count stored in `slot`'s upper-heap entry, unbounded (for integrity checks).
    pub fn upper_layers_stored(&self, slot: u32) -> Option<u32> {
        let (chunk, off) = self.upper_entry(slot)?;
        chunk
            .region
            .u32_at(off)
            .ok()
            .map(|w| w.load(Ordering::Relaxed))
    }

    fn upper_entry(&self, slot: u32) -> Option<(&Mapped, u64)> {
        let r = self.upper_ref(slot)?;
        if r == 0 {
            return None;
        }
        let (c, o) = record::split_heap_ref(r);
        let off = u64::from(o);
        // A damaged reference (misaligned, or past its chunk) reads as none here, before any
        // access: repairing a damaged graph asks for such entries over and over, and a failed
        // access builds an error message each time.
        self.upper_chunks
            .get(c as usize)
            .filter(|m| off % 4 == 0 && off + record::UPPER_LISTS_AT <= m.region.len())
            .map(|m| (m, off))
    }

    /// Neighbor words of `slot` on `layer` ≥ 1, if it has that layer.
    #[inline]
    pub fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
        let (chunk, off) = self.upper_entry(slot)?;
        let layers = chunk
            .region
            .u32_at(off + record::UPPER_LAYERS_AT)
            .ok()?
            .load(Ordering::Relaxed);
        if layer == 0 || layer > layers as usize {
            return None;
        }
        let m = u64::from(self.m);
        let at = off + record::UPPER_LISTS_AT + (layer as u64 - 1) * m * 4;
        if at.saturating_add(m * 4) > chunk.region.len() {
            return None;
        }
        chunk.region.u32_words(at, self.m as usize).ok()
    }

    /// The slot header of `slot`: (id, deleted_epoch, metadata_ref).
    pub fn slot_header(&self, slot: u32) -> Option<(u64, u64, u64)> {
        let (seg, off) = self.slot_place(slot)?;
        let at = seg.layout.headers_at + off * record::SLOT_HEADER_BYTES;
        let r = &seg.region;
        Some((
            r.u64_at(at + record::SLOT_ID_AT)
                .ok()?
                .load(Ordering::Relaxed),
            r.u64_at(at + record::SLOT_DELETED_EPOCH_AT)
                .ok()?
                .load(Ordering::Relaxed),
            r.u64_at(at + record::SLOT_METADATA_REF_AT)
                .ok()?
                .load(Ordering::Relaxed),
        ))
    }

    /// The deleted epoch of `slot` (0 = live).
    #[inline]
    pub fn deleted_epoch(&self, slot: u32) -> Option<u64> {
        let (seg, off) = self.slot_place(slot)?;
        let at =
            seg.layout.headers_at + off * record::SLOT_HEADER_BYTES + record::SLOT_DELETED_EPOCH_AT;
        seg.region
            .u64_at(at)
            .ok()
            .map(|w| w.load(Ordering::Relaxed))
    }
}

/// The heaps' free positions at one moment ([`Store::heap_mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapMark {
    upper_next: u64,
    metadata_next: u64,
}

impl HeapMark {
    /// The positions a header committed.
    pub fn committed(h: &Header) -> HeapMark {
        HeapMark {
            upper_next: h.upper_heap_next,
            metadata_next: h.metadata_heap_next,
        }
    }
}

/// A store reads through its current regions.
impl std::ops::Deref for Store {
    type Target = Regions;
    fn deref(&self) -> &Regions {
        &self.regions
    }
}

impl Store {
    /// Initialises an empty file (the caller holds the lock): both header copies, A at sequence
    /// 1 and B at 0 with equal contents, made durable with the directory entry. An existing
    /// non-empty file is refused.
    pub fn create(storage: Arc<dyn Storage>, new: &NewFile) -> Result<Store> {
        if !is_unborn(&*storage)? {
            return match read_current_header(&*storage) {
                Ok(_) => Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "file is already a Chassis index; open it instead of creating it",
                ))),
                Err(e) => Err(e),
            };
        }
        let write_version = new
            .codes
            .write_version()
            .unwrap_or_else(|| new.layout.read_version());
        let mut h = Header {
            read_version: new.layout.read_version(),
            write_version,
            flags: 0,
            dims: new.dims,
            metric: new.metric,
            m: new.m,
            m0: record::m0(new.m),
            max_layers: new.max_layers,
            geometry: new.geometry,
            committed_count: 0,
            entry_point: header::NO_ENTRY,
            max_layer: 0,
            delete_epoch: 0,
            pending_delete_epoch: 0,
            deleted_count: 0,
            next_id: 0,
            segment_count: 0,
            upper_heap_chunk_count: 0,
            upper_heap_next: 0,
            metadata_heap_chunk_count: 0,
            metadata_heap_next: 0,
            ef_construction: new.ef_construction,
            seed: new.seed,
            vector_layout: new.layout.code(),
            codes: new.codes.code(),
            codebook: 0,
            file_id: crate::os::new_file_id()?,
            user_version: 0,
            text_root: 0,
            sequence: 1,
            table_pages: Vec::new(),
        };
        h.validate(0).map_err(|e| match e {
            Error::Corrupt { what, .. } => Error::InvalidArgument(what),
            e => e,
        })?;
        storage.grow(DATA_START)?;
        storage.allocate(0, DATA_START).map_err(no_space)?;
        storage.write_at(format::HEADER_A_OFFSET, &h.encode())?;
        h.sequence = 0;
        storage.write_at(format::HEADER_B_OFFSET, &h.encode())?;
        storage.sync()?;
        storage.sync_dir()?;
        Store::open(storage, true)
    }

    /// Opens a file: chooses the newest valid header copy, checks and maps every region it
    /// counts. `writable` maps for writing (the caller holds the lock).
    pub fn open(storage: Arc<dyn Storage>, writable: bool) -> Result<Store> {
        let len = storage.len()?;
        let (header, header_copy) = read_current_header(&*storage)?;
        if len < DATA_START {
            return Err(Error::corrupt(
                format!("file truncated to {len} bytes"),
                len,
            ));
        }
        let meta = storage.map(0, DATA_START, writable)?;
        let geometry = header.geometry;
        let mut store = Store {
            storage,
            writable,
            meta,
            regions: Regions {
                dims: header.dims,
                layout: header.layout(),
                m: header.m,
                record_bytes: record::level0_record_bytes(header.m),
                max_layers: header.max_layers,
                geometry,
                codes: header.code_kind(),
                codebook: None,
                segments: Arc::new(Vec::new()),
                upper_chunks: Arc::new(Vec::new()),
                metadata_chunks: Arc::new(Vec::new()),
            },
            allocated_slots: Vec::new(),
            upper_allocated: Vec::new(),
            metadata_allocated: Vec::new(),
            metadata_next: header.metadata_heap_next,
            table_pages: Vec::new(),
            codebook_offset: header.codebook,
            upper_next: header.upper_heap_next,
            file_end: align_region(len),
            poisoned: false,
            marks_reset: 0,
            recovered: false,
            active: true,
            header: Arc::new(header),
            header_copy,
        };
        store.map_committed(len)?;
        if writable
            && store.header.pending_delete_epoch != 0
            && !mutants::active(Mutant::RecoveryDisabled)
        {
            store.recover()?;
        }
        Ok(store)
    }

    /// Recovery after a delete flush that stopped between its intent header and its commit
    /// header (decision 6): reset every deleted epoch above the committed epoch E in slots
    /// below N, fsync, then write a header with pending_epoch 0 into the copy not read, fsync.
    /// A crash anywhere in here leaves the intent header newest, so recovery simply runs again.
    fn recover(&mut self) -> Result<()> {
        let epoch = self.header.delete_epoch;
        let n = self.header.committed_count as u32;
        let mut reset = 0;
        let keep_marks = mutants::active(Mutant::RecoveryKeepsMarks);
        for slot in (0..n).filter(|_| !keep_marks) {
            match self.deleted_epoch(slot) {
                Some(e) if e > epoch => {
                    self.set_deleted_epoch(slot, 0)?;
                    reset += 1;
                }
                Some(_) => {}
                None => return Err(Error::corrupt(format!("slot {slot} has no segment"), 0)),
            }
        }
        self.sync_or_poison()?;
        let mut next = Header::clone(&self.header);
        next.pending_delete_epoch = 0;
        next.sequence = self.header.sequence + 1;
        let copy = self.other_copy();
        self.write_header_copy(copy, &next)?;
        self.sync_or_poison()?;
        self.header = Arc::new(next);
        self.header_copy = copy;
        self.marks_reset = reset;
        self.recovered = true;
        Ok(())
    }

    /// Whether recovery ran at open, and how many delete marks it reset.
    pub fn recovery(&self) -> Option<u64> {
        self.recovered.then_some(self.marks_reset)
    }

    /// Whether a failed commit has poisoned this store.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }

    /// R as the live page holds it (`None` if no writer has published since creation). Not
    /// durable: after a power loss it may describe writes that never reached the disk.
    pub fn live_routing_count(&self) -> Option<u64> {
        let mut magic = [0u8; 8];
        self.meta.read(format::LIVE_PAGE_OFFSET, &mut magic).ok()?;
        if magic != live::MAGIC {
            return None;
        }
        let w = self
            .meta
            .u64_at(format::LIVE_PAGE_OFFSET + live::ROUTING_COUNT_AT)
            .ok()?;
        Some(w.load(Ordering::Acquire))
    }

    /// The header sequence a clean-close marker in the live page vouches for, if it holds one
    /// (format/live.rs).
    pub fn clean_close_sequence(&self) -> Option<u64> {
        let magic = self.meta.u64_at(format::LIVE_PAGE_OFFSET).ok()?;
        if magic.load(Ordering::Acquire).to_le_bytes() != live::CLEAN_MAGIC {
            return None;
        }
        let seq = self
            .meta
            .u64_at(format::LIVE_PAGE_OFFSET + live::CLEAN_SEQUENCE_AT)
            .ok()?;
        Some(seq.load(Ordering::Acquire))
    }

    /// A writer that opened a cleanly closed file and changes nothing leaves the marker in
    /// place (a crash then needs no repair either): it publishes nothing until
    /// [`Store::begin_changes`].
    pub fn keep_clean_marker(&mut self) {
        self.active = false;
    }

    /// Before this writer's first change to a neighbor list: replaces a clean-close marker
    /// with the live magic, R = `committed` and the region counts, and makes that durable, so
    /// that a crash from here on shows the next writer that lists may have changed. Nothing
    /// to do when the page held no marker at open (the next writer repairs anyway).
    pub fn begin_changes(&mut self, committed: u64) -> Result<()> {
        if self.active || !self.writable {
            return Ok(());
        }
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.active = true;
        self.publish_routing_count(committed)?;
        self.publish_regions()?;
        if mutants::active(Mutant::ListsChangedUnderCleanMarker) {
            return Ok(());
        }
        self.sync_or_poison()
    }

    /// Writes the clean-close marker for the current header and makes it durable: the
    /// writer's lists are exactly what that header committed. The caller guarantees nothing
    /// is pending. Does nothing for a read-only or poisoned store.
    pub fn mark_clean(&mut self) -> Result<()> {
        // Not active: the marker this writer found is still in place (it changed nothing).
        if !self.writable || self.poisoned || !self.active {
            return Ok(());
        }
        let base = format::LIVE_PAGE_OFFSET;
        self.meta
            .u64_at(base + live::CLEAN_SEQUENCE_AT)?
            .store(self.header.sequence, Ordering::Release);
        self.meta
            .u64_at(base)?
            .store(u64::from_le_bytes(live::CLEAN_MAGIC), Ordering::Release);
        self.active = false;
        self.sync_or_poison()
    }

    /// Where the two heaps' free positions are now, for [`Store::rewind`].
    pub fn heap_mark(&self) -> HeapMark {
        HeapMark {
            upper_next: self.upper_next,
            metadata_next: self.metadata_next,
        }
    }

    /// Moves the heaps' free positions back to `mark` (a rollback: the entries written since
    /// are discarded and their bytes reused). Never below the committed positions: committed
    /// heap bytes never change.
    pub fn rewind(&mut self, mark: HeapMark) {
        let h = &self.header;
        let (uc, uo) = record::split_heap_ref(h.upper_heap_next);
        let (mc, mo) = record::split_heap_ref(h.metadata_heap_next);
        let at_least = |next: u64, c: u32, o: u32| {
            let (nc, no) = record::split_heap_ref(next);
            (nc, no) >= (c, o)
        };
        // Position 0 means "no chunk yet"; once a chunk exists (appended since the mark) the
        // same place is the first entry of chunk 0.
        let first = record::heap_ref(0, record::HEAP_CHUNK_HEAD_BYTES as u32);
        let place = |next: u64, chunks: usize| if next == 0 && chunks > 0 { first } else { next };
        if at_least(mark.upper_next, uc, uo) {
            self.upper_next = place(mark.upper_next, self.upper_chunks.len());
        }
        if at_least(mark.metadata_next, mc, mo) {
            self.metadata_next = place(mark.metadata_next, self.metadata_chunks.len());
        }
    }

    /// Makes every write so far durable (lists a repair pass edited), poisoning on failure.
    pub fn sync(&mut self) -> Result<()> {
        self.require_writable()?;
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.sync_or_poison()
    }

    fn sync_or_poison(&mut self) -> Result<()> {
        // Never retry an fsync: after a failure the kernel may have marked the pages clean.
        let result = self.storage.sync();
        if result.is_err() && mutants::active(Mutant::RetryFailedSync) {
            return self.storage.sync();
        }
        result.inspect_err(|_| self.poisoned = true)
    }

    fn map_committed(&mut self, len: u64) -> Result<()> {
        let cap = self.geometry.table_page_entries;
        let page_len = align_region(table::page_bytes(cap));
        // Open reads one head per table page and heap chunk, each a random read on a cold
        // cache: ask for them all first so the disk serves them together (O(1) open time in
        // practice, not one disk latency per region).
        for &off in &self.header.table_pages {
            self.storage.will_need(off, HEAD_READ);
        }
        for (i, &off) in self.header.table_pages.iter().enumerate() {
            let at = format::header_offset(self.header_copy)
                + (header::at::TABLE_PAGE_OFFSETS + 8 * i) as u64;
            table::check_region(off, page_len, len, at)?;
            let region = self.storage.map(off, page_len, self.writable)?;
            let mut head = [0u8; table::HEAD_BYTES as usize];
            region.read(0, &mut head)?;
            let kind = table::decode_head(&head, off, cap)?;
            self.table_pages.push(TablePage {
                kind,
                page: Mapped {
                    offset: off,
                    region,
                },
            });
        }
        for k in 0..self.header.segment_count {
            let (offset, at) = self.table_entry(table::KIND_SEGMENTS, k)?;
            let layout = self.header.segment_layout(k);
            let bytes = align_region(layout.bytes);
            table::check_region(offset, bytes, len, at)?;
            let region = self.storage.map(offset, bytes, self.writable)?;
            if self.writable {
                advise_vectors_huge(&region, &layout);
            }
            keep_walk_resident(&region, &layout);
            // Slots below N were written and made durable, so their blocks exist.
            let first = self.geometry.segment_first_slot(k);
            let allocated_slots = self
                .header
                .committed_count
                .saturating_sub(first)
                .min(layout.slots);
            Arc::make_mut(&mut self.regions.segments).push(Segment {
                offset,
                layout,
                region,
            });
            self.allocated_slots.push(allocated_slots);
        }
        for k in 0..self.header.upper_heap_chunk_count {
            if let Ok((offset, _)) = self.table_entry(table::KIND_UPPER_HEAP, k) {
                self.storage.will_need(offset, HEAD_READ);
            }
        }
        for k in 0..self.header.upper_heap_chunk_count {
            let (offset, at) = self.table_entry(table::KIND_UPPER_HEAP, k)?;
            let bytes = align_region(self.geometry.heap_chunk_bytes(k));
            table::check_region(offset, bytes, len, at)?;
            let region = self.storage.map(offset, bytes, self.writable)?;
            let mut head = [0u8; record::HEAP_CHUNK_HEAD_BYTES as usize];
            region.read(0, &mut head)?;
            if head[..8] != record::HEAP_CHUNK_MAGIC {
                return Err(Error::corrupt("heap chunk has no CHHEAP magic", offset));
            }
            Arc::make_mut(&mut self.regions.upper_chunks).push(Mapped { offset, region });
            // Committed entries were written and made durable, so their blocks exist; and the
            // portable allocation path zeroes what it allocates, so it must never cover them.
            let (next_chunk, next_off) = record::split_heap_ref(self.header.upper_heap_next);
            let done = match k.cmp(&u64::from(next_chunk)) {
                std::cmp::Ordering::Less => self.geometry.heap_chunk_bytes(k),
                std::cmp::Ordering::Equal => u64::from(next_off),
                std::cmp::Ordering::Greater => 0,
            };
            self.upper_allocated.push(done);
        }
        self.map_metadata_chunks(len)?;
        self.load_codebook(len)?;
        let next = self.header.upper_heap_next;
        let (chunk, off) = record::split_heap_ref(next);
        let ok = if self.upper_chunks.is_empty() {
            next == 0
        } else {
            u64::from(chunk) < self.header.upper_heap_chunk_count
                && u64::from(off) >= record::HEAP_CHUNK_HEAD_BYTES
                && u64::from(off) <= self.geometry.heap_chunk_bytes(u64::from(chunk))
        };
        if !ok {
            return Err(Error::corrupt(
                "upper heap position outside its chunks",
                format::header_offset(self.header_copy) + header::at::UPPER_HEAP_NEXT as u64,
            ));
        }
        Ok(())
    }

    /// Maps the committed metadata-heap chunks and checks where the heap's free space starts.
    fn map_metadata_chunks(&mut self, len: u64) -> Result<()> {
        for k in 0..self.header.metadata_heap_chunk_count {
            let (offset, at) = self.table_entry(table::KIND_METADATA_HEAP, k)?;
            let bytes = align_region(self.geometry.metadata_chunk_bytes(k));
            table::check_region(offset, bytes, len, at)?;
            let region = self.storage.map(offset, bytes, self.writable)?;
            let mut head = [0u8; record::HEAP_CHUNK_HEAD_BYTES as usize];
            region.read(0, &mut head)?;
            if head[..8] != record::HEAP_CHUNK_MAGIC {
                return Err(Error::corrupt("heap chunk has no CHHEAP magic", offset));
            }
            Arc::make_mut(&mut self.regions.metadata_chunks).push(Mapped { offset, region });
            let (next_chunk, next_off) = record::split_heap_ref(self.header.metadata_heap_next);
            let done = match k.cmp(&u64::from(next_chunk)) {
                std::cmp::Ordering::Less => self.geometry.metadata_chunk_bytes(k),
                std::cmp::Ordering::Equal => u64::from(next_off),
                std::cmp::Ordering::Greater => 0,
            };
            self.metadata_allocated.push(done);
        }
        let next = self.header.metadata_heap_next;
        let (chunk, off) = record::split_heap_ref(next);
        let ok = if self.metadata_chunks.is_empty() {
            next == 0
        } else {
            u64::from(chunk) < self.header.metadata_heap_chunk_count
                && u64::from(off) >= record::HEAP_CHUNK_HEAD_BYTES
                && u64::from(off) <= self.geometry.metadata_chunk_bytes(u64::from(chunk))
        };
        if !ok {
            return Err(Error::corrupt(
                "metadata heap position outside its chunks",
                format::header_offset(self.header_copy) + header::at::METADATA_HEAP_NEXT as u64,
            ));
        }
        Ok(())
    }

    /// Entry `index` of table `kind`, and the file offset the entry was read from.
    fn table_entry(&self, kind: u32, index: u64) -> Result<(u64, u64)> {
        let cap = u64::from(self.geometry.table_page_entries);
        let page = self
            .table_pages
            .iter()
            .filter(|p| p.kind == kind)
            .nth((index / cap) as usize)
            .ok_or_else(|| {
                Error::corrupt(format!("table of kind {kind} has no entry {index}"), 0)
            })?;
        let at = table::entry_at(index % cap);
        let off = page.page.region.u64_at(at)?.load(Ordering::Acquire);
        Ok((off, page.page.offset + at))
    }

    /// A clone of the current regions, for a search that must not hold the store.
    pub fn regions(&self) -> Regions {
        self.regions.clone()
    }

    /// The storage seam under this store.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The newest committed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The newest committed header, shared (searches keep it beside their regions).
    pub fn header_arc(&self) -> Arc<Header> {
        Arc::clone(&self.header)
    }

    /// Which copy (0 = A, 1 = B) holds the newest committed header.
    pub fn header_copy(&self) -> usize {
        self.header_copy
    }

    /// Whether this store may write.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Bytes of the metadata heap in use: chunk heads, entries and the unused tails of full
    /// chunks, up to the first free byte.
    pub fn metadata_bytes(&self) -> u64 {
        self.geometry.metadata_heap_bytes(self.metadata_next)
    }

    /// Table pages mapped.
    pub fn table_page_count(&self) -> u64 {
        self.table_pages.len() as u64
    }

    /// Where the next region would go (the logical end of the writer's file).
    pub fn file_end(&self) -> u64 {
        self.file_end
    }

    fn require_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly {
                reason: "opened read-only",
            })
        }
    }

    /// Makes sure the segment holding `slot` is mapped, appending segments as needed.
    pub fn ensure_slot(&mut self, slot: u32) -> Result<()> {
        self.require_writable()?;
        let (k, off) = self.geometry.locate(u64::from(slot));
        while self.segments.len() as u64 <= k {
            self.append_segment()?;
        }
        self.allocate_slots(k as usize, off)
    }

    /// Allocates disk blocks for slot `off` of segment `k` and the slots after it, in steps of
    /// at most [`ALLOCATE_STEP`] bytes, so a full disk fails this call with an error instead of
    /// a write through the mapping failing with SIGBUS; the unused end of a segment stays sparse.
    fn allocate_slots(&mut self, k: usize, off: u64) -> Result<()> {
        let (Some(seg), Some(&from)) = (self.regions.segments.get(k), self.allocated_slots.get(k))
        else {
            return Ok(());
        };
        if off < from {
            return Ok(());
        }
        let per_slot = SegmentLayout::slot_bytes_for(self.dims, self.m, self.layout, self.codes);
        let step = (ALLOCATE_STEP / per_slot).max(1);
        let to = (off + 1).max(from + step).min(seg.layout.slots);
        let l = &seg.layout;
        let ranges = [
            (l.headers_at, record::SLOT_HEADER_BYTES),
            l.vector_planes[0],
            l.vector_planes[1],
            (l.records_at, self.record_bytes),
            (
                l.aux_at,
                self.codes.slot_bytes(self.dims).min(codes::AUX_BYTES),
            ),
            (l.codes_at, l.code_bytes),
        ];
        for (at, each) in ranges.into_iter().filter(|r| r.1 > 0) {
            self.storage
                .allocate(seg.offset + at + from * each, (to - from) * each)
                .map_err(no_space)?;
        }
        if let Some(a) = self.allocated_slots.get_mut(k) {
            *a = to;
        }
        Ok(())
    }

    /// Allocates the upper-heap bytes `off..off + bytes` of chunk `c` (and up to
    /// [`ALLOCATE_STEP`] more) before they are written.
    fn allocate_upper(&mut self, c: usize, off: u64, bytes: u64) -> Result<()> {
        let done = self.upper_allocated.get(c).copied().unwrap_or(0);
        if off + bytes <= done {
            return Ok(());
        }
        let chunk_bytes = self.geometry.heap_chunk_bytes(c as u64);
        let to = (off + bytes).max(done + ALLOCATE_STEP).min(chunk_bytes);
        let base = self.upper_chunks.get(c).map_or(0, |m| m.offset);
        self.storage
            .allocate(base + done, to - done)
            .map_err(no_space)?;
        if let Some(a) = self.upper_allocated.get_mut(c) {
            *a = to;
        }
        Ok(())
    }

    /// Reserves a new region of `bytes` (rounded up to 64 KiB) at the end of the file.
    fn append_region(&mut self, bytes: u64) -> Result<(u64, Region)> {
        let offset = self.file_end.max(DATA_START);
        let len = align_region(bytes);
        let end = offset.checked_add(len).ok_or_else(|| Error::Full {
            max: u64::from(u32::MAX),
        })?;
        self.storage.grow(end)?;
        let region = self.storage.map(offset, len, true)?;
        self.file_end = end;
        Ok((offset, region))
    }

    fn append_segment(&mut self) -> Result<()> {
        let k = self.segments.len() as u64;
        let layout = SegmentLayout::of(
            self.geometry.segment_slots(k),
            self.dims,
            self.m,
            self.layout,
            self.codes,
        );
        let (offset, region) = self.append_region(layout.bytes)?;
        advise_vectors_huge(&region, &layout);
        keep_walk_resident(&region, &layout);
        self.set_table_entry(table::KIND_SEGMENTS, k, offset)?;
        Arc::make_mut(&mut self.regions.segments).push(Segment {
            offset,
            layout,
            region,
        });
        self.allocated_slots.push(0);
        self.publish_regions()
    }

    fn set_table_entry(&mut self, kind: u32, index: u64, offset: u64) -> Result<()> {
        let cap = u64::from(self.geometry.table_page_entries);
        let have = self.table_pages.iter().filter(|p| p.kind == kind).count() as u64;
        if index / cap >= have {
            if self.table_pages.len() >= header::MAX_TABLE_PAGES {
                return Err(Error::Full {
                    max: u64::from(u32::MAX),
                });
            }
            let page_bytes = table::page_bytes(self.geometry.table_page_entries);
            let (off, region) = self.append_region(page_bytes)?;
            self.storage.allocate(off, page_bytes).map_err(no_space)?;
            region.write(
                0,
                &table::encode_head(kind, self.geometry.table_page_entries),
            )?;
            self.table_pages.push(TablePage {
                kind,
                page: Mapped {
                    offset: off,
                    region,
                },
            });
        }
        let page = self
            .table_pages
            .iter()
            .filter(|p| p.kind == kind)
            .nth((index / cap) as usize)
            .ok_or_else(|| Error::corrupt("table page missing after append", 0))?;
        page.page
            .region
            .u64_at(table::entry_at(index % cap))?
            .store(offset, Ordering::Release);
        Ok(())
    }

    /// Writes a new slot: its full 24-byte header (deleted epoch 0), its vector, and a level-0
    /// record with `upper_ref` and every neighbor word empty. The segment must be mapped.
    pub fn write_slot(&self, slot: u32, id: u64, vector: &[f32], upper_ref: u64) -> Result<()> {
        self.write_slot_with_metadata(slot, id, vector, upper_ref, 0)
    }

    /// [`Store::write_slot`], naming a metadata entry from [`Store::alloc_metadata`].
    pub fn write_slot_with_metadata(
        &self,
        slot: u32,
        id: u64,
        vector: &[f32],
        upper_ref: u64,
        metadata_ref: u64,
    ) -> Result<()> {
        self.require_writable()?;
        let (seg, off) = self
            .slot_place(slot)
            .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
        let r = &seg.region;
        let header_at = seg.layout.headers_at + off * record::SLOT_HEADER_BYTES;
        if mutants::active(Mutant::AddKeepsDeletedEpoch) {
            r.write(header_at + record::SLOT_ID_AT, &id.to_le_bytes())?;
            r.write(
                header_at + record::SLOT_METADATA_REF_AT,
                &metadata_ref.to_le_bytes(),
            )?;
        } else {
            r.write(header_at, &record::encode_slot_header(id, 0, metadata_ref))?;
        }
        if !vector.is_empty() {
            self.write_vectors(slot, vector)?;
        }
        let rec = seg.layout.records_at + off * self.record_bytes;
        for w in r.u32_words(rec + record::RECORD_NEIGHBORS_AT, 2 * self.m as usize)? {
            w.store(record::EMPTY, Ordering::Relaxed);
        }
        // Release: the record's words are visible before its head names its upper layers.
        r.u64_at(rec + record::RECORD_UPPER_REF_AT)?
            .store(upper_ref, Ordering::Release);
        Ok(())
    }

    /// Writes the vectors of slots `first..first + vectors.len() / dims` (already written by
    /// [`Store::write_slot`] without their vectors), one write per segment they span.
    pub fn write_vectors(&self, first: u32, vectors: &[f32]) -> Result<()> {
        self.require_writable()?;
        let d = self.dims as usize;
        let mut slot = first;
        let mut rest = vectors;
        while !rest.is_empty() {
            let (seg, off) = self
                .slot_place(slot)
                .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
            let n = ((seg.layout.slots - off) as usize).min(rest.len() / d);
            let (now, later) = rest.split_at(n * d);
            let vb = self.layout.vector_bytes(self.dims) as usize;
            let mut bytes = vec![0u8; vb * n];
            for (b, v) in bytes.chunks_exact_mut(vb).zip(now.chunks_exact(d)) {
                vector::encode(self.layout, v, b);
            }
            // One write per plane: each vector's part of it, for slots `off..off + n`.
            let mut part_from = 0;
            for (at, each) in seg.layout.vector_parts(off) {
                let each = each as usize;
                if each == 0 {
                    continue;
                }
                let plane: Vec<u8> = if each == vb {
                    std::mem::take(&mut bytes)
                } else {
                    bytes
                        .chunks_exact(vb)
                        .flat_map(|b| &b[part_from..part_from + each])
                        .copied()
                        .collect()
                };
                self.storage.write_at(seg.offset + at, &plane)?;
                part_from += each;
            }
            if let Some(book) = &self.regions.codebook {
                coded::write_codes(&*self.storage, seg, off, book, now)?;
            }
            slot += n as u32;
            rest = later;
        }
        Ok(())
    }

    /// Writes `epoch` into `slot`'s deleted-epoch field.
    pub fn set_deleted_epoch(&self, slot: u32, epoch: u64) -> Result<()> {
        self.require_writable()?;
        let (seg, off) = self
            .slot_place(slot)
            .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))?;
        let at =
            seg.layout.headers_at + off * record::SLOT_HEADER_BYTES + record::SLOT_DELETED_EPOCH_AT;
        seg.region.u64_at(at)?.store(epoch, Ordering::Release);
        Ok(())
    }

    /// Publishes the routing count R in the live page (release: after the node and its
    /// backlinks are written).
    pub fn publish_routing_count(&self, r: u64) -> Result<()> {
        // Not while a clean-close marker stands (it is replaced by `begin_changes`).
        if !self.writable || !self.active {
            return Ok(());
        }
        #[cfg(test)]
        PUBLISH_HOOK.with(|h| {
            if let Some(hook) = h.borrow().as_ref() {
                hook(self, r)
            }
        });
        #[cfg(test)]
        {
            let hook = SHARED_PUBLISH_HOOK
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(hook) = hook {
                hook(self, r)
            }
        }
        let magic = u64::from_le_bytes(live::MAGIC);
        let head = self.meta.u64_at(format::LIVE_PAGE_OFFSET)?;
        if head.load(Ordering::Relaxed) != magic {
            head.store(magic, Ordering::Release);
        }
        self.meta
            .u64_at(format::LIVE_PAGE_OFFSET + live::ROUTING_COUNT_AT)?
            .store(r, Ordering::Release);
        Ok(())
    }

    /// Mirrors the writer's region counts and table page offsets in the live page (a new
    /// writer calls it at open, after resetting R, so readers stop trusting the counts a
    /// previous writer left).
    pub fn publish_regions(&self) -> Result<()> {
        if !self.writable || !self.active {
            return Ok(());
        }
        let base = format::LIVE_PAGE_OFFSET;
        let pages = (self.table_pages.len() as u64).min(live::MAX_TABLE_PAGES);
        for (i, p) in self.table_pages.iter().take(pages as usize).enumerate() {
            self.meta
                .u64_at(base + live::TABLE_PAGE_OFFSETS_AT + 8 * i as u64)?
                .store(p.page.offset, Ordering::Relaxed);
        }
        self.meta
            .u64_at(base + live::SEGMENT_COUNT_AT)?
            .store(self.segments.len() as u64, Ordering::Relaxed);
        self.meta
            .u64_at(base + live::UPPER_HEAP_CHUNK_COUNT_AT)?
            .store(self.upper_chunks.len() as u64, Ordering::Relaxed);
        self.meta
            .u64_at(base + live::METADATA_HEAP_CHUNK_COUNT_AT)?
            .store(self.metadata_chunks.len() as u64, Ordering::Relaxed);
        self.meta
            .u32_at(base + live::TABLE_PAGE_COUNT_AT)?
            .store(pages as u32, Ordering::Release);
        Ok(())
    }

    /// Commits `next`, deleting the slots in `deletes` at epoch E + 1 = `next.delete_epoch`.
    ///
    /// Without deletes (decision 4): fsync everything written so far, write the header copy that
    /// does not hold the newest header with sequence newest + 1, fsync.
    ///
    /// With deletes (decision 6): (1) write an intent header (the previous commit's state,
    /// sequence newest + 1, pending_epoch E + 1) into the copy not holding the newest header,
    /// fsync (this also makes the data durable); (2) write E + 1 into each deleted slot's
    /// deleted epoch, fsync; (3) write the commit header (sequence newest + 2, pending 0) into
    /// the other copy, the one that held the previous commit, never over the intent, fsync.
    ///
    /// Only then is the commit acknowledged. Any failure poisons the store.
    pub fn commit(&mut self, mut next: Header, deletes: &[u32]) -> Result<()> {
        self.require_writable()?;
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        next.segment_count = self.segments.len() as u64;
        next.upper_heap_chunk_count = self.upper_chunks.len() as u64;
        next.upper_heap_next = self.upper_next;
        next.metadata_heap_chunk_count = self.metadata_chunks.len() as u64;
        next.metadata_heap_next = if mutants::active(Mutant::MetadataHeapNotCommitted) {
            self.header.metadata_heap_next
        } else {
            self.metadata_next
        };
        if next.metadata_heap_chunk_count > 0 {
            // A file holding metadata: releases that read its layout still search it (they
            // ignore metadata), but only a release that keeps metadata may write it.
            next.write_version = next.write_version.max(format::METADATA_WRITE_VERSION);
        }
        if next.user_version != 0 {
            // Releases before user versions would commit 0 over it: they must not write.
            next.write_version = next.write_version.max(format::USER_VERSION_WRITE_VERSION);
        }
        if mutants::active(Mutant::TextRootNotCommitted) {
            next.text_root = self.header.text_root;
        }
        if next.text_root != 0 {
            // Releases before full-text search would change documents without the index.
            next.write_version = next.write_version.max(format::TEXT_WRITE_VERSION);
        }
        // Every commit keeps the file's identity; a file without one (written before
        // identities, or by a release that wrote those bytes as zero) gets one now, so from
        // its next backup on it can be synced incrementally (docs/FORMAT.md, "File identity").
        if mutants::active(Mutant::IdentityNotKept) || !next.has_identity() {
            next.file_id = crate::os::new_file_id()?;
        }
        next.table_pages = self.table_pages.iter().map(|p| p.page.offset).collect();
        next.pending_delete_epoch = 0;
        let result = if deletes.is_empty() {
            self.commit_plain(next)
        } else {
            self.commit_with_deletes(next, deletes)
        };
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn commit_plain(&mut self, mut next: Header) -> Result<()> {
        next.sequence = self.header.sequence + 1;
        next.validate(0)?;
        if !mutants::active(Mutant::NoSyncBeforeCommitHeader) {
            self.sync_or_poison()?;
        }
        let copy = self.other_copy();
        self.write_header_copy(copy, &next)?;
        if !mutants::active(Mutant::AckBeforeLastSync) {
            self.sync_or_poison()?;
        }
        self.header = Arc::new(next);
        self.header_copy = copy;
        Ok(())
    }

    fn commit_with_deletes(&mut self, mut next: Header, deletes: &[u32]) -> Result<()> {
        let epoch = self.header.delete_epoch + 1;
        if next.delete_epoch != epoch {
            return Err(Error::corrupt("delete flush epoch is not E + 1", 0));
        }
        let mut intent = Header::clone(&self.header);
        intent.sequence = self.header.sequence + 1;
        intent.pending_delete_epoch = epoch;
        next.sequence = self.header.sequence + 2;
        next.validate(0)?;
        intent.validate(0)?;
        // (1) data + intent header, fsync.
        let intent_copy = self.other_copy();
        if !mutants::active(Mutant::NoIntentHeader) {
            self.write_header_copy(intent_copy, &intent)?;
        }
        if !mutants::active(Mutant::NoSyncBetweenIntentAndMarks) {
            self.sync_or_poison()?;
        }
        // (2) the marks, fsync.
        for &slot in deletes {
            self.set_deleted_epoch(slot, epoch)?;
        }
        if !mutants::active(Mutant::NoSyncBeforeCommitHeader) {
            self.sync_or_poison()?;
        }
        // (3) the commit header into the copy that held the previous commit, fsync.
        let commit_copy = if mutants::active(Mutant::HeaderCopiesDontAlternate) {
            intent_copy
        } else {
            self.header_copy
        };
        self.write_header_copy(commit_copy, &next)?;
        if !mutants::active(Mutant::AckBeforeLastSync) {
            self.sync_or_poison()?;
        }
        self.header = Arc::new(next);
        self.header_copy = commit_copy;
        Ok(())
    }

    /// The copy a commit writes: the one not holding the newest header.
    fn other_copy(&self) -> usize {
        if mutants::active(Mutant::HeaderCopiesDontAlternate) {
            self.header_copy
        } else {
            1 - self.header_copy
        }
    }

    /// Writes a header copy as aligned u64 words, release-ordered after everything before it.
    /// Stores one header copy in the mapping as whole u64 words: every word but the sequence
    /// and checksum first, then (after a release fence) the checksum and the sequence. A
    /// reader loads those two words first and the rest after an acquire fence, so a copy whose
    /// sequence and checksum words a reader saw change is complete for that reader unless the
    /// writer has begun the next write of the same copy, which ends with yet another sequence:
    /// a copy read torn always shows words that change again (the fast path relies on it).
    fn write_header_copy(&self, copy: usize, h: &Header) -> Result<()> {
        let bytes = h.encode();
        let base = format::header_offset(copy);
        let last = [header::at::CHECKSUM / 8, header::at::SEQUENCE / 8];
        let word = |i: usize| -> u64 {
            let mut w = [0u8; 8];
            let chunk = bytes
                .get(8 * i..(8 * i + 8).min(bytes.len()))
                .unwrap_or(&[]);
            w[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(w)
        };
        fence(Ordering::Release);
        let words = bytes.len().div_ceil(8);
        for i in (0..words).filter(|i| !last.contains(i)) {
            self.meta
                .u64_at(base + 8 * i as u64)?
                .store(word(i), Ordering::Relaxed);
            #[cfg(test)]
            header_hook(copy, i);
        }
        fence(Ordering::Release);
        for i in last {
            self.meta
                .u64_at(base + 8 * i as u64)?
                .store(word(i), Ordering::Relaxed);
            #[cfg(test)]
            header_hook(copy, i);
        }
        Ok(())
    }

    /// Region offsets, for inspection: (segments, upper-heap chunks, table pages).
    pub fn region_offsets(&self) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
        (
            self.segments.iter().map(|s| s.offset).collect(),
            self.upper_chunks.iter().map(|c| c.offset).collect(),
            self.table_pages.iter().map(|p| p.page.offset).collect(),
        )
    }
}
