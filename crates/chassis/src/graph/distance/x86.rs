//! The x86-64 kernels (AVX2 + FMA, AVX-512F): f32, high halves and int8 codes, one vector
//! or eight side by side; the integer code kernels for a query prepared by coded_query.rs
//! are in `integer.rs`. Each is installed by `Distance::with_level` only after runtime
//! detection of its features; every `unsafe` block states why its loads stay in bounds.

use super::BATCH_WIDTH;
use std::arch::x86_64::*;

mod integer;
pub(super) use self::integer::{integer_codes, integer_codes_avx2};

#[target_feature(enable = "avx2,fma")]
pub(super) fn hsum256(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2<const L2: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
            let x = unsafe { _mm256_loadu_ps(pa.add(i + 8 * j)) };
            // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
            let y = unsafe { _mm256_loadu_ps(pb.add(i + 8 * j)) };
            *acc = if L2 {
                let d = _mm256_sub_ps(x, y);
                _mm256_fmadd_ps(d, d, *acc)
            } else {
                _mm256_fmadd_ps(x, y, *acc)
            };
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
        let x = unsafe { _mm256_loadu_ps(pa.add(i)) };
        // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
        let y = unsafe { _mm256_loadu_ps(pb.add(i)) };
        acc[0] = if L2 {
            let d = _mm256_sub_ps(x, y);
            _mm256_fmadd_ps(d, d, acc[0])
        } else {
            _mm256_fmadd_ps(x, y, acc[0])
        };
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum256(sum);
    while i < n {
        let (x, y) = (a[i], b[i]);
        s += if L2 { (x - y) * (x - y) } else { x * y };
        i += 1;
    }
    s
}

/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn kernel_avx512<const L2: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
            let x = unsafe { _mm512_loadu_ps(pa.add(i + 16 * j)) };
            // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
            let y = unsafe { _mm512_loadu_ps(pb.add(i + 16 * j)) };
            *acc = if L2 {
                let d = _mm512_sub_ps(x, y);
                _mm512_fmadd_ps(d, d, *acc)
            } else {
                _mm512_fmadd_ps(x, y, *acc)
            };
        }
        i += 64;
    }
    while i + 16 <= n {
        // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
        let x = unsafe { _mm512_loadu_ps(pa.add(i)) };
        // SAFETY: the loop condition keeps this full-width unaligned load inside both slices.
        let y = unsafe { _mm512_loadu_ps(pb.add(i)) };
        acc[0] = if L2 {
            let d = _mm512_sub_ps(x, y);
            _mm512_fmadd_ps(d, d, acc[0])
        } else {
            _mm512_fmadd_ps(x, y, acc[0])
        };
        i += 16;
    }
    if i < n {
        let mask: __mmask16 = (1u32 << (n - i)).wrapping_sub(1) as __mmask16;
        // SAFETY: the mask enables only lanes below n - i, so only in-bounds elements are read.
        let x = unsafe { _mm512_maskz_loadu_ps(mask, pa.add(i)) };
        // SAFETY: the mask enables only lanes below n - i, so only in-bounds elements are read.
        let y = unsafe { _mm512_maskz_loadu_ps(mask, pb.add(i)) };
        acc[1] = if L2 {
            let d = _mm512_sub_ps(x, y);
            _mm512_fmadd_ps(d, d, acc[1])
        } else {
            _mm512_fmadd_ps(x, y, acc[1])
        };
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(sum)
}

