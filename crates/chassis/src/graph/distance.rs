//! Distance kernels: squared L2, cosine and inner product, with SIMD chosen once at run time.
//!
//! Distances are "smaller is nearer": squared L2 is Σ(aᵢ − bᵢ)²; cosine and inner product are
//! 1 − ⟨a, b⟩ (for cosine the index stores unit vectors and normalises queries, so this is the
//! cosine distance; for inner product it orders as hnswlib's `ip` space does).
//!
//! Kernels: AVX-512F, AVX2 + FMA, and a portable fallback written to auto-vectorise. The level
//! is detected once ([`SimdLevel::detect`]); `tests` compare every kernel with a scalar
//! reference on every length from 0 to 300.
//!
//! Stored vectors come as [`VectorRef`]s in their file's layout. A search walks the graph by
//! [`Distance::walk`]: the exact distance for f32 vectors, and for vectors split in halves the
//! distance to their high halves (each value truncated to bfloat16, half the bytes read), then
//! ranks what it found by [`Distance::exact`], as far as [`Distance::exact_lower_bound`] leaves
//! a found vector in doubt. Codes are walked by [`Distance::walk_batch`]: integer byte
//! products against a query prepared for their codebook ([`CodedQuery`]) where the CPU has
//! AVX-512 VNNI or AVX2, within a known error of the f32 code kernels [`Distance::walk`] uses.

use std::sync::OnceLock;

use crate::format::codes::{CodeKind, Codebook};
pub use crate::format::vector::VectorRef;
use crate::format::vector::{high_value, HIGH_HALF_REL_ERROR};

/// The distance a file uses, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Squared Euclidean distance.
    L2Squared,
    /// Cosine distance, 1 − cos(a, b); vectors are normalised on insert.
    Cosine,
    /// Inner product, as the distance 1 − ⟨a, b⟩.
    InnerProduct,
}

impl Metric {
    /// The short name used by the CLI and `info`: `l2`, `cosine`, `ip`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2Squared => "l2",
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "ip",
        }
    }

    /// The metric's code in a file header (docs/FORMAT.md: 0 squared L2, 1 cosine, 2 inner
    /// product).
    pub fn code(self) -> u32 {
        match self {
            Metric::L2Squared => crate::format::header::METRIC_L2_SQUARED,
            Metric::Cosine => crate::format::header::METRIC_COSINE,
            Metric::InnerProduct => crate::format::header::METRIC_INNER_PRODUCT,
        }
    }

    /// The metric a header code names; an unknown code is corruption.
    pub fn from_code(c: u32) -> crate::Result<Metric> {
        use crate::format::header;
        match c {
            header::METRIC_L2_SQUARED => Ok(Metric::L2Squared),
            header::METRIC_COSINE => Ok(Metric::Cosine),
            header::METRIC_INNER_PRODUCT => Ok(Metric::InnerProduct),
            _ => Err(crate::Error::corrupt(
                format!("unknown metric code {c}"),
                header::at::METRIC as u64,
            )),
        }
    }

    /// Parses `l2`, `cosine` or `ip` (and a few spellings of each).
    pub fn parse(s: &str) -> Option<Metric> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "l2sq" | "l2_squared" | "euclidean" => Some(Metric::L2Squared),
            "cosine" | "cos" => Some(Metric::Cosine),
            "ip" | "inner_product" | "dot" => Some(Metric::InnerProduct),
            _ => None,
        }
    }
}

/// Which instruction set the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    /// Plain Rust, auto-vectorised for the build target.
    Portable,
    /// AVX2 with FMA.
    Avx2Fma,
    /// AVX-512F.
    Avx512,
}

impl SimdLevel {
    /// The best level this CPU supports (detected once per process).
    pub fn detect() -> SimdLevel {
        static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return SimdLevel::Avx512;
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    return SimdLevel::Avx2Fma;
                }
            }
            SimdLevel::Portable
        })
    }

    /// Every level this CPU can run (for tests and benchmarks).
    pub fn available() -> Vec<SimdLevel> {
        let mut v = vec![SimdLevel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                v.push(SimdLevel::Avx2Fma);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                v.push(SimdLevel::Avx512);
            }
        }
        v
    }
}

