//! Quantized codes (write version 6): a small copy of every vector that searches walk the
//! graph by, derived from the vectors and never the only copy of anything.
//!
//! A file chooses its code kind when it is created or compacted (header field `codes`); this
//! release knows [`CodeKind::Int8`]: one byte per dimension, scalar quantization with a range
//! per dimension. The ranges are the **codebook**, trained once from the vectors a file holds
//! when it first has [`TRAIN_MIN`] of them, and written to a codebook region (named by the
//! header field `codebook`; 0 while untrained). Segments of a file with codes hold two more
//! parallel arrays after the level-0 records ([`super::geometry::SegmentLayout`]): per slot an
//! 8-byte **aux** record (the code's error ε = ‖v − v̂‖ and the vector's norm ‖v‖, two f32) and
//! the code itself (`dims` bytes, padded to a multiple of 4).
//!
//! With lo and s the codebook's per-dimension low end and step, value j of a vector is coded as
//! c = round((v − lo) / s) clamped to 0..=255 and stands for v̂ = lo + s·c. Nothing bounds how
//! far v̂ is from v for values outside the trained range (they are clamped), so the bound a
//! search uses is the code's own measured error ε, rounded up, which holds for every vector.
//!
//! Invariants: [`Codebook::decode`] never panics on any bytes (it returns `Corrupt`); for every
//! finite vector, [`Codebook::encode`] returns an ε with ‖v − v̂‖ ≤ ε, where v̂ is computed from
//! the code exactly as [`Codebook::value`] does.

use super::{put_u32, u32_at, u64_at};
use crate::error::{Error, Result};

/// What codes a file keeps beside its vectors (header field `codes`, write version 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CodeKind {
    /// No codes: searches walk by the vectors (their high halves in format 4).
    #[default]
    None,
    /// One byte per dimension, a trained range per dimension.
    Int8,
}

/// Header code of [`CodeKind::None`].
pub const CODES_NONE: u32 = 0;
/// Header code of [`CodeKind::Int8`].
pub const CODES_INT8: u32 = 1;

/// Vectors a file holds before its codebook is trained (fewer are searched by their vectors,
/// as in a file without codes).
pub const TRAIN_MIN: u64 = 1_000;

/// Most vectors a codebook is trained from (evenly spaced over the file's slots).
pub const TRAIN_SAMPLE: u64 = 20_000;

/// Bytes of a slot's aux record: ε then ‖v‖, two little-endian f32.
pub const AUX_BYTES: u64 = 8;

/// Magic at the start of a codebook region.
pub const CODEBOOK_MAGIC: [u8; 8] = *b"CHCODES\0";

impl CodeKind {
    /// The header code.
    pub fn code(self) -> u32 {
        match self {
            CodeKind::None => CODES_NONE,
            CodeKind::Int8 => CODES_INT8,
        }
    }

    /// The kind of a header code, `None` for one this release doesn't know.
    pub fn from_code(code: u32) -> Option<CodeKind> {
        match code {
            CODES_NONE => Some(CodeKind::None),
            CODES_INT8 => Some(CodeKind::Int8),
            _ => None,
        }
    }

    /// The name the CLI and the bindings use (`none`, `int8`).
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::None => "none",
            CodeKind::Int8 => "int8",
        }
    }

    /// The kind a name means.
    pub fn parse(s: &str) -> Option<CodeKind> {
        match s {
            "none" => Some(CodeKind::None),
            "int8" => Some(CodeKind::Int8),
            _ => None,
        }
    }

    /// Bytes of one code (0 without codes).
    pub fn code_bytes(self, dims: u32) -> u64 {
        match self {
            CodeKind::None => 0,
            CodeKind::Int8 => u64::from(dims).div_ceil(4) * 4,
        }
    }

    /// Bytes codes add to each slot of a segment (aux record and code; 0 without codes).
    pub fn slot_bytes(self, dims: u32) -> u64 {
        match self {
            CodeKind::None => 0,
            k => AUX_BYTES + k.code_bytes(dims),
        }
    }
}

/// Bytes of a codebook region's contents for `dims` dimensions: magic, kind, dims, lo and s
/// per dimension, checksum.
pub fn codebook_bytes(dims: u32) -> u64 {
    16 + 8 * u64::from(dims) + 8
}

