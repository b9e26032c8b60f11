//! A study for issue 37's last lever (fewer cache lines per hop): how fast one walker goes over
//! the same graph when the codes it walks by are smaller, or stored beside each neighbor list.
//! Nothing here is in the file format; it decides what the format should get (its findings:
//! docs/decisions/0008).
//!
//! Opens a Chassis file of pypi-minilm (f32 vectors, built in row order, so slot = row; built
//! here if missing), or of another set given as `--base`, `--queries` and `--gt` files (walked
//! as cosine, so its ground truth must be cosine's: `bench/ann/fvecs.py --metric cosine`),
//! copies its graph into flat arrays, and walks it with one walker (greedy descent by exact
//! distances, then a layer-0 beam by code estimates, then the `rr` nearest estimates ranked
//! exactly by f32; visited slots in the library's bit set) over these layouts of the walk's
//! codes:
//!
//! - `int4`: today's codes (four bits a dimension, a trained range per dimension, 192 bytes at
//!   384 dimensions: three cache lines), in an array by slot: one random read per neighbor;
//! - `int4-lists`: the same codes stored beside each node's level-0 list (32 neighbors' codes
//!   after the 32 words), read from the node's block: no read elsewhere per neighbor;
//! - `bit1`: one bit a dimension (above or below the dimension's mean; each side stands for its
//!   own mean), 48 bytes: one cache line, in an array by slot;
//! - `bit1-lists`: the bits beside each node's list (1,664 bytes a node);
//! - `int4-gateM`: the `bit1-lists` estimate decides which neighbors' int4 codes are read at
//!   all (skipped when more than M past the full beam's bound), the rest scored by int4.
//! - `pq4fs-d4`, `pq4fs-d2`: product-quantized codes (16 centroids a subspace of 4 or 2
//!   dimensions: 48 or 96 bytes) beside each node's list in FastScan's transposed blocks, the
//!   32 neighbors scored together by table lookups in registers (`vpshufb`), every expanded
//!   node's block prefetched whole when it becomes the next candidate.
//! - `water` (`--water DIR`, decision 0011): principal components at 4, 2 or 1 bits (69 bytes
//!   at 384 dimensions), exported by `bench/ann/code_estimators.py --export DIR`, by slot.
//!
//! Each layout's estimate is scored by byte products (AVX-512 VNNI; on a CPU without it, AVX2
//! for `int4`, `int4-lists` and `water`, and the other layouts are left out) of the code and
//! the query's weights quantized to bytes; codes are prefetched as the library prefetches vectors
//! (`CHASSIS_PREFETCH_L1_LINES` lines into L1, default 1, the rest into L2). Rounds alternate
//! the variants (the first a warm-up); the report gives median QPS, recall@10, hops and codes
//! per query per (ef, rr), and each variant's best QPS at recall ≥ 0.95.
//!
//! ```text
//! cargo build --release --manifest-path bench/Cargo.toml --bin walk_codes
//! taskset -c 1 bench/target/release/walk_codes [--index F] [--rounds 5] [--only int4,pq4fs-d4]
//! bench/target/release/walk_codes --dump-graph DIR   # the graph only, for code_estimators.py
//! taskset -c 1 bench/target/release/walk_codes --water DIR --only int4,water
//! taskset -c 1 bench/target/release/walk_codes --water DIR --only int4,water --rrs 20,40,ef
//! bench/.venv/bin/python bench/ann/fvecs.py synth-1m-128 D --metric cosine
//! taskset -c 1 bench/target/release/walk_codes --index D/f32.chassis --base D/base.fvecs \
//!     --queries D/queries.fvecs --gt D/gt.ivecs --only int4,int4-lists --efs 64,96,128
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use chassis::graph::{GraphStore, VectorRef, VisitedSet, EMPTY};
use chassis::{Index, IndexReader, Metric, Options, VectorLayout};
use chassis_bench::{advise_huge, arg, median, pypi_minilm, read_fvecs, read_ivecs};

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

const M0: usize = 32;

/// Bytes of one node's block in the `bit1-lists` layout: its words, then its neighbors' codes.
fn block_bytes(code: usize) -> usize {
    (4 * M0 + M0 * code).div_ceil(64) * 64
}

struct Graph {
    n: usize,
    dims: usize,
    level0: Vec<u32>,
    upper: Vec<Vec<Vec<u32>>>,
    vectors: Vec<f32>,
    entry: u32,
    top: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Int4,
    Int4Lists,
    Bit1,
    Bit1Lists,
    /// Principal components at 4, 2 or 1 bits (`--water DIR`; docs/decisions/0011).
    Water,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Int4 => "int4",
            Layout::Int4Lists => "int4-lists",
            Layout::Bit1 => "bit1",
            Layout::Bit1Lists => "bit1-lists",
            Layout::Water => "water",
        }
    }

    fn int4(self) -> bool {
        matches!(self, Layout::Int4 | Layout::Int4Lists)
    }

    /// Codes stored beside each node's list rather than by slot.
    fn lists(self) -> bool {
        matches!(self, Layout::Int4Lists | Layout::Bit1Lists)
    }
}

/// The trained quantizer of a layout: per dimension the value a code 0 stands for and the step.
struct Codes {
    layout: Layout,
    /// Bytes of one code (a multiple of 64 is not needed: loads are masked).
    bytes: usize,
    lo: Vec<f32>,
    step: Vec<f32>,
    /// By slot (`int4`, `bit1`, `water`), or one block per node (`bit1-lists`).
    data: Vec<u8>,
    /// The `water` layout's quantizer.
    water: Option<Water>,
}

/// The `water` layout's quantizer, as `bench/ann/code_estimators.py --export` wrote it:
/// `groups[0]` components of 4 bits, then `groups[1]` of 2 and `groups[2]` of 1, each
/// component's value `mid + code * step` along its row of `proj`, after `mean` is taken off.
/// A code is a float (its |code|^2 plus the dropped components' squared norm), then the
/// 4-bit fields two a byte, the 2-bit four a byte, the 1-bit eight a byte.
struct Water {
    mean: Vec<f32>,
    /// `mid.len()` rows of `dims`.
    proj: Vec<f32>,
    mid: Vec<f32>,
    step: Vec<f32>,
    groups: [usize; 3],
}

/// Field widths of the `water` groups, in code order.
const WATER_WIDTHS: [usize; 3] = [4, 2, 1];

