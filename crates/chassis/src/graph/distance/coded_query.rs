//! A query quantized for the integer code kernels: what lets a walk by codes score a code with
//! byte products (AVX-512 VNNI: 64 an instruction; AVX2's VPMADDUBSW: 32) instead of
//! widening every code value to f32.
//!
//! A code c stands for v̂ⱼ = loⱼ + sⱼ·cⱼ (format/codes.rs). The walk distance to it splits into
//! a part of the query alone and a sum over the code:
//! - cosine and inner product: ⟨q, v̂⟩ = Σ qⱼloⱼ + Σ aⱼcⱼ with aⱼ = qⱼsⱼ;
//! - squared L2 (int4 only): ‖q − v̂‖² = Σ (qⱼ − loⱼ)² + Σ aⱼcⱼ + Σ bⱼcⱼ², with
//!   aⱼ = −2(qⱼ − loⱼ)sⱼ and bⱼ = sⱼ² (cⱼ² ≤ 225 still fits a byte; int8's squares don't, so
//!   int8 under L2 keeps the f32 kernels).
//!
//! The weights a (and b) are quantized to integers ãⱼ = round(aⱼ/α), each stored as two signed
//! bytes ãⱼ = 128·hiⱼ + loⱼ (loⱼ in −64..=63) so that byte products sum them exactly:
//! Σ ãⱼcⱼ = 128·Σ hiⱼcⱼ + Σ loⱼcⱼ, in 32-bit lanes that no dimension count up to `MAX_DIMS`
//! overflows. Each weight's bound keeps AVX2's VPMADDUBSW exact too, which adds two products
//! of a code byte and a weight byte in a saturating 16-bit lane: int4's |ãⱼ| ≤ [`WEIGHT_MAX`]
//! (about 14 bits; 2·15·127 fits), int8's ≤ [`INT8_WEIGHT_MAX`] (13 bits; 2·255·64 fits) and
//! the squares' b̃ⱼ ≤ [`SQUARE_WEIGHT_MAX`] (2·225·72 fits). With rⱼ = aⱼ − α·ãⱼ
//! (|rⱼ| ≤ α/2) and m = L/2 the middle of the code range 0..=L:
//!
//! Σ aⱼcⱼ = α·Σ ãⱼcⱼ + m·Σ rⱼ + Σ rⱼ(cⱼ − m), and |Σ rⱼ(cⱼ − m)| ≤ m·Σ|rⱼ|.
//!
//! So the kernels return the constant (the query's terms plus m·Σ rⱼ, computed once in f64)
//! plus α times an exact integer sum, and every walk distance they give is within
//! [`CodedQuery::error`] = m·Σ|rⱼ| (plus the squares' own term) of the f32 kernels' — a
//! deterministic bound the ranking subtracts before trusting a code's lower bound, so "every
//! returned distance is exact" and int8's proved bound stay what they were. At 13 bits the
//! bound is about 1% of int8's proved margin ‖q‖ε; at 14, under 1% of int4's likely one.
//!
//! Invariants: a prepared query is keyed by the codebook's and the query's addresses and
//! lengths; callers forget it at the start of every search (the query's buffer may be reused
//! for another query), so a key never matches a query it was not prepared from. A NaN or
//! infinite query gives a NaN constant and error, which no bound is below.

use crate::format::codes::{CodeKind, Codebook};

/// Bytes of code one step of the integer kernels reads.
pub(super) const BLOCK: usize = 64;

/// The largest |ãⱼ| for int4 codes: 128·127 (hiⱼ ≤ 127 with loⱼ in −64..=63).
pub const WEIGHT_MAX: f64 = 16_256.0;

/// The largest |ãⱼ| for int8 codes: 128·64 + 63, so that |hiⱼ| ≤ 64 and a pair of products
/// with code bytes up to 255 fits a 16-bit lane (2·255·64 = 32,640).
pub const INT8_WEIGHT_MAX: f64 = 8_255.0;

/// The largest b̃ⱼ (the squares' weights, never negative): 128·72 + 63, so that hiⱼ ≤ 72 and
/// a pair of products with squares up to 225 fits a 16-bit lane (2·225·72 = 32,400).
pub const SQUARE_WEIGHT_MAX: f64 = 9_279.0;

