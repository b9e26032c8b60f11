//! (c) Structural mutation of a valid file: the input is a list of (offset, byte) writes into
//! a small valid index, after which both header copies get fresh checksums, so the mutation
//! reaches everything the checksum would otherwise stop. Then open three ways and search.
#![no_main]

use std::sync::{Arc, OnceLock};

use chassis::format::header;
use chassis::os::MemStorage;
use chassis::{Geometry, Index, IndexReader, Metric, Options};
use libfuzzer_sys::fuzz_target;

const CAP: usize = 8 << 20;

fn valid() -> &'static Vec<u8> {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        let mem = MemStorage::new(CAP).unwrap();
        let opts = Options::new(4, Metric::L2Squared)
            .m(4)
            .ef_construction(16)
            .geometry(Geometry::small_for_tests(4, 16));
        let ix = Index::create_in(Arc::new(mem.reopen(true)), opts).unwrap();
        for i in 0..70u32 {
            let x = i as f32;
            ix.add(&[x.sin(), x.cos(), x * 0.1, 1.0]).unwrap();
        }
        ix.flush().unwrap();
        ix.delete(5).unwrap();
        ix.flush().unwrap();
        drop(ix);
        mem.current_image()
    })
}

fn fix_checksum(img: &mut [u8], base: usize) {
    let len = u32::from_le_bytes(img[base + 16..base + 20].try_into().unwrap()) as usize;
    if len < header::FIXED_BYTES || base + len > img.len() || len > 65_536 {
        return;
    }
    let sum = header::checksum(&img[base..base + len]);
    let at = base + header::at::CHECKSUM;
    img[at..at + 8].copy_from_slice(&sum.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    let mut img = valid().clone();
    for w in data.chunks_exact(5) {
        let off = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize;
        // Bias toward the fixed area and the first regions, where the structure lives.
        let off = if off & 1 == 0 {
            (off >> 1) % 200_000
        } else {
            (off >> 1) % img.len()
        };
        if off < img.len() {
            img[off] = w[4];
        }
    }
    fix_checksum(&mut img, 0);
    fix_checksum(&mut img, 65_536);
    let Ok(mem) = MemStorage::from_image(&img, CAP) else {
        return;
    };
    if let Ok(ix) = Index::open_in(Arc::new(mem.reopen(true))) {
        let _ = ix.search(&[0.5, 0.5, 0.5, 1.0], 5, 32);
        let _ = ix.check(5);
        if ix.add(&[1.0, 2.0, 3.0, 4.0]).is_ok() {
            let _ = ix.flush();
        }
    }
    if let Ok(r) = IndexReader::open_in(Arc::new(mem.reopen(false))) {
        let _ = r.search(&[0.5, 0.5, 0.5, 1.0], 5, 32);
        if let Ok(s) = r.snapshot() {
            let _ = r.ids_in(&s);
        }
    }
});
