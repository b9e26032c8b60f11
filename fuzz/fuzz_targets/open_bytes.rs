//! (a) Arbitrary bytes opened as an index file: as the writer (with recovery), read-only, and
//! by the lock-free reader; then searched (also with filters), their metadata read, added to
//! (with metadata) and flushed. Any outcome but a panic, an abort, a timeout or a memory
//! blow-up is fine.
#![no_main]

use std::sync::Arc;

use chassis::os::MemStorage;
use chassis::{Filter, Index, IndexReader, Metadata, Value};
use libfuzzer_sys::fuzz_target;

const CAP: usize = 8 << 20;

fuzz_target!(|data: &[u8]| {
    if data.len() > CAP {
        return;
    }
    let Ok(mem) = MemStorage::from_image(data, CAP) else {
        return;
    };
    if let Ok(ix) = Index::open_in(Arc::new(mem.reopen(true))) {
        let q = vec![0.5f32; ix.dims().min(4096)];
        let _ = ix.search(&q, 3, 16);
        let _ = ix.search_filtered(&q, 3, 16, &Filter::gte("year", 2000));
        let _ = ix.check(0);
        let m = Metadata::from([("year".to_string(), Value::Int(2024))]);
        if ix.add_with_metadata(&q, &m).is_ok() {
            let _ = ix.flush();
        }
    }
    if let Ok(ix) = Index::open_in_read_only(Arc::new(mem.reopen(false))) {
        let q = vec![0.25f32; ix.dims().min(4096)];
        let _ = ix.search(&q, 3, 16);
        if let Ok(ids) = ix.ids() {
            for id in ids.into_iter().take(64) {
                let _ = ix.get_metadata(id);
            }
        }
    }
    if let Ok(r) = IndexReader::open_in(Arc::new(mem.reopen(false))) {
        let q = vec![0.75f32; r.dims().min(4096)];
        let _ = r.search(&q, 3, 16);
        let _ = r.search_filtered(&q, 3, 16, &Filter::eq("tenant", "acme"));
        let _ = r.len();
        let _ = r.get_metadata(0);
    }
});
