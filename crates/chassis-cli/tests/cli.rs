//! The CLI contract other issues and outside checks rely on, tested through the built binary.

use std::path::Path;
use std::process::{Command, Output};

fn chassis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chassis"))
        .args(args)
        .output()
        .expect("run chassis")
}

fn ok(args: &[&str]) -> String {
    let out = chassis(args);
    assert!(
        out.status.success(),
        "chassis {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn write_fvecs(path: &Path, rows: &[Vec<f32>]) {
    let mut out = Vec::new();
    for r in rows {
        out.extend((r.len() as i32).to_le_bytes());
        for x in r {
            out.extend(x.to_le_bytes());
        }
    }
    std::fs::write(path, out).unwrap();
}

fn write_npy(path: &Path, rows: &[Vec<f32>]) {
    let dims = rows[0].len();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {dims}), }}",
        rows.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    for r in rows {
        for x in r {
            out.extend(x.to_le_bytes());
        }
    }
    std::fs::write(path, out).unwrap();
}

fn data(n: usize, dims: usize) -> Vec<Vec<f32>> {
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    (0..n)
        .map(|_| {
            (0..dims)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect()
        })
        .collect()
}

#[test]
fn create_import_search_info_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("v.chassis");
    let idx_s = idx.to_str().unwrap();
    let base = data(300, 8);
    let fvecs = dir.path().join("base.fvecs");
    write_fvecs(&fvecs, &base[..200]);
    let npy = dir.path().join("more.npy");
    write_npy(&npy, &base[200..]);

    ok(&[
        "create",
        idx_s,
        "--dims",
        "8",
        "--metric",
        "l2",
        "--m",
        "8",
        "--ef-construction",
        "100",
    ]);
    let out = ok(&["import", idx_s, fvecs.to_str().unwrap()]);
    assert!(out.contains("ids 0..=199"), "{out}");
    let out = ok(&["import", idx_s, npy.to_str().unwrap()]);
    assert!(out.contains("ids 200..=299"), "{out}");

    // Search with the base vectors themselves: each finds itself first, at distance 0.
    let q = dir.path().join("q.fvecs");
    write_fvecs(&q, &[base[0].clone(), base[250].clone()]);
    let out = ok(&[
        "search",
        idx_s,
        "--query-file",
        q.to_str().unwrap(),
        "-k",
        "5",
        "--ef",
        "32",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (line, want) in lines.iter().zip([0u64, 250]) {
        let ids = line["ids"].as_array().unwrap();
        let d = line["distances"].as_array().unwrap();
        assert_eq!(ids.len(), 5);
        assert_eq!(ids[0].as_u64(), Some(want));
        assert_eq!(d[0].as_f64(), Some(0.0));
        assert!(
            d.windows(2).all(|w| w[0].as_f64() <= w[1].as_f64()),
            "nearest first"
        );
    }
    let text = ok(&[
        "search",
        idx_s,
        "--query-file",
        q.to_str().unwrap(),
        "-k",
        "2",
    ]);
    assert!(
        text.contains("query 0:") && text.contains("distance"),
        "{text}"
    );

    let info: serde_json::Value = serde_json::from_str(&ok(&["info", idx_s, "--json"])).unwrap();
    assert_eq!(info["dims"], 8);
    assert_eq!(info["metric"], "l2");
    assert_eq!(info["m"], 8);
    assert_eq!(info["count"], 300);
    assert_eq!(info["deleted"], 0);
    assert_eq!(
        info["file_bytes"].as_u64(),
        Some(std::fs::metadata(&idx).unwrap().len())
    );
    assert!(ok(&["info", idx_s]).contains("300 live"));
}

#[test]
fn errors_are_one_line_with_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("v.chassis");
    let idx_s = idx.to_str().unwrap();
    ok(&["create", idx_s, "--dims", "4", "--metric", "cosine"]);
    let cases: Vec<Vec<String>> = vec![
        vec![
            "create".into(),
            idx_s.into(),
            "--dims".into(),
            "4".into(),
            "--metric".into(),
            "cosine".into(),
        ],
        vec![
            "info".into(),
            dir.path().join("missing").to_str().unwrap().into(),
        ],
        vec![
            "import".into(),
            idx_s.into(),
            dir.path().join("nope.fvecs").to_str().unwrap().into(),
        ],
        vec![
            "search".into(),
            idx_s.into(),
            "--query-file".into(),
            idx_s.into(),
        ],
    ];
    for args in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = chassis(&a);
        assert_eq!(out.status.code(), Some(1), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("chassis: error: "), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A file that is not an index.
    let junk = dir.path().join("junk.chassis");
    std::fs::write(&junk, vec![7u8; 300_000]).unwrap();
    let out = chassis(&["info", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Chassis index file"));
    // Wrong dimensions in an import.
    let f = dir.path().join("d.fvecs");
    write_fvecs(&f, &data(3, 5));
    let out = chassis(&["import", idx_s, f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("5 dims"));
    // Bad arguments: usage error, exit code 2.
    assert_eq!(
        chassis(&["create", idx_s, "--dims", "4", "--metric", "hamming"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(chassis(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn demo_builds_searches_and_reports() {
    let out = ok(&[
        "demo",
        "--n",
        "2000",
        "--dims",
        "16",
        "--queries",
        "50",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["recall_at_k"].as_f64().unwrap() >= 0.9, "{v}");
    assert!(v["qps"].as_f64().unwrap() > 0.0);
    assert!(v["build_seconds"].as_f64().unwrap() > 0.0);
    assert!(v["file_bytes"].as_u64().unwrap() >= 196_608);
    let text = ok(&["demo", "--n", "500", "--dims", "8", "--queries", "10"]);
    for word in ["recall@10", "queries/s", "build", "file"] {
        assert!(text.contains(word), "{word} missing from:\n{text}");
    }
}

#[test]
fn every_command_has_help_with_an_example() {
    for cmd in [
        "create", "import", "search", "info", "demo", "compact", "migrate",
    ] {
        let out = ok(&[cmd, "--help"]);
        assert!(out.contains("Example:"), "{cmd} --help lacks an example");
    }
}

#[test]
fn search_and_info_read_only_while_a_writer_holds_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.chassis");
    let p = path.to_str().unwrap();
    let rows = data(60, 8);
    let mut w = chassis::Index::create(&path, chassis::Options::new(8, chassis::Metric::L2Squared))
        .unwrap();
    for v in &rows[..50] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    for v in &rows[50..] {
        w.add(v).unwrap(); // unflushed: routed through, never returned
    }
    let q = dir.path().join("q.fvecs");
    write_fvecs(&q, &rows[48..52]);
    let qs = q.to_str().unwrap();
    let out = ok(&[
        "search",
        "--read-only",
        p,
        "--query-file",
        qs,
        "-k",
        "1",
        "--json",
    ]);
    let ids: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["ids"][0]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids[..2], [48, 49]);
    assert!(
        ids[2] < 50 && ids[3] < 50,
        "unflushed ids never returned: {ids:?}"
    );
    let info: serde_json::Value =
        serde_json::from_str(&ok(&["info", "--read-only", p, "--json"])).unwrap();
    assert_eq!(info["count"], 50);
    assert_eq!(info["routing_count"], 60);
    w.flush().unwrap();
    let out = ok(&[
        "search",
        "--read-only",
        p,
        "--query-file",
        qs,
        "-k",
        "1",
        "--json",
    ]);
    assert!(out.lines().nth(3).unwrap().contains("[51]"), "{out}");
    assert!(w.len() == 60);
}

#[test]
fn compact_and_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let p = path.to_str().unwrap();
    let rows = data(300, 8);
    let mut w = chassis::Index::create(
        &path,
        chassis::Options::new(8, chassis::Metric::L2Squared).m(8),
    )
    .unwrap();
    for v in &rows {
        w.add(v).unwrap();
    }
    for id in 0..200 {
        w.delete(id).unwrap();
    }
    w.flush().unwrap();
    // The writer holds the lock: compact must say so.
    let out = chassis(&["compact", p]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("locked"));
    drop(w);
    let out = ok(&["compact", p, "--m", "12"]);
    assert!(out.contains("100 live vectors of 300 slots"), "{out}");
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", p, "--json"])).unwrap();
    assert_eq!(
        (info["count"].as_u64(), info["m"].as_u64()),
        (Some(100), Some(12))
    );

    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../chassis/tests/fixtures/hnswlib/l2.bin");
    let dst = dir.path().join("m.chassis");
    let (b, d) = (bin.to_str().unwrap(), dst.to_str().unwrap());
    let out = ok(&["migrate", "hnswlib", b, d, "--metric", "l2"]);
    assert!(
        out.contains("590 vectors (10 deleted), 16 dims, M = 8"),
        "{out}"
    );
    // The destination exists now: a second migration refuses to overwrite it.
    let out = chassis(&["migrate", "hnswlib", b, d, "--metric", "l2"]);
    assert_eq!(out.status.code(), Some(1));
    let out = chassis(&["migrate", "faiss", b, d, "--metric", "l2"]);
    assert_eq!(out.status.code(), Some(2));
}