fn read_f32s(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Loads the `water` codes exported to `dir` for the `n` x `dims` base in row order.
fn load_water(dir: &std::path::Path, n: usize, dims: usize) -> Codes {
    let meta = std::fs::read_to_string(dir.join("meta.txt")).expect("meta.txt");
    let m: Vec<usize> = meta
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    let [rows, d, k, g4, g2, g1, bytes] = m[..] else {
        panic!("meta.txt: seven numbers expected")
    };
    assert!(rows == n && d == dims, "the codes are of another base");
    assert_eq!(g4 + g2 + g1, k);
    let mut data = std::fs::read(dir.join("codes.u8")).expect("codes.u8");
    assert_eq!(data.len(), n * bytes);
    // Kernels read whole 32-byte blocks; weights past a field are zero.
    data.extend([0u8; 64]);
    advise_huge(&data);
    let water = Water {
        mean: read_f32s(&dir.join("mean.f32")),
        proj: read_f32s(&dir.join("proj.f32")),
        mid: read_f32s(&dir.join("mid.f32")),
        step: read_f32s(&dir.join("step.f32")),
        groups: [g4, g2, g1],
    };
    assert_eq!(water.proj.len(), k * dims);
    Codes {
        layout: Layout::Water,
        bytes,
        lo: Vec::new(),
        step: Vec::new(),
        data,
        water: Some(water),
    }
}

fn train(g: &Graph, layout: Layout) -> Codes {
    let (n, d) = (g.n, g.dims);
    let row = |i: usize| &g.vectors[i * d..(i + 1) * d];
    let (mut lo, mut step) = (vec![0f32; d], vec![0f32; d]);
    let mut thresh = vec![0f32; d];
    match layout {
        Layout::Int4 | Layout::Int4Lists => {
            for j in 0..d {
                let (mut a, mut b) = (f32::MAX, f32::MIN);
                for i in 0..n {
                    a = a.min(row(i)[j]);
                    b = b.max(row(i)[j]);
                }
                lo[j] = a;
                step[j] = ((b - a) / 15.0).max(f32::MIN_POSITIVE);
            }
        }
        Layout::Bit1 | Layout::Bit1Lists => {
            for j in 0..d {
                let mean = (0..n).map(|i| f64::from(row(i)[j])).sum::<f64>() / n as f64;
                let (mut up, mut nu, mut dn, mut nd) = (0f64, 0usize, 0f64, 0usize);
                for i in 0..n {
                    let v = f64::from(row(i)[j]);
                    if v >= mean {
                        up += v;
                        nu += 1;
                    } else {
                        dn += v;
                        nd += 1;
                    }
                }
                let (up, dn) = (up / nu.max(1) as f64, dn / nd.max(1) as f64);
                thresh[j] = mean as f32;
                lo[j] = dn as f32;
                step[j] = (up - dn) as f32;
            }
        }
        Layout::Water => panic!("water codes are loaded (--water), not trained here"),
    }
    let bytes = if layout.int4() {
        d.div_ceil(2)
    } else {
        d.div_ceil(8)
    };
    let encode = |i: usize, out: &mut [u8]| {
        let v = row(i);
        for j in 0..d {
            match layout {
                Layout::Int4 | Layout::Int4Lists => {
                    let c = ((v[j] - lo[j]) / step[j]).round().clamp(0.0, 15.0) as u8;
                    out[j / 2] |= c << (4 * (j % 2));
                }
                _ => {
                    if v[j] >= thresh[j] {
                        out[j / 8] |= 1 << (j % 8);
                    }
                }
            }
        }
    };
    let mut data;
    if layout.lists() {
        let bb = block_bytes(bytes);
        data = vec![0u8; n * bb + 64];
        advise_huge(&data);
        for c in 0..n {
            let block = &mut data[c * bb..(c + 1) * bb];
            for (i, &w) in g.level0[c * M0..(c + 1) * M0].iter().enumerate() {
                block[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
                if w != EMPTY {
                    let at = 4 * M0 + i * bytes;
                    encode(w as usize, &mut block[at..at + bytes]);
                }
            }
        }
    } else {
        data = vec![0u8; n * bytes + 64];
        advise_huge(&data);
        for i in 0..n {
            encode(i, &mut data[i * bytes..(i + 1) * bytes]);
        }
    }
    Codes {
        layout,
        bytes,
        lo,
        step,
        data,
        water: None,
    }
}

/// A query's weights for one layout: estimate = `constant` + `scale` · Σ weightⱼ · codeⱼ.
struct Prepared {
    /// int4: per 64-byte block, [even dimensions' 64 weights][odd ones']; bit1: one per
    /// dimension, in dimension order.
    weights: Vec<i8>,
    scale: f32,
    constant: f32,
}

fn prepare(c: &Codes, q: &[f32]) -> Prepared {
    if let Some(w) = &c.water {
        return prepare_water(w, q);
    }
    let d = q.len();
    let a: Vec<f32> = (0..d).map(|j| q[j] * c.step[j]).collect();
    let max = a
        .iter()
        .fold(0f32, |m, x| m.max(x.abs()))
        .max(f32::MIN_POSITIVE);
    let scale = max / 127.0;
    let constant: f32 = (0..d).map(|j| q[j] * c.lo[j]).sum();
    let mut weights;
    match c.layout {
        Layout::Int4 | Layout::Int4Lists => {
            let blocks = c.bytes.div_ceil(64);
            weights = vec![0i8; blocks * 128];
            for (j, aj) in a.iter().enumerate() {
                let (byte, half) = (j / 2, j % 2);
                weights[(byte / 64) * 128 + half * 64 + byte % 64] = (aj / scale).round() as i8;
            }
        }
        _ => {
            weights = vec![0i8; d.div_ceil(64) * 64];
            for (w, aj) in weights.iter_mut().zip(&a) {
                *w = (aj / scale).round() as i8;
            }
        }
    }
    Prepared {
        weights,
        scale,
        constant,
    }
}

/// `water`: the query's components y = P(q − mean), weights y·step quantized to bytes by
/// field plane (per 32-byte block of a group, one 32-weight row per plane: bits 0.., then
/// `width`.., of every byte), and in `constant` |q − mean|² − 2⟨y, mid⟩, so that the
/// cosine distance estimate is (constant + stored float − 2·scale·Σ weight·code) / 2.
fn prepare_water(w: &Water, q: &[f32]) -> Prepared {
    let d = q.len();
    let x: Vec<f32> = q.iter().zip(&w.mean).map(|(a, b)| a - b).collect();
    // The library's SIMD inner product (AVX2 and FMA here): 285 x 384 multiply-adds a query.
    let ip = chassis::graph::Distance::new(Metric::InnerProduct);
    let y: Vec<f32> = w
        .proj
        .chunks_exact(d)
        .map(|row| 1.0 - ip.eval(row, &x))
        .collect();
    let a: Vec<f32> = y.iter().zip(&w.step).map(|(y, s)| y * s).collect();
    let max = a
        .iter()
        .fold(0f32, |m, x| m.max(x.abs()))
        .max(f32::MIN_POSITIVE);
    let scale = max / 127.0;
    let mut weights = Vec::new();
    let mut j = 0;
    for (&count, &width) in w.groups.iter().zip(&WATER_WIDTHS) {
        let planes = 8 / width;
        let bytes = (count * width).div_ceil(8);
        let base = weights.len();
        weights.resize(base + bytes.div_ceil(32) * 32 * planes, 0i8);
        for i in 0..count {
            let (byte, plane) = (i / planes, i % planes);
            let at = base + (byte / 32) * 32 * planes + plane * 32 + byte % 32;
            weights[at] = (a[j + i] / scale).round() as i8;
        }
        j += count;
    }
    let ym: f32 = y.iter().zip(&w.mid).map(|(y, m)| y * m).sum();
    Prepared {
        weights,
        scale,
        constant: chassis_bench::dot(&x, &x) - 2.0 * ym,
    }
}

/// Whether `estimate` may use AVX-512 (set once in main).
static AVX512: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Cosine distance estimate of the code at `code`: AVX-512 VNNI where the CPU has it (every
/// layout but `water`), else AVX2 (int4 and `water` only).
///
/// # Safety
/// AVX2, and AVX-512 BW and VNNI where [`AVX512`] says so; `code` readable for `c.bytes`
/// bytes and 64 more.
#[inline(always)]
unsafe fn estimate(c: &Codes, p: &Prepared, code: *const u8) -> f32 {
    if c.layout != Layout::Water && AVX512.load(Ordering::Relaxed) {
        // SAFETY: as this function's.
        unsafe { estimate_avx512(c, p, code) }
    } else {
        // SAFETY: as this function's.
        unsafe { estimate_avx2(c, p, code) }
    }
}

/// Σ weight·field over `bytes` bytes at `at` of `width`-bit fields, into `acc`'s lanes.
///
/// # Safety
/// AVX2; `at` readable for `bytes` rounded up to 32; `w` for 32 weights a plane a block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fields_avx2(
    acc: std::arch::x86_64::__m256i,
    at: *const u8,
    bytes: usize,
    width: usize,
    w: *const i8,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let mut acc = acc;
    let ones = _mm256_set1_epi16(1);
    let mask = _mm256_set1_epi8(((1u32 << width) - 1) as i8);
    let planes = 8 / width;
    for blk in 0..bytes.div_ceil(32) {
        // SAFETY: readable, per this function's contract.
        let x = unsafe { _mm256_loadu_si256(at.add(32 * blk).cast()) };
        for plane in 0..planes {
            let v = _mm256_and_si256(
                _mm256_srl_epi16(x, _mm_cvtsi32_si128((plane * width) as i32)),
                mask,
            );
            // SAFETY: 32 weights a plane a block.
            let wv = unsafe { _mm256_loadu_si256(w.add(32 * (blk * planes + plane)).cast()) };
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, wv), ones));
        }
    }
    acc
}