/// The trained ranges of an int8 code: per dimension its low end and step.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    lo: Vec<f32>,
    step: Vec<f32>,
    /// ‖lo‖, rounded up: the kernels sum q·lo and q·s·c apart, so their rounding scales
    /// with it.
    lo_norm: f32,
}

impl Codebook {
    /// Trains on `sample` (vectors of `dims` values): each dimension's range is its smallest
    /// to its largest value there, in 255 steps. Non-finite values are left out; a dimension
    /// with no finite value gets range 0..0.
    pub fn train<'a>(dims: usize, sample: impl IntoIterator<Item = &'a [f32]>) -> Codebook {
        let mut lo = vec![f32::INFINITY; dims];
        let mut hi = vec![f32::NEG_INFINITY; dims];
        for v in sample {
            for ((l, h), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(v) {
                if x.is_finite() {
                    *l = l.min(x);
                    *h = h.max(x);
                }
            }
        }
        let step = lo
            .iter()
            .zip(&hi)
            .map(|(&l, &h)| {
                if l.is_finite() && h > l {
                    ((f64::from(h) - f64::from(l)) / 255.0) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let lo = lo
            .into_iter()
            .map(|l| if l.is_finite() { l } else { 0.0 })
            .collect();
        Codebook::new(lo, step)
    }

    fn new(lo: Vec<f32>, step: Vec<f32>) -> Codebook {
        let norm = lo.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>();
        Codebook {
            lo_norm: round_up(norm.sqrt()),
            lo,
            step,
        }
    }

    /// ‖lo‖ (rounded up).
    pub fn lo_norm(&self) -> f32 {
        self.lo_norm
    }

    /// Dimensions.
    pub fn dims(&self) -> usize {
        self.lo.len()
    }

    /// Per-dimension low ends.
    pub fn lo(&self) -> &[f32] {
        &self.lo
    }

    /// Per-dimension steps.
    pub fn step(&self) -> &[f32] {
        &self.step
    }

    /// The value code byte `c` stands for in dimension `j`: lo + s·c, as an f32 fused
    /// multiply-add (what every kernel computes).
    #[inline]
    pub fn value(&self, j: usize, c: u8) -> f32 {
        self.step[j].mul_add(f32::from(c), self.lo[j])
    }

    /// Codes `v` into `code` (at least `dims` bytes; padding left alone) and returns
    /// (ε, ‖v‖): ε ≥ ‖v − v̂‖ and ‖v‖, each computed in f64 and rounded up to f32 (∞ for a
    /// vector with a non-finite value, which no bound then skips).
    pub fn encode(&self, v: &[f32], code: &mut [u8]) -> (f32, f32) {
        let mut err = 0f64;
        let mut norm = 0f64;
        for (j, (&x, c)) in v.iter().zip(code.iter_mut()).enumerate() {
            let s = self.step[j];
            let q = if s > 0.0 {
                ((f64::from(x) - f64::from(self.lo[j])) / f64::from(s)).round()
            } else {
                0.0
            };
            // NaN casts to 0; the clamp keeps every other value in range.
            *c = q.clamp(0.0, 255.0) as u8;
            let d = f64::from(x) - f64::from(self.value(j, *c));
            err += d * d;
            norm += f64::from(x) * f64::from(x);
        }
        (round_up(err.sqrt()), round_up(norm.sqrt()))
    }

    /// The approximate vector a code stands for.
    pub fn decode_code(&self, code: &[u8]) -> Vec<f32> {
        code.iter()
            .take(self.dims())
            .enumerate()
            .map(|(j, &c)| self.value(j, c))
            .collect()
    }

    /// The codebook region's contents ([`codebook_bytes`] of them).
    pub fn encode_region(&self) -> Vec<u8> {
        let dims = self.dims() as u32;
        let mut b = Vec::with_capacity(codebook_bytes(dims) as usize);
        b.extend_from_slice(&CODEBOOK_MAGIC);
        b.extend_from_slice(&CODES_INT8.to_le_bytes());
        b.extend_from_slice(&dims.to_le_bytes());
        for x in self.lo.iter().chain(&self.step) {
            b.extend_from_slice(&x.to_le_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes a codebook region read at file offset `offset` for a file of `dims` dimensions.
    pub fn decode(b: &[u8], dims: u32, offset: u64) -> Result<Codebook> {
        let need = codebook_bytes(dims) as usize;
        if b.len() < need || b[..8] != CODEBOOK_MAGIC {
            return Err(Error::corrupt("codebook has no CHCODES magic", offset));
        }
        let body = &b[..need - 8];
        if xxhash_rust::xxh3::xxh3_64(body) != u64_at(b, need - 8) {
            return Err(Error::corrupt(
                "codebook checksum mismatch",
                offset + need as u64 - 8,
            ));
        }
        if u32_at(b, 8) != CODES_INT8 || u32_at(b, 12) != dims {
            return Err(Error::corrupt(
                "codebook kind or dimensions differ from the header's",
                offset + 8,
            ));
        }
        let f = |i: usize| f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let d = dims as usize;
        let lo: Vec<f32> = (0..d).map(|j| f(16 + 4 * j)).collect();
        let step: Vec<f32> = (0..d).map(|j| f(16 + 4 * (d + j))).collect();
        if lo.iter().chain(&step).any(|x| !x.is_finite()) || step.iter().any(|&s| s < 0.0) {
            return Err(Error::corrupt("codebook holds a non-finite range", offset));
        }
        Ok(Codebook::new(lo, step))
    }
}

/// Encodes a slot's aux record.
pub fn encode_aux(eps: f32, norm: f32) -> [u8; AUX_BYTES as usize] {
    let mut b = [0u8; AUX_BYTES as usize];
    b[..4].copy_from_slice(&eps.to_le_bytes());
    put_u32(&mut b, 4, norm.to_bits());
    b
}

/// The smallest f32 at or above `x` (∞ for NaN).
fn round_up(x: f64) -> f32 {
    if x.is_nan() {
        return f32::INFINITY;
    }
    let f = x as f32;
    if f64::from(f) < x {
        f.next_up()
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// ε bounds the code's error for vectors inside and outside the trained range.
        #[test]
        fn eps_bounds_the_error_of_every_code(
            train in proptest::collection::vec(proptest::collection::vec(-2.0f32..2.0, 6), 1..20),
            v in proptest::collection::vec(-5.0f32..5.0, 6),
        ) {
            let book = Codebook::train(6, train.iter().map(|v| v.as_slice()));
            let mut code = [0u8; 8];
            let (eps, norm) = book.encode(&v, &mut code);
            let back = book.decode_code(&code);
            let err: f64 = v.iter().zip(&back).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum::<f64>().sqrt();
            prop_assert!(err <= f64::from(eps));
            let n: f64 = v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>().sqrt();
            prop_assert!(n <= f64::from(norm));
        }

        /// Any bytes decode to a codebook or an error, never a panic.
        #[test]
        fn codebook_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = Codebook::decode(&b, 4, 0);
        }
    }

    #[test]
    fn a_codebook_round_trips_and_checks_itself() {
        let rows = [[0.0f32, 1.0, -1.0], [0.5, 3.0, -1.0]];
        let book = Codebook::train(3, rows.iter().map(|r| r.as_slice()));
        assert_eq!(book.lo(), &[0.0, 1.0, -1.0]);
        assert_eq!(book.step()[2], 0.0, "a constant dimension has no step");
        let b = book.encode_region();
        assert_eq!(b.len() as u64, codebook_bytes(3));
        assert_eq!(Codebook::decode(&b, 3, 0).unwrap(), book);
        assert!(Codebook::decode(&b, 4, 0).is_err());
        let mut bad = b.clone();
        bad[20] ^= 1;
        assert!(Codebook::decode(&bad, 3, 0).is_err());
        let mut code = [0u8; 4];
        let (eps, _) = book.encode(&[0.5, 3.0, -1.0], &mut code);
        assert_eq!(&code[..3], &[255, 255, 0]);
        assert!(eps < 1e-6);
        for k in [CodeKind::None, CodeKind::Int8] {
            assert_eq!(CodeKind::from_code(k.code()), Some(k));
            assert_eq!(CodeKind::parse(k.name()), Some(k));
        }
        assert_eq!(CodeKind::Int8.code_bytes(385), 388);
        assert_eq!(CodeKind::Int8.slot_bytes(384), 392);
    }
}
