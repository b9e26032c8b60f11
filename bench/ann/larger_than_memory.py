"""Larger than memory: one search process whose memory, page cache included, is capped at a
fraction of the Chassis file's size (a cgroup v1 memory limit), against the same search
without the cap.

    sudo bench/.venv/bin/python bench/ann/larger_than_memory.py            # 2,000,000 x 384
    sudo bench/.venv/bin/python bench/ann/larger_than_memory.py --n 200000 # a smoke run

Needs root (it makes /sys/fs/cgroup/memory/chassis-ltm and drops the file from the page
cache) and cgroup v1's memory controller. What it does:

1. data: N x 384 synthetic vectors (data.synthetic, intrinsic dimension 32, cosine), cached
   under bench/target/ann/data/synth-<N>-384/, and fresh queries from the same distribution:
   `--warm` for warming up and 1,000 per ef and repetition to measure, with the exact 10
   nearest of the measured ones;
2. build: each system's file from those vectors with the harness's parameters (M 16,
   ef_construction 200), 2 threads, kept under bench/target/ann/ltm/ for the next run;
3. for each system, two fresh processes, one after the other: "uncapped" (the machine's memory,
   the file read once into the page cache first) and "capped" (a cgroup whose
   memory.limit_in_bytes is `--fraction` of the first Chassis file in --systems, page cache
   included, the file evicted from the page cache before it starts). Each opens the file and
   warms up with the `--warm` queries at the largest ef (passes of 1,000, each pass's QPS and
   major faults a query reported: the hot set settling), then runs each ef of the sweep
   `--reps` times, one thread, one batch call per pass, every pass on its own 1,000 queries
   never searched before, so what a query reads beyond the hot set (the vectors it ranks
   exactly) comes from disk as it would for a stream of new queries, not from the cache an
   earlier pass of the same queries filled. The median QPS and the mean recall@10 are
   reported, with major page faults and the cgroup's peak usage. A process the kernel kills
   for memory is reported as such (hnswlib, FAISS and USearch read the whole index into
   memory by default; they can't open it under the cap: `faiss-mmap` and `usearch-i8-view`
   map their files instead, FAISS its vectors, USearch everything). Also reported: how much the process held locked in memory
   (VmLck: Chassis locks the bytes its walk reads, everything but the vectors, in a file too
   large for memory, within three quarters of the cap; docs/ARCHITECTURE.md "Larger than
   memory"). `--no-lock` runs the capped process as an unprivileged user would: without
   CAP_IPC_LOCK and with RLIMIT_MEMLOCK at 64 KiB, so the kernel refuses those locks.

The cgroup is set up by hand as:
    mkdir /sys/fs/cgroup/memory/chassis-ltm
    echo $((FILE_BYTES / 4)) > /sys/fs/cgroup/memory/chassis-ltm/memory.limit_in_bytes
    echo $PID > /sys/fs/cgroup/memory/chassis-ltm/cgroup.procs   # before the process opens
Results go to bench/target/ann/ltm/results-<N>-<fraction>.json and are printed.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data  # noqa: E402
from systems import SYSTEMS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "target" / "ann" / "ltm"
CGROUP = Path("/sys/fs/cgroup/memory/chassis-ltm")
DIMS = 384
INTRINSIC = 32
K = 10


def dataset(n):
    cache = data.CACHE / f"synth-{n}-{DIMS}"
    if (cache / "gt.npy").exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    print(f"== data: {n:,} x {DIMS} synthetic (intrinsic {INTRINSIC}), exact ground truth")
    base, queries = data.synthetic(n, DIMS, INTRINSIC, seed=DIMS + n)
    np.save(cache / "base.npy", base)
    np.save(cache / "queries.npy", queries)
    gt = data.exact_neighbors(base, queries, "cosine", k=K)
    np.save(cache / "gt.npy", gt)
    return cache


def fresh_queries(n, warm, measured):
    """`warm` + `measured` more queries from the data set's own distribution (its basis, drawn
    again from its seed; new draws from another), never searched before, with the exact 10
    nearest of the last `measured` (cached beside the data set)."""
    cache = data.CACHE / f"synth-{n}-{DIMS}"
    qpath, gpath = cache / f"fresh-{warm}-{measured}.npy", cache / f"fresh-gt-{warm}-{measured}.npy"
    if qpath.exists() and gpath.exists():
        return np.load(qpath), np.load(gpath)
    seed = DIMS + n
    basis, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIMS, INTRINSIC)))
    rng = np.random.default_rng(seed + 1)
    z = rng.normal(size=(warm + measured, INTRINSIC)) * np.linspace(1.0, 0.3, INTRINSIC)
    q = (z @ basis.T + 0.02 * rng.normal(size=(warm + measured, DIMS))).astype(np.float32)
    print(f"== data: {warm + measured:,} fresh queries, exact ground truth of {measured:,}")
    base = np.load(cache / "base.npy", mmap_mode="r")
    gt = data.exact_neighbors(base, q[warm:], "cosine", k=K)
    np.save(qpath, q)
    np.save(gpath, gt)
    return q, gt


def recall(ids, gt):
    hits = sum(len(set(map(int, r[:K])) & set(map(int, g[:K]))) for r, g in zip(ids, gt))
    return hits / (len(gt) * K)


def child(a):
    """One search process: prints one JSON line. Warm-up: `--warm` fresh queries at the largest
    ef, in passes of 1,000 (each pass's QPS and major faults reported, to show the hot set
    settling). Then for each ef, `--reps` passes, each over its own 1,000 fresh queries never
    searched before: the vectors a query ranks exactly are not cached for it by an earlier pass
    over the same queries, as they would be if the same queries were repeated."""
    efs = [int(e) for e in a.efs.split(",")]
    fresh, gt = fresh_queries(int(a.n), a.warm, len(efs) * a.reps * 1000)
    warm_q, measure_q = fresh[: a.warm], fresh[a.warm :]
    sysm = SYSTEMS[a.system]
    t0 = time.perf_counter()
    h = sysm.open(a.path, "cosine", DIMS)
    open_s = time.perf_counter() - t0

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_majflt

    warm_passes = []
    t_warm = time.perf_counter()
    for s in range(0, len(warm_q), 1000):
        f0, t0 = faults(), time.perf_counter()
        sysm.search(h, warm_q[s : s + 1000], K, max(efs))
        dt = time.perf_counter() - t0
        n = len(warm_q[s : s + 1000])
        warm_passes.append({"qps": n / dt, "faults_per_query": (faults() - f0) / n})
    warm_s = time.perf_counter() - t_warm
    rows = []
    at = 0
    for ef in efs:
        qps, hits, flt = [], [], []
        for _ in range(a.reps):
            q, g = measure_q[at : at + 1000], gt[at : at + 1000]
            at += 1000
            f0, t0 = faults(), time.perf_counter()
            ids = sysm.search(h, q, K, ef)
            qps.append(len(q) / (time.perf_counter() - t0))
            flt.append((faults() - f0) / len(q))
            hits.append(recall(ids, g))
        rows.append(
            {
                "ef": ef,
                "qps": float(np.median(qps)),
                "recall": float(np.mean(hits)),
                "faults_per_query": float(np.median(flt)),
            }
        )
    ru = resource.getrusage(resource.RUSAGE_SELF)
    status = Path("/proc/self/status").read_text()
    locked = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmLck:")), "0")
    print(
        json.dumps(
            {
                "open_s": open_s,
                "warmup_s": warm_s,
                "warmup_passes": warm_passes,
                "rows": rows,
                "major_faults": ru.ru_majflt,
                "max_rss_mib": ru.ru_maxrss / 1024,
                "locked_mib": int(locked) / 1024,
            }
        ),
        flush=True,
    )


def evict(path):
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    # Pages another process mapped may survive fadvise; drop every clean cached page.
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_child(a, system, path, cache, capped, limit):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--system",
        system,
        "--path",
        str(path),
        "--cache",
        str(cache),
        "--efs",
        a.efs,
        "--reps",
        str(a.reps),
        "--warm",
        str(a.warm),
        "--n",
        str(a.n),
    ]
    pre = None
    if capped:
        if not CGROUP.exists():
            CGROUP.mkdir()
        # Reset the peak and the limit; no swap on these machines, so memory.limit is all.
        (CGROUP / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (CGROUP / "memory.max_usage_in_bytes").write_text("0\n")
        (CGROUP / "memory.failcnt").write_text("0\n")

        def pre():
            (CGROUP / "cgroup.procs").write_text(f"{os.getpid()}\n")
            if a.no_lock:
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, 64 << 10))

        if a.no_lock:
            # Root may lock past RLIMIT_MEMLOCK (CAP_IPC_LOCK): drop the capability for good.
            cmd = ["setpriv", "--bounding-set", "-ipc_lock", "--inh-caps", "-ipc_lock", "--", *cmd]

        evict(path)
    else:
        warm(path)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, preexec_fn=pre, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = {
        "system": system,
        "capped": capped,
        "limit_bytes": limit if capped else None,
        "locks_allowed": not (capped and a.no_lock),
    }
    if capped:
        out["peak_bytes"] = int((CGROUP / "memory.max_usage_in_bytes").read_text())
        out["failcnt"] = int((CGROUP / "memory.failcnt").read_text())
    if p.returncode != 0:
        out["failed"] = (
            f"exit {p.returncode}" + (" (killed: out of memory)" if p.returncode == -9 else "")
        )
        out["stderr"] = p.stderr[-2000:]
        return out
    out.update(json.loads(p.stdout.strip().splitlines()[-1]))
    out["wall_s"] = wall
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--systems", default="chassis-int8,hnswlib")
    ap.add_argument("--efs", default="128,256,384,512,768")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--warm", type=int, default=8000, help="fresh warm-up queries before measuring"
    )
    ap.add_argument("--fraction", type=float, default=0.25, help="cap / Chassis file size")
    ap.add_argument("--threads", type=int, default=2, help="build threads")
    ap.add_argument(
        "--no-lock",
        action="store_true",
        help="capped process without CAP_IPC_LOCK, RLIMIT_MEMLOCK 64 KiB (locks refused)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if os.geteuid() != 0:
        raise SystemExit("larger_than_memory: needs root (a cgroup and drop_caches)")
    cache = dataset(a.n)
    fresh_queries(a.n, a.warm, len(a.efs.split(",")) * a.reps * 1000)
    OUT.mkdir(parents=True, exist_ok=True)
    systems = a.systems.split(",")
    paths = {}
    for s in systems:
        path = OUT / f"{s}-{a.n}.idx"
        paths[s] = path
        if not path.exists():
            base = np.load(cache / "base.npy", mmap_mode="r")
            print(f"== build {s} ({a.threads} threads)", flush=True)
            t0 = time.perf_counter()
            SYSTEMS[s].build(str(path), np.ascontiguousarray(base), "cosine", a.threads)
            print(f"   {time.perf_counter() - t0:.0f} s, {path.stat().st_size / 2**30:.2f} GiB")
            del base
    # The cap is a fraction of the first Chassis file in --systems (the file searched), for
    # every system of the run: peers get the same memory as Chassis.
    ref = next((paths[s] for s in systems if s.startswith("chassis")), paths[systems[0]])
    limit = int(ref.stat().st_size * a.fraction)
    results = []
    for s in systems:
        for capped in (False, True):
            print(f"== {s} {'capped' if capped else 'uncapped'}", flush=True)
            r = run_child(a, s, paths[s], cache, capped, limit)
            r["file_bytes"] = paths[s].stat().st_size
            results.append(r)
            if "failed" in r:
                print(f"   failed: {r['failed']}")
            else:
                settling = ", ".join(
                    f"{p['qps']:,.0f}/{p['faults_per_query']:.1f}" for p in r["warmup_passes"]
                )
                print(f"   warm-up passes (QPS/major faults a query): {settling}")
                for row in r["rows"]:
                    print(
                        f"   ef {row['ef']:4d}  recall {row['recall']:.3f}  QPS {row['qps']:,.0f}"
                        f"  major faults a query {row['faults_per_query']:.1f}"
                    )
                print(
                    f"   major faults {r['major_faults']:,}, warm-up {r['warmup_s']:.1f} s,"
                    f" locked {r.get('locked_mib', 0):,.0f} MiB"
                )
    meta = {
        "n": a.n,
        "dims": DIMS,
        "limit_bytes": limit,
        "fraction": a.fraction,
        "reference_file": str(ref.name),
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    tag = "-nolock" if a.no_lock else ""
    (OUT / f"results-{a.n}-{a.fraction}{tag}.json").write_text(json.dumps(meta, indent=1))
    print(f"cap: {limit / 2**30:.2f} GiB = {a.fraction} x {ref.name}")


if __name__ == "__main__":
    main()
