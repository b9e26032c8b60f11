"""LangChain vector stores side by side on pypi-minilm: Chassis, FAISS (HNSW) and Chroma.

Adds the 100,000 documents (text + metadata, embeddings precomputed, so the embedding model
costs nothing) through each store's LangChain `add_texts` in calls of `--batch`, then runs the
1,000 held-out queries through `similarity_search` (k = 10) one at a time, every store in
turn for `--rounds` rounds, reporting add throughput, search latency (medians over the rounds
of p50 / p99, after a warm-up pass) and recall@10 against the exact ground truth. Same graph parameters where the store allows: M = 16, ef_construction = 200,
ef_search = 64, cosine. FAISS's LangChain store is given an `IndexHNSWFlat` over normalised
vectors (inner product), Chroma a collection with `hnsw:M`, `hnsw:construction_ef` and
`hnsw:search_ef` set. Each store persists where it can: Chassis flushes every call (fsync),
Chroma's `PersistentClient` writes its SQLite and segment files, FAISS keeps everything in
memory (save_local would be an extra step, not timed).

Setup (once):
    python3 -m venv bench/.lc-venv
    bench/.lc-venv/bin/pip install ./crates/chassis-py ./integrations/langchain-chassis \\
        langchain-community faiss-cpu langchain-chroma
Run:
    bench/.lc-venv/bin/python bench/adapters/langchain_stores.py [--n 100000] [--batch 1000]
"""

import argparse
import warnings
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "pypi-minilm"
K, M, EF_C, EF_S = 10, 16, 200, 64


def fvecs(path):
    a = np.fromfile(path, dtype=np.int32)
    d = a[0]
    return a.reshape(-1, d + 1)[:, 1:].view(np.float32)


def ivecs(path):
    a = np.fromfile(path, dtype=np.int32)
    d = a[0]
    return a.reshape(-1, d + 1)[:, 1:]


class Precomputed(Embeddings):
    """The dataset's own embeddings, looked up by text (the model's work already done)."""

    def __init__(self, texts, vectors):
        self.table = {t: v for t, v in zip(texts, vectors)}

    def embed_documents(self, texts):
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text):
        return self.table[text].tolist()


def chassis_store(emb, d, work):
    from langchain_chassis import ChassisVectorStore

    return ChassisVectorStore(emb, work / "lc.chassis", M=M, ef_construction=EF_C, ef_search=EF_S)


def faiss_store(emb, d, work):
    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    index = faiss.IndexHNSWFlat(d, M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_C
    index.hnsw.efSearch = EF_S
    return FAISS(
        emb,
        index,
        InMemoryDocstore(),
        {},
        normalize_L2=True,
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )


def chroma_store(emb, d, work):
    import chromadb
    from langchain_chroma import Chroma

    client = chromadb.PersistentClient(path=str(work / "chroma"))
    return Chroma(
        collection_name="bench",
        embedding_function=emb,
        client=client,
        collection_metadata={
            "hnsw:space": "cosine",
            "hnsw:M": M,
            "hnsw:construction_ef": EF_C,
            "hnsw:search_ef": EF_S,
        },
    )


def main():
    warnings.filterwarnings("ignore")  # langchain-community's deprecation and FAISS's notes
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--stores", default="chassis,faiss,chroma")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    base = fvecs(DATA / "pypi-minilm_base.fvecs")[: a.n]
    queries = fvecs(DATA / "pypi-minilm_query.fvecs")
    truth = ivecs(DATA / "pypi-minilm_groundtruth.ivecs")[:, :K]
    texts = (DATA / "pypi-minilm_base.txt").read_text().splitlines()[: a.n]
    qtexts = (DATA / "pypi-minilm_query.txt").read_text().splitlines()
    attrs = [json.loads(l) for l in (DATA / "pypi-minilm_attrs.jsonl").read_text().splitlines()[: a.n]]
    # Texts repeat in the data; a document's text is made unique so lookups find its vector.
    texts = [f"{t} [{i}]" for i, t in enumerate(texts)]
    qtexts = [f"query {i}: {t}" for i, t in enumerate(qtexts)]
    emb = Precomputed(texts + qtexts, np.vstack([base, queries]))
    metas = [{"bucket": m["bucket"], "chars": m["chars"], "row": i} for i, m in enumerate(attrs)]
    ids = [f"doc-{i}" for i in range(a.n)]
    print(
        f"pypi-minilm: {a.n} documents (384-d, cosine), add_texts in calls of {a.batch}, "
        f"then {len(qtexts)} similarity_search calls (k = {K}); M = {M}, ef_construction = {EF_C}, "
        f"ef_search = {EF_S}"
    )
    print("\n| store | add (docs/s) | search p50 (ms) | search p99 (ms) | recall@10 |")
    print("|---|---:|---:|---:|---:|")
    makers = {"chassis": chassis_store, "faiss": faiss_store, "chroma": chroma_store}
    exact = a.n == len(fvecs(DATA / "pypi-minilm_base.fvecs"))
    names = a.stores.split(",")
    works = {n: Path(tempfile.mkdtemp(prefix=f"lc-{n}-")) for n in names}
    stores, adds = {}, {}
    try:
        for name in names:
            store = makers[name](emb, base.shape[1], works[name])
            t = time.perf_counter()
            for s in range(0, a.n, a.batch):
                store.add_texts(texts[s : s + a.batch], metas[s : s + a.batch], ids=ids[s : s + a.batch])
            adds[name] = a.n / (time.perf_counter() - t)
            stores[name] = store
        # Searches: every store in turn, `--rounds` times (the machine's pace drifts over
        # minutes; interleaving puts the stores under the same drift), after a warm-up pass.
        for name in names:
            for q in qtexts[:100]:
                stores[name].similarity_search(q, k=K)
        p50s = {n: [] for n in names}
        p99s = {n: [] for n in names}
        recalls = {}
        for _ in range(a.rounds):
            for name in names:
                lat, found = [], []
                for q in qtexts:
                    t = time.perf_counter()
                    docs = stores[name].similarity_search(q, k=K)
                    lat.append((time.perf_counter() - t) * 1e3)
                    found.append([d.metadata["row"] for d in docs])
                lat.sort()
                p50s[name].append(statistics.median(lat))
                p99s[name].append(lat[int(0.99 * len(lat))])
                recalls[name] = (
                    np.mean([len(set(f) & set(g)) / K for f, g in zip(found, truth)])
                    if exact
                    else float("nan")
                )
        for name in names:
            print(
                f"| {name} | {adds[name]:,.0f} | {statistics.median(p50s[name]):.2f} | "
                f"{statistics.median(p99s[name]):.2f} | {recalls[name]:.3f} |",
                flush=True,
            )
        print(
            f"\n(search latency: medians over {a.rounds} interleaved rounds of {len(qtexts)} queries; "
            "per-round p50s: "
            + "; ".join(f"{n} " + ", ".join(f"{x:.2f}" for x in p50s[n]) for n in names)
            + ")"
        )
    finally:
        for w in works.values():
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
