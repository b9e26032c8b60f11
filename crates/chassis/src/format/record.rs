//! Record layouts inside segments and heap chunks (ADR-0008 decisions 1–3).
//!
//! * Slot header, 24 bytes: `id` u64 at 0, `deleted_epoch` u64 at 8 (0 = live; a delete commits
//!   the flush's epoch here), `metadata_ref` u64 at 16 (0 until a metadata heap exists).
//! * Level-0 record, `8 + 8M` bytes: `upper_ref` u64 at 0 (a heap reference, 0 = the node has
//!   only layer 0), then M0 = 2M neighbor slots as u32 at 8, [`EMPTY`] for an unused word.
//! * Heap chunk: a 16-byte head (`CHHEAP\0\0`, kind u32, reserved u32), then entries, each
//!   8-byte aligned, never straddling two chunks.
//! * Upper entry: `layers` u32 at 0 (L ≥ 1), reserved u32 at 4, then L lists of M u32 neighbor
//!   slots, layer 1 first.
//!
//! A heap reference is `chunk << 32 | offset`; offset 0 is the chunk head, so reference 0 never
//! names an entry and means "none".

/// Bytes of one slot header.
pub const SLOT_HEADER_BYTES: u64 = 24;
/// Offset of `id` in a slot header.
pub const SLOT_ID_AT: u64 = 0;
/// Offset of `deleted_epoch` in a slot header.
pub const SLOT_DELETED_EPOCH_AT: u64 = 8;
/// Offset of `metadata_ref` in a slot header.
pub const SLOT_METADATA_REF_AT: u64 = 16;

/// The empty neighbor word.
pub const EMPTY: u32 = u32::MAX;

/// Offset of `upper_ref` in a level-0 record.
pub const RECORD_UPPER_REF_AT: u64 = 0;
/// Offset of the first neighbor word in a level-0 record.
pub const RECORD_NEIGHBORS_AT: u64 = 8;

/// Bytes of a heap chunk's head.
pub const HEAP_CHUNK_HEAD_BYTES: u64 = 16;
/// Magic at the start of every heap chunk.
pub const HEAP_CHUNK_MAGIC: [u8; 8] = *b"CHHEAP\0\0";
/// Heap kind: upper-layer neighbor lists.
pub const HEAP_KIND_UPPER: u32 = 1;
/// Heap kind: metadata (reserved; no release writes it yet).
pub const HEAP_KIND_METADATA: u32 = 2;

/// Offset of `layers` in an upper entry.
pub const UPPER_LAYERS_AT: u64 = 0;
/// Offset of the first neighbor list in an upper entry.
pub const UPPER_LISTS_AT: u64 = 8;

/// M0, the level-0 capacity: 2M.
pub fn m0(m: u32) -> u32 {
    2 * m
}

/// Bytes of one level-0 record: `8 + 8M`.
pub fn level0_record_bytes(m: u32) -> u64 {
    RECORD_NEIGHBORS_AT + 4 * u64::from(m0(m))
}

/// Bytes of an upper entry with `layers` layers above 0, rounded up to 8.
pub fn upper_entry_bytes(m: u32, layers: u32) -> u64 {
    (UPPER_LISTS_AT + 4 * u64::from(m) * u64::from(layers)).div_ceil(8) * 8
}

/// Builds a heap reference.
pub fn heap_ref(chunk: u32, offset: u32) -> u64 {
    (u64::from(chunk) << 32) | u64::from(offset)
}

/// Splits a heap reference into (chunk, offset).
pub fn split_heap_ref(r: u64) -> (u32, u32) {
    ((r >> 32) as u32, r as u32)
}

/// Encodes a heap chunk head.
pub fn encode_heap_chunk_head(kind: u32) -> [u8; HEAP_CHUNK_HEAD_BYTES as usize] {
    let mut b = [0u8; HEAP_CHUNK_HEAD_BYTES as usize];
    b[..8].copy_from_slice(&HEAP_CHUNK_MAGIC);
    super::put_u32(&mut b, 8, kind);
    b
}

/// Encodes a slot header.
pub fn encode_slot_header(id: u64, deleted_epoch: u64, metadata_ref: u64) -> [u8; 24] {
    let mut b = [0u8; 24];
    super::put_u64(&mut b, SLOT_ID_AT as usize, id);
    super::put_u64(&mut b, SLOT_DELETED_EPOCH_AT as usize, deleted_epoch);
    super::put_u64(&mut b, SLOT_METADATA_REF_AT as usize, metadata_ref);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_match_decision_3() {
        assert_eq!(level0_record_bytes(16), 136);
        assert_eq!(level0_record_bytes(4), 40);
        assert_eq!(upper_entry_bytes(16, 1), 8 + 64);
        assert_eq!(upper_entry_bytes(3, 1), 24); // 8 + 12 = 20, rounded to 24
    }

    #[test]
    fn heap_refs_round_trip() {
        for (c, o) in [(0, 16), (1, 24), (u32::MAX, u32::MAX)] {
            assert_eq!(split_heap_ref(heap_ref(c, o)), (c, o));
        }
    }
}
