//! The power-loss simulator over the in-memory backend (crash-safety issue, items 6 to 10).
//!
//! **Crash images.** A crash keeps, for every 512-byte sector written since the last sync
//! attempt, independently: the durable contents, the current contents, or a mix of the two at
//! 8-byte-word granularity; every other sector keeps its durable contents; when the file grew
//! since its length was last made durable, half the images are cut back to that length.
//! Crash points: between operations (halfway through each flush's adds, and just after each
//! flush returns), during every fsync of every flush, and during every fsync of the recovery a
//! crash image triggers (crash in recovery, then recover again).
//!
//! Every fourth flush the writer first closes cleanly and reopens (the clean-close marker, its
//! fsync, and the durable replacement of the marker before the first list changes).
//!
//! **What every image must satisfy.** (a) Opened with recovery it shows the last acknowledged
//! flush or, at an fsync of a flush, the one in progress; never older and never a mix, checked
//! id by id and vector by vector; and `check` finds nothing wrong (no list names a slot past
//! N, which a writer trusting a clean-close marker would keep; every live vector reachable).
//! (b) Opened read-only without recovery it shows one of the same states, and so does the
//! lock-free `IndexReader`. (c) After one more add-and-delete flush and a clean reopen it
//! shows exactly that state plus the flush. Every stored vector is found as its own nearest
//! neighbor, and every id a search returns is live.
//!
//! **I/O errors.** For every N over a workload, the N-th mutating call (write, growth,
//! allocation or sync) fails with EIO or ENOSPC, once or from then on. Every error must reach
//! the caller as `Io` or `Poisoned`; after a failed flush every later flush must fail
//! `Poisoned`; nothing panics; the file, reopened from the page cache (a process crash) and
//! from the durable image (a power loss), shows the last acknowledged flush or the failed one.
//! A failed sync drops the pages it was writing, as Linux does.
//!
//! **Compaction.** The old file's fsyncs during a compaction (its superseded commit) are
//! crash points whose images must show the committed state; so must the old file just before
//! the rename and the new file just after it.
//!
//! **The header's own data.** Every state includes the user version its flush committed (the
//! workload sets a new one before each flush) and the file's identity (made at create, never
//! changed by a commit; a compaction's new file has its own): an image that shows the rows of
//! one flush with another flush's version, or another identity, is a violation.
//!
//! **The full-text index.** The workload indexes its documents' text: every image's text
//! searches (writer and reader) must give BM25 computed from the documents of the state it
//! shows, and `check` must find the index equal to what the documents give.
//!
//! **Mutants.** Each of the sixteen protocol breaks in `Mutant::ALL` is switched on in turn
//! and must make the simulator report a violation.
//!
//! `CHASSIS_POWER_LOSS_IMAGES` (default 3) sets the images drawn per crash point, and
//! `CHASSIS_POWER_LOSS_SEEDS` (default 2) the number of seeded workloads.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use chassis::mutants::{self, Mutant};
use chassis::os::{FaultKind, MemStorage};
use chassis::{CompactOptions, Error, Index, IndexReader, Metadata, Metric, Options, Value};
use common::{clustered, Moment, Rng};

const CAP: usize = 64 << 20;

/// Live ids with their vectors and metadata, and what the header carries with them: the user
/// version the flush committed and the file's identity (which no commit may change).
#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    rows: BTreeMap<u64, (Vec<f32>, Metadata)>,
    user_version: u64,
    file_id: Option<String>,
}

impl State {
    /// An empty state of the file whose identity is `file_id`.
    fn of_file(file_id: Option<String>) -> State {
        State {
            file_id,
            ..State::default()
        }
    }
}

impl std::ops::Deref for State {
    type Target = BTreeMap<u64, (Vec<f32>, Metadata)>;
    fn deref(&self) -> &Self::Target {
        &self.rows
    }
}

impl std::ops::DerefMut for State {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.rows
    }
}

