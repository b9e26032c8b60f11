//! Vector layouts: how a slot's vector bytes ([`VectorLayout::vector_bytes`]) hold its values.
//!
//! Format 3 stores each value as a little-endian f32 ([`VectorLayout::F32`]). Format 4 splits
//! the same bits in two halves ([`VectorLayout::SplitHalves`]): first the high 16 bits of every
//! value (sign, exponent and 7 mantissa bits: a bfloat16 truncation of it), as `dims`
//! little-endian u16, then the low 16 bits of every value, as `dims` little-endian u16. Both
//! layouts take `4 · dims` bytes and hold the same values bit for bit; the split one lets a
//! search read half of each vector while it walks the graph, and the whole vector only for
//! the results it returns. Half precision ([`VectorLayout::F16`], read version 5) stores each
//! value as an IEEE 754 binary16 (`dims` little-endian u16, padded to a multiple of 4 bytes
//! with a zero half): half the bytes, each value rounded to nearest (ties to even) when it is
//! stored; the stored halves are the vector from then on. Planar split halves
//! ([`VectorLayout::SplitPlanar`], read version 6, the default) hold the same halves as the
//! split layout but not side by side: a segment keeps every slot's high halves in one plane
//! and every slot's low halves in a second plane after it
//! ([`super::geometry::SegmentLayout::vector_parts`]), so the bytes a walk reads lie
//! `2 · dims` apart instead of `4 · dims` (at 128 dimensions this halves the time a walk
//! waits for memory: docs/decisions/0009).
//!
//! Invariant: [`encode`] then [`VectorRef::decode_into`] over the mapped bytes gives back `v`
//! bit for bit, for every f32 (NaN payloads included), in the f32 and split layouts; in F16,
//! every value rounded to the nearest half ([`to_f16`]), and decoding again gives the same.

/// How vector values are laid out in a slot's vector bytes (header field `vector_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VectorLayout {
    /// Format 3: `dims` little-endian f32.
    F32,
    /// Format 4: `dims` little-endian u16 high halves, then `dims` u16 low halves.
    SplitHalves,
    /// Half precision (read version 5): `dims` little-endian IEEE binary16, padded to a
    /// multiple of 4 bytes.
    F16,
    /// Planar split halves (read version 6): the split layout's `dims` high halves in a
    /// segment's high plane, its `dims` low halves in the low plane.
    #[default]
    SplitPlanar,
}

/// Header code of [`VectorLayout::F32`].
pub const LAYOUT_F32: u32 = 0;
/// Header code of [`VectorLayout::SplitHalves`].
pub const LAYOUT_SPLIT_HALVES: u32 = 1;
/// Header code of [`VectorLayout::F16`].
pub const LAYOUT_F16: u32 = 2;
/// Header code of [`VectorLayout::SplitPlanar`].
pub const LAYOUT_SPLIT_PLANAR: u32 = 3;

/// The largest magnitude a finite f32 may have to be stored in half precision: from 65,520
/// on it rounds to infinity (the largest half is 65,504).
pub const F16_LIMIT: f32 = 65_520.0;

impl VectorLayout {
    /// The header code.
    pub fn code(self) -> u32 {
        match self {
            VectorLayout::F32 => LAYOUT_F32,
            VectorLayout::SplitHalves => LAYOUT_SPLIT_HALVES,
            VectorLayout::F16 => LAYOUT_F16,
            VectorLayout::SplitPlanar => LAYOUT_SPLIT_PLANAR,
        }
    }

    /// The layout of a header code, `None` for a code this release doesn't know.
    pub fn from_code(code: u32) -> Option<VectorLayout> {
        match code {
            LAYOUT_F32 => Some(VectorLayout::F32),
            LAYOUT_SPLIT_HALVES => Some(VectorLayout::SplitHalves),
            LAYOUT_F16 => Some(VectorLayout::F16),
            LAYOUT_SPLIT_PLANAR => Some(VectorLayout::SplitPlanar),
            _ => None,
        }
    }

    /// The oldest read version that knows this layout (format 3 knows only f32, format 4
    /// split halves too; half precision needs read version 5: a release before it would take
    /// the halves for f32 values; planar split halves 6: a release before it would take two
    /// slots' high halves for one slot's vector).
    pub fn read_version(self) -> u32 {
        match self {
            VectorLayout::F32 => 3,
            VectorLayout::SplitHalves => 4,
            VectorLayout::F16 => 5,
            VectorLayout::SplitPlanar => 6,
        }
    }

