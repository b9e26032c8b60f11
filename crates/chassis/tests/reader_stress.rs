//! In-process stress: four reader threads search continuously over a writer that adds,
//! deletes, flushes, and in a third of its batches drops itself unflushed and reopens.
//!
//! Every search is checked: each returned id must be live in the snapshot the search used
//! (the writer logs the live ids of every state it commits), and its distance must be the
//! distance to that id's own vector (ids are fixed to vectors). `CHASSIS_READER_SEARCHES`
//! sets the total searches (default 1,000,000).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use chassis::os::MemStorage;
use chassis::{Index, IndexReader, Metric};
use common::{clustered, Rng};

type Live = HashMap<(u64, u64), Arc<BTreeSet<u64>>>;

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[test]
fn readers_stay_correct_under_a_restarting_writer() {
    let total: u64 = std::env::var("CHASSIS_READER_SEARCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let readers = 4;
    let data = Arc::new(clustered(3000, 4, 8, 11));
    let mem = MemStorage::new(256 << 20).unwrap();
    let opts = common::small(4, Metric::L2Squared, 8, 24);
    drop(Index::create_in(Arc::new(mem.reopen(true)), opts).unwrap());
    let live: Arc<RwLock<Live>> = Arc::new(RwLock::new(HashMap::new()));
    live.write()
        .unwrap()
        .insert((0, 0), Arc::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let searches = Arc::new(AtomicU64::new(0));

    let writer = {
        let (mem, data, live, stop) = (mem.reopen(true), data.clone(), live.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(5);
            let mut committed: BTreeSet<u64> = BTreeSet::new();
            let mut next = 0u64;
            let (mut batches, mut restarts) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
                let mut state = committed.clone();
                let mut id = next;
                for _ in 0..5 + rng.below(60) {
                    if (id as usize) < data.len() {
                        ix.add_with_id(id, &data[id as usize]).unwrap();
                        state.insert(id);
                        id += 1;
                    }
                }
                for _ in 0..rng.below(4) {
                    let ids: Vec<u64> = committed.iter().copied().collect();
                    if let Some(&victim) = ids.get(rng.below(ids.len().max(1))) {
                        if state.remove(&victim) {
                            ix.delete(victim).unwrap();
                        }
                    }
                }
                batches += 1;
                if rng.below(3) == 0 {
                    restarts += 1; // dropped unflushed: the next writer reuses the slots
                    continue;
                }
                ix.flush().unwrap();
                let info = ix.info().unwrap();
                live.write().unwrap().insert(
                    (info.committed_count, info.delete_epoch),
                    Arc::new(state.clone()),
                );
                committed = state;
                next = id;
            }
            (batches, restarts)
        })
    };

    let per_reader = total.div_ceil(readers);
    let handles: Vec<_> = (0..readers)
        .map(|t| {
            let (mem, data, live, searches) = (
                mem.reopen(false),
                data.clone(),
                live.clone(),
                searches.clone(),
            );
            std::thread::spawn(move || {
                let r = IndexReader::open_in(Arc::new(mem)).unwrap();
                let mut rng = Rng::new(100 + t);
                let mut pending: Vec<((u64, u64), u64)> = Vec::new();
                let mut bad: Vec<String> = Vec::new();
                let mut last_seq = 0;
                for _ in 0..per_reader {
                    let snap = r.snapshot().unwrap();
                    assert!(snap.sequence() >= last_seq, "a snapshot went back");
                    last_seq = snap.sequence();
                    let q: Vec<f32> = data[rng.below(data.len())]
                        .iter()
                        .map(|x| x + 0.1 * rng.normal())
                        .collect();
                    let hits = match r.search_in(&snap, &q, 5, 24) {
                        Ok(h) => h,
                        Err(e) => {
                            bad.push(format!("search failed: {e}"));
                            continue;
                        }
                    };
                    if hits.len() as u64 != snap.len().min(5) {
                        bad.push(format!("{} hits, {} live", hits.len(), snap.len()));
                    }
                    let key = (snap.committed_count(), snap.delete_epoch());
                    let set = live.read().unwrap().get(&key).cloned();
                    for h in hits {
                        match data.get(h.id as usize) {
                            Some(v) if (l2(&q, v) - h.distance).abs() <= 1e-3 => {}
                            _ => bad.push(format!("id {} with a distance not its own", h.id)),
                        }
                        match &set {
                            Some(s) if !s.contains(&h.id) => {
                                bad.push(format!("id {} not live in {key:?}", h.id))
                            }
                            Some(_) => {}
                            None => pending.push((key, h.id)),
                        }
                    }
                    searches.fetch_add(1, Ordering::Relaxed);
                }
                (pending, bad)
            })
        })
        .collect();
    let mut pending = Vec::new();
    let mut bad = Vec::new();
    for h in handles {
        let (p, b) = h.join().unwrap();
        pending.extend(p);
        bad.extend(b);
    }
    stop.store(true, Ordering::Relaxed);
    let (batches, restarts) = writer.join().unwrap();
    let live = live.read().unwrap();
    for (key, id) in pending {
        match live.get(&key) {
            Some(s) if s.contains(&id) => {}
            _ => bad.push(format!("id {id} not live in {key:?} (checked late)")),
        }
    }
    println!(
        "reader stress: {} searches, {} writer batches (each its own open), {} dropped unflushed, {} committed states, {} wrong",
        searches.load(Ordering::Relaxed),
        batches,
        restarts,
        live.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(10)]);
    assert!(restarts > 10 && live.len() > 10, "the writer barely ran");
}