/// The metadata the workloads store with the vector of row `n`: enough text that the
/// metadata heap crosses its chunks, in words the full-text index keeps.
fn meta(n: usize) -> Metadata {
    let words: Vec<String> = (0..n * 37 % 700 / 4)
        .map(|j| format!("w{}", (n * 7 + j * j * 13) % 40))
        .collect();
    Metadata::from([
        ("n".to_string(), Value::Int(n as i64)),
        ("text".to_string(), Value::Str(words.join(" "))),
        (
            "tags".to_string(),
            Value::List(vec![Value::Int((n % 5) as i64)]),
        ),
    ])
}

fn opts() -> Options {
    common::small(4, Metric::L2Squared, 8, 32).text_fields(["text"])
}

/// Text queries whose BM25 answers every image must give for the state it shows.
const TEXT_QUERIES: &[&str] = &["w1", "w3 w7", "w0 w12 w25 w39", "w5 w5 w30"];

/// The full-text searches of `search` agree with BM25 computed from `state`'s documents.
fn check_text(
    search: impl Fn(&str) -> Result<Vec<chassis::TextHit>, Error>,
    state: &State,
    tally: &mut Tally,
    what: &str,
) {
    let docs: BTreeMap<u64, Metadata> = state.iter().map(|(&id, (_, m))| (id, m.clone())).collect();
    for q in TEXT_QUERIES {
        let got: Vec<(u64, f32)> = match search(q) {
            Ok(h) => h.iter().map(|h| (h.id, h.score)).collect(),
            Err(e) => return tally.violation(format!("{what}: text search failed: {e}")),
        };
        let want = common::bm25_reference(&docs, &["text"], q, 10, |_| true);
        let r = catch_unwind(AssertUnwindSafe(|| common::agree(&got, &want, q)));
        if r.is_err() {
            return tally.violation(format!(
                "{what}: text search for {q:?} disagrees with the documents: {got:?} vs {want:?}"
            ));
        }
    }
}

