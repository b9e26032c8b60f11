//! Searches never wait for writes, in the writer's own process (the ADR's deferred
//! "in-process lock-free search beside writes"): three threads search one `Index` while a
//! fourth adds in batches (on one thread and on two), deletes, flushes, compacts, and in every
//! other round drops an unflushed batch (dropping the index without a flush) and reopens.
//!
//! The writer also replaces documents (`set_metadata`: the id moves to a new slot).
//!
//! Every search is checked against a model the writer keeps as it goes, timed by one shared
//! clock: no id deleted before the search began is returned (nor found by `contains`), every
//! id returned was handed to an add that had started, each distance is the distance to that
//! id's own vector, hits come nearest first without repeats, and the search's recall against
//! brute force over what was committed to the model when it began stays high.
//! `CHASSIS_BESIDE_ROUNDS` sets the writer's rounds (default 12).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use chassis::{Index, Metric};
use common::{clustered, Rng};

const DIMS: usize = 8;
const K: usize = 10;

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// What the writer tells the searchers, each event stamped by the clock after it finished.
struct Model {
    clock: AtomicU64,
    /// Per id: when its add returned (0: not yet).
    added_at: Vec<AtomicU64>,
    /// Per id: when its delete returned, or when a reopen dropped it (0: never).
    gone_at: Vec<AtomicU64>,
    /// Ids handed to adds so far (an add in progress included).
    assigned: AtomicU64,
    stop: AtomicBool,
}

impl Model {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }
}

/// One search's record, checked for recall after the run.
struct Sample {
    query: Vec<f32>,
    hits: Vec<u64>,
    began: u64,
    ended: u64,
}

#[test]
fn index_is_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Index>();
}