    /// The layout's name: `f32`, `split_halves`, `f16` or `split_planar` (as `chassis info
    /// --json` shows it).
    pub fn name(self) -> &'static str {
        match self {
            VectorLayout::F32 => "f32",
            VectorLayout::SplitHalves => "split_halves",
            VectorLayout::F16 => "f16",
            VectorLayout::SplitPlanar => "split_planar",
        }
    }

    /// The layout a new file keeping `codes` stores in when this one is asked for: planar
    /// split halves become side by side in a file with codes. Its walk reads codes, never
    /// high halves, and ranking reads whole vectors, whose halves side by side lie in one
    /// page: a file larger than memory reads each ranked vector once, not twice (300k x 384
    /// int4 under a quarter cap: 51% and 70% of uncapped QPS side by side, 29% and 50%
    /// planar; docs/decisions/0009). A compaction that keeps a file's layout and codes keeps
    /// its layout as it is.
    pub fn for_codes(self, codes: super::codes::CodeKind) -> VectorLayout {
        match self {
            VectorLayout::SplitPlanar if codes != super::codes::CodeKind::None => {
                VectorLayout::SplitHalves
            }
            l => l,
        }
    }

    /// Whether vectors are stored as split halves (side by side or planar): a walk reads
    /// their high halves, and header flag `exact_walk` means something.
    pub fn is_split(self) -> bool {
        matches!(self, VectorLayout::SplitHalves | VectorLayout::SplitPlanar)
    }

    /// How many bytes of a vector's [`encode`]d bytes lie in each plane of a segment's
    /// vector array: all of them in one plane, or for planar split halves the first
    /// `2 · dims` (the high halves) in the first plane and the rest in the second.
    pub fn plane_bytes(self, dims: u32) -> [u64; 2] {
        match self {
            VectorLayout::SplitPlanar => [2 * u64::from(dims), 2 * u64::from(dims)],
            l => [l.vector_bytes(dims), 0],
        }
    }

    /// Bytes one vector of `dims` values takes: `4 · dims`, or `4 · ⌈dims / 2⌉` in half
    /// precision (every vector starts 4-aligned).
    pub fn vector_bytes(self, dims: u32) -> u64 {
        match self {
            VectorLayout::F32 | VectorLayout::SplitHalves | VectorLayout::SplitPlanar => {
                4 * u64::from(dims)
            }
            VectorLayout::F16 => 4 * u64::from(dims).div_ceil(2),
        }
    }

    /// Whether the values stored are the values given (half precision rounds them).
    pub fn exact(self) -> bool {
        self != VectorLayout::F16
    }
}

/// The IEEE binary16 nearest to `x` (ties to even), as its bits.
#[inline]
pub fn to_f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The f32 a binary16 stands for (exact: every half is an f32).
#[inline]
pub fn from_f16(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// A split vector's halves as mapped from a file: `dims` high halves and `dims` low halves,
/// side by side ([`VectorLayout::SplitHalves`]) or each in its plane
/// ([`VectorLayout::SplitPlanar`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Halves<'a> {
    /// Bits 31–16 of each value: what a walk reads.
    pub high: &'a [u16],
    /// Bits 15–0 of each value.
    pub low: &'a [u16],
}

