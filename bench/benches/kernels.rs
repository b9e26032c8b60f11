//! The distance kernels at every SIMD level this CPU runs, for the dimensions of the harness's
//! datasets (128, 384, 1536), on vectors that stay in cache: the kernels' own speed, apart from
//! memory. `cargo bench --manifest-path bench/Cargo.toml --bench kernels`

use chassis::graph::Distance;
use chassis::{Metric, SimdLevel};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn bench(c: &mut Criterion) {
    for metric in [Metric::L2Squared, Metric::Cosine] {
        let mut g = c.benchmark_group(format!("kernel {}", metric.name()));
        for dims in [128usize, 384, 1536] {
            let a: Vec<f32> = (0..dims).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..dims).map(|i| (i as f32 * 0.11).cos()).collect();
            for level in SimdLevel::available() {
                let d = Distance::with_level(metric, level);
                g.bench_with_input(
                    BenchmarkId::new(format!("{level:?}"), dims),
                    &dims,
                    |bch, _| bch.iter(|| d.eval(black_box(&a), black_box(&b))),
                );
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
