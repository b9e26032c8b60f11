"""ChassisVectorStore beyond the standard suite: filters, scores, MMR, retrievers, ids,
persistence, a read-only store in another process, a large batch."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

import langchain_chassis.vectorstores as vs
from langchain_chassis import ChassisVectorStore, chassis_id


class Axis(Embeddings):
    """Deterministic embeddings with known geometry: text "i" is the unit vector at angle i°."""

    def _one(self, text: str) -> list[float]:
        a = np.deg2rad(float(text.split()[0]))
        return [float(np.cos(a)), float(np.sin(a)), 0.0]

    def embed_documents(self, texts):
        return [self._one(t) for t in texts]

    def embed_query(self, text):
        return self._one(text)


def angles(store, query, k, **kw):
    return [d.page_content for d in store.similarity_search(query, k=k, **kw)]


def test_filters_in_the_chassis_syntax(tmp_path):
    store = ChassisVectorStore(Axis(), tmp_path / "f.chassis")
    texts = [str(i) for i in range(0, 90, 5)]
    metas = [{"even": i % 10 == 0, "tens": i // 10, "tags": ["a"] if i < 30 else ["b"]} for i in range(0, 90, 5)]
    store.add_texts(texts, metas)
    assert angles(store, "0", 3) == ["0", "5", "10"]
    assert angles(store, "0", 3, filter={"even": True}) == ["0", "10", "20"]
    assert angles(store, "0", 3, filter={"tens": {"$gte": 5}}) == ["50", "55", "60"]
    assert angles(store, "0", 2, filter={"$and": [{"tags": {"$contains": "b"}}, {"even": False}]}) == ["35", "45"]
    assert angles(store, "0", 2, filter={"$or": [{"tens": 8}, {"tens": 7}]}) == ["70", "75"]
    retriever = store.as_retriever(search_kwargs={"k": 2, "filter": {"tens": {"$in": [4]}}})
    assert [d.page_content for d in retriever.invoke("0")] == ["40", "45"]
    with pytest.raises(Exception, match="filter|operator"):
        store.similarity_search("0", k=1, filter={"tens": {"$regex": "x"}})


def test_scores_and_relevance_follow_the_metric(tmp_path):
    for metric in ["cosine", "l2", "ip"]:
        store = ChassisVectorStore(Axis(), tmp_path / f"{metric}.chassis", metric=metric)
        store.add_texts(["0", "60", "90"])
        (d0, s0), (d1, s1), (d2, s2) = store.similarity_search_with_score("0", k=3)
        assert [d0.page_content, d1.page_content, d2.page_content] == ["0", "60", "90"]
        assert s0 == pytest.approx(0.0, abs=1e-6)
        want = {"cosine": 0.5, "l2": 1.0, "ip": 0.5}[metric]  # at 60 degrees
        assert s1 == pytest.approx(want, abs=1e-5)
        rel = store.similarity_search_with_relevance_scores("0", k=3)
        assert rel[0][1] == pytest.approx(1.0, abs=1e-6)
        assert all(0.0 <= r <= 1.0 for _, r in rel) and rel[1][1] > rel[2][1]
        # At 60 degrees every metric's relevance is 0.5 (cos, inner product, 1 / (1 + 1)).
        assert rel[1][1] == pytest.approx(0.5, abs=1e-5)
        for threshold, want in [(0.45, ["0", "60"]), (0.55, ["0"])]:
            retriever = store.as_retriever(
                search_type="similarity_score_threshold",
                search_kwargs={"score_threshold": threshold, "k": 3},
            )
            assert [d.page_content for d in retriever.invoke("0")] == want


def test_mmr_prefers_diverse_documents(tmp_path):
    store = ChassisVectorStore(Axis(), tmp_path / "m.chassis")
    store.add_texts(["0", "1", "2", "45", "90"])
    assert angles(store, "20", 2) == ["2", "1"]
    # After "2", lambda 0.7 weighs 45 degrees (near the query, far from "2") above "1".
    mmr = store.max_marginal_relevance_search("20", k=2, fetch_k=5, lambda_mult=0.7)
    assert [d.page_content for d in mmr] == ["2", "45"]
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 5, "lambda_mult": 0.7})
    assert [d.page_content for d in mmr.invoke("20")] == ["2", "45"]


def test_ids_map_to_chassis_ids_and_a_collision_is_refused(tmp_path, monkeypatch):
    store = ChassisVectorStore(Axis(), tmp_path / "i.chassis")
    store.add_texts(["10"], ids=["doc-a"])
    assert chassis_id("doc-a") in store.index
    assert store.get_by_ids(["doc-a", "missing"]) == [Document(page_content="10", metadata={}, id="doc-a")]
    # Re-adding an id replaces its document.
    store.add_texts(["20 again"], [{"v": 2}], ids=["doc-a"])
    assert store.get_by_ids(["doc-a"]) == [Document(page_content="20 again", metadata={"v": 2}, id="doc-a")]
    assert len(store.index) == 1
    # Two strings on one Chassis id: refused, and the stored document is kept.
    monkeypatch.setattr(vs, "chassis_id", lambda s: 7)
    store.add_texts(["30"], ids=["x"])
    with pytest.raises(ValueError, match="maps to Chassis id 7"):
        store.add_texts(["40"], ids=["y"])
    with pytest.raises(ValueError, match="map to one Chassis id"):
        store.add_texts(["40", "50"], ids=["p", "q"])
    assert store.get_by_ids(["x"])[0].page_content == "30"
    store.delete(["y"])  # names Chassis id 7 but not its document: nothing deleted
    assert store.get_by_ids(["x"])[0].page_content == "30"
    with pytest.raises(ValueError, match="reserved"):
        store.add_texts(["1"], [{"_chassis_text": "no"}])


def test_persists_across_reopen_and_from_documents(tmp_path):
    path = tmp_path / "p.chassis"
    emb = DeterministicFakeEmbedding(size=16)
    docs = [Document(page_content=f"text {i}", metadata={"i": i}, id=f"id{i}") for i in range(50)]
    store = ChassisVectorStore.from_documents(docs, emb, path=path)
    store.delete(["id3"])
    store.close()
    again = ChassisVectorStore(emb, path)
    assert len(again.index) == 49
    assert again.similarity_search("text 7", k=1) == [docs[7]]
    assert again.get_by_ids(["id3"]) == []
    # Unflushed work is dropped when the store is closed without a flush.
    lazy = ChassisVectorStore(emb, tmp_path / "lazy.chassis", flush_on_write=False)
    lazy.add_texts(["a"], ids=["a"])
    lazy.flush()
    lazy.add_texts(["b"], ids=["b"])
    lazy.index._raw.close()  # close without flushing
    assert [d.id for d in ChassisVectorStore(emb, tmp_path / "lazy.chassis").get_by_ids(["a", "b"])] == ["a"]


def test_a_read_only_store_in_another_process_sees_each_flush(tmp_path):
    path = tmp_path / "shared.chassis"
    emb = DeterministicFakeEmbedding(size=16)
    writer = ChassisVectorStore(emb, path)
    writer.add_texts(["first"], ids=["1"])
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from langchain_core.embeddings import DeterministicFakeEmbedding
                from langchain_chassis import ChassisVectorStore
                store = ChassisVectorStore(DeterministicFakeEmbedding(size=16), {str(path)!r}, read_only=True)
                print([d.id for d in store.similarity_search("first", k=5)], flush=True)
                sys.stdin.readline()
                print(sorted(d.id for d in store.similarity_search("first", k=5)), flush=True)
                try:
                    store.add_texts(["x"])
                except Exception as e:
                    print(type(e).__name__, flush=True)
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "['1']"
    writer.add_texts(["second"], ids=["2"])  # flushed: the reader's next search sees it
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "['1', '2']"
    assert child.stdout.readline().strip() == "ReadOnlyError"
    assert child.wait(timeout=60) == 0


def test_a_large_batch(tmp_path):
    emb = DeterministicFakeEmbedding(size=32)
    n = 20_000
    texts = [f"doc {i}" for i in range(n)]
    store = ChassisVectorStore(emb, tmp_path / "big.chassis")
    ids = store.add_texts(texts, [{"i": i, "half": i % 2} for i in range(n)])
    assert len(ids) == n and len(store.index) == n
    sample = list(range(0, n, 997))
    hits = [store.similarity_search(texts[i], k=1)[0] for i in sample]
    assert sum(h.page_content == texts[i] for h, i in zip(hits, sample)) >= 0.95 * len(sample)
    odd = store.similarity_search(texts[11], k=5, filter={"half": 1})
    assert odd[0].page_content == texts[11] and all(d.metadata["half"] == 1 for d in odd)


def test_keyword_and_hybrid_search_over_the_same_file(tmp_path):
    from langchain_chassis import ChassisHybridRetriever

    store = ChassisVectorStore(Axis(), tmp_path / "k.chassis")
    texts = ["0 rust parser", "10 python web framework", "20 rust web server", "80 python parser", "85 json"]
    store.add_texts(texts, [{"n": i} for i in range(5)], ids=[f"d{i}" for i in range(5)])
    # BM25: the documents holding the words, rarer words weighing more (these two tie:
    # ties go by Chassis id, a hash of the string id).
    assert {d.page_content for d in store.keyword_search("parser", k=5)} == {
        "0 rust parser",
        "80 python parser",
    }
    scored = store.keyword_search_with_score("rust web", k=5)
    assert scored[0][0].page_content == "20 rust web server" and scored[0][1] > scored[1][1] > 0
    assert store.similarity_search("parser", k=5, search_type="keyword")[0].id in ("d0", "d3")
    assert [d.page_content for d in store.keyword_search("parser", k=5, filter={"n": {"$gt": 1}})] == [
        "80 python parser"
    ]
    # Hybrid: "84 parser" is nearest "85 json" and "80 python parser" by angle; the keyword
    # leg adds "parser": the document both legs rank high wins.
    hybrid = store.hybrid_search("84 parser", k=3)
    assert hybrid[0].page_content == "80 python parser"
    scored = store.hybrid_search_with_score("84 parser", k=3, fusion="relative_score", weights=(0.5, 0.5))
    assert scored[0][0].page_content == "80 python parser" and scored[0][1] <= 1.0 + 1e-6
    assert store.similarity_search("84 parser", k=1, search_type="hybrid")[0].id == "d3"
    with pytest.raises(ValueError, match="search_type"):
        store.similarity_search("0", search_type="fuzzy")
    retriever = store.as_hybrid_retriever(k=2)
    assert isinstance(retriever, ChassisHybridRetriever)
    assert retriever.invoke("84 parser")[0].page_content == "80 python parser"
    keyword = store.as_hybrid_retriever(search_type="keyword", k=5, filter={"n": {"$lt": 2}})
    assert [d.page_content for d in keyword.invoke("rust")] == ["0 rust parser"]
    # Deletes and replacements reach the text index.
    store.delete(["d3"])
    assert [d.id for d in store.keyword_search("parser", k=5)] == ["d0"]
    store.add_texts(["5 parser parser"], ids=["d0"])
    assert [d.page_content for d in store.keyword_search("parser", k=5)] == ["5 parser parser"]
    # A store whose file was made without the index gets it on request.
    plain = ChassisVectorStore(Axis(), tmp_path / "p.chassis", full_text=False)
    plain.add_texts(["0 alpha", "45 beta"])
    with pytest.raises(ValueError, match="enable_full_text"):
        plain.keyword_search("alpha")
    plain.enable_full_text()
    assert [d.page_content for d in plain.keyword_search("beta")] == ["45 beta"]
    plain.close()
    reopened = ChassisVectorStore(Axis(), tmp_path / "p.chassis", read_only=True)
    assert [d.page_content for d in reopened.keyword_search("alpha")] == ["0 alpha"]