impl<'a> Halves<'a> {
    /// The halves of a vector stored side by side: `2 · dims` halves, the high ones first.
    pub fn side_by_side(h: &'a [u16]) -> Halves<'a> {
        let (high, low) = h.split_at(h.len() / 2);
        Halves { high, low }
    }

    /// Whether the low halves follow the high halves in memory ([`VectorLayout::SplitHalves`]),
    /// rather than lying in a plane of their own.
    #[inline]
    pub fn is_side_by_side(&self) -> bool {
        std::ptr::eq(self.high.as_ptr_range().end, self.low.as_ptr())
    }
}

/// A stored vector as mapped from a file: its values in the file's layout (the slices point
/// into a mapping, so a search reads only the bytes it needs).
#[derive(Clone, Copy, Debug)]
pub enum VectorRef<'a> {
    /// [`VectorLayout::F32`]: `dims` values.
    F32(&'a [f32]),
    /// [`VectorLayout::SplitHalves`] or [`VectorLayout::SplitPlanar`]: the vector's halves.
    Split(Halves<'a>),
    /// The same, in a file whose searches must walk by exact distances (its data is too fine
    /// for high halves; header flag `exact_walk`).
    SplitExact(Halves<'a>),
    /// [`VectorLayout::F16`]: `dims` binary16 values (the padding half is not in the slice).
    F16(&'a [u16]),
    /// A vector's code ([`super::codes`]; an int4 one packed, two values to a byte) and the
    /// codebook it was coded with: what a
    /// search walks by in a file with codes. It stands for an approximation only: the exact
    /// vector is read separately ([`VectorRef::decode_into`] gives the approximation).
    Code(&'a [u8], &'a super::codes::Codebook),
}

impl<'a> VectorRef<'a> {
    /// Dimensions.
    #[inline]
    pub fn dims(&self) -> usize {
        match self {
            VectorRef::F32(v) => v.len(),
            VectorRef::Split(h) | VectorRef::SplitExact(h) => h.high.len(),
            VectorRef::F16(h) => h.len(),
            VectorRef::Code(_, book) => book.dims(),
        }
    }

    /// Whether this is a code (an approximation, ranked exactly from the vector itself).
    #[inline]
    pub fn is_code(&self) -> bool {
        matches!(self, VectorRef::Code(..))
    }

    /// The first byte, for prefetching.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            VectorRef::F32(v) => v.as_ptr().cast(),
            VectorRef::Split(h) | VectorRef::SplitExact(h) => h.high.as_ptr().cast(),
            VectorRef::F16(h) => h.as_ptr().cast(),
            VectorRef::Code(c, _) => c.as_ptr(),
        }
    }

    /// Bytes a search reads while it walks the graph: all of an f32 vector, the high halves
    /// of a split one (all of it when walked exactly).
    #[inline]
    pub fn walk_bytes(&self) -> usize {
        match self {
            VectorRef::F32(v) => 4 * v.len(),
            VectorRef::Split(h) => 2 * h.high.len(),
            VectorRef::SplitExact(h) => 4 * h.high.len(),
            VectorRef::F16(h) => 2 * h.len(),
            VectorRef::Code(c, _) => c.len(),
        }
    }

    /// Where the stored bytes lie, as (first byte, length) pairs: one range, or a split
    /// vector's high halves then its low halves (the second empty for the others).
    #[inline]
    pub fn stored_parts(&self) -> [(*const u8, usize); 2] {
        let none = (std::ptr::null(), 0);
        match self {
            VectorRef::F32(v) => [(v.as_ptr().cast(), 4 * v.len()), none],
            VectorRef::Split(h) | VectorRef::SplitExact(h) => [
                (h.high.as_ptr().cast(), 2 * h.high.len()),
                (h.low.as_ptr().cast(), 2 * h.low.len()),
            ],
            VectorRef::F16(h) => [(h.as_ptr().cast(), 2 * h.len()), none],
            VectorRef::Code(c, _) => [(c.as_ptr(), c.len()), none],
        }
    }

    /// The exact values into `out`, resized to `dims` (for a code, the values it stands for).
    pub fn decode_into(&self, out: &mut Vec<f32>) {
        out.resize(self.dims(), 0.0);
        match self {
            VectorRef::F32(v) => out.copy_from_slice(v),
            VectorRef::Split(h) | VectorRef::SplitExact(h) => {
                for ((o, &hi), &lo) in out.iter_mut().zip(h.high).zip(h.low) {
                    *o = join(hi, lo);
                }
            }
            VectorRef::F16(h) => {
                // Eight at a time where the CPU converts half floats (F16C, detected at run
                // time); one by one otherwise. The same values either way: every half is an f32.
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                h.reinterpret_cast::<half::f16>().convert_to_f32_slice(out);
            }
            VectorRef::Code(c, book) => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = book.value(j, book.code_at(c, j));
                }
            }
        }
    }

    /// The exact values.
    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = Vec::new();
        self.decode_into(&mut v);
        v
    }
}

