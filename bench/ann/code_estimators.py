"""How well small codes rank the base for a query: the offline check behind
docs/decisions/0011-small-codes-estimators.md.

Issue 37's size goal (a file that stores f16 vectors no larger than 1.1x chassisdb-half's)
leaves about 80 bytes a vector for codes at 384 dimensions and about 42 at 128. This script
asks, for each candidate code, the question a walk on codes depends on: if the whole base is
ranked by the code's distance estimate, how many of the true 10 nearest are among the first
N? (The walk ranks its own neighbors by the same estimate, and its `rr` nearest estimates are
re-ranked exactly.) Codes:

- int4, int2: the library's per-dimension uniform codes (each dimension's min to max);
- bits: one bit a dimension, above or below the dimension's mean, each side standing for the
  mean of its side (decision 0008's `bit1`);
- rabitq1: RaBitQ's one-bit code: the vector minus the base's centroid, normalized, rotated
  by a random orthogonal matrix, one sign bit a dimension, with its two per-vector factors
  (the residual's norm and <o_bar, o>) and RaBitQ's estimator <o_bar, q> / <o_bar, o>;
- rabitqB: the same rotation with B bits a dimension (a per-vector uniform grid over the
  rotated unit residual, reconstructed, normalized) and the same correction;
- pcaK-bB: the top K principal components at B bits each (per-component min to max) plus
  the residual's squared norm (one float), the estimate |Pq - code|^2 + |r_o|^2 + |r_q|^2;
- waterB, waterB-uniform: every principal component at its own number of bits (reverse
  water-filling to B bytes), scalar Lloyd levels or a uniform grid, plus the dropped part's
  squared norm (see Water).

Bytes a vector are the code's plus its per-vector floats. Seeds are fixed.

With `--walk DIR` (pypi-minilm only), each code instead walks the graph that
`walk_codes --dump-graph DIR` wrote from a Chassis f32 file, as the library walks (greedy
descent by exact distances, a layer-0 beam of width ef by the code's estimates, the `rr`
nearest estimates ranked exactly), and the table gives recall@10 and codes scored a query.

    bench/.venv/bin/python bench/ann/code_estimators.py --dataset pypi-minilm
    bench/.venv/bin/python bench/ann/code_estimators.py --dataset synth-1m-128 --codes int4,water16-uniform
    cargo build --release --manifest-path bench/Cargo.toml --bin walk_codes
    bench/target/release/walk_codes --dump-graph bench/target/walk_graph      # ~1 min
    bench/.venv/bin/python bench/ann/code_estimators.py --walk bench/target/walk_graph \
        --codes exact,int4,rabitq1,water64-uniform                              # ~2 min
    bench/.venv/bin/python bench/ann/code_estimators.py --codes water64-k124 \
        --export bench/target/water64       # the timed code, for walk_codes --water
    taskset -c 1 bench/target/release/walk_codes --water bench/target/water64 --only int4,water
"""

import argparse
import heapq
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data  # noqa: E402

TOPS = (10, 20, 40, 80)


def uniform(x, lo, hi, bits):
    """Per-column uniform codes of x over [lo, hi] at `bits` bits, reconstructed."""
    levels = (1 << bits) - 1
    step = np.where(hi > lo, (hi - lo) / levels, 1.0)
    c = np.clip(np.rint((x - lo) / step), 0, levels)
    return (lo + c * step).astype(np.float32)


def rotation(dims, seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dims, dims)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


class PerDim:
    """int4/int2: asymmetric L2 between the query and the reconstructed vector."""

    def __init__(self, base, bits):
        self.bytes = base.shape[1] * bits // 8 + 8
        self.recon = uniform(base, base.min(0), base.max(0), bits)
        self.norms = (self.recon * self.recon).sum(1)

    def estimate(self, q):
        return self.norms[None, :] - 2 * q @ self.recon.T

    def prep(self, q):
        return q

    def at(self, q, ids):
        return self.norms[ids] - 2 * self.recon[ids] @ q


