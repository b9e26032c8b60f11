"""``ChassisVectorStore``: LangChain's ``VectorStore`` over one Chassis index file.

What it keeps where:

* Each document is one vector in the file, stored under a Chassis id (a ``uint64``) derived
  from its LangChain id (a string) by :func:`chassis_id` (the first 8 bytes of its BLAKE2b
  digest). Its text and the string id travel in its metadata under the reserved keys
  ``_chassis_text`` and ``_chassis_id``, beside the document's own metadata keys, so filters
  name the document's keys directly.
* Adding a document under an id that is stored replaces it (vector, text and metadata), as
  LangChain's stores do. Two different strings that hash to one Chassis id are refused with a
  ``ValueError`` (the stored string id is compared on every add), never merged.
* Every ``add_*`` and ``delete`` call is flushed (made durable) before it returns, unless
  the store was made with ``flush_on_write=False`` (then call :meth:`flush`).
* The texts are indexed for full-text search in the same file (``full_text=True``, the
  default, at creation): :meth:`keyword_search` ranks by BM25, :meth:`hybrid_search` fuses
  BM25 with the vector search (reciprocal rank fusion by default), and
  ``similarity_search(..., search_type="keyword" | "hybrid")`` does the same through
  LangChain's usual call; :meth:`as_hybrid_retriever` gives a retriever of either kind.

The file is created by the first add (its dimensions come from the first embedding). A store
opened with ``read_only=True`` takes no lock and works beside a writer in another process,
each search seeing that writer's last flush.
"""

from __future__ import annotations

import hashlib
import math
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import chassis
import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

TEXT_KEY = "_chassis_text"
ID_KEY = "_chassis_id"
_RESERVED = (TEXT_KEY, ID_KEY)


