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
        "create",
        "import",
        "search",
        "get",
        "delete",
        "export",
        "info",
        "check",
        "bench",
        "compact",
        "migrate",
        "demo",
        "backup",
        "user-version",
        "text-fields",
    ] {
        let out = ok(&[cmd, "--help"]);
        assert!(
            out.contains("Example:") || out.contains("Examples:"),
            "{cmd} --help lacks an example"
        );
        assert!(
            out.contains(&format!("chassis {cmd}")),
            "{cmd}: example uses the command"
        );
    }
}

#[test]
fn search_and_info_read_only_while_a_writer_holds_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.chassis");
    let p = path.to_str().unwrap();
    let rows = data(60, 8);
    let w = chassis::Index::create(&path, chassis::Options::new(8, chassis::Metric::L2Squared))
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
fn backup_while_a_writer_holds_the_file_then_incrementally() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.chassis");
    let copy = dir.path().join("copy.chassis");
    let (p, c) = (path.to_str().unwrap(), copy.to_str().unwrap());
    let rows = data(400, 8);
    let w = chassis::Index::create(&path, chassis::Options::new(8, chassis::Metric::L2Squared))
        .unwrap();
    for v in &rows[..300] {
        w.add(v).unwrap();
    }
    w.flush().unwrap();
    w.add(&rows[300]).unwrap(); // unflushed: not in the backup
    let first: serde_json::Value = serde_json::from_str(&ok(&["backup", p, c, "--json"])).unwrap();
    assert_eq!(first["full_copy"], true);
    assert_eq!(first["live"], 300);
    for v in &rows[301..] {
        w.add(v).unwrap();
    }
    w.delete(7).unwrap();
    w.flush().unwrap();
    let second: serde_json::Value = serde_json::from_str(&ok(&["backup", p, c, "--json"])).unwrap();
    assert_eq!(second["full_copy"], false);
    assert_eq!(second["live"], 399);
    assert!(
        second["bytes_shipped"].as_u64().unwrap() < second["committed_bytes"].as_u64().unwrap()
    );
    let text = ok(&["backup", p, c]);
    assert!(text.contains("already current"), "{text}");
    let check = ok(&["check", c]);
    assert!(check.contains("ok") || check.contains("OK"), "{check}");
    assert_eq!(
        chassis::IndexReader::open(&copy).unwrap().len().unwrap(),
        399
    );
    // The copy carries the source's identity; info shows both it and the user version.
    let src_info: serde_json::Value = serde_json::from_str(&ok(&["info", p, "--json"])).unwrap();
    let copy_info: serde_json::Value = serde_json::from_str(&ok(&["info", c, "--json"])).unwrap();
    assert_eq!(src_info["file_id"].as_str().map(str::len), Some(32));
    assert_eq!(src_info["file_id"], copy_info["file_id"]);
    assert_eq!(src_info["user_version"], 0);
    drop(w);
    // user-version: set (a writer's commit), then read back, also from the copy's next sync.
    assert_eq!(ok(&["user-version", p, "42"]).trim(), "42");
    assert_eq!(ok(&["user-version", p]).trim(), "42");
    ok(&["backup", p, c]);
    assert_eq!(ok(&["user-version", c]).trim(), "42");
    let text = ok(&["info", p]);
    assert!(text.contains("user version 42"), "{text}");
}

