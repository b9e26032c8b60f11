//! The live page at 128 KiB (ADR-0008 decision 5): what the writer publishes between commits,
//! and whether the last writer closed cleanly.
//!
//! `CHLIVE\0\0` at 0, `routing_count` u64 at 8 (R ≥ N: slots readers may route through),
//! `segment_count` u64 at 16, `upper_heap_chunk_count` u64 at 24, `metadata_heap_chunk_count`
//! u64 at 32, `table_page_count` u32 at 40, reserved u32 at 44, then the writer's table page
//! offsets as u64 from 48. Nothing here is durable: a new file's live page is all zero, and
//! recovery resets R to the committed count before any ghost slot is reused.
//!
//! The clean-close marker: `CHCLEAN\0` at 0 and a header sequence u64 at 8, written (and made
//! durable) by a writer that closes with nothing pending. It says: when the header's sequence
//! was this one, every committed neighbor list named only committed slots and kept the
//! support invariant (`graph::support`), and no writer has changed a list since. A writer
//! replaces it with `CHLIVE` durably before it changes any list, so a writer that opens a
//! file whose marker names the current header sequence needs no repair pass. Readers, of this
//! release and earlier ones, read any magic but `CHLIVE` as "no writer has published": R = N
//! and the header's counts, which is exact for a cleanly closed file. A writer of an earlier
//! release overwrites the magic with `CHLIVE` when it opens (in memory: see FORMAT.md for the
//! one case this does not cover).

/// Magic written when a writer first publishes.
pub const MAGIC: [u8; 8] = *b"CHLIVE\0\0";
/// Magic of the clean-close marker (the sequence it vouches for at [`CLEAN_SEQUENCE_AT`]).
pub const CLEAN_MAGIC: [u8; 8] = *b"CHCLEAN\0";
/// Offset of the sequence the clean-close marker names (R's word: no R without a writer).
pub const CLEAN_SEQUENCE_AT: u64 = 8;
/// Offset of R.
pub const ROUTING_COUNT_AT: u64 = 8;
/// Offset of the writer's segment count.
pub const SEGMENT_COUNT_AT: u64 = 16;
/// Offset of the writer's upper-heap chunk count.
pub const UPPER_HEAP_CHUNK_COUNT_AT: u64 = 24;
/// Offset of the writer's metadata-heap chunk count.
pub const METADATA_HEAP_CHUNK_COUNT_AT: u64 = 32;
/// Offset of the writer's table page count.
pub const TABLE_PAGE_COUNT_AT: u64 = 40;
/// Offset of the first table page offset.
pub const TABLE_PAGE_OFFSETS_AT: u64 = 48;
/// Table pages the live page can mirror.
pub const MAX_TABLE_PAGES: u64 = (super::LIVE_PAGE_BYTES - TABLE_PAGE_OFFSETS_AT) / 8;