fn state_of(ix: &Index) -> Result<State, Error> {
    let info = ix.info()?;
    Ok(State {
        rows: ix
            .ids()?
            .into_iter()
            .map(|id| Ok((id, (ix.get(id)?, ix.get_metadata(id)?))))
            .collect::<Result<_, Error>>()?,
        user_version: info.user_version,
        file_id: info.file_id,
    })
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Tally {
    points: usize,
    images: usize,
    fault_runs: usize,
    violations: Vec<String>,
    /// Stop at the first violation (mutant runs only need one).
    stop_early: bool,
}

impl Tally {
    fn new(stop_early: bool) -> Tally {
        Tally {
            points: 0,
            images: 0,
            fault_runs: 0,
            violations: Vec::new(),
            stop_early,
        }
    }
    fn violation(&mut self, what: String) {
        self.violations.push(what);
    }
    fn done(&self) -> bool {
        self.stop_early && !self.violations.is_empty()
    }
}

/// Runs `f`, turning a panic into a violation.
fn guarded(tally: &mut Tally, what: &str, f: impl FnOnce(&mut Tally)) {
    let mut inner = Tally::new(tally.stop_early);
    let r = catch_unwind(AssertUnwindSafe(|| f(&mut inner)));
    tally.points += inner.points;
    tally.images += inner.images;
    tally.fault_runs += inner.fault_runs;
    tally.violations.append(&mut inner.violations);
    if let Err(p) = r {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        tally.violation(format!("panic in {what}: {msg}"));
    }
}

/// Every stored vector is its own nearest neighbor, and every hit is live.
fn check_searches(ix: &Index, state: &State, tally: &mut Tally, what: &str) {
    for (id, (v, _)) in state.iter() {
        match ix.search(v, 1, 64) {
            Ok(h) if h.len() == 1 && h[0].distance == 0.0 && state.contains_key(&h[0].id) => {}
            other => {
                let truth: Vec<(f32, u64)> = {
                    let mut d: Vec<(f32, u64)> = state
                        .iter()
                        .map(|(i, (w, _))| {
                            (w.iter().zip(v).map(|(a, b)| (a - b) * (a - b)).sum(), *i)
                        })
                        .collect();
                    d.sort_by(|a, b| a.0.total_cmp(&b.0));
                    d.truncate(3);
                    d
                };
                tally.violation(format!(
                    "{what}: id {id} not its own nearest: {other:?}; exact {truth:?}; open report {:?}; unreachable {}",
                    ix.open_report(),
                    ix.unreachable_count()
                ));
                return;
            }
        }
    }
}

/// Checks one crash image against its accepted states; at depth 0 also crashes the recovery
/// the image triggers at each of its fsyncs and checks those images.
fn check_image(
    img: &[u8],
    accepted: &[&State],
    tally: &mut Tally,
    rng: &mut Rng,
    depth: usize,
    extra: &[Vec<f32>],
) {
    tally.images += 1;
    let which = |s: &State| accepted.iter().position(|a| *a == s);
    // (b) read-only, no recovery.
    let ro = MemStorage::from_image(img, CAP).expect("image fits");
    match Index::open_in_read_only(Arc::new(ro.reopen(false))).and_then(|ix| state_of(&ix)) {
        Ok(s) if which(&s).is_some() => {}
        Ok(s) => tally.violation(format!(
            "read-only open shows an unaccepted state ({} ids)",
            s.len()
        )),
        Err(e) => tally.violation(format!("read-only open failed: {e}")),
    }
    // (b) also through the lock-free reader of another process.
    let state = IndexReader::open_in(Arc::new(ro.reopen(false))).and_then(|r| {
        let snap = r.snapshot()?;
        Ok(State {
            rows: r
                .ids_in(&snap)?
                .into_iter()
                .map(|id| Ok((id, (r.get(id)?, r.get_metadata(id)?))))
                .collect::<Result<_, Error>>()?,
            user_version: snap.user_version(),
            file_id: snap.file_id(),
        })
    });
    match state {
        Ok(s) if which(&s).is_some() => match IndexReader::open_in(Arc::new(ro.reopen(false))) {
            Ok(r) => check_text(|q| r.search_text(q, 10, None), &s, tally, "reader"),
            Err(e) => tally.violation(format!("a reader failed: {e}")),
        },
        Ok(s) => tally.violation(format!(
            "a reader shows an unaccepted state ({} ids)",
            s.len()
        )),
        Err(e) => tally.violation(format!("a reader failed: {e}")),
    }
    // (a) with recovery, recording recovery's own fsyncs to crash inside it.
    let file = MemStorage::from_image(img, CAP).expect("image fits");
    file.record_durable_history(true);
    let ix = match Index::open_in(Arc::new(file.reopen(true))) {
        Ok(ix) => ix,
        Err(e) => return tally.violation(format!("open with recovery failed: {e}")),
    };
    let recovered = match state_of(&ix) {
        Ok(s) if which(&s).is_some() => s,
        Ok(s) => {
            return tally.violation(format!(
                "recovery shows an unaccepted state ({} ids)",
                s.len()
            ))
        }
        Err(e) => return tally.violation(format!("reading the recovered state failed: {e}")),
    };
    check_searches(&ix, &recovered, tally, "recovered");
    check_text(
        |q| ix.search_text(q, 10, None),
        &recovered,
        tally,
        "recovered",
    );
    // The writer's view of the graph is whole: no list names a slot past N (which a clean
    // open would have trusted), and every live vector is reachable.
    match ix.check(0) {
        Ok(c) if c.problems.is_empty() => {}
        Ok(c) => {
            return tally.violation(format!(
                "recovered index fails check (open report {:?}): {:?}",
                ix.open_report(),
                &c.problems[..c.problems.len().min(3)]
            ))
        }
        Err(e) => return tally.violation(format!("check of the recovered index failed: {e}")),
    }
    if depth == 0 {
        let mut prev = img.to_vec();
        for step in file.durable_history() {
            tally.points += 1;
            for _ in 0..2 {
                let inner = Moment::at_sync(&prev, &step).crash_image(rng);
                check_image(&inner, &[&recovered], tally, rng, depth + 1, extra);
            }
            prev = step;
        }
    }
    // (c) one more add-and-delete flush, then a clean reopen: exactly that state plus it.
    let ix = ix;
    let mut want = recovered.clone();
    for (i, v) in extra.iter().enumerate() {
        let m = meta(1000 + i);
        match ix.add_with_metadata(v, &m) {
            Ok(id) => {
                want.insert(id, (v.clone(), m));
            }
            Err(e) => return tally.violation(format!("add after recovery failed: {e}")),
        }
    }
    if let Some(&victim) = recovered.keys().next() {
        if let Err(e) = ix.delete(victim) {
            return tally.violation(format!("delete after recovery failed: {e}"));
        }
        want.remove(&victim);
    }
    let version = recovered.user_version + 1000;
    if let Err(e) = ix.set_user_version(version) {
        return tally.violation(format!(
            "setting the user version after recovery failed: {e}"
        ));
    }
    want.user_version = version;
    if let Err(e) = ix.flush() {
        return tally.violation(format!("flush after recovery failed: {e}"));
    }
    drop(ix);
    match Index::open_in(Arc::new(file.reopen(true))).and_then(|ix| Ok((state_of(&ix)?, ix))) {
        Ok((s, ix)) if s == want => {
            check_searches(&ix, &want, tally, "after one more flush");
            check_text(
                |q| ix.search_text(q, 10, None),
                &want,
                tally,
                "after one more flush",
            );
        }
        Ok(_) => tally.violation("state after one more flush differs".into()),
        Err(e) => tally.violation(format!("reopen after one more flush failed: {e}")),
    }
}

/// Draws `n` images at one crash point and checks each.
fn crash_point(
    moment: &Moment,
    accepted: &[&State],
    n: usize,
    tally: &mut Tally,
    rng: &mut Rng,
    extra: &[Vec<f32>],
) {
    tally.points += 1;
    for _ in 0..n {
        if tally.done() {
            return;
        }
        let img = moment.crash_image(rng);
        check_image(&img, accepted, tally, rng, 0, extra);
    }
}

/// The simulator's workload (experiment 4): 15 flushes in the unit-test geometry, each adding
/// 6 to 19 vectors and deleting one of them (the flush's first on even flushes), most also
/// deleting an older one, crossing segments, heap chunks and table pages.
fn simulate(seed: u64, images_per_point: usize, tally: &mut Tally) {
    let mem = MemStorage::new(CAP).expect("capacity");
    let mut ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).expect("create");
    let created = mem.durable_image();
    let file_id = ix.info().ok().and_then(|i| i.file_id);
    mem.record_durable_history(true);
    let data = clustered(400, 4, 6, 31 + seed);
    let extra: Vec<Vec<f32>> = data[396..].to_vec();
    let mut rng = Rng::new(77 + seed);
    let mut states: Vec<State> = vec![State::of_file(file_id.clone())];
    let mut syncs_per_flush: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    for flush in 0..15 {
        let before = mem.durable_history().len();
        if flush % 4 == 3 {
            // A clean close (the clean-close marker and its fsync), then a writer that opens
            // without a repair pass and whose first add replaces the marker durably.
            drop(ix);
            ix = match Index::open_in(Arc::new(mem.reopen(true))) {
                Ok(ix) if ix.open_report().clean => ix,
                Ok(ix) => {
                    return tally.violation(format!(
                        "a cleanly closed file opened with a repair pass: {:?}",
                        ix.open_report()
                    ))
                }
                Err(e) => return tally.violation(format!("workload reopen failed: {e}")),
            };
        }
        let n = 6 + rng.below(14);
        let mut added = Vec::new();
        for i in 0..n {
            if i == n / 2 {
                // Between operations: nothing since the last flush is committed.
                let acked = &states[states.len() - 1];
                let m = Moment::of(&mem);
                crash_point(&m, &[acked], images_per_point, tally, &mut rng, &extra);
            }
            match ix.add_with_metadata(&data[next], &meta(next)) {
                Ok(id) => added.push(id),
                Err(e) => return tally.violation(format!("workload add failed: {e}")),
            }
            next += 1;
        }
        // Every other flush also replaces an older vector's metadata (a new slot for the
        // id, the old one deleted, all in this flush).
        let older: Vec<u64> = states[states.len() - 1].keys().copied().collect();
        if flush % 2 == 1 && !older.is_empty() {
            let id = older[rng.below(older.len())];
            if let Err(e) = ix.set_metadata(id, &meta(5000 + flush)) {
                return tally.violation(format!("workload set_metadata failed: {e}"));
            }
        }
        let victim = if flush % 2 == 0 {
            added[0]
        } else {
            added[rng.below(added.len())]
        };
        let older: Vec<u64> = states[states.len() - 1].keys().copied().collect();
        let mut deletes = vec![victim];
        if flush % 3 != 2 && !older.is_empty() {
            deletes.push(older[rng.below(older.len())]);
        }
        for id in deletes {
            if let Err(e) = ix.delete(id) {
                return tally.violation(format!("workload delete failed: {e}"));
            }
        }
        // Every flush commits the application's version with its data (flush f: f + 1).
        if let Err(e) = ix.set_user_version(flush as u64 + 1) {
            return tally.violation(format!("workload set_user_version failed: {e}"));
        }
        if let Err(e) = ix.flush() {
            return tally.violation(format!("workload flush failed: {e}"));
        }
        match state_of(&ix) {
            // What the images must show is what the workload asked for, not what the
            // writer reports of itself: the version set and the identity made at create.
            Ok(s) => states.push(State {
                user_version: flush as u64 + 1,
                file_id: file_id.clone(),
                ..s
            }),
            Err(e) => return tally.violation(format!("workload state unreadable: {e}")),
        }
        syncs_per_flush.push((before, mem.durable_history().len()));
        // Between operations, just after the flush was acknowledged.
        let m = Moment::of(&mem);
        let acked = &states[states.len() - 1];
        crash_point(&m, &[acked], images_per_point, tally, &mut rng, &extra);
        if tally.done() {
            return;
        }
    }
    drop(ix);
    let history = mem.durable_history();
    for (f, &(from, to)) in syncs_per_flush.iter().enumerate() {
        let accepted = [&states[f], &states[f + 1]];
        for k in from..to {
            let before = if k == 0 { &created } else { &history[k - 1] };
            let m = Moment::at_sync(before, &history[k]);
            crash_point(&m, &accepted, images_per_point, tally, &mut rng, &extra);
        }
    }
}