def chassis_id(doc_id: str) -> int:
    """The Chassis id (a ``uint64``) a LangChain string id is stored under."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")


def _cosine_relevance(distance: float) -> float:
    # Chassis cosine distance is 1 - cos (0 to 2): relevance is cos, clipped to [0, 1].
    return max(0.0, min(1.0, 1.0 - distance))


def _l2_relevance(distance: float) -> float:
    # Chassis l2 distance is the squared Euclidean distance: 1 / (1 + Euclidean distance).
    return 1.0 / (1.0 + math.sqrt(max(distance, 0.0)))


def _ip_relevance(distance: float) -> float:
    # Chassis ip distance is 1 - <q, v>: relevance is <q, v>, clipped to [0, 1] (for unit
    # vectors the same as cosine's).
    return max(0.0, min(1.0, 1.0 - distance))


class ChassisVectorStore(VectorStore):
    """A LangChain vector store in one Chassis file.

    ``embedding``: the embedding model. ``path``: the index file (created by the first add if
    it doesn't exist). ``metric``: ``"cosine"`` (default), ``"l2"`` or ``"ip"``, used when the
    file is created (an existing file keeps its own). ``M`` and ``ef_construction``: graph
    parameters at creation. ``ef_search``: beam width of searches (default max(64, k)).
    ``read_only``: open without the writer's lock, beside a writer in another process.
    ``flush_on_write``: make every add and delete durable before it returns (default).
    ``full_text``: index the texts for keyword and hybrid search when the file is created
    (default); a file created without it gets the index from :meth:`enable_full_text`.
    """

    def __init__(
        self,
        embedding: Embeddings,
        path: str | os.PathLike,
        *,
        metric: str = "cosine",
        M: int = 16,
        ef_construction: int = 200,
        ef_search: Optional[int] = None,
        read_only: bool = False,
        flush_on_write: bool = True,
        full_text: bool = True,
    ) -> None:
        if metric not in ("cosine", "l2", "ip"):
            raise ValueError(f'metric must be "cosine", "l2" or "ip", got {metric!r}')
        self._embedding = embedding
        self._path = Path(path)
        self._metric = metric
        self._M = int(M)
        self._ef_construction = int(ef_construction)
        self._ef_search = ef_search
        self._read_only = bool(read_only)
        self._flush_on_write = bool(flush_on_write)
        self._full_text = bool(full_text)
        self._index: Optional[chassis.Index] = None
        if self._path.exists():
            self._index = chassis.Index.open(self._path, read_only=self._read_only)
            self._metric = self._index.metric
        elif self._read_only:
            raise FileNotFoundError(f"no Chassis index at {self._path}")

    # -- what LangChain asks of a store -------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    @property
    def index(self) -> Optional[chassis.Index]:
        """The open Chassis index (``None`` until the first add creates the file)."""
        return self._index

    def _writer(self, dims: int) -> chassis.Index:
        if self._read_only:
            raise chassis.ReadOnlyError("this store was opened with read_only=True")
        if self._index is None and self._path.exists():
            self._index = chassis.Index.open(self._path)
        if self._index is None:
            self._index = chassis.Index.create(
                self._path,
                dims=dims,
                metric=self._metric,
                M=self._M,
                ef_construction=self._ef_construction,
                text_fields=[TEXT_KEY] if self._full_text else None,
            )
        return self._index

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: Optional[list[dict]] = None,
        *,
        ids: Optional[list[str]] = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and store ``texts``; returns their ids (new UUIDs where none are given). A
        text under an id already stored replaces it."""
        texts = list(texts)
        if not texts:
            return []
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"{len(metadatas)} metadatas for {len(texts)} texts")
        if ids is None:
            ids = [str(uuid.uuid4()) for _ in texts]
        else:
            ids = [str(uuid.uuid4()) if i is None else str(i) for i in ids]
            if len(ids) != len(texts):
                raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        vectors = np.asarray(self._embedding.embed_documents(texts), dtype=np.float32)
        return self._store(texts, vectors, metadatas, ids)

    def _store(
        self,
        texts: list[str],
        vectors: np.ndarray,
        metadatas: Optional[list[dict]],
        ids: list[str],
    ) -> list[str]:
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError("one embedding per text expected")
        ix = self._writer(vectors.shape[1])
        # One row per id: a later row with the same id replaces an earlier one.
        last = {doc_id: row for row, doc_id in enumerate(ids)}
        rows = sorted(last.values())
        keys: dict[int, str] = {}
        docs = []
        for row in rows:
            doc_id = ids[row]
            key = chassis_id(doc_id)
            if keys.get(key, doc_id) != doc_id:
                raise ValueError(f"ids {keys[key]!r} and {doc_id!r} map to one Chassis id {key}")
            keys[key] = doc_id
            meta = dict(metadatas[row]) if metadatas is not None and metadatas[row] else {}
            for k in _RESERVED:
                if k in meta:
                    raise ValueError(f"metadata key {k!r} is reserved by ChassisVectorStore")
            meta[TEXT_KEY] = texts[row]
            meta[ID_KEY] = doc_id
            docs.append(meta)
        key_list = list(keys)
        stored = [key for key in key_list if key in ix]
        if stored:
            for key, meta in zip(stored, ix.get_metadata(stored)):
                if meta.get(ID_KEY) != keys[key]:
                    raise ValueError(
                        f"id {keys[key]!r} maps to Chassis id {key}, which holds the "
                        f"document {meta.get(ID_KEY)!r}: refusing to replace it"
                    )
        # New ids are added as one batch (on every core), stored ones replaced.
        ix.upsert(vectors[rows], ids=key_list, metadata=docs)
        if self._flush_on_write:
            ix.flush()
        return ids

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Store ``documents``; their ``id`` (or ``ids=``) is honoured, new UUIDs otherwise."""
        ids = kwargs.pop("ids", None)
        if ids is None:
            ids = [doc.id for doc in documents]
        return self.add_texts(
            [doc.page_content for doc in documents],
            [dict(doc.metadata) for doc in documents],
            ids=ids,
            **kwargs,
        )

    def delete(self, ids: Optional[list[str]] = None, **kwargs: Any) -> Optional[bool]:
        """Delete the documents with these ids; ids not stored are ignored."""
        if ids is None:
            raise ValueError("delete needs ids (to remove the whole store, delete its file)")
        if self._index is None:
            return True
        ix = self._writer(self._index.dims)
        keys = []
        for doc_id in dict.fromkeys(str(i) for i in ids):
            key = chassis_id(doc_id)
            if key in ix and ix.get_metadata(key).get(ID_KEY) == doc_id:
                keys.append(key)
        if keys:
            ix.delete(keys)
            if self._flush_on_write:
                ix.flush()
        return True

    def flush(self) -> None:
        """Make every add and delete durable (needed only with ``flush_on_write=False``)."""
        if self._index is not None and not self._read_only:
            self._index.flush()

    def close(self) -> None:
        """Flush and close the file (the next add opens it again)."""
        if self._index is not None:
            self._index.close()
            self._index = None

    def _documents(self, keys: Sequence[int]) -> list[Document]:
        out = []
        for meta in self._index.get_metadata(list(keys)) if keys else []:
            text = meta.pop(TEXT_KEY, "")
            doc_id = meta.pop(ID_KEY, None)
            # The fields are a str, a dict and a str (or None) read back from the file: build
            # without pydantic's validation, which cost a search a third of its time.
            out.append(Document.model_construct(page_content=text, metadata=meta, id=doc_id))
        return out

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents with these ids, in the order given; missing ids are skipped."""
        if self._index is None:
            return []
        keys = []
        for doc_id in ids:
            key = chassis_id(str(doc_id))
            if key in self._index:
                keys.append(key)
        wanted = set(map(str, ids))
        return [d for d in self._documents(keys) if d.id in wanted]

    def _search(
        self, embedding: Sequence[float], k: int, filter: Optional[dict] = None
    ) -> tuple[list[int], list[float]]:
        if self._index is None or len(self._index) == 0:
            return [], []
        ef = self._ef_search if self._ef_search is not None else max(64, k)
        found, dist = self._index.search(
            np.asarray(embedding, dtype=np.float32), k=k, ef=max(ef, k), filter=filter
        )
        keys, dists = [], []
        for key, d in zip(found[0], dist[0]):
            if key != chassis.MISSING_ID:
                keys.append(int(key))
                dists.append(float(d))
        return keys, dists

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents with their distances (smaller is nearer: 1 - cos for
        cosine, squared Euclidean for l2, 1 - inner product for ip). ``filter``: a Chassis
        filter on the documents' metadata, e.g. ``{"source": "a"}`` or
        ``{"year": {"$gte": 2020}}`` (operators ``$eq $ne $gt $gte $lt $lte $in $nin $contains
        $exists $and $or $not``)."""
        keys, dists = self._search(embedding, k, filter)
        return list(zip(self._documents(keys), dists))

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return self.similarity_search_with_score_by_vector(
            self._embedding.embed_query(query), k, filter=filter
        )

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter)]

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        filter: Optional[dict] = None,
        search_type: str = "similarity",
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest ``query``; ``search_type="keyword"`` ranks by BM25
        instead and ``"hybrid"`` fuses both (keyword arguments as in
        :meth:`hybrid_search_with_score`)."""
        if search_type == "keyword":
            return self.keyword_search(query, k, filter)
        if search_type == "hybrid":
            return self.hybrid_search(query, k, filter, **kwargs)
        if search_type != "similarity":
            raise ValueError(
                f'search_type must be "similarity", "keyword" or "hybrid", got {search_type!r}'
            )
        return [d for d, _ in self.similarity_search_with_score(query, k, filter=filter)]

    # -- full-text and hybrid search --------------------------------------------------------

    def enable_full_text(self) -> None:
        """Index the stored texts for keyword and hybrid search (for a file created with
        ``full_text=False`` or by an older version of this store); committed at once."""
        if self._index is None:
            self._full_text = True
            return
        ix = self._writer(self._index.dims)
        if not any(f["name"] == TEXT_KEY for f in ix.text_fields):
            ix.set_text_fields([TEXT_KEY])
            ix.flush()

    def _has_full_text(self) -> bool:
        if any(f["name"] == TEXT_KEY for f in self._index.text_fields):
            return True
        raise ValueError(
            "this store's file has no full-text index: call store.enable_full_text() once "
            "(stores created with full_text=True, the default, have one)"
        )

    def keyword_search_with_score(
        self, query: str, k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents whose text best matches ``query`` by BM25 (higher is better),
        among those passing ``filter``."""
        if self._index is None or len(self._index) == 0:
            return []
        self._has_full_text()
        found, scores = self._index.search_text(query, k=k, filter=filter)
        pairs = [(int(i), float(s)) for i, s in zip(found[0], scores[0]) if i != chassis.MISSING_ID]
        return list(zip(self._documents([i for i, _ in pairs]), [s for _, s in pairs]))

    def keyword_search(
        self, query: str, k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`keyword_search_with_score` without the scores."""
        return [d for d, _ in self.keyword_search_with_score(query, k, filter)]

    def hybrid_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: Optional[dict] = None,
        *,
        fusion: str = "rrf",
        weights: tuple[float, float] = (1.0, 1.0),
        depth: Optional[int] = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents by fusing the vector search for ``query``'s embedding
        and BM25 for its text, with the fused score (higher is better). ``fusion``:
        ``"rrf"`` (reciprocal rank fusion, the default: robust when queries paraphrase or
        misspell) or ``"relative_score"`` (min-max normalised scores, weighted: follows
        keyword matches closely with e.g. ``weights=(0.3, 0.7)``). ``weights``: (vector,
        text). ``depth``: candidates per leg (default max(k, 50)). ``filter`` applies to both
        legs."""
        if self._index is None or len(self._index) == 0:
            return []
        self._has_full_text()
        ef = self._ef_search if self._ef_search is not None else max(64, k)
        found, scores = self._index.search(
            np.asarray(self._embedding.embed_query(query), dtype=np.float32),
            k=k,
            ef=max(ef, k),
            filter=filter,
            text=query,
            fusion=fusion,
            weights=weights,
            depth=depth,
        )
        pairs = [(int(i), float(s)) for i, s in zip(found[0], scores[0]) if i != chassis.MISSING_ID]
        return list(zip(self._documents([i for i, _ in pairs]), [s for _, s in pairs]))

    def hybrid_search(
        self, query: str, k: int = 4, filter: Optional[dict] = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`hybrid_search_with_score` without the scores."""
        return [d for d, _ in self.hybrid_search_with_score(query, k, filter, **kwargs)]

    def as_hybrid_retriever(self, **kwargs: Any) -> "ChassisHybridRetriever":
        """A retriever over this store: ``search_type="hybrid"`` (default) or ``"keyword"``,
        ``k``, ``filter``, ``fusion``, ``weights``, ``depth``."""
        return ChassisHybridRetriever(store=self, **kwargs)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Relevance in [0, 1] from the metric's distance: cos for cosine, the inner product
        for ip (both clipped to [0, 1]), 1 / (1 + Euclidean distance) for l2."""
        return {"cosine": _cosine_relevance, "l2": _l2_relevance, "ip": _ip_relevance}[
            self._metric
        ]

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Optional[dict] = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance among the ``fetch_k`` nearest (stored vectors, which
        under cosine are the normalised embeddings)."""
        keys, _ = self._search(embedding, max(fetch_k, k), filter)
        if not keys:
            return []
        vectors = self._index.get(keys)
        chosen = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float32), list(vectors), lambda_mult=lambda_mult, k=k
        )
        docs = self._documents(keys)
        return [docs[i] for i in chosen]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: Optional[dict] = None,
        **kwargs: Any,
    ) -> list[Document]:
        return self.max_marginal_relevance_search_by_vector(
            self._embedding.embed_query(query), k, fetch_k, lambda_mult, filter=filter
        )

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: Optional[list[dict]] = None,
        *,
        ids: Optional[list[str]] = None,
        path: Optional[str | os.PathLike] = None,
        **kwargs: Any,
    ) -> "ChassisVectorStore":
        """A store at ``path`` (required) holding ``texts``; other keyword arguments go to
        the constructor."""
        if path is None:
            raise ValueError("from_texts needs path= (the index file)")
        store = cls(embedding, path, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


class ChassisHybridRetriever(BaseRetriever):
    """A retriever that ranks a :class:`ChassisVectorStore`'s documents by hybrid search
    (the vector search fused with BM25; ``search_type="hybrid"``, the default) or by BM25
    alone (``search_type="keyword"``). ``k``, ``filter``, ``fusion``, ``weights`` and
    ``depth`` as in :meth:`ChassisVectorStore.hybrid_search_with_score`."""

    store: ChassisVectorStore
    search_type: str = "hybrid"
    k: int = 4
    filter: Optional[dict] = None
    fusion: str = "rrf"
    weights: tuple[float, float] = (1.0, 1.0)
    depth: Optional[int] = None

    model_config = {"arbitrary_types_allowed": True}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.search_type == "keyword":
            return self.store.keyword_search(query, self.k, self.filter)
        if self.search_type != "hybrid":
            raise ValueError(f'search_type must be "hybrid" or "keyword", got {self.search_type!r}')
        return self.store.hybrid_search(
            query,
            self.k,
            self.filter,
            fusion=self.fusion,
            weights=self.weights,
            depth=self.depth,
        )