/// The distances from `a` to [`BATCH_WIDTH`] vectors at once: one load of `a` feeds one
/// accumulator per vector, and the vectors' cache lines stream from memory side by side
/// instead of one vector after another.
///
/// # Safety
/// The CPU must support AVX-512F, and every `b[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx512f")]
unsafe fn batch_avx512<const L2: bool>(a: &[f32], b: [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let pb = b.map(<[f32]>::as_ptr);
    let mut acc = [_mm512_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i < n {
        let left = (n - i).min(16);
        let mask: __mmask16 = (1u32 << left).wrapping_sub(1) as __mmask16;
        // SAFETY: the mask enables only lanes below n - i, so only elements of `a` are read.
        let x = unsafe { _mm512_maskz_loadu_ps(mask, pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&pb) {
            // SAFETY: as above; each b[j] is at least n long (the caller's contract).
            let y = unsafe { _mm512_maskz_loadu_ps(mask, p.add(i)) };
            *acc = if L2 {
                let d = _mm512_sub_ps(x, y);
                _mm512_fmadd_ps(d, d, *acc)
            } else {
                _mm512_fmadd_ps(x, y, *acc)
            };
        }
        i += left;
    }
    hsum512_x8(acc)
}

/// As `batch_avx512`, with 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and every `b[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx2,fma")]
unsafe fn batch_avx2<const L2: bool>(a: &[f32], b: [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let pb = b.map(<[f32]>::as_ptr);
    let mut acc = [_mm256_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: the loop condition keeps this full-width load inside `a`.
        let x = unsafe { _mm256_loadu_ps(pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&pb) {
            // SAFETY: as above; each b[j] is at least n long (the caller's contract).
            let y = unsafe { _mm256_loadu_ps(p.add(i)) };
            *acc = if L2 {
                let d = _mm256_sub_ps(x, y);
                _mm256_fmadd_ps(d, d, *acc)
            } else {
                _mm256_fmadd_ps(x, y, *acc)
            };
        }
        i += 8;
    }
    let mut out = acc.map(|v| hsum256(v));
    for (o, v) in out.iter_mut().zip(b) {
        for k in i..n {
            let (x, y) = (a[k], v[k]);
            *o += if L2 { (x - y) * (x - y) } else { x * y };
        }
    }
    out
}

/// Eight high halves at `p` as the f32 values they stand for (low bits zero).
#[target_feature(enable = "avx2,fma")]
fn widen256(h: __m128i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
}

/// Sixteen high halves as the f32 values they stand for (low bits zero).
#[target_feature(enable = "avx512f")]
fn widen512(h: __m256i) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
}

/// The first operand of [`sixteen_bit_avx512`]: a query's f32 values, or a second stored
/// vector's sixteen-bit values (of the same kind as the other operand's). The kernel is
/// compiled once per kind (a trait's constant), so its loop never tests which.
trait First: Copy {
    const SIXTEEN: bool;
    fn len(self) -> usize;
    fn ptr(self) -> *const u8;
    fn value(self, i: usize, f16: bool) -> f32;
}

impl First for &[f32] {
    const SIXTEEN: bool = false;
    fn len(self) -> usize {
        <[f32]>::len(self)
    }
    fn ptr(self) -> *const u8 {
        self.as_ptr().cast()
    }
    fn value(self, i: usize, _: bool) -> f32 {
        self[i]
    }
}

impl First for &[u16] {
    const SIXTEEN: bool = true;
    fn len(self) -> usize {
        <[u16]>::len(self)
    }
    fn ptr(self) -> *const u8 {
        self.as_ptr().cast()
    }
    fn value(self, i: usize, f16: bool) -> f32 {
        if f16 {
            crate::format::vector::from_f16(self[i])
        } else {
            super::high_value(self[i])
        }
    }
}

/// Σ aᵢ·hᵢ or Σ (aᵢ − hᵢ)² over the sixteen-bit values `h` (at least as many as `a` holds):
/// high halves of split vectors, or with `F16` IEEE half floats (`vcvtph2ps`), each widened
/// exactly to f32 as it is loaded; `a` is f32, or sixteen-bit values widened the same way
/// (the distance between two stored vectors without decoding either, as neighbor selection
/// compares them). Four accumulators in registers, 64 values a step: one pair of vectors is
/// a chain of dependent FMAs, and two accumulators (indexed by the step's parity, which kept
/// them in memory) made it the build's hottest function at 1,536 dimensions.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn sixteen_bit_avx512<const L2: bool, const F16: bool, A: First>(a: A, h: &[u16]) -> f32 {
    let n = a.len().min(h.len());
    let pa = a.ptr();
    let widen = |v: __m256i| {
        if F16 {
            _mm512_cvtph_ps(v)
        } else {
            widen512(v)
        }
    };
    let value = |x: u16| {
        if F16 {
            crate::format::vector::from_f16(x)
        } else {
            super::high_value(x)
        }
    };
    let ph = h.as_ptr();
    let step = |acc: __m512, i: usize| {
        // SAFETY: callers keep i + 16 <= n, so these 16-element loads (64 bytes of f32, 32 of
        // sixteen-bit values) are inside both slices.
        let (x, y) = unsafe {
            let x = if A::SIXTEEN {
                widen(_mm256_loadu_si256(pa.cast::<u16>().add(i).cast()))
            } else {
                _mm512_loadu_ps(pa.cast::<f32>().add(i))
            };
            (x, widen(_mm256_loadu_si256(ph.add(i).cast())))
        };
        if L2 {
            let d = _mm512_sub_ps(x, y);
            _mm512_fmadd_ps(d, d, acc)
        } else {
            _mm512_fmadd_ps(x, y, acc)
        }
    };
    let (mut acc0, mut acc1, mut acc2, mut acc3) = (
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
    );
    let mut i = 0;
    while i + 64 <= n {
        acc0 = step(acc0, i);
        acc1 = step(acc1, i + 16);
        acc2 = step(acc2, i + 32);
        acc3 = step(acc3, i + 48);
        i += 64;
    }
    while i + 16 <= n {
        acc0 = step(acc0, i);
        i += 16;
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3));
    let mut s = _mm512_reduce_add_ps(sum);
    while i < n {
        let (x, y) = (a.value(i, F16), value(h[i]));
        s += if L2 { (x - y) * (x - y) } else { x * y };
        i += 1;
    }
    s
}

/// Σ aᵢ·bᵢ between two vectors' high halves, which are bfloat16 values: AVX-512 BF16's
/// `vdpbf16ps` multiplies 32 pairs an instruction and adds them into f32 lanes (denormals
/// flushed to zero), where widening both sides first takes five instructions per 16.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dot_bf16_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let step = |acc: __m512, i: usize| {
        // SAFETY: callers keep i + 32 <= n, so these 32-element loads (64 bytes) are inside
        // both slices.
        let (x, y) = unsafe {
            (
                _mm512_loadu_si512(pa.add(i).cast()),
                _mm512_loadu_si512(pb.add(i).cast()),
            )
        };
        // SAFETY: __m512i and __m512bh are both 64 bytes of plain lanes with no invalid bit
        // patterns; the bits are reinterpreted as 32 bfloat16 values, which they are.
        let (x, y) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(x),
                std::mem::transmute::<__m512i, __m512bh>(y),
            )
        };
        _mm512_dpbf16_ps(acc, x, y)
    };
    let (mut acc0, mut acc1, mut acc2, mut acc3) = (
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
    );
    let mut i = 0;
    while i + 128 <= n {
        acc0 = step(acc0, i);
        acc1 = step(acc1, i + 32);
        acc2 = step(acc2, i + 64);
        acc3 = step(acc3, i + 96);
        i += 128;
    }
    while i + 32 <= n {
        acc0 = step(acc0, i);
        i += 32;
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3));
    let mut s = _mm512_reduce_add_ps(sum);
    while i < n {
        s += super::high_value(a[i]) * super::high_value(b[i]);
        i += 1;
    }
    s
}

