//! Experiment 2 of ADR-0008, here: the cost of segment addressing.
//!
//! Opens a Chassis file (by default the pypi-minilm index the ANN harness built, else builds
//! one), copies its graph into a flat control (one vector array, one level-0 array, upper lists
//! per node) and searches both with the same code (`chassis::graph::search`, every slot
//! accepted) from the same entry point. Every query must return identical slots through both
//! layouts, so only addressing differs. Rounds alternate the layouts, the first is a warm-up;
//! the report gives median QPS per ef and the ratio segment / flat.
//!
//! The reader maps its segments for huge pages (where the file system has large folios), so
//! the flat control's arrays are advised `MADV_HUGEPAGE` too (`--flat-pages small` leaves them
//! in 4 KiB pages): the comparison is then addressing alone, not page sizes.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin segments -- [--index F] [--rounds 7] [--flat-pages huge|small]
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use chassis::format::vector::Halves;
use chassis::graph::{self, Distance, GraphStore, Scratch, VectorRef};
use chassis::{Index, IndexReader, Metric, Options};
use chassis_bench::{advise_huge, arg, median, pypi_minilm, read_fvecs};

const EFS: [usize; 7] = [10, 16, 32, 64, 128, 256, 512];

/// One search: (query, ef, scratch) → result slots.
type SearchFn<'a> = dyn Fn(&[f32], usize, &mut Scratch) -> Vec<u32> + 'a;

/// The control: the same graph in flat arrays, addressed by multiplication only.
struct Flat {
    dims: usize,
    m0: usize,
    routing: u32,
    /// The vectors in the file's layout: f32 values, or split halves (2 · dims per slot).
    vectors: Vec<f32>,
    halves: Vec<u16>,
    /// The file's split vectors are walked exactly.
    exact: bool,
    level0: Vec<AtomicU32>,
    upper: Vec<Vec<Vec<AtomicU32>>>,
}

impl GraphStore for Flat {
    #[inline]
    fn routing_count(&self) -> u32 {
        self.routing
    }
    #[inline]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        if self.halves.is_empty() {
            let at = slot as usize * self.dims;
            self.vectors.get(at..at + self.dims).map(VectorRef::F32)
        } else {
            let at = slot as usize * 2 * self.dims;
            let h = Halves::side_by_side(self.halves.get(at..at + 2 * self.dims)?);
            Some(if self.exact {
                VectorRef::SplitExact(h)
            } else {
                VectorRef::Split(h)
            })
        }
    }
    #[inline]
    fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
        let at = slot as usize * self.m0;
        self.level0.get(at..at + self.m0)
    }
    #[inline]
    fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
        self.upper
            .get(slot as usize)?
            .get(layer.checked_sub(1)?)
            .map(|v| v.as_slice())
    }
}

/// Asks for huge pages under a fresh allocation (before anything touches it).
fn copy_graph(g: &impl GraphStore, dims: usize, m: usize, huge: bool) -> Flat {
    let n = g.routing_count();
    let mut f = Flat {
        dims,
        m0: 2 * m,
        routing: n,
        vectors: Vec::new(),
        halves: Vec::new(),
        exact: false,
        level0: Vec::with_capacity(n as usize * 2 * m),
        upper: Vec::with_capacity(n as usize),
    };
    let split = matches!(
        g.vector(0),
        Some(VectorRef::Split(_) | VectorRef::SplitExact(_))
    );
    f.exact = matches!(g.vector(0), Some(VectorRef::SplitExact(_)));
    if split {
        f.halves.reserve(n as usize * 2 * dims);
    } else {
        f.vectors.reserve(n as usize * dims);
    }
    if huge {
        advise_huge(&f.vectors);
        advise_huge(&f.halves);
        advise_huge(&f.level0);
    }
    for s in 0..n {
        match g.vector(s).expect("a committed vector") {
            VectorRef::F32(v) => f.vectors.extend_from_slice(v),
            VectorRef::Split(h) | VectorRef::SplitExact(h) => {
                f.halves.extend_from_slice(h.high);
                f.halves.extend_from_slice(h.low);
            }
            VectorRef::Code(..) | VectorRef::F16(_) => {
                unreachable!("this harness builds f32 or split-halves files without codes")
            }
        }
        let l0 = g.level0(s).expect("a committed record");
        f.level0
            .extend(l0.iter().map(|w| AtomicU32::new(w.load(Ordering::Relaxed))));
        let mut layers = Vec::new();
        let mut layer = 1;
        while let Some(words) = g.upper(s, layer) {
            layers.push(
                words
                    .iter()
                    .map(|w| AtomicU32::new(w.load(Ordering::Relaxed)))
                    .collect(),
            );
            layer += 1;
        }
        f.upper.push(layers);
    }
    f
}

