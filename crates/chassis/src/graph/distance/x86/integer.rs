//! The integer code kernels (AVX-512BW and VNNI, or AVX2) for a query prepared by
//! coded_query.rs: int8 and int4 codes scored by byte products, several codes sharing each
//! weight load. Installed by `Distance::with_level` only after runtime detection of their
//! features; every `unsafe` block states why its loads stay in bounds.

use super::super::coded_query::{CodedQuery, BLOCK};
use super::super::BATCH_WIDTH;
use super::{hsum256, hsum512_x4};
use std::arch::x86_64::*;

/// The integer sums of `W` codes for a prepared query (see coded_query.rs): per [`BLOCK`] code
/// bytes, byte products with the weights' high and low bytes (int4: of the even and the odd
/// dimensions, the nibbles masked apart; L2: the squares looked up by nibble and summed with
/// their own weights), combined at the end in f32 with the query's scales and constant. The W
/// codes share each block's weight loads, and their sums are reduced across lanes together
/// ([`hsum512_x4`]): scored one at a time, each code's reduction was a chain of eight dependent
/// steps, about half of the kernel's time (pypi-minilm, f16 with int4 codes).
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI; each of `codes` must point at
/// `w.code_bytes` readable bytes; `w.weights` (and `w.square_weights` when L2) must hold
/// `w.blocks` blocks as `CodedQuery::prepare` lays them out.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn integer_codes_avx512_w<const INT4: bool, const L2: bool>(
    w: &CodedQuery,
    codes: [*const u8; AVX512_CODES_AT_ONCE],
) -> [f32; AVX512_CODES_AT_ONCE] {
    const W: usize = AVX512_CODES_AT_ONCE;
    let per_block = if INT4 { 4 * BLOCK } else { 2 * BLOCK };
    let nibble = _mm512_set1_epi8(0x0f);
    let squares = _mm512_broadcast_i32x4(_mm_setr_epi8(
        0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121, -112, -87, -60, -31,
    ));
    let zero = _mm512_setzero_si512();
    let (mut hi, mut lo) = ([zero; W], [zero; W]);
    let (mut sq_hi, mut sq_lo) = ([zero; W], [zero; W]);
    let (pw, ps) = (&w.weights[..], &w.square_weights[..]);
    for b in 0..w.blocks {
        let left = w.code_bytes - b * BLOCK;
        let mask = if left >= BLOCK {
            u64::MAX
        } else {
            (1u64 << left) - 1
        };
        // SAFETY: the mask keeps each load inside its code's `code_bytes` bytes (masked-off
        // bytes are neither read nor faulted on).
        let x =
            codes.map(|code| unsafe { _mm512_maskz_loadu_epi8(mask, code.add(b * BLOCK).cast()) });
        let at = b * per_block;
        let load = |weights: &[i8], off: usize| {
            debug_assert!(at + off + BLOCK <= weights.len());
            // SAFETY: `off` is below `per_block` in steps of BLOCK and the caller's contract
            // gives `weights` (and `square_weights`, the only other slice passed, for L2)
            // `blocks` blocks of `per_block` bytes, so the 64 bytes at `at + off` lie inside.
            unsafe { _mm512_loadu_si512(weights.as_ptr().add(at + off).cast()) }
        };
        if INT4 {
            let (even_hi, even_lo) = (load(pw, 0), load(pw, BLOCK));
            let (odd_hi, odd_lo) = (load(pw, 2 * BLOCK), load(pw, 3 * BLOCK));
            for k in 0..W {
                let even = _mm512_and_si512(x[k], nibble);
                let odd = _mm512_and_si512(_mm512_srli_epi16(x[k], 4), nibble);
                hi[k] = _mm512_dpbusd_epi32(hi[k], even, even_hi);
                lo[k] = _mm512_dpbusd_epi32(lo[k], even, even_lo);
                hi[k] = _mm512_dpbusd_epi32(hi[k], odd, odd_hi);
                lo[k] = _mm512_dpbusd_epi32(lo[k], odd, odd_lo);
                if L2 {
                    // Nibbles 0..=15 index the table of squares (bytes read as unsigned).
                    let (se, so) = (
                        _mm512_shuffle_epi8(squares, even),
                        _mm512_shuffle_epi8(squares, odd),
                    );
                    sq_hi[k] = _mm512_dpbusd_epi32(sq_hi[k], se, load(ps, 0));
                    sq_lo[k] = _mm512_dpbusd_epi32(sq_lo[k], se, load(ps, BLOCK));
                    sq_hi[k] = _mm512_dpbusd_epi32(sq_hi[k], so, load(ps, 2 * BLOCK));
                    sq_lo[k] = _mm512_dpbusd_epi32(sq_lo[k], so, load(ps, 3 * BLOCK));
                }
            }
        } else {
            let (whi, wlo) = (load(pw, 0), load(pw, BLOCK));
            for k in 0..W {
                hi[k] = _mm512_dpbusd_epi32(hi[k], x[k], whi);
                lo[k] = _mm512_dpbusd_epi32(lo[k], x[k], wlo);
            }
        }
    }
    let (alpha, alpha_hi) = (_mm512_set1_ps(w.scale), _mm512_set1_ps(128.0 * w.scale));
    let (beta, beta_hi) = (
        _mm512_set1_ps(w.square_scale),
        _mm512_set1_ps(128.0 * w.square_scale),
    );
    let v: [__m512; W] = std::array::from_fn(|k| {
        let mut v = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(hi[k]),
            alpha_hi,
            _mm512_mul_ps(_mm512_cvtepi32_ps(lo[k]), alpha),
        );
        if L2 {
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sq_hi[k]), beta_hi, v);
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sq_lo[k]), beta, v);
        }
        v
    });
    hsum512_x4(v).map(|s| w.constant + s)
}