/// Compaction (decision 8): the new file is built and made durable under another name, then
/// the old file commits "superseded", then a rename makes the new file current. Until the
/// rename the path names the old file, so every crash image of the old file's fsyncs must
/// show the committed state; after it the path names the new file, whose durable image must
/// show that same state (ids and vectors), M changed.
fn simulate_compaction(seed: u64, images_per_point: usize, tally: &mut Tally) {
    let old = MemStorage::new(CAP).expect("capacity");
    let ix = Index::create_in(Arc::new(old.reopen(true)), opts()).expect("create");
    let data = clustered(200, 4, 6, 900 + seed);
    let extra: Vec<Vec<f32>> = data[196..].to_vec();
    let mut rng = Rng::new(500 + seed);
    for (i, v) in data[..120].iter().enumerate() {
        if let Err(e) = ix.add_with_metadata(v, &meta(i)) {
            return tally.violation(format!("compaction workload add failed: {e}"));
        }
    }
    for _ in 0..40 {
        let _ = ix.delete(rng.below(120) as u64);
    }
    if let Err(e) = ix.flush() {
        return tally.violation(format!("compaction workload flush failed: {e}"));
    }
    let want = match state_of(&ix) {
        Ok(s) => s,
        Err(e) => return tally.violation(format!("state unreadable: {e}")),
    };
    let before = old.durable_image();
    old.record_durable_history(true);
    let new = MemStorage::new(CAP).expect("capacity");
    let compacted = ix.compact_into(
        Arc::new(new.reopen(true)),
        CompactOptions {
            m: Some(12),
            ef_construction: None,
            threads: 1,
            vector_layout: None,
            codes: None,
            keep_graph: false,
        },
    );
    let (nix, report) = match compacted {
        Ok(r) => r,
        Err(e) => return tally.violation(format!("compact_into failed: {e}")),
    };
    // The compacted file is a new lineage: the same rows and user version, its own identity.
    let want_new = State {
        file_id: nix.info().ok().and_then(|i| i.file_id),
        ..want.clone()
    };
    if want_new.file_id.is_none() || want_new.file_id == want.file_id {
        tally.violation("the compacted file kept the old identity (or has none)".into());
    }
    if report.live != want.len() as u64 || state_of(&nix).ok().as_ref() != Some(&want_new) {
        tally.violation("the compacted index differs from the old one".into());
    }
    drop(nix);
    drop(ix);
    // Crashes during the old file's superseded commit: the path still names it.
    let mut prev = before;
    for step in old.durable_history() {
        let m = Moment::at_sync(&prev, &step);
        crash_point(&m, &[&want], images_per_point, tally, &mut rng, &extra);
        prev = step;
    }
    // Between the superseded commit and the rename, and after the rename.
    for (img, want) in [
        (old.durable_image(), &want),
        (new.durable_image(), &want_new),
    ] {
        tally.points += 1;
        check_image(&img, &[want], tally, &mut rng, 0, &extra);
    }
}