/// A query prepared for one codebook's integer kernels (see the module documentation).
// Only the x86-64 kernels read the prepared weights; elsewhere a search never prepares one.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Debug, Default)]
pub struct CodedQuery {
    /// (codebook address, query address, query length) it was prepared for.
    key: Option<(usize, usize, usize)>,
    /// Whether the integer kernels apply (int8 under cosine or inner product; int4).
    ready: bool,
    pub(super) int4: bool,
    pub(super) l2: bool,
    /// Code bytes that hold values (the kernels' loads stop there).
    pub(super) code_bytes: usize,
    /// Steps of [`BLOCK`] code bytes.
    pub(super) blocks: usize,
    /// Per block: int8, [hi; 64] then [lo; 64] (byte i is dimension 64·block + i); int4,
    /// [hi; 64] [lo; 64] of the even dimensions (byte i's low four bits) then of the odd ones.
    pub(super) weights: Vec<i8>,
    /// The squares' weights b̃ (L2 only), laid out as int4's `weights`.
    pub(super) square_weights: Vec<i8>,
    /// α.
    pub(super) scale: f32,
    /// β, the squares' scale.
    pub(super) square_scale: f32,
    /// The query's terms plus m·Σ rⱼ.
    pub(super) constant: f32,
    error: f32,
    /// Buffers reused from query to query: the weights before and after quantizing.
    values: Vec<f64>,
    ints: Vec<i32>,
}

/// Added to and subtracted from an f64 below 2⁵¹ in magnitude, rounds it to an integer.
const ROUNDING: f64 = 6_755_399_441_055_744.0;

/// `values` quantized to integers within ±`limit` into `out`: (α, Σ rⱼ, Σ |rⱼ|). All zero
/// gives α = 1 and zero weights; a non-finite value gives NaN sums.
fn quantize(values: &[f64], limit: f64, out: &mut Vec<i32>) -> (f32, f64, f64) {
    out.clear();
    let max = values.iter().fold(0f64, |m, v| m.max(v.abs()));
    if !values.iter().all(|v| v.is_finite()) {
        out.resize(values.len(), 0);
        return (1.0, f64::NAN, f64::NAN);
    }
    let scale = if max > 0.0 { (max / limit) as f32 } else { 1.0 };
    // A scale too small for f32 (subnormal queries) leaves everything in the residuals.
    let scale = if scale.is_normal() { scale } else { 1.0 };
    let alpha = f64::from(scale);
    let inv = 1.0 / alpha;
    // Four values a step, with four partial sums of each kind: steps that don't wait on one
    // another's adds, and that the compiler keeps in registers and vector lanes.
    let (mut sums, mut abss) = ([0f64; 4], [0f64; 4]);
    out.resize(values.len(), 0);
    let step = |v: f64, sum: &mut f64, abs: &mut f64| {
        // Rounded to the nearest integer by adding and subtracting 1.5·2⁵² (exact for
        // |x| < 2⁵¹; `f64::round` is a libm call without SSE4.1). Any nearest-integer
        // choice serves: the residual below is exact whichever t is taken.
        let x = (v * inv).max(-limit).min(limit);
        let rounded = x + ROUNDING;
        let t = rounded - ROUNDING;
        // Exact in f64: v is a product of two f32, alpha·t one of 24 and 15 bits.
        let r = v - alpha * t;
        *sum += r;
        *abs += r.abs();
        // `rounded` is 2⁵² + 2⁵¹ + t with a unit last place: its low 32 bits are t's two's
        // complement (a conversion the compiler can keep in vector lanes, unlike `as i32`).
        rounded.to_bits() as u32 as i32
    };
    let mut outs = out.chunks_exact_mut(4);
    let mut ins = values.chunks_exact(4);
    for (o, v) in (&mut outs).zip(&mut ins) {
        for k in 0..4 {
            o[k] = step(v[k], &mut sums[k], &mut abss[k]);
        }
    }
    for (o, &v) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        *o = step(v, &mut sums[0], &mut abss[0]);
    }
    let sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    let abs = (abss[0] + abss[1]) + (abss[2] + abss[3]);
    (scale, sum, abs)
}