/// Codes the AVX-512 integer kernel scores together (a divisor of [`BATCH_WIDTH`]; four keeps
/// L2's sixteen accumulators in registers).
const AVX512_CODES_AT_ONCE: usize = 4;

/// [`integer_codes_avx512_w`] to each of `c`, [`AVX512_CODES_AT_ONCE`] at a time.
///
/// # Safety
/// As [`integer_codes_avx512_w`], for every code of `c`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn integer_codes_avx512<const INT4: bool, const L2: bool>(
    w: &CodedQuery,
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // A group shorter than BATCH_WIDTH comes padded with its last code repeated
    // (`codes_group`): the same bytes give the same sum, so a run of codes that only repeats
    // the last one scored is copied, not scored again.
    let mut out = [0f32; BATCH_WIDTH];
    let mut last: Option<(*const u8, f32)> = None;
    for (o, c) in out
        .chunks_exact_mut(AVX512_CODES_AT_ONCE)
        .zip(c.chunks_exact(AVX512_CODES_AT_ONCE))
    {
        let p: [*const u8; AVX512_CODES_AT_ONCE] = std::array::from_fn(|k| c[k].as_ptr());
        if let Some((_, sum)) = last.filter(|&(at, _)| p.iter().all(|&p| std::ptr::eq(p, at))) {
            o.fill(sum);
            continue;
        }
        // SAFETY: the caller's contract, code by code.
        o.copy_from_slice(&unsafe { integer_codes_avx512_w::<INT4, L2>(w, p) });
        last = Some((p[AVX512_CODES_AT_ONCE - 1], o[AVX512_CODES_AT_ONCE - 1]));
    }
    out
}