/// One cache line of floats.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A vector whose first float starts a cache line. Queries are copied into one before a
/// search: the AVX-512 kernels load a whole line at a time, and a query at the 16-byte
/// alignment `Vec<f32>` gives splits every load across two lines (40% slower at 1,536
/// dimensions in cache; `bench/benches/kernels.rs`). Stored vectors start on a line
/// whenever 4·dims is a multiple of 64 (segments and their vector arrays are line-aligned).
pub struct AlignedVector {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedVector {
    /// A line-aligned copy of `v`.
    pub fn new(v: &[f32]) -> AlignedVector {
        let mut lines = vec![Line([0.0; 16]); v.len().div_ceil(16)];
        for (line, chunk) in lines.iter_mut().zip(v.chunks(16)) {
            line.0[..chunk.len()].copy_from_slice(chunk);
        }
        AlignedVector {
            lines,
            len: v.len(),
        }
    }
}

impl std::ops::Deref for AlignedVector {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is repr(C) `[f32; 16]`, 64 bytes with no padding, so `lines` is
        // 16 * lines.len() contiguous initialised floats, and `len <= 16 * lines.len()` by
        // construction; the slice borrows `self`, so the Vec outlives it unchanged.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl AsRef<[f32]> for AlignedVector {
    fn as_ref(&self) -> &[f32] {
        self
    }
}

impl std::fmt::Debug for AlignedVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

type Kernel = fn(&[f32], &[f32]) -> f32;

/// How many vectors a batch kernel scores side by side ([`Distance::walk_many`]).
pub const BATCH_WIDTH: usize = 8;

/// The shortest vectors scored in batches. Measured in searches (docs/performance/experiments.md): at 384
/// and 1,536 dimensions batches are 8% and 23% faster; at 128 (two cache lines a vector,
/// where the eight horizontal sums cost as much as the products) 3% slower, and with the sums
/// reduced together no faster in a 1M x 128 search and 2 to 4% slower in a build
/// (docs/decisions/0006, last addendum).
pub const BATCH_MIN_DIMS: usize = 256;

/// How many spreads of a code's error a likely bound allows ([`Distance::code_likely_bound`])
/// for cosine and inner product, whose spread is the query's own: at 3, under 0.2% of codes
/// would fall below it if their errors were normally distributed; measured on pypi-minilm and
/// synthetic data to lose no recall (docs/performance/codes.md).
pub const LIKELY_Z: f32 = 3.0;

/// [`LIKELY_Z`] for squared L2, whose spread is estimated from ‖q − v̂‖ as if every
/// dimension's step were equal (the values of q − v̂ aren't at hand), so it gets more margin.
/// Measured on 1M x 128 (L2, int4) at ef 96: recall 0.9448 at 3 and 0.9473 at 4, against
/// 0.9474 ranking every found vector exactly (docs/performance/codes.md).
pub const LIKELY_Z_L2: f32 = 4.0;

type BatchKernel = fn(&[f32], [&[f32]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH];

/// A kernel from an f32 query to the high halves of a split vector (at least as long).
type HalvesKernel = fn(&[f32], &[u16]) -> f32;

type HalvesBatchKernel = fn(&[f32], [&[u16]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH];

/// A kernel between two stored vectors of sixteen-bit values (high halves, or half floats).
type PairKernel = fn(&[u16], &[u16]) -> f32;

/// Σ qⱼ·v̂ⱼ or Σ (qⱼ − v̂ⱼ)² to the codes of [`BATCH_WIDTH`] vectors, v̂ⱼ = loⱼ + sⱼ·cⱼ:
/// (query, lo, step, codes); each code at least `query.len()` long.
type CodesKernel = fn(&[f32], &[f32], &[f32], [&[u8]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH];

/// The same to one code.
type CodeKernel = fn(&[f32], &[f32], &[f32], &[u8]) -> f32;

/// The same sums for a query prepared for the codes' codebook ([`CodedQuery`]), by integer
/// byte products: within [`CodedQuery::error_for`] of the f32 code kernels.
type IntegerKernel = fn(&CodedQuery, [&[u8]; BATCH_WIDTH]) -> [f32; BATCH_WIDTH];

/// A metric bound to a kernel: the one function the graph calls for every distance.
#[derive(Clone, Copy)]
pub struct Distance {
    metric: Metric,
    level: SimdLevel,
    kernel: Kernel,
    /// None where scoring one vector at a time is as good (the portable level).
    batch: Option<BatchKernel>,
    halves: HalvesKernel,
    halves_batch: Option<HalvesBatchKernel>,
    /// Half-precision vectors (F16C or AVX-512F widening; portable without).
    f16: HalvesKernel,
    f16_batch: Option<HalvesBatchKernel>,
    /// Between two split vectors' high halves, and between two half-float vectors; None
    /// where the CPU has no SIMD for them (portable: one side is decoded, then walked).
    halves_pair: Option<PairKernel>,
    f16_pair: Option<PairKernel>,
    codes: CodesKernel,
    code: CodeKernel,
    /// None where the CPU lacks AVX2 (the f32 code kernels serve).
    integer: Option<IntegerKernel>,
}

impl std::fmt::Debug for Distance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distance")
            .field("metric", &self.metric)
            .field("level", &self.level)
            .finish()
    }
}

impl Distance {
    /// The metric with the best kernels for this CPU.
    pub fn new(metric: Metric) -> Distance {
        Distance::with_level(metric, SimdLevel::detect())
    }

    /// The metric with a given kernel level. A level the CPU lacks falls back to portable.
    pub fn with_level(metric: Metric, level: SimdLevel) -> Distance {
        let level = if SimdLevel::available().contains(&level) {
            level
        } else {
            SimdLevel::Portable
        };
        let kernel: Kernel = match (metric, level) {
            (Metric::L2Squared, SimdLevel::Portable) => portable::l2sq,
            (_, SimdLevel::Portable) => portable::one_minus_dot,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => x86::l2sq_avx2,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => x86::one_minus_dot_avx2,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => x86::l2sq_avx512,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => x86::one_minus_dot_avx512,
            #[cfg(not(target_arch = "x86_64"))]
            (Metric::L2Squared, _) => portable::l2sq,
            #[cfg(not(target_arch = "x86_64"))]
            (_, _) => portable::one_minus_dot,
        };
        let batch: Option<BatchKernel> = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => Some(x86::l2sq_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => Some(x86::one_minus_dot_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => Some(x86::l2sq_batch_avx512),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => Some(x86::one_minus_dot_batch_avx512),
            _ => None,
        };
        let halves: HalvesKernel = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => x86::l2sq_halves_avx2,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => x86::one_minus_dot_halves_avx2,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => x86::l2sq_halves_avx512,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => x86::one_minus_dot_halves_avx512,
            (Metric::L2Squared, _) => portable::l2sq_halves,
            (_, _) => portable::one_minus_dot_halves,
        };
        let halves_batch: Option<HalvesBatchKernel> = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => Some(x86::l2sq_halves_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => Some(x86::one_minus_dot_halves_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => Some(x86::l2sq_halves_batch_avx512),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => Some(x86::one_minus_dot_halves_batch_avx512),
            _ => None,
        };
        // F16C came with AVX2 on every CPU we know of, but it is its own feature: checked.
        #[cfg(target_arch = "x86_64")]
        let f16c = std::arch::is_x86_feature_detected!("f16c");
        let f16: HalvesKernel = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) if f16c => x86::l2sq_f16_avx2,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) if f16c => x86::one_minus_dot_f16_avx2,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => x86::l2sq_f16_avx512,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => x86::one_minus_dot_f16_avx512,
            (Metric::L2Squared, _) => portable::l2sq_f16,
            (_, _) => portable::one_minus_dot_f16,
        };
        let f16_batch: Option<HalvesBatchKernel> = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) if f16c => Some(x86::l2sq_f16_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) if f16c => Some(x86::one_minus_dot_f16_batch_avx2),
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => Some(x86::l2sq_f16_batch_avx512),
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => Some(x86::one_minus_dot_f16_batch_avx512),
            _ => None,
        };
        let (halves_pair, f16_pair): (Option<PairKernel>, Option<PairKernel>) =
            match (metric, level) {
                #[cfg(target_arch = "x86_64")]
                (Metric::L2Squared, SimdLevel::Avx512) => (
                    Some(x86::l2sq_halves_pair_avx512),
                    Some(x86::l2sq_f16_pair_avx512),
                ),
                // High halves are bfloat16 values: AVX-512 BF16 multiplies them as they are.
                #[cfg(target_arch = "x86_64")]
                (_, SimdLevel::Avx512) if std::arch::is_x86_feature_detected!("avx512bf16") => (
                    Some(x86::one_minus_dot_bf16_pair_avx512),
                    Some(x86::one_minus_dot_f16_pair_avx512),
                ),
                #[cfg(target_arch = "x86_64")]
                (_, SimdLevel::Avx512) => (
                    Some(x86::one_minus_dot_halves_pair_avx512),
                    Some(x86::one_minus_dot_f16_pair_avx512),
                ),
                #[cfg(target_arch = "x86_64")]
                (Metric::L2Squared, SimdLevel::Avx2Fma) if f16c => (
                    Some(x86::l2sq_halves_pair_avx2),
                    Some(x86::l2sq_f16_pair_avx2),
                ),
                #[cfg(target_arch = "x86_64")]
                (_, SimdLevel::Avx2Fma) if f16c => (
                    Some(x86::one_minus_dot_halves_pair_avx2),
                    Some(x86::one_minus_dot_f16_pair_avx2),
                ),
                _ => (None, None),
            };
        let codes: CodesKernel = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => x86::l2sq_codes_avx2,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => x86::dot_codes_avx2,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => x86::l2sq_codes_avx512,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => x86::dot_codes_avx512,
            (Metric::L2Squared, _) => portable::codes::<true, BATCH_WIDTH>,
            (_, _) => portable::codes::<false, BATCH_WIDTH>,
        };
        let code: CodeKernel = match (metric, level) {
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx2Fma) => x86::l2sq_code_avx2,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx2Fma) => x86::dot_code_avx2,
            #[cfg(target_arch = "x86_64")]
            (Metric::L2Squared, SimdLevel::Avx512) => x86::l2sq_code_avx512,
            #[cfg(target_arch = "x86_64")]
            (_, SimdLevel::Avx512) => x86::dot_code_avx512,
            (Metric::L2Squared, _) => |q, lo, s, c| portable::codes::<true, 1>(q, lo, s, [c])[0],
            (_, _) => |q, lo, s, c| portable::codes::<false, 1>(q, lo, s, [c])[0],
        };
        let integer: Option<IntegerKernel> = match level {
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512
                if std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni") =>
            {
                Some(x86::integer_codes)
            }
            // AVX-512 without VNNI still has AVX2 (every AVX-512 CPU does).
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 | SimdLevel::Avx2Fma
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma") =>
            {
                Some(x86::integer_codes_avx2)
            }
            _ => None,
        };
        Distance {
            metric,
            level,
            kernel,
            batch,
            halves,
            halves_batch,
            f16,
            f16_batch,
            halves_pair,
            f16_pair,
            codes,
            code,
            integer,
        }
    }

    /// The same distance without the integer code kernels (for comparisons).
    pub fn without_integer_kernels(mut self) -> Distance {
        self.integer = None;
        self
    }

    /// Whether walks by codes use the integer kernels ([`Distance::walk_batch`]).
    pub fn has_integer_kernels(&self) -> bool {
        self.integer.is_some()
    }

    /// Prepares `coded` for query `q` against `book`'s codes (see [`CodedQuery::prepare`])
    /// where this distance has integer kernels; returns whether they score them. Where it has
    /// none, `coded` is left as it was, and [`CodedQuery::error_for`] gives 0 for `book` once
    /// the caller has forgotten it at the start of the search.
    pub fn prepare_coded(&self, coded: &mut CodedQuery, q: &[f32], book: &Codebook) -> bool {
        self.integer.is_some() && coded.prepare(q, book, self.metric == Metric::L2Squared)
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The kernel level in use.
    pub fn level(&self) -> SimdLevel {
        self.level
    }

    /// The distance between `a` and `b` (equal lengths).
    #[inline]
    pub fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (self.kernel)(a, b)
    }

    /// The distance a search walks the graph by, from `q` to the stored `v`: exact for an f32
    /// vector; for a split one, the distance to its high halves (each value within 2⁻⁷ of
    /// itself, relatively), which reads half the bytes; exact again (both halves joined) in a
    /// file whose data is too fine for that ([`VectorRef::SplitExact`]).
    #[inline]
    pub fn walk(&self, q: &[f32], v: VectorRef<'_>) -> f32 {
        match v {
            VectorRef::F32(b) => (self.kernel)(q, b),
            VectorRef::F16(h) => (self.f16)(q, h),
            VectorRef::Split(h) => (self.halves)(q, h.high),
            VectorRef::SplitExact(_) => JOINED.with(|buf| {
                let mut buf = buf.borrow_mut();
                v.decode_into(&mut buf);
                (self.kernel)(q, &buf)
            }),
            VectorRef::Code(c, book) if book.kind() == CodeKind::Int4 => UNPACKED.with(|buf| {
                let mut buf = buf.borrow_mut();
                buf.resize(q.len(), 0);
                book.unpack_into(c, &mut buf);
                self.finish_code((self.code)(q, book.lo(), book.step(), &buf))
            }),
            VectorRef::Code(c, book) => self.finish_code((self.code)(q, book.lo(), book.step(), c)),
        }
    }

    /// Whether [`Distance::between`] scores `v` against a stored vector of its own kind
    /// without decoding it: a split vector walked by its high halves, or a half-float one,
    /// where this CPU has the pair kernels. Otherwise a caller decodes `v` once and walks
    /// from it ([`Distance::walk`]), which is what `between` does for it.
    #[inline]
    pub fn pairs_directly(&self, v: VectorRef<'_>) -> bool {
        match v {
            VectorRef::Split(_) => self.halves_pair.is_some(),
            VectorRef::F16(_) => self.f16_pair.is_some(),
            _ => false,
        }
    }

    /// The walking distance between two stored vectors, as neighbor selection compares
    /// them: for two split vectors, between their high halves (each within 2⁻⁷ of its value,
    /// relatively, as [`Distance::walk`] takes one side); for two half-float vectors,
    /// between their values; otherwise from `a` decoded exactly to `b` by [`Distance::walk`].
    pub fn between(&self, a: VectorRef<'_>, b: VectorRef<'_>) -> f32 {
        match (a, b) {
            (VectorRef::Split(x), VectorRef::Split(y)) if x.high.len() == y.high.len() => {
                if let Some(pair) = self.halves_pair {
                    return pair(x.high, y.high);
                }
            }
            (VectorRef::F16(x), VectorRef::F16(y)) if x.len() == y.len() => {
                if let Some(pair) = self.f16_pair {
                    return pair(x, y);
                }
            }
            _ => {}
        }
        DECODED.with(|buf| {
            let mut buf = buf.borrow_mut();
            a.decode_into(&mut buf);
            self.walk(&buf, b)
        })
    }

    /// A code kernel's sum as a distance.
    #[inline]
    fn finish_code(&self, d: f32) -> f32 {
        match self.metric {
            Metric::L2Squared => d,
            _ => 1.0 - d,
        }
    }

    /// [`Distance::walk`] to each of `vs`, into `out[..vs.len()]` (the same up to rounding: a
    /// batch sums in another order). Memory, not arithmetic, bounds a search on a large file,
    /// and scoring [`BATCH_WIDTH`] vectors side by side keeps that many streams of cache lines
    /// in flight (for vectors of [`BATCH_MIN_DIMS`] and more); a short last group is padded
    /// with its own last vector, whose lines are already on their way.
    pub fn walk_many(&self, q: &[f32], vs: &[VectorRef<'_>], out: &mut [f32]) {
        self.walk_groups(q, None, vs, out);
    }

    /// [`Distance::walk_many`] for a search, which scores codes by the integer kernels where
    /// the CPU has them, with `coded` prepared from `q` for their codebook on first use (the
    /// caller forgets it when the query changes): each such distance is within
    /// [`CodedQuery::error_for`] of [`Distance::walk_many`]'s.
    pub fn walk_batch(
        &self,
        q: &[f32],
        coded: &mut CodedQuery,
        vs: &[VectorRef<'_>],
        out: &mut [f32],
    ) {
        self.walk_groups(q, Some(coded), vs, out);
    }

    fn walk_groups(
        &self,
        q: &[f32],
        mut coded: Option<&mut CodedQuery>,
        vs: &[VectorRef<'_>],
        out: &mut [f32],
    ) {
        let out = &mut out[..vs.len()];
        let batched = q.len() >= BATCH_MIN_DIMS && vs.len() > 1;
        for (group, o) in vs.chunks(BATCH_WIDTH).zip(out.chunks_mut(BATCH_WIDTH)) {
            if let Some((book, g)) = codes_group(q.len(), group) {
                if let (Some(integer), Some(coded)) = (self.integer, coded.as_deref_mut()) {
                    if self.prepare_coded(coded, q, book) {
                        for (o, d) in o.iter_mut().zip(integer(coded, g)) {
                            *o = self.finish_code(d);
                        }
                        continue;
                    }
                }
                // Codes are batched at every length: the query's terms are shared by the group.
                if group.len() > 1 {
                    let d = if book.kind() == CodeKind::Int4 {
                        // Packed codes are unpacked to a byte per value for the int8
                        // kernels: the walk reads half the bytes, the kernel the same.
                        UNPACKED.with(|buf| {
                            let mut buf = buf.borrow_mut();
                            let n = q.len();
                            buf.resize(BATCH_WIDTH * n, 0);
                            for (c, out) in g.iter().zip(buf.chunks_exact_mut(n)) {
                                book.unpack_into(c, out);
                            }
                            let mut one: [&[u8]; BATCH_WIDTH] = [&[]; BATCH_WIDTH];
                            for (o, c) in one.iter_mut().zip(buf.chunks_exact(n)) {
                                *o = c;
                            }
                            (self.codes)(q, book.lo(), book.step(), one)
                        })
                    } else {
                        (self.codes)(q, book.lo(), book.step(), g)
                    };
                    for (o, d) in o.iter_mut().zip(d) {
                        *o = self.finish_code(d);
                    }
                    continue;
                }
            }
            if batched && group.len() > 1 {
                if let (Some(batch), Some(g)) = (self.batch, f32_group(q.len(), group)) {
                    o.copy_from_slice(&batch(q, g)[..group.len()]);
                    continue;
                }
                if let (Some(batch), Some(g)) = (self.halves_batch, halves_group(q.len(), group)) {
                    o.copy_from_slice(&batch(q, g)[..group.len()]);
                    continue;
                }
                if let (Some(batch), Some(g)) = (self.f16_batch, f16_group(q.len(), group)) {
                    o.copy_from_slice(&batch(q, g)[..group.len()]);
                    continue;
                }
            }
            for (o, v) in o.iter_mut().zip(group) {
                *o = self.walk(q, *v);
            }
        }
    }

    /// A lower bound on the exact distance ([`Distance::exact`], as computed) from `q` to a
    /// split vector whose walk distance (by its high halves, as computed) is `walked`, given
    /// `q_norm` = ‖q‖: what lets a search rank by exact distance only the found vectors that
    /// could be among the nearest k. `-∞` where no bound is known.
    ///
    /// A high half v̂ keeps each value's sign, exponent and top 7 fraction bits, so every
    /// |vᵢ − v̂ᵢ| < 2⁻⁷|v̂ᵢ| and |v̂ᵢ| ≤ |vᵢ|, hence ‖v − v̂‖ ≤ 2⁻⁷‖v̂‖ ≤ 2⁻⁷‖v‖. Then:
    /// - squared L2: ‖q − v‖ ≥ ‖q − v̂‖ − ‖v − v̂‖, and ‖v̂‖ ≤ ‖q‖ + ‖q − v̂‖ (triangle);
    /// - cosine: stored vectors are unit (normalised on insert, an invariant of the writer),
    ///   so |⟨q, v⟩ − ⟨q, v̂⟩| ≤ ‖q‖‖v − v̂‖ ≤ 2⁻⁷‖q‖;
    /// - inner product: stored norms are unknown, so no bound (`-∞`: all are ranked).
    ///
    /// `slack` covers f32 rounding in the two computed distances and in ‖q‖ (each within
    /// about dims·2⁻²⁴ relatively) many times over. A NaN norm or walk distance gives NaN or
    /// 0, which no distance is below, so nothing is skipped on its account.
    pub fn exact_lower_bound(&self, q_norm: f32, walked: f32, dims: usize) -> f32 {
        let slack = 4.0 * (dims as f32 + 16.0) * f32::EPSILON;
        let c = HIGH_HALF_REL_ERROR + slack;
        match self.metric {
            Metric::L2Squared => {
                let walked_norm = walked.max(0.0).sqrt();
                let d = (walked_norm * (1.0 - c) - c * q_norm).max(0.0);
                d * d * (1.0 - 2.0 * slack)
            }
            Metric::Cosine => walked - c * q_norm - slack,
            Metric::InnerProduct => f32::NEG_INFINITY,
        }
    }

    /// A lower bound on the exact distance ([`Distance::exact`], as computed) from `q` to a
    /// vector whose walk distance by its code (as computed) is `walked`, given `q_norm` = ‖q‖,
    /// the code's error ε ≥ ‖v − v̂‖ and the vector's norm ‖v‖ (its aux record). Unlike
    /// [`Distance::exact_lower_bound`] this holds for every metric, inner product included:
    /// - squared L2: ‖q − v‖ ≥ ‖q − v̂‖ − ε (triangle);
    /// - cosine and inner product: |⟨q, v⟩ − ⟨q, v̂⟩| = |⟨q, v − v̂⟩| ≤ ‖q‖ε (Cauchy–Schwarz).
    ///
    /// `slack` covers f32 rounding in both computed distances: each sum of `dims` terms is
    /// within about dims·2⁻²⁴ of the sum of their magnitudes. The code kernels sum q·lo and
    /// q·s·c apart (or q − lo − s·c), whose magnitudes are at most ‖q‖‖lo‖ and
    /// ‖q‖(‖v‖ + ε + ‖lo‖) (`lo_norm` = ‖lo‖, the codebook's); so the slack is that many
    /// rounding steps, taken many times over, scaled by (‖q‖ + ‖v‖ + ε + 2‖lo‖)², plus a few
    /// steps of the distance's own size and of 1 (cosine and inner product end with 1 − dot,
    /// rounded at the scale of 1 however small the vectors). NaN anywhere
    /// gives NaN, which no distance is below, so nothing is skipped on its account.
    #[allow(clippy::too_many_arguments)]
    pub fn code_lower_bound(
        &self,
        q_norm: f32,
        walked: f32,
        eps: f32,
        norm: f32,
        lo_norm: f32,
        dims: usize,
    ) -> f32 {
        let scale = q_norm + norm + eps + 2.0 * lo_norm;
        let slack = 8.0 * (dims as f32 + 16.0) * f32::EPSILON * scale * scale
            + 4.0 * f32::EPSILON * (1.0 + walked.abs());
        match self.metric {
            Metric::L2Squared => {
                let d = ((walked - slack).max(0.0).sqrt() - eps).max(0.0);
                d * d - slack
            }
            Metric::Cosine | Metric::InnerProduct => walked - q_norm * eps - slack,
        }
    }

    /// A *likely* lower bound on the exact distance from `q` to a vector whose walk distance
    /// by its int4 code is `walked` and whose code's error is ε (its aux record), for codes
    /// whose proved bound ([`Distance::code_lower_bound`]) is too loose to spare anything.
    ///
    /// The code's error e = v − v̂ moves the distance by −⟨q, e⟩ (cosine, inner product) or
    /// ‖e‖² − 2⟨q − v̂, e⟩ (squared L2), and ⟨x, e⟩ is a sum of `dims` small independent terms:
    /// each eⱼ is spread over about ±sⱼ/2, so the sum's spread is about
    /// ε·√(Σ xⱼ²sⱼ² / Σ sⱼ²) ([`Distance::code_spread`] of the query, `q_spread`), or ε·‖x‖/√dims
    /// for x = q − v̂, whose values aren't at hand. The bound is the walk distance less
    /// [`LIKELY_Z`] ([`LIKELY_Z_L2`] for squared L2) such spreads: not a proof (a code whose
    /// error lines up with the query could fall below it), a margin measured to lose no recall
    /// on the harness's data
    /// (docs/performance/codes.md). NaN gives NaN, which nothing is skipped on account of.
    pub fn code_likely_bound(&self, walked: f32, eps: f32, q_spread: f32, dims: usize) -> f32 {
        match self.metric {
            Metric::L2Squared => {
                let spread = 2.0 * walked.max(0.0).sqrt() * eps / (dims.max(1) as f32).sqrt();
                walked - LIKELY_Z_L2 * spread
            }
            Metric::Cosine | Metric::InnerProduct => walked - LIKELY_Z * q_spread * eps,
        }
    }

    /// √(Σ qⱼ²sⱼ² / Σ sⱼ²) for a codebook's steps `step`: how much of ‖q‖ lines up with the
    /// dimensions whose codes err most ([`Distance::code_likely_bound`]); ‖q‖/√dims when the
    /// steps are equal, 0 when every step is 0 (no code errs inside its range).
    pub fn code_spread(q: &[f32], step: &[f32]) -> f32 {
        let (mut num, mut den) = (0f64, 0f64);
        for (&x, &s) in q.iter().zip(step) {
            let s2 = f64::from(s) * f64::from(s);
            num += f64::from(x) * f64::from(x) * s2;
            den += s2;
        }
        if den > 0.0 {
            (num / den).sqrt() as f32
        } else {
            0.0
        }
    }

    /// The exact distance from `q` to the stored `v` (a split vector is joined into `buf`
    /// first; an f32 one is read in place). A code has no exact distance: callers rank from
    /// the vector; given one, this is the distance to what it stands for.
    pub fn exact(&self, q: &[f32], v: VectorRef<'_>, buf: &mut Vec<f32>) -> f32 {
        match v {
            VectorRef::F32(b) => (self.kernel)(q, b),
            VectorRef::F16(h) => (self.f16)(q, h),
            VectorRef::Code(..) => self.walk(q, v),
            VectorRef::Split(_) | VectorRef::SplitExact(_) => {
                v.decode_into(buf);
                (self.kernel)(q, buf)
            }
        }
    }
}

thread_local! {
    /// Int4 codes unpacked to a byte per value for the code kernels.
    static UNPACKED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A split vector joined for [`Distance::walk`] in a file walked exactly.
    static JOINED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// One side of [`Distance::between`] decoded (not `JOINED`: the walk may take that).
    static DECODED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `group` as f32 slices at least `n` long, padded with its last one; `None` if any is not.
fn f32_group<'a>(n: usize, group: &[VectorRef<'a>]) -> Option<[&'a [f32]; BATCH_WIDTH]> {
    let mut out: [&[f32]; BATCH_WIDTH] = [&[]; BATCH_WIDTH];
    for (j, o) in out.iter_mut().enumerate() {
        match group.get(j).or(group.last()) {
            Some(VectorRef::F32(b)) if b.len() >= n => *o = b,
            _ => return None,
        }
    }
    Some(out)
}

/// `group` as high-half slices at least `n` long, padded with its last one; `None` if any is
/// not split or too short.
fn halves_group<'a>(n: usize, group: &[VectorRef<'a>]) -> Option<[&'a [u16]; BATCH_WIDTH]> {
    let mut out: [&[u16]; BATCH_WIDTH] = [&[]; BATCH_WIDTH];
    for (j, o) in out.iter_mut().enumerate() {
        match group.get(j).or(group.last()) {
            Some(VectorRef::Split(h)) if h.high.len() >= n => *o = h.high,
            _ => return None,
        }
    }
    Some(out)
}