#[test]
fn searches_beside_a_writer_see_a_consistent_state_and_never_a_deleted_id() {
    let rounds: usize = std::env::var("CHASSIS_BESIDE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let per_round = 500;
    let data = clustered(rounds * per_round, DIMS, 16, 31);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("beside.chassis");
    let opts = common::small(DIMS, Metric::L2Squared, 8, 48);
    drop(Index::create(&path, opts).unwrap());
    let model = Model {
        clock: AtomicU64::new(1),
        added_at: (0..data.len()).map(|_| AtomicU64::new(0)).collect(),
        gone_at: (0..data.len()).map(|_| AtomicU64::new(0)).collect(),
        assigned: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let searches = AtomicU64::new(0);
    let mut index = Some(Index::open(&path).unwrap());
    let mut rng = Rng::new(7);
    let mut committed: BTreeSet<u64> = BTreeSet::new();
    let mut next = 0u64;
    for round in 0..rounds {
        let ix = index.take().unwrap();
        // The state as of the round's start: committed, nothing pending.
        let mut live = committed.clone();
        let mut pending_adds: Vec<u64> = Vec::new();
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (ix, model, data, samples, searches) =
                    (&ix, &model, &data, &samples, &searches);
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t + 10 * round as u64);
                    while !model.stop.load(Ordering::SeqCst) {
                        let base = &data[rng.below(data.len())];
                        let q: Vec<f32> = base.iter().map(|x| x + 0.05 * rng.normal()).collect();
                        let began = model.now();
                        let hits = ix.search(&q, K, 48).unwrap();
                        let ended = model.now();
                        let assigned = model.assigned.load(Ordering::SeqCst);
                        let mut seen = BTreeSet::new();
                        let mut last = f32::NEG_INFINITY;
                        for h in &hits {
                            assert!(h.id < assigned, "id {} was never added", h.id);
                            let gone = model.gone_at[h.id as usize].load(Ordering::SeqCst);
                            assert!(
                                gone == 0 || gone > began,
                                "id {} returned though deleted at {gone}, before the search \
                                 began at {began}",
                                h.id
                            );
                            assert!(seen.insert(h.id), "id {} returned twice", h.id);
                            let d = l2(&q, &data[h.id as usize]);
                            assert!(
                                (h.distance - d).abs() <= 1e-4 * d.max(1.0),
                                "id {}: distance {} but its vector is at {d}",
                                h.id,
                                h.distance
                            );
                            assert!(h.distance >= last, "hits out of order");
                            last = h.distance;
                        }
                        // A deleted id stays deleted for lookups too.
                        let probe = rng.below(data.len()) as u64;
                        let before = model.now();
                        let gone = model.gone_at[probe as usize].load(Ordering::SeqCst);
                        if gone != 0 && gone <= before {
                            assert!(!ix.contains(probe).unwrap(), "deleted id {probe} found");
                        }
                        let n = searches.fetch_add(1, Ordering::Relaxed);
                        if n % 16 == 0 {
                            samples.lock().unwrap().push(Sample {
                                query: q,
                                hits: hits.iter().map(|h| h.id).collect(),
                                began,
                                ended,
                            });
                        }
                    }
                });
            }
            // The writer: batches on one thread and on two, deletes, flushes, and in odd
            // rounds a last batch that the drop below discards.
            let steps = if round % 2 == 0 { 4 } else { 5 };
            for step in 0..steps {
                let n = per_round / 5;
                let ids: Vec<u64> = (next..next + n as u64).collect();
                model.assigned.store(next + n as u64, Ordering::SeqCst);
                let flat: Vec<f32> = ids
                    .iter()
                    .flat_map(|&id| data[id as usize].iter().copied())
                    .collect();
                let threads = 1 + (step % 2);
                ix.add_batch_with_ids(&ids, &flat, threads).unwrap();
                let t = model.tick();
                for &id in &ids {
                    model.added_at[id as usize].store(t, Ordering::SeqCst);
                    live.insert(id);
                    pending_adds.push(id);
                }
                next += n as u64;
                if step == 4 {
                    break;
                }
                for _ in 0..10 {
                    let victims: Vec<u64> = live.iter().copied().collect();
                    let id = victims[rng.below(victims.len())];
                    ix.delete(id).unwrap();
                    let t = model.tick();
                    model.gone_at[id as usize].store(t, Ordering::SeqCst);
                    live.remove(&id);
                }
                // Replacements: the id moves to a new slot with the same vector; no search
                // may see it twice (or miss it: recall below).
                for _ in 0..10 {
                    let ids: Vec<u64> = live.iter().copied().collect();
                    let id = ids[rng.below(ids.len())];
                    let doc = chassis::format::metadata::parse_json(&format!(r#"{{"v": {step}}}"#))
                        .unwrap();
                    ix.set_metadata(id, &doc).unwrap();
                }
                if step == 1 || step == 3 {
                    ix.flush().unwrap();
                    committed = live.clone();
                    pending_adds.clear();
                }
                if step == 2 && round % 4 == 3 {
                    // Compaction: the one write that swaps the file under the searches.
                    ix.compact(Default::default()).unwrap();
                    committed = live.clone();
                    pending_adds.clear();
                }
            }
            model.stop.store(true, Ordering::SeqCst);
        });
        model.stop.store(false, Ordering::SeqCst);
        if round % 2 == 0 {
            ix.close().unwrap();
            committed = live.clone();
        } else {
            // Drop the unflushed batch: its adds never happened.
            drop(ix);
            let t = model.tick();
            for &id in &pending_adds {
                model.gone_at[id as usize].store(t, Ordering::SeqCst);
            }
        }
        let reopened = Index::open(&path).unwrap();
        assert_eq!(reopened.len(), committed.len(), "round {round}");
        let mut ids: Vec<u64> = reopened.ids().unwrap();
        ids.sort_unstable();
        assert_eq!(ids, committed.iter().copied().collect::<Vec<_>>());
        index = Some(reopened);
    }
    let total = searches.load(Ordering::Relaxed);
    assert!(total > 100, "only {total} searches ran beside the writer");

    // Recall: each sampled search against brute force over what was committed to the model
    // (added, not gone) when it began; ids whose state changed while it ran count for neither.
    let samples = samples.into_inner().unwrap();
    let (mut found, mut wanted) = (0usize, 0usize);
    for s in &samples {
        let settled = |id: usize| {
            let a = model.added_at[id].load(Ordering::SeqCst);
            let g = model.gone_at[id].load(Ordering::SeqCst);
            let in_flux = (a > s.began && a <= s.ended) || (g > s.began && g <= s.ended);
            let live = a != 0 && a <= s.began && (g == 0 || g > s.began);
            (live, in_flux)
        };
        let mut truth: Vec<(f32, u64)> = (0..data.len())
            .filter(|&id| settled(id) == (true, false))
            .map(|id| (l2(&s.query, &data[id]), id as u64))
            .collect();
        truth.sort_by(|a, b| a.0.total_cmp(&b.0));
        let truth: BTreeSet<u64> = truth.iter().take(K).map(|x| x.1).collect();
        wanted += truth.len();
        found += s.hits.iter().filter(|id| truth.contains(id)).count();
    }
    let recall = found as f64 / wanted.max(1) as f64;
    eprintln!(
        "{total} searches beside the writer; recall@{K} of {} sampled: {recall:.4}",
        samples.len()
    );
    assert!(recall >= 0.9, "recall@{K} {recall:.4} beside the writer");
}
