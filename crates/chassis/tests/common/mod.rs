//! Shared helpers for the integration tests: seeded synthetic data and brute force.
#![allow(dead_code)]

use chassis::graph::distance::reference;
use chassis::os::MemStorage;
use chassis::{Geometry, Metric, Options};

/// Options in the unit-test geometry (16-slot segments, 1 KiB heap chunks, 4-entry table
/// pages), so small indexes cross many regions.
pub fn small(dims: usize, metric: Metric, m: usize, ef_construction: usize) -> Options {
    Options::new(dims, metric)
        .m(m)
        .ef_construction(ef_construction)
        .geometry(Geometry::small_for_tests(m as u32, 16))
}

/// A small seeded PRNG (xorshift64*), so tests need no extra crates and never vary.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-7);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `n` vectors of `dims` in `clusters` Gaussian clusters (centres spread, points spread less).
pub fn clustered(n: usize, dims: usize, clusters: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..dims).map(|_| rng.normal() * 4.0).collect())
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[rng.below(clusters)];
            c.iter().map(|x| x + rng.normal()).collect()
        })
        .collect()
}

/// Exact k nearest (index into `data`), by the metric's distance on what the index stores
/// (unit vectors for cosine).
pub fn brute_force(data: &[Vec<f32>], q: &[f32], k: usize, metric: Metric) -> Vec<usize> {
    let prep = |v: &[f32]| -> Vec<f32> {
        if metric == Metric::Cosine {
            let n = reference::dot(v, v).sqrt();
            v.iter().map(|x| x / n).collect()
        } else {
            v.to_vec()
        }
    };
    let q = prep(q);
    let mut d: Vec<(f32, usize)> = data
        .iter()
        .enumerate()
        .map(|(i, v)| (reference::distance(metric, &prep(v), &q), i))
        .collect();
    d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    d.into_iter().take(k).map(|(_, i)| i).collect()
}

/// Replaces `path`'s contents at once (write a sibling, rename), for files that cooperating
/// test processes read while others write them.
pub fn write_atomic(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Ids as comma-separated text, for state files shared between test processes.
pub fn ids_text(ids: &std::collections::BTreeSet<u64>) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The inverse of [`ids_text`].
pub fn parse_ids(text: &str) -> std::collections::BTreeSet<u64> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect()
}

/// The power-loss simulator's sector size.
pub const SECTOR: usize = 512;

/// What a crash may leave: the durable image, the current one, and the image as of the last
/// sync attempt (sectors equal to it were not written since and keep their durable contents).
pub struct Moment {
    pub durable: Vec<u8>,
    pub current: Vec<u8>,
    pub clean: Vec<u8>,
}

impl Moment {
    pub fn of(mem: &MemStorage) -> Moment {
        Moment {
            durable: mem.durable_image(),
            current: mem.current_image(),
            clean: mem.clean_image(),
        }
    }

    /// A crash at an fsync that took the durable image from `before` to `after`.
    pub fn at_sync(before: &[u8], after: &[u8]) -> Moment {
        Moment {
            durable: before.to_vec(),
            current: after.to_vec(),
            clean: before.to_vec(),
        }
    }

    pub fn crash_image(&self, rng: &mut Rng) -> Vec<u8> {
        let byte = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
        let mut img = self.current.clone();
        for (s, chunk) in img.chunks_mut(SECTOR).enumerate() {
            let at = s * SECTOR;
            let durable: Vec<u8> = (0..chunk.len())
                .map(|i| byte(&self.durable, at + i))
                .collect();
            let written = (0..chunk.len()).any(|i| chunk[i] != byte(&self.clean, at + i));
            if !written {
                chunk.copy_from_slice(&durable);
                continue;
            }
            match rng.below(3) {
                0 => chunk.copy_from_slice(&durable),
                1 => {}
                _ => {
                    for (w, word) in chunk.chunks_mut(8).enumerate() {
                        if rng.below(2) == 0 {
                            word.copy_from_slice(&durable[w * 8..w * 8 + word.len()]);
                        }
                    }
                }
            }
        }
        if self.durable.len() < img.len() && rng.below(2) == 0 {
            img.truncate(self.durable.len());
        }
        img
    }
}

