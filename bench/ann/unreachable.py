"""Vectors no search can reach, in Chassis's, hnswlib's and FAISS's graphs (hardening issue,
item 1), side by side in one run.

Builds each system on pypi-minilm (or its first --n vectors) with the harness's parameters
(M = 16, ef_construction = 200) on one thread and on two, and counts the vectors that no
layer-0 path from the entry point reaches: every search ends on layer 0, so such a vector is
never returned, whatever the query and ef. Chassis's count is what `chassis check --json`
reports for the file it flushed (the Python package and the CLI must be this code's:
`bench/ann/run` installs the package; `cargo build --release -p chassis-cli`).

    bench/.venv/bin/python bench/ann/unreachable.py [--n 100000] [--threads 1,2]

hnswlib's graph is read from its saved file (its level-0 block: a u16 count then maxM0 u32
ids per element); FAISS's from `index.hnsw.neighbors` and `offsets`.
"""

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data import load  # noqa: E402

M, EF_CONSTRUCTION = 16, 200


def unreachable(n, entry, neighbors_of):
    seen = np.zeros(n, dtype=bool)
    seen[entry] = True
    todo = deque([entry])
    while todo:
        for nb in neighbors_of(todo.popleft()):
            if not seen[nb]:
                seen[nb] = True
                todo.append(nb)
    return int(n - seen.sum())


def hnswlib_graph(path):
    b = Path(path).read_bytes()
    (_off0, _max, count, per_elem, _label_off, _data_off) = struct.unpack_from("<6Q", b, 0)
    _maxlevel, entry = struct.unpack_from("<iI", b, 48)
    _max_m, max_m0 = struct.unpack_from("<2Q", b, 56)
    level0 = np.frombuffer(b, dtype=np.uint8, count=count * per_elem, offset=96)
    level0 = level0.reshape(count, per_elem)
    sizes = level0[:, :2].copy().view(np.uint16)[:, 0].astype(np.int64)
    ids = level0[:, 4 : 4 + 4 * max_m0].copy().view(np.uint32)
    lists = [ids[i, : sizes[i]].tolist() for i in range(count)]
    return count, entry, lists.__getitem__


def build_hnswlib(base, threads, path):
    import hnswlib

    p = hnswlib.Index(space="cosine", dim=base.shape[1])
    p.init_index(max_elements=len(base), ef_construction=EF_CONSTRUCTION, M=M, random_seed=100)
    p.add_items(base, np.arange(len(base)), num_threads=threads)
    p.save_index(str(path))
    return hnswlib_graph(path)


ROOT = Path(__file__).resolve().parents[2]


def build_chassis(base, threads, path):
    import chassis

    ix = chassis.Index.create(path, dims=base.shape[1], metric="cosine", M=M,
                              ef_construction=EF_CONSTRUCTION)
    ix.add(base, threads=threads)
    ix.flush()
    ix.close()


def chassis_unreachable(path):
    cli = ROOT / "target" / "release" / "chassis"
    out = subprocess.run([str(cli), "check", "--json", str(path)], capture_output=True,
                         text=True)
    return json.loads(out.stdout)["unreachable"]


def build_faiss(base, threads):
    import faiss

    faiss.omp_set_num_threads(threads)
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    ix = faiss.IndexHNSWFlat(base.shape[1], M, faiss.METRIC_INNER_PRODUCT)
    ix.hnsw.efConstruction = EF_CONSTRUCTION
    ix.add(unit.astype(np.float32))
    h = ix.hnsw
    neighbors = faiss.vector_to_array(h.neighbors)
    offsets = faiss.vector_to_array(h.offsets)
    cum = faiss.vector_to_array(h.cum_nneighbor_per_level)
    lo, hi = int(cum[0]), int(cum[1])

    def of(i):
        row = neighbors[offsets[i] + lo : offsets[i] + hi]
        return row[row >= 0].tolist()

    return ix.ntotal, int(h.entry_point), of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    base, _, _, metric = load("pypi-minilm", limit=a.n)
    assert metric == "cosine"
    import chassis
    import faiss
    import hnswlib  # noqa: F401
    import importlib.metadata as md

    print(
        f"unreachable: {len(base)} x {base.shape[1]} cosine, M {M}, ef_construction "
        f"{EF_CONSTRUCTION}; chassis {chassis.__version__}, hnswlib {md.version('hnswlib')}, "
        f"faiss {faiss.__version__}"
    )
    print("system | threads | build s | unreachable")
    with tempfile.TemporaryDirectory() as tmp:
        for threads in [int(t) for t in a.threads.split(",")]:
            path = Path(tmp) / f"c{threads}.chassis"
            t = time.perf_counter()
            build_chassis(base, threads, path)
            built = time.perf_counter() - t
            print(f"chassis | {threads} | {built:.1f} | {chassis_unreachable(path)}", flush=True)
            t = time.perf_counter()
            n, entry, of = build_hnswlib(base, threads, Path(tmp) / "h.bin")
            built = time.perf_counter() - t
            print(f"hnswlib | {threads} | {built:.1f} | {unreachable(n, entry, of)}", flush=True)
            t = time.perf_counter()
            n, entry, of = build_faiss(base, threads)
            built = time.perf_counter() - t
            print(f"faiss | {threads} | {built:.1f} | {unreachable(n, entry, of)}", flush=True)


if __name__ == "__main__":
    main()