/// As `sixteen_bit_avx512` over high halves, with 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn halves_avx2<const L2: bool>(a: &[f32], h: &[u16]) -> f32 {
    let n = a.len().min(h.len());
    let (pa, ph) = (a.as_ptr(), h.as_ptr());
    // Two accumulators in named registers, eight values each per step (an array indexed
    // by the step's parity kept them in memory: 4x slower in cache).
    let step = |acc: __m256, i: usize| {
        // SAFETY: callers keep i + 8 <= n, so these 8-element loads are inside both
        // slices (8 u16 = 16 bytes).
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(pa.add(i)),
                widen256(_mm_loadu_si128(ph.add(i).cast())),
            )
        };
        if L2 {
            let d = _mm256_sub_ps(x, y);
            _mm256_fmadd_ps(d, d, acc)
        } else {
            _mm256_fmadd_ps(x, y, acc)
        }
    };
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        acc0 = step(acc0, i);
        acc1 = step(acc1, i + 8);
        i += 16;
    }
    if i + 8 <= n {
        acc0 = step(acc0, i);
        i += 8;
    }
    let mut s = hsum256(_mm256_add_ps(acc0, acc1));
    while i < n {
        let (x, y) = (a[i], super::high_value(h[i]));
        s += if L2 { (x - y) * (x - y) } else { x * y };
        i += 1;
    }
    s
}

