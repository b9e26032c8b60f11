//! The header copy: encode, decode, checksum (ADR-0008 decisions 4 and 7).
//!
//! Two copies live at 0 and 64 KiB. Each is [`FIXED_BYTES`] of fixed fields followed by one
//! u64 file offset per table page; `header_len` says how many bytes the checksum covers (a
//! later write version may append fields after the table page offsets, inside `header_len`).
//! The checksum is xxh3-64 over bytes `0..header_len` with its own 8 bytes left out.
//!
//! Decoding order is fixed by decision 7: magic, then the read version (a newer one is
//! [`Error::TooNew`] even if the rest looks like garbage), then `header_len` and the checksum,
//! then field ranges. Nothing here panics on any input.

use super::geometry::Geometry;
use super::{put_u32, put_u64, u32_at, u64_at, MAGIC, READ_VERSION, REGION_ALIGN};
use crate::error::{Error, Result};
use crate::mutants::{self, Mutant};

/// Bytes of the fixed part, up to and including the checksum.
pub const FIXED_BYTES: usize = 240;
/// Largest number of table pages one 64 KiB header copy can list.
pub const MAX_TABLE_PAGES: usize = (super::HEADER_COPY_BYTES as usize - FIXED_BYTES) / 8;

/// Field offsets (bytes from the start of a header copy).
pub mod at {
    #![allow(missing_docs)]
    pub const MAGIC: usize = 0;
    pub const READ_VERSION: usize = 8;
    pub const WRITE_VERSION: usize = 12;
    pub const HEADER_LEN: usize = 16;
    pub const FLAGS: usize = 20;
    pub const DIMS: usize = 24;
    pub const METRIC: usize = 28;
    pub const M: usize = 32;
    pub const M0: usize = 36;
    pub const MAX_LAYERS: usize = 40;
    pub const SEGMENT_BASE_LOG2: usize = 44;
    pub const SEGMENT_DOUBLINGS: usize = 48;
    pub const HEAP_CHUNK_BASE_LOG2: usize = 52;
    pub const HEAP_CHUNK_DOUBLINGS: usize = 56;
    pub const TABLE_PAGE_ENTRIES: usize = 60;
    pub const COMMITTED_COUNT: usize = 64;
    pub const ENTRY_POINT: usize = 72;
    pub const MAX_LAYER: usize = 76;
    pub const DELETE_EPOCH: usize = 80;
    pub const PENDING_DELETE_EPOCH: usize = 88;
    pub const DELETED_COUNT: usize = 96;
    pub const NEXT_ID: usize = 104;
    pub const SEGMENT_COUNT: usize = 112;
    pub const UPPER_HEAP_CHUNK_COUNT: usize = 120;
    pub const UPPER_HEAP_NEXT: usize = 128;
    pub const METADATA_HEAP_CHUNK_COUNT: usize = 136;
    pub const METADATA_HEAP_NEXT: usize = 144;
    pub const TABLE_PAGE_COUNT: usize = 152;
    pub const EF_CONSTRUCTION: usize = 156;
    pub const SEED: usize = 160;
    pub const VECTOR_LAYOUT: usize = 168;
    pub const BACKUP_STAMP: usize = 172;
    pub const CODES: usize = 180;
    pub const CODEBOOK: usize = 184;
    pub const FILE_ID: usize = 192;
    pub const USER_VERSION: usize = 208;
    pub const TEXT_ROOT: usize = 216;
    pub const SEQUENCE: usize = 224;
    pub const CHECKSUM: usize = 232;
    pub const TABLE_PAGE_OFFSETS: usize = 240;
}