class Bits(PerDim):
    def __init__(self, base):
        self.bytes = base.shape[1] // 8 + 8
        mean = base.mean(0)
        above = base > mean
        hi = np.array([base[above[:, j], j].mean() for j in range(base.shape[1])])
        lo = np.array([base[~above[:, j], j].mean() for j in range(base.shape[1])])
        self.recon = np.where(above, hi, lo).astype(np.float32)
        self.norms = (self.recon * self.recon).sum(1)


class RaBitQ:
    """RaBitQ's estimator (Gao and Long, 2024) with `bits` bits a rotated dimension."""

    def __init__(self, base, bits, seed=37):
        dims = base.shape[1]
        self.bytes = dims * bits // 8 + 8
        self.c = base.mean(0).astype(np.float32)
        self.p = rotation(dims, seed)
        r = base - self.c
        self.rnorm = np.linalg.norm(r, axis=1).astype(np.float32)
        u = (r / np.maximum(self.rnorm, 1e-30)[:, None]) @ self.p
        if bits == 1:
            obar = np.where(u > 0, 1.0, -1.0) / np.sqrt(dims)
        else:
            # A per-vector grid of 2^bits levels, symmetric about 0, scaled to the vector's
            # largest coordinate (extended RaBitQ searches the scale; this takes the max).
            levels = (1 << bits) - 1
            m = np.abs(u).max(1, keepdims=True)
            c = np.clip(np.rint((u / m + 1) / 2 * levels), 0, levels)
            obar = (c / levels * 2 - 1) * m
            obar /= np.linalg.norm(obar, axis=1, keepdims=True)
        self.obar = obar.astype(np.float32)
        self.corr = (self.obar * u).sum(1).astype(np.float32)  # <o_bar, o>

    def estimate(self, q):
        qr = q - self.c
        qn = np.linalg.norm(qr, axis=1, keepdims=True)
        ip = ((qr / qn) @ self.p) @ self.obar.T / self.corr[None, :]
        return self.rnorm[None, :] ** 2 + qn**2 - 2 * self.rnorm[None, :] * qn * ip

    def prep(self, q):
        qr = q - self.c
        qn = float(np.linalg.norm(qr))
        return (qr / qn) @ self.p, qn

    def at(self, st, ids):
        qp, qn = st
        ip = self.obar[ids] @ qp / self.corr[ids]
        r = self.rnorm[ids]
        return r * r - 2 * r * qn * ip


class Pca:
    def __init__(self, base, k, bits):
        self.bytes = k * bits // 8 + 4
        self.mean = base.mean(0).astype(np.float32)
        x = base - self.mean
        _, vecs = np.linalg.eigh(x.T @ x)
        self.p = vecs[:, ::-1][:, :k].astype(np.float32).copy()
        y = x @ self.p
        self.recon = uniform(y, y.min(0), y.max(0), bits)
        self.res = ((x * x).sum(1) - (y * y).sum(1)).astype(np.float32)
        self.norms = (self.recon * self.recon).sum(1)

    def estimate(self, q):
        x = q - self.mean
        y = x @ self.p
        qres = (x * x).sum(1) - (y * y).sum(1)
        return self.norms[None, :] - 2 * y @ self.recon.T + self.res[None, :] + qres[:, None]

    def prep(self, q):
        return (q - self.mean) @ self.p

    def at(self, y, ids):
        return self.norms[ids] - 2 * self.recon[ids] @ y + self.res[ids]


