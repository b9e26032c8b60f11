"""Full-text and hybrid search from Python: ``text_fields=`` at create (or
``set_text_fields``), ``search_text`` against BM25 computed here from the documents, hybrid
``search(..., text=...)`` against fusing the two legs by hand, filters, readers, padding."""

import math
import re
from collections import Counter

import numpy as np
import pytest

import chassis

WORDS = (
    "python rust vector search library fast embedded database file crash safe index graph "
    "query filter text hybrid token parser async http client server json yaml config test"
).split()


def corpus(n, seed):
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        k = int(rng.integers(0, 10))
        words = [WORDS[int(rng.integers(0, 1 + int(rng.integers(0, len(WORDS)))))] for _ in range(k)]
        docs.append({"text": " ".join(words), "n": i})
    return docs


def bm25(docs, query, k, pass_=lambda d: True):
    """BM25 as Lucene scores it, over lowercased words, from the documents themselves."""
    toks = {i: re.findall(r"\w+", d.get("text", "").lower()) for i, d in docs.items()}
    n = sum(1 for t in toks.values() if t)
    avgdl = sum(len(t) for t in toks.values()) / n
    scores = Counter()
    for term, c in Counter(re.findall(r"\w+", query.lower())).items():
        df = sum(1 for t in toks.values() if term in t)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, t in toks.items():
            tf = t.count(term)
            if tf and pass_(docs[i]):
                scores[i] += idf * c * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * len(t) / avgdl))
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]


def same(ids, scores, want):
    got = [(int(i), float(s)) for i, s in zip(ids, scores) if i != chassis.MISSING_ID]
    assert len(got) == len(want), (got, want)
    for (gi, gs), (wi, ws) in zip(got, want):
        assert abs(gs - ws) <= 1e-4 * max(1, ws), (got, want)
    last = want[-1][1] if want else 0
    above = lambda v: {i for i, s in v if abs(s - last) > 1e-4 * max(1, last)}
    assert above(got) == above(want), (got, want)


def test_search_text_is_bm25_through_writes_flushes_and_readers(tmp_path):
    path = tmp_path / "t.chassis"
    docs = corpus(400, 1)
    vecs = np.random.default_rng(2).normal(size=(400, 8)).astype(np.float32)
    ix = chassis.Index.create(path, dims=8, metric="cosine", text_fields=["text"])
    assert ix.text_fields == [{"name": "text", "stem": False, "stop_words": False, "lowercase": True}]
    ix.add(vecs[:300], metadata=docs[:300])
    state = {i: docs[i] for i in range(300)}
    queries = ["python", "rust vector search", "fast embedded database file", "nothing here", "Test TEST"]
    ids, scores = ix.search_text(queries, k=10)
    assert ids.shape == scores.shape == (5, 10)
    for row, q in enumerate(queries):
        same(ids[row], scores[row], bm25(state, q, 10))
    # Padding: a query no document matches.
    assert (ids[3] == chassis.MISSING_ID).all() and np.isneginf(scores[3]).all()
    ix.flush()
    ix.delete([0, 1, 2])
    ix.set_metadata(5, {"text": "python python python"})
    ix.add(vecs[300:], metadata=docs[300:])
    for i in (0, 1, 2):
        del state[i]
    state[5] = {"text": "python python python"}
    state.update({i: docs[i] for i in range(300, 400)})
    for q in queries[:3]:
        ids, scores = ix.search_text(q, k=10)
        same(ids[0], scores[0], bm25(state, q, 10))
    # A filter narrows what is returned, not the statistics.
    flt = {"n": {"$lt": 100}}
    ids, scores = ix.search_text("python search", k=10, filter=flt)
    same(ids[0], scores[0], bm25(state, "python search", 10, lambda d: d.get("n", 1000) < 100))
    ix.flush()
    reader = chassis.Index.open(path, read_only=True)
    assert reader.info()["text_fields"] == ["text"]
    for q in queries[:3]:
        ids, scores = reader.search_text(q, k=10)
        same(ids[0], scores[0], bm25(state, q, 10))
    assert ix.info()["write_version"] == 9


