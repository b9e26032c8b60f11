//! Vector layouts: how a slot's `4 · dims` vector bytes hold its f32 values.
//!
//! Format 3 stores each value as a little-endian f32 ([`VectorLayout::F32`]). Format 4 splits
//! the same bits in two halves ([`VectorLayout::SplitHalves`]): first the high 16 bits of every
//! value (sign, exponent and 7 mantissa bits: a bfloat16 truncation of it), as `dims`
//! little-endian u16, then the low 16 bits of every value, as `dims` little-endian u16. Both
//! layouts take the same bytes and hold the same values bit for bit; the split one lets a
//! search read half of each vector while it walks the graph, and the whole vector only for
//! the results it returns.
//!
//! Invariant: [`encode`] then [`VectorRef::decode_into`] over the mapped bytes gives back `v`
//! bit for bit, for every f32 (NaN payloads included), in both layouts.

/// How vector values are laid out in a slot's vector bytes (header field `vector_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VectorLayout {
    /// Format 3: `dims` little-endian f32.
    F32,
    /// Format 4: `dims` little-endian u16 high halves, then `dims` u16 low halves.
    #[default]
    SplitHalves,
}

/// Header code of [`VectorLayout::F32`].
pub const LAYOUT_F32: u32 = 0;
/// Header code of [`VectorLayout::SplitHalves`].
pub const LAYOUT_SPLIT_HALVES: u32 = 1;

impl VectorLayout {
    /// The header code.
    pub fn code(self) -> u32 {
        match self {
            VectorLayout::F32 => LAYOUT_F32,
            VectorLayout::SplitHalves => LAYOUT_SPLIT_HALVES,
        }
    }

    /// The layout of a header code, `None` for a code this release doesn't know.
    pub fn from_code(code: u32) -> Option<VectorLayout> {
        match code {
            LAYOUT_F32 => Some(VectorLayout::F32),
            LAYOUT_SPLIT_HALVES => Some(VectorLayout::SplitHalves),
            _ => None,
        }
    }

    /// The oldest read version that knows this layout (format 3 knows only f32).
    pub fn read_version(self) -> u32 {
        match self {
            VectorLayout::F32 => 3,
            VectorLayout::SplitHalves => 4,
        }
    }
}

/// A stored vector as mapped from a file: its values in the file's layout (the slices point
/// into a mapping, so a search reads only the bytes it needs).
#[derive(Clone, Copy, Debug)]
pub enum VectorRef<'a> {
    /// [`VectorLayout::F32`]: `dims` values.
    F32(&'a [f32]),
    /// [`VectorLayout::SplitHalves`]: `2 · dims` halves, the high ones first.
    Split(&'a [u16]),
    /// The same, in a file whose searches must walk by exact distances (its data is too fine
    /// for high halves; header flag `exact_walk`).
    SplitExact(&'a [u16]),
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
            VectorRef::Split(h) | VectorRef::SplitExact(h) => h.len() / 2,
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
            VectorRef::Split(h) | VectorRef::SplitExact(h) => h.as_ptr().cast(),
            VectorRef::Code(c, _) => c.as_ptr(),
        }
    }

    /// Bytes a search reads while it walks the graph: all of an f32 vector, the high halves
    /// of a split one (all of it when walked exactly).
    #[inline]
    pub fn walk_bytes(&self) -> usize {
        match self {
            VectorRef::F32(v) => 4 * v.len(),
            VectorRef::Split(h) => h.len(),
            VectorRef::SplitExact(h) => 2 * h.len(),
            VectorRef::Code(c, _) => c.len(),
        }
    }

    /// The exact values into `out`, resized to `dims` (for a code, the values it stands for).
    pub fn decode_into(&self, out: &mut Vec<f32>) {
        out.resize(self.dims(), 0.0);
        match self {
            VectorRef::F32(v) => out.copy_from_slice(v),
            VectorRef::Split(h) | VectorRef::SplitExact(h) => {
                let (high, low) = h.split_at(out.len());
                for ((o, &hi), &lo) in out.iter_mut().zip(high).zip(low) {
                    *o = join(hi, lo);
                }
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

/// Writes `v` in `layout` into `out` (exactly `4 · v.len()` bytes).
///
/// # Panics
/// If `out.len() != 4 * v.len()` (a caller's bug, never file contents).
pub fn encode(layout: VectorLayout, v: &[f32], out: &mut [u8]) {
    assert_eq!(out.len(), 4 * v.len(), "vector byte length");
    match layout {
        VectorLayout::F32 => {
            for (o, x) in out.chunks_exact_mut(4).zip(v) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        VectorLayout::SplitHalves => {
            let (high, low) = out.split_at_mut(2 * v.len());
            for ((h, l), x) in high.chunks_exact_mut(2).zip(low.chunks_exact_mut(2)).zip(v) {
                let bits = x.to_bits();
                h.copy_from_slice(&((bits >> 16) as u16).to_le_bytes());
                l.copy_from_slice(&(bits as u16).to_le_bytes());
            }
        }
    }
}

/// Appends to `out` the values of a vector stored in `layout` as `bytes` (4 · dims of them,
/// as [`encode`] wrote them): the inverse of [`encode`], for vectors read into a buffer
/// rather than lent from a mapping. A trailing partial value (a length not a multiple of 4)
/// is ignored.
pub fn decode_bytes(layout: VectorLayout, bytes: &[u8], out: &mut Vec<f32>) {
    let dims = bytes.len() / 4;
    match layout {
        VectorLayout::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        VectorLayout::SplitHalves => {
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
        for layout in [VectorLayout::F32, VectorLayout::SplitHalves] {
            let mut bytes = vec![0u8; 4 * v.len()];
            encode(layout, &v, &mut bytes);
            let mut out = vec![9.0];
            decode_bytes(layout, &bytes, &mut out);
            assert_eq!(out[0], 9.0, "appends");
            assert_eq!(&out[1..], &v[..], "{layout:?}");
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
                    VectorLayout::SplitHalves => VectorRef::Split(&words),
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
        for layout in [VectorLayout::F32, VectorLayout::SplitHalves] {
            assert_eq!(VectorLayout::from_code(layout.code()), Some(layout));
        }
        assert_eq!(VectorLayout::from_code(2), None);
    }
}