class Water(Pca):
    """Every principal component, each at its own number of bits (reverse water-filling over
    the components' variances, to `budget` bytes), each quantized by a scalar Lloyd quantizer
    (k-means in one dimension: 2^b levels fit to the component's values), or with `lloyd`
    False by a uniform grid; components given no bits are dropped and their squared norm kept
    as one float, as in Pca."""

    # Optimal uniform quantizer steps for a unit Gaussian at 1 to 8 bits (Max, 1960), for the
    # `uniform` variant: levels symmetric about the component's mean, one step apart, so a
    # code is an affine function of its integer and integer dot products can score it.
    STEP = {1: 1.596, 2: 0.996, 3: 0.586, 4: 0.335, 5: 0.188, 6: 0.104, 7: 0.057, 8: 0.031}

    def __init__(self, base, budget, seed=11, lloyd=True, widths=None):
        self.mean = base.mean(0).astype(np.float32)
        x = base - self.mean
        vals, vecs = np.linalg.eigh(x.T @ x / len(x))
        vals, vecs = vals[::-1], vecs[:, ::-1]
        # `widths`: the only bit counts allowed (a kernel's fields, e.g. 0, 1, 2, 4); each
        # component's water-filled count is raised to the next allowed one, capped at the last.
        allowed = np.array(sorted(widths) if widths else range(9))

        def bits_at(theta):
            b = np.clip(np.floor(0.5 * np.log2(np.maximum(vals, 1e-30) / theta) + 0.5), 0, 8)
            i = np.minimum(np.searchsorted(allowed, b), len(allowed) - 1)
            return allowed[i].astype(int)

        lo, hi = 1e-12, float(vals[0])
        for _ in range(100):
            theta = np.sqrt(lo * hi)
            lo, hi = (theta, hi) if bits_at(theta).sum() > budget * 8 else (lo, theta)
        b = bits_at(hi)
        # Components by falling width, then by falling variance: the kernel's field order.
        order = np.lexsort((np.arange(len(b)), -b))
        b, vecs = b[order], vecs[:, order]
        self.bits = b
        k = int((b > 0).sum())
        self.bytes = int(np.ceil(b.sum() / 8)) + 4
        self.p = vecs[:, :k].astype(np.float32).copy()
        y = x @ self.p
        rng = np.random.default_rng(seed)
        sample = y[rng.choice(len(y), min(len(y), 20000), replace=False)]
        self.recon = np.empty_like(y)
        self.codes = np.zeros(y.shape, dtype=np.uint8)
        self.mid = np.zeros(k, dtype=np.float32)
        self.step = np.zeros(k, dtype=np.float32)
        for j in range(k):
            levels = 1 << b[j]
            if not lloyd:
                step = self.STEP[int(b[j])] * sample[:, j].std()
                mid = sample[:, j].mean() - step * (levels - 1) / 2
                c = np.clip(np.rint((y[:, j] - mid) / step), 0, levels - 1)
                self.recon[:, j] = mid + c * step
                self.codes[:, j], self.mid[j], self.step[j] = c, mid, step
                continue
            cent = np.quantile(sample[:, j], (np.arange(levels) + 0.5) / levels)
            for _ in range(25):
                edges = (cent[1:] + cent[:-1]) / 2
                a = np.searchsorted(edges, sample[:, j])
                for c in range(levels):
                    if (a == c).any():
                        cent[c] = sample[a == c, j].mean()
                cent.sort()
            self.recon[:, j] = cent[np.searchsorted((cent[1:] + cent[:-1]) / 2, y[:, j])]
        self.res = ((x * x).sum(1) - (y * y).sum(1)).astype(np.float32)
        self.norms = (self.recon * self.recon).sum(1)

    def export(self, directory):
        """Writes the code for walk_codes's `water` layout: `meta.txt` (n, dims, k, and the
        components of 4, 2 and 1 bits), `mean.f32`, `proj.f32` (k rows of dims), `mid.f32`,
        `step.f32`, and `codes.u8`: per vector a float (|code|^2 plus the dropped part's
        squared norm), then the 4-bit fields two a byte, the 2-bit four a byte, the 1-bit
        eight a byte, each group's first component in a byte's low bits."""
        if set(self.bits[self.bits > 0].tolist()) - {1, 2, 4}:
            raise SystemExit("export needs widths 0, 1, 2 and 4 (the `-k124` codes)")
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        n, k = self.codes.shape
        groups = [int((self.bits == w).sum()) for w in (4, 2, 1)]
        parts, at = [], 0
        for w, count in zip((4, 2, 1), groups):
            per = 8 // w
            c = np.zeros((n, -(-count // per) * per), dtype=np.uint8)
            c[:, :count] = self.codes[:, at : at + count]
            c = c.reshape(n, -1, per).astype(np.uint16)
            packed = sum(c[:, :, i] << (w * i) for i in range(per)).astype(np.uint8)
            parts.append(packed)
            at += count
        vnorm = (self.norms + self.res).astype("<f4").view(np.uint8).reshape(n, 4)
        codes = np.concatenate([vnorm] + parts, axis=1)
        meta = [n, self.p.shape[0], k, *groups, codes.shape[1]]
        (d / "meta.txt").write_text(" ".join(map(str, meta)) + "\n")
        self.mean.astype("<f4").tofile(d / "mean.f32")
        np.ascontiguousarray(self.p.T).astype("<f4").tofile(d / "proj.f32")
        self.mid.astype("<f4").tofile(d / "mid.f32")
        self.step.astype("<f4").tofile(d / "step.f32")
        codes.tofile(d / "codes.u8")
        print(f"wrote {d}: {n:,} codes of {codes.shape[1]} bytes, groups 4/2/1 bits {groups}")


class Exact:
    """No code: the walk by exact distances (the graph's own recall per ef)."""

    def __init__(self, base):
        self.bytes = 0
        self.base = base

    def prep(self, q):
        return q

    def at(self, q, ids):
        return -(self.base[ids] @ q) * 2


def load_graph(directory):
    """The graph walk_codes --dump-graph wrote: level-0 lists, upper lists, entry, top."""
    d = Path(directory)
    n, dims, entry, top = (int(x) for x in (d / "meta.txt").read_text().split())
    level0 = np.fromfile(d / "level0.u32", dtype=np.uint32).reshape(n, -1)
    words = np.fromfile(d / "upper.u32", dtype=np.uint32)
    upper, i = {}, 0
    while i < len(words):
        s, layer, count = (int(x) for x in words[i : i + 3])
        upper[(s, layer)] = [int(x) for x in words[i + 3 : i + 3 + count] if x != EMPTY]
        i += 3 + count
    return level0, upper, entry, top


EMPTY = 0xFFFFFFFF


def walk(graph, base, code, q, ef, rr):
    """Greedy descent by exact distances, a layer-0 beam of width ef by the code's estimates,
    then the rr nearest estimates ranked exactly: (the 10 ids, codes scored)."""
    level0, upper, entry, top = graph
    cur, cur_d = entry, -float(base[entry] @ q)
    for layer in range(top, 0, -1):
        changed = True
        while changed:
            changed = False
            for nb in upper.get((cur, layer), ()):
                d = -float(base[nb] @ q)
                if d < cur_d:
                    cur, cur_d, changed = nb, d, True
    st = code.prep(q)
    d0 = float(code.at(st, np.array([cur]))[0])
    visited, cand, res, scored = {cur}, [(d0, cur)], [(-d0, cur)], 1
    while cand:
        d, s = heapq.heappop(cand)
        if len(res) >= ef and d > -res[0][0]:
            break
        new = [x for x in level0[s].tolist() if x != EMPTY and x not in visited]
        if not new:
            continue
        visited.update(new)
        scored += len(new)
        for dd, x in zip(code.at(st, np.array(new)).tolist(), new):
            if len(res) < ef or dd < -res[0][0]:
                heapq.heappush(cand, (dd, x))
                heapq.heappush(res, (-dd, x))
                if len(res) > ef:
                    heapq.heappop(res)
    near = [x for _, x in sorted((-d, x) for d, x in res)][:rr]
    exact = base[near] @ q
    return [near[i] for i in np.argsort(-exact)[:10]], scored


def held(est, queries, gt, chunk=200):
    """Fraction of the true 10 among the first N by estimate, for N in TOPS."""
    hits = np.zeros(len(TOPS))
    for s in range(0, len(queries), chunk):
        e = est(queries[s : s + chunk])
        top = np.argpartition(e, max(TOPS), axis=1)[:, : max(TOPS)]
        order = np.take_along_axis(e, top, axis=1).argsort(1)
        top = np.take_along_axis(top, order, axis=1)
        for row, want in zip(top, gt[s : s + chunk, :10]):
            for i, n in enumerate(TOPS):
                hits[i] += len(np.intersect1d(row[:n], want))
    return hits / (10 * len(queries))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="pypi-minilm", choices=sorted(data.DATASETS))
    ap.add_argument("--base", type=int, default=None, help="first rows only (gt recomputed)")
    ap.add_argument("--codes", default=None, help="comma-separated subset of the codes")
    ap.add_argument("--walk", default=None, help="a graph from walk_codes --dump-graph")
    ap.add_argument("--queries", type=int, default=1000, help="walk: the first N queries")
    ap.add_argument("--export", default=None, help="write the one code named for walk_codes")
    args = ap.parse_args()
    base, queries, gt, metric = data.load(args.dataset, limit=args.base)
    base = base.astype(np.float32)
    queries = queries.astype(np.float32)
    if metric == "cosine":
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    dims = base.shape[1]
    makers = {
        "int4": lambda: PerDim(base, 4),
        "int2": lambda: PerDim(base, 2),
        "bits": lambda: Bits(base),
        "rabitq1": lambda: RaBitQ(base, 1),
        "rabitq2": lambda: RaBitQ(base, 2),
        "rabitq4": lambda: RaBitQ(base, 4),
    }
    for k in (dims // 6, dims // 4, dims // 3, dims // 2):
        for bits in (4, 8):
            makers[f"pca{k}-b{bits}"] = lambda k=k, bits=bits: Pca(base, k, bits)
    for budget in (dims // 8, dims // 6, dims * 3 // 16, dims // 4):
        makers[f"water{budget}"] = lambda budget=budget: Water(base, budget)
        makers[f"water{budget}-uniform"] = lambda budget=budget: Water(base, budget, lloyd=False)
        makers[f"water{budget}-k124"] = lambda budget=budget: Water(
            base, budget, lloyd=False, widths=(0, 1, 2, 4)
        )
    makers["exact"] = lambda: Exact(base)
    names = args.codes.split(",") if args.codes else list(makers)
    if args.export:
        makers[names[0]]().export(args.export)
        return
    if args.walk:
        if args.dataset != "pypi-minilm" or args.base is not None:
            raise SystemExit("--walk: walk_codes dumps pypi-minilm's graph, whole")
        graph = load_graph(args.walk)
        if graph[0].shape[0] != len(base):
            nodes = graph[0].shape[0]
            raise SystemExit(f"{args.walk} holds {nodes:,} nodes, the base {len(base):,}")
        print(f"walk over {args.walk}, {args.queries} queries: recall@10 / codes scored")
        settings = [(ef, rr) for ef in (32, 48, 64, 96, 128) for rr in (20, 40, 80) if rr <= ef]
        print("| code | bytes | " + " | ".join(f"ef {e}, rr {r}" for e, r in settings) + " |")
        print("|---|---:|" + "---|" * len(settings))
        for name in names:
            code = makers[name]()
            cells = []
            for ef, rr in settings:
                hit, scored = 0, 0
                for i in range(args.queries):
                    got, n = walk(graph, base, code, queries[i], ef, rr)
                    hit += len(set(got) & set(gt[i, :10].tolist()))
                    scored += n
                cells.append(f"{hit / (10 * args.queries):.3f} / {scored / args.queries:.0f}")
            print(f"| {name} | {code.bytes} | " + " | ".join(cells) + " |", flush=True)
        return
    print(f"{args.dataset}: {len(base):,} x {dims}, {metric}, {len(queries):,} queries")
    print("| code | bytes a vector | " + " | ".join(f"top {n}" for n in TOPS) + " |")
    print("|---|---:|" + "---:|" * len(TOPS))
    for name in names:
        t = time.time()
        code = makers[name]()
        h = held(code.estimate, queries, gt)
        cells = " | ".join(f"{x:.3f}" for x in h)
        print(f"| {name} | {code.bytes} | {cells} |  ({time.time() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