/// The integer sums of `W` codes for a prepared query with AVX2: the sums of
/// [`integer_codes_avx512_w`], 32 code bytes of each code a step, every weight loaded once a
/// step for all W codes (whose loads, independent, overlap their misses). `vpmaddubsw`
/// multiplies code bytes (int8's; int4's even and odd dimensions' nibbles, or their squares
/// looked up by nibble) by weight bytes and adds pairs in 16-bit lanes, exact because the
/// weights' bytes are bounded (coded_query.rs: 2·15·127, 2·255·64 and 2·225·72 fit);
/// `vpmaddwd` by ones widens the pairs to 32 bits before any sum could overflow. A code's last
/// partial step is read through a zeroed copy.
///
/// # Safety
/// The CPU must support AVX2 and FMA; each of `codes` must point at `w.code_bytes` readable
/// bytes; `w.weights` (and `w.square_weights` when L2) must hold `w.blocks` blocks as
/// `CodedQuery::prepare` lays them out; L2 only with INT4 (as `prepare` allows).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn integer_codes_avx2_w<const INT4: bool, const L2: bool, const W: usize>(
    w: &CodedQuery,
    codes: [*const u8; W],
) -> [f32; W] {
    const STEP: usize = BLOCK / 2;
    let per_block = if INT4 { 4 * BLOCK } else { 2 * BLOCK };
    let nibble = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let squares = _mm256_broadcastsi128_si256(_mm_setr_epi8(
        0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121, -112, -87, -60, -31,
    ));
    let zero = _mm256_setzero_si256();
    let (mut hi, mut lo) = ([zero; W], [zero; W]);
    let (mut sq_hi, mut sq_lo) = ([zero; W], [zero; W]);
    let (pw, ps) = (&w.weights[..], &w.square_weights[..]);
    let mut start = 0;
    while start < w.code_bytes {
        let left = w.code_bytes - start;
        let x = codes.map(|code| {
            if left >= STEP {
                // SAFETY: the STEP bytes at `start` lie inside the code's `code_bytes`.
                unsafe { _mm256_loadu_si256(code.add(start).cast()) }
            } else {
                let mut tail = [0u8; STEP];
                // SAFETY: `left` bytes remain in the code from `start`; they fit `tail`.
                unsafe { std::ptr::copy_nonoverlapping(code.add(start), tail.as_mut_ptr(), left) };
                // SAFETY: `tail` is STEP bytes.
                unsafe { _mm256_loadu_si256(tail.as_ptr().cast()) }
            }
        });
        // Code byte `start` is byte `start % BLOCK` of block `start / BLOCK`, whose weights
        // are [hi; 64] [lo; 64] (int4: of the even dimensions, then of the odd ones).
        let at = (start / BLOCK) * per_block + start % BLOCK;
        let load = |weights: &[i8], off: usize| {
            debug_assert!(at + off + STEP <= weights.len());
            // SAFETY: `start % BLOCK` is 0 or STEP and `off + BLOCK` at most `per_block`, so
            // the STEP bytes at `at + off` lie inside block `start / BLOCK` < `blocks`, which
            // the caller's contract gives `weights` (and `square_weights` for L2).
            unsafe { _mm256_loadu_si256(weights.as_ptr().add(at + off).cast()) }
        };
        let widen = |pairs| _mm256_madd_epi16(pairs, ones);
        if INT4 {
            let (even_hi, even_lo) = (load(pw, 0), load(pw, BLOCK));
            let (odd_hi, odd_lo) = (load(pw, 2 * BLOCK), load(pw, 3 * BLOCK));
            for k in 0..W {
                let even = _mm256_and_si256(x[k], nibble);
                let odd = _mm256_and_si256(_mm256_srli_epi16(x[k], 4), nibble);
                // Each 16-bit lane: at most 2·15·127 per pair of products, twice: within 16
                // bits.
                let h = _mm256_add_epi16(
                    _mm256_maddubs_epi16(even, even_hi),
                    _mm256_maddubs_epi16(odd, odd_hi),
                );
                let l = _mm256_add_epi16(
                    _mm256_maddubs_epi16(even, even_lo),
                    _mm256_maddubs_epi16(odd, odd_lo),
                );
                hi[k] = _mm256_add_epi32(hi[k], widen(h));
                lo[k] = _mm256_add_epi32(lo[k], widen(l));
                if L2 {
                    // Nibbles 0..=15 index the table of squares (bytes read as unsigned); a
                    // pair of products reaches 2·225·72, so pairs widen before they are added.
                    let (se, so) = (
                        _mm256_shuffle_epi8(squares, even),
                        _mm256_shuffle_epi8(squares, odd),
                    );
                    let pair = |c, off| widen(_mm256_maddubs_epi16(c, load(ps, off)));
                    sq_hi[k] = _mm256_add_epi32(
                        sq_hi[k],
                        _mm256_add_epi32(pair(se, 0), pair(so, 2 * BLOCK)),
                    );
                    sq_lo[k] = _mm256_add_epi32(
                        sq_lo[k],
                        _mm256_add_epi32(pair(se, BLOCK), pair(so, 3 * BLOCK)),
                    );
                }
            }
        } else {
            let (whi, wlo) = (load(pw, 0), load(pw, BLOCK));
            for k in 0..W {
                // A pair of products reaches 2·255·64: within 16 bits, widened at once.
                hi[k] = _mm256_add_epi32(hi[k], widen(_mm256_maddubs_epi16(x[k], whi)));
                lo[k] = _mm256_add_epi32(lo[k], widen(_mm256_maddubs_epi16(x[k], wlo)));
            }
        }
        start += STEP;
    }
    let (alpha, alpha_hi) = (_mm256_set1_ps(w.scale), _mm256_set1_ps(128.0 * w.scale));
    let (beta, beta_hi) = (
        _mm256_set1_ps(w.square_scale),
        _mm256_set1_ps(128.0 * w.square_scale),
    );
    std::array::from_fn(|k| {
        let mut v = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(hi[k]),
            alpha_hi,
            _mm256_mul_ps(_mm256_cvtepi32_ps(lo[k]), alpha),
        );
        if L2 {
            v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq_hi[k]), beta_hi, v);
            v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq_lo[k]), beta, v);
        }
        w.constant + hsum256(v)
    })
}

