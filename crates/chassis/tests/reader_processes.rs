//! One writer process and two reader processes on one file (ADR-0008 decisions 5 and 8).
//!
//! The test spawns its own binary three times with `CHASSIS_CHILD_ROLE` set. The writer makes
//! 20 flushes of adds and deletes, compacting after the 10th (same M) and the 20th (a new M),
//! and after each commit logs the live ids of the committed state and waits until every
//! reader has taken a snapshot at least that new. Readers search continuously, through both
//! compactions; afterwards each checks that every id it got was live in the snapshot it used,
//! with its own vector's distance, that it saw every committed state, and that it ended on the
//! last compaction's file.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chassis::{CompactOptions, Index, IndexReader, Metric, Options};
use common::{clustered, write_atomic, Rng};

const READERS: usize = 2;
const FLUSHES: usize = 20;

fn data() -> Vec<Vec<f32>> {
    clustered(1200, 8, 10, 21)
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn read_u64(path: &Path) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A reader's progress: file generation (compactions seen), then header sequence.
fn progress(generation: u64, sequence: u64) -> u64 {
    generation << 40 | sequence
}

fn log_state(dir: &Path, g: u64, n: u64, e: u64, ids: &BTreeSet<u64>) {
    use std::io::Write;
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    writeln!(f, "{g} {n} {e} {}", ids.join(",")).unwrap();
}

fn writer(dir: &Path) {
    let data = data();
    let ix = Index::open(dir.join("ix.chassis")).unwrap();
    let mut live: BTreeSet<u64> = (0..200).collect();
    let mut rng = Rng::new(3);
    let mut next = 200usize;
    let mut generation = 0;
    // The parent logged the first state; readers must see it before it changes (a reader
    // process that starts late would otherwise begin at a later state).
    wait_for_readers(dir, progress(0, ix.info().unwrap().sequence));
    for f in 0..FLUSHES {
        for _ in 0..40 {
            let id = ix.add(&data[next]).unwrap();
            live.insert(id);
            next += 1;
        }
        for _ in 0..3 {
            let ids: Vec<u64> = live.iter().copied().collect();
            let victim = ids[rng.below(ids.len())];
            ix.delete(victim).unwrap();
            live.remove(&victim);
        }
        ix.flush().unwrap();
        commit(dir, &ix, generation, &live);
        if f == FLUSHES / 2 - 1 || f == FLUSHES - 1 {
            let m = if f == FLUSHES - 1 { Some(24) } else { None };
            ix.compact(CompactOptions {
                m,
                ..CompactOptions::default()
            })
            .unwrap();
            generation += 1;
            commit(dir, &ix, generation, &live);
        }
    }
    let done = progress(generation, ix.info().unwrap().sequence);
    write_atomic(&dir.join("done"), &done.to_string());
}

/// Logs the committed state, then waits until every reader has seen it.
fn commit(dir: &Path, ix: &Index, generation: u64, live: &BTreeSet<u64>) {
    let info = ix.info().unwrap();
    log_state(
        dir,
        generation,
        info.committed_count,
        info.delete_epoch,
        live,
    );
    wait_for_readers(dir, progress(generation, info.sequence));
}

/// Waits until every reader has taken a snapshot at least as new as `want`.
fn wait_for_readers(dir: &Path, want: u64) {
    let t = Instant::now();
    while (0..READERS).any(|r| read_u64(&dir.join(format!("seen-{r}"))) < want) {
        assert!(t.elapsed() < Duration::from_secs(60), "readers stalled");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn reader(dir: &Path, me: usize) {
    let data = data();
    let r = IndexReader::open(dir.join("ix.chassis")).unwrap();
    let mut rng = Rng::new(50 + me as u64);
    let mut got: HashMap<(u64, u64, u64), BTreeSet<u64>> = HashMap::new();
    let mut wrong = 0u64;
    let mut searches = 0u64;
    let mut seen = 0;
    loop {
        let snap = r.snapshot().unwrap();
        let now = progress(snap.file_generation(), snap.sequence());
        assert!(now >= seen, "a snapshot went back");
        for _ in 0..20 {
            let q: Vec<f32> = data[rng.below(data.len())]
                .iter()
                .map(|x| x + 0.1 * rng.normal())
                .collect();
            let hits = r.search_in(&snap, &q, 10, 32).unwrap();
            searches += 1;
            wrong += (hits.len() as u64 != snap.len().min(10)) as u64;
            let set = got
                .entry((
                    snap.file_generation(),
                    snap.committed_count(),
                    snap.delete_epoch(),
                ))
                .or_default();
            for h in hits {
                if (l2(&q, &data[h.id as usize]) - h.distance).abs() > 1e-3 {
                    wrong += 1;
                }
                set.insert(h.id);
            }
        }
        if now > seen {
            seen = now;
            write_atomic(&dir.join(format!("seen-{me}")), &seen.to_string());
        }
        let done = read_u64(&dir.join("done"));
        if done != 0 && seen >= done {
            break;
        }
    }
    let log = fs::read_to_string(dir.join("log")).unwrap();
    let mut states = 0;
    for line in log.lines() {
        let mut parts = line.splitn(4, ' ');
        let g: u64 = parts.next().unwrap().parse().unwrap();
        let n: u64 = parts.next().unwrap().parse().unwrap();
        let e: u64 = parts.next().unwrap().parse().unwrap();
        let live: BTreeSet<u64> = parts
            .next()
            .unwrap_or("")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let Some(ids) = got.remove(&(g, n, e)) else {
            panic!("reader {me} never saw the state file {g}, N = {n}, E = {e}");
        };
        states += 1;
        wrong += ids.difference(&live).count() as u64;
    }
    assert!(
        got.is_empty(),
        "snapshots of states never committed: {:?}",
        got.keys()
    );
    write_atomic(
        &dir.join(format!("result-{me}")),
        &format!("{searches} {wrong} {states}"),
    );
}

#[test]
fn a_writer_process_and_two_reader_processes() {
    if let Ok(role) = std::env::var("CHASSIS_CHILD_ROLE") {
        let dir = std::env::var("CHASSIS_CHILD_DIR").unwrap();
        match role.as_str() {
            "writer" => writer(Path::new(&dir)),
            r => reader(Path::new(&dir), r.parse().unwrap()),
        }
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = data();
    let ix = Index::create(dir.join("ix.chassis"), Options::new(8, Metric::L2Squared)).unwrap();
    for v in &data[..200] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    log_state(dir, 0, 200, 0, &(0..200).collect());
    drop(ix);
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: String| {
        Command::new(&exe)
            .args([
                "a_writer_process_and_two_reader_processes",
                "--exact",
                "--nocapture",
            ])
            .env("CHASSIS_CHILD_ROLE", role)
            .env("CHASSIS_CHILD_DIR", dir)
            .spawn()
            .unwrap()
    };
    let mut children: Vec<_> = (0..READERS).map(|r| spawn(r.to_string())).collect();
    children.push(spawn("writer".into()));
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a child process failed");
    }
    for r in 0..READERS {
        let text = fs::read_to_string(dir.join(format!("result-{r}"))).unwrap();
        let v: Vec<u64> = text.split(' ').map(|s| s.parse().unwrap()).collect();
        println!(
            "reader {r}: {} searches, {} wrong, {} states seen",
            v[0], v[1], v[2]
        );
        assert_eq!(v[1], 0, "reader {r} got wrong results");
        assert_eq!(v[2], FLUSHES as u64 + 3, "reader {r} missed a commit");
    }
}
