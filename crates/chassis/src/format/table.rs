//! Table pages: append-only lists of region offsets (ADR-0008 decision 1).
//!
//! A table page is a 64 KiB-aligned region: `CHTABLE\0` at 0, `kind` u32 at 8, `capacity` u32
//! at 12, then `capacity` u64 file offsets at 16 (0 = entry not written). The segment table is
//! the concatenation, in header order, of the pages of kind [`KIND_SEGMENTS`]; likewise for each
//! heap. An entry below the header's count for its table is committed and never changes.

use super::{u32_at, REGION_ALIGN};
use crate::error::{Error, Result};

/// Magic at the start of every table page.
pub const MAGIC: [u8; 8] = *b"CHTABLE\0";
/// Bytes before the first entry.
pub const HEAD_BYTES: u64 = 16;
/// Offset of `kind`.
pub const KIND_AT: u64 = 8;
/// Offset of `capacity`.
pub const CAPACITY_AT: u64 = 12;
/// Table of segment offsets.
pub const KIND_SEGMENTS: u32 = 1;
/// Table of upper-heap chunk offsets.
pub const KIND_UPPER_HEAP: u32 = 2;
/// Table of metadata-heap chunk offsets (reserved).
pub const KIND_METADATA_HEAP: u32 = 3;

/// Bytes a table page of `entries` entries takes before padding.
pub fn page_bytes(entries: u32) -> u64 {
    HEAD_BYTES + 8 * u64::from(entries)
}

/// Offset of entry `i` inside its page.
pub fn entry_at(i: u64) -> u64 {
    HEAD_BYTES + 8 * i
}

/// Encodes a fresh page head.
pub fn encode_head(kind: u32, capacity: u32) -> [u8; HEAD_BYTES as usize] {
    let mut b = [0u8; HEAD_BYTES as usize];
    b[..8].copy_from_slice(&MAGIC);
    super::put_u32(&mut b, KIND_AT as usize, kind);
    super::put_u32(&mut b, CAPACITY_AT as usize, capacity);
    b
}

/// Decodes a page head; returns its kind. `offset` is the page's file offset.
pub fn decode_head(b: &[u8], offset: u64, expected_capacity: u32) -> Result<u32> {
    if b.len() < HEAD_BYTES as usize || b[..8] != MAGIC {
        return Err(Error::corrupt("table page has no CHTABLE magic", offset));
    }
    let kind = u32_at(b, KIND_AT as usize);
    if !(KIND_SEGMENTS..=KIND_METADATA_HEAP).contains(&kind) {
        return Err(Error::corrupt(
            format!("table page of unknown kind {kind}"),
            offset + KIND_AT,
        ));
    }
    let cap = u32_at(b, CAPACITY_AT as usize);
    if cap != expected_capacity {
        return Err(Error::corrupt(
            format!("table page capacity {cap}, header says {expected_capacity}"),
            offset + CAPACITY_AT,
        ));
    }
    Ok(kind)
}

/// Checks that a region offset read from a table entry is usable: aligned, past the fixed
/// area, and wholly inside a file of `file_len` bytes.
pub fn check_region(offset: u64, bytes: u64, file_len: u64, at: u64) -> Result<()> {
    if offset < super::DATA_START || !offset.is_multiple_of(REGION_ALIGN) {
        return Err(Error::corrupt(
            format!("region offset {offset} is not 64 KiB-aligned data"),
            at,
        ));
    }
    match offset.checked_add(bytes) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(Error::corrupt(
            format!("region at {offset} extends past the end of the file"),
            at,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trip_and_rejects() {
        let h = encode_head(KIND_UPPER_HEAP, 4);
        assert_eq!(decode_head(&h, 0, 4).unwrap(), KIND_UPPER_HEAP);
        assert!(decode_head(&h, 0, 5).is_err());
        assert!(decode_head(&h[..10], 0, 4).is_err());
        let mut bad = h;
        bad[8] = 9;
        assert!(decode_head(&bad, 0, 4).is_err());
    }

    #[test]
    fn regions_must_be_aligned_and_inside_the_file() {
        assert!(check_region(196_608, 10, 196_618, 0).is_ok());
        assert!(check_region(196_608, 11, 196_618, 0).is_err());
        assert!(check_region(200_000, 1, 1 << 30, 0).is_err());
        assert!(check_region(0, 1, 1 << 30, 0).is_err());
        assert!(check_region(u64::MAX - 65535, 1 << 20, u64::MAX, 0).is_err());
    }
}
