"""``ChassisVectorStore``: LlamaIndex's vector store over one Chassis index file.

Each node is one vector in the file, under a Chassis id (a ``uint64``) derived from its node
id by :func:`chassis_id` (the first 8 bytes of its BLAKE2b digest). The node itself (text,
relationships, metadata) is kept in the vector's metadata the way LlamaIndex's own stores keep
it (``node_to_metadata_dict``: the node's metadata keys, flat, beside ``_node_content``,
``_node_type``, ``ref_doc_id`` and ``doc_id``), plus the node id under ``_chassis_id``, so
``MetadataFilters`` name the node's metadata keys directly. Adding a node whose id is stored
replaces it; two node ids on one Chassis id are refused with a ``ValueError``. Every ``add``
and ``delete`` is flushed (durable) before it returns.

The node's text is also kept under ``_chassis_text`` and indexed for full-text search in the
same file (``full_text=True``, the default, at creation), so queries run in the modes
``DEFAULT`` (vectors), ``TEXT_SEARCH`` (BM25) and ``HYBRID`` (both fused; ``alpha`` weighs
the vector leg against the text leg).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence

import chassis
import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

ID_KEY = "_chassis_id"
TEXT_KEY = "_chassis_text"

_OPERATORS = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.CONTAINS: "$contains",
}


def chassis_id(node_id: str) -> int:
    """The Chassis id (a ``uint64``) a node id is stored under."""
    return int.from_bytes(hashlib.blake2b(node_id.encode("utf-8"), digest_size=8).digest(), "little")


def _one(f: MetadataFilter) -> dict:
    key, op, value = f.key, f.operator, f.value
    if op in _OPERATORS:
        if op in (FilterOperator.IN, FilterOperator.NIN) and not isinstance(value, list):
            value = [value]
        return {key: {_OPERATORS[op]: value}}
    if op in (FilterOperator.ANY, FilterOperator.ALL):
        values = value if isinstance(value, list) else [value]
        parts = [{key: {"$contains": v}} for v in values]
        return {"$or" if op == FilterOperator.ANY else "$and": parts}
    if op == FilterOperator.IS_EMPTY:
        # Absent or null (`add` leaves empty lists out of the filterable keys).
        return {"$or": [{"$not": {key: {"$exists": True}}}, {key: None}]}
    raise ValueError(
        f"filter operator {op.value!r} is not in Chassis's filter language (docs/FILTERS.md): "
        "use ==, !=, >, >=, <, <=, in, nin, any, all, contains or is_empty"
    )


def to_chassis_filter(filters: Optional[MetadataFilters]) -> Optional[dict]:
    """A Chassis filter (docs/FILTERS.md) from LlamaIndex ``MetadataFilters``, nested ones and
    the ``and`` / ``or`` / ``not`` conditions included."""
    if filters is None or not filters.filters:
        return None
    parts = [
        to_chassis_filter(f) if isinstance(f, MetadataFilters) else _one(f) for f in filters.filters
    ]
    parts = [p for p in parts if p is not None]
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:
        return {"$not": parts[0] if len(parts) == 1 else {"$and": parts}}
    if len(parts) == 1:
        return parts[0]
    return {"$or" if condition == FilterCondition.OR else "$and": parts}


def _relevance(metric: str, distance: float) -> float:
    if metric == "cosine":
        return 1.0 - distance  # cos
    if metric == "ip":
        return 1.0 - distance  # the inner product
    return -distance  # l2: negated squared distance (larger is nearer)


class ChassisVectorStore(BasePydanticVectorStore):
    """LlamaIndex vector store in one Chassis file (``stores_text=True``).

    ``path``: the index file (created by the first add, with the first embedding's
    dimensions). ``metric``: ``"cosine"`` (default), ``"l2"`` or ``"ip"`` at creation.
    ``read_only=True`` opens without the writer's lock, beside a writer in another process.
    ``full_text``: index the nodes' text for ``TEXT_SEARCH`` and ``HYBRID`` queries when the
    file is created (default); :meth:`enable_full_text` adds the index to an existing file.
    Similarities in query results: cos for cosine, the inner product for ip, the negated
    squared distance for l2 (larger is nearer in every case); BM25 for ``TEXT_SEARCH``; the
    fused score for ``HYBRID``.
    """

    stores_text: bool = True
    # Chassis checks metadata itself: scalars and lists of scalars (a list of tags filters
    # with `contains`, `any`, `all`); LlamaIndex's flat check would refuse the lists.
    flat_metadata: bool = False
    path: str
    metric: str = "cosine"
    M: int = 16
    ef_construction: int = 200
    ef_search: Optional[int] = None
    read_only: bool = False
    full_text: bool = True

    _index: Optional[chassis.Index] = PrivateAttr(default=None)

    def __init__(self, path: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__(path=str(path), **kwargs)
        if self.metric not in ("cosine", "l2", "ip"):
            raise ValueError(f'metric must be "cosine", "l2" or "ip", got {self.metric!r}')
        if Path(self.path).exists():
            self._index = chassis.Index.open(self.path, read_only=self.read_only)
            self.metric = self._index.metric
        elif self.read_only:
            raise FileNotFoundError(f"no Chassis index at {self.path}")

    @classmethod
    def class_name(cls) -> str:
        return "ChassisVectorStore"

    @property
    def client(self) -> Optional[chassis.Index]:
        """The open Chassis index (``None`` until the first add creates the file)."""
        return self._index

    def _writer(self, dims: int) -> chassis.Index:
        if self.read_only:
            raise chassis.ReadOnlyError("this store was opened with read_only=True")
        if self._index is None and Path(self.path).exists():
            self._index = chassis.Index.open(self.path)
        if self._index is None:
            self._index = chassis.Index.create(
                self.path,
                dims=dims,
                metric=self.metric,
                M=self.M,
                ef_construction=self.ef_construction,
                text_fields=[TEXT_KEY] if self.full_text else None,
            )
        return self._index

    def enable_full_text(self) -> None:
        """Index the stored nodes' text for ``TEXT_SEARCH`` and ``HYBRID`` queries (for a
        file created with ``full_text=False``); committed at once. Nodes stored by a version
        of this store that kept no ``_chassis_text`` have no text to index: add them again."""
        if self._index is None:
            self.full_text = True
            return
        ix = self._writer(self._index.dims)
        if not any(f["name"] == TEXT_KEY for f in ix.text_fields):
            ix.set_text_fields([TEXT_KEY])
            ix.flush()

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        """Store nodes (with their embeddings); a node whose id is stored replaces it."""
        if not nodes:
            return []
        last = {n.node_id: n for n in nodes}
        nodes = list(last.values())
        vectors = np.asarray([n.get_embedding() for n in nodes], dtype=np.float32)
        ix = self._writer(vectors.shape[1])
        keys, docs, seen = [], [], {}
        for n in nodes:
            key = chassis_id(n.node_id)
            if seen.setdefault(key, n.node_id) != n.node_id:
                raise ValueError(f"node ids {seen[key]!r} and {n.node_id!r} map to one Chassis id")
            meta = node_to_metadata_dict(n, remove_text=False, flat_metadata=self.flat_metadata)
            # The node comes back from `_node_content`; the top-level keys are what filters
            # see. An empty list there would read as present, so `is_empty` leaves it out.
            meta = {k: v for k, v in meta.items() if v != []}
            meta[ID_KEY] = n.node_id
            meta[TEXT_KEY] = n.get_content(metadata_mode=MetadataMode.NONE)
            keys.append(key)
            docs.append(meta)
        stored = [k for k in keys if k in ix]
        if stored:
            for k, meta in zip(stored, ix.get_metadata(stored)):
                if meta.get(ID_KEY) != seen[k]:
                    raise ValueError(
                        f"node id {seen[k]!r} maps to Chassis id {k}, which holds node "
                        f"{meta.get(ID_KEY)!r}: refusing to replace it"
                    )
        # New ids are added as one batch (on every core), stored ones replaced.
        ix.upsert(vectors, ids=keys, metadata=docs)
        ix.flush()
        return [n.node_id for n in nodes]

    def _matching(self, flt: Optional[dict]) -> list[int]:
        """Every stored Chassis id whose metadata passes ``flt`` (a filtered search for all)."""
        ix = self._index
        if ix is None or len(ix) == 0:
            return []
        probe = np.ones(ix.dims, dtype=np.float32)
        found, _ = ix.search(probe, k=len(ix), filter=flt)
        return [int(k) for k in found[0] if k != chassis.MISSING_ID]

    def _delete(self, keys: list[int]) -> None:
        if keys:
            ix = self._writer(self._index.dims)
            ix.delete(keys)
            ix.flush()

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of the document ``ref_doc_id``."""
        self._delete(self._matching({"ref_doc_id": ref_doc_id}))

    def delete_nodes(
        self,
        node_ids: Optional[List[str]] = None,
        filters: Optional[MetadataFilters] = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes with these ids and/or passing these filters."""
        self._delete([chassis_id(n.node_id) for n in self.get_nodes(node_ids, filters)])

    def get_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None
    ) -> List[BaseNode]:
        """The stored nodes with these ids and/or passing these filters."""
        if self._index is None:
            return []
        parts = [p for p in (to_chassis_filter(filters),) if p is not None]
        if node_ids is not None:
            parts.append({ID_KEY: {"$in": list(node_ids)}})
        if not parts:
            raise ValueError("get_nodes needs node_ids or filters")
        keys = self._matching(parts[0] if len(parts) == 1 else {"$and": parts})
        return self._nodes(keys)

    def _nodes(self, keys: list[int]) -> List[BaseNode]:
        if not keys:
            return []
        out = []
        for meta in self._index.get_metadata(keys):
            meta.pop(ID_KEY, None)
            meta.pop(TEXT_KEY, None)
            out.append(metadata_dict_to_node(meta))
        return out

    def close(self) -> None:
        """Flush and close the file (the next add opens it again)."""
        if self._index is not None:
            self._index.close()
            self._index = None

    def clear(self) -> None:
        """Delete every node (the file stays, holding none)."""
        self._delete(self._matching(None))

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` best nodes that pass ``filters`` and, when given, belong
        to ``doc_ids`` and have ``node_ids``. Modes: ``DEFAULT`` (nearest
        ``query_embedding``), ``TEXT_SEARCH`` (BM25 of ``query_str`` over the nodes' text) and
        ``HYBRID`` (both, fused: reciprocal rank fusion when ``alpha`` is None, else
        relative-score fusion weighing the vector leg ``alpha`` and the text leg
        ``1 - alpha``; ``sparse_top_k`` sets how many candidates each leg returns)."""
        modes = (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID)
        if query.mode not in modes:
            raise ValueError(
                f"query mode {query.mode!r} is not supported; use default, text_search or hybrid"
            )
        if query.mode != VectorStoreQueryMode.TEXT_SEARCH and query.query_embedding is None:
            raise ValueError("ChassisVectorStore queries by embedding: query_embedding is None")
        if query.mode != VectorStoreQueryMode.DEFAULT and not query.query_str:
            raise ValueError(f"query mode {query.mode.value!r} needs query_str")
        if self._index is None or len(self._index) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if query.mode != VectorStoreQueryMode.DEFAULT and not any(
            f["name"] == TEXT_KEY for f in self._index.text_fields
        ):
            raise ValueError(
                "this store's file has no full-text index: call store.enable_full_text() once"
            )
        parts = [p for p in (to_chassis_filter(query.filters),) if p is not None]
        if query.doc_ids:
            parts.append({"ref_doc_id": {"$in": list(query.doc_ids)}})
        if query.node_ids:
            parts.append({ID_KEY: {"$in": list(query.node_ids)}})
        flt = None if not parts else parts[0] if len(parts) == 1 else {"$and": parts}
        k = max(1, int(query.similarity_top_k))
        ef = self.ef_search if self.ef_search is not None else max(64, k)
        keys, sims = [], []
        if query.mode == VectorStoreQueryMode.TEXT_SEARCH:
            found, scores = self._index.search_text(query.query_str, k=k, filter=flt)
            for key, sc in zip(found[0], scores[0]):
                if key != chassis.MISSING_ID:
                    keys.append(int(key))
                    sims.append(float(sc))
        elif query.mode == VectorStoreQueryMode.HYBRID:
            alpha = query.alpha
            if alpha is not None and not 0.0 <= float(alpha) <= 1.0:
                raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
            found, scores = self._index.search(
                np.asarray(query.query_embedding, dtype=np.float32),
                k=k,
                ef=max(ef, k),
                filter=flt,
                text=query.query_str,
                fusion="rrf" if alpha is None else "relative_score",
                weights=(1.0, 1.0) if alpha is None else (float(alpha), 1.0 - float(alpha)),
                depth=query.sparse_top_k,
            )
            for key, sc in zip(found[0], scores[0]):
                if key != chassis.MISSING_ID:
                    keys.append(int(key))
                    sims.append(float(sc))
        else:
            found, dist = self._index.search(
                np.asarray(query.query_embedding, dtype=np.float32), k=k, ef=max(ef, k), filter=flt
            )
            for key, d in zip(found[0], dist[0]):
                if key != chassis.MISSING_ID:
                    keys.append(int(key))
                    sims.append(_relevance(self.metric, float(d)))
        nodes = self._nodes(keys)
        return VectorStoreQueryResult(nodes=nodes, similarities=sims, ids=[n.node_id for n in nodes])

