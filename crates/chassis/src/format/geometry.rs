//! Segment and heap-chunk geometry, and slot addressing (ADR-0008 decision 1).
//!
//! Segment k < K holds b·2^k slots (b = 2^β, 1,024 by default); every later segment holds
//! C = b·2^K slots, K being the largest doubling whose segment still fits in 256 MiB. With
//! B = C − b, slot s < B lives in segment k = ⌊log2(s + b)⌋ − β at offset s + b − 2^(k+β), and
//! slot s ≥ B in segment K + ((s − B) >> log2 C) at offset (s − B) & (C − 1).
//!
//! A segment holds three parallel arrays: `slots` 24-byte slot headers, then `slots` vectors of
//! `4·dims` bytes, then `slots` level-0 records of `8 + 8M` bytes ([`SegmentLayout`]). Planar
//! split halves divide the vector array in two planes: every slot's `2·dims` bytes of high
//! halves, then every slot's low halves ([`SegmentLayout::vector_parts`]).
//! Heap chunk k holds h·2^min(k, Kh) bytes (h = 2^heap_chunk_base_log2).
//!
//! Invariant: every function here is total over the ranges [`Geometry::validate`] accepts,
//! and overflow-free for slot numbers below 2^32.

use super::codes::{CodeKind, AUX_BYTES};
use super::vector::VectorLayout;
use super::{record, MAX_SEGMENT_BYTES};

/// How a file divides its slots into segments and its heaps into chunks. Recorded in the
/// header, so a file is always read with the geometry it was written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// β: the first segment holds 2^β slots (10 in production files, 4 in unit tests).
    pub segment_base_log2: u32,
    /// K: how many segments double before the size stays at C = 2^(β+K).
    pub segment_doublings: u32,
    /// The first heap chunk holds 2^this bytes.
    pub heap_chunk_base_log2: u32,
    /// Kh: how many heap chunks double before the size stays fixed.
    pub heap_chunk_doublings: u32,
    /// Entries (region offsets) per table page.
    pub table_page_entries: u32,
}

/// Limits [`Geometry::validate`] enforces, so addressing never overflows.
pub const MAX_SEGMENT_LOG2: u32 = 30;
/// Largest heap chunk: 1 GiB.
pub const MAX_HEAP_CHUNK_LOG2: u32 = 30;
/// Smallest heap chunk: 256 bytes.
pub const MIN_HEAP_CHUNK_LOG2: u32 = 8;
/// Largest number of entries in one table page (one 64 KiB page less its 16-byte head).
pub const MAX_TABLE_PAGE_ENTRIES: u32 = 8_190;

impl Geometry {
    /// Production geometry for a given record shape: 1,024-slot first segment, K as large as
    /// fits 256 MiB, 64 KiB first heap chunk doubling up to 256 MiB (or the largest upper-layer
    /// entry, if bigger), full 64 KiB table pages.
    pub fn for_layout(dims: u32, m: u32, max_layers: u32) -> Geometry {
        Geometry::for_slots(dims, m, max_layers, CodeKind::None)
    }

    /// [`Geometry::for_layout`] for a file that keeps `codes` (its segments hold more bytes
    /// per slot, so fewer slots fit 256 MiB).
    pub fn for_slots(dims: u32, m: u32, max_layers: u32, codes: CodeKind) -> Geometry {
        Geometry::for_file(dims, m, max_layers, VectorLayout::F32, codes)
    }

    /// [`Geometry::for_slots`] for vectors stored in `layout` (half precision takes half the
    /// bytes, so more slots fit 256 MiB).
    pub fn for_file(
        dims: u32,
        m: u32,
        max_layers: u32,
        layout: VectorLayout,
        codes: CodeKind,
    ) -> Geometry {
        let base = 10;
        let slot_bytes = SegmentLayout::slot_bytes_for(dims, m, layout, codes);
        let mut k = 0;
        while base + k < MAX_SEGMENT_LOG2
            && (1u64 << (base + k + 1)) * slot_bytes <= MAX_SEGMENT_BYTES
        {
            k += 1;
        }
        let heap_base = 16u32.max(min_heap_chunk_log2(m, max_layers));
        let heap_doublings = 28u32.saturating_sub(heap_base);
        Geometry {
            segment_base_log2: base,
            segment_doublings: k,
            heap_chunk_base_log2: heap_base,
            heap_chunk_doublings: heap_doublings,
            table_page_entries: MAX_TABLE_PAGE_ENTRIES,
        }
    }