/// As `batch_avx512`, over the high halves of [`BATCH_WIDTH`] split vectors: one load of
/// `a` feeds eight accumulators, and each vector's halves are widened as they stream in.
///
/// # Safety
/// The CPU must support AVX-512F, and every `h[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx512f")]
unsafe fn halves_batch_avx512<const L2: bool>(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let ph = h.map(<[u16]>::as_ptr);
    let mut acc = [_mm512_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: the loop condition keeps this load inside `a`.
        let x = unsafe { _mm512_loadu_ps(pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&ph) {
            // SAFETY: each h[j] is at least n long (the caller's contract).
            let y = widen512(unsafe { _mm256_loadu_si256(p.add(i).cast()) });
            *acc = if L2 {
                let d = _mm512_sub_ps(x, y);
                _mm512_fmadd_ps(d, d, *acc)
            } else {
                _mm512_fmadd_ps(x, y, *acc)
            };
        }
        i += 16;
    }
    let mut out = hsum512_x8(acc);
    for (o, v) in out.iter_mut().zip(h) {
        for k in i..n {
            let (x, y) = (a[k], super::high_value(v[k]));
            *o += if L2 { (x - y) * (x - y) } else { x * y };
        }
    }
    out
}

/// As `halves_batch_avx512`, with 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and every `h[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx2,fma")]
unsafe fn halves_batch_avx2<const L2: bool>(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let ph = h.map(<[u16]>::as_ptr);
    let mut acc = [_mm256_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: the loop condition keeps this load inside `a`.
        let x = unsafe { _mm256_loadu_ps(pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&ph) {
            // SAFETY: each h[j] is at least n long (the caller's contract).
            let y = widen256(unsafe { _mm_loadu_si128(p.add(i).cast()) });
            *acc = if L2 {
                let d = _mm256_sub_ps(x, y);
                _mm256_fmadd_ps(d, d, *acc)
            } else {
                _mm256_fmadd_ps(x, y, *acc)
            };
        }
        i += 8;
    }
    let mut out = acc.map(|v| hsum256(v));
    for (o, v) in out.iter_mut().zip(h) {
        for k in i..n {
            let (x, y) = (a[k], super::high_value(v[k]));
            *o += if L2 { (x - y) * (x - y) } else { x * y };
        }
    }
    out
}

/// As `sixteen_bit_avx512` over half floats, with 256-bit vectors (F16C widens eight halves at a time).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_avx2<const L2: bool>(a: &[f32], h: &[u16]) -> f32 {
    let n = a.len().min(h.len());
    let (pa, ph) = (a.as_ptr(), h.as_ptr());
    let step = |acc: __m256, i: usize| {
        // SAFETY: callers keep i + 8 <= n, so these 8-element loads are inside both
        // slices (8 u16 = 16 bytes).
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(pa.add(i)),
                _mm256_cvtph_ps(_mm_loadu_si128(ph.add(i).cast())),
            )
        };
        if L2 {
            let d = _mm256_sub_ps(x, y);
            _mm256_fmadd_ps(d, d, acc)
        } else {
            _mm256_fmadd_ps(x, y, acc)
        }
    };
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        acc0 = step(acc0, i);
        acc1 = step(acc1, i + 8);
        i += 16;
    }
    if i + 8 <= n {
        acc0 = step(acc0, i);
        i += 8;
    }
    let mut s = hsum256(_mm256_add_ps(acc0, acc1));
    while i < n {
        let (x, y) = (a[i], crate::format::vector::from_f16(h[i]));
        s += if L2 { (x - y) * (x - y) } else { x * y };
        i += 1;
    }
    s
}

/// As `sixteen_bit_avx512` between two stored vectors, with 256-bit vectors: four accumulators in named registers,
/// 32 values a step.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sixteen_bit_pair_avx2<const L2: bool, const F16: bool>(a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let widen = |v: __m128i| {
        if F16 {
            _mm256_cvtph_ps(v)
        } else {
            widen256(v)
        }
    };
    let step = |acc: __m256, i: usize| {
        // SAFETY: callers keep i + 8 <= n, so these 8-element loads (16 bytes) are inside
        // both slices.
        let (x, y) = unsafe {
            (
                widen(_mm_loadu_si128(pa.add(i).cast())),
                widen(_mm_loadu_si128(pb.add(i).cast())),
            )
        };
        if L2 {
            let d = _mm256_sub_ps(x, y);
            _mm256_fmadd_ps(d, d, acc)
        } else {
            _mm256_fmadd_ps(x, y, acc)
        }
    };
    let (mut acc0, mut acc1, mut acc2, mut acc3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut i = 0;
    while i + 32 <= n {
        acc0 = step(acc0, i);
        acc1 = step(acc1, i + 8);
        acc2 = step(acc2, i + 16);
        acc3 = step(acc3, i + 24);
        i += 32;
    }
    while i + 8 <= n {
        acc0 = step(acc0, i);
        i += 8;
    }
    let mut s = hsum256(_mm256_add_ps(
        _mm256_add_ps(acc0, acc1),
        _mm256_add_ps(acc2, acc3),
    ));
    let value = |h: u16| {
        if F16 {
            crate::format::vector::from_f16(h)
        } else {
            super::high_value(h)
        }
    };
    while i < n {
        let (x, y) = (value(a[i]), value(b[i]));
        s += if L2 { (x - y) * (x - y) } else { x * y };
        i += 1;
    }
    s
}

/// As `sixteen_bit_avx512` over half floats, [`BATCH_WIDTH`] vectors side by side (one load of `a` feeds them all).
///
/// # Safety
/// The CPU must support AVX-512F, and every `h[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx512f")]
unsafe fn f16_batch_avx512<const L2: bool>(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let ph = h.map(<[u16]>::as_ptr);
    let mut acc = [_mm512_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: the loop condition keeps this load inside `a`.
        let x = unsafe { _mm512_loadu_ps(pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&ph) {
            // SAFETY: each h[j] is at least n long (the caller's contract).
            let y = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.add(i).cast()) });
            *acc = if L2 {
                let d = _mm512_sub_ps(x, y);
                _mm512_fmadd_ps(d, d, *acc)
            } else {
                _mm512_fmadd_ps(x, y, *acc)
            };
        }
        i += 16;
    }
    let mut out = hsum512_x8(acc);
    for (o, v) in out.iter_mut().zip(h) {
        for k in i..n {
            let (x, y) = (a[k], crate::format::vector::from_f16(v[k]));
            *o += if L2 { (x - y) * (x - y) } else { x * y };
        }
    }
    out
}

