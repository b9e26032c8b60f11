"""The ANN harness: Chassis, hnswlib, FAISS (IndexHNSWFlat) and USearch on the same data.

    bash bench/ann/run                        # every dataset, writes docs/PERFORMANCE.md
    bash bench/ann/run --datasets pypi-minilm --reps 5

For each dataset:
1. build: every system builds from the same vectors with M = 16, ef_construction = 200, once
   per build thread count, each in a fresh process (build time, peak RSS, file size logical and
   allocated);
2. cold: a fresh process per system evicts the file from the page cache (posix_fadvise), opens
   it and runs one pass of the queries at ef = 64 (open time, first-pass QPS, peak RSS); five
   times per system, the systems taking turns, and the median of each figure is reported;
3. search: every system's files are evicted again (so the search starts from the same page
   cache whichever phases ran before it), then one process opens every system's file; for
   each repetition (the first is a warm-up, then `--reps` counted ones) and each ef of the
   sweep, the systems take turns in a rotating order; each turn runs every query once as one
   single-threaded batch call (QPS) and once one call per query (p50 and p99 latency).
   Medians over repetitions are reported;
   Every worker process is pinned (sched_setaffinity): the cold and search processes to one
   core, the same for every system; a T-thread build to T cores, so a system that builds on
   every core it may use (chassisdb) builds on T like the others;
4. distance computations per query at each ef (FAISS and USearch report theirs; Chassis counts
   its own; hnswlib's are counted by count_hnswlib.cpp, compiled against hnswlib's headers).

Results go to bench/target/ann/results-<dataset>.json; report.py turns them into
docs/PERFORMANCE.md and the recall-QPS plot.
"""

import argparse
import json
import os
import gc
import subprocess
import sys
import statistics
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data  # noqa: E402
from systems import SYSTEMS  # noqa: E402

OUT = data.ROOT / "bench" / "target" / "ann"
EFS = [10, 16, 24, 32, 48, 64, 96, 128, 256, 512]
K = 10
# Fresh-process cold opens per system (the median is reported).
COLD_REPS = 5


def status_mb(field):
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MiB."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak():
    """Starts the peak RSS (VmHWM) over from the current RSS (Linux: clear_refs 5)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_mb("VmRSS")


def recall(found, gt):
    gt10 = gt[:, :K]
    hits = sum(len(set(f[:K].tolist()) & set(t.tolist())) for f, t in zip(found, gt10))
    return hits / (K * len(gt))


def index_path(dataset, system, threads, limit):
    tag = dataset if limit is None else f"{dataset}-{limit}"
    return OUT / "indexes" / tag / f"{system}-t{threads}.idx"


def file_sizes(paths):
    logical = sum(os.stat(p).st_size for p in paths)
    allocated = sum(os.stat(p).st_blocks * 512 for p in paths)
    return logical, allocated


# ---- workers (each runs in its own process) ---------------------------------------------


def pin(cpus):
    """Keeps this process (and every thread it starts) on `cpus`: the same one core for every
    system's search, T cores for a T-thread build."""
    os.sched_setaffinity(0, set(cpus))


def search_cpu():
    """The core every search runs on: the last one (the first takes most of the machine's
    interrupts), or CHASSIS_BENCH_CPU."""
    return int(os.environ.get("CHASSIS_BENCH_CPU", max(os.sched_getaffinity(0))))


def build_cpus(threads):
    """The cores a `threads`-thread build runs on: the search core and the ones below it."""
    top = search_cpu()
    return [(top - i) % os.cpu_count() for i in range(threads)]


