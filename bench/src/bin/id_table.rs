//! Experiment 5 of ADR-0008: building the custom-id table at 10,000,000 slots, page cache warm.
//!
//! Writes a file of `--slots` slots with custom ids through the storage layer (4-d vectors, a
//! path graph on layer 0 so a writer's open finds every slot reachable and links nothing), then
//! times, over `--reps` repetitions, the first custom-id lookup of a freshly opened writer
//! ([`Index::contains`], which builds the writer's id table from the slot headers) and of a
//! freshly opened reader ([`IndexReader::contains`], which builds the reader's). The file stays
//! in the page cache (it was just written, and every repetition reads it). Pass: under 1 s.
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin id_table -- [--slots N] [--reps R]
//! ```

use chassis_bench::median;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use chassis::format::header::{self, Header, FLAG_CUSTOM_IDS};
use chassis::os::FileStorage;
use chassis::storage::{NewFile, Store};
use chassis::{Geometry, Index, IndexReader};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// A scrambled 64-bit id per slot (a bijection, so ids are distinct).
fn id_of(slot: u64) -> u64 {
    let mut z = slot.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn main() -> chassis::Result<()> {
    let slots = arg("--slots", 10_000_000) as u32;
    let reps = arg("--reps", 5) as usize;
    let dir = tempfile_dir();
    let path = dir.join("ids.chassis");
    let (dims, m, max_layers) = (4u32, 4u32, 16u32);
    let t = Instant::now();
    {
        let storage = Arc::new(FileStorage::create(&path)?);
        let new = NewFile {
            dims,
            metric: header::METRIC_L2_SQUARED,
            m,
            max_layers,
            ef_construction: 100,
            seed: 1,
            geometry: Geometry::for_layout(dims, m, max_layers),
            layout: chassis::VectorLayout::default(),
            codes: chassis::CodeKind::None,
        };
        let mut store = Store::create(storage, &new)?;
        for slot in 0..slots {
            store.ensure_slot(slot)?;
            store.write_slot(
                slot,
                id_of(u64::from(slot)),
                &[slot as f32, 0.0, 0.0, 0.0],
                0,
            )?;
            if let Some(words) = store.level0(slot) {
                if slot > 0 {
                    words[0].store(slot - 1, Ordering::Relaxed);
                }
                if slot + 1 < slots {
                    words[1].store(slot + 1, Ordering::Relaxed);
                }
            }
        }
        let next = Header {
            flags: FLAG_CUSTOM_IDS,
            committed_count: u64::from(slots),
            entry_point: 0,
            max_layer: 0,
            next_id: u64::MAX,
            ..store.header().clone()
        };
        store.commit(next, &[])?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    println!(
        "wrote {slots} slots ({:.0} MiB) in {:.1} s",
        bytes as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    let probe = id_of(u64::from(slots / 2));
    let (mut writer_ms, mut reader_ms) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let ix = Index::open(&path)?;
        let t = Instant::now();
        assert!(ix.contains(probe)?);
        let w = t.elapsed().as_secs_f64() * 1000.0;
        drop(ix);
        let r = IndexReader::open(&path)?;
        let t = Instant::now();
        assert!(r.contains(probe)?);
        let rd = t.elapsed().as_secs_f64() * 1000.0;
        println!(
            "  rep {rep}: writer {w:.0} ms, reader {rd:.0} ms{}",
            if rep == 0 { " (warm-up)" } else { "" }
        );
        if rep > 0 {
            writer_ms.push(w);
            reader_ms.push(rd);
        }
    }
    let (w, r) = (median(writer_ms), median(reader_ms));
    println!(
        "id table at {slots} slots, page cache warm: writer median {w:.0} ms, reader median {r:.0} ms \
         ({}: under 1 s)",
        if w < 1000.0 && r < 1000.0 { "PASS" } else { "FAIL" }
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("chassis-id-table-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
