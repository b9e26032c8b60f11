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

/// The shortest vectors scored in batches. Measured in searches (docs/PERFORMANCE.md): at 384
/// and 1,536 dimensions batches are 8% and 23% faster; at 128 (two cache lines a vector,
/// where the eight horizontal sums cost as much as the products) 3% slower.
pub const BATCH_MIN_DIMS: usize = 256;

/// How many spreads of a code's error a likely bound allows ([`Distance::code_likely_bound`])
/// for cosine and inner product, whose spread is the query's own: at 3, under 0.2% of codes
/// would fall below it if their errors were normally distributed; measured on pypi-minilm and
/// synthetic data to lose no recall (docs/PERFORMANCE.md, "Codes").
pub const LIKELY_Z: f32 = 3.0;

/// [`LIKELY_Z`] for squared L2, whose spread is estimated from ‖q − v̂‖ as if every
/// dimension's step were equal (the values of q − v̂ aren't at hand), so it gets more margin.
/// Measured on 1M x 128 (L2, int4) at ef 96: recall 0.9448 at 3 and 0.9473 at 4, against
/// 0.9474 ranking every found vector exactly (docs/PERFORMANCE.md, "Codes").
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
    /// (docs/PERFORMANCE.md, "Codes"). NaN gives NaN, which nothing is skipped on account of.
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
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn every_kernel_matches_the_scalar_reference_at_every_length() {
        let levels = SimdLevel::available();
        assert!(levels.contains(&SimdLevel::Portable));
        for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            for &level in &levels {
                let d = Distance::with_level(metric, level);
                assert_eq!(d.level(), level);
                for n in 0..=300 {
                    let a = data(n, n as u64 + 1);
                    let b = data(n, n as u64 + 1000);
                    let want = reference::distance(metric, &a, &b);
                    let got = d.eval(&a, &b);
                    let tol = 1e-4 * (1.0 + want.abs()) * (1.0 + n as f32).sqrt();
                    assert!(
                        (got - want).abs() <= tol,
                        "{metric:?} {level:?} n={n}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn aligned_vectors_start_a_cache_line_and_keep_every_value() {
        for n in [0usize, 1, 15, 16, 17, 384, 1000] {
            let v = data(n, 7);
            let a = AlignedVector::new(&v);
            assert_eq!(&a[..], &v[..]);
            assert_eq!(a.as_ptr() as usize % 64, 0, "length {n}");
        }
    }

    #[test]
    fn batches_match_the_scalar_reference_at_every_length_and_count() {
        for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            for level in SimdLevel::available() {
                let d = Distance::with_level(metric, level);
                for n in (0..40).chain([127, 128, 129, 383, 384, 1536]) {
                    let a = data(n, 1);
                    let vs: Vec<Vec<f32>> = (0..19).map(|j| data(n, 100 + j)).collect();
                    for count in 0..vs.len() {
                        let refs: Vec<VectorRef> =
                            vs[..count].iter().map(|v| VectorRef::F32(v)).collect();
                        let mut out = vec![f32::NAN; count + 1];
                        d.walk_many(&a, &refs, &mut out);
                        for (j, v) in vs[..count].iter().enumerate() {
                            let want = reference::distance(metric, &a, v);
                            let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                            assert!(
                                (out[j] - want).abs() <= tol,
                                "{metric:?} {level:?} n={n} count={count} j={j}: {} vs {want}",
                                out[j]
                            );
                        }
                        assert!(out[count].is_nan(), "wrote past the batch");
                    }
                }
            }
        }
    }

    /// `v` stored split in halves: the high halves, then the low ones.
    fn split(v: &[f32]) -> Vec<u16> {
        let mut bytes = vec![0u8; 4 * v.len()];
        crate::format::vector::encode(
            crate::format::vector::VectorLayout::SplitHalves,
            v,
            &mut bytes,
        );
        bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    #[test]
    fn walking_split_vectors_scores_their_high_halves_and_exact_joins_them() {
        for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            for level in SimdLevel::available() {
                let d = Distance::with_level(metric, level);
                for n in (0..40).chain([255, 256, 257, 300, 384, 1536]) {
                    let a = data(n, 3);
                    let vs: Vec<Vec<f32>> = (0..11).map(|j| data(n, 200 + j)).collect();
                    let halves: Vec<Vec<u16>> = vs.iter().map(|v| split(v)).collect();
                    let refs: Vec<VectorRef> = halves
                        .iter()
                        .map(|h| VectorRef::Split(crate::format::vector::Halves::side_by_side(h)))
                        .collect();
                    let mut out = vec![f32::NAN; refs.len() + 1];
                    d.walk_many(&a, &refs, &mut out);
                    assert!(out[refs.len()].is_nan(), "wrote past the batch");
                    let mut buf = Vec::new();
                    for (j, (v, r)) in vs.iter().zip(&refs).enumerate() {
                        let truncated: Vec<f32> = v
                            .iter()
                            .map(|x| f32::from_bits(x.to_bits() & 0xFFFF_0000))
                            .collect();
                        let want = reference::distance(metric, &a, &truncated);
                        let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                        let one = d.walk(&a, *r);
                        assert!(
                            (one - want).abs() <= tol && (out[j] - want).abs() <= tol,
                            "{metric:?} {level:?} n={n} j={j}: {one} / {} vs {want}",
                            out[j]
                        );
                        let exact = reference::distance(metric, &a, v);
                        let got = d.exact(&a, *r, &mut buf);
                        assert!((got - exact).abs() <= tol, "exact {got} vs {exact}");
                        assert_eq!(d.exact(&a, VectorRef::F32(v), &mut buf), d.eval(&a, v));
                    }
                }
            }
        }
    }

    /// Fails if a pair kernel (two split vectors' high halves, bfloat16 products included, or
    /// two half-float vectors) mislays a value at some length, or if `between` on any other
    /// pair differs from decoding one side and walking to the other.
    #[test]
    fn between_two_stored_vectors_matches_the_reference_at_every_length() {
        use crate::format::vector::{from_f16, to_f16};
        for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            for level in SimdLevel::available() {
                let d = Distance::with_level(metric, level);
                for n in (0..40).chain([63, 64, 65, 127, 128, 129, 255, 256, 384, 1536]) {
                    let (a, b) = (data(n, 11), data(n, 12));
                    let tol = |want: f32| 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                    let high = |v: &[f32]| -> Vec<f32> {
                        v.iter()
                            .map(|x| f32::from_bits(x.to_bits() & 0xFFFF_0000))
                            .collect()
                    };
                    let (sa, sb) = (split(&a), split(&b));
                    let got = d.between(
                        VectorRef::Split(crate::format::vector::Halves::side_by_side(&sa)),
                        VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb)),
                    );
                    let want = reference::distance(metric, &high(&a), &high(&b));
                    let direct = d.pairs_directly(VectorRef::Split(
                        crate::format::vector::Halves::side_by_side(&sa),
                    ));
                    // Without a pair kernel, one side is decoded exactly.
                    let want = if direct {
                        want
                    } else {
                        reference::distance(metric, &a, &high(&b))
                    };
                    assert!(
                        (got - want).abs() <= tol(want),
                        "{metric:?} {level:?} n={n} split: {got} vs {want}"
                    );
                    let (ha, hb): (Vec<u16>, Vec<u16>) = (
                        a.iter().map(|&x| to_f16(x)).collect(),
                        b.iter().map(|&x| to_f16(x)).collect(),
                    );
                    let wide = |h: &[u16]| -> Vec<f32> { h.iter().map(|&x| from_f16(x)).collect() };
                    let got = d.between(VectorRef::F16(&ha), VectorRef::F16(&hb));
                    let want = reference::distance(metric, &wide(&ha), &wide(&hb));
                    assert!(
                        (got - want).abs() <= tol(want),
                        "{metric:?} {level:?} n={n} f16: {got} vs {want}"
                    );
                    let got = d.between(
                        VectorRef::F32(&a),
                        VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb)),
                    );
                    assert_eq!(
                        got,
                        d.walk(
                            &a,
                            VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb))
                        )
                    );
                }
            }
        }
    }

    /// Fails if a half-float kernel (one vector or a batch) mislays a value at some length:
    /// the 64-value steps, the 16-value steps and the scalar tail all meet the reference.
    #[test]
    fn walking_half_floats_scores_their_values_at_every_length() {
        use crate::format::vector::{from_f16, to_f16};
        for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            for level in SimdLevel::available() {
                let d = Distance::with_level(metric, level);
                for n in (0..40).chain([63, 64, 65, 127, 128, 255, 256, 257, 384, 1536]) {
                    let a = data(n, 5);
                    let vs: Vec<Vec<u16>> = (0..9)
                        .map(|j| data(n, 300 + j).iter().map(|&x| to_f16(x)).collect())
                        .collect();
                    let refs: Vec<VectorRef> = vs.iter().map(|h| VectorRef::F16(h)).collect();
                    let mut out = vec![f32::NAN; refs.len()];
                    d.walk_many(&a, &refs, &mut out);
                    for (j, (h, r)) in vs.iter().zip(&refs).enumerate() {
                        let wide: Vec<f32> = h.iter().map(|&x| from_f16(x)).collect();
                        let want = reference::distance(metric, &a, &wide);
                        let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                        let one = d.walk(&a, *r);
                        assert!(
                            (one - want).abs() <= tol && (out[j] - want).abs() <= tol,
                            "{metric:?} {level:?} n={n} j={j}: {one} / {} vs {want}",
                            out[j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn identical_vectors_are_at_distance_zero() {
        let a = data(384, 7);
        let d = Distance::new(Metric::L2Squared);
        assert_eq!(d.eval(&a, &a), 0.0);
        let norm = reference::dot(&a, &a).sqrt();
        let u: Vec<f32> = a.iter().map(|x| x / norm).collect();
        assert!(Distance::new(Metric::Cosine).eval(&u, &u).abs() < 1e-5);
    }

    #[test]
    fn metric_names_parse_back() {
        for m in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
            assert_eq!(Metric::parse(m.name()), Some(m));
        }
        assert_eq!(Metric::parse("manhattan"), None);
    }

    /// Fails if the integer code kernels read past a code, mislay a dimension (int4's even and
    /// odd halves, a short last block or step) or sum other than exactly (AVX2's 16-bit pairs
    /// saturating included): at every length, for int8 and int4 codes under both metrics each
    /// kernel serves, each of a batch must equal the scalar integer reference; and their error
    /// must stay a small part of int8's proved margin ‖q‖·ε (the reason for 13- and 14-bit
    /// weights: at 8 bits it was several times the margin). Every code value at its largest
    /// (255, 15) meets the largest weights, where AVX2's 16-bit pairs would saturate first; a
    /// query far outside the codebook's range gives large terms that cancel.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn integer_code_kernels_match_their_reference_at_every_length() {
        let mut kernels: Vec<(&str, IntegerKernel)> = Vec::new();
        if Distance::with_level(Metric::Cosine, SimdLevel::Avx2Fma).has_integer_kernels() {
            kernels.push(("avx2", x86::integer_codes_avx2));
        }
        if Distance::with_level(Metric::Cosine, SimdLevel::Avx512).has_integer_kernels()
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
        {
            kernels.push(("avx512 vnni", x86::integer_codes));
        }
        for n in 1..300 {
            for kind in [CodeKind::Int8, CodeKind::Int4] {
                let train: Vec<Vec<f32>> = (0..16).map(|t| data(n, 500 + t)).collect();
                let book = Codebook::train(kind, n, train.iter().map(|t| t.as_slice()));
                // Codes exactly as long as their values (no padding) to catch overreads.
                let mut codes: Vec<Vec<u8>> = (0..BATCH_WIDTH as u64)
                    .map(|j| {
                        let mut c = vec![0u8; kind.code_bytes(n as u32) as usize];
                        book.encode(&data(n, 900 + j), &mut c);
                        c.truncate(kind.packed_bytes(n as u32));
                        c
                    })
                    .collect();
                codes[0].fill(0xff);
                codes[1].fill(0);
                let group: [&[u8]; BATCH_WIDTH] = std::array::from_fn(|j| codes[j].as_slice());
                let far: Vec<f32> = data(n, 78).iter().map(|x| 40.0 * x.signum()).collect();
                for q in [unit(&data(n, 77)), far] {
                    for l2 in [false, true] {
                        for &(name, kernel) in &kernels {
                            let mut coded = CodedQuery::default();
                            if !coded.prepare(&q, &book, l2) {
                                assert!(l2 && kind == CodeKind::Int8, "{kind:?} n={n}");
                                continue;
                            }
                            let got = kernel(&coded, group);
                            for (g, c) in got.iter().zip(&codes) {
                                let want = coded.score_scalar(c);
                                // f32 rounding of the terms, which the far query makes large
                                // and which cancel to `want`.
                                let size = 1.0 + want.abs() + coded.constant.abs();
                                assert!(
                                    (g - want).abs() <= 1e-5 * size,
                                    "{name} {kind:?} l2={l2} n={n}: {g} against {want}"
                                );
                            }
                        }
                    }
                }
                let q = unit(&data(n, 77));
                let mut coded = CodedQuery::default();
                if kind == CodeKind::Int8 && n >= 32 && coded.prepare(&q, &book, false) {
                    let mut c = vec![0u8; kind.code_bytes(n as u32) as usize];
                    let (eps, _) = book.encode(&data(n, 901), &mut c);
                    let margin = eps; // ‖q‖ = 1
                    assert!(
                        coded.error_for(&book) < 0.05 * margin,
                        "n={n}: error {} against margin {margin}",
                        coded.error_for(&book)
                    );
                }
            }
        }
        // A non-finite query makes every distance NaN, which no bound is below.
        let book = Codebook::train(CodeKind::Int4, 8, [data(8, 1).as_slice()]);
        let mut coded = CodedQuery::default();
        let mut q = data(8, 2);
        q[3] = f32::NAN;
        assert!(coded.prepare(&q, &book, false));
        assert!(coded.error_for(&book).is_nan());
        for &(name, kernel) in &kernels {
            assert!(
                kernel(&coded, [&[0u8; 4][..]; BATCH_WIDTH])[0].is_nan(),
                "{name}"
            );
        }
    }

    /// Unit length as the writer makes it for cosine (norm in f64, divided in f32).
    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = reference::dot(v, v).sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    proptest::proptest! {
        /// Fails if a search could skip ranking a vector that belongs among the nearest k by
        /// its code: the bound must stay at or below the exact distance as computed, at every
        /// kernel level (single and batched), for near and far vectors, inside and outside the
        /// codebook's trained range, at any scale and offset, inner product unnormalised too.
        #[test]
        fn code_lower_bound_never_exceeds_the_exact_distance(
            n in 1usize..320,
            seed in 0u64..1_000_000,
            scale_exp in -20i32..20,
            offset in -8.0f32..8.0,
            near in 0.0f32..1.0,
            outside in 0.0f32..4.0,
            int4 in proptest::bool::ANY,
        ) {
            let kind = if int4 { CodeKind::Int4 } else { CodeKind::Int8 };
            let scale = 2f32.powi(scale_exp);
            let q: Vec<f32> = data(n, seed).iter().map(|x| (x + offset) * scale).collect();
            let other = data(n, seed + 7);
            // Trained on vectors around q; v may fall outside the trained range (clamped).
            let train: Vec<Vec<f32>> = (0..8)
                .map(|t| data(n, seed + 100 + t).iter().zip(&q).map(|(a, b)| b + a * scale).collect())
                .collect();
            let v: Vec<f32> = q
                .iter()
                .zip(&other)
                .map(|(a, b)| a + (near * near + outside) * (b + offset) * scale)
                .collect();
            let (qu, vu) = (unit(&q), unit(&v));
            let train_u: Vec<Vec<f32>> = train.iter().map(|t| unit(t)).collect();
            for level in SimdLevel::available() {
                for (metric, q, v, train) in [
                    (Metric::L2Squared, &q, &v, &train),
                    (Metric::Cosine, &qu, &vu, &train_u),
                    (Metric::InnerProduct, &qu, &vu, &train_u),
                    (Metric::InnerProduct, &q, &v, &train),
                ] {
                    let d = Distance::with_level(metric, level);
                    let book = Codebook::train(kind, n, train.iter().map(|t| t.as_slice()));
                    let mut code = vec![0u8; kind.code_bytes(n as u32) as usize];
                    let (eps, norm) = book.encode(v, &mut code);
                    let r = VectorRef::Code(&code, &book);
                    let walked = d.walk(q, r);
                    let mut walked_many = [0.0f32; 3];
                    d.walk_many(q, &[r, r, r], &mut walked_many);
                    let exact = d.exact(q, VectorRef::F32(v), &mut Vec::new());
                    let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                    // Every kernel computes the distance to what the code stands for.
                    let decoded = book.decode_code(&code);
                    let want = reference::distance(metric, q, &decoded);
                    let size = q_norm + decoded.iter().map(|x| x * x).sum::<f32>().sqrt();
                    for w in [walked, walked_many[0], walked_many[2]] {
                        proptest::prop_assert!(
                            (w - want).abs() <= 1e-4 * (1.0 + size * size),
                            "{metric:?} {level:?} n={n}: walked {w}, decoded {want}"
                        );
                    }
                    // A search's batches (the integer kernels where the CPU has them) are
                    // within the prepared query's error of the same, and the bound less that
                    // error still holds.
                    let mut coded = CodedQuery::default();
                    let mut walked_batch = [0.0f32; 3];
                    d.walk_batch(q, &mut coded, &[r, r, r], &mut walked_batch);
                    let q_error = coded.error_for(&book);
                    proptest::prop_assert!(d.has_integer_kernels() || q_error == 0.0);
                    for w in walked_batch {
                        proptest::prop_assert!(
                            (w - want).abs() <= q_error + 1e-4 * (1.0 + size * size),
                            "{metric:?} {level:?} n={n}: batch {w}, decoded {want}, error {q_error}"
                        );
                    }
                    // Without the integer kernels (a CPU without AVX2), a search's
                    // batches are walk_many's and carry no error.
                    let mut plain = CodedQuery::default();
                    let mut walked_plain = [0.0f32; 3];
                    d.without_integer_kernels()
                        .walk_batch(q, &mut plain, &[r, r, r], &mut walked_plain);
                    proptest::prop_assert_eq!(walked_plain, walked_many);
                    proptest::prop_assert_eq!(plain.error_for(&book), 0.0);
                    let batched = walked_batch.map(|w| w - q_error);
                    for w in [walked, walked_many[0], walked_many[2]].into_iter().chain(batched) {
                        let bound = d.code_lower_bound(q_norm, w, eps, norm, book.lo_norm(), n);
                        proptest::prop_assert!(
                            bound <= exact,
                            "{metric:?} {level:?} n={n}: bound {bound} > exact {exact} (walked {w}, eps {eps})"
                        );
                    }
                }
            }
        }

        /// Fails if a search could skip ranking a vector that belongs among the nearest k:
        /// the bound must stay at or below the exact distance as computed, at every kernel
        /// level, for near neighbors (where rounding and truncation matter most), at any
        /// scale and offset, and with every value cut as far as truncation can cut it.
        #[test]
        fn exact_lower_bound_never_exceeds_the_exact_distance(
            n in 1usize..320,
            seed in 0u64..1_000_000,
            scale_exp in -30i32..30,
            offset in -8.0f32..8.0,
            near in 0.0f32..1.0,
            cut_most in proptest::bool::ANY,
        ) {
            let scale = 2f32.powi(scale_exp);
            let q: Vec<f32> = data(n, seed).iter().map(|x| (x + offset) * scale).collect();
            let other = data(n, seed + 7);
            let mut v: Vec<f32> = q
                .iter()
                .zip(&other)
                .map(|(a, b)| a + near * near * (b + offset) * scale)
                .collect();
            if cut_most {
                // Low halves all ones: each value as far from its high half as it can be.
                v.iter_mut().for_each(|x| *x = f32::from_bits(x.to_bits() | 0xFFFF));
            }
            let (qu, vu) = (unit(&q), unit(&v));
            for level in SimdLevel::available() {
                for (metric, q, v) in [
                    (Metric::L2Squared, &q, &v),
                    (Metric::Cosine, &qu, &vu),
                    (Metric::InnerProduct, &qu, &vu),
                ] {
                    let d = Distance::with_level(metric, level);
                    let halves = split(v);
                    let r = VectorRef::Split(crate::format::vector::Halves::side_by_side(&halves));
                    let walked = d.walk(q, r);
                    let mut walked_many = [0.0f32];
                    d.walk_many(q, &[r], &mut walked_many);
                    let exact = d.exact(q, r, &mut Vec::new());
                    let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                    for w in [walked, walked_many[0]] {
                        let bound = d.exact_lower_bound(q_norm, w, n);
                        proptest::prop_assert!(
                            bound <= exact,
                            "{metric:?} {level:?} n={n}: bound {bound} > exact {exact} (walked {w})"
                        );
                    }
                }
            }
        }
    }

    /// Fails if the bound grows so loose that ranking would read every vector found again.
    #[test]
    fn exact_lower_bound_is_tight_enough_to_skip_ranking() {
        let l2 = Distance::new(Metric::L2Squared);
        // ‖q − v̂‖ = 10 and ‖q‖ = 10: ‖q − v‖ ≥ 10 − 2⁻⁷·20 (less slack).
        let b = l2.exact_lower_bound(10.0, 100.0, 128);
        assert!(b > 96.0 && b < 100.0, "{b}");
        let cos = Distance::new(Metric::Cosine);
        let b = cos.exact_lower_bound(1.0, 0.5, 1536);
        assert!(b > 0.49 && b < 0.5, "{b}");
        let ip = Distance::new(Metric::InnerProduct);
        assert_eq!(ip.exact_lower_bound(1.0, 0.5, 384), f32::NEG_INFINITY);
        // NaN in, and the bound is NaN or 0: never above a distance.
        for d in [&l2, &cos] {
            for b in [
                d.exact_lower_bound(f32::NAN, 1.0, 8),
                d.exact_lower_bound(1.0, f32::NAN, 8),
            ] {
                assert!(b.is_nan() || b == 0.0, "{b}");
            }
        }
    }
}