def worker_build(a):
    pin(build_cpus(a.threads))
    base, _, _, metric = data.load(a.dataset, a.limit)
    sysm = SYSTEMS[a.system]
    path = Path(a.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    rss0 = reset_peak()
    t = time.perf_counter()
    sysm.build(path, base, metric, a.threads)
    build_s = time.perf_counter() - t
    logical, allocated = file_sizes(sysm.files(path))
    print(
        json.dumps(
            {
                "build_s": build_s,
                "peak_rss_mb": status_mb("VmHWM"),
                "rss_before_build_mb": rss0,
                "file_bytes": logical,
                "allocated_bytes": allocated,
            }
        )
    )


def worker_cold(a):
    pin([search_cpu()])
    _, queries, gt, metric = data.load(a.dataset, a.limit, need_base=False)
    sysm = SYSTEMS[a.system]
    path = Path(a.path)
    data.evict(sysm.files(path))
    rss0 = reset_peak()
    t = time.perf_counter()
    h = sysm.open(path, metric, queries.shape[1])
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    found = sysm.search(h, queries, K, 64)
    first = time.perf_counter() - t
    t = time.perf_counter()
    sysm.search(h, queries, K, 64)
    second = time.perf_counter() - t
    # A second handle on the same file, now in the page cache: open without disk reads.
    t = time.perf_counter()
    h2 = sysm.open(path, metric, queries.shape[1])
    open_warm_s = time.perf_counter() - t
    del h2
    print(
        json.dumps(
            {
                "open_ms": open_s * 1000,
                "open_warm_ms": open_warm_s * 1000,
                "first_pass_qps": len(queries) / first,
                "second_pass_qps": len(queries) / second,
                "recall_ef64": recall(found, gt),
                "peak_rss_mb": status_mb("VmHWM"),
                "rss_before_open_mb": rss0,
            }
        )
    )


def worker_search(a):
    pin([search_cpu()])
    _, queries, gt, metric = data.load(a.dataset, a.limit, need_base=False)
    names = a.systems.split(",")
    # Every run's search starts from the same page cache: each system's files evicted, as the
    # cold phase leaves them, then read back by the warm-up. A file mapped from the cache its
    # own build left (Chassis) otherwise runs at whatever page sizes the kernel gave the
    # build's writes; read back from disk, it gets huge pages (docs/performance/codes.md,
    # "Page-cache state").
    data.evict([f for n in names for f in SYSTEMS[n].files(Path(a.paths[n]))])
    handles = {}
    for n in names:
        handles[n] = SYSTEMS[n].open(Path(a.paths[n]), metric, queries.shape[1])
    efs = [int(e) for e in a.efs.split(",")]
    samples = {n: {e: {"qps": [], "p50_us": [], "p99_us": []} for e in efs} for n in names}
    recalls = {n: {} for n in names}
    for rep in range(a.reps + 1):  # rep 0 is the warm-up
        for ei, ef in enumerate(efs):
            order = names[(rep + ei) % len(names) :] + names[: (rep + ei) % len(names)]
            for n in order:
                s, h = SYSTEMS[n], handles[n]
                t = time.perf_counter()
                found = s.search(h, queries, K, ef)
                batch = time.perf_counter() - t
                lat = np.empty(len(queries))
                for i in range(len(queries)):
                    q = queries[i : i + 1]
                    t = time.perf_counter_ns()
                    s.search(h, q, K, ef)
                    lat[i] = (time.perf_counter_ns() - t) / 1000
                if rep == 0:
                    recalls[n][ef] = recall(found, gt)
                    continue
                samples[n][ef]["qps"].append(len(queries) / batch)
                samples[n][ef]["p50_us"].append(float(np.percentile(lat, 50)))
                samples[n][ef]["p99_us"].append(float(np.percentile(lat, 99)))
        print(f"  search repetition {rep}/{a.reps} done", file=sys.stderr, flush=True)
    out = {}
    for n in names:
        s, h = SYSTEMS[n], handles[n]
        rows = []
        for ef in efs:
            ds = s.distance_count(h, queries, K, ef) if s.distance_count else None
            m = samples[n][ef]
            rows.append(
                {
                    "ef": ef,
                    "recall": recalls[n][ef],
                    "qps": float(np.median(m["qps"])),
                    "qps_all": m["qps"],
                    "p50_us": float(np.median(m["p50_us"])),
                    "p99_us": float(np.median(m["p99_us"])),
                    "distances": ds,
                }
            )
        out[n] = rows
    print(json.dumps(out))


def worker_count_hnswlib(a):
    """Distance computations per query for hnswlib, from its own C++ search code."""
    _, queries, gt, metric = data.load(a.dataset, a.limit, need_base=False)
    exe = compile_counter()
    if exe is None:
        print(json.dumps(None))
        return
    qpath = OUT / "queries.f32"
    queries.astype(np.float32).tofile(qpath)
    space = {"cosine": "ip_normalized", "l2": "l2", "ip": "ip"}[metric]
    res = subprocess.run(
        [str(exe), a.path, str(qpath), str(queries.shape[1]), space, a.efs],
        check=True,
        capture_output=True,
        text=True,
    )
    print(json.dumps({int(k): v for k, v in json.loads(res.stdout).items()}))


HNSWLIB_SDIST_SHA256 = "cb6d037eedebb34a7134e7dc78966441dfd04c9cf5ee93911be911ced951c44c"


def compile_counter():
    """Builds count_hnswlib.cpp against the headers of the pinned hnswlib sdist."""
    exe = OUT / "count_hnswlib"
    if exe.exists():
        return exe
    src = OUT / "hnswlib-src"
    if not (src / "hnswlib" / "hnswalg.h").exists():
        import hashlib
        import io
        import re
        import tarfile
        import urllib.request

        page = urllib.request.urlopen("https://pypi.org/simple/hnswlib/", timeout=60).read().decode()
        url = re.search(r'href="([^"]*/hnswlib-0\.8\.0\.tar\.gz)#', page).group(1)
        blob = urllib.request.urlopen(url, timeout=120).read()
        if hashlib.sha256(blob).hexdigest() != HNSWLIB_SDIST_SHA256:
            raise SystemExit("hnswlib-0.8.0.tar.gz does not match its pinned sha256")
        with tarfile.open(fileobj=io.BytesIO(blob)) as t:
            for m in t.getmembers():
                if m.name.startswith("hnswlib-0.8.0/hnswlib/") and m.name.endswith(".h"):
                    (src / "hnswlib").mkdir(parents=True, exist_ok=True)
                    (src / "hnswlib" / Path(m.name).name).write_bytes(t.extractfile(m).read())
    cpp = Path(__file__).resolve().parent / "count_hnswlib.cpp"
    r = subprocess.run(
        ["g++", "-O3", "-march=native", "-std=c++17", f"-I{src}", str(cpp), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return None
    return exe


# ---- the driver ---------------------------------------------------------------------------


def run_worker(args):
    cmd = [sys.executable, __file__] + [str(a) for a in args]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise SystemExit(f"worker failed: {' '.join(cmd)}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    simd = [f for f in ["avx2", "fma", "avx512f"] if f" {f}" in flags]
    thp = "unknown"
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "simd": simd,
        "thp": thp,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join(data.DATASETS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--efs", default=",".join(map(str, EFS)))
    ap.add_argument("--build-threads", default="1,2",
                    help="thread counts to build with (a dataset=1,2;... list overrides per dataset)")
    ap.add_argument("--limit", type=int, help="use only the first N base vectors (quick runs)")
    ap.add_argument("--reuse", action="store_true", help="reuse indexes a previous run built")
    ap.add_argument("--phases", default="cold,search",
                    help="after building: cold, search or both (with --reuse, a phase left out "
                    "keeps the previous run's results)")
    a = ap.parse_args()
    per_ds = {}
    for part in a.build_threads.split(";"):
        if "=" in part:
            k, v = part.split("=")
            per_ds[k] = [int(x) for x in v.split(",")]
        else:
            per_ds["*"] = [int(x) for x in part.split(",")]
    names = a.systems.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    for ds in a.datasets.split(","):
        print(f"== {ds}", file=sys.stderr, flush=True)
        base, queries, _, metric = data.load(ds, a.limit)
        n, dims = base.shape
        del base
        threads = per_ds.get(ds, per_ds.get("*", [1, 2]))
        lim = [] if a.limit is None else ["--limit", a.limit]
        builds = {x: {} for x in names}
        for t in sorted(set(threads) | {1}):
            for x in names:
                parallel = SYSTEMS[x].parallel_build
                if (parallel and t not in threads) or (not parallel and t != 1):
                    continue  # a one-thread writer builds once, with one thread
                p = index_path(ds, x, t, a.limit)
                prev = OUT / f"build-{ds if a.limit is None else f'{ds}-{a.limit}'}-{x}-t{t}.json"
                if a.reuse and p.exists() and prev.exists():
                    builds[x][t] = json.loads(prev.read_text())
                    continue
                print(f"  build {x} with {t} thread(s)", file=sys.stderr, flush=True)
                r = run_worker(["build", "--dataset", ds, "--system", x, "--threads", t, "--path", p] + lim)
                prev.write_text(json.dumps(r))
                builds[x][t] = r
                print(f"    {r['build_s']:.1f} s", file=sys.stderr, flush=True)
        # Search the graph built with the fewest threads (a serial build where there is one).
        paths = {x: index_path(ds, x, min(builds[x]), a.limit) for x in names}
        tag = ds if a.limit is None else f"{ds}-{a.limit}"
        previous = OUT / f"results-{tag}.json"
        old = json.loads(previous.read_text()) if a.reuse and previous.exists() else None
        phases = a.phases.split(",")
        if "cold" in phases or old is None:
            # COLD_REPS fresh processes per system, the systems taking turns in a rotating
            # order; the median of each figure (one cold open varies by a few ms on a virtual
            # disk), with every open time kept.
            samples = {x: [] for x in names}
            for rep in range(COLD_REPS):
                for x in names[rep % len(names):] + names[:rep % len(names)]:
                    print(f"  cold open {x} ({rep + 1}/{COLD_REPS})", file=sys.stderr, flush=True)
                    samples[x].append(
                        run_worker(["cold", "--dataset", ds, "--system", x, "--path", paths[x]] + lim))
            cold = {}
            for x, rows in samples.items():
                cold[x] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                cold[x]["open_ms_all"] = [r["open_ms"] for r in rows]
        else:
            cold = old["cold"]
        if "search" not in phases and old is not None:
            search = old["search"]
        else:
            print("  search (interleaved)", file=sys.stderr, flush=True)
            search = run_worker(
                ["search", "--dataset", ds, "--systems", ",".join(names), "--reps", a.reps, "--efs", a.efs,
                 "--paths", json.dumps({x: str(p) for x, p in paths.items()})] + lim
            )
        if "hnswlib" in names and "search" in phases:
            counts = run_worker(["count-hnswlib", "--dataset", ds, "--path", paths["hnswlib"], "--efs", a.efs] + lim)
            if counts:
                for row in search["hnswlib"]:
                    row["distances"] = counts.get(str(row["ef"]), counts.get(row["ef"]))
        result = {
            "dataset": ds,
            "description": data.DATASETS[ds][0] if a.limit is None else f"first {a.limit:,} of {ds}",
            "n": n,
            "dims": dims,
            "queries": len(queries),
            "metric": metric,
            "k": K,
            "reps": a.reps,
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine(),
            "pinning": {
                "search_cpu": search_cpu(),
                "build_cpus": {str(t): build_cpus(t) for t in sorted(set(threads) | {1})},
            },
            "versions": {x: SYSTEMS[x].version() for x in names},
            "build": builds,
            "cold": cold,
            "search": search,
        }
        (OUT / f"results-{tag}.json").write_text(json.dumps(result, indent=1))
        print(f"  wrote {OUT / f'results-{tag}.json'}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("build", "cold", "search", "count-hnswlib"):
        w = argparse.ArgumentParser()
        w.add_argument("mode")
        w.add_argument("--dataset")
        w.add_argument("--system")
        w.add_argument("--systems")
        w.add_argument("--threads", type=int)
        w.add_argument("--path")
        w.add_argument("--paths", type=json.loads)
        w.add_argument("--reps", type=int)
        w.add_argument("--efs")
        w.add_argument("--limit", type=int)
        wa = w.parse_args()
        {"build": worker_build, "cold": worker_cold, "search": worker_search,
         "count-hnswlib": worker_count_hnswlib}[wa.mode](wa)
    else:
        main()
