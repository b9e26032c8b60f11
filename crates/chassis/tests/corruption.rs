//! A deterministic corruption sweep (hardening issue, item 2): every single-bit flip in both
//! header copies and the live page of a small file, every truncation at each 4 KiB boundary
//! and around each region start, and every 512-byte sector zeroed. Each damaged image is opened
//! as the writer (with recovery), read-only, and by an `IndexReader`, then searched. Pass: a
//! typed error or a working index; never a panic, never an id that was not stored.
//!
//! Vectors and graph words carry no checksum, so damage there can change which stored vectors
//! a search returns; the sweep checks that it never invents one. Metadata entries carry one:
//! the file holds metadata, every probe also reads documents and runs a filtered search, and a
//! second sweep flips every bit of metadata entries and references (`Corrupt`, never a panic,
//! never a wrong document).

mod common;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use chassis::os::MemStorage;
use chassis::{Error, Filter, Index, IndexReader, Metadata, Metric, Value};
use common::clustered;

const CAP: usize = 16 << 20;

fn doc(i: usize) -> Metadata {
    Metadata::from([
        ("n".to_string(), Value::Int(i as i64)),
        ("tag".to_string(), Value::from(format!("t{}", i % 3))),
        (
            "list".to_string(),
            Value::List(vec![Value::Float(i as f64 / 2.0)]),
        ),
    ])
}

fn build() -> (Vec<u8>, BTreeSet<u64>, Vec<Vec<f32>>, Vec<u64>) {
    let mem = MemStorage::new(CAP).unwrap();
    let ix = Index::create_in(
        Arc::new(mem.reopen(true)),
        common::small(4, Metric::L2Squared, 8, 32),
    )
    .unwrap();
    let data = clustered(90, 4, 5, 12);
    for (i, v) in data[..60].iter().enumerate() {
        ix.add_with_metadata(v, &doc(i)).unwrap();
    }
    ix.flush().unwrap();
    for id in [3, 17, 41] {
        ix.delete(id).unwrap();
    }
    for v in &data[60..80] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    let stored: BTreeSet<u64> = (0..80).collect();
    let (segs, chunks, pages) = ix.store().region_offsets();
    let starts = segs.into_iter().chain(chunks).chain(pages).collect();
    drop(ix);
    (mem.current_image(), stored, data, starts)
}