    /// The unit-test geometry: 16-slot segments (two doublings, so both halves of the
    /// addressing formula run), 1 KiB heap chunks (more if an entry needs it), 4-entry table
    /// pages. Small files cross many regions.
    pub fn small_for_tests(m: u32, max_layers: u32) -> Geometry {
        Geometry {
            segment_base_log2: 4,
            segment_doublings: 2,
            heap_chunk_base_log2: 10u32.max(min_heap_chunk_log2(m, max_layers)),
            heap_chunk_doublings: 0,
            table_page_entries: 4,
        }
    }

    /// Checks the ranges every other function relies on; `None` when they hold, else what fails.
    ///
    /// The fields come from a file: every sum here is taken in u64, where two u32 never
    /// overflow.
    pub fn validate(&self, m: u32, max_layers: u32) -> Option<&'static str> {
        let sum = |a: u32, b: u32| u64::from(a) + u64::from(b);
        if sum(self.segment_base_log2, self.segment_doublings) > u64::from(MAX_SEGMENT_LOG2) {
            return Some("segment size exceeds 2^30 slots");
        }
        if self.heap_chunk_base_log2 < MIN_HEAP_CHUNK_LOG2
            || sum(self.heap_chunk_base_log2, self.heap_chunk_doublings)
                > u64::from(MAX_HEAP_CHUNK_LOG2)
        {
            return Some("heap chunk size out of range");
        }
        if self.heap_chunk_base_log2 < min_heap_chunk_log2(m, max_layers) {
            return Some("heap chunk too small for the largest upper-layer entry");
        }
        if self.table_page_entries == 0 || self.table_page_entries > MAX_TABLE_PAGE_ENTRIES {
            return Some("table page entries out of range");
        }
        None
    }

    /// Slots in the first segment, b.
    pub fn base_slots(&self) -> u64 {
        1u64 << self.segment_base_log2
    }

    /// Slots in every segment from K on, C.
    pub fn steady_slots(&self) -> u64 {
        1u64 << (self.segment_base_log2 + self.segment_doublings)
    }

    /// Slots in segment `k`.
    pub fn segment_slots(&self, k: u64) -> u64 {
        if k < u64::from(self.segment_doublings) {
            self.base_slots() << k
        } else {
            self.steady_slots()
        }
    }

    /// First slot of segment `k` (saturating: a segment count read from a file may be any
    /// number, and no slot lies that far).
    pub fn segment_first_slot(&self, k: u64) -> u64 {
        let doublings = u64::from(self.segment_doublings);
        if k <= doublings {
            // b + 2b + ... + 2^(k-1) b = b(2^k - 1)
            self.base_slots() * ((1u64 << k) - 1)
        } else {
            let big_b = self.steady_slots() - self.base_slots();
            (k - doublings)
                .saturating_mul(self.steady_slots())
                .saturating_add(big_b)
        }
    }

    /// Slot `s` → (segment, offset within segment), decision 1's formula.
    pub fn locate(&self, s: u64) -> (u64, u64) {
        let beta = self.segment_base_log2;
        let b = self.base_slots();
        let c = self.steady_slots();
        let big_b = c - b;
        if s < big_b {
            let k = u64::from(63 - (s + b).leading_zeros()) - u64::from(beta);
            (k, s + b - (1u64 << (k + u64::from(beta))))
        } else {
            let log2_c = beta + self.segment_doublings;
            (
                u64::from(self.segment_doublings) + ((s - big_b) >> log2_c),
                (s - big_b) & (c - 1),
            )
        }
    }

    /// How many segments hold slots `0..count`.
    pub fn segments_for(&self, count: u64) -> u64 {
        if count == 0 {
            0
        } else {
            self.locate(count - 1).0 + 1
        }
    }

    /// Bytes of heap chunk `k`.
    pub fn heap_chunk_bytes(&self, k: u64) -> u64 {
        let d = u64::from(self.heap_chunk_doublings).min(k);
        1u64 << (u64::from(self.heap_chunk_base_log2) + d)
    }

    /// Bytes of the metadata heap in use when its first free byte is at heap reference
    /// `next` (chunk heads, entries, and the unused tails of earlier chunks).
    pub fn metadata_heap_bytes(&self, next: u64) -> u64 {
        if next == 0 {
            return 0;
        }
        let (chunk, off) = super::record::split_heap_ref(next);
        (0..u64::from(chunk))
            .map(|k| self.metadata_chunk_bytes(k))
            .sum::<u64>()
            + u64::from(off)
    }

    /// Bytes of metadata-heap chunk `k`: as an upper-heap chunk, but never below
    /// [`super::metadata::MIN_CHUNK_BYTES`], so the largest entry fits any chunk.
    pub fn metadata_chunk_bytes(&self, k: u64) -> u64 {
        self.heap_chunk_bytes(k)
            .max(super::metadata::MIN_CHUNK_BYTES)
    }
}

