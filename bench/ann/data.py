"""The harness's datasets: the shared pypi-minilm set and two deterministic synthetic sets.

Each dataset is (base, queries, ground truth of the 100 nearest, metric). Synthetic sets and
their ground truth are computed once and cached under bench/target/ann/data/.

Synthetic data is made hard on purpose: easy clusters need only a few hundred distance
computations per query and flatter every system. Here each vector is a point of a Gaussian
with a low intrinsic dimension (`intrinsic`), rotated into the full space, plus a little
isotropic noise, so neighbours are many and close together, as in real embeddings.
"""

import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "pypi-minilm"
CACHE = ROOT / "bench" / "target" / "ann" / "data"


def evict(paths):
    """Drops `paths` from the page cache, so the next reads come from the disk as after a
    reboot (and a file-backed index is mapped as its readers usually find it: on Linux 6.18
    with ext4, read back with MADV_HUGEPAGE largely in 2 MiB pages, where the pages its writer
    left are partly 4 KiB ones)."""
    # Write back everything first, system-wide: a cold read queued behind another system's
    # freshly saved file would measure the disk's write backlog, not the open.
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    dims = raw[0]
    rows = raw.reshape(-1, dims + 1)
    return rows[:, 1:].view(dtype).copy()


def exact_neighbors(base, queries, metric, k=100, chunk=65536):
    """The exact k nearest of every query (float32 scores, then float64 re-ranking)."""
    q = queries.astype(np.float32)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    cand = 2 * k
    best_d = np.full((len(q), 0), np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    for start in range(0, len(base), chunk):
        b = base[start : start + chunk].astype(np.float32)
        if metric == "l2":
            d = (b * b).sum(1)[None, :] - 2 * q @ b.T
        elif metric == "cosine":
            d = -(q @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T)
        else:
            d = -(q @ b.T)
        d = np.concatenate([best_d, d], axis=1)
        i = np.concatenate([best_i, np.arange(start, start + len(b))[None, :].repeat(len(q), 0)], 1)
        top = np.argpartition(d, min(cand, d.shape[1] - 1), axis=1)[:, :cand]
        best_d = np.take_along_axis(d, top, 1)
        best_i = np.take_along_axis(i, top, 1)
    out = np.zeros((len(q), k), dtype=np.int32)
    for r in range(len(q)):
        ids = best_i[r]
        v = base[ids].astype(np.float64)
        qq = q[r].astype(np.float64)
        if metric == "l2":
            d = ((v - qq) ** 2).sum(1)
        elif metric == "cosine":
            d = -(v @ qq) / np.linalg.norm(v, axis=1)
        else:
            d = -(v @ qq)
        out[r] = ids[np.argsort(d, kind="stable")[:k]]
    return out


def synthetic(n, dims, intrinsic, seed, queries=1000):
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(dims, intrinsic)))
    scales = np.linspace(1.0, 0.3, intrinsic)

    def draw(rows):
        out = np.empty((rows, dims), dtype=np.float32)
        for s in range(0, rows, 100_000):
            r = min(100_000, rows - s)
            z = rng.normal(size=(r, intrinsic)) * scales
            out[s : s + r] = z @ basis.T + 0.02 * rng.normal(size=(r, dims))
        return out

    return draw(n), draw(queries)


DATASETS = {
    # name: (description, metric, loader)
    "pypi-minilm": ("100,000 x 384 real sentence embeddings (all-MiniLM-L6-v2), cosine", "cosine"),
    "synth-1m-128": ("1,000,000 x 128 synthetic, intrinsic dimension 24, L2", "l2"),
    "synth-100k-1536": ("100,000 x 1,536 synthetic, intrinsic dimension 48, cosine", "cosine"),
}


def load(name, limit=None, need_base=True):
    """(base, queries, ground truth ids (rows x 100), metric). `limit` takes the first rows of
    the base set (ground truth is then recomputed) for quick runs of the harness. Without
    `need_base`, base is None (and nothing of it is read) once the dataset is prepared."""
    metric = DATASETS[name][1]
    if name == "pypi-minilm":
        if not (SHARED / "pypi-minilm_base.fvecs").exists():
            raise SystemExit(f"{SHARED} is missing (the shared data beside the repository)")
        queries = read_vecs(SHARED / "pypi-minilm_query.fvecs", np.float32)
        gt = read_vecs(SHARED / "pypi-minilm_groundtruth.ivecs", np.int32)
        if limit is None:
            if not need_base:
                return None, queries, gt, metric
            return read_vecs(SHARED / "pypi-minilm_base.fvecs", np.float32), queries, gt, metric
    cache = CACHE / (name if limit is None else f"{name}-{limit}")
    if (cache / "gt.npy").exists():
        base = np.load(cache / "base.npy") if need_base else None
        return base, np.load(cache / "queries.npy"), np.load(cache / "gt.npy"), metric
    if name == "pypi-minilm":
        base = read_vecs(SHARED / "pypi-minilm_base.fvecs", np.float32)
    if name == "synth-1m-128":
        base, queries = synthetic(1_000_000 if limit is None else limit, 128, 24, seed=128)
    elif name == "synth-100k-1536":
        base, queries = synthetic(100_000 if limit is None else limit, 1536, 48, seed=1536)
    else:
        base = base[:limit]
    gt = exact_neighbors(base, queries, metric)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache / "base.npy", base)
    np.save(cache / "queries.npy", queries)
    np.save(cache / "gt.npy", gt)
    return base, queries, gt, metric