/// As `f16_batch_avx512`, with 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and every `h[j]` must be at least `a.len()` long.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_batch_avx2<const L2: bool>(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    let n = a.len();
    let pa = a.as_ptr();
    let ph = h.map(<[u16]>::as_ptr);
    let mut acc = [_mm256_setzero_ps(); BATCH_WIDTH];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: the loop condition keeps this load inside `a`.
        let x = unsafe { _mm256_loadu_ps(pa.add(i)) };
        for (acc, &p) in acc.iter_mut().zip(&ph) {
            // SAFETY: each h[j] is at least n long (the caller's contract).
            let y = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.add(i).cast()) });
            *acc = if L2 {
                let d = _mm256_sub_ps(x, y);
                _mm256_fmadd_ps(d, d, *acc)
            } else {
                _mm256_fmadd_ps(x, y, *acc)
            };
        }
        i += 8;
    }
    let mut out = acc.map(|v| hsum256(v));
    for (o, v) in out.iter_mut().zip(h) {
        for k in i..n {
            let (x, y) = (a[k], crate::format::vector::from_f16(v[k]));
            *o += if L2 { (x - y) * (x - y) } else { x * y };
        }
    }
    out
}

/// Σ qⱼ·v̂ⱼ or Σ (qⱼ − v̂ⱼ)² to the codes `c`, v̂ⱼ = loⱼ + sⱼ·cⱼ, eight codes side by
/// side (their lines stream together), the query's terms loaded once for all of them.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `lo`, `step` and every `c[j]` must be at least
/// `q.len()` long.
#[target_feature(enable = "avx2,fma")]
unsafe fn codes_avx2<const L2: bool, const W: usize>(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; W],
) -> [f32; W] {
    let n = q.len();
    let (pq, pl, ps) = (q.as_ptr(), lo.as_ptr(), step.as_ptr());
    let pc = c.map(<[u8]>::as_ptr);
    let mut acc = [_mm256_setzero_ps(); W];
    // Dot only: Σ q·lo, the same for every code.
    let mut shared = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: the loop condition keeps these loads inside q, lo and step (the caller's
        // contract makes lo and step at least as long as q).
        let (x, l, st) = unsafe {
            (
                _mm256_loadu_ps(pq.add(i)),
                _mm256_loadu_ps(pl.add(i)),
                _mm256_loadu_ps(ps.add(i)),
            )
        };
        // Dot: Σ q·(lo + s·c) = Σ q·lo + Σ (q·s)·c. L2: ((q − lo) − s·c)².
        let (a, b) = if L2 {
            (_mm256_sub_ps(x, l), st)
        } else {
            shared = _mm256_fmadd_ps(x, l, shared);
            (_mm256_mul_ps(x, st), st)
        };
        for (acc, &p) in acc.iter_mut().zip(&pc) {
            // SAFETY: each c[j] is at least n long (the caller's contract), so the eight
            // bytes at i lie inside it.
            let bytes = unsafe { _mm_loadl_epi64(p.add(i).cast()) };
            let y = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
            *acc = if L2 {
                let d = _mm256_fnmadd_ps(b, y, a);
                _mm256_fmadd_ps(d, d, *acc)
            } else {
                _mm256_fmadd_ps(a, y, *acc)
            };
        }
        i += 8;
    }
    let shared = if L2 { 0.0 } else { hsum256(shared) };
    let mut out = acc.map(|v| hsum256(v) + shared);
    for (o, code) in out.iter_mut().zip(c) {
        for k in i..n {
            let v = step[k].mul_add(f32::from(code[k]), lo[k]);
            *o += if L2 {
                (q[k] - v) * (q[k] - v)
            } else {
                q[k] * v
            };
        }
    }
    out
}