fn is_io(e: &Error) -> bool {
    matches!(e, Error::Io(_) | Error::Poisoned)
}

/// One run of the fault workload with the `n`-th mutating call failing; returns the mutating
/// calls the workload made.
fn fault_run(fault: Option<(u64, FaultKind, bool)>, tally: &mut Tally) -> u64 {
    let mem = MemStorage::new(CAP).expect("capacity");
    let ix = Index::create_in(Arc::new(mem.reopen(true)), opts()).expect("create");
    let file_id = ix.info().ok().and_then(|i| i.file_id);
    let ops0 = mem.op_count();
    if let Some((n, kind, forever)) = fault {
        mem.inject_fault(n, kind, forever);
    }
    let label = format!("{fault:?}");
    let data = clustered(120, 4, 4, 5);
    let mut model = State::of_file(file_id.clone());
    let mut acked = State::of_file(file_id);
    let mut attempted: Option<State> = None;
    let mut next = 0;
    for flush in 0..6 {
        let mut added = Vec::new();
        for _ in 0..12 + flush {
            match ix.add_with_metadata(&data[next], &meta(next)) {
                Ok(id) => {
                    model.insert(id, (data[next].clone(), meta(next)));
                    added.push(id);
                }
                Err(e) if is_io(&e) => {}
                Err(e) => tally.violation(format!("{label}: add failed untyped: {e}")),
            }
            next += 1;
        }
        match ix.set_user_version(flush as u64 + 1) {
            Ok(()) => model.user_version = flush as u64 + 1,
            Err(e) => tally.violation(format!("{label}: set_user_version failed: {e}")),
        }
        let mut deletes: Vec<u64> = added.first().copied().into_iter().collect();
        if let Some((&old, _)) = acked.iter().nth(flush) {
            deletes.push(old);
        }
        for id in deletes {
            match ix.delete(id) {
                Ok(()) => {
                    model.remove(&id);
                }
                Err(e) => tally.violation(format!("{label}: delete failed: {e}")),
            }
        }
        match ix.flush() {
            Ok(()) if attempted.is_some() => {
                tally.violation(format!("{label}: a flush succeeded after a failed flush"));
            }
            Ok(()) => {
                if state_of(&ix).ok().as_ref() != Some(&model) {
                    tally.violation(format!("{label}: index state differs from the model"));
                }
                acked = model.clone();
            }
            Err(e) if attempted.is_none() && is_io(&e) => attempted = Some(model.clone()),
            Err(Error::Poisoned) => {}
            Err(e) => tally.violation(format!("{label}: flush failed with {e}")),
        }
    }
    let ops = mem.op_count() - ops0;
    drop(ix);
    tally.points += 1;
    tally.fault_runs += 1;
    for (what, img) in [
        ("page cache", mem.current_image()),
        ("durable image", mem.durable_image()),
    ] {
        tally.images += 1;
        let file = MemStorage::from_image(&img, CAP).expect("image fits");
        let ix = match Index::open_in(Arc::new(file)) {
            Ok(ix) => ix,
            Err(e) => {
                tally.violation(format!("{label}: reopening the {what} failed: {e}"));
                continue;
            }
        };
        match state_of(&ix) {
            Ok(s) if s == acked || attempted.as_ref() == Some(&s) => {
                check_searches(&ix, &s, tally, &label)
            }
            Ok(s) => tally.violation(format!(
                "{label}: the {what} shows {} ids, not the last acknowledged flush ({}) \
                 or the failed one",
                s.len(),
                acked.len()
            )),
            Err(e) => tally.violation(format!("{label}: reading the {what} failed: {e}")),
        }
    }
    ops
}