/// (name, offset, size) of every fixed field, in order; `docs/FORMAT.md` must list the same.
pub const FIELDS: &[(&str, usize, usize)] = &[
    ("magic", at::MAGIC, 8),
    ("read_version", at::READ_VERSION, 4),
    ("write_version", at::WRITE_VERSION, 4),
    ("header_len", at::HEADER_LEN, 4),
    ("flags", at::FLAGS, 4),
    ("dims", at::DIMS, 4),
    ("metric", at::METRIC, 4),
    ("m", at::M, 4),
    ("m0", at::M0, 4),
    ("max_layers", at::MAX_LAYERS, 4),
    ("segment_base_log2", at::SEGMENT_BASE_LOG2, 4),
    ("segment_doublings", at::SEGMENT_DOUBLINGS, 4),
    ("heap_chunk_base_log2", at::HEAP_CHUNK_BASE_LOG2, 4),
    ("heap_chunk_doublings", at::HEAP_CHUNK_DOUBLINGS, 4),
    ("table_page_entries", at::TABLE_PAGE_ENTRIES, 4),
    ("committed_count", at::COMMITTED_COUNT, 8),
    ("entry_point", at::ENTRY_POINT, 4),
    ("max_layer", at::MAX_LAYER, 4),
    ("delete_epoch", at::DELETE_EPOCH, 8),
    ("pending_delete_epoch", at::PENDING_DELETE_EPOCH, 8),
    ("deleted_count", at::DELETED_COUNT, 8),
    ("next_id", at::NEXT_ID, 8),
    ("segment_count", at::SEGMENT_COUNT, 8),
    ("upper_heap_chunk_count", at::UPPER_HEAP_CHUNK_COUNT, 8),
    ("upper_heap_next", at::UPPER_HEAP_NEXT, 8),
    (
        "metadata_heap_chunk_count",
        at::METADATA_HEAP_CHUNK_COUNT,
        8,
    ),
    ("metadata_heap_next", at::METADATA_HEAP_NEXT, 8),
    ("table_page_count", at::TABLE_PAGE_COUNT, 4),
    ("ef_construction", at::EF_CONSTRUCTION, 4),
    ("seed", at::SEED, 8),
    ("vector_layout", at::VECTOR_LAYOUT, 4),
    ("backup_stamp", at::BACKUP_STAMP, 8),
    ("codes", at::CODES, 4),
    ("codebook", at::CODEBOOK, 8),
    ("file_id", at::FILE_ID, 16),
    ("user_version", at::USER_VERSION, 8),
    ("text_root", at::TEXT_ROOT, 8),
    ("sequence", at::SEQUENCE, 8),
    ("checksum", at::CHECKSUM, 8),
];

/// Flag bit: ids were assigned by the caller at least once (the id table is needed).
pub const FLAG_CUSTOM_IDS: u32 = 1;
/// Flag bit: this file has been replaced by another at the same path (decision 8).
pub const FLAG_SUPERSEDED: u32 = 2;
/// Flag bit (formats 4 and 6): searches walk this file's split vectors by exact distances, because
/// its data is too fine for their high halves (set once by the writer, never cleared).
pub const FLAG_EXACT_WALK: u32 = 4;
/// Flag bits this release knows.
pub const KNOWN_FLAGS: u32 = FLAG_CUSTOM_IDS | FLAG_SUPERSEDED | FLAG_EXACT_WALK;

/// Metric code: squared Euclidean distance.
pub const METRIC_L2_SQUARED: u32 = 0;
/// Metric code: cosine distance (vectors normalised on insert).
pub const METRIC_COSINE: u32 = 1;
/// Metric code: inner product, as distance 1 − ⟨a, b⟩.
pub const METRIC_INNER_PRODUCT: u32 = 2;

/// Largest M (decision 3: M0 = 2M must fit in a u16).
pub const MAX_M: u32 = 32_767;
/// Largest number of layers a file may declare.
pub const MAX_LAYERS_LIMIT: u32 = 64;
/// Largest dimension count.
pub const MAX_DIMS: u32 = 65_536;
/// "No entry point" (empty index).
pub const NO_ENTRY: u32 = u32::MAX;