/// Smallest heap chunk (log2 bytes) that holds the chunk head plus the largest upper entry.
pub fn min_heap_chunk_log2(m: u32, max_layers: u32) -> u32 {
    let need = record::HEAP_CHUNK_HEAD_BYTES
        + record::upper_entry_bytes(m, max_layers.saturating_sub(1).max(1));
    let mut log2 = MIN_HEAP_CHUNK_LOG2;
    while (1u64 << log2) < need && log2 < 63 {
        log2 += 1;
    }
    log2
}

/// Where the parallel arrays sit inside one segment: slot headers, vectors and level-0
/// records, then in a file with codes (write version 6, [`super::codes`]) aux records and
/// codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentLayout {
    /// Slots in this segment.
    pub slots: u64,
    /// Offset of the slot-header array (always 0).
    pub headers_at: u64,
    /// Offset of the vector array: `24·slots`.
    pub vectors_at: u64,
    /// The vector array's planes, as (offset, bytes per slot): one plane of whole vectors
    /// (the second plane's bytes 0), or for planar split halves the high halves' plane at
    /// `vectors_at` and the low halves' after it ([`VectorLayout::plane_bytes`]).
    pub vector_planes: [(u64, u64); 2],
    /// Offset of the level-0 record array: `(24 + 4·dims)·slots`.
    pub records_at: u64,
    /// Offset of the aux array (ε and ‖v‖ per slot): `(24 + 4·dims + 8 + 8M)·slots`; equal
    /// to `bytes` without codes.
    pub aux_at: u64,
    /// Offset of the code array: `aux_at + 8·slots`.
    pub codes_at: u64,
    /// Bytes of one code (0 without codes).
    pub code_bytes: u64,
    /// Bytes the arrays take: `(24 + 4·dims + 8 + 8M)·slots`, plus `(8 + code_bytes)·slots`
    /// with codes.
    pub bytes: u64,
}

impl SegmentLayout {
    /// Bytes one slot takes across the three arrays of a file without codes.
    pub fn slot_bytes(dims: u32, m: u32) -> u64 {
        record::SLOT_HEADER_BYTES + 4 * u64::from(dims) + record::level0_record_bytes(m)
    }

    /// Bytes one slot takes across every array of a file keeping `codes`.
    pub fn slot_bytes_with(dims: u32, m: u32, codes: CodeKind) -> u64 {
        SegmentLayout::slot_bytes(dims, m) + codes.slot_bytes(dims)
    }