/// [`codes_avx2`] sixteen dimensions at a time: each step widens sixteen code bytes to
/// f32 (`vpmovzxbd`, `vcvtdq2ps`) for one FMA, half the instructions per byte of the AVX2
/// kernel's eight.
///
/// # Safety
/// The CPU must support AVX-512F; `lo`, `step` and every `c[j]` must be at least `q.len()`
/// long.
#[target_feature(enable = "avx512f")]
unsafe fn codes_avx512<const L2: bool, const W: usize>(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; W],
) -> [f32; W] {
    let n = q.len();
    let (pq, pl, ps) = (q.as_ptr(), lo.as_ptr(), step.as_ptr());
    let pc = c.map(<[u8]>::as_ptr);
    let mut acc = [_mm512_setzero_ps(); W];
    let mut shared = _mm512_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: the loop condition keeps these loads inside q, lo and step (the caller's
        // contract makes lo and step at least as long as q).
        let (x, l, st) = unsafe {
            (
                _mm512_loadu_ps(pq.add(i)),
                _mm512_loadu_ps(pl.add(i)),
                _mm512_loadu_ps(ps.add(i)),
            )
        };
        let a = if L2 {
            _mm512_sub_ps(x, l)
        } else {
            shared = _mm512_fmadd_ps(x, l, shared);
            _mm512_mul_ps(x, st)
        };
        for (acc, &p) in acc.iter_mut().zip(&pc) {
            // SAFETY: each c[j] is at least n long (the caller's contract), so the sixteen
            // bytes at i lie inside it.
            let bytes = unsafe { _mm_loadu_si128(p.add(i).cast()) };
            let y = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
            *acc = if L2 {
                let d = _mm512_fnmadd_ps(st, y, a);
                _mm512_fmadd_ps(d, d, *acc)
            } else {
                _mm512_fmadd_ps(a, y, *acc)
            };
        }
        i += 16;
    }
    let shared = if L2 {
        0.0
    } else {
        _mm512_reduce_add_ps(shared)
    };
    let mut out = acc.map(|v| _mm512_reduce_add_ps(v) + shared);
    for (o, code) in out.iter_mut().zip(c) {
        for k in i..n {
            let v = step[k].mul_add(f32::from(code[k]), lo[k]);
            *o += if L2 {
                (q[k] - v) * (q[k] - v)
            } else {
                q[k] * v
            };
        }
    }
    out
}

pub(super) fn l2sq_codes_avx512(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !codes_fit(q, lo, step, &c) {
        return super::portable::codes::<true, BATCH_WIDTH>(q, lo, step, c);
    }
    // SAFETY: AVX-512F was detected; the lengths were checked above.
    unsafe { codes_avx512::<true, BATCH_WIDTH>(q, lo, step, c) }
}

pub(super) fn dot_codes_avx512(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !codes_fit(q, lo, step, &c) {
        return super::portable::codes::<false, BATCH_WIDTH>(q, lo, step, c);
    }
    // SAFETY: AVX-512F was detected; the lengths were checked above.
    unsafe { codes_avx512::<false, BATCH_WIDTH>(q, lo, step, c) }
}

pub(super) fn l2sq_code_avx512(q: &[f32], lo: &[f32], step: &[f32], c: &[u8]) -> f32 {
    if !codes_fit(q, lo, step, &[c]) {
        return super::portable::codes::<true, 1>(q, lo, step, [c])[0];
    }
    // SAFETY: AVX-512F was detected; the lengths were checked above.
    let [d] = unsafe { codes_avx512::<true, 1>(q, lo, step, [c]) };
    d
}

pub(super) fn dot_code_avx512(q: &[f32], lo: &[f32], step: &[f32], c: &[u8]) -> f32 {
    if !codes_fit(q, lo, step, &[c]) {
        return super::portable::codes::<false, 1>(q, lo, step, [c])[0];
    }
    // SAFETY: AVX-512F was detected; the lengths were checked above.
    let [d] = unsafe { codes_avx512::<false, 1>(q, lo, step, [c]) };
    d
}

/// A code group's lengths, checked: codes kernels are installed only by `with_level` after
/// runtime detection, and this makes every call meet the length contract.
fn codes_fit<const W: usize>(q: &[f32], lo: &[f32], step: &[f32], c: &[&[u8]; W]) -> bool {
    lo.len() >= q.len() && step.len() >= q.len() && c.iter().all(|c| c.len() >= q.len())
}

pub(super) fn l2sq_codes_avx2(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !codes_fit(q, lo, step, &c) {
        return super::portable::codes::<true, BATCH_WIDTH>(q, lo, step, c);
    }
    // SAFETY: AVX2 + FMA were detected; the lengths were checked above.
    unsafe { codes_avx2::<true, BATCH_WIDTH>(q, lo, step, c) }
}

pub(super) fn l2sq_code_avx2(q: &[f32], lo: &[f32], step: &[f32], c: &[u8]) -> f32 {
    if !codes_fit(q, lo, step, &[c]) {
        return super::portable::codes::<true, 1>(q, lo, step, [c])[0];
    }
    // SAFETY: AVX2 + FMA were detected; the lengths were checked above.
    let [d] = unsafe { codes_avx2::<true, 1>(q, lo, step, [c]) };
    d
}

pub(super) fn dot_code_avx2(q: &[f32], lo: &[f32], step: &[f32], c: &[u8]) -> f32 {
    if !codes_fit(q, lo, step, &[c]) {
        return super::portable::codes::<false, 1>(q, lo, step, [c])[0];
    }
    // SAFETY: AVX2 + FMA were detected; the lengths were checked above.
    let [d] = unsafe { codes_avx2::<false, 1>(q, lo, step, [c]) };
    d
}