/// ã as its two bytes (hi, lo): ã = 128·hi + lo, lo in −64..=63.
fn split(t: i32) -> (i8, i8) {
    let hi = (t + 64).div_euclid(128);
    let lo = t - 128 * hi;
    // Both fit: |t| ≤ 16,256 gives hi in −127..=127.
    (hi as i8, lo as i8)
}

/// Lays out per-dimension integer weights as the kernels read them (see
/// [`CodedQuery::weights`]).
fn lay_out(t: &[i32], int4: bool, blocks: usize, out: &mut Vec<i8>) {
    out.clear();
    let per_block = if int4 { 4 * BLOCK } else { 2 * BLOCK };
    out.resize(blocks * per_block, 0);
    // A block's code bytes hold 2·BLOCK dimensions (int4) or BLOCK; its weights are [hi; 64]
    // [lo; 64] of each byte's dimension (int4: of the even dimensions, then of the odd ones).
    let dims = if int4 { 2 * BLOCK } else { BLOCK };
    for (tb, ob) in t.chunks(dims).zip(out.chunks_exact_mut(per_block)) {
        for (half, ob) in ob.chunks_exact_mut(2 * BLOCK).enumerate() {
            let (his, los) = ob.split_at_mut(BLOCK);
            let ts = tb.iter().skip(half).step_by(per_block / (2 * BLOCK));
            for ((hi, lo), &w) in his.iter_mut().zip(los.iter_mut()).zip(ts) {
                (*hi, *lo) = split(w);
            }
        }
    }
}

impl CodedQuery {
    /// Forgets what it was prepared for (at the start of every search).
    pub fn forget(&mut self) {
        self.key = None;
    }

    /// Prepares for query `q` against `book`'s codes (`l2`: squared L2, else a dot product),
    /// unless already prepared for them; returns whether the integer kernels apply.
    pub fn prepare(&mut self, q: &[f32], book: &Codebook, l2: bool) -> bool {
        let key = (
            std::ptr::from_ref(book) as usize,
            q.as_ptr() as usize,
            q.len(),
        );
        if self.key == Some(key) && self.l2 == l2 {
            return self.ready;
        }
        self.key = Some(key);
        self.l2 = l2;
        self.int4 = book.kind() == CodeKind::Int4;
        self.ready = match book.kind() {
            CodeKind::Int4 => true,
            CodeKind::Int8 => !l2,
            CodeKind::None => false,
        } && book.dims() >= q.len();
        if !self.ready {
            return false;
        }
        let n = q.len();
        let (lo, step) = (&book.lo()[..n], &book.step()[..n]);
        self.code_bytes = book.kind().packed_bytes(n as u32);
        self.blocks = self.code_bytes.div_ceil(BLOCK);
        let m = f64::from(book.kind().levels()) / 2.0;
        let (values, ints) = (&mut self.values, &mut self.ints);
        values.clear();
        let mut base = 0f64;
        let (constant, error) = if l2 {
            values.extend(q.iter().zip(lo.iter().zip(step)).map(|(&x, (&l, &s))| {
                let d = f64::from(x) - f64::from(l);
                base += d * d;
                -2.0 * d * f64::from(s)
            }));
            let (alpha, sum, abs) = quantize(values, WEIGHT_MAX, ints);
            lay_out(ints, self.int4, self.blocks, &mut self.weights);
            values.clear();
            values.extend(step.iter().map(|&s| f64::from(s) * f64::from(s)));
            let (beta, sum2, abs2) = quantize(values, SQUARE_WEIGHT_MAX, ints);
            lay_out(ints, self.int4, self.blocks, &mut self.square_weights);
            let m2 = f64::from(book.kind().levels()).powi(2) / 2.0;
            self.scale = alpha;
            self.square_scale = beta;
            (base + m * sum + m2 * sum2, m * abs + m2 * abs2)
        } else {
            values.extend(q.iter().zip(lo.iter().zip(step)).map(|(&x, (&l, &s))| {
                base += f64::from(x) * f64::from(l);
                f64::from(x) * f64::from(s)
            }));
            let limit = if self.int4 {
                WEIGHT_MAX
            } else {
                INT8_WEIGHT_MAX
            };
            let (alpha, sum, abs) = quantize(values, limit, ints);
            lay_out(ints, self.int4, self.blocks, &mut self.weights);
            self.scale = alpha;
            self.square_scale = 0.0;
            self.square_weights.clear();
            (base + m * sum, m * abs)
        };
        self.constant = constant as f32;
        // Rounded up, and a little more for the f64 sums' own rounding.
        self.error = (error * (1.0 + 1e-9)) as f32 * (1.0 + f32::EPSILON);
        if !self.error.is_finite() {
            self.constant = f32::NAN;
            self.error = f32::NAN;
        }
        true
    }