    /// Bytes one slot takes across every array of a file storing vectors in `layout` and
    /// keeping `codes`.
    pub fn slot_bytes_for(dims: u32, m: u32, layout: VectorLayout, codes: CodeKind) -> u64 {
        record::SLOT_HEADER_BYTES
            + layout.vector_bytes(dims)
            + record::level0_record_bytes(m)
            + codes.slot_bytes(dims)
    }

    /// The layout of a segment of `slots` slots in a file without codes.
    pub fn new(slots: u64, dims: u32, m: u32) -> SegmentLayout {
        SegmentLayout::with_codes(slots, dims, m, CodeKind::None)
    }

    /// The layout of a segment of `slots` slots in a file keeping `codes` (4-byte values).
    pub fn with_codes(slots: u64, dims: u32, m: u32, codes: CodeKind) -> SegmentLayout {
        SegmentLayout::of(slots, dims, m, VectorLayout::F32, codes)
    }

    /// The layout of a segment of `slots` slots in a file storing vectors in `layout` and
    /// keeping `codes`: vectors take [`VectorLayout::vector_bytes`] each.
    pub fn of(
        slots: u64,
        dims: u32,
        m: u32,
        layout: VectorLayout,
        codes: CodeKind,
    ) -> SegmentLayout {
        let vectors_at = record::SLOT_HEADER_BYTES * slots;
        let [high, low] = layout.plane_bytes(dims);
        let vector_planes = [(vectors_at, high), (vectors_at + high * slots, low)];
        let records_at = vectors_at + layout.vector_bytes(dims) * slots;
        let aux_at = records_at + record::level0_record_bytes(m) * slots;
        let code_bytes = codes.code_bytes(dims);
        let (codes_at, bytes) = if code_bytes == 0 {
            (aux_at, aux_at)
        } else {
            let codes_at = aux_at + AUX_BYTES * slots;
            (codes_at, codes_at + code_bytes * slots)
        };
        SegmentLayout {
            slots,
            headers_at: 0,
            vectors_at,
            vector_planes,
            records_at,
            aux_at,
            codes_at,
            code_bytes,
            bytes,
        }
    }

