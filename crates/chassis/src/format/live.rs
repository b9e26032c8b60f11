//! The live page at 128 KiB (ADR-0008 decision 5): what the writer publishes between commits.
//!
//! `CHLIVE\0\0` at 0, `routing_count` u64 at 8 (R ≥ N: slots readers may route through),
//! `segment_count` u64 at 16, `upper_heap_chunk_count` u64 at 24, `metadata_heap_chunk_count`
//! u64 at 32, `table_page_count` u32 at 40, reserved u32 at 44, then the writer's table page
//! offsets as u64 from 48. Nothing here is durable: a new file's live page is all zero, and
//! recovery resets R to the committed count before any ghost slot is reused.

/// Magic written when a writer first publishes.
pub const MAGIC: [u8; 8] = *b"CHLIVE\0\0";
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
