//! A power-loss simulator over the in-memory backend (a first version; the crash-safety issue
//! extends it with mutants and I/O error injection).
//!
//! The backend records the durable image after every fsync. A crash during fsync k leaves, for
//! every 512-byte sector that differs between the images before and after it, independently:
//! the old contents, the new contents, or a mix of the two at 8-byte-word granularity; sectors
//! that did not change stay as they are. Every such crash image must reopen (with recovery) to
//! the last acknowledged flush or the one in progress, must show one of those states when
//! opened read-only without recovery, and must take one more add-and-delete flush and reopen to
//! exactly that state plus the flush. Crashes inside the recovery a crash image triggers are
//! simulated the same way.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use chassis::os::MemStorage;
use chassis::{Index, Metric, Options};
use common::{clustered, Rng};

const CAP: usize = 64 << 20;
const SECTOR: usize = 512;

type State = BTreeMap<u64, Vec<f32>>;

fn opts() -> Options {
    common::small(4, Metric::L2Squared, 8, 32)
}

fn state_of(ix: &Index) -> State {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, ix.get(id).unwrap()))
        .collect()
}

/// One crash image between `old` and `new` (the durable images around an fsync).
fn crash_image(old: &[u8], new: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut img = new.to_vec();
    for (s, chunk) in img.chunks_mut(SECTOR).enumerate() {
        let at = s * SECTOR;
        let before: Vec<u8> = (0..chunk.len())
            .map(|i| old.get(at + i).copied().unwrap_or(0))
            .collect();
        if before == chunk {
            continue;
        }
        match rng.below(3) {
            0 => chunk.copy_from_slice(&before),
            1 => {}
            _ => {
                for (w, word) in chunk.chunks_mut(8).enumerate() {
                    if rng.below(2) == 0 {
                        word.copy_from_slice(&before[w * 8..w * 8 + word.len()]);
                    }
                }
            }
        }
    }
    img
}

struct Tally {
    points: usize,
    images: usize,
    violations: Vec<String>,
}

/// Checks one crash image against its accepted states; may recurse into recovery's crashes.
fn check_image(
    img: &[u8],
    accepted: &[&State],
    tally: &mut Tally,
    rng: &mut Rng,
    depth: usize,
    extra: &[f32],
) {
    tally.images += 1;
    let which = |s: &State| accepted.iter().position(|a| *a == s);
    // (b) read-only, no recovery.
    let ro = MemStorage::from_image(img, CAP).unwrap();
    match Index::open_in_read_only(Arc::new(ro.reopen(false))) {
        Ok(ix) => {
            if which(&state_of(&ix)).is_none() {
                tally.violations.push(format!(
                    "read-only open shows an unaccepted state ({} ids)",
                    ix.len()
                ));
            }
        }
        Err(e) => tally.violations.push(format!("read-only open failed: {e}")),
    }
    // (a) with recovery; record recovery's own fsyncs to crash inside it.
    let file = MemStorage::from_image(img, CAP).unwrap();
    file.record_durable_history(true);
    let ix = match Index::open_in(Arc::new(file.reopen(true))) {
        Ok(ix) => ix,
        Err(e) => {
            tally
                .violations
                .push(format!("open with recovery failed: {e}"));
            return;
        }
    };
    let recovered = state_of(&ix);
    let Some(_) = which(&recovered) else {
        tally.violations.push(format!(
            "recovery shows an unaccepted state ({} ids)",
            ix.len()
        ));
        return;
    };
    for (id, v) in &recovered {
        match ix.search(v, 1, 64) {
            Ok(h) if h[0].distance == 0.0 && recovered.contains_key(&h[0].id) => {}
            other => tally
                .violations
                .push(format!("id {id} not found as its own nearest: {other:?}")),
        }
    }
    if depth == 0 {
        let history = file.durable_history();
        let mut prev = img.to_vec();
        for step in &history {
            tally.points += 1;
            for _ in 0..2 {
                let inner = crash_image(&prev, step, rng);
                check_image(&inner, &[&recovered], tally, rng, depth + 1, extra);
            }
            prev = step.clone();
        }
    }
    // (c) one more add-and-delete flush, then a clean reopen: exactly that state plus it.
    let mut ix = ix;
    let mut want = recovered.clone();
    let id = match ix.add(extra) {
        Ok(id) => id,
        Err(e) => {
            tally
                .violations
                .push(format!("add after recovery failed: {e}"));
            return;
        }
    };
    want.insert(id, extra.to_vec());
    if let Some(&victim) = recovered.keys().next() {
        ix.delete(victim).unwrap();
        want.remove(&victim);
    }
    if let Err(e) = ix.flush() {
        tally
            .violations
            .push(format!("flush after recovery failed: {e}"));
        return;
    }
    drop(ix);
    match Index::open_in(Arc::new(file.reopen(true))) {
        Ok(ix) if state_of(&ix) == want => {}
        Ok(_) => tally
            .violations
            .push("state after one more flush differs".into()),
        Err(e) => tally
            .violations
            .push(format!("reopen after one more flush failed: {e}")),
    }
}

#[test]
fn power_loss() {
    let images_per_point: usize = std::env::var("CHASSIS_POWER_LOSS_IMAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mem = MemStorage::new(CAP).unwrap();
    let mut ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).unwrap();
    let created = mem.durable_image();
    mem.record_durable_history(true);
    let data = clustered(400, 4, 6, 31);
    let mut rng = Rng::new(77);
    let mut states: Vec<State> = vec![State::new()];
    let mut syncs_per_flush: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    for flush in 0..15 {
        let before = mem.durable_history().len();
        let n = 6 + rng.below(14);
        let mut added = Vec::new();
        for _ in 0..n {
            added.push(ix.add(&data[next]).unwrap());
            next += 1;
        }
        // Every flush deletes a vector added in that same flush, and most delete an older one.
        ix.delete(added[rng.below(added.len())]).unwrap();
        let older: Vec<u64> = states.last().unwrap().keys().copied().collect();
        if flush % 3 != 2 && !older.is_empty() {
            ix.delete(older[rng.below(older.len())]).unwrap();
        }
        ix.flush().unwrap();
        states.push(state_of(&ix));
        syncs_per_flush.push((before, mem.durable_history().len()));
    }
    drop(ix);
    let history = mem.durable_history();
    let mut tally = Tally {
        points: 0,
        images: 0,
        violations: Vec::new(),
    };
    for (f, &(from, to)) in syncs_per_flush.iter().enumerate() {
        let accepted = [&states[f], &states[f + 1]];
        for k in from..to {
            tally.points += 1;
            let old = if k == 0 {
                created.clone()
            } else {
                history[k - 1].clone()
            };
            for _ in 0..images_per_point {
                let img = crash_image(&old, &history[k], &mut rng);
                check_image(&img, &accepted, &mut tally, &mut rng, 0, &data[399]);
            }
        }
    }
    println!(
        "power-loss: {} crash points, {} images, {} violations",
        tally.points,
        tally.images,
        tally.violations.len()
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for v in &tally.violations {
        *kinds.entry(v.chars().take(40).collect()).or_default() += 1;
    }
    assert!(tally.violations.is_empty(), "{kinds:#?}");
    assert!(
        tally.points >= 200 && tally.images >= 500,
        "too small a run"
    );
}