/// Opens `img` three ways and searches; returns a violation, if any.
fn probe(img: &[u8], stored: &BTreeSet<u64>, queries: &[Vec<f32>]) -> Option<String> {
    let check_ids = |ids: Vec<u64>, how: &str| -> Option<String> {
        ids.into_iter()
            .find(|id| !stored.contains(id))
            .map(|id| format!("{how} returned id {id}, never stored"))
    };
    let r = catch_unwind(AssertUnwindSafe(|| -> Option<String> {
        // As the writer, with recovery.
        let mem = MemStorage::from_image(img, CAP).ok()?;
        if let Ok(ix) = Index::open_in(Arc::new(mem.reopen(true))) {
            for q in queries {
                if let Ok(hits) = ix.search(q, 5, 32) {
                    if let Some(v) = check_ids(hits.iter().map(|h| h.id).collect(), "writer search")
                    {
                        return Some(v);
                    }
                }
            }
            if let Ok(ids) = ix.ids() {
                for &id in &ids {
                    if let Ok(m) = ix.get_metadata(id) {
                        if id < 60 && !m.is_empty() && m != doc(id as usize) {
                            return Some(format!("writer metadata of {id} is {m:?}"));
                        }
                    }
                }
                if let Some(v) = check_ids(ids, "writer ids") {
                    return Some(v);
                }
            }
            let f = Filter::eq("tag", "t1");
            for q in queries.iter().take(3) {
                if let Ok(hits) = ix.search_filtered(q, 5, 32, &f) {
                    if let Some(v) = check_ids(
                        hits.iter().map(|h| h.id).collect(),
                        "writer filtered search",
                    ) {
                        return Some(v);
                    }
                }
            }
            let _ = ix.check(0);
        }
        // Read-only, no recovery.
        let mem = MemStorage::from_image(img, CAP).ok()?;
        if let Ok(ix) = Index::open_in_read_only(Arc::new(mem.reopen(false))) {
            for q in queries {
                if let Ok(hits) = ix.search(q, 5, 32) {
                    if let Some(v) =
                        check_ids(hits.iter().map(|h| h.id).collect(), "read-only search")
                    {
                        return Some(v);
                    }
                }
            }
        }
        // The lock-free reader.
        if let Ok(r) = IndexReader::open_in(Arc::new(mem.reopen(false))) {
            let f = Filter::gte("n", 10);
            for q in queries.iter().take(3) {
                if let Ok(hits) = r.search_filtered(q, 5, 32, &f) {
                    if let Some(v) = check_ids(
                        hits.iter().map(|h| h.id).collect(),
                        "reader filtered search",
                    ) {
                        return Some(v);
                    }
                }
            }
            for q in queries {
                if let Ok(hits) = r.search(q, 5, 32) {
                    if let Some(v) = check_ids(hits.iter().map(|h| h.id).collect(), "reader search")
                    {
                        return Some(v);
                    }
                }
            }
        }
        None
    }));
    match r {
        Ok(v) => v,
        Err(p) => Some(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

#[test]
fn every_bit_flip_truncation_and_zeroed_sector_is_an_error_or_harmless() {
    let (img, stored, data, starts) = build();
    let queries: Vec<Vec<f32>> = data[75..90].to_vec();
    let mut cases = 0usize;
    let mut bad = Vec::new();
    let mut run = |what: String, img: &[u8]| {
        cases += 1;
        if let Some(v) = probe(img, &stored, &queries) {
            bad.push(format!("{what}: {v}"));
        }
    };
    // Bit flips: the used part of both header copies (fixed 240 bytes and the table page
    // offsets) and of the live page.
    let header_len = u32::from_le_bytes(img[16..20].try_into().unwrap()) as usize;
    for (base, len) in [
        (0usize, header_len),
        (65_536, header_len),
        (131_072, 48 + 8 * 16),
    ] {
        for byte in base..base + len {
            for bit in 0..8 {
                let mut b = img.clone();
                b[byte] ^= 1 << bit;
                run(format!("bit {bit} of byte {byte}"), &b);
            }
        }
    }
    // Truncations at every 4 KiB boundary and around every region start.
    let mut cuts: BTreeSet<usize> = (0..img.len()).step_by(4096).collect();
    for &s in &starts {
        for d in [-8i64, -1, 1, 8, 24, 512] {
            cuts.insert((s as i64 + d).clamp(0, img.len() as i64) as usize);
        }
    }
    for cut in cuts {
        run(format!("truncated to {cut}"), &img[..cut]);
    }
    // Every 512-byte sector zeroed.
    for s in (0..img.len()).step_by(512) {
        let mut b = img.clone();
        let end = (s + 512).min(b.len());
        b[s..end].fill(0);
        run(format!("sector at {s} zeroed"), &b);
    }
    println!(
        "corruption sweep: {cases} damaged images, {} violations",
        bad.len()
    );
    assert!(bad.is_empty(), "{:#?}", &bad[..bad.len().min(20)]);
    assert!(cases > 5_000, "too few cases: {cases}");
}

/// Found by fuzzing: a damaged layer count in an upper-heap entry made the writer's repair at
/// open loop over four billion layers. Counts read as at most the file's layer limit, and
/// `check` reports the damage.
#[test]
fn a_damaged_layer_count_is_bounded_and_reported() {
    let mem = MemStorage::new(CAP).unwrap();
    let ix = Index::create_in(
        Arc::new(mem.reopen(true)),
        common::small(4, Metric::L2Squared, 8, 32),
    )
    .unwrap();
    for v in clustered(200, 4, 5, 3) {
        ix.add(&v).unwrap();
    }
    ix.flush().unwrap();
    let slot = (0..200u32).find(|&s| ix.node_level(s) > 0).unwrap();
    let (chunk, off) = chassis::format::record::split_heap_ref(ix.store().upper_ref(slot).unwrap());
    let chunk_at = ix.store().region_offsets().1[chunk as usize];
    drop(ix);
    let mut img = mem.current_image();
    let at = (chunk_at + u64::from(off)) as usize;
    img[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mem = MemStorage::from_image(&img, CAP).unwrap();
    let ix = Index::open_in(Arc::new(mem.reopen(true))).unwrap();
    assert!(ix.store().upper_layers(slot) < 16);
    let report = ix.check(0).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&format!("slot {slot}: 4294967295 upper layers"))),
        "{:?}",
        report.problems
    );
}

/// Every bit of the metadata heap's entries and of the slots' metadata references, flipped
/// one at a time: reading a document is the original or `Corrupt` (the entry checksum and
/// the document checks catch every flip), `check` reports each one it touches, filtered
/// searches fail or return stored ids, and nothing panics.
#[test]
fn every_flip_in_metadata_is_corrupt_or_harmless() {
    let mem = MemStorage::new(CAP).unwrap();
    let ix = Index::create_in(
        Arc::new(mem.reopen(true)),
        common::small(4, Metric::L2Squared, 8, 32),
    )
    .unwrap();
    let data = clustered(40, 4, 3, 5);
    for (i, v) in data.iter().enumerate() {
        ix.add_with_metadata(v, &doc(i)).unwrap();
    }
    ix.flush().unwrap();
    let store = ix.store();
    let (chunk, used) = {
        let h = store.header();
        assert_eq!(h.metadata_heap_chunk_count, 1);
        (0usize, (h.metadata_heap_next & 0xFFFF_FFFF) as usize)
    };
    // Where the first chunk and each slot's reference lie, found from the file itself.
    let img = mem.current_image();
    let chunk_offset = {
        let mut found = None;
        for off in (196_608..img.len()).step_by(65_536) {
            if &img[off..off + 8] == b"CHHEAP\0\0" && img[off + 8] == 2 {
                found = Some(off);
                break;
            }
        }
        found.expect("a metadata chunk")
    };
    let _ = chunk;
    let mut refs = Vec::new();
    for slot in 0..40u32 {
        let (_, _, r) = store.slot_header(slot).unwrap();
        assert_ne!(r, 0);
        // Slot headers lie in the segment: find each by its id and metadata reference.
        let want = [slot as u64, 0, r]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>();
        let at = img
            .windows(24)
            .position(|w| w == want.as_slice())
            .expect("slot header in the image");
        refs.push(at + 16);
    }
    drop(store);
    drop(ix);
    let stored: BTreeSet<u64> = (0..40).collect();
    let (mut cases, mut bad) = (0usize, Vec::new());
    // The first entries (a third of the heap) and every reference.
    let mut bytes: Vec<usize> = (chunk_offset + 16..chunk_offset + 16 + used / 3).collect();
    for r in &refs {
        bytes.extend(*r..*r + 8);
    }
    for byte in bytes {
        for bit in 0..8 {
            let mut b = img.clone();
            b[byte] ^= 1 << bit;
            cases += 1;
            let r = catch_unwind(AssertUnwindSafe(|| -> Option<String> {
                let m = MemStorage::from_image(&b, CAP).ok()?;
                let ix = Index::open_in_read_only(Arc::new(m.reopen(false))).ok()?;
                let mut damaged = 0;
                for id in 0..40u64 {
                    match ix.get_metadata(id) {
                        Ok(d) if d == doc(id as usize) => {}
                        // A reference flipped to 0 reads as "no metadata": slot headers carry
                        // no checksum (a flipped id is as silent); any other flip is caught.
                        Ok(d) if d.is_empty() && refs.contains(&(byte & !7)) => {}
                        Ok(d) => return Some(format!("metadata of {id} read back as {d:?}")),
                        Err(Error::Corrupt { .. }) => damaged += 1,
                        Err(e) => return Some(format!("metadata of {id}: untyped {e}")),
                    }
                }
                let report = ix.check(0).ok()?;
                let flagged = report
                    .problems
                    .iter()
                    .filter(|p| p.contains("metadata"))
                    .count();
                if flagged != damaged {
                    return Some(format!(
                        "check reports {flagged} metadata problems, reads found {damaged}"
                    ));
                }
                let reader = IndexReader::open_in(Arc::new(m.reopen(false))).ok()?;
                for f in [Filter::eq("tag", "t1"), Filter::gt("list", 3.0)] {
                    for h in [
                        ix.search_filtered(&data[0], 5, 16, &f),
                        reader.search_filtered(&data[0], 5, 16, &f),
                    ]
                    .into_iter()
                    .flatten()
                    .flatten()
                    {
                        if !stored.contains(&h.id) {
                            return Some(format!("filtered search returned {}", h.id));
                        }
                    }
                }
                None
            }));
            match r {
                Ok(None) => {}
                Ok(Some(v)) => bad.push(format!("bit {bit} of byte {byte}: {v}")),
                Err(_) => bad.push(format!("bit {bit} of byte {byte}: panic")),
            }
        }
    }
    println!(
        "metadata flips: {cases} damaged images, {} violations",
        bad.len()
    );
    assert!(bad.is_empty(), "{:#?}", &bad[..bad.len().min(20)]);
    assert!(cases > 5_000, "too few cases: {cases}");
}