pub(super) fn dot_codes_avx2(
    q: &[f32],
    lo: &[f32],
    step: &[f32],
    c: [&[u8]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    if !codes_fit(q, lo, step, &c) {
        return super::portable::codes::<false, BATCH_WIDTH>(q, lo, step, c);
    }
    // SAFETY: AVX2 + FMA were detected; the lengths were checked above.
    unsafe { codes_avx2::<false, BATCH_WIDTH>(q, lo, step, c) }
}

// The halves wrappers are installed only by `with_level` after runtime detection, and
// `Distance::walk_many` checks every batch length first.

pub(super) fn l2sq_halves_avx512(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    unsafe { sixteen_bit_avx512::<true, false, _>(a, h) }
}

pub(super) fn one_minus_dot_halves_avx512(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    1.0 - unsafe { sixteen_bit_avx512::<false, false, _>(a, h) }
}

pub(super) fn l2sq_halves_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    unsafe { sixteen_bit_avx512::<true, false, _>(a, b) }
}

pub(super) fn one_minus_dot_halves_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    1.0 - unsafe { sixteen_bit_avx512::<false, false, _>(a, b) }
}

/// Installed only where AVX-512 BF16 was detected (beside AVX-512F).
pub(super) fn one_minus_dot_bf16_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX-512F and AVX-512 BF16 were detected.
    1.0 - unsafe { dot_bf16_pair_avx512(a, b) }
}

pub(super) fn l2sq_f16_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    unsafe { sixteen_bit_avx512::<true, true, _>(a, b) }
}

pub(super) fn one_minus_dot_f16_pair_avx512(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    1.0 - unsafe { sixteen_bit_avx512::<false, true, _>(a, b) }
}

// The AVX2 pair wrappers are installed only where AVX2, FMA and F16C were all detected.

pub(super) fn l2sq_halves_pair_avx2(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    unsafe { sixteen_bit_pair_avx2::<true, false>(a, b) }
}

pub(super) fn one_minus_dot_halves_pair_avx2(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    1.0 - unsafe { sixteen_bit_pair_avx2::<false, false>(a, b) }
}

pub(super) fn l2sq_f16_pair_avx2(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    unsafe { sixteen_bit_pair_avx2::<true, true>(a, b) }
}

pub(super) fn one_minus_dot_f16_pair_avx2(a: &[u16], b: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    1.0 - unsafe { sixteen_bit_pair_avx2::<false, true>(a, b) }
}

pub(super) fn l2sq_halves_avx2(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX2 + FMA were detected.
    unsafe { halves_avx2::<true>(a, h) }
}

pub(super) fn one_minus_dot_halves_avx2(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX2 + FMA were detected.
    1.0 - unsafe { halves_avx2::<false>(a, h) }
}

