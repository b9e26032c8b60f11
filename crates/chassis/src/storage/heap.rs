//! The two heaps' allocation: upper-heap entries (a node's lists above layer 0) and
//! metadata-heap entries (documents and the full-text index's blobs), each in chunks appended
//! at the end of the file; and reading from the metadata heap.
//!
//! Invariants: an entry never straddles two chunks; space is allocated on disk (at most
//! [`ALLOCATE_STEP`] ahead) before it is written, so a full disk fails here and never with
//! SIGBUS; bytes past a heap's committed free position are the writer's own until a commit
//! names them; a reference read from the file is checked to lie inside its chunk, after the
//! chunk's head, before any byte is read.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{no_space, Mapped, Store, ALLOCATE_STEP};
use crate::error::{Error, Result};
use crate::format::geometry::Geometry;
use crate::format::metadata::{self, DocRef};
use crate::format::{record, table};
use crate::mutants::{self, Mutant};

/// The metadata document of vector `id` at heap reference `r` in `chunks` (0: the empty
/// document), its bounds, checksum and owner checked. `chunk_bytes(k)` is chunk k's size.
pub(crate) fn read_metadata<'a>(
    chunks: &'a [Mapped],
    chunk_bytes: impl Fn(u64) -> u64,
    r: u64,
    id: u64,
) -> Result<DocRef<'a>> {
    if r == 0 {
        return Ok(DocRef::empty());
    }
    let (c, o) = record::split_heap_ref(r);
    let chunk = chunks.get(c as usize).ok_or_else(|| {
        Error::corrupt(
            format!("metadata reference {r:#x} names a chunk past the heap"),
            0,
        )
    })?;
    let size = chunk_bytes(u64::from(c)).min(chunk.region.len());
    let o = u64::from(o);
    if o < record::HEAP_CHUNK_HEAD_BYTES
        || !o.is_multiple_of(8)
        || o + metadata::ENTRY_HEAD_BYTES > size
    {
        return Err(Error::corrupt(
            format!("metadata reference {r:#x} is outside its chunk"),
            chunk.offset,
        ));
    }
    let at = chunk.offset + o;
    let head = chunk.region.bytes(o, metadata::ENTRY_HEAD_BYTES as usize)?;
    let len = metadata::entry_len(head, size - o - metadata::ENTRY_HEAD_BYTES, at)?;
    let doc = chunk.region.bytes(o + metadata::ENTRY_HEAD_BYTES, len)?;
    metadata::check_entry(head, doc, id, at)
}

/// The metadata heap's mapped chunks as a source of full-text blobs (`format::text`): bytes
/// at a heap reference, bounded by the chunk.
#[derive(Clone, Copy)]
pub struct HeapBlobs<'a> {
    chunks: &'a [Mapped],
    geometry: Geometry,
}

impl<'a> HeapBlobs<'a> {
    pub(crate) fn new(chunks: &'a [Mapped], geometry: Geometry) -> HeapBlobs<'a> {
        HeapBlobs { chunks, geometry }
    }

    /// The `n` bytes at heap reference `r`, if they lie inside one mapped chunk after its
    /// head. Callers ask only for committed blobs or the writer's own (bytes nothing writes
    /// while they are borrowed).
    pub fn bytes(&self, r: u64, n: usize) -> Option<&'a [u8]> {
        let (c, o) = record::split_heap_ref(r);
        let chunk = self.chunks.get(c as usize)?;
        let size = self
            .geometry
            .metadata_chunk_bytes(u64::from(c))
            .min(chunk.region.len());
        let o = u64::from(o);
        if o < record::HEAP_CHUNK_HEAD_BYTES || o.checked_add(n as u64)? > size {
            return None;
        }
        chunk.region.bytes(o, n).ok()
    }
}

impl Store {
    fn append_upper_chunk(&mut self) -> Result<()> {
        let k = self.upper_chunks.len() as u64;
        let (offset, region) = self.append_region(self.geometry.heap_chunk_bytes(k))?;
        self.storage
            .allocate(offset, record::HEAP_CHUNK_HEAD_BYTES)
            .map_err(no_space)?;
        region.write(0, &record::encode_heap_chunk_head(record::HEAP_KIND_UPPER))?;
        self.set_table_entry(table::KIND_UPPER_HEAP, k, offset)?;
        Arc::make_mut(&mut self.regions.upper_chunks).push(Mapped { offset, region });
        self.upper_allocated.push(record::HEAP_CHUNK_HEAD_BYTES);
        self.publish_regions()
    }

    /// Allocates an upper-heap entry for `layers` layers above 0, all neighbor words empty, and
    /// returns its heap reference. An entry never straddles two chunks.
    pub fn alloc_upper(&mut self, layers: u32) -> Result<u64> {
        self.require_writable()?;
        let bytes = record::upper_entry_bytes(self.m, layers);
        let (mut chunk, mut off) = record::split_heap_ref(self.upper_next);
        // Entries start after the chunk's head (a position of 0 means no entry yet).
        off = off.max(record::HEAP_CHUNK_HEAD_BYTES as u32);
        let fits = (chunk as usize) < self.upper_chunks.len()
            && u64::from(off) + bytes <= self.geometry.heap_chunk_bytes(u64::from(chunk));
        if !fits {
            // A chunk past the position is unused (a rollback rewound the position): take
            // it before appending another.
            if (chunk as usize) + 1 < self.upper_chunks.len() {
                chunk += 1;
            } else {
                self.append_upper_chunk()?;
                chunk = (self.upper_chunks.len() - 1) as u32;
            }
            off = record::HEAP_CHUNK_HEAD_BYTES as u32;
            // Keep the position on the new chunk even if what follows fails.
            self.upper_next = record::heap_ref(chunk, off);
        }
        self.allocate_upper(chunk as usize, u64::from(off), bytes)?;
        let region = &self.upper_chunks[chunk as usize].region;
        let o = u64::from(off);
        region
            .u32_at(o + record::UPPER_LAYERS_AT)?
            .store(layers, Ordering::Relaxed);
        region.u32_at(o + 4)?.store(0, Ordering::Relaxed);
        for w in region.u32_words(o + record::UPPER_LISTS_AT, (layers * self.m) as usize)? {
            w.store(record::EMPTY, Ordering::Relaxed);
        }
        self.upper_next = record::heap_ref(chunk, off + bytes as u32);
        Ok(record::heap_ref(chunk, off))
    }

