"""chassis.ray on a local Ray cluster (docs/SCALING.md; issue goals: fan-out overhead <= 5 ms
p50 at S = 4, i.e. a query's latency minus its slowest shard's own search time; building
S = 2 shards on 2 workers >= 1.6x faster than one file of the same data).

1. Fan-out: pypi-minilm's 100,000 rows in a collection of 4 shards (built locally), served
   by chassis.ray.ServedCollection with one replica per shard on a two-node local cluster
   (ray.cluster_utils.Cluster, shared storage); the 1,000 held-out queries one at a time
   (k = 10, ef = 64), after 100 warm-up queries. Per query: the handle's wall time, and the
   slowest shard's own search time (measured inside its actor); the overhead is the
   difference. Beside it: the same queries on the local chassis.Collection (shards searched
   on threads) and on one replica shard's own search.
2. Build: the first --build-rows rows, as one file on one thread, as one file on two threads,
   and with chassis.ray.build as 2 shards in 2 Ray tasks of one CPU each (the cluster has 2
   CPUs; worker processes started by a warm-up task first). --rounds rounds, medians.

Run with a Python that has chassis[ray] (scripts/test's target/py-venv does):
  target/py-venv/bin/python bench/ray/serve_and_build.py [--build-rows 30000 --rounds 3]
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
from ray.cluster_utils import Cluster

import chassis
import chassis.ray as cray

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "pypi-minilm"


def fvecs(path):
    raw = np.fromfile(path, dtype=np.int32)
    d = raw[0]
    return raw.reshape(-1, d + 1)[:, 1:].view(np.float32).copy()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def fan_out(base, queries, work):
    path = work / "c4"
    c = chassis.Collection.create(path, dims=base.shape[1], metric="cosine", shards=4)
    t = time.time()
    c.add(base)
    c.flush()
    print(f"collection of 4 shards built locally in {time.time() - t:.0f} s")
    c.close()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1}})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    cluster.wait_for_nodes()
    served = cray.ServedCollection.start(path, replicas=1, writer_resources={"head": 0.01})
    local = chassis.Collection.open(path, read_only=True)
    for q in queries[:100]:
        served.search(q, k=10, ef=64)
        local.search(q, k=10, ef=64)
    wall, slowest, overhead, local_lat = [], [], [], []
    for q in queries:
        t = time.perf_counter()
        served.search(q, k=10, ef=64)
        w = time.perf_counter() - t
        s = max(served.last_shard_seconds)
        wall.append(w * 1e3)
        slowest.append(s * 1e3)
        overhead.append((w - s) * 1e3)
        t = time.perf_counter()
        local.search(q, k=10, ef=64)
        local_lat.append((time.perf_counter() - t) * 1e3)
    print("\nfan-out at S = 4, one replica per shard, 2-node local cluster (ms)")
    print(f"{'':34} {'p50':>8} {'p99':>8}")
    for name, v in [
        ("served query (wall)", wall),
        ("slowest shard's own search", slowest),
        ("fan-out overhead (wall - slowest)", overhead),
        ("local Collection (shard threads)", local_lat),
    ]:
        print(f"{name:34} {pct(v, 50):8.3f} {pct(v, 99):8.3f}")
    p50 = pct(overhead, 50)
    print(f"goal: fan-out overhead p50 <= 5 ms: {p50:.2f} ms {'PASS' if p50 <= 5 else 'MISS'}")
    served.shutdown()
    local.close()
    ray.shutdown()
    cluster.shutdown()


def build(base, rows, rounds, work):
    data = base[:rows]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")

    @ray.remote(num_cpus=1)
    def warm():
        import chassis  # noqa: F401

        return os.getpid()

    ray.get([warm.remote() for _ in range(4)])
    times = {"one file, 1 thread": [], "one file, 2 threads": [], "chassis.ray.build S=2": []}
    for r in range(rounds):
        for name in times:
            target = work / f"b{r}-{len(times[name])}-{abs(hash(name))}"
            t = time.perf_counter()
            if name.startswith("one file"):
                ix = chassis.Index.create(target, dims=data.shape[1], metric="cosine")
                ix.add(data, threads=1 if "1 thread" in name else 2)
                ix.flush()
                ix.close()
            else:
                cray.build(target, data, shards=2, metric="cosine", num_cpus=1).close()
            times[name].append(time.perf_counter() - t)
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()
    print(f"\nbuild of {rows} rows x {data.shape[1]} (M = 16, ef_construction = 200), "
          f"median of {rounds} rounds, 2 CPUs")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:28} {v:8.1f} s")
    one, two, rb = med["one file, 1 thread"], med["one file, 2 threads"], med["chassis.ray.build S=2"]
    print(f"ray build vs one file on one thread: {one / rb:.2f}x; vs one file on two threads: "
          f"{two / rb:.2f}x")
    print(f"goal: S = 2 on 2 workers >= 1.6x one file (one worker): {one / rb:.2f}x "
          f"{'PASS' if one / rb >= 1.6 else 'MISS'}")
    ray.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-rows", type=int, default=30000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", choices=["fan-out", "build"])
    a = ap.parse_args()
    base = fvecs(DATA / "pypi-minilm_base.fvecs")
    queries = fvecs(DATA / "pypi-minilm_query.fvecs")
    print(f"chassis {chassis.__version__}, ray {ray.__version__}, pypi-minilm {base.shape}")
    work = Path(tempfile.mkdtemp(prefix="chassis-ray-bench-"))
    try:
        if a.skip != "fan-out":
            fan_out(base, queries, work)
        if a.skip != "build":
            build(base, a.build_rows, a.rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