/// Fault injection at every mutating call of the fault workload, EIO and ENOSPC, once and
/// forever.
fn inject_faults(tally: &mut Tally) {
    let total = fault_run(None, tally);
    for n in 1..=total {
        for kind in [FaultKind::Eio, FaultKind::NoSpace] {
            for forever in [false, true] {
                if tally.done() {
                    return;
                }
                fault_run(Some((n, kind, forever)), tally);
            }
        }
    }
}

fn run_all(seeds: usize, images_per_point: usize, tally: &mut Tally) {
    let first = env("CHASSIS_POWER_LOSS_FIRST_SEED", 0) as u64;
    for seed in first..first + seeds as u64 {
        let before = tally.violations.len();
        guarded(tally, "the simulator", |t| {
            simulate(seed, images_per_point, t)
        });
        for v in &mut tally.violations[before..] {
            *v = format!("seed {seed}: {v}");
        }
        if tally.done() {
            return;
        }
    }
    for seed in first..first + seeds as u64 {
        guarded(tally, "compaction", |t| {
            simulate_compaction(seed, images_per_point, t)
        });
    }
    guarded(tally, "fault injection", inject_faults);
}

#[test]
fn power_loss() {
    let images_per_point = env("CHASSIS_POWER_LOSS_IMAGES", 3);
    let seeds = env("CHASSIS_POWER_LOSS_SEEDS", 2);
    let mut tally = Tally::new(false);
    run_all(seeds, images_per_point, &mut tally);

    let mut missed = Vec::new();
    for m in Mutant::ALL {
        mutants::set(Some(m));
        let mut t = Tally::new(true);
        run_all(1, images_per_point.min(3), &mut t);
        mutants::set(None);
        match t.violations.first() {
            Some(v) => println!("mutant {m:?} caught: {v}"),
            None => missed.push(m),
        }
    }
    let y = Mutant::ALL.len();
    println!(
        "power-loss: {} crash points, {} images, {} violations, {} of {} mutants caught",
        tally.points,
        tally.images,
        tally.violations.len(),
        y - missed.len(),
        y
    );
    println!(
        "power-loss detail: {} fault-injection runs, {} seeds, {} images per crash point",
        tally.fault_runs, seeds, images_per_point
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for v in &tally.violations {
        *kinds.entry(v.chars().take(60).collect()).or_default() += 1;
    }
    if let Some(v) = tally.violations.first() {
        println!("first violation: {v}");
    }
    assert!(tally.violations.is_empty(), "{kinds:#?}");
    assert!(missed.is_empty(), "mutants not caught: {missed:?}");
    assert!(
        tally.points >= 200 && tally.images >= 500,
        "too small a run"
    );
}
