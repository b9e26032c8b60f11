//! Compiles `tests/c/test_chassis.c` against `include/chassis.h` and the static library with
//! `cc`, runs it, then runs it under valgrind: zero errors and zero leaks (definite, indirect or
//! possible; "still reachable" runtime allocations are not leaks).

use std::path::{Path, PathBuf};
use std::process::Command;

fn library_dir() -> PathBuf {
    // target/<profile>/deps/c_program-<hash>: the crate's libraries sit beside it.
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The hnswlib file the Rust migration tests use (600 x 16, l2, ten labels deleted).
fn hnswlib_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../chassis/tests/fixtures/hnswlib/l2.bin")
}

fn compile(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_dir().join("libchassis_c.a");
    assert!(lib.exists(), "{} missing", lib.display());
    let exe = dir.join("test_chassis");
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_DEFAULT_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-I",
        ])
        .arg(root.join("include"))
        .arg(root.join("tests/c/test_chassis.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .status()
        .expect("cc");
    assert!(status.success(), "the C test program does not compile");
    exe
}

#[test]
fn the_c_program_passes_and_valgrind_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let run = dir.path().join("plain");
    std::fs::create_dir(&run).unwrap();
    let out = Command::new(&exe)
        .arg(&run)
        .arg(hnswlib_fixture())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = dir.path().join("valgrind");
    std::fs::create_dir(&run).unwrap();
    let supp = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/valgrind.supp");
    let out = Command::new("valgrind")
        .arg(format!("--suppressions={}", supp.display()))
        .args([
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--trace-children=no",
            "--child-silent-after-fork=yes",
        ])
        .arg(&exe)
        .arg(&run)
        .arg(hnswlib_fixture())
        .output()
        .expect("valgrind (it ships with every machine of this project's kind)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "valgrind: exit {:?}\n{err}",
        out.status.code()
    );
    assert!(err.contains("ERROR SUMMARY: 0 errors"), "{err}");
}