/// [`estimate`] on AVX2: int4 (its weights laid out for AVX-512's 64-byte blocks, read in
/// halves) and `water`.
///
/// # Safety
/// AVX2; `code` readable for `c.bytes` bytes and 64 more.
#[target_feature(enable = "avx2")]
unsafe fn estimate_avx2(c: &Codes, p: &Prepared, code: *const u8) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_si256();
    let ones = _mm256_set1_epi16(1);
    let nibble = _mm256_set1_epi8(0x0f);
    let w = p.weights.as_ptr();
    match &c.water {
        None => {
            // The bytes past the code would meet weights of the next block's: only codes of a
            // multiple of 32 bytes (int4 at 384 dimensions: 192).
            assert!(
                c.layout.int4() && c.bytes.is_multiple_of(32),
                "AVX2 scores int4 codes of a multiple of 32 bytes, and water codes"
            );
            for h in 0..c.bytes.div_ceil(32) {
                let (b, half) = (h / 2, h % 2);
                // SAFETY: within the code.
                let x = unsafe { _mm256_loadu_si256(code.add(32 * h).cast()) };
                let even = _mm256_and_si256(x, nibble);
                let odd = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
                // SAFETY: 128 weights a 64-byte block.
                let (we, wo) = unsafe {
                    (
                        _mm256_loadu_si256(w.add(128 * b + 32 * half).cast()),
                        _mm256_loadu_si256(w.add(128 * b + 64 + 32 * half).cast()),
                    )
                };
                acc =
                    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(even, we), ones));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(odd, wo), ones));
            }
        }
        Some(water) => {
            let (mut at, mut wat) = (4usize, 0usize);
            for (&count, &width) in water.groups.iter().zip(&WATER_WIDTHS) {
                let bytes = (count * width).div_ceil(8);
                // SAFETY: the code and 64 bytes past it are readable; weights per plane.
                acc = unsafe { fields_avx2(acc, code.add(at), bytes, width, w.add(wat)) };
                at += bytes;
                wat += bytes.div_ceil(32) * 32 * (8 / width);
            }
        }
    }
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256(acc, 1),
    );
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    let sum = p.scale * _mm_cvtsi128_si32(s) as f32;
    if c.water.is_some() {
        // SAFETY: the code's first four bytes.
        let stored = unsafe { std::ptr::read_unaligned(code.cast::<f32>()) };
        0.5 * (p.constant + stored - 2.0 * sum)
    } else {
        1.0 - (p.constant + sum)
    }
}

/// Cosine distance estimate 1 − ⟨q, v̂⟩ of the code at `code`.
///
/// # Safety
/// AVX-512 BW and VNNI; `code` readable for `c.bytes` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn estimate_avx512(c: &Codes, p: &Prepared, code: *const u8) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm512_setzero_si512();
    match c.layout {
        Layout::Int4 | Layout::Int4Lists => {
            let nibble = _mm512_set1_epi8(0x0f);
            for b in 0..c.bytes.div_ceil(64) {
                let left = c.bytes - 64 * b;
                let mask = if left >= 64 {
                    u64::MAX
                } else {
                    (1u64 << left) - 1
                };
                // SAFETY: masked to the code's bytes.
                let x = unsafe { _mm512_maskz_loadu_epi8(mask, code.add(64 * b).cast()) };
                let even = _mm512_and_si512(x, nibble);
                let odd = _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble);
                // SAFETY: 128 weights a block.
                let (we, wo) = unsafe {
                    (
                        _mm512_loadu_si512(p.weights.as_ptr().add(128 * b).cast()),
                        _mm512_loadu_si512(p.weights.as_ptr().add(128 * b + 64).cast()),
                    )
                };
                acc = _mm512_dpbusd_epi32(acc, even, we);
                acc = _mm512_dpbusd_epi32(acc, odd, wo);
            }
        }
        _ => {
            let one = _mm512_set1_epi8(1);
            let chunks = c.bytes.div_ceil(8);
            for k in 0..chunks {
                let left = c.bytes - 8 * k;
                let mut bits = [0u8; 8];
                // SAFETY: at most the code's remaining bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(code.add(8 * k), bits.as_mut_ptr(), left.min(8))
                };
                let m = u64::from_le_bytes(bits);
                let x = _mm512_maskz_mov_epi8(m, one);
                // SAFETY: weights padded to 64 a chunk.
                let w = unsafe { _mm512_loadu_si512(p.weights.as_ptr().add(64 * k).cast()) };
                acc = _mm512_dpbusd_epi32(acc, x, w);
            }
        }
    }
    1.0 - (p.constant + p.scale * _mm512_reduce_add_epi32(acc) as f32)
}

