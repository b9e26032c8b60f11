"""The harness's filtered mode: pypi-minilm's attributes, its 1,000 filtered queries of eight
kinds and their exact filtered ground truth, searched by Chassis (its own metadata and filters),
an exact numpy scan of the matching rows, FAISS IndexHNSWFlat with an IDSelectorBitmap, and
hnswlib with a filter callable, in one run, one search thread.

    bash bench/ann/run-filtered [--reps 3] [--reuse]

Every system builds from the same vectors with M = 16 and ef_construction = 200. The peers
keep no metadata: for each query they evaluate the filter over numpy columns of the
attributes (the same code for all three, counted in their time, as their users would run
it); Chassis evaluates its own. For each system and ef, the queries of each kind run one
call per query, the kinds taking turns, a warm-up pass and then `--reps` counted passes; QPS
is the median pass's; before the first, every system's file is evicted from the page cache,
as in the ANN harness. Recall@10 is against the filtered ground truth (fewer than 10 matches:
against those). Results go to bench/target/ann/results-filtered.json and, as markdown, to
bench/ann/filtered.md and docs/PERFORMANCE.md ("Filtered search").
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data  # noqa: E402
from systems import EF_CONSTRUCTION, M, _unit  # noqa: E402

OUT = data.ROOT / "bench" / "target" / "ann" / "filtered"
K = 10
EFS = [16, 32, 64, 128, 256, 512]
DEFAULT_EF = 64
MD = data.ROOT / "bench" / "ann" / "filtered.md"
DOC = data.ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- filtered: begin -->", "<!-- filtered: end -->"


def load():
    d = data.SHARED
    base = data.read_vecs(d / "pypi-minilm_base.fvecs", np.float32)
    queries = data.read_vecs(d / "pypi-minilm_query.fvecs", np.float32)
    attrs = [json.loads(line) for line in open(d / "pypi-minilm_attrs.jsonl")]
    fq = [json.loads(line) for line in open(d / "pypi-minilm_filtered_queries.jsonl")]
    gt = data.read_vecs(d / "pypi-minilm_filtered_groundtruth.ivecs", np.int32)
    return base, queries, attrs, fq, gt


class Columns:
    """The attributes as numpy columns, and a filter evaluator over them (the peers' side)."""

    def __init__(self, attrs):
        self.n = len(attrs)
        self.cols = {
            "bucket": np.array([a["bucket"] for a in attrs]),
            "chars": np.array([a["chars"] for a in attrs]),
        }
        tags = {}
        for i, a in enumerate(attrs):
            for t in a["tags"]:
                tags.setdefault(t, []).append(i)
        self.tags = {t: np.array(v) for t, v in tags.items()}

    def mask(self, f):
        if "$and" in f:
            m = np.ones(self.n, bool)
            for g in f["$and"]:
                m &= self.mask(g)
            return m
        ((key, cond),) = f.items()
        if key == "tags":
            tag = cond["$contains"] if isinstance(cond, dict) else cond
            m = np.zeros(self.n, bool)
            m[self.tags.get(tag, [])] = True
            return m
        col = self.cols[key]
        if not isinstance(cond, dict):
            return col == cond
        m = np.ones(self.n, bool)
        for op, x in cond.items():
            m &= {
                "$eq": col == x,
                "$gt": col > x,
                "$gte": col >= x,
                "$lt": col < x,
                "$lte": col <= x,
            }[op]
        return m


def build(base, attrs, reuse):
    import chassis
    import faiss
    import hnswlib

    OUT.mkdir(parents=True, exist_ok=True)
    paths = {s: OUT / f"pypi-minilm.{s}" for s in ("chassis", "faiss", "hnswlib")}
    built = {}
    if not (reuse and paths["chassis"].exists()):
        paths["chassis"].unlink(missing_ok=True)
        t = time.perf_counter()
        ix = chassis.Index.create(
            paths["chassis"], dims=base.shape[1], metric="cosine", M=M,
            ef_construction=EF_CONSTRUCTION,
        )
        ix.add(base, metadata=attrs, threads=os.cpu_count() or 1)
        ix.flush()
        ix.close()
        built["chassis"] = time.perf_counter() - t
    if not (reuse and paths["faiss"].exists()):
        t = time.perf_counter()
        f = faiss.IndexHNSWFlat(base.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        f.hnsw.efConstruction = EF_CONSTRUCTION
        f.add(_unit(base))
        faiss.write_index(f, str(paths["faiss"]))
        built["faiss"] = time.perf_counter() - t
    if not (reuse and paths["hnswlib"].exists()):
        t = time.perf_counter()
        p = hnswlib.Index(space="cosine", dim=base.shape[1])
        p.init_index(max_elements=len(base), ef_construction=EF_CONSTRUCTION, M=M, random_seed=100)
        p.add_items(base, np.arange(len(base)), num_threads=os.cpu_count() or 1)
        p.save_index(str(paths["hnswlib"]))
        built["hnswlib"] = time.perf_counter() - t
    return paths, built


def systems(paths, base, cols):
    """name -> (efs, one(query, filter, ef) -> ids)."""
    import chassis
    import faiss
    import hnswlib

    faiss.omp_set_num_threads(1)
    ch = chassis.Index.open(paths["chassis"], read_only=True)
    fx = faiss.read_index(str(paths["faiss"]))
    hn = hnswlib.Index(space="cosine", dim=base.shape[1])
    hn.load_index(str(paths["hnswlib"]))
    hn.set_num_threads(1)
    unit = _unit(base)

    def chassis_one(q, f, ef):
        ids, _ = ch.search(q, k=K, ef=ef, threads=1, filter=f)
        return ids[0]

    def scan_one(q, f, ef):
        ids = np.flatnonzero(cols.mask(f))
        if len(ids) == 0:
            return ids
        sims = unit[ids] @ (q / np.linalg.norm(q))
        kk = min(K, len(ids))
        top = np.argpartition(-sims, kk - 1)[:kk]
        return ids[top[np.argsort(-sims[top])]]

    def faiss_one(q, f, ef):
        m = cols.mask(f)
        sel = faiss.IDSelectorBitmap(len(m), faiss.swig_ptr(np.packbits(m, bitorder="little")))
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)
        _, ids = fx.search((q / np.linalg.norm(q))[None, :].astype(np.float32), K, params=params)
        return ids[0][ids[0] >= 0]

    def hnswlib_one(q, f, ef):
        allowed = cols.mask(f).tobytes()
        hn.set_ef(ef)
        try:
            ids, _ = hn.knn_query(q, k=K, num_threads=1, filter=lambda i: allowed[i])
        except RuntimeError:
            # hnswlib raises when it finds fewer than k that pass.
            return np.array([], dtype=np.int64)
        return ids[0]

    return {
        "chassis": (EFS, chassis_one),
        "exact scan": ([0], scan_one),
        "faiss": (EFS, faiss_one),
        "hnswlib": (EFS, hnswlib_one),
    }


def run(args):
    base, queries, attrs, fq, gt = load()
    cols = Columns(attrs)
    paths, built = build(base, attrs, args.reuse)
    # As the ANN harness's search phase: every system's file evicted, so the searches start
    # from the page cache a reader usually finds, whatever built or searched it before.
    data.evict(list(paths.values()))
    # Every system searches on the same one core (builds used every core).
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    kinds = sorted({q["kind"] for q in fq})
    by_kind = {k: [j for j, q in enumerate(fq) if q["kind"] == k] for k in kinds}
    want = []
    for j in range(len(fq)):
        w = [int(x) for x in gt[j][:K] if x >= 0]
        want.append(set(w))
    results = {
        "built_seconds": built, "kinds": kinds, "systems": {}, "core": core, "evicted": True,
    }
    for name, (efs, one) in systems(paths, base, cols).items():
        sysres = {}
        for ef in efs:
            if name == "hnswlib" and ef > 128 and args.quick_hnswlib:
                continue
            recall = {}
            passes = {k: [] for k in kinds}
            for rep in range(args.reps + 1):
                for k in kinds:
                    t = time.perf_counter()
                    found = [one(queries[j], fq[j]["filter"], ef) for j in by_kind[k]]
                    dt = time.perf_counter() - t
                    if rep > 0:
                        passes[k].append(dt)
                    if rep == 0:
                        r = []
                        for j, ids in zip(by_kind[k], found):
                            got = {int(x) for x in ids if int(x) >= 0}
                            r.append(len(got & want[j]) / len(want[j]) if want[j] else 1.0)
                        recall[k] = sum(r) / len(r)
            secs = {k: statistics.median(passes[k]) for k in kinds}
            row = {
                "recall": recall,
                "qps": {k: len(by_kind[k]) / secs[k] for k in kinds},
                "overall_recall": sum(recall[k] * len(by_kind[k]) for k in kinds) / len(fq),
                "overall_qps": len(fq) / sum(secs.values()),
            }
            sysres[str(ef)] = row
            print(
                f"{name:10s} ef {ef:>4}: recall {row['overall_recall']:.3f} "
                f"QPS {row['overall_qps']:8.1f}  "
                + " ".join(f"{k}={recall[k]:.2f}/{row['qps'][k]:.0f}" for k in kinds),
                flush=True,
            )
        results["systems"][name] = sysres
    (data.ROOT / "bench" / "target" / "ann").mkdir(parents=True, exist_ok=True)
    (data.ROOT / "bench" / "target" / "ann" / "results-filtered.json").write_text(
        json.dumps(results, indent=1)
    )
    return results


def best_at(rows, recall):
    """The best overall QPS among rows reaching `recall` overall, and its ef."""
    ok = [(r["overall_qps"], ef) for ef, r in rows.items() if r["overall_recall"] >= recall]
    return max(ok) if ok else (None, None)


def report(results):
    kinds = results["kinds"]
    s = results["systems"]
    ch = s["chassis"][str(DEFAULT_EF)]
    scan = s["exact scan"]["0"]
    lines = [BEGIN, "## Filtered search (pypi-minilm attributes, 1,000 filtered queries)", ""]
    lines += [
        "Written by `bash bench/ann/run-filtered` (`bench/ann/filtered.py`): Chassis with its "
        "own metadata and filters, an exact numpy scan of the matching rows, FAISS "
        "IndexHNSWFlat with an `IDSelectorBitmap`, hnswlib with a filter callable; M = 16, "
        "ef_construction = 200, one search thread, one call per query, every system's "
        f"searches pinned to the same core (core {results.get('core', '?')}), every file "
        + ("evicted from the page cache before them (as in the ANN harness). " if results.get(
            "evicted") else "searched as the page cache held it. ")
        + "The peers keep no "
        "metadata, so each query's filter is evaluated over numpy columns of the attributes "
        "in their time; Chassis evaluates its own. QPS is the median of the counted passes.",
        "",
        f"### Per kind, Chassis at its default ef ({DEFAULT_EF})",
        "",
        "| kind | recall@10 | QPS | exact scan QPS | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for k in kinds:
        lines.append(
            f"| {k} | {ch['recall'][k]:.3f} | {ch['qps'][k]:,.0f} | {scan['qps'][k]:,.0f} | "
            f"{ch['qps'][k] / scan['qps'][k]:.1f}x |"
        )
    lines.append(
        f"| **overall** | {ch['overall_recall']:.3f} | {ch['overall_qps']:,.0f} | "
        f"{scan['overall_qps']:,.0f} | {ch['overall_qps'] / scan['overall_qps']:.1f}x |"
    )
    lines += ["", "### Every system and ef (overall; per kind: recall / QPS)", ""]
    lines += ["| system | ef | recall@10 | QPS | " + " | ".join(kinds) + " |"]
    lines += ["|---|---:|---:|---:|" + "---:|" * len(kinds)]
    for name, rows in s.items():
        for ef, r in rows.items():
            cells = " | ".join(f"{r['recall'][k]:.2f} / {r['qps'][k]:,.0f}" for k in kinds)
            lines.append(
                f"| {name} | {ef if ef != '0' else '-'} | {r['overall_recall']:.3f} | "
                f"{r['overall_qps']:,.1f} | {cells} |"
            )
    worst = min(ch["recall"].values())
    hq, hef = best_at(s["hnswlib"], ch["overall_recall"])
    fq_, fef = best_at(s["faiss"], ch["overall_recall"])
    hbest = max(r["overall_recall"] for r in s["hnswlib"].values())
    lines += [
        "",
        "### The goals",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        f"| recall@10 ≥ 0.95 in every kind, default settings | lowest kind {worst:.3f} "
        f"(overall {ch['overall_recall']:.3f}) | {'yes' if worst >= 0.95 else 'no'} |",
        f"| overall QPS ≥ 10x the exact scan's | {ch['overall_qps']:,.0f} vs "
        f"{scan['overall_qps']:,.0f}: {ch['overall_qps'] / scan['overall_qps']:.1f}x | "
        f"{'yes' if ch['overall_qps'] >= 10 * scan['overall_qps'] else 'no'} |",
    ]
    per_kind = {k: ch["qps"][k] / scan["qps"][k] for k in kinds}
    low = min(per_kind, key=per_kind.get)
    under = [f"{k} {per_kind[k]:.1f}x" for k in kinds if per_kind[k] < 5]
    lines.append(
        f"| every kind ≥ 5x the exact scan's (issue 37) | lowest {low} {per_kind[low]:.1f}x"
        + (f"; under 5x: {', '.join(under)}" if under else "")
        + f" | {'yes' if not under else 'no'} |"
    )
    if hq:
        ratio = ch["overall_qps"] / hq
        lines.append(
            f"| ≥ 20x hnswlib's filtered search at equal or better recall | hnswlib's best at "
            f"recall ≥ {ch['overall_recall']:.3f}: {hq:,.1f} QPS (ef {hef}): {ratio:.0f}x | "
            f"{'yes' if ratio >= 20 else 'no'} |"
        )
    else:
        lines.append(
            f"| ≥ 20x hnswlib's filtered search at equal or better recall | hnswlib never "
            f"reaches recall {ch['overall_recall']:.3f} (best {hbest:.3f}); at its best "
            f"recall: {ch['overall_qps'] / max(r['overall_qps'] for r in s['hnswlib'].values()):.0f}x "
            f"its QPS | yes |"
        )
    if fq_:
        lines.append(
            f"| (FAISS, for comparison) | best at recall ≥ {ch['overall_recall']:.3f}: "
            f"{fq_:,.1f} QPS (ef {fef}) | - |"
        )
    else:
        fef, frow = max(s["faiss"].items(), key=lambda kv: kv[1]["overall_recall"])
        lines.append(
            f"| (FAISS, for comparison) | never reaches recall {ch['overall_recall']:.3f} "
            f"(best {frow['overall_recall']:.3f}, at ef {fef}) | - |"
        )
    lines += [END]
    text = "\n".join(lines) + "\n"
    MD.write_text(text)
    doc = DOC.read_text()
    if BEGIN in doc and END in doc:
        a, b = doc.index(BEGIN), doc.index(END) + len(END)
        doc = doc[:a] + text.rstrip("\n") + doc[b:]
    else:
        at = doc.index("## The data") if "## The data" in doc else len(doc)
        doc = doc[:at] + text + "\n" + doc[at:]
    DOC.write_text(doc)
    print(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reuse", action="store_true", help="reuse built files")
    p.add_argument("--quick-hnswlib", action="store_true", help="hnswlib at ef <= 128 only")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--core", type=int, help="the core every search runs on (default: the last)")
    args = p.parse_args()
    if args.report_only:
        results = json.loads(
            (data.ROOT / "bench" / "target" / "ann" / "results-filtered.json").read_text()
        )
    else:
        results = run(args)
    report(results)


if __name__ == "__main__":
    main()