/// One decoded header copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Oldest release that can read the file.
    pub read_version: u32,
    /// Oldest release that may modify the file.
    pub write_version: u32,
    /// [`FLAG_CUSTOM_IDS`], [`FLAG_SUPERSEDED`].
    pub flags: u32,
    /// Vector dimensions.
    pub dims: u32,
    /// Metric code.
    pub metric: u32,
    /// M: upper-layer list capacity.
    pub m: u32,
    /// M0 = 2M: level-0 list capacity.
    pub m0: u32,
    /// Most layers a node may have (layer 0 included).
    pub max_layers: u32,
    /// Segment and heap geometry.
    pub geometry: Geometry,
    /// N: committed slot count.
    pub committed_count: u64,
    /// Entry point slot, [`NO_ENTRY`] when empty.
    pub entry_point: u32,
    /// The entry point's top layer.
    pub max_layer: u32,
    /// E: delete epoch of the last committed delete flush.
    pub delete_epoch: u64,
    /// Epoch of a delete flush in progress (decision 6); 0 when none.
    pub pending_delete_epoch: u64,
    /// Committed slots whose delete is committed.
    pub deleted_count: u64,
    /// Id the index assigns to the next `add` (one above every id ever stored).
    pub next_id: u64,
    /// Segments that hold committed slots or were appended before this commit.
    pub segment_count: u64,
    /// Upper-heap chunks.
    pub upper_heap_chunk_count: u64,
    /// Heap reference of the first free byte in the upper heap (0 before any chunk).
    pub upper_heap_next: u64,
    /// Metadata-heap chunks (0: no release writes metadata yet).
    pub metadata_heap_chunk_count: u64,
    /// First free byte in the metadata heap.
    pub metadata_heap_next: u64,
    /// ef used while building the graph.
    pub ef_construction: u32,
    /// Seed of the level generator.
    pub seed: u64,
    /// How vectors are stored ([`super::vector::VectorLayout`] code; 0 in format 3).
    pub vector_layout: u32,
    /// What codes the file keeps ([`super::codes::CodeKind`] code; read only from files of
    /// write version 6 or above, 0 in older ones, whose reserved bytes mean nothing).
    pub codes: u32,
    /// File offset of the codebook region, 0 while the codebook is untrained (same rule).
    pub codebook: u64,
    /// The file's identity: 16 random bytes made when the file was created (or migrated,
    /// or compacted into a new lineage) and kept by every commit; all zero in a file no
    /// release with identities has committed to ([`Header::has_identity`]). A backup's copy
    /// carries its source's. Incremental sync needs both sides to have the same one.
    pub file_id: [u8; 16],
    /// The application's own version number, committed with the data by a flush
    /// (`Index::set_user_version`); read only from files of write version
    /// [`super::USER_VERSION_WRITE_VERSION`] or above, 0 in older ones.
    pub user_version: u64,
    /// Metadata-heap reference of the full-text index's root blob ([`super::text`]), 0 when
    /// the file keeps none; read only from files of write version
    /// [`super::TEXT_WRITE_VERSION`] or above, 0 in older ones.
    pub text_root: u64,
    /// Sequence number: the valid copy with the higher one is current.
    pub sequence: u64,
    /// File offsets of the table pages, in the order they were appended.
    pub table_pages: Vec<u64>,
}

impl Header {
    /// How this file stores vectors (decoding checked the code).
    pub fn layout(&self) -> super::vector::VectorLayout {
        super::vector::VectorLayout::from_code(self.vector_layout).unwrap_or_default()
    }

    /// The codes searches may walk by: the file's kind when this release knows it, else none
    /// (a later kind's arrays sit after the ones this release reads, so ignoring them is safe).
    pub fn code_kind(&self) -> super::codes::CodeKind {
        super::codes::CodeKind::from_code(self.codes).unwrap_or_default()
    }

    /// The layout of segment `k` (its arrays as this release reads them).
    pub fn segment_layout(&self, k: u64) -> super::geometry::SegmentLayout {
        super::geometry::SegmentLayout::of(
            self.geometry.segment_slots(k),
            self.dims,
            self.m,
            self.layout(),
            self.code_kind(),
        )
    }

    /// Bytes the checksum covers when this header is encoded.
    pub fn encoded_len(&self) -> usize {
        FIXED_BYTES + 8 * self.table_pages.len()
    }

    /// Whether the file has an identity (one written before identities has none: it is
    /// never synced incrementally, and its writer gives it one at its next commit).
    pub fn has_identity(&self) -> bool {
        self.file_id != [0u8; 16]
    }

    /// Whether ids were assigned by the caller.
    pub fn custom_ids(&self) -> bool {
        self.flags & FLAG_CUSTOM_IDS != 0
    }

