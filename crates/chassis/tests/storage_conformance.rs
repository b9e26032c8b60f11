//! One conformance suite for both storage backends (the file and the in-memory one), plus the
//! commit protocol as seen through the in-memory backend's durable image.

mod common;

use std::sync::Arc;

use chassis::os::{FileStorage, MemStorage, Storage};
use chassis::{Error, Geometry, Index, Metric, Options};

fn conformance(s: &dyn Storage, second_handle: &dyn Storage) {
    assert_eq!(s.len().unwrap(), 0);
    s.grow(196_608).unwrap();
    assert_eq!(s.len().unwrap(), 196_608);
    s.grow(1000).unwrap();
    assert_eq!(s.len().unwrap(), 196_608, "grow never shrinks");
    let mut buf = [1u8; 16];
    s.read_at(100, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 16], "new bytes read as zero");
    s.write_at(70_000, b"hello").unwrap();
    let mut five = [0u8; 5];
    s.read_at(70_000, &mut five).unwrap();
    assert_eq!(&five, b"hello");
    assert!(s.read_at(196_600, &mut buf).is_err(), "read past the end");
    // Mappings see positional writes and each other, and survive growth.
    let r = s.map(65_536, 65_536, true).unwrap();
    let mut five = [0u8; 5];
    r.read(70_000 - 65_536, &mut five).unwrap();
    assert_eq!(&five, b"hello");
    r.write(0, b"mapped").unwrap();
    let mut six = [0u8; 6];
    s.read_at(65_536, &mut six).unwrap();
    assert_eq!(&six, b"mapped");
    s.grow(4 << 20).unwrap();
    let r2 = s.map(1 << 20, 65_536, true).unwrap();
    r2.u64_at(8)
        .unwrap()
        .store(0xDEAD_BEEF, std::sync::atomic::Ordering::Relaxed);
    let mut w = [0u8; 8];
    s.read_at((1 << 20) + 8, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 0xDEAD_BEEF);
    r.read(0, &mut six).unwrap();
    assert_eq!(&six, b"mapped", "an old mapping stays valid after growth");
    // Read-only mappings refuse writes; out-of-range access is an error, not a crash.
    let ro = s.map(0, 65_536, false).unwrap();
    assert!(ro.write(0, b"x").is_err());
    assert!(r.read(65_531, &mut six).is_err());
    assert!(r.u32_at(2).is_err(), "unaligned atomics are refused");
    assert!(
        s.map(8 << 20, 65_536, false).is_err(),
        "mapping past the end"
    );
    // A large read-only mapping (the file backend places those for huge pages) reads the same
    // bytes as positional reads, over its whole length, and sees later writes.
    s.grow(12 << 20).unwrap();
    let (at, len) = ((6 << 20) + 3 * 65_536, 5 << 20);
    for i in 0..40u64 {
        s.write_at(at + i * 131_072 + 5, &i.to_le_bytes()).unwrap();
    }
    s.will_need(at, 4096);
    let big = s.map(at, len, false).unwrap();
    for i in 0..40u64 {
        big.read(i * 131_072 + 5, &mut w).unwrap();
        assert_eq!(u64::from_le_bytes(w), i);
    }
    s.write_at(at + len - 8, &7u64.to_le_bytes()).unwrap();
    let last = big.u64_at(len - 8).unwrap();
    assert_eq!(last.load(std::sync::atomic::Ordering::Relaxed), 7);
    assert!(big.write(0, b"x").is_err());
    assert!(big.read(len - 4, &mut w).is_err());
    drop(big);
    s.allocate(4 << 20, 1 << 20).unwrap();
    s.sync().unwrap();
    s.sync_dir().unwrap();
    // The writer lock: held by one handle, refused to another, released on drop.
    s.try_lock_exclusive().unwrap();
    assert!(matches!(
        second_handle.try_lock_exclusive(),
        Err(Error::Locked)
    ));
}

#[test]
fn file_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let a = FileStorage::create(&path).unwrap();
    let b = FileStorage::open(&path, true).unwrap();
    conformance(&a, &b);
    drop(a);
    b.try_lock_exclusive().unwrap();
}

#[test]
fn memory_backend_conforms() {
    let a = MemStorage::new(16 << 20).unwrap();
    let b = a.reopen(true);
    conformance(&a, &b);
    drop(a);
    b.try_lock_exclusive().unwrap();
    assert!(
        b.grow(1 << 30).is_err(),
        "growing past capacity fails like a full disk"
    );
}

#[test]
fn memory_backend_durable_image_changes_only_at_sync() {
    let s = MemStorage::new(1 << 20).unwrap();
    s.write_at(0, b"abc").unwrap();
    assert!(s.durable_image().is_empty());
    s.sync().unwrap();
    assert_eq!(&s.durable_image()[..3], b"abc");
    s.write_at(0, b"xyz").unwrap();
    assert_eq!(&s.durable_image()[..3], b"abc");
    assert_eq!(&s.current_image()[..3], b"xyz");
}

/// Decision 4 as the durable image sees it: a flush is two fsyncs; after the first the data is
/// durable but the old header still rules; after the second the other copy holds the commit.
#[test]
fn flush_is_data_fsync_header_fsync_into_the_other_copy() {
    let mem = Arc::new(MemStorage::new(64 << 20).unwrap());
    let opts = Options::new(4, Metric::L2Squared)
        .m(4)
        .geometry(Geometry::small_for_tests(4, 16));
    let ix = Index::create_in(mem.clone(), opts).unwrap();
    let created = mem.durable_image();
    // A new file: A at sequence 1, B at 0, equal otherwise.
    let seq = |img: &[u8], base: usize| {
        u64::from_le_bytes(img[base + 224..base + 232].try_into().unwrap())
    };
    assert_eq!((seq(&created, 0), seq(&created, 65_536)), (1, 0));
    assert_eq!(created[..224], created[65_536..65_536 + 224]);
    let mut copies = Vec::new();
    for round in 0..4u64 {
        for i in 0..10 {
            ix.add(&[round as f32, i as f32, 1.0, 2.0]).unwrap();
        }
        let syncs = mem.sync_count();
        ix.flush().unwrap();
        assert_eq!(
            mem.sync_count() - syncs,
            2,
            "one fsync for data, one for the header"
        );
        let img = mem.durable_image();
        let (a, b) = (seq(&img, 0), seq(&img, 65_536));
        copies.push(if a > b { 'A' } else { 'B' });
        assert_eq!(a.max(b), round + 2);
        // Reopening the durable image alone shows this flush.
        let reopened =
            Index::open_in(Arc::new(MemStorage::from_image(&img, 64 << 20).unwrap())).unwrap();
        assert_eq!(reopened.len() as u64, 10 * (round + 1));
    }
    assert_eq!(copies, vec!['B', 'A', 'B', 'A'], "header copies alternate");
    // A flush with nothing pending writes nothing.
    let syncs = mem.sync_count();
    ix.flush().unwrap();
    assert_eq!(mem.sync_count(), syncs);
}

#[test]
fn a_second_in_memory_writer_is_locked_out() {
    let mem = Arc::new(MemStorage::new(8 << 20).unwrap());
    let ix = Index::create_in(mem.clone(), Options::new(3, Metric::Cosine)).unwrap();
    assert!(matches!(
        Index::open_in(Arc::new(mem.reopen(true))),
        Err(Error::Locked)
    ));
    drop(ix);
}
