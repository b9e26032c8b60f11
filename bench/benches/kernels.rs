//! The distance kernels at every SIMD level this CPU runs, for the dimensions of the harness's
//! datasets (128, 384, 1536), on vectors that stay in cache: the kernels' own speed, apart from
//! memory. Both vectors start on a cache line, as stored vectors and prepared queries do; the
//! "misaligned" rows move one of them 16 bytes off, as a query in a plain `Vec` may be. The
//! "halves" rows score a format 4 vector by its high halves (`Distance::walk`), as a search's
//! walk does: half the bytes, each value widened from bfloat16.
//! `cargo bench --manifest-path bench/Cargo.toml --bench kernels`

use chassis::format::vector::{encode, Halves, VectorLayout};
use chassis::graph::{Distance, VectorRef};
use chassis::{Metric, SimdLevel};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

/// One cache line of floats: a `Vec<Line>` starts on a 64-byte boundary.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `dims` floats from `f`, starting `skip` floats past a cache-line boundary.
fn aligned(dims: usize, skip: usize, f: impl Fn(usize) -> f32) -> (Vec<Line>, usize) {
    let mut lines = vec![Line([0.0; 16]); (dims + skip).div_ceil(16)];
    for i in 0..dims {
        lines[(skip + i) / 16].0[(skip + i) % 16] = f(i);
    }
    (lines, skip)
}

fn floats(v: &(Vec<Line>, usize), dims: usize) -> &[f32] {
    // SAFETY: Line is repr(C) [f32; 16] (64 bytes, no padding), so its Vec is 16 * len
    // contiguous initialised floats; `skip + dims` is within them by construction.
    let all = unsafe { std::slice::from_raw_parts(v.0.as_ptr().cast::<f32>(), v.0.len() * 16) };
    &all[v.1..v.1 + dims]
}

/// Half a cache line of floats' 16-bit halves: a `Vec<HalfLine>` starts on a 64-byte boundary.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct HalfLine([u16; 32]);

/// `v` split as format 4 stores it (`format::vector::encode`: every high half, then every
/// low half), on a cache line.
fn split(v: &[f32]) -> Vec<HalfLine> {
    let mut bytes = vec![0u8; 4 * v.len()];
    encode(VectorLayout::SplitHalves, v, &mut bytes);
    let mut lines = vec![HalfLine([0; 32]); (2 * v.len()).div_ceil(32)];
    for (i, b) in bytes.chunks_exact(2).enumerate() {
        lines[i / 32].0[i % 32] = u16::from_le_bytes([b[0], b[1]]);
    }
    lines
}

fn halves(lines: &[HalfLine], dims: usize) -> &[u16] {
    // SAFETY: HalfLine is repr(C) [u16; 32] (64 bytes, no padding), so its Vec is 32 * len
    // contiguous initialised u16s; `2 * dims` is within them by construction.
    let all = unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u16>(), lines.len() * 32) };
    &all[..2 * dims]
}

fn bench(c: &mut Criterion) {
    for metric in [Metric::L2Squared, Metric::Cosine] {
        let mut g = c.benchmark_group(format!("kernel {}", metric.name()));
        for dims in [128usize, 384, 1536] {
            let b = aligned(dims, 0, |i| (i as f32 * 0.11).cos());
            for (skip, note) in [(0, ""), (4, " misaligned")] {
                let a = aligned(dims, skip, |i| (i as f32 * 0.37).sin());
                let (a, b) = (floats(&a, dims), floats(&b, dims));
                let split_b = split(b);
                let h = VectorRef::Split(Halves::side_by_side(halves(&split_b, dims)));
                for level in SimdLevel::available() {
                    let d = Distance::with_level(metric, level);
                    g.bench_with_input(
                        BenchmarkId::new(format!("{level:?}{note}"), dims),
                        &dims,
                        |bch, _| bch.iter(|| d.eval(black_box(a), black_box(b))),
                    );
                    g.bench_with_input(
                        BenchmarkId::new(format!("{level:?} halves{note}"), dims),
                        &dims,
                        |bch, _| bch.iter(|| d.walk(black_box(a), black_box(h))),
                    );
                }
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