    /// Encodes this header, computing `header_len` and the checksum.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.encoded_len();
        let mut b = vec![0u8; len];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&MAGIC);
        put_u32(&mut b, at::READ_VERSION, self.read_version);
        put_u32(&mut b, at::WRITE_VERSION, self.write_version);
        put_u32(&mut b, at::HEADER_LEN, len as u32);
        put_u32(&mut b, at::FLAGS, self.flags);
        put_u32(&mut b, at::DIMS, self.dims);
        put_u32(&mut b, at::METRIC, self.metric);
        put_u32(&mut b, at::M, self.m);
        put_u32(&mut b, at::M0, self.m0);
        put_u32(&mut b, at::MAX_LAYERS, self.max_layers);
        let g = &self.geometry;
        put_u32(&mut b, at::SEGMENT_BASE_LOG2, g.segment_base_log2);
        put_u32(&mut b, at::SEGMENT_DOUBLINGS, g.segment_doublings);
        put_u32(&mut b, at::HEAP_CHUNK_BASE_LOG2, g.heap_chunk_base_log2);
        put_u32(&mut b, at::HEAP_CHUNK_DOUBLINGS, g.heap_chunk_doublings);
        put_u32(&mut b, at::TABLE_PAGE_ENTRIES, g.table_page_entries);
        put_u64(&mut b, at::COMMITTED_COUNT, self.committed_count);
        put_u32(&mut b, at::ENTRY_POINT, self.entry_point);
        put_u32(&mut b, at::MAX_LAYER, self.max_layer);
        put_u64(&mut b, at::DELETE_EPOCH, self.delete_epoch);
        put_u64(&mut b, at::PENDING_DELETE_EPOCH, self.pending_delete_epoch);
        put_u64(&mut b, at::DELETED_COUNT, self.deleted_count);
        put_u64(&mut b, at::NEXT_ID, self.next_id);
        put_u64(&mut b, at::SEGMENT_COUNT, self.segment_count);
        put_u64(
            &mut b,
            at::UPPER_HEAP_CHUNK_COUNT,
            self.upper_heap_chunk_count,
        );
        put_u64(&mut b, at::UPPER_HEAP_NEXT, self.upper_heap_next);
        put_u64(
            &mut b,
            at::METADATA_HEAP_CHUNK_COUNT,
            self.metadata_heap_chunk_count,
        );
        put_u64(&mut b, at::METADATA_HEAP_NEXT, self.metadata_heap_next);
        put_u32(&mut b, at::TABLE_PAGE_COUNT, self.table_pages.len() as u32);
        put_u32(&mut b, at::EF_CONSTRUCTION, self.ef_construction);
        put_u64(&mut b, at::SEED, self.seed);
        put_u32(&mut b, at::VECTOR_LAYOUT, self.vector_layout);
        put_u32(&mut b, at::CODES, self.codes);
        put_u64(&mut b, at::CODEBOOK, self.codebook);
        b[at::FILE_ID..at::FILE_ID + 16].copy_from_slice(&self.file_id);
        put_u64(&mut b, at::USER_VERSION, self.user_version);
        put_u64(&mut b, at::TEXT_ROOT, self.text_root);
        put_u64(&mut b, at::SEQUENCE, self.sequence);
        for (i, off) in self.table_pages.iter().enumerate() {
            put_u64(&mut b, at::TABLE_PAGE_OFFSETS + 8 * i, *off);
        }
        let sum = checksum(&b);
        put_u64(&mut b, at::CHECKSUM, sum);
        b
    }

    /// Decodes one header copy from its bytes (at least `header_len` of them).
    /// `base` is the copy's file offset, used only in error reports.
    pub fn decode(b: &[u8], base: u64) -> Result<Header> {
        if b.len() < 16 || b[..8] != MAGIC {
            return Err(Error::NotChassisFile);
        }
        // Decision 7: the read version before anything else, so a newer layout is "too new".
        let read_version = u32_at(b, at::READ_VERSION);
        if read_version > READ_VERSION {
            return Err(Error::TooNew { read_version });
        }
        if b.len() < FIXED_BYTES {
            return Err(Error::corrupt("header copy truncated", base));
        }
        let len = u32_at(b, at::HEADER_LEN) as usize;
        if len < FIXED_BYTES || len > super::HEADER_COPY_BYTES as usize || len > b.len() {
            return Err(Error::corrupt(
                format!("header length {len} out of range"),
                base + at::HEADER_LEN as u64,
            ));
        }
        let stored = u64_at(b, at::CHECKSUM);
        if checksum(&b[..len]) != stored && !mutants::active(Mutant::ChecksumNotChecked) {
            return Err(Error::corrupt(
                "header checksum mismatch",
                base + at::CHECKSUM as u64,
            ));
        }
        let table_page_count = u32_at(b, at::TABLE_PAGE_COUNT) as usize;
        if FIXED_BYTES + 8 * table_page_count > len {
            return Err(Error::corrupt(
                "table page count exceeds header length",
                base + at::TABLE_PAGE_COUNT as u64,
            ));
        }
        let table_pages = (0..table_page_count)
            .map(|i| u64_at(b, at::TABLE_PAGE_OFFSETS + 8 * i))
            .collect();
        let write_version = u32_at(b, at::WRITE_VERSION);
        // Bytes 180..192 were reserved before write version 6: zero by every writer, to be
        // ignored by every reader.
        let coded = write_version >= super::CODES_WRITE_VERSION;
        // Bytes 192..208 (the identity) were reserved before it, written as zero by every
        // writer: a file from then reads as having none. Bytes 208..216 (the user version)
        // are read only from the write version that gave them that meaning.
        let mut file_id = [0u8; 16];
        file_id.copy_from_slice(&b[at::FILE_ID..at::FILE_ID + 16]);
        let user_version = if write_version >= super::USER_VERSION_WRITE_VERSION {
            u64_at(b, at::USER_VERSION)
        } else {
            0
        };
        // Bytes 216..224 (the full-text root) likewise, from the write version that gave them
        // that meaning.
        let text_root = if write_version >= super::TEXT_WRITE_VERSION {
            u64_at(b, at::TEXT_ROOT)
        } else {
            0
        };
        let h = Header {
            read_version,
            write_version,
            flags: u32_at(b, at::FLAGS),
            dims: u32_at(b, at::DIMS),
            metric: u32_at(b, at::METRIC),
            m: u32_at(b, at::M),
            m0: u32_at(b, at::M0),
            max_layers: u32_at(b, at::MAX_LAYERS),
            geometry: Geometry {
                segment_base_log2: u32_at(b, at::SEGMENT_BASE_LOG2),
                segment_doublings: u32_at(b, at::SEGMENT_DOUBLINGS),
                heap_chunk_base_log2: u32_at(b, at::HEAP_CHUNK_BASE_LOG2),
                heap_chunk_doublings: u32_at(b, at::HEAP_CHUNK_DOUBLINGS),
                table_page_entries: u32_at(b, at::TABLE_PAGE_ENTRIES),
            },
            committed_count: u64_at(b, at::COMMITTED_COUNT),
            entry_point: u32_at(b, at::ENTRY_POINT),
            max_layer: u32_at(b, at::MAX_LAYER),
            delete_epoch: u64_at(b, at::DELETE_EPOCH),
            pending_delete_epoch: u64_at(b, at::PENDING_DELETE_EPOCH),
            deleted_count: u64_at(b, at::DELETED_COUNT),
            next_id: u64_at(b, at::NEXT_ID),
            segment_count: u64_at(b, at::SEGMENT_COUNT),
            upper_heap_chunk_count: u64_at(b, at::UPPER_HEAP_CHUNK_COUNT),
            upper_heap_next: u64_at(b, at::UPPER_HEAP_NEXT),
            metadata_heap_chunk_count: u64_at(b, at::METADATA_HEAP_CHUNK_COUNT),
            metadata_heap_next: u64_at(b, at::METADATA_HEAP_NEXT),
            ef_construction: u32_at(b, at::EF_CONSTRUCTION),
            seed: u64_at(b, at::SEED),
            vector_layout: u32_at(b, at::VECTOR_LAYOUT),
            codes: if coded { u32_at(b, at::CODES) } else { 0 },
            codebook: if coded { u64_at(b, at::CODEBOOK) } else { 0 },
            file_id,
            user_version,
            text_root,
            sequence: u64_at(b, at::SEQUENCE),
            table_pages,
        };
        h.validate(base)?;
        Ok(h)
    }

    /// Range checks on a header whose checksum passed: a checksummed but nonsensical header is
    /// still corrupt, and everything downstream relies on these bounds.
    pub fn validate(&self, base: u64) -> Result<()> {
        let bad = |what: String, field: usize| Err(Error::corrupt(what, base + field as u64));
        if self.dims == 0 || self.dims > MAX_DIMS {
            return bad(format!("dims {} out of range", self.dims), at::DIMS);
        }
        if self.metric > METRIC_INNER_PRODUCT {
            return bad(format!("unknown metric code {}", self.metric), at::METRIC);
        }
        if self.m < 2 || self.m > MAX_M {
            return bad(format!("M {} out of range 2..=32767", self.m), at::M);
        }
        if self.m0 != 2 * self.m {
            return bad(format!("M0 {} is not 2M", self.m0), at::M0);
        }
        match super::vector::VectorLayout::from_code(self.vector_layout) {
            None => {
                return bad(
                    format!("unknown vector layout {}", self.vector_layout),
                    at::VECTOR_LAYOUT,
                )
            }
            // A release that reads only format 3 would take split halves for f32 values.
            Some(layout) if self.read_version < layout.read_version() => {
                return bad(
                    format!(
                        "vector layout {} needs read version {}, the file says {}",
                        self.vector_layout,
                        layout.read_version(),
                        self.read_version
                    ),
                    at::VECTOR_LAYOUT,
                )
            }
            Some(_) => {}
        }
        // Only a release that keeps metadata writes a metadata heap (decision 7: such files
        // have write version 5 or above).
        if (self.metadata_heap_chunk_count != 0 || self.metadata_heap_next != 0)
            && self.write_version < super::METADATA_WRITE_VERSION
        {
            return bad(
                format!(
                    "a metadata heap in a file of write version {}",
                    self.write_version
                ),
                at::METADATA_HEAP_CHUNK_COUNT,
            );
        }
        let needs = match super::codes::CodeKind::from_code(self.codes) {
            Some(kind) => kind.write_version().unwrap_or(0),
            // A kind a later release wrote: this one ignores it (see `code_kind`).
            None => super::CODES_WRITE_VERSION,
        };
        if self.write_version < needs {
            return bad(
                format!(
                    "codes of kind {} in a file of write version {}",
                    self.codes, self.write_version
                ),
                at::CODES,
            );
        }
        // A user version needs the write version that keeps it: a release before it would
        // write the file back with 0 there, silently forgetting the application's version.
        if self.user_version != 0 && self.write_version < super::USER_VERSION_WRITE_VERSION {
            return bad(
                format!(
                    "a user version in a file of write version {}",
                    self.write_version
                ),
                at::USER_VERSION,
            );
        }
        // A full-text index needs the write version that maintains it (a release before it
        // would add documents without indexing them), and lives in the metadata heap.
        if self.text_root != 0 {
            if self.write_version < super::TEXT_WRITE_VERSION {
                return bad(
                    format!(
                        "a full-text index in a file of write version {}",
                        self.write_version
                    ),
                    at::TEXT_ROOT,
                );
            }
            let (chunk, off) = super::record::split_heap_ref(self.text_root);
            if u64::from(chunk) >= self.metadata_heap_chunk_count
                || u64::from(off) < super::record::HEAP_CHUNK_HEAD_BYTES
                || off % 8 != 0
            {
                return bad(
                    format!(
                        "full-text root {:#x} outside the metadata heap",
                        self.text_root
                    ),
                    at::TEXT_ROOT,
                );
            }
        }
        if self.codebook != 0
            && (self.codes == 0
                || self.codebook < super::DATA_START
                || !self.codebook.is_multiple_of(REGION_ALIGN))
        {
            return bad(
                format!("codebook at {} in a file without codes", self.codebook),
                at::CODEBOOK,
            );
        }
        if self.max_layers == 0 || self.max_layers > MAX_LAYERS_LIMIT {
            return bad(
                format!("max layers {} out of range", self.max_layers),
                at::MAX_LAYERS,
            );
        }
        if let Some(why) = self.geometry.validate(self.m, self.max_layers) {
            return bad(why.to_string(), at::SEGMENT_BASE_LOG2);
        }
        if self.committed_count > u64::from(u32::MAX) {
            return bad(
                "committed count beyond u32 slots".into(),
                at::COMMITTED_COUNT,
            );
        }
        if self.committed_count == 0 {
            if self.entry_point != NO_ENTRY {
                return bad("entry point in an empty index".into(), at::ENTRY_POINT);
            }
        } else if u64::from(self.entry_point) >= self.committed_count {
            return bad(
                "entry point beyond the committed count".into(),
                at::ENTRY_POINT,
            );
        }
        if self.max_layer >= self.max_layers {
            return bad("max layer beyond max layers".into(), at::MAX_LAYER);
        }
        if self.deleted_count > self.committed_count {
            return bad(
                "deleted count exceeds committed count".into(),
                at::DELETED_COUNT,
            );
        }
        if self.segment_count < self.geometry.segments_for(self.committed_count) {
            return bad(
                "too few segments for the committed count".into(),
                at::SEGMENT_COUNT,
            );
        }
        let entries = u64::from(self.geometry.table_page_entries);
        let pages = self.table_pages.len() as u64;
        // Counts from the file: a sum that would overflow is "too many" all the same.
        let regions = self
            .segment_count
            .saturating_add(self.upper_heap_chunk_count)
            .saturating_add(self.metadata_heap_chunk_count);
        if regions > pages * entries {
            return bad(
                "more regions than table entries".into(),
                at::TABLE_PAGE_COUNT,
            );
        }
        if self.table_pages.len() > MAX_TABLE_PAGES {
            return bad("too many table pages".into(), at::TABLE_PAGE_COUNT);
        }
        // Each heap's first free byte lies in one of its chunks, after the chunk's head.
        let heaps = [
            (
                "upper heap",
                self.upper_heap_next,
                self.upper_heap_chunk_count,
                at::UPPER_HEAP_NEXT,
                self.geometry.heap_chunk_bytes(u64::MAX),
            ),
            (
                "metadata heap",
                self.metadata_heap_next,
                self.metadata_heap_chunk_count,
                at::METADATA_HEAP_NEXT,
                self.geometry.metadata_chunk_bytes(u64::MAX),
            ),
        ];
        for (heap, next, count, field, largest) in heaps {
            let (chunk, off) = super::record::split_heap_ref(next);
            let ok = if count == 0 {
                next == 0
            } else {
                u64::from(chunk) < count
                    && u64::from(off) >= super::record::HEAP_CHUNK_HEAD_BYTES
                    && u64::from(off) <= largest
            };
            if !ok {
                return bad(format!("{heap} position outside its chunks"), field);
            }
        }
        for (i, &off) in self.table_pages.iter().enumerate() {
            if off < super::DATA_START || !off.is_multiple_of(REGION_ALIGN) {
                return bad(
                    format!("table page {i} at unaligned offset {off}"),
                    at::TABLE_PAGE_OFFSETS + 8 * i,
                );
            }
        }
        Ok(())
    }
}

