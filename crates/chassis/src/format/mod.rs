//! Formats 3 and 4, byte for byte: pure functions over bytes, no I/O. Format 4 is format 3
//! with the `vector_layout` header field and the split-halves vector layout ([`vector`]).
//!
//! This module owns every on-disk layout: the header copies and their checksum
//! ([`header`], ADR-0008 decisions 4 and 7), segment geometry and slot addressing
//! ([`geometry`], decision 1), table pages ([`table`]), slot headers, level-0 records and upper
//! heap entries ([`record`], decision 3) and the live page ([`live`], decision 5).
//! `docs/FORMAT.md` documents the same offsets; `tests/format_doc.rs` checks the two agree.
//!
//! Invariants kept here: everything on disk is little-endian; every region (segment, heap
//! chunk, table page) starts at a multiple of [`REGION_ALIGN`]; decoding never panics on any
//! input, it returns [`crate::Error::Corrupt`] (or `TooNew` / `NotChassisFile`).

pub mod codes;
pub mod geometry;
pub mod header;
pub mod hnswlib;
pub mod live;
pub mod metadata;
pub mod patch;
pub mod record;
pub mod table;
pub mod text;
pub mod vector;

/// Bytes 0–7 of both header copies, forever (decision 7).
pub const MAGIC: [u8; 8] = *b"CHASSIS\0";
/// The newest read version this release can read (decision 7). New files get the read
/// version their vector layout needs ([`vector::VectorLayout::read_version`]): 6 for the
/// default planar split halves, 5 for half precision, 4 for split halves side by side, 3 for
/// f32.
pub const READ_VERSION: u32 = 6;
/// The newest write version this release may modify (decision 7). New files get their
/// layout's read version here too; a file's write version becomes
/// [`METADATA_WRITE_VERSION`] when it first holds metadata.
pub const WRITE_VERSION: u32 = 9;
/// The write version of a file that holds metadata: releases before it read such a file
/// correctly (they ignore the metadata heap and the slots' metadata references) and must not
/// write it, since their writes would not keep its metadata.
pub const METADATA_WRITE_VERSION: u32 = 5;
/// The write version of a file that keeps quantized codes ([`codes`]): releases before it
/// read such a file correctly (the codes, their arrays and the codebook sit where they never
/// look) and must not write it, since their adds would leave new slots without codes. Int4
/// codes need [`codes::INT4_WRITE_VERSION`] (7) for the same reason against releases of 6.
pub const CODES_WRITE_VERSION: u32 = 6;
/// The write version of a file whose header holds a non-zero user version
/// (`Index::set_user_version`): releases before it read such a file correctly (the field was
/// reserved bytes they ignore) and must not write it, since their commits would write 0 there
/// and the application would lose the version it pairs the file's state with.
pub const USER_VERSION_WRITE_VERSION: u32 = 8;
/// The write version of a file that keeps a full-text index ([`text`], the header's
/// `text_root`): releases before it read such a file correctly (its blobs sit in the metadata
/// heap where only the root leads) and must not write it, since their adds, deletes and
/// metadata changes would leave the index disagreeing with the documents.
pub const TEXT_WRITE_VERSION: u32 = 9;

/// Every region starts at a multiple of this: the Windows mapping granularity and a multiple
/// of every supported page size (decision 1).
pub const REGION_ALIGN: u64 = 64 * 1024;
/// File offset of header copy A.
pub const HEADER_A_OFFSET: u64 = 0;
/// File offset of header copy B (64 KiB apart so the copies never share a page).
pub const HEADER_B_OFFSET: u64 = 64 * 1024;
/// Room for one header copy.
pub const HEADER_COPY_BYTES: u64 = 64 * 1024;
/// File offset of the live page (decision 5).
pub const LIVE_PAGE_OFFSET: u64 = 128 * 1024;
/// Room for the live page.
pub const LIVE_PAGE_BYTES: u64 = 64 * 1024;
/// First byte after the fixed area: the first region starts here or later.
pub const DATA_START: u64 = 192 * 1024;
/// A segment never exceeds this when it can be helped (decision 1: the largest doubling that
/// fits decides K).
pub const MAX_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;

/// Rounds `n` up to the next multiple of [`REGION_ALIGN`].
pub fn align_region(n: u64) -> u64 {
    n.div_ceil(REGION_ALIGN) * REGION_ALIGN
}

/// Offset of header copy `copy` (0 = A, 1 = B).
pub fn header_offset(copy: usize) -> u64 {
    if copy == 0 {
        HEADER_A_OFFSET
    } else {
        HEADER_B_OFFSET
    }
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