def test_hybrid_search_fuses_the_legs_and_reports_them(tmp_path):
    docs = corpus(500, 3)
    vecs = np.random.default_rng(4).normal(size=(500, 8)).astype(np.float32)
    ix = chassis.Index.create(tmp_path / "h.chassis", dims=8, metric="l2", text_fields=["text"])
    ix.add(vecs, metadata=docs)
    q = vecs[[10, 20]]
    texts = ["python rust", "database crash safe"]
    ids, scores, legs = ix.search(q, k=10, text=texts, depth=30, return_legs=True)
    assert ids.shape == scores.shape == legs["vector_rank"].shape == (2, 10)
    assert (np.diff(scores, axis=1) <= 1e-7).all(), "best first"
    for row in range(2):
        v_ids, _ = ix.search(q[row], k=30, ef=120)
        t_ids, _ = ix.search_text(texts[row], k=30)
        v = {int(i): r + 1 for r, i in enumerate(v_ids[0])}
        t = {int(i): r + 1 for r, i in enumerate(t_ids[0]) if i != chassis.MISSING_ID}
        fused = {i: 1 / (60 + v[i]) if i in v else 0 for i in set(v) | set(t)}
        for i in t:
            fused[i] += 1 / (60 + t[i])
        want = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:10]
        assert [int(i) for i in ids[row]] == [i for i, _ in want]
        assert np.allclose(scores[row], [s for _, s in want], rtol=1e-5)
        for c, i in enumerate(ids[row]):
            assert legs["vector_rank"][row, c] == v.get(int(i), 0)
            assert legs["text_rank"][row, c] == t.get(int(i), 0)
            assert np.isnan(legs["text_score"][row, c]) == (int(i) not in t)
    # Relative-score fusion with weights, and a filter on both legs.
    ids, scores = ix.search(q, k=10, text=texts, fusion="relative_score", weights=(0.3, 0.7))
    assert ids.shape == (2, 10) and (scores <= 1.0 + 1e-6).all()
    ids, _ = ix.search(q, k=10, text=texts, filter={"n": {"$gte": 250}})
    assert (ids[ids != chassis.MISSING_ID] >= 250).all()
    with pytest.raises(chassis.InvalidArgumentError, match="one text per vector"):
        ix.search(q, k=5, text=["only one"])
    with pytest.raises(chassis.InvalidArgumentError, match="fusion"):
        ix.search(q, k=5, text=texts, fusion="max")
    with pytest.raises(chassis.InvalidArgumentError):
        ix.search(q, k=5, text=texts, weights=(0, 0))


def test_text_fields_added_later_with_analysis_and_errors(tmp_path):
    ix = chassis.Index.create(tmp_path / "l.chassis", dims=2, metric="l2")
    ix.add(
        np.eye(2, dtype=np.float32)[[0, 1, 0]],
        metadata=[{"title": "The parsers parse"}, {"title": "a running runner"}, {"title": 7}],
    )
    with pytest.raises(chassis.InvalidArgumentError, match="no full-text fields"):
        ix.search_text("parse")
    ix.set_text_fields([{"name": "title", "stem": True, "stop_words": True}])
    ids, _ = ix.search_text(["parsing", "runs", "the"], k=3)
    assert int(ids[0, 0]) == 0 and int(ids[1, 0]) == 1
    assert (ids[2] == chassis.MISSING_ID).all(), "a stop word matches nothing"
    ix.flush()
    assert ix.text_fields[0]["stem"] is True
    with pytest.raises(chassis.InvalidArgumentError):
        ix.set_text_fields([{"name": "x", "weight": 2}])
    with pytest.raises(TypeError):
        ix.search_text([3])
    ix.set_text_fields([])
    ix.flush()
    assert ix.text_fields == []
    ix.close()