/// `group` as code slices at least `n` long, padded with its last one, with their codebook;
/// `None` if any is not a code of the same codebook or too short.
fn f16_group<'a>(n: usize, group: &[VectorRef<'a>]) -> Option<[&'a [u16]; BATCH_WIDTH]> {
    let mut out: [&[u16]; BATCH_WIDTH] = [&[]; BATCH_WIDTH];
    for (i, o) in out.iter_mut().enumerate() {
        match group.get(i).or(group.last()) {
            Some(VectorRef::F16(h)) if h.len() >= n => *o = h,
            _ => return None,
        }
    }
    Some(out)
}

fn codes_group<'a>(
    n: usize,
    group: &[VectorRef<'a>],
) -> Option<(&'a Codebook, [&'a [u8]; BATCH_WIDTH])> {
    let book = match group.first() {
        Some(VectorRef::Code(_, b)) if b.dims() >= n => *b,
        _ => return None,
    };
    let mut out: [&[u8]; BATCH_WIDTH] = [&[]; BATCH_WIDTH];
    for (j, o) in out.iter_mut().enumerate() {
        match group.get(j).or(group.last()) {
            Some(VectorRef::Code(c, b))
                if c.len() >= b.kind().packed_bytes(n as u32) && std::ptr::eq(*b, book) =>
            {
                *o = c
            }
            _ => return None,
        }
    }
    Some((book, out))
}

