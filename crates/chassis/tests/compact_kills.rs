//! Real kills during compaction: a child process flushes and compacts in a loop and is killed
//! with SIGKILL at a random moment, 30 times. After each kill the path must hold a complete
//! index whose ids are the last acknowledged flush's (or the one in progress), every vector
//! its own. `CHASSIS_COMPACT_KILLS` sets the number of kills.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use chassis::{CompactOptions, Index, IndexReader, Metric, Options};
use common::{clustered, ids_text, parse_ids, write_atomic, Rng};

fn data() -> Vec<Vec<f32>> {
    clustered(60_000, 16, 20, 8)
}

fn child(dir: &Path, seed: u64) {
    let data = data();
    let ix = Index::open(dir.join("ix.chassis")).unwrap();
    let mut ids: BTreeSet<u64> = ix.ids().unwrap().into_iter().collect();
    let mut next = ids.iter().max().map_or(0, |m| m + 1);
    let mut rng = Rng::new(seed);
    for round in 0.. {
        for _ in 0..5 {
            let all: Vec<u64> = ids.iter().copied().collect();
            let victim = all[rng.below(all.len())];
            ix.delete(victim).unwrap();
            ids.remove(&victim);
        }
        for _ in 0..40 {
            ix.add_with_id(next, &data[next as usize % data.len()])
                .unwrap();
            ids.insert(next);
            next += 1;
        }
        write_atomic(&dir.join("pending"), &ids_text(&ids));
        ix.flush().unwrap();
        write_atomic(&dir.join("acked"), &ids_text(&ids));
        write_atomic(&dir.join("phase"), "compacting");
        let m = if round % 2 == 0 { 8 } else { 12 };
        ix.compact(CompactOptions {
            m: Some(m),
            ef_construction: Some(40),
            threads: 2,
            vector_layout: None,
            codes: None,
            keep_graph: false,
        })
        .unwrap();
        write_atomic(&dir.join("phase"), "flushing");
    }
}

#[test]
fn kills_during_compaction_leave_a_complete_index_at_the_path() {
    if let Ok(seed) = std::env::var("CHASSIS_COMPACT_CHILD") {
        let dir = std::env::var("CHASSIS_CHILD_DIR").unwrap();
        child(Path::new(&dir), seed.parse().unwrap());
        return;
    }
    let kills: usize = std::env::var("CHASSIS_COMPACT_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = dir.join("ix.chassis");
    let data = data();
    let ix = Index::create(
        &path,
        Options::new(16, Metric::L2Squared).m(8).ef_construction(40),
    )
    .unwrap();
    for i in 0..2000u64 {
        ix.add_with_id(i, &data[i as usize]).unwrap();
    }
    ix.flush().unwrap();
    drop(ix);
    write_atomic(&dir.join("acked"), &ids_text(&(0..2000).collect()));
    write_atomic(&dir.join("pending"), &ids_text(&(0..2000).collect()));
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng::new(99);
    let mut during_compaction = 0;
    for k in 0..kills {
        let mut c = Command::new(&exe)
            .args([
                "kills_during_compaction_leave_a_complete_index_at_the_path",
                "--exact",
            ])
            .env("CHASSIS_COMPACT_CHILD", k.to_string())
            .env("CHASSIS_CHILD_DIR", dir)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(40 + rng.below(400) as u64));
        c.kill().unwrap();
        c.wait().unwrap();
        if fs::read_to_string(dir.join("phase")).unwrap_or_default() == "compacting" {
            during_compaction += 1;
        }
        let acked = parse_ids(&fs::read_to_string(dir.join("acked")).unwrap());
        let pending = parse_ids(&fs::read_to_string(dir.join("pending")).unwrap());
        let ix = Index::open(&path).unwrap_or_else(|e| panic!("kill {k}: open failed: {e}"));
        let ids: BTreeSet<u64> = ix.ids().unwrap().into_iter().collect();
        assert!(
            ids == acked || ids == pending,
            "kill {k}: {} ids, acked {}, pending {}",
            ids.len(),
            acked.len(),
            pending.len()
        );
        for &id in ids.iter().step_by(37) {
            let v = &data[id as usize % data.len()];
            assert_eq!(&ix.get(id).unwrap(), v, "kill {k}: id {id}");
            // Approximate search at M = 8, ef_construction = 40 need not find every vector
            // itself; what it returns must be stored, live, with its own distance.
            let hit = ix.search(v, 1, 64).unwrap()[0];
            let w = &data[hit.id as usize % data.len()];
            let d: f32 = v.iter().zip(w).map(|(a, b)| (a - b) * (a - b)).sum();
            assert!(
                ids.contains(&hit.id) && (d - hit.distance).abs() < 1e-3,
                "kill {k}"
            );
        }
        drop(ix);
        assert_eq!(
            IndexReader::open(&path).unwrap().len().unwrap(),
            ids.len() as u64
        );
        write_atomic(&dir.join("acked"), &ids_text(&ids));
        write_atomic(&dir.join("pending"), &ids_text(&ids));
    }
    println!("compact kills: {kills} kills, {during_compaction} during a compaction");
    assert!(during_compaction > 0, "no kill landed inside a compaction");
}
