//! (d) Random operation sequences with injected I/O errors: each input byte is an operation
//! (add, add with id, delete, flush, reopen, search, or a fault at the n-th next call, EIO or
//! ENOSPC, once or forever). Errors are fine; panics are not; and after the run the file must
//! open (once faults are cleared) showing a state with no more ids than were ever added.
#![no_main]

use std::sync::Arc;

use chassis::os::{FaultKind, MemStorage};
use chassis::{Geometry, Index, Metric, Options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mem = MemStorage::new(32 << 20).unwrap();
    let opts = Options::new(4, Metric::L2Squared)
        .m(4)
        .ef_construction(16)
        .geometry(Geometry::small_for_tests(4, 16));
    let Ok(mut ix) = Index::create_in(Arc::new(mem.reopen(true)), opts) else {
        return;
    };
    let mut added = 0u64;
    for (i, &b) in data.iter().enumerate().take(400) {
        let x = i as f32;
        let v = [x.sin(), x.cos(), (b as f32) * 0.01, 1.0];
        match b % 8 {
            0..=2 => {
                if ix.add(&v).is_ok() {
                    added += 1;
                }
            }
            3 => {
                if ix.add_with_id(1000 + u64::from(b), &v).is_ok() {
                    added += 1;
                }
            }
            4 => {
                let _ = ix.delete(u64::from(b) % (added + 1));
            }
            5 => {
                let _ = ix.flush();
            }
            6 => {
                drop(ix);
                match Index::open_in(Arc::new(mem.reopen(true))) {
                    Ok(n) => ix = n,
                    Err(_) => {
                        mem.clear_fault();
                        match Index::open_in(Arc::new(mem.reopen(true))) {
                            Ok(n) => ix = n,
                            Err(e) => panic!("a file that only saw I/O errors must reopen: {e}"),
                        }
                    }
                }
            }
            _ => {
                let kind = if b & 16 == 0 {
                    FaultKind::Eio
                } else {
                    FaultKind::NoSpace
                };
                mem.inject_fault(u64::from(b >> 5) + 1, kind, b & 8 != 0);
                let _ = ix.search(&v, 3, 16);
            }
        }
    }
    drop(ix);
    mem.clear_fault();
    let ix = Index::open_in(Arc::new(mem.reopen(true))).expect("reopen after faults");
    assert!(ix.len() as u64 <= added, "more ids than were ever added");
});