#[test]
fn compact_and_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let p = path.to_str().unwrap();
    let rows = data(300, 8);
    let w = chassis::Index::create(
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
    // Deleted vectors: the graph can't be kept as it is.
    let out = chassis(&["compact", p, "--keep-graph"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("200 of 300"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ok(&["compact", p, "--m", "12", "--threads", "2"]);
    assert!(out.contains("100 live vectors of 300 slots"), "{out}");
    let q = dir.path().join("q.fvecs");
    write_fvecs(&q, &rows[200..230]);
    let search = || {
        let q = q.to_str().unwrap();
        ok(&["search", p, "--query-file", q, "-k", "5", "--json"])
    };
    let before = search();
    let out = ok(&["compact", p, "--keep-graph"]);
    assert!(out.contains("100 live vectors of 100 slots"), "{out}");
    assert_eq!(search(), before, "the kept graph answers as before");
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

fn run_with_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_chassis"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn fails(args: &[&str], code: i32, needle: &str) {
    let out = chassis(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "chassis {args:?}: {err}");
    assert!(
        err.contains(needle),
        "chassis {args:?}: {err:?} lacks {needle:?}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn import_formats_ids_and_flushing_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let rows = data(40, 4);
    // JSON lines with ids.
    let jsonl: String = rows
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{{\"id\": {}, \"vector\": {:?}}}\n", 100 + i, r))
        .collect();
    std::fs::write(p("v.jsonl"), jsonl).unwrap();
    ok(&["create", &p("j.chassis"), "--dims", "4", "--metric", "l2"]);
    let out = ok(&["import", &p("j.chassis"), &p("v.jsonl")]);
    assert!(out.contains("imported 40 vectors (ids 100..=139)"), "{out}");
    let got = ok(&["get", &p("j.chassis"), "105", "--json"]);
    let v: serde_json::Value = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(v["vector"][0].as_f64().unwrap() as f32, rows[5][0]);
    // .bvecs (bytes become floats), with ids from a text file.
    let mut b = Vec::new();
    for i in 0..10u8 {
        b.extend(4i32.to_le_bytes());
        b.extend([i, 2 * i, 3, 4]);
    }
    std::fs::write(p("v.bvecs"), b).unwrap();
    let ids: String = (0..10).map(|i| format!("{}\n", 7000 + i)).collect();
    std::fs::write(p("ids.txt"), ids).unwrap();
    ok(&["create", &p("b.chassis"), "--dims", "4", "--metric", "l2"]);
    ok(&[
        "import",
        &p("b.chassis"),
        &p("v.bvecs"),
        "--ids",
        &p("ids.txt"),
    ]);
    assert_eq!(
        ok(&["get", &p("b.chassis"), "7003"]).trim(),
        "7003: 3,6,3,4"
    );
    // --flush-every commits in pieces: a duplicate id at vector 25 stops the import.
    write_npy(Path::new(&p("v.npy")), &rows);
    let dup: String = (0..40)
        .map(|i| format!("{}\n", if i == 25 { 3 } else { i }))
        .collect();
    std::fs::write(p("dup.txt"), dup).unwrap();
    ok(&["create", &p("f.chassis"), "--dims", "4", "--metric", "l2"]);
    let out = chassis(&[
        "import",
        &p("f.chassis"),
        &p("v.npy"),
        "--ids",
        &p("dup.txt"),
        "--flush-every",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let info: serde_json::Value =
        serde_json::from_str(&ok(&["info", &p("f.chassis"), "--json"])).unwrap();
    assert_eq!(info["count"], 20, "two pieces of 10 were committed");
    ok(&["create", &p("g.chassis"), "--dims", "4", "--metric", "l2"]);
    let out = chassis(&[
        "import",
        &p("g.chassis"),
        &p("v.npy"),
        "--ids",
        &p("dup.txt"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let info: serde_json::Value =
        serde_json::from_str(&ok(&["info", &p("g.chassis"), "--json"])).unwrap();
    assert_eq!(info["count"], 0, "one flush at the end: nothing committed");
    fails(
        &[
            "import",
            &p("g.chassis"),
            &p("v.npy"),
            "--ids",
            &p("ids.txt"),
        ],
        1,
        "10 ids for 40 vectors",
    );
    fails(
        &[
            "import",
            &p("g.chassis"),
            &p("v.jsonl"),
            "--ids",
            &p("ids.txt"),
        ],
        1,
        "don't also pass --ids",
    );
    // --threads: batches linked on two threads; every vector finds itself.
    let many = data(600, 8);
    write_npy(Path::new(&p("m.npy")), &many);
    ok(&["create", &p("t.chassis"), "--dims", "8", "--metric", "l2"]);
    let out = ok(&[
        "import",
        &p("t.chassis"),
        &p("m.npy"),
        "--threads",
        "2",
        "--batch",
        "250",
    ]);
    assert!(out.contains("imported 600 vectors (ids 0..=599)"), "{out}");
    let picks = [0usize, 249, 250, 511, 599];
    let rows: Vec<Vec<f32>> = picks.iter().map(|&i| many[i].clone()).collect();
    write_fvecs(Path::new(&p("q.fvecs")), &rows);
    let out = ok(&[
        "search",
        &p("t.chassis"),
        "--query-file",
        &p("q.fvecs"),
        "-k",
        "1",
        "--json",
    ]);
    for (line, want) in out.lines().zip(picks) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["ids"][0].as_u64(), Some(want as u64), "{line}");
    }
}

#[test]
fn search_get_delete_export_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let rows = data(200, 6);
    write_npy(Path::new(&p("v.npy")), &rows);
    ok(&[
        "create",
        &p("x.chassis"),
        "--dims",
        "6",
        "--metric",
        "l2",
        "--m",
        "8",
    ]);
    ok(&["import", &p("x.chassis"), &p("v.npy")]);
    // --vector, and JSON lines on stdin.
    let v: Vec<String> = rows[17].iter().map(|x| x.to_string()).collect();
    let out = ok(&[
        "search",
        &p("x.chassis"),
        "--vector",
        &v.join(","),
        "-k",
        "3",
    ]);
    assert!(
        out.contains("rank") && out.lines().nth(2).unwrap().contains(" 17 "),
        "{out}"
    );
    let input = format!("{:?}\n{{\"vector\": {:?}}}\n", rows[3], rows[4]);
    let out = run_with_stdin(&["search", &p("x.chassis"), "-k", "1", "--json"], &input);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().next().unwrap().contains("[3]")
            && text.lines().nth(1).unwrap().contains("[4]"),
        "{text}"
    );
    fails(&["search", &p("x.chassis"), "--vector", "1,2"], 1, "2 dims");
    fails(
        &["search", &p("x.chassis"), "--vector", "1,x,3,4,5,6"],
        1,
        "not a number",
    );
    fails(&["get", &p("x.chassis"), "999"], 1, "999");
    // delete: all or nothing; --no-flush commits nothing.
    fails(&["delete", &p("x.chassis"), "1", "999"], 1, "999");
    assert!(ok(&["get", &p("x.chassis"), "1"]).starts_with("1: "));
    std::fs::write(p("del.txt"), "5\n6\n").unwrap();
    let out = ok(&[
        "delete",
        &p("x.chassis"),
        "1",
        "2",
        "--ids-file",
        &p("del.txt"),
        "--no-flush",
    ]);
    assert!(out.contains("nothing was committed"));
    assert!(ok(&["get", &p("x.chassis"), "5"]).starts_with("5: "));
    let out = ok(&[
        "delete",
        &p("x.chassis"),
        "1",
        "2",
        "--ids-file",
        &p("del.txt"),
    ]);
    assert!(out.contains("deleted 4 ids; index holds 196"), "{out}");
    fails(&["get", &p("x.chassis"), "5"], 1, "5");
    // export to .npy and .fvecs, with ids; a reimport gives the same vectors.
    let out = ok(&["export", &p("x.chassis"), &p("out.npy")]);
    assert!(out.contains("exported 196 vectors"), "{out}");
    ok(&[
        "export",
        &p("x.chassis"),
        &p("out.fvecs"),
        "--ids-out",
        &p("ids2.npy"),
    ]);
    assert_eq!(
        std::fs::read(p("out.ids.npy")).unwrap(),
        std::fs::read(p("ids2.npy")).unwrap()
    );
    ok(&["create", &p("y.chassis"), "--dims", "6", "--metric", "l2"]);
    ok(&[
        "import",
        &p("y.chassis"),
        &p("out.fvecs"),
        "--ids",
        &p("out.ids.npy"),
    ]);
    for id in ["0", "3", "150", "199"] {
        assert_eq!(
            ok(&["get", &p("y.chassis"), id]),
            ok(&["get", &p("x.chassis"), id])
        );
    }
    fails(
        &["export", &p("x.chassis"), &p("out.csv")],
        1,
        ".npy or .fvecs",
    );
}

#[test]
fn check_reports_a_corrupted_index_and_bench_measures() {
    use chassis::format::{geometry::SegmentLayout, record};
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let rows = data(300, 8);
    write_fvecs(Path::new(&p("v.fvecs")), &rows);
    ok(&[
        "create",
        &p("c.chassis"),
        "--dims",
        "8",
        "--metric",
        "l2",
        "--m",
        "8",
    ]);
    ok(&["import", &p("c.chassis"), &p("v.fvecs")]);
    let out = ok(&["check", &p("c.chassis"), "--recall", "50"]);
    assert!(
        out.trim().ends_with("ok") && out.contains("recall@10 on 50 stored vectors"),
        "{out}"
    );
    let info: serde_json::Value =
        serde_json::from_str(&ok(&["info", &p("c.chassis"), "--json"])).unwrap();
    assert_eq!(info["header_a"]["valid"], true);
    assert_eq!(info["header_b"]["valid"], true);
    assert!(info["bytes_per_live_vector"].as_f64().unwrap() > 0.0);
    // bench, against a ground truth it is given and against brute force.
    let mut gt = Vec::new();
    for i in 0..20 {
        gt.extend(10i32.to_le_bytes());
        let mut d: Vec<(f32, i32)> = rows
            .iter()
            .enumerate()
            .map(|(j, r)| {
                (
                    r.iter().zip(&rows[i]).map(|(a, b)| (a - b) * (a - b)).sum(),
                    j as i32,
                )
            })
            .collect();
        d.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, j) in d.into_iter().take(10) {
            gt.extend(j.to_le_bytes());
        }
    }
    std::fs::write(p("gt.ivecs"), gt).unwrap();
    write_fvecs(Path::new(&p("q.fvecs")), &rows[..20]);
    let out = ok(&[
        "bench",
        &p("c.chassis"),
        "--queries",
        &p("q.fvecs"),
        "--groundtruth",
        &p("gt.ivecs"),
        "--ef",
        "16,64",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1]["recall"].as_f64().unwrap() >= 0.9, "{out}");
    let out = ok(&[
        "bench",
        &p("c.chassis"),
        "--queries",
        &p("q.fvecs"),
        "--ef",
        "64",
        "--threads",
        "2",
    ]);
    assert!(
        out.contains("recall@10") && out.contains("QPS 2 thr"),
        "{out}"
    );
    fails(
        &[
            "bench",
            &p("c.chassis"),
            "--queries",
            &p("q.fvecs"),
            "--ef",
            "0",
        ],
        1,
        "at least 1",
    );

    // Corrupt slot 5's first level-0 neighbor word on disk.
    let (segs, g, m) = {
        let ix = chassis::Index::open_read_only(p("c.chassis")).unwrap();
        let store = ix.store();
        let found = (
            store.region_offsets().0,
            store.geometry(),
            ix.info().unwrap().m as u32,
        );
        drop(store);
        found
    };
    let layout = SegmentLayout::new(g.segment_slots(0), 8, m);
    let at = segs[0]
        + layout.records_at
        + 5 * record::level0_record_bytes(m)
        + record::RECORD_NEIGHBORS_AT;
    let mut bytes = std::fs::read(p("c.chassis")).unwrap();
    bytes[at as usize..at as usize + 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    // And damage the older header copy's checksum (the current one stays readable).
    let older = if info["header_copy"] == "A" { 1 } else { 0 };
    bytes[65_536 * older + 232] ^= 0xff;
    std::fs::write(p("c.chassis"), &bytes).unwrap();
    let out = chassis(&["check", &p("c.chassis")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("slot 5: layer 0 neighbor 2147418112 is out of range"),
        "{text}"
    );
    let name = if older == 1 { "B" } else { "A" };
    assert!(
        text.contains(&format!("header copy {name} is invalid")),
        "{text}"
    );
    assert!(!text.contains("\nok"), "{text}");
    let out = chassis(&["check", &p("c.chassis"), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    // A file that is not an index at all: one problem line, exit 3.
    std::fs::write(p("junk.chassis"), vec![7u8; 300_000]).unwrap();
    let out = chassis(&["check", &p("junk.chassis")]);
    assert_eq!(out.status.code(), Some(3));
}

/// The golden corpus (crates/chassis/tests/golden/, written once by earlier releases) through
/// the command: info, get, search, check and export read each file as its `.json` says; delete
/// and compact on a copy keep its read and write versions.
#[test]
fn golden_files_through_the_command() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chassis/tests/golden");
    let sums = std::fs::read_to_string(golden.join("SHA256SUMS")).unwrap();
    let names: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_once("  ")?.1.strip_suffix(".chassis"))
        .collect();
    assert!(names.len() >= 15);
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        let file = golden.join(format!("{name}.chassis"));
        let f = file.to_str().unwrap();
        let expect: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(golden.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        let versions = (
            expect["read_version"].clone(),
            expect["write_version"].clone(),
        );
        let info: serde_json::Value = serde_json::from_str(&ok(&["info", f, "--json"])).unwrap();
        assert_eq!(
            (info["read_version"].clone(), info["write_version"].clone()),
            versions
        );
        assert_eq!(info["count"], expect["count"], "{name}");
        assert_eq!(info["dims"], expect["dims"], "{name}");
        assert_eq!(info["metric"], expect["metric"], "{name}");
        for g in expect["get"].as_array().unwrap() {
            let id = g["id"].to_string();
            let line: serde_json::Value =
                serde_json::from_str(&ok(&["get", f, &id, "--json"])).unwrap();
            let got: Vec<u32> = line["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x.as_f64().unwrap() as f32).to_bits())
                .collect();
            let want: Vec<u32> = g["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x.as_f64().unwrap() as f32).to_bits())
                .collect();
            assert_eq!(got, want, "{name}: get {id}");
            if let Some(m) = g.get("metadata") {
                assert_eq!(&line["metadata"], m, "{name}: metadata of {id}");
            }
        }
        let (k, ef) = (expect["k"].to_string(), expect["ef"].to_string());
        for q in expect["queries"].as_array().unwrap() {
            let v: Vec<String> = q["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x.as_f64().unwrap() as f32).to_string())
                .collect();
            let out = ok(&[
                "search",
                f,
                "--vector",
                &v.join(","),
                "-k",
                &k,
                "--ef",
                &ef,
                "--json",
            ]);
            let hits: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(hits["ids"], q["ids"], "{name}: search");
        }
        for q in expect
            .get("filtered")
            .and_then(|f| f.as_array())
            .into_iter()
            .flatten()
        {
            let v: Vec<String> = q["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x.as_f64().unwrap() as f32).to_string())
                .collect();
            let filter = q["filter"].as_str().unwrap();
            let out = ok(&[
                "search",
                f,
                "--vector",
                &v.join(","),
                "-k",
                &k,
                "--ef",
                &ef,
                "--where",
                filter,
                "--json",
            ]);
            let hits: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(hits["ids"], q["ids"], "{name}: search --where {filter}");
        }
        // check: nothing wrong, or only vectors the writing release left unreachable (see
        // tests/golden.rs in the library).
        let out = chassis(&["check", f]);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            Some(3) => assert!(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .all(|l| l.contains("unreachable") || l.contains("problem(s) found")),
                "{name}: {text}"
            ),
            c => panic!("{name}: check exited {c:?}: {text}"),
        }
        let npy = dir.path().join(format!("{name}.npy"));
        ok(&["export", f, npy.to_str().unwrap()]);
        let bytes = std::fs::read(&npy).unwrap();
        let count = expect["count"].as_u64().unwrap() as usize;
        let dims = expect["dims"].as_u64().unwrap() as usize;
        assert!(bytes.len() >= 4 * count * dims, "{name}: export");

        // Writes on a copy keep the versions.
        let copy = dir.path().join(format!("{name}.chassis"));
        std::fs::copy(&file, &copy).unwrap();
        let c = copy.to_str().unwrap();
        if let Some(id) = expect["ids"].as_array().unwrap().first() {
            ok(&["delete", c, &id.to_string()]);
        }
        ok(&["compact", c, "--threads", "1"]);
        let info: serde_json::Value = serde_json::from_str(&ok(&["info", c, "--json"])).unwrap();
        assert_eq!(
            (info["read_version"].clone(), info["write_version"].clone()),
            versions
        );
        assert_eq!(
            info["count"].as_u64().unwrap() as usize,
            count.saturating_sub(1),
            "{name}"
        );
    }
}

#[test]
fn codes_are_chosen_at_create_and_by_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let idx = dir.path().join("c.chassis");
    let idx_s = idx.to_str().unwrap();
    let base = data(1_500, 16);
    let npy = dir.path().join("base.npy");
    write_npy(&npy, &base);
    ok(&[
        "create", idx_s, "--dims", "16", "--metric", "l2", "--codes", "int8",
    ]);
    ok(&["import", idx_s, npy.to_str().unwrap()]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", idx_s, "--json"])).unwrap();
    assert_eq!(info["codes"], "int8");
    assert_eq!(info["codes_trained"], true);
    assert_eq!(info["write_version"], 6);
    assert!(ok(&["info", idx_s]).contains("codes:         int8, trained"));
    let q = dir.path().join("q.fvecs");
    write_fvecs(&q, &[base[10].clone()]);
    let out = ok(&[
        "search",
        idx_s,
        "--query-file",
        q.to_str().unwrap(),
        "-k",
        "3",
        "--json",
    ]);
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(line["ids"][0], 10);
    assert_eq!(line["distances"][0], 0.0, "exact distances, not the code's");
    assert!(ok(&["check", idx_s]).contains("ok"));
    ok(&["compact", idx_s, "--codes", "int4"]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", idx_s, "--json"])).unwrap();
    assert_eq!(
        (info["codes"].as_str(), info["write_version"].as_u64()),
        (Some("int4"), Some(7))
    );
    let out = ok(&[
        "search",
        idx_s,
        "--query-file",
        q.to_str().unwrap(),
        "-k",
        "3",
        "--json",
    ]);
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        (line["ids"][0].as_u64(), line["distances"][0].as_f64()),
        (Some(10), Some(0.0))
    );
    assert!(ok(&["check", idx_s]).contains("ok"));
    ok(&["compact", idx_s, "--codes", "none"]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", idx_s, "--json"])).unwrap();
    assert_eq!(
        (info["codes"].as_str(), info["write_version"].as_u64()),
        (Some("none"), Some(4))
    );
    let out = chassis(&[
        "create",
        &format!("{idx_s}2"),
        "--dims",
        "4",
        "--metric",
        "l2",
        "--codes",
        "pq",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown codes 'pq'"));
}

/// `--precision f16`: a half-precision file (format 5) that imports, searches each stored
/// vector as its own nearest, says so in `info`, and compacts back to f32.
#[test]
fn half_precision_files_from_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h.chassis");
    let ps = p.to_str().unwrap();
    let base = data(200, 12);
    let fvecs = dir.path().join("base.fvecs");
    write_fvecs(&fvecs, &base);
    ok(&[
        "create",
        ps,
        "--dims",
        "12",
        "--metric",
        "l2",
        "--precision",
        "f16",
    ]);
    ok(&["import", ps, fvecs.to_str().unwrap()]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", ps, "--json"])).unwrap();
    assert_eq!(info["precision"], "f16");
    assert_eq!(info["read_version"], 5);
    let q = dir.path().join("q.fvecs");
    write_fvecs(&q, &[base[17].clone()]);
    let out = ok(&[
        "search",
        ps,
        "--query-file",
        q.to_str().unwrap(),
        "-k",
        "1",
        "--json",
    ]);
    let hit: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(hit["ids"][0], 17, "{out}");
    fails(
        &[
            "create",
            &format!("{ps}.x"),
            "--dims",
            "4",
            "--metric",
            "l2",
            "--format",
            "3",
            "--precision",
            "f16",
        ],
        1,
        "format 5",
    );
    ok(&["compact", ps, "--precision", "f32"]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", ps, "--json"])).unwrap();
    assert_eq!(
        (info["precision"].as_str(), info["read_version"].as_u64()),
        (Some("f32"), Some(6))
    );
    assert!(ok(&["check", ps]).contains("ok"));
    // --precision without --format keeps a layout that already stores that precision.
    ok(&["compact", ps, "--format", "3"]);
    ok(&["compact", ps, "--precision", "f32"]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", ps, "--json"])).unwrap();
    assert_eq!(
        (info["precision"].as_str(), info["read_version"].as_u64()),
        (Some("f32"), Some(3))
    );
}

#[test]
fn text_and_hybrid_search_from_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.chassis");
    let ps = p.to_str().unwrap();
    ok(&[
        "create",
        ps,
        "--dims",
        "4",
        "--metric",
        "l2",
        "--text-field",
        "text",
        "--text-field",
        "title:stem,stop_words",
    ]);
    assert_eq!(
        ok(&["text-fields", ps]).trim(),
        "text title:stem,stop_words"
    );
    let texts = [
        "fast vector search in one file",
        "a crash safe embedded database",
        "parsers for json and yaml",
        "vector database with hybrid search",
    ];
    let mut jsonl = String::new();
    for (i, t) in texts.iter().enumerate() {
        let v = [i as f32, 1.0, 0.5, -(i as f32)];
        jsonl.push_str(&format!(
            "{{\"id\": {}, \"vector\": {:?}, \"metadata\": {{\"text\": \"{t}\", \"title\": \"Parsing {i}\"}}}}\n",
            100 + i,
            v
        ));
    }
    let f = dir.path().join("docs.jsonl");
    std::fs::write(&f, jsonl).unwrap();
    ok(&["import", ps, f.to_str().unwrap()]);
    // BM25 alone.
    let out = ok(&["search", ps, "--text", "vector search", "-k", "3", "--json"]);
    let hit: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let ids: Vec<u64> = serde_json::from_value(hit["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 2, "{out}");
    assert!(ids.contains(&100) && ids.contains(&103), "{out}");
    assert!(hit["scores"][0].as_f64().unwrap() > 0.0);
    // The stemmed field: "parsed" finds every "Parsing" title.
    let out = ok(&["search", ps, "--text", "parsed", "-k", "10", "--json"]);
    let hit: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(hit["ids"].as_array().unwrap().len(), 4, "{out}");
    // Several texts from a file, with a filter.
    let tf = dir.path().join("q.txt");
    std::fs::write(&tf, "database\njson\n").unwrap();
    let out = ok(&["search", ps, "--text-file", tf.to_str().unwrap(), "--json"]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["ids"][0], 102);
    // Hybrid: a vector and a text; the table and the JSON.
    let out = ok(&[
        "search",
        ps,
        "--vector",
        "3,1,0.5,-3",
        "--text",
        "vector search",
        "-k",
        "2",
    ]);
    assert!(out.contains("vector rank") && out.contains("103"), "{out}");
    let out = ok(&[
        "search",
        ps,
        "--vector",
        "3,1,0.5,-3",
        "--text",
        "vector search",
        "-k",
        "2",
        "--fusion",
        "relative_score",
        "--weights",
        "0.5,1",
        "--json",
    ]);
    let hit: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(hit["ids"][0], 103, "{out}");
    assert_eq!(hit["vector_ranks"][0], 1);
    fails(
        &["search", ps, "--text", "x", "--fusion", "max"],
        1,
        "--fusion",
    );
    // Dropping and setting fields.
    ok(&["text-fields", ps, "--none"]);
    assert_eq!(ok(&["text-fields", ps]).trim(), "none");
    fails(
        &["search", ps, "--text", "vector"],
        1,
        "no full-text fields",
    );
    ok(&["text-fields", ps, "text"]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", ps, "--json"])).unwrap();
    assert_eq!(info["text_fields"][0], "text");
    assert_eq!(info["write_version"], 9);
    assert!(ok(&["check", ps]).contains("ok"));
}
