"""ChassisVectorStore for LlamaIndex: add, query with every MetadataFilters operator Chassis
supports and AND / OR / NOT, doc_ids and node_ids, delete by document, persistence, and use
through a VectorStoreIndex."""

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from llama_index.vector_stores.chassis import ChassisVectorStore, to_chassis_filter


def node(i: int) -> TextNode:
    a = np.deg2rad(i)
    n = TextNode(
        text=f"node {i}",
        id_=f"n{i}",
        embedding=[float(np.cos(a)), float(np.sin(a)), 0.0],
        metadata={"i": i, "parity": "odd" if i % 2 else "even", "tags": ["low"] if i < 10 else ["high", "x"], "name": f"n{i}"},
    )
    n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i // 5}")
    return n


@pytest.fixture()
def store(tmp_path):
    s = ChassisVectorStore(tmp_path / "li.chassis")
    s.add([node(i) for i in range(20)])
    return s


def query(store, k=20, filters=None, **kw):
    q = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=k, filters=filters, **kw)
    return [n.node_id for n in store.query(q).nodes]


def F(key, op, value):
    return MetadataFilters(filters=[MetadataFilter(key=key, operator=op, value=value)])


def test_query_returns_nearest_with_text_and_metadata(store):
    r = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=3))
    assert r.ids == ["n0", "n1", "n2"]
    assert r.nodes[1].get_content() == "node 1" and r.nodes[1].metadata["i"] == 1
    assert r.nodes[1].ref_doc_id == "doc0"
    assert r.similarities[0] == pytest.approx(1.0) and r.similarities[1] < 1.0


@pytest.mark.parametrize(
    "op,value,want",
    [
        (FilterOperator.EQ, 3, [3]),
        (FilterOperator.NE, 0, list(range(1, 20))),
        (FilterOperator.GT, 17, [18, 19]),
        (FilterOperator.GTE, 18, [18, 19]),
        (FilterOperator.LT, 2, [0, 1]),
        (FilterOperator.LTE, 1, [0, 1]),
        (FilterOperator.IN, [4, 7], [4, 7]),
        (FilterOperator.NIN, list(range(2, 20)), [0, 1]),
    ],
)
def test_comparison_operators(store, op, value, want):
    assert query(store, filters=F("i", op, value)) == [f"n{i}" for i in want]


def test_list_operators_and_is_empty(store, tmp_path):
    assert query(store, filters=F("tags", FilterOperator.CONTAINS, "low")) == [f"n{i}" for i in range(10)]
    assert query(store, filters=F("tags", FilterOperator.ANY, ["low", "x"])) == [f"n{i}" for i in range(20)]
    assert query(store, filters=F("tags", FilterOperator.ALL, ["high", "x"])) == [f"n{i}" for i in range(10, 20)]
    extra = TextNode(text="bare", id_="bare", embedding=[0.0, 1.0, 0.0], metadata={"tags": [], "i": None})
    store.add([extra])
    assert query(store, filters=F("tags", FilterOperator.IS_EMPTY, None)) == ["bare"]
    assert query(store, filters=F("i", FilterOperator.IS_EMPTY, None)) == ["bare"]
    assert query(store, filters=F("name", FilterOperator.IS_EMPTY, None)) == ["bare"]
    # The node comes back as it was added, its empty list included.
    assert store.get_nodes(node_ids=["bare"])[0].metadata == {"tags": [], "i": None}
    with pytest.raises(ValueError, match="text_match"):
        query(store, filters=F("name", FilterOperator.TEXT_MATCH, "n1"))


def test_and_or_not_and_nesting(store):
    both = MetadataFilters(
        filters=[MetadataFilter(key="parity", value="even"), MetadataFilter(key="i", operator=FilterOperator.LT, value=5)],
        condition=FilterCondition.AND,
    )
    assert query(store, filters=both) == ["n0", "n2", "n4"]
    either = MetadataFilters(
        filters=[MetadataFilter(key="i", value=1), MetadataFilter(key="i", value=19)], condition=FilterCondition.OR
    )
    assert query(store, filters=either) == ["n1", "n19"]
    neither = MetadataFilters(filters=[MetadataFilter(key="i", operator=FilterOperator.GTE, value=2)], condition=FilterCondition.NOT)
    assert query(store, filters=neither) == ["n0", "n1"]
    nested = MetadataFilters(filters=[both, either], condition=FilterCondition.OR)
    assert query(store, filters=nested) == ["n0", "n1", "n2", "n4", "n19"]
    assert to_chassis_filter(both) == {"$and": [{"parity": {"$eq": "even"}}, {"i": {"$lt": 5}}]}


