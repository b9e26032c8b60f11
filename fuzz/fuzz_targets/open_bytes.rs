//! (a) Arbitrary bytes opened as an index file: as the writer (with recovery), read-only, and
//! by the lock-free reader; then searched, added to and flushed. Any outcome but a panic, an
//! abort, a timeout or a memory blow-up is fine.
#![no_main]

use std::sync::Arc;

use chassis::os::MemStorage;
use chassis::{Index, IndexReader};
use libfuzzer_sys::fuzz_target;

const CAP: usize = 8 << 20;

fuzz_target!(|data: &[u8]| {
    if data.len() > CAP {
        return;
    }
    let Ok(mem) = MemStorage::from_image(data, CAP) else {
        return;
    };
    if let Ok(mut ix) = Index::open_in(Arc::new(mem.reopen(true))) {
        let q = vec![0.5f32; ix.dims().min(4096)];
        let _ = ix.search(&q, 3, 16);
        let _ = ix.check(0);
        if ix.add(&q).is_ok() {
            let _ = ix.flush();
        }
    }
    if let Ok(ix) = Index::open_in_read_only(Arc::new(mem.reopen(false))) {
        let q = vec![0.25f32; ix.dims().min(4096)];
        let _ = ix.search(&q, 3, 16);
        let _ = ix.ids();
    }
    if let Ok(r) = IndexReader::open_in(Arc::new(mem.reopen(false))) {
        let q = vec![0.75f32; r.dims().min(4096)];
        let _ = r.search(&q, 3, 16);
        let _ = r.len();
    }
});
