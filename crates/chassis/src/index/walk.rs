//! Whether a format 4 file is walked by its vectors' high halves or exactly
//! (docs/ARCHITECTURE.md, "Format 4"): the writer's running check, and the same check for a
//! graph that came without inserts (a migrated one).
//!
//! Invariant: once decided "exact" for good, never undone (the header flag is never cleared
//! on a split file).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};

use crate::format::header;
use crate::format::vector::VectorRef;
use crate::graph::{GraphStore, Metric};

use super::{View, Writer};

/// The writer's running check that walking by high halves suits its data (formats 4 and 6).
///
/// Every insert reports the gap between the nearest and the tenth nearest node it found, by
/// high halves and exactly. High halves keep each value to within 2⁻⁷ of itself, which moves
/// such a gap by a few percent at most when neighbors are far apart compared with the vectors'
/// size (pypi-minilm: no insert of 100,000 off by 10%), and by more than itself when they
/// nearly coincide (vectors sharing a large offset). A graph starts walked exactly, and is
/// walked by high halves once [`WalkCheck::SAMPLES`] inserts were checked (so its first links
/// are chosen by exact distances whatever the data). Whenever more than a fifth of all checked
/// inserts missed by over 10%, the file is walked exactly for good: the writer at once, readers
/// from the flush that commits [`header::FLAG_EXACT_WALK`]. Inner-product files are walked
/// exactly from the start.
#[derive(Debug, Default)]
pub(super) struct WalkCheck {
    /// Decided for good: walk exactly (the header flag).
    pub(super) forced: AtomicBool,
    /// Enough inserts were checked (or the file already held that many when opened).
    pub(super) settled: AtomicBool,
    pub(super) samples: AtomicU64,
    pub(super) misses: AtomicU64,
}

impl WalkCheck {
    pub(super) const SAMPLES: u64 = 64;

    /// A copy of this check's state (for a rollback's fresh `Shared`).
    pub(super) fn carry(&self) -> WalkCheck {
        let r = std::sync::atomic::Ordering::Relaxed;
        WalkCheck {
            forced: AtomicBool::new(self.forced.load(r)),
            settled: AtomicBool::new(self.settled.load(r)),
            samples: AtomicU64::new(self.samples.load(r)),
            misses: AtomicU64::new(self.misses.load(r)),
        }
    }

    pub(super) fn new(flags: u32, committed: u64, metric: Metric) -> WalkCheck {
        WalkCheck {
            // Inner product on vectors of any length: a dot product's error grows with the
            // norms, and walking by high halves cost recall (0.95 to 0.905 at ef 128 on the
            // Python tests' data) where the gap check saw nothing wrong.
            forced: AtomicBool::new(
                flags & header::FLAG_EXACT_WALK != 0 || metric == Metric::InnerProduct,
            ),
            settled: AtomicBool::new(committed >= Self::SAMPLES),
            ..WalkCheck::default()
        }
    }

    pub(super) fn exact(&self) -> bool {
        self.forced.load(AtomicOrdering::Relaxed) || !self.settled.load(AtomicOrdering::Relaxed)
    }

    pub(super) fn note(&self, walked_gap: f32, exact_gap: f32) {
        let miss = u64::from((walked_gap - exact_gap).abs() > 0.1 * exact_gap.abs());
        let samples = self.samples.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        let misses = self.misses.fetch_add(miss, AtomicOrdering::Relaxed) + miss;
        if samples >= Self::SAMPLES {
            if misses * 5 > samples {
                self.forced.store(true, AtomicOrdering::Relaxed);
            }
            self.settled.store(true, AtomicOrdering::Relaxed);
        }
    }
}

impl Writer {
    /// The walk check ([`WalkCheck`]) for a graph that came without inserts (a migrated one):
    /// up to 256 evenly spaced nodes, each with its level-0 neighbors as what an insert would
    /// have found, ordered by exact distance.
    pub(super) fn check_walk_on_graph(&self) {
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.shared.walk,
            codes: false,
        };
        let mut buf = Vec::new();
        let step = (self.count / 256).max(1);
        for s in (0..self.count).step_by(step as usize) {
            let (Some(v), Some(words)) = (self.store.vector(s), self.store.level0(s)) else {
                continue;
            };
            let q = v.to_vec();
            let mut pairs: Vec<(f32, f32)> = words
                .iter()
                .map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
                .filter(|&n| n < self.count && n != s)
                .filter_map(|n| match self.store.vector(n)? {
                    u @ VectorRef::Split(_) => {
                        Some((self.dist.exact(&q, u, &mut buf), self.dist.walk(&q, u)))
                    }
                    _ => None,
                })
                .collect();
            if pairs.len() < 2 {
                continue;
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let j = 9.min(pairs.len() - 1);
            view.note_walk(pairs[j].1 - pairs[0].1, pairs[j].0 - pairs[0].0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Options;
    use std::sync::atomic::Ordering;

    /// A graph that came without inserts (migration) gets the walk check from its own lists.
    #[test]
    fn a_graph_without_inserts_is_checked_from_its_lists() {
        for (offset, fine) in [(1000.0f32, true), (0.0, false)] {
            let index =
                crate::Index::in_memory(Options::new(8, Metric::L2Squared), 64 << 20).unwrap();
            let mut x = 7u64;
            for _ in 0..600 {
                let v: Vec<f32> = (0..8)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        offset + 0.01 * ((x >> 40) as f32 / (1u64 << 24) as f32)
                    })
                    .collect();
                index.add(&v).unwrap();
            }
            let ix = index.writer.lock().unwrap();
            let walk = &ix.shared.walk;
            assert_eq!(walk.exact(), fine, "from the inserts");
            // Start over, as a migrated graph does.
            walk.forced.store(false, Ordering::Relaxed);
            walk.settled.store(false, Ordering::Relaxed);
            walk.samples.store(0, Ordering::Relaxed);
            walk.misses.store(0, Ordering::Relaxed);
            ix.check_walk_on_graph();
            assert!(walk.settled.load(Ordering::Relaxed));
            assert_eq!(walk.exact(), fine, "from the lists");
        }
    }
}