    fn append_metadata_chunk(&mut self) -> Result<()> {
        let k = self.metadata_chunks.len() as u64;
        let (offset, region) = self.append_region(self.geometry.metadata_chunk_bytes(k))?;
        self.storage
            .allocate(offset, record::HEAP_CHUNK_HEAD_BYTES)
            .map_err(no_space)?;
        region.write(
            0,
            &record::encode_heap_chunk_head(record::HEAP_KIND_METADATA),
        )?;
        self.set_table_entry(table::KIND_METADATA_HEAP, k, offset)?;
        Arc::make_mut(&mut self.regions.metadata_chunks).push(Mapped { offset, region });
        self.metadata_allocated.push(record::HEAP_CHUNK_HEAD_BYTES);
        self.publish_regions()
    }

    /// Stores the encoded metadata document of vector `id` in the metadata heap and returns
    /// its heap reference (0, and nothing stored, for the empty document). The entry counts
    /// from the next commit; until then it is the writer's own.
    pub fn alloc_metadata(&mut self, id: u64, doc: &[u8]) -> Result<u64> {
        self.require_writable()?;
        if doc.len() <= 2 && doc.iter().all(|&b| b == 0) {
            return Ok(0);
        }
        self.alloc_metadata_heap(&metadata::encode_entry(id, doc))
    }

    /// Stores one blob of the full-text index (`format::text`: a multiple of 8 bytes, at most
    /// 64 KiB) in the metadata heap and returns its heap reference. Like a metadata entry it
    /// counts from the next commit, and only the committed `text_root` leads to it.
    pub fn alloc_text_blob(&mut self, kind: u32, payload: &[u8]) -> Result<u64> {
        self.require_writable()?;
        if payload.len() > crate::format::text::MAX_PAYLOAD {
            return Err(Error::InvalidArgument(
                "a full-text blob larger than the format allows".into(),
            ));
        }
        if mutants::active(Mutant::TextPostingsWrong) && kind == crate::format::text::KIND_POSTINGS
        {
            // The first posting's term frequency one above its document's.
            let mut p = payload.to_vec();
            let tf = p
                .iter()
                .skip(12)
                .position(|b| b & 0x80 == 0)
                .map(|i| 13 + i);
            if let Some(b) = tf.and_then(|i| p.get_mut(i)).filter(|b| **b < 0x7F) {
                *b += 1;
            }
            return self.alloc_metadata_heap(&crate::format::text::encode_blob(kind, &p));
        }
        self.alloc_metadata_heap(&crate::format::text::encode_blob(kind, payload))
    }

    /// Writes `entry` (8-byte aligned bytes) at the metadata heap's first free position that
    /// holds it whole, allocating the space first, and returns its reference.
    fn alloc_metadata_heap(&mut self, entry: &[u8]) -> Result<u64> {
        let bytes = entry.len() as u64;
        let (mut chunk, mut off) = record::split_heap_ref(self.metadata_next);
        off = off.max(record::HEAP_CHUNK_HEAD_BYTES as u32);
        let fits = (chunk as usize) < self.metadata_chunks.len()
            && u64::from(off) + bytes <= self.geometry.metadata_chunk_bytes(u64::from(chunk));
        if !fits {
            // As in alloc_upper: an unused chunk past a rewound position is taken first.
            if (chunk as usize) + 1 < self.metadata_chunks.len() {
                chunk += 1;
            } else {
                self.append_metadata_chunk()?;
                chunk = (self.metadata_chunks.len() - 1) as u32;
            }
            off = record::HEAP_CHUNK_HEAD_BYTES as u32;
            self.metadata_next = record::heap_ref(chunk, off);
        }
        // Allocate before writing (decision 5: a full disk fails here, not with SIGBUS).
        let c = chunk as usize;
        let done = self.metadata_allocated.get(c).copied().unwrap_or(0);
        let end = u64::from(off) + bytes;
        if end > done {
            let chunk_bytes = self.geometry.metadata_chunk_bytes(c as u64);
            let to = end.max(done + ALLOCATE_STEP).min(chunk_bytes);
            let base = self.metadata_chunks.get(c).map_or(0, |m| m.offset);
            self.storage
                .allocate(base + done, to - done)
                .map_err(no_space)?;
            if let Some(a) = self.metadata_allocated.get_mut(c) {
                *a = to;
            }
        }
        let region = &self.metadata_chunks[c].region;
        region.write(u64::from(off), entry)?;
        self.metadata_next = record::heap_ref(chunk, off + bytes as u32);
        Ok(record::heap_ref(chunk, off))
    }
}
