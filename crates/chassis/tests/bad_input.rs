//! Bad input never panics, never damages the file, and returns a typed error.

mod common;

use std::fs;
use std::path::Path;

use chassis::format::header::at;
use chassis::{Error, Index, Metric, Options};
use common::clustered;

fn small(dims: usize, metric: Metric) -> Options {
    common::small(dims, metric, 8, 32)
}

fn make(path: &Path, metric: Metric) -> Vec<Vec<f32>> {
    let data = clustered(100, 4, 3, 11);
    let ix = Index::create(path, small(4, metric)).unwrap();
    for v in &data {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    data
}

#[test]
fn wrong_vectors_and_arguments_are_typed_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.chassis");
    let data = make(&path, Metric::Cosine);
    let before = fs::read(&path).unwrap();
    {
        let ix = Index::open(&path).unwrap();
        assert!(matches!(
            ix.add(&[1.0, 2.0]),
            Err(Error::DimensionMismatch {
                expected: 4,
                got: 2
            })
        ));
        assert!(matches!(
            ix.search(&[1.0; 5], 3, 10),
            Err(Error::DimensionMismatch {
                expected: 4,
                got: 5
            })
        ));
        assert!(matches!(
            ix.add(&[1.0, f32::NAN, 0.0, 0.0]),
            Err(Error::InvalidVector { .. })
        ));
        assert!(matches!(
            ix.add(&[1.0, f32::INFINITY, 0.0, 0.0]),
            Err(Error::InvalidVector { .. })
        ));
        assert!(matches!(
            ix.add_with_id(7_000, &[f32::NEG_INFINITY; 4]),
            Err(Error::InvalidVector { .. })
        ));
        assert!(matches!(
            ix.search(&[f32::NAN; 4], 3, 10),
            Err(Error::InvalidVector { .. })
        ));
        let zero = ix.add(&[0.0; 4]).unwrap_err();
        assert!(matches!(zero, Error::InvalidVector { .. }));
        assert!(zero.to_string().contains("zero vector"), "{zero}");
        assert!(matches!(
            ix.search(&[0.0; 4], 3, 10),
            Err(Error::InvalidVector { .. })
        ));
        assert!(matches!(
            ix.search(&data[0], 0, 10),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            ix.delete(12_345),
            Err(Error::NotFound { id: 12_345 })
        ));
        assert!(matches!(
            ix.get(12_345),
            Err(Error::NotFound { id: 12_345 })
        ));
        assert!(!ix.contains(12_345).unwrap());
        assert_eq!(ix.len(), 100);
        assert!(!ix.has_pending_changes());
        ix.flush().unwrap();
    }
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "failed calls and an empty flush left the file as it was"
    );
}

#[test]
fn parameters_out_of_range_are_refused_at_create() {
    let dir = tempfile::tempdir().unwrap();
    for (opts, what) in [
        (Options::new(4, Metric::L2Squared).m(1), "M"),
        (Options::new(4, Metric::L2Squared).m(32_768), "M"),
        (Options::new(0, Metric::L2Squared), "dims"),
        (
            Options::new(4, Metric::L2Squared).ef_construction(0),
            "ef_construction",
        ),
    ] {
        let path = dir.path().join(format!("bad-{what}.chassis"));
        match Index::create(&path, opts) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains(what), "{msg}"),
            other => panic!("expected InvalidArgument for {what}, got {other:?}"),
        }
        assert!(!path.exists(), "no file is created for bad options");
    }
    // The bounds themselves are fine.
    Index::in_memory(Options::new(4, Metric::L2Squared).m(2), 1 << 22).unwrap();
    Index::in_memory(Options::new(2, Metric::L2Squared).m(32_767), 1 << 30).unwrap();
}

#[test]
fn a_file_that_is_not_chassis_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    fs::write(&path, "just some text, not an index\n".repeat(10_000)).unwrap();
    let before = fs::read(&path).unwrap();
    assert!(matches!(Index::open(&path), Err(Error::NotChassisFile)));
    assert!(matches!(
        Index::open_read_only(&path),
        Err(Error::NotChassisFile)
    ));
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    assert!(matches!(Index::open(&empty), Err(Error::NotChassisFile)));
    assert_eq!(fs::read(&path).unwrap(), before);
    // Creating over a file that is not an index is refused, never reinitialised.
    assert!(matches!(
        Index::create(&path, Options::new(4, Metric::Cosine)),
        Err(Error::NotChassisFile)
    ));
    assert_eq!(fs::read(&path).unwrap(), before);
    assert!(matches!(
        Index::open(dir.path().join("missing")),
        Err(Error::Io(_))
    ));
}