/// Writes `v` in `layout` into `out` (exactly `layout.vector_bytes(v.len())` bytes). In half
/// precision each value is rounded to the nearest half (the caller refused values that would
/// round to infinity) and the padding half is zero. Planar split halves are encoded as the
/// split layout's (high halves, then low halves): a segment's planes take the two parts
/// ([`VectorLayout::plane_bytes`]).
///
/// # Panics
/// If `out` has another length (a caller's bug, never file contents).
pub fn encode(layout: VectorLayout, v: &[f32], out: &mut [u8]) {
    assert_eq!(
        out.len() as u64,
        layout.vector_bytes(v.len() as u32),
        "vector byte length"
    );
    match layout {
        VectorLayout::F16 => {
            out.fill(0);
            for (o, x) in out.chunks_exact_mut(2).zip(v) {
                o.copy_from_slice(&to_f16(*x).to_le_bytes());
            }
        }
        VectorLayout::F32 => {
            for (o, x) in out.chunks_exact_mut(4).zip(v) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        VectorLayout::SplitHalves | VectorLayout::SplitPlanar => {
            let (high, low) = out.split_at_mut(2 * v.len());
            for ((h, l), x) in high.chunks_exact_mut(2).zip(low.chunks_exact_mut(2)).zip(v) {
                let bits = x.to_bits();
                h.copy_from_slice(&((bits >> 16) as u16).to_le_bytes());
                l.copy_from_slice(&(bits as u16).to_le_bytes());
            }
        }
    }
}

/// Appends to `out` the values of a vector stored in `layout` as `bytes` (as [`encode`] wrote
/// them, a planar vector's two parts joined: 4 · dims of them, or in half precision 2 · dims and the padding), the inverse of
/// [`encode`], for vectors read into a buffer rather than lent from a mapping. A trailing
/// partial value (a length not a multiple of 4) is ignored; in half precision `dims` says
/// how many values there are (the padding half is not one).
pub fn decode_bytes_of(layout: VectorLayout, dims: usize, bytes: &[u8], out: &mut Vec<f32>) {
    if layout == VectorLayout::F16 {
        out.extend(
            bytes
                .chunks_exact(2)
                .take(dims)
                .map(|b| from_f16(u16::from_le_bytes([b[0], b[1]]))),
        );
        return;
    }
    decode_bytes(layout, bytes, out)
}

/// [`decode_bytes_of`] for the f32 and split layouts, whose byte length gives `dims`.
pub fn decode_bytes(layout: VectorLayout, bytes: &[u8], out: &mut Vec<f32>) {
    let dims = bytes.len() / 4;
    match layout {
        VectorLayout::F16 => decode_bytes_of(layout, bytes.len() / 2, bytes, out),
        VectorLayout::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        VectorLayout::SplitHalves | VectorLayout::SplitPlanar => {
            let (high, low) = bytes[..4 * dims].split_at(2 * dims);
            out.extend(high.chunks_exact(2).zip(low.chunks_exact(2)).map(|(h, l)| {
                join(
                    u16::from_le_bytes([h[0], h[1]]),
                    u16::from_le_bytes([l[0], l[1]]),
                )
            }));
        }
    }
}

/// The f32 whose bits are `high` then `low`.
#[inline]
pub fn join(high: u16, low: u16) -> f32 {
    f32::from_bits((u32::from(high) << 16) | u32::from(low))
}

/// How far a high half's value ([`high_value`]) may be from the value it was cut from,
/// relative to itself: truncation keeps the sign, the exponent and the top 7 fraction bits,
/// so `|x − high_value(x)| < 2⁻⁷·|high_value(x)| ≤ 2⁻⁷·|x|` (for zero and subnormals the gap
/// is below 2⁻¹³³, absolute), and `|high_value(x)| ≤ |x|`.
pub const HIGH_HALF_REL_ERROR: f32 = 1.0 / 128.0;

/// The value a high half stands for while a search walks the graph (its low bits zero: the
/// bfloat16 truncation toward zero, within [`HIGH_HALF_REL_ERROR`] of the value relatively).
#[inline]
pub fn high_value(high: u16) -> f32 {
    f32::from_bits(u32::from(high) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Fails if bytes read back from a file decode to other values than were encoded, in
    /// either layout (the split layout's halves are not in value order: a batch read that
    /// took them for f32s ranked by garbage).
    #[test]
    fn decode_bytes_inverts_encode_in_every_layout() {
        let v: Vec<f32> = (0..37).map(|i| (i as f32 - 18.5) * 0.731 + 1e-3).collect();
        for layout in [
            VectorLayout::F32,
            VectorLayout::SplitHalves,
            VectorLayout::SplitPlanar,
        ] {
            let mut bytes = vec![0u8; 4 * v.len()];
            encode(layout, &v, &mut bytes);
            let mut out = vec![9.0];
            decode_bytes(layout, &bytes, &mut out);
            assert_eq!(out[0], 9.0, "appends");
            assert_eq!(&out[1..], &v[..], "{layout:?}");
        }
    }

    /// Fails if decoding a half-float vector (eight at a time where the CPU converts them)
    /// gives other values than converting each half alone, for every one of the 65,536
    /// halves, at lengths that leave every tail (NaNs only need to stay NaNs).
    #[test]
    fn half_floats_decode_as_each_converts_alone() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut out = Vec::new();
        for len in [all.len(), 1, 7, 8, 9, 383] {
            let h = &all[all.len() - len..];
            VectorRef::F16(h).decode_into(&mut out);
            assert_eq!(out.len(), len);
            for (&x, &y) in h.iter().zip(&out) {
                let one = from_f16(x);
                assert!(
                    one.to_bits() == y.to_bits() || (one.is_nan() && y.is_nan()),
                    "half {x:#06x}: {y} against {one}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn both_layouts_round_trip_every_bit(bits in proptest::collection::vec(any::<u32>(), 0..40)) {
            let v: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
            for layout in [VectorLayout::F32, VectorLayout::SplitHalves] {
                let mut bytes = vec![0u8; 4 * v.len()];
                encode(layout, &v, &mut bytes);
                // The view a mapped region lends: little-endian words read in place.
                let words: Vec<u16> = bytes
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                let floats: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                let view = match layout {
                    VectorLayout::F32 => VectorRef::F32(&floats),
                    _ => VectorRef::Split(Halves::side_by_side(&words)),
                };
                let mut back = Vec::new();
                view.decode_into(&mut back);
                let back: Vec<u32> = back.iter().map(|x| x.to_bits()).collect();
                prop_assert_eq!(&back, &bits);
            }
        }
    }

    #[test]
    fn split_halves_put_every_high_half_first() {
        let v = [1.5f32, -2.0, f32::from_bits(0x1234_5678)];
        let mut b = [0u8; 12];
        encode(VectorLayout::SplitHalves, &v, &mut b);
        assert_eq!(&b[..6], &[0xC0, 0x3F, 0x00, 0xC0, 0x34, 0x12]);
        assert_eq!(&b[6..], &[0, 0, 0, 0, 0x78, 0x56]);
        assert_eq!(high_value(0x3FC0), 1.5);
        for layout in [
            VectorLayout::F32,
            VectorLayout::SplitHalves,
            VectorLayout::F16,
            VectorLayout::SplitPlanar,
        ] {
            assert_eq!(VectorLayout::from_code(layout.code()), Some(layout));
            let planes = layout.plane_bytes(5);
            assert_eq!(planes[0] + planes[1], layout.vector_bytes(5), "{layout:?}");
        }
        assert_eq!(VectorLayout::from_code(4), None);
        assert_eq!(VectorLayout::SplitPlanar.plane_bytes(5), [10, 10]);
        assert_eq!(VectorLayout::default(), VectorLayout::SplitPlanar);
        use super::super::codes::CodeKind;
        assert_eq!(
            VectorLayout::SplitPlanar.for_codes(CodeKind::Int4),
            VectorLayout::SplitHalves
        );
        assert_eq!(
            VectorLayout::SplitPlanar.for_codes(CodeKind::None),
            VectorLayout::SplitPlanar
        );
        assert_eq!(
            VectorLayout::F16.for_codes(CodeKind::Int8),
            VectorLayout::F16
        );
    }

    /// Half precision: each value becomes the nearest binary16 (ties to even), the padding
    /// half of an odd count is zero, and reading back (in place or from bytes) gives exactly
    /// the rounded values.
    #[test]
    fn half_precision_rounds_to_nearest_and_reads_back_exactly() {
        let v = [1.0f32 / 3.0, 65_504.0, -0.0001, 2049.0, 2051.0];
        assert_eq!(VectorLayout::F16.vector_bytes(5), 12);
        let mut b = [0xAAu8; 12];
        encode(VectorLayout::F16, &v, &mut b);
        assert_eq!(&b[10..], &[0, 0], "padding");
        let halves: Vec<u16> = b[..10]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let back = VectorRef::F16(&halves).to_vec();
        // 2049 and 2051 sit halfway between halves 2 apart: ties go to the even mantissa.
        assert_eq!(
            back,
            vec![0.333_251_95, 65_504.0, -0.000_100_016_594, 2048.0, 2052.0]
        );
        let mut out = Vec::new();
        decode_bytes_of(VectorLayout::F16, 5, &b, &mut out);
        assert_eq!(out, back);
        for (x, y) in v.iter().zip(&back) {
            assert_eq!(from_f16(to_f16(*x)), *y);
        }
    }
}
