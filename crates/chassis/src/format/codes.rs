//! Quantized codes (write version 6): a small copy of every vector that searches walk the
//! graph by, derived from the vectors and never the only copy of anything.
//!
//! A file chooses its code kind when it is created or compacted (header field `codes`); this
//! release knows [`CodeKind::Int8`]: one byte per dimension, scalar quantization with a range
//! per dimension in 255 steps, and [`CodeKind::Int4`] (write version 7): half a byte per
//! dimension, the same ranges in 15 steps, two dimensions to a byte (dimension 2i in the low
//! four bits of byte i, 2i + 1 in the high four). The ranges are the **codebook**, trained once from the vectors a file holds
//! when it first has [`TRAIN_MIN`] of them, and written to a codebook region (named by the
//! header field `codebook`; 0 while untrained). Segments of a file with codes hold two more
//! parallel arrays after the level-0 records ([`super::geometry::SegmentLayout`]): per slot an
//! 8-byte **aux** record (the code's error ε = ‖v − v̂‖ and the vector's norm ‖v‖, two f32) and
//! the code itself (`dims` bytes for int8, `dims / 2` rounded up for int4, padded to a multiple
//! of 4).
//!
//! With lo and s the codebook's per-dimension low end and step, value j of a vector is coded as
//! c = round((v − lo) / s) clamped to 0..=L (L = 255 for int8, 15 for int4) and stands for
//! v̂ = lo + s·c. Nothing bounds how
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
    /// Four bits per dimension, a trained range per dimension (write version 7). Its error is
    /// too large for the proved bound to spare any exact distance, so searches rank by a
    /// likely bound instead (`graph::Distance::code_likely_bound`: a measured margin, not a
    /// proof; docs/FORMAT.md, "Codes").
    Int4,
}

/// Header code of [`CodeKind::None`].
pub const CODES_NONE: u32 = 0;
/// Header code of [`CodeKind::Int8`].
pub const CODES_INT8: u32 = 1;
/// Header code of [`CodeKind::Int4`].
pub const CODES_INT4: u32 = 2;

/// The write version of a file keeping int4 codes: releases of write version 6 know codes but
/// not this kind; they read such a file by its vectors (an unknown kind is ignored, its arrays
/// sit after theirs) and must not write it.
pub const INT4_WRITE_VERSION: u32 = 7;

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
    /// Every kind this release writes, in header-code order (the bindings list their names:
    /// Python's `chassis.CODE_KINDS`, Node's `CODE_KINDS`).
    pub const ALL: [CodeKind; 3] = [CodeKind::None, CodeKind::Int8, CodeKind::Int4];

    /// The header code.
    pub fn code(self) -> u32 {
        match self {
            CodeKind::None => CODES_NONE,
            CodeKind::Int8 => CODES_INT8,
            CodeKind::Int4 => CODES_INT4,
        }
    }

    /// The kind of a header code, `None` for one this release doesn't know.
    pub fn from_code(code: u32) -> Option<CodeKind> {
        match code {
            CODES_NONE => Some(CodeKind::None),
            CODES_INT8 => Some(CodeKind::Int8),
            CODES_INT4 => Some(CodeKind::Int4),
            _ => None,
        }
    }

    /// The name the CLI and the bindings use (`none`, `int8`, `int4`).
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::None => "none",
            CodeKind::Int8 => "int8",
            CodeKind::Int4 => "int4",
        }
    }

    /// The kind a name means.
    pub fn parse(s: &str) -> Option<CodeKind> {
        match s {
            "none" => Some(CodeKind::None),
            "int8" => Some(CodeKind::Int8),
            "int4" => Some(CodeKind::Int4),
            _ => None,
        }
    }

    /// Bytes of one code (0 without codes).
    pub fn code_bytes(self, dims: u32) -> u64 {
        match self {
            CodeKind::None => 0,
            CodeKind::Int8 => u64::from(dims).div_ceil(4) * 4,
            CodeKind::Int4 => u64::from(dims).div_ceil(8) * 4,
        }
    }

    /// Bytes of a code that hold values (the rest of [`CodeKind::code_bytes`] is padding).
    pub fn packed_bytes(self, dims: u32) -> usize {
        match self {
            CodeKind::None => 0,
            CodeKind::Int8 => dims as usize,
            CodeKind::Int4 => (dims as usize).div_ceil(2),
        }
    }

    /// The largest code value (the number of steps in a range).
    pub fn levels(self) -> u8 {
        match self {
            CodeKind::Int4 => 15,
            _ => 255,
        }
    }

    /// The write version a file keeping these codes needs (see [`super::CODES_WRITE_VERSION`]).
    pub fn write_version(self) -> Option<u32> {
        match self {
            CodeKind::None => None,
            CodeKind::Int8 => Some(super::CODES_WRITE_VERSION),
            CodeKind::Int4 => Some(INT4_WRITE_VERSION),
        }
    }

    /// Whether searches rank by the proved lower bound of [`super::codes`]' error ε (int8):
    /// its answers equal ranking every vector found exactly.
    pub fn proves(self) -> bool {
        self == CodeKind::Int8
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

/// The trained ranges of a code: per dimension its low end and step.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    kind: CodeKind,
    lo: Vec<f32>,
    step: Vec<f32>,
    /// ‖lo‖, rounded up: the kernels sum q·lo and q·s·c apart, so their rounding scales
    /// with it.
    lo_norm: f32,
}