/// [`integer_codes_avx2_w`] to each of `c`, [`AVX2_CODES_AT_ONCE`] at a time.
///
/// # Safety
/// As [`integer_codes_avx2_w`], for every code of `c`.
#[target_feature(enable = "avx2,fma")]
unsafe fn integer_codes_avx2_of<const INT4: bool, const L2: bool>(
    w: &CodedQuery,
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    let mut out = [0f32; BATCH_WIDTH];
    for (o, c) in out
        .chunks_exact_mut(AVX2_CODES_AT_ONCE)
        .zip(c.chunks_exact(AVX2_CODES_AT_ONCE))
    {
        let p: [*const u8; AVX2_CODES_AT_ONCE] = std::array::from_fn(|k| c[k].as_ptr());
        // SAFETY: the caller's contract, code by code.
        o.copy_from_slice(&unsafe { integer_codes_avx2_w::<INT4, L2, AVX2_CODES_AT_ONCE>(w, p) });
    }
    out
}

/// Codes the AVX2 integer kernel scores together (a divisor of [`BATCH_WIDTH`]).
const AVX2_CODES_AT_ONCE: usize = 4;

/// Whether `w` is laid out as the integer kernels read it and every code of `c` holds its
/// `code_bytes` (what makes their loads safe).
fn laid_out(w: &CodedQuery, c: &[&[u8]; BATCH_WIDTH]) -> bool {
    let per_block = if w.int4 { 4 * BLOCK } else { 2 * BLOCK };
    w.weights.len() >= w.blocks * per_block
        && (!w.l2 || w.square_weights.len() >= w.blocks * per_block)
        && w.blocks * BLOCK >= w.code_bytes
        && c.iter().all(|c| c.len() >= w.code_bytes)
}

/// The integer kernels (AVX-512 VNNI) for a prepared query: int8 or int4 codes, dot or L2.
pub(in crate::graph::distance) fn integer_codes(
    w: &CodedQuery,
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !laid_out(w, &c) {
        return [f32::NAN; BATCH_WIDTH];
    }
    // SAFETY: installed by `Distance::with_level` only after AVX-512F, AVX-512BW and
    // AVX-512 VNNI were detected; the lengths were checked above.
    unsafe {
        match (w.int4, w.l2) {
            (true, true) => integer_codes_avx512::<true, true>(w, c),
            (true, false) => integer_codes_avx512::<true, false>(w, c),
            (false, false) => integer_codes_avx512::<false, false>(w, c),
            (false, true) => [f32::NAN; BATCH_WIDTH],
        }
    }
}

/// The integer kernels (AVX2) for a prepared query: int8 or int4 codes, dot or L2 (int8
/// under L2 is never prepared).
pub(in crate::graph::distance) fn integer_codes_avx2(
    w: &CodedQuery,
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !laid_out(w, &c) {
        return [f32::NAN; BATCH_WIDTH];
    }
    // SAFETY: installed by `Distance::with_level` only after AVX2 and FMA were detected; the
    // lengths were checked above.
    unsafe {
        match (w.int4, w.l2) {
            (true, true) => integer_codes_avx2_of::<true, true>(w, c),
            (true, false) => integer_codes_avx2_of::<true, false>(w, c),
            (false, false) => integer_codes_avx2_of::<false, false>(w, c),
            (false, true) => [f32::NAN; BATCH_WIDTH],
        }
    }
}