fn main() -> chassis::Result<()> {
    let rounds: usize = arg("--rounds").map_or(7, |r| r.parse().expect("a number"));
    let data = pypi_minilm().expect("../shared/data/pypi-minilm is needed");
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/ann/indexes/pypi-minilm/chassis-t1.idx");
    let path = arg("--index").map_or(default, PathBuf::from);
    if !path.exists() {
        println!(
            "building {} (M = 16, ef_construction = 200)",
            path.display()
        );
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        let base = read_fvecs(&data.join("pypi-minilm_base.fvecs"))?;
        let ix = Index::create(&path, Options::new(base.dims, Metric::Cosine))?;
        for i in 0..base.len() {
            ix.add(base.row(i))?;
        }
        ix.flush()?;
    }
    let queries = read_fvecs(&data.join("pypi-minilm_query.fvecs"))?;
    let reader = IndexReader::open(&path)?;
    let snap = reader.snapshot()?;
    let h = reader.header_of(&snap).clone();
    let seg = reader.graph(&snap);
    let huge = arg("--flat-pages").as_deref() != Some("small");
    let flat = copy_graph(&seg, reader.dims(), reader.m(), huge);
    let dist = Distance::new(reader.metric());
    let qs: Vec<Vec<f32>> = (0..queries.len())
        .map(|i| {
            let q = queries.row(i);
            if reader.metric() == Metric::Cosine {
                let n = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                q.iter().map(|x| x / n).collect()
            } else {
                q.to_vec()
            }
        })
        .collect();
    let (ep, top) = (h.entry_point, h.max_layer as usize);
    let mut scratch = Scratch::default();
    let mut run = |g: &SearchFn<'_>, ef: usize| {
        let t = Instant::now();
        let mut out = Vec::with_capacity(qs.len());
        for q in &qs {
            out.push(g(q, ef, &mut scratch));
        }
        (qs.len() as f64 / t.elapsed().as_secs_f64(), out)
    };
    let seg_search = |q: &[f32], ef: usize, s: &mut Scratch| -> Vec<u32> {
        graph::search(&seg, &dist, q, ep, top, 10, ef, |_| true, s)
            .iter()
            .map(|x| x.slot)
            .collect()
    };
    let flat_search = |q: &[f32], ef: usize, s: &mut Scratch| -> Vec<u32> {
        graph::search(&flat, &dist, q, ep, top, 10, ef, |_| true, s)
            .iter()
            .map(|x| x.slot)
            .collect()
    };
    println!(
        "{} vectors x {} dims from {}; {} queries, {} rounds (1 warm-up); flat arrays in {} pages",
        flat.routing,
        flat.dims,
        path.display(),
        qs.len(),
        rounds,
        if huge { "huge" } else { "4 KiB" }
    );
    println!(
        "{:>5} {:>12} {:>12} {:>14}",
        "ef", "segment QPS", "flat QPS", "segment/flat"
    );
    for ef in EFS {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (qa, ra) = run(&seg_search, ef);
            let (qb, rb) = run(&flat_search, ef);
            assert_eq!(
                ra, rb,
                "the two layouts returned different results at ef {ef}"
            );
            if round > 0 {
                a.push(qa);
                b.push(qb);
            }
        }
        let (sa, sb) = (median(a), median(b));
        println!("{ef:>5} {sa:>12.0} {sb:>12.0} {:>13.3}x", sa / sb);
    }
    println!("identical results through both layouts for every query at every ef");
    Ok(())
}