/// Scalar reference implementations (also used by brute-force checks).
pub mod reference {
    /// Σ aᵢbᵢ, accumulated in f64.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum::<f64>() as f32
    }

    /// Σ (aᵢ − bᵢ)², accumulated in f64.
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                let d = f64::from(*x) - f64::from(*y);
                d * d
            })
            .sum::<f64>() as f32
    }

    /// The distance `metric` defines.
    pub fn distance(metric: super::Metric, a: &[f32], b: &[f32]) -> f32 {
        match metric {
            super::Metric::L2Squared => l2sq(a, b),
            _ => 1.0 - dot(a, b),
        }
    }
}

mod portable {
    const LANES: usize = 16;

    pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0f32; LANES];
        let chunks = n / LANES;
        for c in 0..chunks {
            let (x, y) = (
                &a[c * LANES..c * LANES + LANES],
                &b[c * LANES..c * LANES + LANES],
            );
            for i in 0..LANES {
                acc[i] += x[i] * y[i];
            }
        }
        let mut s: f32 = acc.iter().sum();
        for i in chunks * LANES..n {
            s += a[i] * b[i];
        }
        s
    }

    pub(super) fn one_minus_dot(a: &[f32], b: &[f32]) -> f32 {
        1.0 - dot(a, b)
    }

    /// Σ aᵢ·hᵢ or Σ (aᵢ − hᵢ)² over high halves `h`, in LANES partial sums.
    fn halves<const L2: bool>(a: &[f32], h: &[u16]) -> f32 {
        let n = a.len().min(h.len());
        let (a, h) = (&a[..n], &h[..n]);
        let mut acc = [0f32; LANES];
        let chunks = n / LANES;
        for c in 0..chunks {
            let (x, y) = (
                &a[c * LANES..c * LANES + LANES],
                &h[c * LANES..c * LANES + LANES],
            );
            for i in 0..LANES {
                let y = super::high_value(y[i]);
                acc[i] += if L2 {
                    (x[i] - y) * (x[i] - y)
                } else {
                    x[i] * y
                };
            }
        }
        let mut s: f32 = acc.iter().sum();
        for i in chunks * LANES..n {
            let y = super::high_value(h[i]);
            s += if L2 {
                (a[i] - y) * (a[i] - y)
            } else {
                a[i] * y
            };
        }
        s
    }

    pub(super) fn one_minus_dot_halves(a: &[f32], h: &[u16]) -> f32 {
        1.0 - halves::<false>(a, h)
    }

    /// Σ aᵢ·hᵢ or Σ (aᵢ − hᵢ)² over binary16 values `h`, widened exactly.
    fn f16<const L2: bool>(a: &[f32], h: &[u16]) -> f32 {
        let n = a.len().min(h.len());
        let mut acc = [0f32; LANES];
        for (i, (&x, &y)) in a[..n].iter().zip(&h[..n]).enumerate() {
            let y = crate::format::vector::from_f16(y);
            acc[i % LANES] += if L2 { (x - y) * (x - y) } else { x * y };
        }
        acc.iter().sum()
    }

    pub(super) fn one_minus_dot_f16(a: &[f32], h: &[u16]) -> f32 {
        1.0 - f16::<false>(a, h)
    }

    pub(super) fn l2sq_f16(a: &[f32], h: &[u16]) -> f32 {
        f16::<true>(a, h)
    }

    pub(super) fn l2sq_halves(a: &[f32], h: &[u16]) -> f32 {
        halves::<true>(a, h)
    }

    /// Σ qⱼ·v̂ⱼ or Σ (qⱼ − v̂ⱼ)² to each of `c`, v̂ⱼ = loⱼ + sⱼ·cⱼ (over the shortest length).
    pub(super) fn codes<const L2: bool, const W: usize>(
        q: &[f32],
        lo: &[f32],
        step: &[f32],
        c: [&[u8]; W],
    ) -> [f32; W] {
        c.map(|code| {
            let n = q.len().min(lo.len()).min(step.len()).min(code.len());
            let mut acc = [0f32; LANES];
            for (i, ((&x, &l), (&s, &b))) in q[..n]
                .iter()
                .zip(&lo[..n])
                .zip(step[..n].iter().zip(&code[..n]))
                .enumerate()
            {
                let v = s.mul_add(f32::from(b), l);
                acc[i % LANES] += if L2 { (x - v) * (x - v) } else { x * v };
            }
            acc.iter().sum()
        })
    }

    pub(super) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0f32; LANES];
        let chunks = n / LANES;
        for c in 0..chunks {
            let (x, y) = (
                &a[c * LANES..c * LANES + LANES],
                &b[c * LANES..c * LANES + LANES],
            );
            for i in 0..LANES {
                let d = x[i] - y[i];
                acc[i] += d * d;
            }
        }
        let mut s: f32 = acc.iter().sum();
        for i in chunks * LANES..n {
            let d = a[i] - b[i];
            s += d * d;
        }
        s
    }
}

mod coded_query;
pub use coded_query::CodedQuery;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