    /// Where slot `off`'s vector bytes lie in the segment, as (offset, length) for each
    /// plane: its [`super::vector::encode`]d bytes cut in [`VectorLayout::plane_bytes`] parts
    /// (one part, the second of length 0, in every layout but planar split halves).
    #[inline]
    pub fn vector_parts(&self, off: u64) -> [(u64, u64); 2] {
        self.vector_planes.map(|(at, each)| (at + off * each, each))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometries() -> Vec<Geometry> {
        let mut v = vec![Geometry::small_for_tests(16, 16)];
        for (base, k) in [
            (0, 0),
            (0, 3),
            (2, 1),
            (4, 0),
            (4, 5),
            (10, 8),
            (10, 0),
            (3, 7),
        ] {
            v.push(Geometry {
                segment_base_log2: base,
                segment_doublings: k,
                heap_chunk_base_log2: 10,
                heap_chunk_doublings: 0,
                table_page_entries: 4,
            });
        }
        for dims in [1, 3, 96, 128, 384, 1536, 4096] {
            v.push(Geometry::for_layout(dims, 16, 16));
        }
        v
    }

    #[test]
    fn addressing_matches_brute_force_enumeration() {
        for g in geometries() {
            let mut segment = 0u64;
            let mut offset = 0u64;
            let limit = (g.segment_first_slot(u64::from(g.segment_doublings) + 3)).min(300_000);
            for s in 0..limit {
                assert_eq!(g.locate(s), (segment, offset), "slot {s} in {g:?}");
                assert_eq!(g.segment_first_slot(segment) + offset, s);
                offset += 1;
                if offset == g.segment_slots(segment) {
                    segment += 1;
                    offset = 0;
                }
            }
        }
    }

    #[test]
    fn addressing_holds_at_the_top_of_the_u32_range() {
        for g in geometries() {
            for s in [u64::from(u32::MAX) - 1, u64::from(u32::MAX), 1 << 31] {
                let (k, off) = g.locate(s);
                assert!(off < g.segment_slots(k));
                assert_eq!(g.segment_first_slot(k) + off, s, "{g:?}");
            }
        }
    }

    #[test]
    fn doubling_stops_at_the_largest_segment_under_256_mib() {
        // ADR figures: 262,144 slots (176 MB) at 128 dims, 32,768 (207 MB) at 1,536, M = 16.
        assert_eq!(Geometry::for_layout(128, 16, 16).steady_slots(), 262_144);
        assert_eq!(Geometry::for_layout(1536, 16, 16).steady_slots(), 32_768);
        for dims in [1, 7, 128, 384, 768, 1536, 3072] {
            let g = Geometry::for_layout(dims, 16, 16);
            let bytes = g.steady_slots() * SegmentLayout::slot_bytes(dims, 16);
            assert!(bytes <= MAX_SEGMENT_BYTES);
            assert!(
                bytes * 2 > MAX_SEGMENT_BYTES
                    || g.segment_base_log2 + g.segment_doublings == MAX_SEGMENT_LOG2
            );
            assert_eq!(g.validate(16, 16), None);
        }
    }

    #[test]
    fn segments_for_counts() {
        let g = Geometry::small_for_tests(16, 16);
        assert_eq!(g.segments_for(0), 0);
        assert_eq!(g.segments_for(1), 1);
        assert_eq!(g.segments_for(16), 1);
        assert_eq!(g.segments_for(17), 2);
        assert_eq!(g.segments_for(16 + 32 + 64), 3);
        assert_eq!(g.segments_for(16 + 32 + 64 + 1), 4);
    }

    #[test]
    fn segment_layout_is_three_parallel_arrays() {
        let l = SegmentLayout::new(16, 3, 16);
        assert_eq!(l.vectors_at, 16 * 24);
        assert_eq!(l.records_at, 16 * 24 + 16 * 12);
        assert_eq!(l.bytes, 16 * (24 + 12 + 136));
        assert_eq!(
            l.vector_parts(5),
            [(16 * 24 + 5 * 12, 12), (16 * 24 + 16 * 12, 0)]
        );
    }

    /// Planar split halves: the same arrays, the vector array in a high plane then a low
    /// one, slot `i`'s halves at the same index of each.
    #[test]
    fn planar_vectors_keep_high_halves_apart_from_low_halves() {
        let l = SegmentLayout::of(16, 3, 16, VectorLayout::SplitPlanar, CodeKind::None);
        assert_eq!(l, {
            let mut side = SegmentLayout::of(16, 3, 16, VectorLayout::SplitHalves, CodeKind::None);
            side.vector_planes = l.vector_planes;
            side
        });
        let v = 16 * 24;
        assert_eq!(l.vector_parts(0), [(v, 6), (v + 16 * 6, 6)]);
        assert_eq!(
            l.vector_parts(15),
            [(v + 15 * 6, 6), (v + 16 * 6 + 15 * 6, 6)]
        );
        assert_eq!(l.vector_parts(15)[1].0 + 6, l.records_at);
    }

    #[test]
    fn heap_chunks_double_then_stay() {
        let g = Geometry::for_layout(128, 16, 16);
        assert_eq!(g.heap_chunk_bytes(0), 64 * 1024);
        assert_eq!(g.heap_chunk_bytes(1), 128 * 1024);
        assert_eq!(g.heap_chunk_bytes(100), 256 * 1024 * 1024);
        let t = Geometry::small_for_tests(8, 16);
        assert_eq!(t.heap_chunk_bytes(0), 1024);
        assert_eq!(t.heap_chunk_bytes(9), 1024);
        // M = 16 with 15 upper layers needs 8 + 4·16·15 = 968 bytes plus the chunk head.
        assert!(Geometry::small_for_tests(32, 16).heap_chunk_bytes(0) >= 16 + 8 + 4 * 32 * 15);
    }
}
