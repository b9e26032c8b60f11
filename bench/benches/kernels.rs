//! The distance kernels at every SIMD level this CPU runs, for the dimensions of the harness's
//! datasets (128, 384, 1536), on vectors that stay in cache: the kernels' own speed, apart from
//! memory. Both vectors start on a cache line, as stored vectors and prepared queries do; the
//! "misaligned" rows move one of them 16 bytes off, as a query in a plain `Vec` may be.
//! `cargo bench --manifest-path bench/Cargo.toml --bench kernels`

use chassis::graph::Distance;
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

fn bench(c: &mut Criterion) {
    for metric in [Metric::L2Squared, Metric::Cosine] {
        let mut g = c.benchmark_group(format!("kernel {}", metric.name()));
        for dims in [128usize, 384, 1536] {
            let b = aligned(dims, 0, |i| (i as f32 * 0.11).cos());
            for (skip, note) in [(0, ""), (4, " misaligned")] {
                let a = aligned(dims, skip, |i| (i as f32 * 0.37).sin());
                let (a, b) = (floats(&a, dims), floats(&b, dims));
                for level in SimdLevel::available() {
                    let d = Distance::with_level(metric, level);
                    g.bench_with_input(
                        BenchmarkId::new(format!("{level:?}{note}"), dims),
                        &dims,
                        |bch, _| bch.iter(|| d.eval(black_box(a), black_box(b))),
                    );
                }
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
