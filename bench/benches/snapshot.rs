//! The reader's snapshot fast path (target ≤ 100 ns when nothing changed), and a search on a
//! reader's snapshot beside the same search through the writer.

use chassis::{Index, IndexReader, Metric, Options};
use chassis_bench::synthetic;
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("chassis-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.chassis");
    let _ = std::fs::remove_file(&path);
    let data = synthetic(20_000, 128, 3);
    let w = Index::create(&path, Options::new(128, Metric::Cosine)).unwrap();
    for i in 0..data.len() {
        w.add(data.row(i)).unwrap();
    }
    w.flush().unwrap();
    let r = IndexReader::open(&path).unwrap();
    r.snapshot().unwrap();
    c.bench_function("snapshot, nothing changed (fast path)", |b| {
        b.iter(|| r.snapshot().unwrap())
    });
    let q = data.row(77).to_vec();
    c.bench_function("search k=10 ef=64, reader (fresh snapshot)", |b| {
        b.iter(|| r.search(&q, 10, 64).unwrap())
    });
    c.bench_function("search k=10 ef=64, writer", |b| {
        b.iter(|| w.search(&q, 10, 64).unwrap())
    });
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