/// xxh3-64 over a header copy's bytes with its checksum field left out.
pub fn checksum(b: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&b[..at::CHECKSUM]);
    h.update(&b[at::CHECKSUM + 8..]);
    h.digest()
}

/// What a header copy's bytes say, for choosing between copies and for `chassis info`.
#[derive(Debug)]
pub enum CopyState {
    /// A valid header.
    Valid(Header),
    /// Not valid; the error says why.
    Invalid(Error),
}

/// Chooses the current header from the two copies (decision 4): the valid one with the higher
/// sequence. Two valid copies with the same sequence are corruption; a read version above ours
/// in either copy is [`Error::TooNew`]; no valid copy is [`Error::Corrupt`], or
/// [`Error::NotChassisFile`] when neither copy has the magic.
/// Returns the header and which copy (0 = A, 1 = B) holds it.
pub fn choose(a: &[u8], b: &[u8]) -> Result<(Header, usize)> {
    choose_decoded(
        Header::decode(a, super::HEADER_A_OFFSET),
        Header::decode(b, super::HEADER_B_OFFSET),
    )
}

/// [`choose`] over copies already decoded (copy A, copy B).
pub fn choose_decoded(a: Result<Header>, b: Result<Header>) -> Result<(Header, usize)> {
    let states = [a, b];
    for s in &states {
        if let Err(Error::TooNew { read_version }) = s {
            return Err(Error::TooNew {
                read_version: *read_version,
            });
        }
    }
    match states {
        [Ok(ha), Ok(hb)] => {
            if ha.sequence == hb.sequence {
                Err(Error::corrupt(
                    format!("both header copies have sequence {}", ha.sequence),
                    super::HEADER_B_OFFSET + at::SEQUENCE as u64,
                ))
            } else if ha.sequence > hb.sequence {
                Ok((ha, 0))
            } else {
                Ok((hb, 1))
            }
        }
        [Ok(ha), Err(_)] => Ok((ha, 0)),
        [Err(_), Ok(hb)] => Ok((hb, 1)),
        [Err(Error::NotChassisFile), Err(Error::NotChassisFile)] => Err(Error::NotChassisFile),
        [Err(ea), Err(_)] => match ea {
            Error::NotChassisFile => Err(Error::corrupt("no valid header copy", 0)),
            e => Err(Error::corrupt(format!("no valid header copy ({e})"), 0)),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Header {
        Header {
            read_version: 4,
            write_version: 4,
            flags: 0,
            dims: 7,
            metric: METRIC_COSINE,
            m: 16,
            m0: 32,
            max_layers: 16,
            geometry: Geometry::small_for_tests(16, 16),
            committed_count: 40,
            entry_point: 3,
            max_layer: 2,
            delete_epoch: 5,
            pending_delete_epoch: 0,
            deleted_count: 4,
            next_id: 40,
            segment_count: 2,
            upper_heap_chunk_count: 1,
            upper_heap_next: 24,
            metadata_heap_chunk_count: 0,
            metadata_heap_next: 0,
            ef_construction: 200,
            seed: 42,
            vector_layout: super::super::vector::LAYOUT_SPLIT_HALVES,
            codes: 0,
            codebook: 0,
            file_id: [7; 16],
            user_version: 0,
            text_root: 0,
            sequence: 9,
            table_pages: vec![196_608, 327_680],
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        let b = h.encode();
        assert_eq!(b.len(), FIXED_BYTES + 16);
        assert_eq!(&b[..8], b"CHASSIS\0");
        assert_eq!(u32_at(&b, 8), 4);
        assert_eq!(u32_at(&b, 12), 4);
        assert_eq!(u32_at(&b, 168), 1, "vector layout: split halves");
        assert_eq!(Header::decode(&b, 0).unwrap(), h);
    }

    /// Fields that pass the checksum are still untrusted: sums over them must neither panic
    /// (tests run with overflow checks) nor wrap. Each of these overflowed before.
    #[test]
    fn huge_fields_are_corrupt_never_an_overflow() {
        type Change = fn(&mut Header);
        let cases: Vec<(&str, Change)> = vec![
            ("segment log2", |h| h.geometry.segment_base_log2 = u32::MAX),
            ("segment doublings", |h| {
                h.geometry.segment_doublings = u32::MAX
            }),
            ("heap doublings", |h| {
                h.geometry.heap_chunk_doublings = u32::MAX
            }),
            ("segment count", |h| h.segment_count = u64::MAX),
            ("upper chunks", |h| h.upper_heap_chunk_count = u64::MAX),
            ("both chunk counts", |h| {
                h.upper_heap_chunk_count = u64::MAX / 2 + 1;
                h.metadata_heap_chunk_count = u64::MAX / 2 + 1;
            }),
            ("upper next", |h| h.upper_heap_next = u64::MAX),
            ("metadata next", |h| h.metadata_heap_next = 24),
        ];
        for (what, change) in cases {
            let mut h = sample();
            change(&mut h);
            assert!(
                matches!(Header::decode(&h.encode(), 0), Err(Error::Corrupt { .. })),
                "{what}"
            );
        }
        let g = sample().geometry;
        assert_eq!(g.segment_first_slot(u64::MAX), u64::MAX);
    }

    /// A metadata heap needs write version 5: a release that writes only version 4 would
    /// drop it on its next commit.
    #[test]
    fn a_metadata_heap_needs_write_version_5() {
        let mut h = sample();
        h.metadata_heap_chunk_count = 1;
        h.metadata_heap_next = 24;
        h.table_pages.push(458_752);
        assert!(matches!(
            Header::decode(&h.encode(), 0),
            Err(Error::Corrupt { .. })
        ));
        h.write_version = 5;
        assert_eq!(Header::decode(&h.encode(), 0).unwrap(), h);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let b = sample().encode();
        for byte in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[byte] ^= 1 << bit;
                assert!(
                    Header::decode(&c, 0).is_err(),
                    "flip at {byte}.{bit} accepted"
                );
            }
        }
    }

    #[test]
    fn newer_read_version_is_too_new_before_the_checksum() {
        let mut b = sample().encode();
        put_u32(&mut b, at::READ_VERSION, READ_VERSION + 1);
        // The checksum no longer matches, yet the answer is TooNew, not Corrupt.
        assert!(matches!(
            Header::decode(&b, 0),
            Err(Error::TooNew { read_version }) if read_version == READ_VERSION + 1
        ));
    }

    #[test]
    fn the_split_layout_needs_read_version_4_and_unknown_layouts_are_corrupt() {
        let mut h = sample();
        h.read_version = 3;
        assert!(matches!(
            Header::decode(&h.encode(), 0),
            Err(Error::Corrupt { .. })
        ));
        h.vector_layout = super::super::vector::LAYOUT_F32;
        assert_eq!(Header::decode(&h.encode(), 0).ok(), Some(h.clone()));
        h.read_version = 4;
        h.vector_layout = 2;
        assert!(
            matches!(Header::decode(&h.encode(), 0), Err(Error::Corrupt { .. })),
            "half precision needs read version 5"
        );
        h.read_version = 5;
        assert_eq!(Header::decode(&h.encode(), 0).ok(), Some(h.clone()));
        h.vector_layout = 3;
        assert!(
            matches!(Header::decode(&h.encode(), 0), Err(Error::Corrupt { .. })),
            "planar split halves need read version 6"
        );
        h.read_version = 6;
        assert_eq!(Header::decode(&h.encode(), 0).ok(), Some(h.clone()));
        h.vector_layout = 4;
        assert!(matches!(
            Header::decode(&h.encode(), 0),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn choose_takes_the_higher_sequence_and_rejects_ties() {
        let mut h = sample();
        let a = h.encode();
        h.sequence = 10;
        h.committed_count = 41;
        let b = h.encode();
        let (got, copy) = choose(&a, &b).unwrap();
        assert_eq!((got.sequence, copy), (10, 1));
        let (got, copy) = choose(&b, &a).unwrap();
        assert_eq!((got.sequence, copy), (10, 0));
        h.sequence = 9;
        assert!(matches!(
            choose(&a, &h.encode()),
            Err(Error::Corrupt { .. })
        ));
        // One torn copy: the other wins.
        let mut torn = b.clone();
        torn[100] ^= 0xFF;
        assert_eq!(choose(&a, &torn).unwrap().0.sequence, 9);
        assert!(matches!(choose(&torn, &torn), Err(Error::Corrupt { .. })));
        assert!(matches!(
            choose(&[0u8; 300], &[0u8; 300]),
            Err(Error::NotChassisFile)
        ));
    }

    #[test]
    fn decode_never_panics_on_short_or_garbage_input() {
        let b = sample().encode();
        for n in 0..b.len() {
            let _ = Header::decode(&b[..n], 0);
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let mut c = b.clone();
            for _ in 0..4 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = (x >> 33) as usize % c.len();
                c[i] = (x >> 17) as u8;
            }
            let _ = Header::decode(&c, 0);
        }
    }
}