    /// How far a walk distance the integer kernels gave for `book`'s codes may be from the f32
    /// kernels' (0 if this query was not prepared for `book`: its walk used the f32 kernels).
    pub fn error_for(&self, book: &Codebook) -> f32 {
        match self.key {
            Some((b, ..)) if self.ready && b == std::ptr::from_ref(book) as usize => self.error,
            _ => 0.0,
        }
    }

    /// The code's sum (the dot product, or the squared L2 distance) as the integer kernels
    /// compute it, one value at a time in exact integers: the reference the SIMD kernel is
    /// tested against. `code` at least [`CodedQuery::code_bytes`] long.
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(super) fn score_scalar(&self, code: &[u8]) -> f32 {
        let sum = |weights: &[i8], square: bool| -> f64 {
            let per_block = if self.int4 { 4 * BLOCK } else { 2 * BLOCK };
            let mut s = 0i64;
            for (byte, &c) in code[..self.code_bytes].iter().enumerate() {
                let (block, i) = (byte / BLOCK, byte % BLOCK);
                let values: &[(u8, usize)] = if self.int4 {
                    &[(c & 0x0f, 0), (c >> 4, 1)]
                } else {
                    &[(c, 0)]
                };
                for &(v, half) in values {
                    let v = if square {
                        i64::from(v) * i64::from(v)
                    } else {
                        i64::from(v)
                    };
                    let at = block * per_block + half * 2 * BLOCK + i;
                    let w = 128 * i64::from(weights[at]) + i64::from(weights[at + BLOCK]);
                    s += w * v;
                }
            }
            s as f64
        };
        let mut d = f64::from(self.constant) + f64::from(self.scale) * sum(&self.weights, false);
        if self.l2 {
            d += f64::from(self.square_scale) * sum(&self.square_weights, true);
        }
        d as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_split_into_two_bytes_exactly() {
        for t in -16_256..=16_256 {
            let (hi, lo) = split(t);
            assert!((-64..=63).contains(&lo), "{t}");
            assert_eq!(128 * i32::from(hi) + i32::from(lo), t);
        }
        // Int8's and the squares' weights keep their high byte within AVX2's exact range.
        let int8 = INT8_WEIGHT_MAX as i32;
        for t in -int8..=int8 {
            assert!((-64..=64).contains(&split(t).0), "{t}");
        }
        for t in 0..=SQUARE_WEIGHT_MAX as i32 {
            assert!((0..=72).contains(&split(t).0), "{t}");
        }
    }

    #[test]
    fn quantized_weights_stay_in_range_and_residuals_are_half_a_step() {
        let v: Vec<f64> = (0..300)
            .map(|i| ((i * 37 % 101) as f64 - 50.0) * 0.013)
            .collect();
        let mut t = Vec::new();
        for limit in [WEIGHT_MAX, INT8_WEIGHT_MAX, SQUARE_WEIGHT_MAX] {
            let (alpha, sum, abs) = quantize(&v, limit, &mut t);
            let mut s = 0f64;
            for (&x, &w) in v.iter().zip(&t) {
                assert!(f64::from(w.abs()) <= limit);
                let r = x - f64::from(alpha) * f64::from(w);
                assert!(r.abs() <= f64::from(alpha) / 2.0 * (1.0 + 1e-9), "{r}");
                s += r;
            }
            assert!((s - sum).abs() < 1e-12);
            assert!(abs >= sum.abs());
            // The largest value reaches the limit: the whole range is used.
            assert_eq!(t.iter().map(|w| w.abs()).max(), Some(limit as i32));
        }
        let (_, sum, abs) = quantize(&[1.0, f64::NAN], WEIGHT_MAX, &mut t);
        assert!(sum.is_nan() && abs.is_nan());
        let (alpha, _, _) = quantize(&[0.0; 5], WEIGHT_MAX, &mut t);
        assert_eq!((alpha, &t[..]), (1.0, &[0; 5][..]));
    }
}