pub(super) fn l2sq_halves_batch_avx512(a: &[f32], h: [&[u16]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { halves_batch_avx512::<true>(a, h) }
}

pub(super) fn one_minus_dot_halves_batch_avx512(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { halves_batch_avx512::<false>(a, h) }.map(|d| 1.0 - d)
}

pub(super) fn l2sq_halves_batch_avx2(a: &[f32], h: [&[u16]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2 + FMA were detected; `walk_many` checked the lengths.
    unsafe { halves_batch_avx2::<true>(a, h) }
}

pub(super) fn one_minus_dot_halves_batch_avx2(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2 + FMA were detected; `walk_many` checked the lengths.
    unsafe { halves_batch_avx2::<false>(a, h) }.map(|d| 1.0 - d)
}

// The half-precision wrappers: installed only by `with_level` after runtime detection (AVX2
// ones only where F16C was detected too), and `walk_many` checks every batch length first.

pub(super) fn l2sq_f16_avx512(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    unsafe { sixteen_bit_avx512::<true, true, _>(a, h) }
}

pub(super) fn one_minus_dot_f16_avx512(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX-512F was detected.
    1.0 - unsafe { sixteen_bit_avx512::<false, true, _>(a, h) }
}

pub(super) fn l2sq_f16_avx2(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    unsafe { f16_avx2::<true>(a, h) }
}

pub(super) fn one_minus_dot_f16_avx2(a: &[f32], h: &[u16]) -> f32 {
    // SAFETY: AVX2, FMA and F16C were detected.
    1.0 - unsafe { f16_avx2::<false>(a, h) }
}

pub(super) fn l2sq_f16_batch_avx512(a: &[f32], h: [&[u16]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { f16_batch_avx512::<true>(a, h) }
}

pub(super) fn one_minus_dot_f16_batch_avx512(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { f16_batch_avx512::<false>(a, h) }.map(|d| 1.0 - d)
}

pub(super) fn l2sq_f16_batch_avx2(a: &[f32], h: [&[u16]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2, FMA and F16C were detected; `walk_many` checked the lengths.
    unsafe { f16_batch_avx2::<true>(a, h) }
}

pub(super) fn one_minus_dot_f16_batch_avx2(
    a: &[f32],
    h: [&[u16]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2, FMA and F16C were detected; `walk_many` checked the lengths.
    unsafe { f16_batch_avx2::<false>(a, h) }.map(|d| 1.0 - d)
}

// The batch wrappers, like the single ones below, are installed only by `with_level`
// after runtime detection, and `Distance::walk_many` checks every length first.

pub(super) fn l2sq_batch_avx512(a: &[f32], b: [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { batch_avx512::<true>(a, b) }
}

pub(super) fn one_minus_dot_batch_avx512(
    a: &[f32],
    b: [&[f32]; BATCH_WIDTH],
) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX-512F was detected; `walk_many` checked the lengths.
    unsafe { batch_avx512::<false>(a, b) }.map(|d| 1.0 - d)
}

pub(super) fn l2sq_batch_avx2(a: &[f32], b: [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2 + FMA were detected; `walk_many` checked the lengths.
    unsafe { batch_avx2::<true>(a, b) }
}

pub(super) fn one_minus_dot_batch_avx2(a: &[f32], b: [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // SAFETY: AVX2 + FMA were detected; `walk_many` checked the lengths.
    unsafe { batch_avx2::<false>(a, b) }.map(|d| 1.0 - d)
}

// The safe wrappers below are only ever installed in a `Distance` by `with_level`, which
// checks `SimdLevel::available()` (runtime CPU detection) first.

pub(super) fn l2sq_avx2(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: installed only after AVX2 + FMA were detected (see `Distance::with_level`).
    unsafe { kernel_avx2::<true>(a, b) }
}

pub(super) fn one_minus_dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: installed only after AVX2 + FMA were detected.
    1.0 - unsafe { kernel_avx2::<false>(a, b) }
}

pub(super) fn l2sq_avx512(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: installed only after AVX-512F was detected.
    unsafe { kernel_avx512::<true>(a, b) }
}

pub(super) fn one_minus_dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: installed only after AVX-512F was detected.
    1.0 - unsafe { kernel_avx512::<false>(a, b) }
}

/// Four vectors folded into one whose 128-bit lane k holds four partial sums of `v[k]`:
/// 128-bit lanes of pairs of vectors added (two shuffles and an add per pair), then again
/// across the pairs. The first step of [`hsum512_x4`] and [`hsum512_x8`].
#[inline]
#[target_feature(enable = "avx512f")]
fn fold512_x4(v: [__m512; 4]) -> __m512 {
    // [a0+a2, a1+a3, b0+b2, b1+b3] by 128-bit lanes, for (v0, v1) and (v2, v3).
    let pair = |a, b| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
        )
    };
    let (s01, s23) = (pair(v[0], v[1]), pair(v[2], v[3]));
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0b10_00_10_00>(s01, s23),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(s01, s23),
    )
}

/// The sums of the 16 lanes of each of four vectors, reduced together ([`fold512_x4`]),
/// then the four values left in each 128-bit lane.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn hsum512_x4(v: [__m512; 4]) -> [f32; 4] {
    let u = fold512_x4(v);
    let u = _mm512_add_ps(u, _mm512_permute_ps::<0b10_11_00_01>(u));
    let u = _mm512_add_ps(u, _mm512_permute_ps::<0b01_00_11_10>(u));
    let mut out = [0f32; 16];
    // SAFETY: `out` holds 16 f32, an unaligned store's 64 bytes.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), u) };
    [out[0], out[4], out[8], out[12]]
}

/// The sums of the 16 lanes of each of eight vectors: each half folded as [`hsum512_x4`]
/// folds four, then the two halves' 128-bit lanes interleaved and folded: 23 shuffles and
/// adds where eight separate reductions take 64.
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum512_x8(v: [__m512; BATCH_WIDTH]) -> [f32; BATCH_WIDTH] {
    // 128-bit lane k: four partial sums of v[k] (low) and of v[k + 4] (high).
    let low = fold512_x4([v[0], v[1], v[2], v[3]]);
    let high = fold512_x4([v[4], v[5], v[6], v[7]]);
    // Lane k: [v[k] 0+2, v[k+4] 0+2, v[k] 1+3, v[k+4] 1+3], then both halves added.
    let u = _mm512_add_ps(_mm512_unpacklo_ps(low, high), _mm512_unpackhi_ps(low, high));
    let u = _mm512_add_ps(u, _mm512_permute_ps::<0b01_00_11_10>(u));
    let mut out = [0f32; 16];
    // SAFETY: `out` holds 16 f32, an unaligned store's 64 bytes.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), u) };
    [
        out[0], out[4], out[8], out[12], out[1], out[5], out[9], out[13],
    ]
}