impl Codebook {
    /// Trains codes of `kind` on `sample` (vectors of `dims` values): each dimension's range
    /// is its smallest to its largest value there, in [`CodeKind::levels`] steps. Non-finite
    /// values are left out; a dimension with no finite value gets range 0..0.
    pub fn train<'a>(
        kind: CodeKind,
        dims: usize,
        sample: impl IntoIterator<Item = &'a [f32]>,
    ) -> Codebook {
        let levels = f64::from(kind.levels());
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
                    ((f64::from(h) - f64::from(l)) / levels) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let lo = lo
            .into_iter()
            .map(|l| if l.is_finite() { l } else { 0.0 })
            .collect();
        Codebook::new(kind, lo, step)
    }

    fn new(kind: CodeKind, lo: Vec<f32>, step: Vec<f32>) -> Codebook {
        let norm = lo.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>();
        Codebook {
            kind,
            lo_norm: round_up(norm.sqrt()),
            lo,
            step,
        }
    }

    /// The code kind.
    pub fn kind(&self) -> CodeKind {
        self.kind
    }

    /// Bytes of a code that hold values.
    pub fn packed_bytes(&self) -> usize {
        self.kind.packed_bytes(self.lo.len() as u32)
    }

    /// Code value `j` of `code` (0 past its end).
    #[inline]
    pub fn code_at(&self, code: &[u8], j: usize) -> u8 {
        match self.kind {
            CodeKind::Int4 => code.get(j / 2).map_or(0, |&b| (b >> (4 * (j % 2))) & 0x0f),
            _ => code.get(j).copied().unwrap_or(0),
        }
    }

    /// A code's values one per byte into `out` (`dims` of them): what the one-byte kernels
    /// score, for a packed int4 code.
    #[inline]
    pub fn unpack_into(&self, code: &[u8], out: &mut [u8]) {
        match self.kind {
            CodeKind::Int4 => {
                // Each byte becomes the little-endian pair (low nibble, high nibble): a map the
                // compiler vectorises.
                let full = out.len() / 2;
                let (pairs, tail) = out.split_at_mut(2 * full);
                for (pair, &b) in pairs.chunks_exact_mut(2).zip(code) {
                    let w = u16::from(b & 0x0f) | (u16::from(b >> 4) << 8);
                    pair.copy_from_slice(&w.to_le_bytes());
                }
                if let (Some(t), Some(&b)) = (tail.first_mut(), code.get(full)) {
                    *t = b & 0x0f;
                }
            }
            _ => {
                let n = out.len().min(code.len());
                out[..n].copy_from_slice(&code[..n]);
            }
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

    /// Codes `v` into `code` (at least [`Codebook::packed_bytes`]; padding left alone) and returns
    /// (ε, ‖v‖): ε ≥ ‖v − v̂‖ and ‖v‖, each computed in f64 and rounded up to f32 (∞ for a
    /// vector with a non-finite value, which no bound then skips).
    pub fn encode(&self, v: &[f32], code: &mut [u8]) -> (f32, f32) {
        let mut err = 0f64;
        let mut norm = 0f64;
        let levels = f64::from(self.kind.levels());
        let int4 = self.kind == CodeKind::Int4;
        if int4 {
            // Both halves of every packed byte are written, an odd dimension's unused one 0.
            code.iter_mut()
                .take(self.packed_bytes())
                .for_each(|b| *b = 0);
        }
        for (j, &x) in v.iter().enumerate().take(self.dims()) {
            let s = self.step[j];
            let q = if s > 0.0 {
                ((f64::from(x) - f64::from(self.lo[j])) / f64::from(s)).round()
            } else {
                0.0
            };
            // NaN casts to 0; the clamp keeps every other value in range.
            let c = q.clamp(0.0, levels) as u8;
            if int4 {
                let Some(b) = code.get_mut(j / 2) else { break };
                *b |= c << (4 * (j % 2));
            } else {
                let Some(b) = code.get_mut(j) else { break };
                *b = c;
            }
            let d = f64::from(x) - f64::from(self.value(j, c));
            err += d * d;
            norm += f64::from(x) * f64::from(x);
        }
        (round_up(err.sqrt()), round_up(norm.sqrt()))
    }

    /// The approximate vector a code stands for.
    pub fn decode_code(&self, code: &[u8]) -> Vec<f32> {
        (0..self.dims())
            .map(|j| self.value(j, self.code_at(code, j)))
            .collect()
    }

    /// The codebook region's contents ([`codebook_bytes`] of them).
    pub fn encode_region(&self) -> Vec<u8> {
        let dims = self.dims() as u32;
        let mut b = Vec::with_capacity(codebook_bytes(dims) as usize);
        b.extend_from_slice(&CODEBOOK_MAGIC);
        b.extend_from_slice(&self.kind.code().to_le_bytes());
        b.extend_from_slice(&dims.to_le_bytes());
        for x in self.lo.iter().chain(&self.step) {
            b.extend_from_slice(&x.to_le_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes a codebook region read at file offset `offset` for a file of `dims` dimensions
    /// keeping codes of `kind`.
    pub fn decode(b: &[u8], kind: CodeKind, dims: u32, offset: u64) -> Result<Codebook> {
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
        if kind == CodeKind::None || u32_at(b, 8) != kind.code() || u32_at(b, 12) != dims {
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
        Ok(Codebook::new(kind, lo, step))
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

    #[test]
    fn every_kind_is_listed_once_and_round_trips() {
        for (i, k) in CodeKind::ALL.iter().enumerate() {
            // Exhaustive: a new kind fails to compile here until it is listed.
            let listed = match k {
                CodeKind::None | CodeKind::Int8 | CodeKind::Int4 => true,
            };
            assert!(listed);
            assert_eq!(CodeKind::parse(k.name()), Some(*k));
            assert_eq!(CodeKind::from_code(k.code()), Some(*k));
            assert_eq!(k.code(), i as u32, "ALL is in header-code order");
        }
        assert_eq!(CodeKind::from_code(CodeKind::ALL.len() as u32), None);
    }
    use proptest::prelude::*;

    proptest! {
        /// ε bounds the code's error for vectors inside and outside the trained range, for
        /// both kinds, an odd number of dimensions included; unpacking gives the same values.
        #[test]
        fn eps_bounds_the_error_of_every_code(
            int4 in any::<bool>(),
            train in proptest::collection::vec(proptest::collection::vec(-2.0f32..2.0, 7), 1..20),
            v in proptest::collection::vec(-5.0f32..5.0, 7),
        ) {
            let kind = if int4 { CodeKind::Int4 } else { CodeKind::Int8 };
            let book = Codebook::train(kind, 7, train.iter().map(|v| v.as_slice()));
            let mut code = vec![0u8; kind.code_bytes(7) as usize];
            prop_assert!(code.len() >= book.packed_bytes());
            let (eps, norm) = book.encode(&v, &mut code);
            let back = book.decode_code(&code);
            let err: f64 = v.iter().zip(&back).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum::<f64>().sqrt();
            prop_assert!(err <= f64::from(eps));
            let n: f64 = v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>().sqrt();
            prop_assert!(n <= f64::from(norm));
            let mut one = [0u8; 7];
            book.unpack_into(&code, &mut one);
            for (j, &c) in one.iter().enumerate() {
                prop_assert!(c <= kind.levels());
                prop_assert_eq!(c, book.code_at(&code, j));
                prop_assert_eq!(book.value(j, c), back[j]);
            }
        }

        /// Any bytes decode to a codebook or an error, never a panic.
        #[test]
        fn codebook_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = Codebook::decode(&b, CodeKind::Int8, 4, 0);
            let _ = Codebook::decode(&b, CodeKind::Int4, 4, 0);
        }
    }

    #[test]
    fn a_codebook_round_trips_and_checks_itself() {
        let rows = [[0.0f32, 1.0, -1.0], [0.5, 3.0, -1.0]];
        let book = Codebook::train(CodeKind::Int8, 3, rows.iter().map(|r| r.as_slice()));
        assert_eq!(book.lo(), &[0.0, 1.0, -1.0]);
        assert_eq!(book.step()[2], 0.0, "a constant dimension has no step");
        let b = book.encode_region();
        assert_eq!(b.len() as u64, codebook_bytes(3));
        assert_eq!(Codebook::decode(&b, CodeKind::Int8, 3, 0).unwrap(), book);
        assert!(Codebook::decode(&b, CodeKind::Int8, 4, 0).is_err());
        assert!(
            Codebook::decode(&b, CodeKind::Int4, 3, 0).is_err(),
            "a codebook names its kind"
        );
        let mut bad = b.clone();
        bad[20] ^= 1;
        assert!(Codebook::decode(&bad, CodeKind::Int8, 3, 0).is_err());
        let mut code = [0u8; 4];
        let (eps, _) = book.encode(&[0.5, 3.0, -1.0], &mut code);
        assert_eq!(&code[..3], &[255, 255, 0]);
        assert!(eps < 1e-6);
        for k in [CodeKind::None, CodeKind::Int8, CodeKind::Int4] {
            assert_eq!(CodeKind::from_code(k.code()), Some(k));
            assert_eq!(CodeKind::parse(k.name()), Some(k));
        }
        assert_eq!(CodeKind::Int8.code_bytes(385), 388);
        assert_eq!(CodeKind::Int8.slot_bytes(384), 392);
        assert_eq!(CodeKind::Int4.code_bytes(385), 196);
        assert_eq!(CodeKind::Int4.packed_bytes(385), 193);
        assert_eq!(CodeKind::Int4.slot_bytes(384), 200);
    }

    #[test]
    fn int4_packs_two_dimensions_to_a_byte_in_fifteen_steps() {
        let rows = [[0.0f32, 0.0, 0.0], [15.0, 30.0, 1.0]];
        let book = Codebook::train(CodeKind::Int4, 3, rows.iter().map(|r| r.as_slice()));
        assert_eq!(book.step(), &[1.0, 2.0, 1.0 / 15.0]);
        let mut code = [0xffu8; 4];
        let (eps, _) = book.encode(&[3.0, 30.0, 0.0], &mut code);
        assert_eq!(eps, 0.0);
        assert_eq!(
            &code[..2],
            &[0xf3, 0x00],
            "dimension 0 low, 1 high, 2 in the next byte"
        );
        assert_eq!(code[2..], [0xff, 0xff], "padding is left alone");
        let (eps, _) = book.encode(&[100.0, -1.0, 0.5], &mut code);
        assert_eq!(book.code_at(&code, 0), 15, "clamped at the top");
        assert_eq!(book.code_at(&code, 1), 0, "clamped at the bottom");
        assert!(eps >= 85.0);
        let b = book.encode_region();
        assert_eq!(Codebook::decode(&b, CodeKind::Int4, 3, 0).unwrap(), book);
        assert_eq!(CodeKind::Int4.write_version(), Some(INT4_WRITE_VERSION));
        assert!(CodeKind::Int8.proves() && !CodeKind::Int4.proves());
    }
}
