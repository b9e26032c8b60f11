//! The kill loop (hardening issue, item 3): a child writer process adds, deletes and flushes
//! and is killed with SIGKILL at random moments, 50 times (`CHASSIS_KILLS` for more), while two
//! reader processes search the file the whole time. After each kill the next writer must open
//! the file (recovering if needed) to a committed state that contains every flush the child
//! reported done and nothing never added; readers must never see an error or an id that was
//! never added, and every vector they return must be its id's own.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use chassis::{Index, IndexReader, Metric, Options};
use common::{clustered, ids_text, parse_ids, write_atomic, Rng};

const DIMS: usize = 8;

fn data() -> Vec<Vec<f32>> {
    clustered(200_000, DIMS, 40, 77)
}

/// The child writer: batches of adds (ids chosen by the child, vector = data[id]) and deletes,
/// each flushed; before a flush it writes the batch's state to `pending`, after it to `acked`.
fn writer(dir: &Path, seed: u64) {
    let data = data();
    let ix = Index::open(dir.join("ix.chassis")).unwrap();
    let mut ids: BTreeSet<u64> = ix.ids().unwrap().into_iter().collect();
    let mut next = fs::read_to_string(dir.join("next"))
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap();
    let mut rng = Rng::new(seed);
    loop {
        for _ in 0..rng.below(40) + 1 {
            ix.add_with_id(next, &data[next as usize % data.len()])
                .unwrap();
            ids.insert(next);
            next += 1;
        }
        write_atomic(&dir.join("next"), &next.to_string());
        for _ in 0..rng.below(6) {
            let all: Vec<u64> = ids.iter().copied().collect();
            if all.is_empty() {
                break;
            }
            let victim = all[rng.below(all.len())];
            ix.delete(victim).unwrap();
            ids.remove(&victim);
        }
        write_atomic(&dir.join("pending"), &ids_text(&ids));
        ix.flush().unwrap();
        write_atomic(&dir.join("acked"), &ids_text(&ids));
    }
}

/// A reader process: searches until `stop` appears; writes "searches errors wrong".
fn reader(dir: &Path, me: usize) {
    let data = data();
    let r = IndexReader::open(dir.join("ix.chassis")).unwrap();
    let mut rng = Rng::new(1000 + me as u64);
    let (mut searches, mut errors, mut wrong) = (0u64, 0u64, 0u64);
    while !dir.join("stop").exists() {
        let q = &data[rng.below(4000)];
        match r.search(q, 5, 32) {
            Ok(hits) => {
                for h in hits {
                    let v = &data[h.id as usize % data.len()];
                    let d: f32 = v.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum();
                    if (d - h.distance).abs() > 1e-3 {
                        wrong += 1;
                    }
                }
            }
            Err(e) => {
                errors += 1;
                eprintln!("reader {me}: {e}");
            }
        }
        searches += 1;
    }
    write_atomic(
        &dir.join(format!("reader-{me}")),
        &format!("{searches} {errors} {wrong}"),
    );
}

#[test]
fn killed_writers_never_lose_a_flush_and_readers_never_err() {
    if let Ok(role) = std::env::var("CHASSIS_KILL_ROLE") {
        let dir = std::env::var("CHASSIS_CHILD_DIR").unwrap();
        let dir = Path::new(&dir);
        match role.split_once(':') {
            Some(("writer", seed)) => writer(dir, seed.parse().unwrap()),
            Some(("reader", me)) => reader(dir, me.parse().unwrap()),
            _ => panic!("bad role {role}"),
        }
        return;
    }
    let kills: usize = std::env::var("CHASSIS_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = data();
    let ix = Index::create(
        dir.join("ix.chassis"),
        Options::new(DIMS, Metric::L2Squared)
            .m(8)
            .ef_construction(48),
    )
    .unwrap();
    for i in 0..500u64 {
        ix.add_with_id(i, &data[i as usize]).unwrap();
    }
    ix.flush().unwrap();
    drop(ix);
    let all: BTreeSet<u64> = (0..500).collect();
    write_atomic(&dir.join("acked"), &ids_text(&all));
    write_atomic(&dir.join("pending"), &ids_text(&all));
    write_atomic(&dir.join("next"), "500");
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: String| {
        Command::new(&exe)
            .args([
                "killed_writers_never_lose_a_flush_and_readers_never_err",
                "--exact",
            ])
            .env("CHASSIS_KILL_ROLE", role)
            .env("CHASSIS_CHILD_DIR", dir)
            .spawn()
            .unwrap()
    };
    let readers: Vec<_> = (0..2).map(|r| spawn(format!("reader:{r}"))).collect();
    let mut rng = Rng::new(4);
    for k in 0..kills {
        let mut w = spawn(format!("writer:{k}"));
        std::thread::sleep(Duration::from_millis(20 + rng.below(250) as u64));
        w.kill().unwrap();
        w.wait().unwrap();
        let acked = parse_ids(&fs::read_to_string(dir.join("acked")).unwrap());
        let pending = parse_ids(&fs::read_to_string(dir.join("pending")).unwrap());
        let ix = Index::open(dir.join("ix.chassis"))
            .unwrap_or_else(|e| panic!("kill {k}: the next writer can't open: {e}"));
        let ids: BTreeSet<u64> = ix.ids().unwrap().into_iter().collect();
        assert!(
            ids == acked || ids == pending,
            "kill {k}: {} ids; the last acknowledged flush had {}, the one in progress {}",
            ids.len(),
            acked.len(),
            pending.len()
        );
        for &id in ids.iter().step_by(53) {
            assert_eq!(
                ix.get(id).unwrap(),
                data[id as usize % data.len()],
                "kill {k}"
            );
        }
        drop(ix);
        write_atomic(&dir.join("acked"), &ids_text(&ids));
        write_atomic(&dir.join("pending"), &ids_text(&ids));
    }
    fs::write(dir.join("stop"), b"").unwrap();
    let mut total = 0;
    for (me, mut r) in readers.into_iter().enumerate() {
        assert!(r.wait().unwrap().success(), "reader {me} failed");
        let text = fs::read_to_string(dir.join(format!("reader-{me}"))).unwrap();
        let v: Vec<u64> = text.split(' ').map(|s| s.parse().unwrap()).collect();
        assert_eq!(
            (v[1], v[2]),
            (0, 0),
            "reader {me}: {v:?} (searches, errors, wrong)"
        );
        total += v[0];
    }
    println!("kill loop: {kills} kills, {total} reader searches, 0 errors");
    assert!(total > 0);
}