#[test]
fn truncated_files_are_corrupt_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.chassis");
    make(&path, Metric::L2Squared);
    let full = fs::read(&path).unwrap();
    let cut = dir.path().join("cut.chassis");
    let mut points: Vec<usize> = vec![
        0, 8, 16, 100, 239, 240, 4096, 65_536, 65_600, 131_072, 196_607, 196_608,
    ];
    points.extend((196_608..full.len()).step_by(65_536));
    points.extend([full.len() - 1, full.len() - 65_536]);
    for n in points {
        fs::write(&cut, &full[..n]).unwrap();
        match Index::open(&cut) {
            Err(Error::Corrupt { .. } | Error::NotChassisFile) => {}
            other => panic!("truncated to {n}: {other:?}"),
        }
        assert_eq!(
            fs::read(&cut).unwrap().len(),
            n,
            "open never changes a bad file"
        );
    }
}

#[test]
fn header_checksums_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.chassis");
    let data = make(&path, Metric::L2Squared);
    let good = fs::read(&path).unwrap();
    let bad = dir.path().join("bad.chassis");
    // The newest copy: after one flush, B (sequence 2). Damage it: open falls back to A, the
    // previous commit (the empty index), exactly as after a torn header write.
    let mut b = good.clone();
    b[65_536 + at::COMMITTED_COUNT] ^= 0x01;
    fs::write(&bad, &b).unwrap();
    let ix = Index::open(&bad).unwrap();
    assert_eq!(ix.len(), 0);
    drop(ix);
    // Both copies damaged: corrupt, never "new".
    let mut both = good.clone();
    both[at::DIMS] ^= 0x10;
    both[65_536 + at::DIMS] ^= 0x10;
    fs::write(&bad, &both).unwrap();
    match Index::open(&bad) {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("checksum"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(&bad).unwrap(), both);
    // The good file still opens with everything.
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), data.len());
}

#[test]
fn a_newer_read_version_is_too_new_even_with_a_bad_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.chassis");
    make(&path, Metric::L2Squared);
    let mut b = fs::read(&path).unwrap();
    b[at::READ_VERSION..at::READ_VERSION + 4]
        .copy_from_slice(&(chassis::format::READ_VERSION + 1).to_le_bytes());
    fs::write(&path, &b).unwrap();
    assert!(matches!(
        Index::open(&path),
        Err(Error::TooNew { read_version }) if read_version == chassis::format::READ_VERSION + 1
    ));
    assert!(matches!(
        Index::open_read_only(&path),
        Err(Error::TooNew { read_version }) if read_version == chassis::format::READ_VERSION + 1
    ));
    assert_eq!(fs::read(&path).unwrap(), b);
}

#[test]
fn a_newer_write_version_opens_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.chassis");
    let data = make(&path, Metric::L2Squared);
    let mut b = fs::read(&path).unwrap();
    // Rewrite both copies with a write version above this release's and a fresh checksum.
    for base in [0usize, 65_536] {
        b[base + at::WRITE_VERSION..base + at::WRITE_VERSION + 4]
            .copy_from_slice(&(chassis::format::WRITE_VERSION + 1).to_le_bytes());
        let len = u32::from_le_bytes(b[base + 16..base + 20].try_into().unwrap()) as usize;
        let sum = chassis::format::header::checksum(&b[base..base + len]);
        b[base + at::CHECKSUM..base + at::CHECKSUM + 8].copy_from_slice(&sum.to_le_bytes());
    }
    fs::write(&path, &b).unwrap();
    let ix = Index::open(&path).unwrap();
    assert!(ix.read_only().is_some());
    assert_eq!(ix.len(), 100);
    assert_eq!(ix.search(&data[3], 1, 16).unwrap()[0].id, 3);
    assert!(matches!(ix.add(&data[0]), Err(Error::ReadOnly { .. })));
    assert!(matches!(ix.delete(1), Err(Error::ReadOnly { .. })));
    assert!(matches!(ix.flush(), Err(Error::ReadOnly { .. })));
    drop(ix);
    assert_eq!(
        fs::read(&path).unwrap(),
        b,
        "a read-only open writes nothing"
    );
}

#[test]
fn a_second_writer_is_locked_out_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.chassis");
    make(&path, Metric::L2Squared);
    let first = Index::open(&path).unwrap();
    let t = std::time::Instant::now();
    assert!(matches!(Index::open(&path), Err(Error::Locked)));
    assert!(t.elapsed() < std::time::Duration::from_secs(2), "no hang");
    // Read-only opens take no lock.
    let ro = Index::open_read_only(&path).unwrap();
    assert_eq!(ro.len(), 100);
    drop(first);
    Index::open(&path).unwrap();
}

#[test]
fn errors_say_what_to_do() {
    let msg = Error::Locked.to_string();
    assert!(msg.contains("read-only"), "{msg}");
    let msg = Error::TooNew { read_version: 9 }.to_string();
    assert!(msg.contains("newer Chassis") && msg.contains('9'), "{msg}");
}
