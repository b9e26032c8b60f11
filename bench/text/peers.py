"""Full-text and hybrid search side by side on pypi-minilm: Chassis (its Python package),
tantivy (tantivy-py), SQLite FTS5 (Python's sqlite3), LanceDB (native full-text index, and its
hybrid search over an IVF_HNSW_SQ vector index with its RRF reranker), and the pipeline an
SQLite user builds by hand (FTS5's top 100, an exact numpy scan's top 100, RRF in Python).

Same corpus (100,000 PyPI summaries), same 1,000 known-item queries, one query per call, the
process pinned to one core; QPS is the median of 5 passes after a warm-up, MRR@10 per query
kind. Prints markdown. Run by bench/text/run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "pypi-minilm"
OUT = ROOT / "bench" / "target" / "text"
KINDS = ["keywords", "fragment", "typo"]


def pin():
    cpu = int(os.environ.get("CHASSIS_BENCH_CPU", max(os.sched_getaffinity(0))))
    os.sched_setaffinity(0, {cpu})
    return cpu


def load():
    texts = (DATA / "pypi-minilm_base.txt").read_text(encoding="utf-8").split("\n")[:100_000]
    qs = [json.loads(l) for l in (DATA / "pypi-minilm_hybrid_queries.jsonl").read_text().splitlines()]
    qv = np.load(DATA / "pypi-minilm_hybrid_query.f32.npy").astype(np.float32)
    a = np.fromfile(DATA / "pypi-minilm_base.fvecs", dtype="<i4")
    base = a.reshape(-1, a[0] + 1)[:, 1:].view("<f4").copy()
    return texts, qs, qv, base


def mrr(ranked_lists, qs):
    per = {k: [] for k in KINDS}
    for ids, q in zip(ranked_lists, qs):
        ids = list(ids)[:10]
        per[q["kind"]].append(1.0 / (ids.index(q["target"]) + 1) if q["target"] in ids else 0.0)
    allv = [x for v in per.values() for x in v]
    return [statistics.fmean(allv)] + [statistics.fmean(per[k]) for k in KINDS]


def qps(run, n):
    run()
    rates = []
    for _ in range(5):
        t = time.perf_counter()
        run()
        rates.append(n / (time.perf_counter() - t))
    return statistics.median(rates)


def words(q):
    return re.findall(r"\w+", q.lower())


def rrf(a, b, k=60, depth=100):
    s = {}
    for lst in (a, b):
        for r, i in enumerate(lst[:depth]):
            s[i] = s.get(i, 0.0) + 1.0 / (k + r + 1)
    return [i for i, _ in sorted(s.items(), key=lambda x: (-x[1], x[0]))[:10]]


def main():
    cpu = pin()
    texts, qs, qv, base = load()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []  # (system, build s, text QPS, text MRR list, hybrid QPS, hybrid MRR list)

    # -- Chassis ---------------------------------------------------------------------------
    import chassis

    path = OUT / "peers.chassis"
    for p in (path,):
        if p.exists():
            p.unlink()
    docs = [{"text": t} for t in texts]
    t0 = time.perf_counter()
    ix = chassis.Index.create(path, dims=384, metric="cosine")
    ix.add(base, metadata=docs, threads=1)
    ix.flush()
    vectors_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ix.set_text_fields(["text"])
    ix.flush()
    text_build = time.perf_counter() - t0
    ix.close()
    r = chassis.Index.open(path, read_only=True)
    lists = [r.search_text(q["text"], k=10)[0][0].tolist() for q in qs]
    text_mrr = mrr(lists, qs)
    text_qps = qps(lambda: [r.search_text(q["text"], k=10) for q in qs], len(qs))
    batch_qps = qps(lambda: r.search_text([q["text"] for q in qs], k=10, threads=1), len(qs))
    hyb = [r.search(qv[i], k=10, text=q["text"])[0][0].tolist() for i, q in enumerate(qs)]
    hyb_mrr = mrr(hyb, qs)
    hyb_qps = qps(lambda: [r.search(qv[i], k=10, text=q["text"]) for i, q in enumerate(qs)], len(qs))
    rows.append(("Chassis", text_build, text_qps, text_mrr, hyb_qps, hyb_mrr))
    chassis_batch = batch_qps
    r.close()

    # -- tantivy ---------------------------------------------------------------------------
    import tantivy

    tdir = OUT / "tantivy"
    shutil.rmtree(tdir, ignore_errors=True)
    tdir.mkdir(parents=True)
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True, indexed=True, fast=True)
    sb.add_text_field("text", stored=False)
    schema = sb.build()
    tix = tantivy.Index(schema, path=str(tdir))
    t0 = time.perf_counter()
    w = tix.writer(heap_size=200_000_000, num_threads=1)
    for i, t in enumerate(texts):
        w.add_document(tantivy.Document(id=i, text=t))
    w.commit()
    w.wait_merging_threads()
    t_build = time.perf_counter() - t0
    tix.reload()
    s = tix.searcher()

    def tq(q):
        parsed = tix.parse_query(" ".join(words(q)) or "nothing", ["text"])
        return [s.doc(a)["id"][0] for _, a in s.search(parsed, 10).hits]

    lists = [tq(q["text"]) for q in qs]
    rows.append(("tantivy 0.27 (tantivy-py)", t_build, qps(lambda: [tq(q["text"]) for q in qs], len(qs)), mrr(lists, qs), None, None))

    # -- SQLite FTS5, and FTS5 + exact scan + RRF -------------------------------------------
    db_path = OUT / "fts5.db"
    if db_path.exists():
        db_path.unlink()
    db = sqlite3.connect(db_path)
    t0 = time.perf_counter()
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(text, tokenize='unicode61')")
    db.executemany("INSERT INTO docs(rowid, text) VALUES (?, ?)", ((i, t) for i, t in enumerate(texts)))
    db.commit()
    f_build = time.perf_counter() - t0

    def fts(q, k=10):
        m = " OR ".join(f'"{w}"' for w in words(q))
        if not m:
            return []
        return [row[0] for row in db.execute("SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?", (m, k))]

    lists = [fts(q["text"]) for q in qs]
    f_qps = qps(lambda: [fts(q["text"]) for q in qs[:200]], 200)

    def pipeline(i, q):
        t = fts(q, 100)
        sims = base @ qv[i]
        top = np.argpartition(-sims, 100)[:100]
        v = top[np.argsort(-sims[top])].tolist()
        return rrf(v, t)

    plist = [pipeline(i, q["text"]) for i, q in enumerate(qs)]
    p_qps = qps(lambda: [pipeline(i, q["text"]) for i, q in enumerate(qs[:100])], 100)
    rows.append((f"SQLite FTS5 {sqlite3.sqlite_version}", f_build, f_qps, mrr(lists, qs), p_qps, mrr(plist, qs)))

    # -- LanceDB -----------------------------------------------------------------------------
    try:
        import lancedb
        import pyarrow as pa

        ldir = OUT / "lancedb"
        shutil.rmtree(ldir, ignore_errors=True)
        ldb = lancedb.connect(str(ldir))
        t0 = time.perf_counter()
        tbl = ldb.create_table(
            "docs",
            pa.table(
                {
                    "id": pa.array(np.arange(len(texts), dtype=np.int64)),
                    "text": pa.array(texts),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(base.reshape(-1)), 384),
                }
            ),
        )
        tbl.create_fts_index("text", use_tantivy=False, stem=False, remove_stop_words=False, ascii_folding=False)
        l_build = time.perf_counter() - t0
        tbl.create_index(metric="cosine", index_type="IVF_HNSW_SQ", vector_column_name="vector")

        def lf(q):
            return [r["id"] for r in tbl.search(q, query_type="fts").limit(10).select(["id"]).to_list()]

        def lh(i, q):
            return [
                r["id"]
                for r in tbl.search(query_type="hybrid").vector(qv[i]).text(q).limit(10).select(["id"]).to_list()
            ]

        lists = [lf(q["text"]) for q in qs]
        hl = [lh(i, q["text"]) for i, q in enumerate(qs)]
        rows.append(
            (
                f"LanceDB {lancedb.__version__}",
                l_build,
                qps(lambda: [lf(q["text"]) for q in qs[:200]], 200),
                mrr(lists, qs),
                qps(lambda: [lh(i, q["text"]) for i, q in enumerate(qs[:100])], 100),
                mrr(hl, qs),
            )
        )
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"LanceDB skipped: {e}", file=sys.stderr)

    print(f"## Side by side (one core: CPU {cpu}; one query per call, through Python)\n")
    print("| system | text index build (s) | text QPS | MRR@10 | keywords | fragment | typo | hybrid QPS | hybrid MRR@10 | keywords | fragment | typo |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, b, tq_, tm, hq, hm in rows:
        h = (f"{hq:,.0f} | " + " | ".join(f"{x:.3f}" for x in hm)) if hq else "n/a | n/a | n/a | n/a | n/a"
        print(f"| {name} | {b:.2f} | {tq_:,.0f} | " + " | ".join(f"{x:.3f}" for x in tm) + f" | {h} |")
    print()
    print(
        f"Chassis's build is `set_text_fields` and its flush on a file already holding the vectors and "
        f"documents (the vectors and documents took {vectors_s:.1f} s). Its text QPS in one batch call "
        f"(`search_text(all, threads=1)`): {chassis_batch:,.0f}. The FTS5 + exact scan row's hybrid is "
        "FTS5's top 100 and a numpy scan's top 100 fused by RRF (k 60) in Python; LanceDB's hybrid is its "
        "native FTS index and an IVF_HNSW_SQ index fused by its default RRF reranker.\n"
    )
    c = rows[0]
    peers = {n: r for n, *r in rows}
    tv = peers.get("tantivy 0.27 (tantivy-py)")
    lance = next((r for n, *r in rows if n.startswith("LanceDB")), None)
    fts5 = next((r for n, *r in rows if n.startswith("SQLite")), None)
    print("### Goals (issue 38)\n")
    print("| goal | measured | |\n|---|---:|---|")
    if tv:
        print(f"| text QPS >= tantivy's | {c[2] / tv[1]:.2f}x | {'met' if c[2] >= tv[1] else '**not met**'} |")
    if lance and lance[3]:
        ratio = c[4] / lance[3]
        print(f"| hybrid QPS >= 10x LanceDB's hybrid, MRR at least equal | {ratio:.1f}x, MRR {c[5][0]:.3f} vs {lance[4][0]:.3f} | {'met' if ratio >= 10 and c[5][0] >= lance[4][0] else '**not met**'} |")
    if fts5 and fts5[3]:
        ratio = c[4] / fts5[3]
        print(f"| hybrid QPS >= 40x FTS5 + exact scan + RRF, MRR at least equal | {ratio:.1f}x, MRR {c[5][0]:.3f} vs {fts5[4][0]:.3f} | {'met' if ratio >= 40 and c[5][0] >= fts5[4][0] else '**not met**'} |")
    print()


if __name__ == "__main__":
    main()