/// Recall@10 of `search` over `queries` against brute force on `base`, checking on the way
/// that every returned distance is the exact one and that hits come nearest first.
pub fn exact_recall(
    base: &[Vec<f32>],
    queries: &[Vec<f32>],
    metric: Metric,
    search: impl Fn(&[f32]) -> Vec<chassis::Neighbor>,
) -> f64 {
    let mut hit = 0;
    for q in queries {
        let truth = brute_force(base, q, 10, metric);
        let got = search(q);
        assert_eq!(got.len(), 10);
        assert!(got.windows(2).all(|w| w[0].distance <= w[1].distance));
        for h in &got {
            let v = &base[h.id as usize];
            let exact = match metric {
                Metric::Cosine => {
                    let norm = |x: &[f32]| x.iter().map(|a| a * a).sum::<f32>().sqrt();
                    let (qn, vn) = (norm(q), norm(v));
                    let qq: Vec<f32> = q.iter().map(|a| a / qn).collect();
                    let vv: Vec<f32> = v.iter().map(|a| a / vn).collect();
                    reference::distance(metric, &qq, &vv)
                }
                _ => reference::distance(metric, q, v),
            };
            assert!(
                (h.distance - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                "{metric:?}: returned {} for id {}, exact {exact}",
                h.distance,
                h.id
            );
        }
        hit += got
            .iter()
            .filter(|h| truth.contains(&(h.id as usize)))
            .count();
    }
    hit as f64 / (10 * queries.len()) as f64
}

/// The current header copy of the file at `path`, decoded, and its offset.
pub fn current_header(bytes: &[u8]) -> (chassis::format::header::Header, usize) {
    use chassis::format::header::Header;
    let copies: Vec<(Header, usize)> = [0usize, 65_536]
        .into_iter()
        .filter_map(|at| {
            Header::decode(&bytes[at..at + 65_536], at as u64)
                .ok()
                .map(|h| (h, at))
        })
        .collect();
    copies
        .into_iter()
        .max_by_key(|(h, _)| h.sequence)
        .expect("a valid header copy")
}

/// BM25 straight from the formula over the live documents (Lucene's idf and k1, b), summed
/// over `fields`; ties by id.
pub fn bm25_reference(
    docs: &std::collections::BTreeMap<u64, chassis::Metadata>,
    fields: &[&str],
    query: &str,
    k: usize,
    pass: impl Fn(&chassis::Metadata) -> bool,
) -> Vec<(u64, f32)> {
    let a = chassis::text::Analyzer::default();
    let mut scores: std::collections::BTreeMap<u64, f32> = std::collections::BTreeMap::new();
    for field in fields {
        let toks: std::collections::BTreeMap<u64, Vec<String>> = docs
            .iter()
            .map(|(&id, d)| {
                let mut t = Vec::new();
                if let Some(chassis::Value::Str(s)) = d.get(*field) {
                    chassis::text::analyze(s, &a, &mut t);
                }
                (id, t)
            })
            .collect();
        let n = toks.values().filter(|t| !t.is_empty()).count() as f64;
        if n == 0.0 {
            continue;
        }
        let avgdl = toks.values().map(|t| t.len()).sum::<usize>() as f64 / n;
        let mut q = Vec::new();
        chassis::text::analyze(query, &a, &mut q);
        let mut qc: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for t in q {
            *qc.entry(t).or_insert(0) += 1;
        }
        for (t, c) in qc {
            let df = toks.values().filter(|d| d.contains(&t)).count() as f64;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for (&id, d) in &toks {
                let tf = d.iter().filter(|x| **x == t).count() as f64;
                if tf > 0.0 && pass(&docs[&id]) {
                    let s = idf * c as f64 * tf
                        / (tf + 1.2 * (1.0 - 0.75 + 0.75 * d.len() as f64 / avgdl));
                    *scores.entry(id).or_insert(0.0) += s as f32;
                }
            }
        }
    }
    let mut out: Vec<(u64, f32)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    out
}

/// The hits agree with the reference: the same scores in order, and the same ids except
/// among documents tied with the last score (ties are broken by slot, the reference breaks
/// them by id).
pub fn agree(got: &[(u64, f32)], want: &[(u64, f32)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
    for (g, w) in got.iter().zip(want) {
        assert!(close(g.1, w.1), "{what}: {got:?} vs {want:?}");
    }
    let Some(&(_, last)) = want.last() else {
        return;
    };
    let above = |v: &[(u64, f32)]| -> std::collections::BTreeSet<u64> {
        v.iter()
            .filter(|x| !close(x.1, last))
            .map(|x| x.0)
            .collect()
    };
    assert_eq!(above(got), above(want), "{what}: {got:?} vs {want:?}");
}
