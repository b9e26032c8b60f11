//! Online backup and incremental sync (docs/SCALING.md, issue goals: catching up 512 MiB of
//! new data in at most 10 s; a sync with nothing new in at most 50 ms on a 1 GB file).
//!
//! Builds a source file of about `--gb` GiB (synthetic `--dims`-d vectors, M = `--m`), then:
//! 1. a full backup into a new file, beside a plain `std::fs::copy` of the same file (the
//!    naive copy: not consistent while a writer works, shown for scale);
//! 2. `--rounds` backups with nothing new (median), from the writer's `Index` and from an
//!    `IndexReader`;
//! 3. adds `--catch-up-mib` MiB of new vectors (and deletes 1%), flushes, and times the
//!    incremental backup that brings the destination up to date, with the bytes it shipped
//!    beside the bytes of data added; then the same catch-up as a full copy into a new file.
//!
//! Page cache warm throughout (both files fit in memory here); the destination is fsynced by
//! every backup, as it must be.
//!
//! `cargo run --release --bin sync [-- --gb 1 --dims 768 --catch-up-mib 512 --rounds 5]`

use std::time::Instant;

use chassis::{BackupReport, Index, IndexReader, Metric, Options};
use chassis_bench::{median, synthetic};

struct Args {
    gb: f64,
    dims: usize,
    m: usize,
    catch_up_mib: f64,
    rounds: usize,
    dir: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        gb: 1.0,
        dims: 768,
        m: 8,
        catch_up_mib: 512.0,
        rounds: 5,
        dir: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        match v[i].as_str() {
            "--dir" => a.dir = Some(v[i + 1].clone()),
            key => {
                let n: f64 = v[i + 1].parse().expect("a number");
                match key {
                    "--gb" => a.gb = n,
                    "--dims" => a.dims = n as usize,
                    "--m" => a.m = n as usize,
                    "--catch-up-mib" => a.catch_up_mib = n,
                    "--rounds" => a.rounds = n as usize,
                    other => panic!("unknown argument {other}"),
                }
            }
        }
        i += 2;
    }
    a
}

fn add_rows(ix: &Index, n: usize, dims: usize, seed: u64) {
    let step = 20_000;
    let mut done = 0;
    while done < n {
        let rows = step.min(n - done);
        let v = synthetic(rows, dims, seed + done as u64);
        ix.add_batch(&v.data, 2).expect("add");
        done += rows;
    }
    ix.flush().expect("flush");
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn line(what: &str, r: &BackupReport, secs: f64) {
    println!(
        "{what:<44} {:>9.1} ms  shipped {:>8.1} MiB  compared {:>7.1} MiB  {}",
        secs * 1e3,
        mib(r.sync.bytes_shipped),
        mib(r.sync.bytes_compared),
        if r.sync.unchanged {
            "unchanged"
        } else if r.full_copy {
            "full copy"
        } else {
            "incremental"
        }
    );
}

fn main() {
    let a = args();
    let base = a
        .dir
        .clone()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir_buf = base.join(format!("chassis-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir_buf).expect("temp dir");
    let dir = dir_buf.as_path();
    let src = dir.join("src.chassis");
    let slot = chassis::format::geometry::SegmentLayout::slot_bytes(a.dims as u32, a.m as u32);
    let n0 = ((a.gb * (1u64 << 30) as f64) / slot as f64) as usize;
    let n1 = ((a.catch_up_mib * (1u64 << 20) as f64) / slot as f64) as usize;
    println!(
        "sync bench: {} vectors of {} dims (M = {}, {} bytes a slot), then {} more",
        n0, a.dims, a.m, slot, n1
    );
    let ix = Index::create(
        &src,
        Options::new(a.dims, Metric::L2Squared)
            .m(a.m)
            .ef_construction(32),
    )
    .expect("create");
    let (_, build) = timed(|| add_rows(&ix, n0, a.dims, 1));
    let file_bytes = std::fs::metadata(&src).expect("stat").len();
    println!(
        "source: {:.2} GiB on disk, built in {:.0} s",
        file_bytes as f64 / (1u64 << 30) as f64,
        build
    );

    let dst = dir.join("dst.chassis");
    let (r, secs) = timed(|| ix.backup(&dst).expect("backup"));
    line("full backup (Index::backup)", &r, secs);
    let plain = dir.join("plain-copy.chassis");
    let ((), cp) = timed(|| {
        std::fs::copy(&src, &plain).expect("copy");
        std::fs::File::open(&plain)
            .and_then(|f| f.sync_all())
            .expect("fsync");
    });
    println!(
        "{:<44} {:>9.1} ms  (std::fs::copy + fsync of the whole file: {:.1} MiB)",
        "plain file copy, for scale",
        cp * 1e3,
        mib(file_bytes)
    );
    std::fs::remove_file(&plain).ok();

    let reader = IndexReader::open(&src).expect("reader");
    let mut noop_writer = Vec::new();
    let mut noop_reader = Vec::new();
    let mut last = None;
    for _ in 0..a.rounds {
        let (r, s) = timed(|| ix.backup(&dst).expect("backup"));
        assert!(r.sync.unchanged);
        noop_writer.push(s);
        let (r, s) = timed(|| reader.backup(&dst).expect("backup"));
        assert!(r.sync.unchanged);
        noop_reader.push(s);
        last = Some(r);
    }
    let noop = median(noop_writer.clone()).max(median(noop_reader.clone()));
    if let Some(r) = &last {
        line(
            "nothing new (Index::backup, median)",
            r,
            median(noop_writer),
        );
        line(
            "nothing new (IndexReader::backup, median)",
            r,
            median(noop_reader),
        );
    }

    let before = ix.info().expect("info").committed_count;
    let (_, add_secs) = timed(|| {
        add_rows(&ix, n1, a.dims, 99);
        let ids: Vec<u64> = (0..before).step_by(100).collect();
        ix.delete_many(&ids).expect("delete");
        ix.flush().expect("flush");
    });
    let added_vectors = n1 as u64 * 4 * a.dims as u64;
    let (r, catch_up) = timed(|| ix.backup(&dst).expect("backup"));
    assert!(!r.full_copy);
    line("catch-up after the adds (incremental)", &r, catch_up);
    println!(
        "  data added: {} vectors = {:.1} MiB of vectors, {:.1} MiB of slots (added in {:.0} s); \
         shipped {:.2}x the slots added",
        n1,
        mib(added_vectors),
        mib(n1 as u64 * slot),
        add_secs,
        r.sync.bytes_shipped as f64 / (n1 as u64 * slot) as f64
    );
    let fresh = dir.join("fresh.chassis");
    let (rf, full) = timed(|| ix.backup(&fresh).expect("backup"));
    line("the same state as a full copy", &rf, full);
    println!();
    println!(
        "goal: catch-up of {:.0} MiB <= 10 s: {:.2} s {}",
        a.catch_up_mib,
        catch_up,
        if catch_up <= 10.0 { "PASS" } else { "MISS" }
    );
    println!(
        "goal: nothing new on a {:.2} GiB file <= 50 ms: {:.1} ms {}",
        file_bytes as f64 / (1u64 << 30) as f64,
        noop * 1e3,
        if noop <= 0.050 { "PASS" } else { "MISS" }
    );
    println!(
        "incremental catch-up vs full copy of the same state: {:.2}x the time, {:.2}x the bytes",
        catch_up / full,
        r.sync.bytes_shipped as f64 / rf.sync.bytes_shipped as f64
    );
    drop(reader);
    drop(ix);
    std::fs::remove_dir_all(dir).ok();
}