/// Prefetches `lines` lines from `p`, the first `l1` of them into L1 and the rest into L2 (the
/// library's policy for walked vectors when decision 0008 was measured: `CHASSIS_PREFETCH_L1_LINES`,
/// else 12 on Zen 5 and 1 elsewhere; here read from the same variable, default 1; the library
/// has since sent codes into L2 whole on CPUs other than Zen 5, graph/prefetch.rs).
#[inline(always)]
fn prefetch_code(p: *const u8, lines: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    static L1: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let l1 = *L1.get_or_init(|| {
        std::env::var("CHASSIS_PREFETCH_L1_LINES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    });
    for i in 0..lines {
        // SAFETY: a prefetch never faults.
        unsafe {
            if i < l1 {
                _mm_prefetch(p.wrapping_add(64 * i).cast::<i8>(), _MM_HINT_T0)
            } else {
                _mm_prefetch(p.wrapping_add(64 * i).cast::<i8>(), _MM_HINT_T1)
            }
        };
    }
}

/// Prefetches `lines` lines from `p` into L1 (lists, and the vectors ranked: as the library).
#[inline(always)]
fn prefetch(p: *const u8, lines: usize) {
    for i in 0..lines {
        // SAFETY: a prefetch never faults.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                p.wrapping_add(64 * i).cast::<i8>(),
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
}

/// Prefetches the lines that `bytes` bytes from `p` touch (a code: [`prefetch_code`]).
#[inline(always)]
fn prefetch_range(p: *const u8, bytes: usize) {
    let skew = p as usize % 64;
    prefetch_code(p.wrapping_sub(skew), (skew + bytes).div_ceil(64));
}

fn exact(g: &Graph, q: &[f32], s: u32) -> f32 {
    let v = &g.vectors[s as usize * g.dims..(s as usize + 1) * g.dims];
    1.0 - chassis_bench::dot(q, v)
}

/// f32 distance as a u32 that sorts like it (any sign), with the slot below it.
fn key(d: f32, s: u32) -> u64 {
    let b = d.to_bits();
    let o = if b >> 31 == 1 { !b } else { b | 1 << 31 };
    (u64::from(o) << 32) | u64::from(s)
}

fn key_dist(k: u64) -> f32 {
    let o = (k >> 32) as u32;
    f32::from_bits(if o >> 31 == 1 { o & !(1 << 31) } else { !o })
}

/// A walk to measure: its name, the codes it scores by (an index into the trained ones), and
/// its gate (the index of the `bit1-lists` codes and the margin), if any; or FastScan blocks
/// (an index into those trained).
#[derive(Clone)]
enum Walk {
    Codes(usize, Option<(usize, f32)>),
    FastScan(usize),
    /// int4 codes by slot, this many queries interleaved.
    Interleaved(usize),
}
type Variant = (String, Walk);

struct Scratch {
    /// The library's visited set (a bit per slot, 128 KiB at 1M: stays in L2, where a 4-byte
    /// stamp per slot, 4 MB, missed it on most checks at 1M and hid everything else).
    visited: VisitedSet,
    n: usize,
    cand: BinaryHeap<Reverse<u64>>,
    beam: BinaryHeap<u64>,
    gathered: Vec<(u32, *const u8)>,
    /// Nodes expanded and codes scored, over every search so far.
    hops: u64,
    estimates: u64,
    /// Neighbors a gate looked at.
    gated: u64,
}

impl Scratch {
    /// Starts a layer-0 beam at `cur` (distance `cur_d`): the visited set cleared, both heaps
    /// holding only it.
    fn start(&mut self, cur: u32, cur_d: f32) {
        self.visited.reset(self.n);
        self.cand.clear();
        self.beam.clear();
        self.visited.insert(cur);
        let entry = key(cur_d, cur);
        self.cand.push(Reverse(entry));
        self.beam.push(entry);
    }

    /// The next candidate to expand, unless the beam (of `ef`) is full and nearer than it,
    /// and the one after it (to prefetch).
    fn expand(&mut self, ef: usize) -> Option<(u32, Option<u32>)> {
        let Reverse(ck) = self.cand.pop()?;
        let bound = self.beam.peek().map_or(f32::INFINITY, |&k| key_dist(k));
        if key_dist(ck) > bound && self.beam.len() >= ef {
            return None;
        }
        self.hops += 1;
        let next = self.cand.peek().map(|Reverse(k)| *k as u32);
        Some((ck as u32, next))
    }

    /// Marks `cs`'s unvisited layer-0 neighbors visited and gathers them with their codes in
    /// `c` (by slot), each code prefetched.
    fn gather_by_slot(&mut self, g: &Graph, c: &Codes, cs: u32) {
        for &w in &g.level0[cs as usize * M0..(cs as usize + 1) * M0] {
            if w == EMPTY || !self.visited.insert(w) {
                continue;
            }
            let ptr = c.data[w as usize * c.bytes..].as_ptr();
            prefetch_range(ptr, c.bytes);
            self.gathered.push((w, ptr));
        }
    }

    /// Offers slot `n` at estimate `d` to a beam of `ef`, whose bound (once full) is `bound`.
    fn offer(&mut self, d: f32, n: u32, ef: usize, bound: &mut f32) {
        if self.beam.len() < ef || d < *bound {
            let k = key(d, n);
            self.cand.push(Reverse(k));
            self.beam.push(k);
            if self.beam.len() > ef {
                self.beam.pop();
            }
            if let Some(&top) = self.beam.peek().filter(|_| self.beam.len() >= ef) {
                *bound = key_dist(top);
            }
        }
    }
}

/// `gate`: bit codes beside the lists (`bit1-lists`) and a margin: a neighbor whose bit
/// estimate is more than the margin past the beam's bound (once full) is not read at all;
/// the others are scored by `c` (codes by slot).
fn search(
    g: &Graph,
    c: &Codes,
    gate: Option<(&Codes, f32)>,
    q: &[f32],
    ef: usize,
    rr: usize,
    s: &mut Scratch,
) -> Vec<u32> {
    let (cur, cur_d) = descend(g, q);
    let p = prepare(c, q);
    let gp = gate.map(|(gc, _)| prepare(gc, q));
    s.start(cur, cur_d);
    // The codes whose blocks hold the lists, where any do.
    let lists = gate.map_or(c, |(gc, _)| gc);
    let bb = block_bytes(lists.bytes);
    let node_ptr = |n: u32| -> *const u8 {
        if lists.layout.lists() {
            lists.data[n as usize * bb..].as_ptr()
        } else {
            g.level0[n as usize * M0..].as_ptr().cast()
        }
    };
    let list_lines = 2;
    while let Some((cs, next)) = s.expand(ef) {
        if let Some(next) = next {
            prefetch(node_ptr(next), list_lines);
        }
        s.gathered.clear();
        if let (Some((gc, margin)), Some(gp)) = (gate, gp.as_ref()) {
            let block = &gc.data[cs as usize * bb..(cs as usize + 1) * bb];
            let full = s.beam.len() >= ef;
            let bound = s.beam.peek().map_or(f32::INFINITY, |&k| key_dist(k)) + margin;
            for i in 0..M0 {
                let w = u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
                if w == EMPTY || !s.visited.insert(w) {
                    continue;
                }
                s.gated += 1;
                // SAFETY: AVX-512 VNNI checked in main; the block holds the code.
                let e = unsafe { estimate(gc, gp, block[4 * M0 + i * gc.bytes..].as_ptr()) };
                if full && e > bound {
                    continue;
                }
                let ptr = c.data[w as usize * c.bytes..].as_ptr();
                prefetch_range(ptr, c.bytes);
                s.gathered.push((w, ptr));
            }
        } else if c.layout.lists() {
            let block = &c.data[cs as usize * bb..(cs as usize + 1) * bb];
            for i in 0..M0 {
                let w = u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
                if w == EMPTY || !s.visited.insert(w) {
                    continue;
                }
                let ptr = block[4 * M0 + i * c.bytes..].as_ptr();
                prefetch_range(ptr, c.bytes);
                s.gathered.push((w, ptr));
            }
        } else {
            s.gather_by_slot(g, c, cs);
        }
        let mut bound = s.beam.peek().map_or(f32::INFINITY, |&k| key_dist(k));
        s.estimates += s.gathered.len() as u64;
        let gathered = std::mem::take(&mut s.gathered);
        for &(n, ptr) in &gathered {
            // SAFETY: checked for AVX-512 VNNI in main; `ptr` has `c.bytes` readable bytes.
            let d = unsafe { estimate(c, &p, ptr) };
            s.offer(d, n, ef, &mut bound);
        }
        s.gathered = gathered;
    }
    rerank(g, s, q, rr)
}

/// Product-quantized codes scored FastScan style (André et al.; SymphonyQG's and RaBitQ's graph
/// layouts): `dims / dsub` subspaces of `dsub` dimensions, 16 centroids each (4 bits a
/// subspace), every node's 32 neighbors' codes stored beside its list in a block transposed so
/// that one 64-byte load holds four subspaces' codes for all 32 neighbors, scored by table
/// lookups in registers (`vpshufb`) against the query's 16-entry tables quantized to bytes.
struct FastScan {
    dsub: usize,
    nsub: usize,
    /// `nsub` x 16 x `dsub`.
    centroids: Vec<f32>,
    /// Bytes a node's block: 32 words, then `nsub / 4` groups of 64 code bytes.
    block: usize,
    data: Vec<u8>,
}

/// Trains `dsub`-dimension subspaces' 16 centroids by Lloyd's k-means on a seeded sample, then
/// writes every node's block.
fn train_fastscan(g: &Graph, dsub: usize) -> FastScan {
    let (n, d) = (g.n, g.dims);
    assert!(
        d % (4 * dsub) == 0,
        "dims must split into groups of four subspaces"
    );
    let nsub = d / dsub;
    let row = |i: usize| &g.vectors[i * d..(i + 1) * d];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let sample: Vec<usize> = (0..20_000.min(n)).map(|_| rand() as usize % n).collect();
    let mut centroids = vec![0f32; nsub * 16 * dsub];
    let nearest = |cents: &[f32], x: &[f32]| -> usize {
        let mut best = (f32::MAX, 0);
        for j in 0..16 {
            let c = &cents[j * dsub..(j + 1) * dsub];
            let e: f32 = c.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum();
            if e < best.0 {
                best = (e, j);
            }
        }
        best.1
    };
    for s in 0..nsub {
        let cents = &mut centroids[s * 16 * dsub..(s + 1) * 16 * dsub];
        for j in 0..16 {
            let r = row(sample[rand() as usize % sample.len()]);
            cents[j * dsub..(j + 1) * dsub].copy_from_slice(&r[s * dsub..(s + 1) * dsub]);
        }
        for _ in 0..15 {
            let mut sum = vec![0f64; 16 * dsub];
            let mut count = [0usize; 16];
            for &i in &sample {
                let x = &row(i)[s * dsub..(s + 1) * dsub];
                let j = nearest(cents, x);
                count[j] += 1;
                for t in 0..dsub {
                    sum[j * dsub + t] += f64::from(x[t]);
                }
            }
            for j in 0..16 {
                if count[j] == 0 {
                    // An empty cluster restarts at a random sample point.
                    let r = row(sample[rand() as usize % sample.len()]);
                    cents[j * dsub..(j + 1) * dsub].copy_from_slice(&r[s * dsub..(s + 1) * dsub]);
                } else {
                    for t in 0..dsub {
                        cents[j * dsub + t] = (sum[j * dsub + t] / count[j] as f64) as f32;
                    }
                }
            }
        }
    }
    let codes: Vec<u8> = (0..n)
        .flat_map(|i| {
            let x = row(i);
            let centroids = &centroids;
            (0..nsub).map(move |s| {
                nearest(
                    &centroids[s * 16 * dsub..(s + 1) * 16 * dsub],
                    &x[s * dsub..(s + 1) * dsub],
                ) as u8
            })
        })
        .collect();
    let block = 4 * M0 + nsub / 4 * 64;
    let mut data = vec![0u8; n * block + 64];
    advise_huge(&data);
    for c in 0..n {
        let b = &mut data[c * block..(c + 1) * block];
        for (i, &w) in g.level0[c * M0..(c + 1) * M0].iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            if w == EMPTY {
                continue;
            }
            let code = &codes[w as usize * nsub..(w as usize + 1) * nsub];
            for grp in 0..nsub / 4 {
                let at = 4 * M0 + 64 * grp;
                b[at + i] = code[4 * grp] | code[4 * grp + 1] << 4;
                b[at + 32 + i] = code[4 * grp + 2] | code[4 * grp + 3] << 4;
            }
        }
    }
    FastScan {
        dsub,
        nsub,
        centroids,
        block,
        data,
    }
}

/// A query's tables for [`FastScan`]: per group of four subspaces 128 bytes (the low nibbles'
/// table for lanes 0-1 and 2-3, then the high nibbles'); estimate = 1 − (`bias` + `delta` · Σ).
struct FsQuery {
    luts: Vec<u8>,
    bias: f32,
    delta: f32,
}

fn prepare_fastscan(f: &FastScan, q: &[f32]) -> FsQuery {
    let (dsub, nsub) = (f.dsub, f.nsub);
    let mut lut = vec![0f32; nsub * 16];
    for s in 0..nsub {
        for j in 0..16 {
            let c = &f.centroids[(s * 16 + j) * dsub..(s * 16 + j + 1) * dsub];
            lut[s * 16 + j] = c.iter().zip(&q[s * dsub..]).map(|(a, b)| a * b).sum();
        }
    }
    let mut bias = 0f32;
    let mut range = 0f32;
    let mins: Vec<f32> = (0..nsub)
        .map(|s| {
            let t = &lut[s * 16..(s + 1) * 16];
            let (lo, hi) = t
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            bias += lo;
            range = range.max(hi - lo);
            lo
        })
        .collect();
    let delta = range.max(f32::MIN_POSITIVE) / 255.0;
    let q8 = |s: usize, j: usize| ((lut[s * 16 + j] - mins[s]) / delta).round() as u8;
    let mut luts = vec![0u8; nsub / 4 * 128];
    for grp in 0..nsub / 4 {
        let t = &mut luts[grp * 128..(grp + 1) * 128];
        for j in 0..16 {
            // Low nibbles: subspace 4g in lanes 0-1, 4g+2 in lanes 2-3; high: 4g+1, 4g+3.
            for lane in 0..4 {
                let (lo_s, hi_s) = if lane < 2 {
                    (4 * grp, 4 * grp + 1)
                } else {
                    (4 * grp + 2, 4 * grp + 3)
                };
                t[16 * lane + j] = q8(lo_s, j);
                t[64 + 16 * lane + j] = q8(hi_s, j);
            }
        }
    }
    FsQuery { luts, bias, delta }
}

/// The 32 neighbors' table sums from a block's codes (`groups` groups of 64 bytes).
///
/// # Safety
/// AVX-512 BW; `codes` readable for `64 * groups` bytes, `luts` for `128 * groups`.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn fastscan_sums(codes: *const u8, luts: *const u8, groups: usize, out: &mut [u16; 32]) {
    use std::arch::x86_64::*;
    let nibble = _mm512_set1_epi8(0x0f);
    let low_byte = _mm512_set1_epi16(0x00ff);
    let (mut even, mut odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for g in 0..groups {
        // SAFETY: within the caller's bounds.
        let (x, tl, th) = unsafe {
            (
                _mm512_loadu_si512(codes.add(64 * g).cast()),
                _mm512_loadu_si512(luts.add(128 * g).cast()),
                _mm512_loadu_si512(luts.add(128 * g + 64).cast()),
            )
        };
        let lo = _mm512_and_si512(x, nibble);
        let hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble);
        let rl = _mm512_shuffle_epi8(tl, lo);
        let rh = _mm512_shuffle_epi8(th, hi);
        even = _mm512_add_epi16(even, _mm512_and_si512(rl, low_byte));
        odd = _mm512_add_epi16(odd, _mm512_srli_epi16(rl, 8));
        even = _mm512_add_epi16(even, _mm512_and_si512(rh, low_byte));
        odd = _mm512_add_epi16(odd, _mm512_srli_epi16(rh, 8));
    }
    // Lanes 0-1 hold subspaces 4g, 4g+1 and lanes 2-3 subspaces 4g+2, 4g+3 of the same
    // neighbors: add the halves, then interleave even and odd bytes' sums.
    let e = _mm256_add_epi16(
        _mm512_castsi512_si256(even),
        _mm512_extracti64x4_epi64(even, 1),
    );
    let o = _mm256_add_epi16(
        _mm512_castsi512_si256(odd),
        _mm512_extracti64x4_epi64(odd, 1),
    );
    let a = _mm256_unpacklo_epi16(e, o);
    let b = _mm256_unpackhi_epi16(e, o);
    let mut words = [0u16; 32];
    // SAFETY: 32 words written.
    unsafe {
        _mm256_storeu_si256(words.as_mut_ptr().cast(), a);
        _mm256_storeu_si256(words.as_mut_ptr().add(16).cast(), b);
    }
    // a: lane 0 neighbors 0-7, lane 1 16-23; b: lane 0 8-15, lane 1 24-31.
    out[0..8].copy_from_slice(&words[0..8]);
    out[16..24].copy_from_slice(&words[8..16]);
    out[8..16].copy_from_slice(&words[16..24]);
    out[24..32].copy_from_slice(&words[24..32]);
}

/// Renumbers `g`'s slots in breadth-first order over layer 0 from the entry point (lists in
/// order; slots it never reaches after them, in their order); returns each new slot's old one.
fn reorder(g: &mut Graph) -> Vec<u32> {
    let n = g.n;
    let mut new_of = vec![EMPTY; n];
    let mut order: Vec<u32> = Vec::with_capacity(n);
    fn visit(s: u32, new_of: &mut [u32], order: &mut Vec<u32>) {
        if new_of[s as usize] == EMPTY {
            new_of[s as usize] = order.len() as u32;
            order.push(s);
        }
    }
    visit(g.entry, &mut new_of, &mut order);
    let mut head = 0;
    let mut next_root = 0u32;
    while order.len() < n {
        if head == order.len() {
            while new_of[next_root as usize] != EMPTY {
                next_root += 1;
            }
            visit(next_root, &mut new_of, &mut order);
        }
        let s = order[head] as usize;
        head += 1;
        for &w in &g.level0[s * M0..(s + 1) * M0] {
            if w != EMPTY {
                visit(w, &mut new_of, &mut order);
            }
        }
    }
    let map = |w: u32| {
        if w == EMPTY {
            EMPTY
        } else {
            new_of[w as usize]
        }
    };
    let d = g.dims;
    let mut level0 = Vec::with_capacity(n * M0);
    let mut vectors = Vec::with_capacity(n * d);
    advise_huge(&level0);
    advise_huge(&vectors);
    let mut upper = Vec::with_capacity(n);
    for &old in &order {
        let o = old as usize;
        level0.extend(g.level0[o * M0..(o + 1) * M0].iter().map(|&w| map(w)));
        vectors.extend_from_slice(&g.vectors[o * d..(o + 1) * d]);
        upper.push(
            g.upper[o]
                .iter()
                .map(|l| l.iter().map(|&w| map(w)).collect())
                .collect(),
        );
    }
    (g.level0, g.vectors, g.upper) = (level0, vectors, upper);
    g.entry = new_of[g.entry as usize];
    order
}

/// The greedy descent by exact distances to layer 0's entry.
fn descend(g: &Graph, q: &[f32]) -> (u32, f32) {
    let mut cur = g.entry;
    let mut cur_d = exact(g, q, cur);
    for layer in (1..=g.top).rev() {
        loop {
            let mut changed = false;
            if let Some(list) = g.upper[cur as usize].get(layer - 1) {
                for &n in list {
                    if n == EMPTY {
                        continue;
                    }
                    let d = exact(g, q, n);
                    if d < cur_d {
                        (cur, cur_d) = (n, d);
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
    (cur, cur_d)
}

/// [`search`] over FastScan blocks: each expanded node's 32 neighbors scored at once.
fn search_fastscan(
    g: &Graph,
    f: &FastScan,
    q: &[f32],
    ef: usize,
    rr: usize,
    s: &mut Scratch,
) -> Vec<u32> {
    let (cur, cur_d) = descend(g, q);
    let p = prepare_fastscan(f, q);
    s.start(cur, cur_d);
    let bb = f.block;
    let lines = bb.div_ceil(64) + 1;
    let groups = f.nsub / 4;
    let block_ptr = |n: u32| f.data[n as usize * bb..].as_ptr();
    prefetch_code(block_ptr(cur), lines);
    let mut sums = [0u16; 32];
    while let Some((cs, next)) = s.expand(ef) {
        if let Some(next) = next {
            prefetch_code(block_ptr(next), lines);
        }
        let block = &f.data[cs as usize * bb..(cs as usize + 1) * bb];
        // SAFETY: AVX-512 BW checked in main; the block holds `groups` groups after its words.
        unsafe { fastscan_sums(block[4 * M0..].as_ptr(), p.luts.as_ptr(), groups, &mut sums) };
        let mut bound = s.beam.peek().map_or(f32::INFINITY, |&k| key_dist(k));
        for i in 0..M0 {
            let w = u32::from_le_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
            if w == EMPTY || !s.visited.insert(w) {
                continue;
            }
            s.estimates += 1;
            let d = 1.0 - (p.bias + p.delta * f32::from(sums[i]));
            s.offer(d, w, ef, &mut bound);
        }
    }
    rerank(g, s, q, rr)
}

/// The beam's `rr` nearest estimates ranked by exact distance: the 10 nearest.
fn rerank(g: &Graph, s: &mut Scratch, q: &[f32], rr: usize) -> Vec<u32> {
    let mut found: Vec<u64> = s.beam.drain().collect();
    found.sort_unstable();
    found.truncate(rr);
    for &k in &found {
        prefetch(
            g.vectors[(k as u32) as usize * g.dims..].as_ptr().cast(),
            g.dims * 4 / 64,
        );
    }
    let mut ranked: Vec<(f32, u32)> = found
        .iter()
        .map(|&k| (exact(g, q, k as u32), k as u32))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    ranked.iter().take(10).map(|x| x.1).collect()
}

/// One query's walk in [`search_interleaved`]: its scratch, prepared weights, and which query.
struct Lane {
    s: Scratch,
    p: Option<Prepared>,
    qi: usize,
}

impl Scratch {
    fn new(n: usize) -> Self {
        Scratch {
            visited: VisitedSet::default(),
            n,
            cand: BinaryHeap::new(),
            beam: BinaryHeap::new(),
            gathered: Vec::new(),
            hops: 0,
            estimates: 0,
            gated: 0,
        }
    }
}

/// [`search`] by int4 codes by slot, `lanes` queries walked in turn one expansion at a time:
/// an expansion gathers and prefetches its neighbors' codes and lists, and scores them only
/// at the lane's next turn, so each lane's loads land while the others work (interleaved
/// execution, as in AMAC or coroutine-interleaved index lookups). Same answers as [`search`].
fn search_interleaved(
    g: &Graph,
    c: &Codes,
    qs: &[Vec<f32>],
    ef: usize,
    rr: usize,
    lanes: &mut [Lane],
) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); qs.len()];
    let mut next_q = 0;
    let start = |lane: &mut Lane, qi: usize| {
        let q = &qs[qi];
        let (cur, cur_d) = descend(g, q);
        lane.p = Some(prepare(c, q));
        lane.qi = qi;
        lane.s.start(cur, cur_d);
        lane.s.gathered.clear();
        prefetch(g.level0[cur as usize * M0..].as_ptr().cast(), 2);
    };
    for lane in lanes.iter_mut() {
        if next_q < qs.len() {
            start(lane, next_q);
            next_q += 1;
        } else {
            lane.p = None;
        }
    }
    let mut active = lanes.iter().filter(|l| l.p.is_some()).count();
    while active > 0 {
        for lane in lanes.iter_mut() {
            let Some(p) = lane.p.as_ref() else {
                continue;
            };
            let s = &mut lane.s;
            // Score what the last turn gathered.
            let mut bound = s.beam.peek().map_or(f32::INFINITY, |&k| key_dist(k));
            let gathered = std::mem::take(&mut s.gathered);
            s.estimates += gathered.len() as u64;
            for &(n, ptr) in &gathered {
                // SAFETY: checked for AVX-512 VNNI in main; `ptr` has `c.bytes` bytes.
                let d = unsafe { estimate(c, p, ptr) };
                s.offer(d, n, ef, &mut bound);
            }
            s.gathered = gathered;
            s.gathered.clear();
            // Expand the next candidate: gather and prefetch, score next turn.
            if let Some((cs, next)) = s.expand(ef) {
                if let Some(next) = next {
                    prefetch(g.level0[next as usize * M0..].as_ptr().cast(), 2);
                }
                s.gather_by_slot(g, c, cs);
                continue;
            }
            let qi = lane.qi;
            out[qi] = rerank(g, &mut lane.s, &qs[qi], rr);
            if next_q < qs.len() {
                start(lane, next_q);
                next_q += 1;
            } else {
                lane.p = None;
                active -= 1;
            }
        }
    }
    out
}

/// `--dump-graph DIR`: writes the graph for bench/ann/code_estimators.py's walk (which has
/// no kernels to need): `level0.u32` (n lists of 32 words, row order), `upper.u32` (records
/// of slot, layer, count, then the count words) and `meta.txt` (n, dims, entry, top).
fn dump_graph(g: &Graph, dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let words = |w: &[u32]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.join("level0.u32"), words(&g.level0))?;
    let mut upper = Vec::new();
    for (s, layers) in g.upper.iter().enumerate() {
        for (l, list) in layers.iter().enumerate() {
            upper.extend([s as u32, l as u32 + 1, list.len() as u32]);
            upper.extend(list);
        }
    }
    std::fs::write(dir.join("upper.u32"), words(&upper))?;
    let meta = format!("{} {} {} {}\n", g.n, g.dims, g.entry, g.top);
    std::fs::write(dir.join("meta.txt"), meta)
}

fn main() -> chassis::Result<()> {
    let dump = arg("--dump-graph").map(PathBuf::from);
    // Without AVX-512 VNNI only the int4 and `water` codes are scored (by AVX2 kernels).
    let avx512 = std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512bw");
    assert!(
        dump.is_some() || avx512 || std::arch::is_x86_feature_detected!("avx2"),
        "this study's kernels need AVX-512 VNNI or AVX2"
    );
    AVX512.store(avx512, Ordering::Relaxed);
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().expect("a number"));
    // `--base B --queries Q --gt G` (fvecs, fvecs, ivecs; walked as cosine): another data set
    // than pypi-minilm, with its own `--index` file (built here if missing).
    let data = pypi_minilm();
    let named = |flag: &str, file: &str| {
        arg(flag).map(PathBuf::from).unwrap_or_else(|| {
            data.as_ref()
                .expect("../shared/data/pypi-minilm is needed (or --base, --queries, --gt)")
                .join(file)
        })
    };
    let base = read_fvecs(&named("--base", "pypi-minilm_base.fvecs"))?;
    let path = arg("--index").map_or_else(
        || {
            assert!(
                arg("--base").is_none(),
                "--base needs --index: the file of that set (built there if missing)"
            );
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/walk_codes-f32.chassis")
        },
        PathBuf::from,
    );
    if !path.exists() {
        println!(
            "building {} (f32, M 16, ef_construction 200, one thread)",
            path.display()
        );
        let ix = Index::create(
            &path,
            Options::new(base.dims, Metric::Cosine).vector_layout(VectorLayout::F32),
        )?;
        ix.add_batch(&base.data, 1)?;
        ix.flush()?;
        ix.close()?;
    }
    let queries = read_fvecs(&named("--queries", "pypi-minilm_query.fvecs"))?;
    let gt = read_ivecs(&named("--gt", "pypi-minilm_groundtruth.ivecs"));
    let reader = IndexReader::open(&path)?;
    let snap = reader.snapshot()?;
    let h = reader.header_of(&snap).clone();
    let store = reader.graph(&snap);
    let (n, dims) = (store.routing_count() as usize, reader.dims());
    let mut g = Graph {
        n,
        dims,
        level0: Vec::with_capacity(n * M0),
        upper: Vec::with_capacity(n),
        vectors: Vec::with_capacity(n * dims),
        entry: h.entry_point,
        top: h.max_layer as usize,
    };
    advise_huge(&g.level0);
    advise_huge(&g.vectors);
    for s in 0..n as u32 {
        let Some(VectorRef::F32(v)) = store.vector(s) else {
            panic!("an f32 file is needed (slot {s})");
        };
        // Slot = row: the file was built in row order by one thread.
        let row = base.row(s as usize);
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            v.iter().zip(row).all(|(a, b)| (a - b / norm).abs() < 1e-5),
            "slot {s} is not row {s}: build the file with one thread, in row order"
        );
        g.vectors.extend_from_slice(v);
        let l0 = store.level0(s).expect("a record");
        assert_eq!(l0.len(), M0);
        g.level0
            .extend(l0.iter().map(|w| w.load(Ordering::Relaxed)));
        let mut layers = Vec::new();
        let mut layer = 1;
        while let Some(words) = store.upper(s, layer) {
            layers.push(words.iter().map(|w| w.load(Ordering::Relaxed)).collect());
            layer += 1;
        }
        g.upper.push(layers);
    }
    if let Some(dir) = dump {
        dump_graph(&g, &dir)?;
        println!("graph written to {}", dir.display());
        return Ok(());
    }
    // `--reorder`: slots renumbered in breadth-first order of layer 0 from the entry point, so
    // a node's neighbors lie near it (graph reordering for cache locality); `original[s]` is
    // the row of slot `s`.
    let water = arg("--water").map(PathBuf::from);
    assert!(
        !(water.is_some() && flag("--reorder")),
        "--water codes are by row: not with --reorder"
    );
    let original: Vec<u32> = if flag("--reorder") {
        reorder(&mut g)
    } else {
        (0..n as u32).collect()
    };
    let qs: Vec<Vec<f32>> = (0..queries.len())
        .map(|i| {
            let q = queries.row(i);
            let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            q.iter().map(|x| x / norm).collect()
        })
        .collect();
    let layouts: &[Layout] = if avx512 {
        &[
            Layout::Int4,
            Layout::Int4Lists,
            Layout::Bit1,
            Layout::Bit1Lists,
        ]
    } else {
        &[Layout::Int4, Layout::Int4Lists]
    };
    let mut codes: Vec<Codes> = layouts.iter().map(|&l| train(&g, l)).collect();
    if let Some(dir) = &water {
        codes.push(load_water(dir, n, dims));
    }
    for c in &codes {
        let per = if c.layout.lists() {
            block_bytes(c.bytes) as f64
        } else {
            c.bytes as f64
        };
        println!(
            "{}: {} code bytes, {per:.0} bytes a vector",
            c.layout.name(),
            c.bytes
        );
    }
    let fastscan: Vec<FastScan> = if avx512 {
        [4usize, 2]
            .iter()
            .map(|&dsub| train_fastscan(&g, dsub))
            .collect()
    } else {
        Vec::new()
    };
    for f in &fastscan {
        println!(
            "pq4fs-d{}: {} subspaces of {} dims, {} code bytes, {} bytes a node",
            f.dsub,
            f.nsub,
            f.dsub,
            f.nsub / 2,
            f.block
        );
    }
    let mut s = Scratch::new(n);
    let mut lanes: Vec<Lane> = (0..8)
        .map(|_| Lane {
            s: Scratch::new(n),
            p: None,
            qi: 0,
        })
        .collect();
    let mut variants: Vec<Variant> = codes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.layout.name().to_string(), Walk::Codes(i, None)))
        .collect();
    for margin in [0.06f32, 0.1, 0.15].into_iter().filter(|_| avx512) {
        variants.push((
            format!("int4-gate{margin}"),
            Walk::Codes(0, Some((3, margin))),
        ));
    }
    for (i, f) in fastscan.iter().enumerate() {
        variants.push((format!("pq4fs-d{}", f.dsub), Walk::FastScan(i)));
    }
    for l in [2usize, 4, 8] {
        variants.push((format!("int4-x{l}"), Walk::Interleaved(l)));
    }
    // `--only a,b`: the variants named (all by default).
    if let Some(only) = arg("--only") {
        let names: Vec<&str> = only.split(',').collect();
        variants.retain(|(name, _)| names.contains(&name.as_str()));
    }
    // `--efs 64,96,128`: the beam widths tried, each with the `rr` of `--rrs` up to ef (20, 40
    // and 80 unless given; `ef` there ranks the whole beam).
    let efs: Vec<usize> = arg("--efs").map_or(vec![24, 32, 48, 64, 96, 128], |e| {
        e.split(',').map(|x| x.parse().expect("a number")).collect()
    });
    let rrs: Vec<Option<usize>> = arg("--rrs").map_or(vec![Some(20), Some(40), Some(80)], |r| {
        r.split(',')
            .map(|x| (x != "ef").then(|| x.parse().expect("a number or `ef`")))
            .collect()
    });
    let settings: Vec<(usize, usize)> = efs
        .iter()
        .flat_map(|&ef| {
            let mut rr: Vec<usize> = rrs
                .iter()
                .map(|r| r.unwrap_or(ef))
                .filter(|&rr| rr <= ef)
                .collect();
            rr.sort_unstable();
            rr.dedup();
            rr.into_iter().map(move |rr| (ef, rr))
        })
        .collect();
    println!(
        "{} vectors x {dims}; {} queries; {rounds} rounds (1 warm-up), variants alternated",
        n,
        qs.len()
    );
    println!(
        "{:>14} {:>4} {:>4} {:>8} {:>9} {:>7} {:>8} {:>8}",
        "variant", "ef", "rr", "recall", "QPS", "hops/q", "codes/q", "gated/q"
    );
    let nv = variants.len();
    let mut best = vec![(0f64, 0usize, 0usize); nv];
    for &(ef, rr) in &settings {
        let mut qps = vec![Vec::new(); nv];
        let mut recall = vec![0f64; nv];
        let mut work = vec![(0f64, 0f64, 0f64); nv];
        for round in 0..rounds {
            for (vi, (_, walk)) in variants.iter().enumerate() {
                (s.hops, s.estimates, s.gated) = (0, 0, 0);
                let t = Instant::now();
                let res: Vec<Vec<u32>> = match walk {
                    Walk::Codes(ci, gate) => {
                        let c = &codes[*ci];
                        let gate = gate.map(|(gi, m)| (&codes[gi], m));
                        qs.iter()
                            .map(|q| search(&g, c, gate, q, ef, rr, &mut s))
                            .collect()
                    }
                    Walk::FastScan(fi) => qs
                        .iter()
                        .map(|q| search_fastscan(&g, &fastscan[*fi], q, ef, rr, &mut s))
                        .collect(),
                    Walk::Interleaved(l) => {
                        let res = search_interleaved(&g, &codes[0], &qs, ef, rr, &mut lanes[..*l]);
                        for lane in &mut lanes {
                            (s.hops, s.estimates) =
                                (s.hops + lane.s.hops, s.estimates + lane.s.estimates);
                            (lane.s.hops, lane.s.estimates) = (0, 0);
                        }
                        res
                    }
                };
                let secs = t.elapsed().as_secs_f64();
                if round > 0 {
                    qps[vi].push(qs.len() as f64 / secs);
                } else {
                    let per = |x: u64| x as f64 / qs.len() as f64;
                    work[vi] = (per(s.hops), per(s.estimates), per(s.gated));
                    let hits: usize = res
                        .iter()
                        .zip(&gt)
                        .map(|(r, t)| {
                            r.iter()
                                .filter(|&&x| t[..10].contains(&(original[x as usize] as i32)))
                                .count()
                        })
                        .sum();
                    recall[vi] = hits as f64 / (10 * qs.len()) as f64;
                }
            }
        }
        for (vi, (name, ..)) in variants.iter().enumerate() {
            let m = median(qps[vi].clone());
            let (h, e, gd) = work[vi];
            println!(
                "{name:>14} {ef:>4} {rr:>4} {:>8.4} {m:>9.0} {h:>7.0} {e:>8.0} {gd:>8.0}",
                recall[vi]
            );
            if recall[vi] >= 0.95 && m > best[vi].0 {
                best[vi] = (m, ef, rr);
            }
        }
    }
    println!("best QPS at recall >= 0.95:");
    for (vi, (name, ..)) in variants.iter().enumerate() {
        let (q, ef, rr) = best[vi];
        println!("{name:>14}: {q:.0} (ef {ef}, rr {rr})");
    }
    Ok(())
}
