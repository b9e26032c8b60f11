//! A full disk on a real file system: a size-limited tmpfs that the test mounts (it needs
//! root, which CI has). Space is allocated before it is written (ADR-0008 decision 5), so a
//! full disk fails an add or a flush with a clear error, never SIGBUS; the committed state stays
//! intact, and after space is freed the reopened index continues.

mod common;

use std::path::Path;
use std::process::Command;

use chassis::{Error, Index, Metric, Options};
use common::clustered;

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &Path, size: &str) -> Mount {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "this test mounts a small tmpfs and needs root (CI runs as root); run the suite as root"
    );
    Mount(dir.to_path_buf())
}

#[test]
fn a_full_disk_fails_with_an_error_and_the_index_continues_after_space_is_freed() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("fs");
    std::fs::create_dir(&mnt).unwrap();
    let _mount = mount_tmpfs(&mnt, "48m");
    let path = mnt.join("full.chassis");
    let data = clustered(60_000, 64, 20, 3);
    let ix = Index::create(&path, Options::new(64, Metric::L2Squared)).unwrap();
    for v in &data[..2_000] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    // Leave little room: a filler file takes most of what is free.
    let filler = mnt.join("filler");
    let free = {
        let st = rustix::fs::statvfs(&mnt).unwrap();
        st.f_bavail * st.f_frsize
    };
    std::fs::write(&filler, vec![1u8; (free - (6 << 20)) as usize]).unwrap();
    let mut added = 2_000;
    let err = loop {
        match ix.add(&data[added]) {
            Ok(_) => added += 1,
            Err(e) => break e,
        }
        assert!(added < data.len(), "the disk never filled");
    };
    match &err {
        Error::Io(io) => {
            assert_eq!(io.kind(), std::io::ErrorKind::StorageFull, "{err}");
            assert!(err.to_string().contains("free space"), "{err}");
        }
        other => panic!("expected a full-disk Io error, got {other:?}"),
    }
    // The committed state is intact; the adds that fit may or may not commit, all or none.
    let flushed = ix.flush().is_ok();
    drop(ix);
    std::fs::remove_file(&filler).unwrap();
    let ix = Index::open(&path).unwrap();
    let n = ix.len();
    assert!(
        n == 2_000 || (flushed && n == added),
        "len {n}, added {added}"
    );
    for (i, v) in data[..n].iter().enumerate().step_by(97) {
        assert_eq!(ix.search(v, 1, 64).unwrap()[0].id, i as u64);
    }
    // It continues.
    for v in &data[n..n + 500] {
        ix.add(v).unwrap();
    }
    ix.flush().unwrap();
    drop(ix);
    assert_eq!(Index::open(&path).unwrap().len(), n + 500);
}