def test_doc_ids_node_ids_delete_and_persistence(store, tmp_path):
    assert query(store, doc_ids=["doc1"]) == ["n5", "n6", "n7", "n8", "n9"]
    assert query(store, node_ids=["n3", "n12"]) == ["n3", "n12"]
    store.delete("doc0")
    assert query(store, k=3) == ["n5", "n6", "n7"]
    assert [n.node_id for n in store.get_nodes(node_ids=["n6", "n1"])] == ["n6"]
    store.delete_nodes(node_ids=["n6"])
    store.add([TextNode(text="new five", id_="n5", embedding=[0.0, 1.0, 0.0], metadata={"i": 5})])
    store.close()
    again = ChassisVectorStore(tmp_path / "li.chassis")
    assert query(again, k=2) == ["n7", "n8"]
    assert again.get_nodes(node_ids=["n5"])[0].get_content() == "new five"
    assert len(again.client) == 14
    again.clear()
    assert query(again) == []


def test_a_vector_store_index_over_chassis(tmp_path):
    store = ChassisVectorStore(tmp_path / "vsi.chassis")
    ctx = StorageContext.from_defaults(vector_store=store)
    docs = [Document(text=f"document number {i}", id_=f"d{i}", metadata={"n": i}) for i in range(30)]
    index = VectorStoreIndex.from_documents(docs, storage_context=ctx, embed_model=MockEmbedding(embed_dim=8))
    retriever = index.as_retriever(
        similarity_top_k=3, filters=MetadataFilters(filters=[MetadataFilter(key="n", value=7)])
    )
    hits = retriever.retrieve("anything")
    assert [h.node.metadata["n"] for h in hits] == [7]
    index.delete_ref_doc("d7")
    assert retriever.retrieve("anything") == []


def test_text_search_and_hybrid_modes(tmp_path):
    from llama_index.core.vector_stores.types import VectorStoreQueryMode

    s = ChassisVectorStore(tmp_path / "t.chassis")
    texts = {0: "rust parser library", 10: "python web framework", 20: "rust web server", 80: "python parser", 85: "json"}
    nodes = []
    for i, t in texts.items():
        a = np.deg2rad(i)
        nodes.append(TextNode(text=t, id_=f"t{i}", embedding=[float(np.cos(a)), float(np.sin(a)), 0.0], metadata={"i": i}))
    s.add(nodes)
    a = np.deg2rad(84)
    emb = [float(np.cos(a)), float(np.sin(a)), 0.0]
    # BM25 alone: the nodes holding the words; the similarities are their scores.
    r = s.query(VectorStoreQuery(query_str="parser", similarity_top_k=5, mode=VectorStoreQueryMode.TEXT_SEARCH))
    assert sorted(r.ids) == ["t0", "t80"] and r.similarities[0] > 0
    assert r.nodes[0].get_content() in ("rust parser library", "python parser")
    r = s.query(
        VectorStoreQuery(
            query_str="parser", similarity_top_k=5, mode=VectorStoreQueryMode.TEXT_SEARCH, filters=F("i", FilterOperator.GT, 5)
        )
    )
    assert r.ids == ["t80"]
    # Hybrid: nearest by angle are t85 then t80; the text leg adds "parser" to t80.
    r = s.query(VectorStoreQuery(query_embedding=emb, query_str="parser", similarity_top_k=2, mode=VectorStoreQueryMode.HYBRID))
    assert r.ids[0] == "t80"
    # alpha 1: the vector leg alone decides; alpha 0: the text leg alone.
    r = s.query(
        VectorStoreQuery(query_embedding=emb, query_str="parser", similarity_top_k=1, mode=VectorStoreQueryMode.HYBRID, alpha=1.0)
    )
    assert r.ids == ["t85"]
    r = s.query(
        VectorStoreQuery(
            query_embedding=emb, query_str="rust library", similarity_top_k=1, mode=VectorStoreQueryMode.HYBRID, alpha=0.0
        )
    )
    assert r.ids == ["t0"]
    with pytest.raises(ValueError, match="query_str"):
        s.query(VectorStoreQuery(query_embedding=emb, similarity_top_k=1, mode=VectorStoreQueryMode.HYBRID))
    with pytest.raises(ValueError, match="not supported"):
        s.query(VectorStoreQuery(query_embedding=emb, similarity_top_k=1, mode=VectorStoreQueryMode.SPARSE))
    # Deleting a node takes it out of the text index too; the stored node keeps its text.
    s.delete_nodes(["t80"])
    r = s.query(VectorStoreQuery(query_str="parser", similarity_top_k=5, mode=VectorStoreQueryMode.TEXT_SEARCH))
    assert r.ids == ["t0"] and r.nodes[0].get_content() == "rust parser library"
    assert "_chassis_text" not in r.nodes[0].metadata
    # A file made without the index gets it on request.
    plain = ChassisVectorStore(tmp_path / "p.chassis", full_text=False)
    plain.add(nodes[:2])
    with pytest.raises(ValueError, match="enable_full_text"):
        plain.query(VectorStoreQuery(query_str="rust", similarity_top_k=1, mode=VectorStoreQueryMode.TEXT_SEARCH))
    plain.enable_full_text()
    r = plain.query(VectorStoreQuery(query_str="rust", similarity_top_k=1, mode=VectorStoreQueryMode.TEXT_SEARCH))
    assert r.ids == ["t0"]
