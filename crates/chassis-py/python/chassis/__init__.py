"""Chassis: embedded vector search in one crash-safe file.

An HNSW index lives in a single file that survives power loss, that any number of processes can
search while one process writes, and whose format later releases will keep reading.

    import numpy as np
    import chassis

    ix = chassis.Index.create("docs.chassis", dims=384, metric="cosine")
    ids = ix.add(np.random.rand(1000, 384).astype(np.float32))   # ids 0..999
    ix.flush()                                                   # durable from here on
    found, distances = ix.search(queries, k=10)                  # (n, 10) arrays

    reader = chassis.Index.open("docs.chassis", read_only=True)  # any process, no lock

Errors are ``chassis.ChassisError`` subclasses: ``CorruptError`` (``NotChassisFileError``),
``TooNewError``, ``LockedError``, ``PoisonedError``, ``ReadOnlyError``,
``DimensionMismatchError``, ``InvalidVectorError``, ``DuplicateIdError``, ``NotFoundError``,
``InvalidArgumentError`` (``IdsExhaustedError``), ``FullError`` and ``StorageError``; each
message says what to do.
"""

from __future__ import annotations

import os

import numpy as np

import sys

from . import _chassis as _native

# The native exceptions say their module is "_chassis"; naming it lets them pickle (to and
# from other processes: multiprocessing, Ray) as themselves.
sys.modules.setdefault("_chassis", _native)

from ._chassis import (  # noqa: F401,E402  (re-exported)
    ChassisError,
    CorruptError,
    DimensionMismatchError,
    DuplicateIdError,
    FullError,
    IdsExhaustedError,
    InvalidArgumentError,
    InvalidVectorError,
    LockedError,
    NotChassisFileError,
    NotFoundError,
    PoisonedError,
    RawCollection as _RawCollection,
    RawIndex as _RawIndex,
    ReadOnlyError,
    StorageError,
    TooNewError,
    __version__,
    apply_patch as _apply_patch,
    resident_bytes as _resident_bytes,
    set_resident_limit as _set_resident_limit,
    shard_of as _shard_of,
)

__all__ = [
    "Index",
    "Collection",
    "shard_of",
    "apply_patch",
    "set_resident_limit",
    "resident_bytes",
    "migrate_hnswlib",
    "MISSING_ID",
    "CODE_KINDS",
    "ChassisError",
    "CorruptError",
    "NotChassisFileError",
    "TooNewError",
    "LockedError",
    "PoisonedError",
    "ReadOnlyError",
    "DimensionMismatchError",
    "InvalidVectorError",
    "DuplicateIdError",
    "NotFoundError",
    "InvalidArgumentError",
    "IdsExhaustedError",
    "FullError",
    "StorageError",
]

#: The id ``search`` puts where fewer than k results exist (its distance is ``inf``).
MISSING_ID = np.iinfo(np.uint64).max

#: Every kind of compact code an index can keep beside its vectors (``codes=`` of
#: :meth:`Index.create`, :meth:`Index.compact` and :class:`Collection`): ``"none"``, ``"int8"``
#: (one byte a dimension), ``"int4"`` (half a byte), as this release's native layer lists them.
CODE_KINDS = tuple(_native.code_kinds())

#: ``search`` pads its answer to ``k`` columns for any ``k`` up to this; a larger ``k`` than
#: the number of live vectors is first lowered to that number (so an absurd ``k`` returns
#: every live vector instead of allocating ``rows × k``).
MAX_PADDED_K = 65_536

#: The most results (rows × columns) one ``search`` call may return; past it the call raises
#: :class:`InvalidArgumentError` before allocating anything (split the batch).
MAX_ANSWER_CELLS = 1 << 28


_F32 = np.dtype(np.float32)


def _matrix(x, dims: int, what: str) -> np.ndarray:
    """A C-contiguous float32 (n, dims) view of ``x``, copying only when needed."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{what} must hold numbers (float32 or float64), not {a.dtype}")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise DimensionMismatchError(
            f"{what} must be one vector or a 2-D array of vectors, got shape {a.shape}"
        )
    if a.shape[1] != dims:
        raise DimensionMismatchError(
            f"{what} have {a.shape[1]} dimensions, the index has {dims}"
        )
    if a.dtype is _F32 and a.flags.c_contiguous:
        return a  # the common case: no ascontiguousarray call (about half of this function)
    return np.ascontiguousarray(a, dtype=np.float32)


def _docs(metadata, n: int):
    """One metadata dict per row (``None`` or ``{}``: no metadata); the native layer converts
    and checks each (str keys; None, bools, numbers, strings, lists of those; numpy scalars
    and arrays as their values; no NaN or infinity)."""
    if metadata is None:
        return None
    if isinstance(metadata, dict):
        metadata = [metadata]
    metadata = list(metadata)
    if len(metadata) != n:
        raise InvalidArgumentError(f"{len(metadata)} metadata dicts for {n} vectors")
    return metadata


def _ids(x, what: str = "ids") -> np.ndarray:
    """A C-contiguous uint64 1-D array of ids from an int, a sequence or an array."""
    if not isinstance(x, np.ndarray):
        # Python ints of 2**63 and above make numpy choose float64 (or object) for a list:
        # take plain ints exactly, as the uint64s they are.
        seq = [x] if isinstance(x, (int, np.integer)) else x
        if isinstance(seq, (list, tuple)) and seq and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in seq
        ):
            if any(v < 0 for v in seq):
                raise InvalidArgumentError(f"{what} must be non-negative")
            if any(v > MISSING_ID for v in seq):
                raise InvalidArgumentError(f"{what} must fit in 64 bits")
            return np.array(seq, dtype=np.uint64)
    a = np.asarray(x)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise InvalidArgumentError(f"{what} must be an int or a 1-D sequence, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, not {a.dtype}")
    if a.size and a.dtype.kind == "i" and int(a.min()) < 0:
        raise InvalidArgumentError(f"{what} must be non-negative")
    return np.ascontiguousarray(a, dtype=np.uint64)


def _text_fields(fields):
    """``[(name, stem, stop_words, lowercase)]`` from names (default analysis) or dicts
    ``{"name": ..., "stem": bool, "stop_words": bool, "lowercase": bool}``."""
    if fields is None:
        return []
    if isinstance(fields, (str, dict)):
        fields = [fields]
    out = []
    for f in fields:
        if isinstance(f, str):
            out.append((f, False, False, True))
        elif isinstance(f, dict):
            unknown = set(f) - {"name", "stem", "stop_words", "lowercase"}
            if unknown or "name" not in f:
                raise InvalidArgumentError(
                    "a text field is a name or a dict with 'name' and optionally 'stem', "
                    f"'stop_words' and 'lowercase'; got keys {sorted(f)}"
                )
            out.append(
                (
                    str(f["name"]),
                    bool(f.get("stem", False)),
                    bool(f.get("stop_words", False)),
                    bool(f.get("lowercase", True)),
                )
            )
        else:
            raise TypeError(f"a text field is a str or a dict, not {type(f).__name__}")
    return out


def _field_dicts(tuples):
    return [
        {"name": n, "stem": stem, "stop_words": stop, "lowercase": lower}
        for n, stem, stop, lower in tuples
    ]


def _texts(text, n: int):
    """One query text per row: a str for a single row, else a sequence of ``n`` strs."""
    if isinstance(text, str):
        texts = [text]
    else:
        texts = list(text)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"query texts must be str, not {type(t).__name__}")
    if n >= 0 and len(texts) != n:
        raise InvalidArgumentError(
            f"{len(texts)} texts for {n} query vectors: give one text per vector"
        )
    return texts


def _filters(filter, n: int):
    """``None``, or one filter dict for every row, or one per row (``None``: unfiltered). The
    native layer converts and checks each dict before any search."""
    if filter is None:
        return None
    if isinstance(filter, dict):
        return [filter]
    filters = list(filter)
    if len(filters) != n:
        raise InvalidArgumentError(
            f"{len(filters)} filters for {n} queries: give one dict for all, "
            "or a list with one per query"
        )
    return filters


#: Past this a ``k`` or ``ef`` means "as many as there are": it is lowered before it reaches
#: the native call (which takes 64-bit sizes).
_HUGE = 1 << 62


def _k_ef(k, ef):
    """``k`` and ``ef`` checked, ``ef`` defaulting to max(64, k). Huge values are lowered to
    2**62 (each search then lowers them to the live count); below 1 is an error."""
    k = int(k)
    if k < 1:
        raise InvalidArgumentError("k must be at least 1")
    ef = max(64, k) if ef is None else int(ef)
    if ef < 1:
        raise InvalidArgumentError("ef must be at least 1")
    return min(k, _HUGE), min(ef, _HUGE)


class Index:
    """An HNSW index in one Chassis file.

    Open it with :meth:`Index.create` or :meth:`Index.open`, never the constructor.

    **One writer, many readers.** ``Index.open(path)`` takes the file's exclusive lock; a second
    writer gets :class:`LockedError` at once. ``Index.open(path, read_only=True)`` takes no lock,
    works in any process while a writer runs, and runs every search on a fresh snapshot of what
    is committed (it never sees unflushed work).

    **All or nothing.** Adds and deletes are visible to the writer's own searches at once and
    become durable together at :meth:`flush`. :meth:`close` (or dropping the object) without a
    flush discards them. As a context manager the index flushes when the block ends normally,
    discards when it raises, and closes either way, as ``sqlite3`` connections commit or roll
    back::

        with chassis.Index.open("docs.chassis") as ix:
            ix.add(vectors)
        # flushed and closed here

    **Threads.** The GIL is released during add, search, get, delete, flush and compact.
    Writes run one at a time; searches (and get, len, info) never wait for them: while one
    Python thread adds a large batch, searches from other threads keep answering, from the
    state before the batch plus its rows as they are linked. A batch :meth:`search` uses every core
    unless ``threads`` says otherwise.
    """

    __slots__ = ("_raw",)

    def __init__(self, *_args, **_kwargs):
        raise TypeError("use chassis.Index.create(...) or chassis.Index.open(...)")

    @classmethod
    def _wrap(cls, raw) -> "Index":
        self = object.__new__(cls)
        self._raw = raw
        return self

    @classmethod
    def create(
        cls,
        path,
        dims: int,
        metric: str = "cosine",
        M: int = 16,
        ef_construction: int = 200,
        format: int = 6,
        codes: str = "none",
        precision: str = "f32",
        text_fields=None,
    ) -> "Index":
        """Create a new index file at ``path`` (which must not exist) and open it as the writer.

        ``metric`` is ``"cosine"`` (vectors are normalised when stored; distance 1 - cos),
        ``"l2"`` (squared Euclidean) or ``"ip"`` (distance 1 - inner product); it is fixed for
        the life of the file. ``M`` is the neighbors per node (layer 0 keeps 2M);
        ``ef_construction`` the beam width while building. ``format`` 6 (the default) stores
        vectors as split halves, which searches walk faster, a segment's high halves together
        (with ``codes``, side by side as in format 4: the walk reads the codes);
        4 stores the same halves side by side in each vector, for files that releases before
        format 6 must open; 3 stores plain f32 vectors, for files that releases reading only
        format 3 must open. ``codes="int8"`` keeps a one-byte
        code per dimension beside each vector (trained once the file holds 1,000 vectors):
        searches walk the graph by the codes, reading a quarter of the bytes, and rank what
        they find by exact distance, so every returned distance stays exact. ``codes="int4"``
        keeps half a byte per dimension, for files larger than memory (ranked by a likely
        bound rather than a proved one). Files with int8 codes have write version 6, with
        int4 codes 7. :data:`CODE_KINDS` lists every kind.

        ``precision="f16"`` stores each value as an IEEE half float (format 5): half the
        vector bytes, each value rounded to the nearest half (about three significant digits)
        when it is added, and a value of magnitude 65,520 or more refused
        (:class:`InvalidVectorError`). Queries stay f32; every returned distance is exact to
        the stored values, and ``get`` returns them (the rounded values). Combines with
        ``codes``. Releases before half precision refuse such a file (read version 5).

        ``text_fields``: metadata keys whose text is indexed for :meth:`search_text` and
        hybrid :meth:`search` (``text=``), e.g. ``["text"]``; each a name (Unicode words,
        lowercased) or a dict ``{"name": "title", "stem": True, "stop_words": True}``
        (English Snowball stemming, Lucene's English stop words). The index lives in the file
        and commits with the documents (write version 9); see :meth:`set_text_fields`.
        """
        return cls._wrap(
            _RawIndex.create(
                str(path), int(dims), metric, int(M), int(ef_construction), int(format),
                str(codes), str(precision), _text_fields(text_fields),
            )
        )

    @classmethod
    def open(cls, path, read_only: bool = False) -> "Index":
        """Open an existing index file.

        As the writer (default): takes the exclusive lock (:class:`LockedError` if another
        writer has it) and recovers from an interrupted flush. With ``read_only=True``: no
        lock, usable beside a writer in another process, every search on a fresh snapshot.
        """
        return cls._wrap(_RawIndex.open(str(path), bool(read_only)))

    @classmethod
    def migrate_hnswlib(cls, src, dst, metric: str) -> "Index":
        """Same as :func:`chassis.migrate_hnswlib`."""
        return migrate_hnswlib(src, dst, metric)

    @property
    def dims(self) -> int:
        """Vector dimensions."""
        return self._raw.dims()

    @property
    def distance_computations(self) -> int:
        """Distance computations made by searches on this handle so far (for benchmarks: per
        query, it measures graph quality independently of the machine)."""
        return self._raw.search_distance_count()

    @property
    def metric(self) -> str:
        """``"cosine"``, ``"l2"`` or ``"ip"``."""
        return self._raw.metric()

    @property
    def read_only(self) -> bool:
        """Whether this handle can only read."""
        return self._raw.read_only()

    @property
    def path(self) -> str:
        """The file's path."""
        return str(self._raw.path())

    def add(self, vectors, ids=None, metadata=None, threads: int = 0) -> np.ndarray:
        """Add one vector (1-D) or many (2-D, one per row); float32 or float64, any layout.

        Returns their ids as a uint64 array. Without ``ids`` the index assigns them (one above
        every id stored so far: 0, 1, 2, ... for an index that never used custom ids); with
        ``ids`` (an int or a sequence, one per vector) those are used, and one that is live or
        repeated raises :class:`DuplicateIdError`. Every row and id is checked first: a bad one
        adds nothing. Visible to this writer's searches at once; durable at :meth:`flush`.

        ``metadata``: a dict per vector (a list of dicts, or one dict for one vector; ``None``
        for none): string keys to None, bools, ints, floats (finite), strings, or lists of
        those; at most 64 KiB encoded per vector. Stored with the vector in the same flush,
        returned by :meth:`get_metadata`, and what ``search(filter=...)`` filters on.

        ``threads``: how many threads link a batch into the graph; 0 uses every core, 1 builds
        exactly the graph that adding the rows one by one builds (the same on every run).
        Readers keep searching the committed state meanwhile.
        """
        m = _matrix(vectors, self.dims, "vectors")
        if ids is not None:
            ids = _ids(ids)
            if ids.shape[0] != m.shape[0]:
                raise InvalidArgumentError(f"{ids.shape[0]} ids for {m.shape[0]} vectors")
        threads = int(threads)
        if threads < 0:
            raise InvalidArgumentError("threads must be 0 (every core) or more")
        return self._raw.add(m, ids, threads, _docs(metadata, m.shape[0]))

    def upsert(self, vectors, ids, metadata=None) -> None:
        """Store each vector (and its metadata) under its id: an add for an id that is not
        live, a replacement of vector and metadata for one that is (the old one is deleted
        in the same flush). The ids not live are added as one batch, on every core; an id
        given twice is stored twice in turn, the later row winning. Durable at :meth:`flush`."""
        m = _matrix(vectors, self.dims, "vectors")
        ids = _ids(ids)
        if ids.shape[0] != m.shape[0]:
            raise InvalidArgumentError(f"{ids.shape[0]} ids for {m.shape[0]} vectors")
        docs = _docs(metadata, m.shape[0]) or [None] * m.shape[0]
        self._raw.upsert(m, ids, docs)

    def set_metadata(self, ids, metadata) -> None:
        """Replace the metadata of one id (a dict) or several (a list of dicts), keeping the
        vectors; every id must be live (:class:`NotFoundError`). Durable at :meth:`flush`.
        Each replacement costs about what an add costs (the id moves to a new slot holding
        the same vector; :meth:`compact` reclaims the old one)."""
        ids = _ids(ids)
        self._raw.set_metadata(ids, _docs(metadata, ids.shape[0]))

    def get_metadata(self, ids):
        """The metadata dict of one id, or a list of dicts for several (``{}`` for a vector
        stored without). :class:`NotFoundError` if an id is not live."""
        scalar = np.ndim(ids) == 0
        out = self._raw.get_metadata(_ids(ids))
        return out[0] if scalar else out

    def delete(self, ids) -> None:
        """Delete one id or many: all of them, or none if any is not live
        (:class:`NotFoundError`). Durable at :meth:`flush`."""
        self._raw.delete(_ids(ids))

    def get(self, ids, metadata: bool = False):
        """The stored vector of one id (1-D) or of several (2-D). Under cosine this is the
        normalised vector that was stored. :class:`NotFoundError` if an id is not live.

        With ``metadata=True``, returns ``(vectors, metadata)``: the vectors as above and the
        metadata dict (one id) or list of dicts (several), as :meth:`get_metadata` gives."""
        scalar = np.ndim(ids) == 0
        out = self._raw.get(_ids(ids))
        out = out[0] if scalar else out
        if metadata:
            return out, self.get_metadata(ids)
        return out

    def search(
        self,
        queries,
        k: int = 10,
        ef: int | None = None,
        threads: int = 0,
        filter=None,
        text=None,
        fusion: str = "rrf",
        weights=(1.0, 1.0),
        depth: int | None = None,
        rrf_k: float = 60.0,
        return_legs: bool = False,
    ):
        """The ``k`` nearest live vectors of each query, nearest first (or, with ``text``,
        the best by hybrid search).

        ``queries``: one vector (1-D) or many (2-D). ``ef``: beam width (default max(64, k);
        higher is more accurate and slower). ``threads``: for a batch, 0 uses every core, 1
        searches on the calling thread's core only. An unfiltered batch is searched on one
        snapshot, each thread walking its next query while the vectors the last one ranks
        are read: in a file larger than memory, pass many queries at once rather than one
        per call.

        ``filter``: only vectors whose metadata passes, as a dict in the style of Chroma,
        Pinecone and Qdrant clients: ``{"tenant": "acme"}``, ``{"year": {"$gte": 2020}}``,
        ``{"tags": {"$contains": "django"}}``, ``{"$or": [...]}``; operators ``$eq $ne $gt
        $gte $lt $lte $in $nin $contains $exists $and $or $not`` (docs/FILTERS.md). One dict
        for every query, or a list with one per query (``None``: unfiltered). A filtered
        search returns exact distances and min(k, live vectors that pass) hits; a malformed
        filter raises :class:`InvalidArgumentError` before any search.

        Returns ``(ids, distances)``: uint64 and float32 arrays of shape (n, k) (n = 1 for a
        1-D query). Where fewer than k live vectors exist, rows are padded with
        :data:`MISSING_ID` and ``inf``. A ``k`` above both :data:`MAX_PADDED_K` and the live
        count is lowered to the live count (the arrays are then that wide); an answer of more
        than :data:`MAX_ANSWER_CELLS` results raises :class:`InvalidArgumentError`.

        **Hybrid search** (``text``: one query text per vector; the index needs text fields):
        a vector leg and a BM25 leg (:meth:`search_text`), each returning ``depth``
        candidates (default max(k, 50)), fused. ``fusion="rrf"`` (the default): reciprocal
        rank fusion, each leg adding ``weight / (rrf_k + rank)``; it needs no tuning and
        suits queries that paraphrase or misspell. ``fusion="relative_score"``: each leg's
        scores min-max normalised over its list, then the weighted sum; on queries that copy
        a document's words (names, codes) it follows BM25 more closely, e.g. with
        ``weights=(0.3, 0.7)``. ``weights=(vector, text)``. The vector leg searches with ef
        at least depth, and the text leg's hits it missed are scored by their exact vector
        distance and merged into it. A filter applies to both legs (each returns only what passes).
        Returns ``(ids, scores)``, fused scores higher is better, padded with
        :data:`MISSING_ID` and ``-inf``; with ``return_legs=True`` also a dict of arrays
        ``vector_rank``, ``vector_distance``, ``text_rank``, ``text_score`` (rank 0 and NaN
        where that leg did not return the hit).
        """
        q = _matrix(queries, self.dims, "queries")
        k, ef = _k_ef(k, ef)
        filters = _filters(filter, q.shape[0])
        # One query runs on the calling thread: handing it to the pool costs more than it saves.
        threads = 1 if q.shape[0] == 1 else int(threads)
        if text is None:
            return self._raw.search(q, k, ef, threads, filters)
        texts = _texts(text, q.shape[0])
        wv, wt = (float(w) for w in weights)
        depth = 0 if depth is None else int(depth)
        if depth < 0:
            raise InvalidArgumentError("depth must be at least 1 (or None for the default)")
        ids, scores, vr, vd, tr, ts = self._raw.search_hybrid(
            q, texts, k, ef, threads, filters, str(fusion), float(rrf_k), wv, wt, depth
        )
        if return_legs:
            legs = {
                "vector_rank": vr,
                "vector_distance": vd,
                "text_rank": tr,
                "text_score": ts,
            }
            return ids, scores, legs
        return ids, scores

    def search_text(self, texts, k: int = 10, filter=None, threads: int = 0):
        """The ``k`` live documents that best match each query text by BM25 over the
        index's text fields (Lucene's formula: k1 1.2, b 0.75, N and n over the live
        documents), best first: exact, every live document holding a query term is scored.
        ``texts``: a str or a list of them. ``filter``: as in :meth:`search` (it narrows the
        candidates; the statistics stay those of every live document).

        Returns ``(ids, scores)``: uint64 and float32 arrays of shape (n, k), padded with
        :data:`MISSING_ID` and ``-inf`` where fewer documents hold a query term. Raises
        :class:`InvalidArgumentError` when the index has no text fields."""
        texts = _texts(texts, -1)
        k, _ = _k_ef(k, None)
        filters = _filters(filter, len(texts))
        threads = 1 if len(texts) == 1 else int(threads)
        return self._raw.search_text(texts, k, threads, filters)

    @property
    def text_fields(self) -> list:
        """The metadata fields indexed for full-text search, as dicts (``name``, ``stem``,
        ``stop_words``, ``lowercase``); empty when none."""
        return _field_dicts(self._raw.text_fields())

    def set_text_fields(self, fields) -> None:
        """Index these metadata fields for full-text search from now on, every document
        already stored included (``[]`` drops the index). Committed by the next
        :meth:`flush`; this handle's searches see it at once. Each field is a name or a dict
        as in :meth:`create`'s ``text_fields``."""
        self._raw.set_text_fields(_text_fields(fields))

    def flush(self) -> None:
        """Make every add and delete since the last flush durable, all together (with the
        user version set since, if any)."""
        self._raw.flush()

    def rollback(self) -> None:
        """Discard every add, delete, metadata change and user version set since the last
        flush, keeping the writer's lock: this handle's searches see the flushed state again
        at once, as readers always did. Pairs a flush with the application's own transaction
        (SQLite, Postgres): flush after your commit, roll back after your rollback. Ids the
        discarded adds got automatically are given again by the next adds."""
        self._raw.rollback()

    @property
    def user_version(self) -> int:
        """A number of the application's (a transaction id, a log position) committed with
        the data: set it before :meth:`flush`, and every reader sees exactly the version that
        was flushed with the state it reads, after any crash. On a writer this is the value
        the next flush commits; on a read-only handle, the newest committed one. A file with
        a non-zero user version needs a release that knows it to be written (write
        version 8)."""
        return int(self._raw.user_version())

    @user_version.setter
    def user_version(self, version: int) -> None:
        version = int(version)
        if not 0 <= version <= MISSING_ID:
            raise InvalidArgumentError(f"user_version must fit in 64 bits unsigned, got {version}")
        self._raw.set_user_version(version)

    def compact(
        self,
        M: int | None = None,
        ef_construction: int | None = None,
        threads: int = 0,
        format: int | None = None,
        codes: str | None = None,
        keep_graph: bool = False,
        precision: str | None = None,
    ) -> None:
        """Rewrite the index into a new file with only its live vectors and a rebuilt graph,
        then rename it over the path: reclaims deleted vectors' space and is the only way to
        change ``M``. Flushes first; every id survives. Needs free space for a second copy.
        ``threads`` link the rebuilt graph as in ``add`` (0: one per CPU; 1: the same graph
        on every run). ``format``: 3, 4 or 6 for the new file, ``codes``: ``"int8"``,
        ``"int4"`` or ``"none"`` (default for both: keep the file's). ``keep_graph=True``
        copies the graph as it is instead of rebuilding it, its slots renumbered so that
        neighbors sit near each other in the file (searches then read fewer pages and cache
        lines, and answer exactly as before); it needs no deleted vectors and the same ``M``
        and ``ef_construction``, else ``InvalidArgumentError`` and nothing changes. Readers in
        other processes move to the new file by themselves. ``precision``: ``"f16"`` rewrites
        the vectors in half precision (each value rounded), ``"f32"`` back to f32 (the halves
        widen exactly; without ``format``, a file that already stores f32 keeps its format);
        default: keep the file's."""
        self._raw.compact(
            M,
            ef_construction,
            threads,
            None if format is None else int(format),
            None if codes is None else str(codes),
            bool(keep_graph),
            None if precision is None else str(precision),
        )

    def backup(self, dst) -> dict:
        """Copy the last committed state (the last ``flush``) to the file ``dst`` while
        writes go on: an online backup, as SQLite's. Searches and writes on this index keep
        running; the copy opens as a plain Chassis file, passes ``check`` and holds exactly
        this index's vectors, ids, metadata and deletes at that state. Repeat into the same
        ``dst`` to ship only what changed since; a missing ``dst``, or one holding another
        index, gets a full copy written beside it and renamed over it, so ``dst`` always
        opens. Unflushed changes are not copied. Works on ``read_only=True`` handles too
        (copying the state they see). Returns what it did: ``sequence``, ``live``,
        ``bytes_shipped``, ``committed_bytes``, ``full_copy``, ``unchanged``, ...
        Raises ``LockedError`` when a writer has ``dst`` open."""
        return self._raw.backup(os.fspath(dst))

    def backup_patch(self, staging, full: bool = False):
        """:meth:`backup` into ``staging`` (a file on this machine that stands for a copy
        elsewhere), returning ``(report, patch)``: ``patch`` is bytes that bring that other
        copy, on a machine that can't see this file system, to the same state with
        :func:`apply_patch`, shipping only what changed since the last patch. ``full=True``
        rewrites ``staging`` whole, so the patch is a full copy (for a copy that is missing
        or out of step: :func:`apply_patch` refuses an incremental patch it can't take)."""
        return self._raw.backup_patch(os.fspath(staging), bool(full))

    def info(self) -> dict:
        """Counts, parameters and file details as a dict."""
        return self._raw.info()

    def close(self) -> None:
        """Close the index and release its lock; unflushed changes are discarded. Idempotent."""
        self._raw.close()

    def __len__(self) -> int:
        return self._raw.len()

    def __contains__(self, id) -> bool:
        try:
            i = int(id)
        except (TypeError, ValueError):
            return False
        return i >= 0 and self._raw.contains(i)

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None and not self._raw.is_closed() and not self.read_only:
                self.flush()
        finally:
            self.close()

    def __repr__(self) -> str:
        if self._raw.is_closed():
            return f"<chassis.Index {self.path!r} closed>"
        mode = "read-only" if self.read_only else "writer"
        return (
            f"<chassis.Index {self.path!r} {mode}: {len(self)} vectors, "
            f"{self.dims} dims, {self.metric}>"
        )


def migrate_hnswlib(src, dst, metric: str) -> Index:
    """Convert an hnswlib index file (``save_index``) into a new Chassis file, open as the writer.

    hnswlib files don't record their space: pass the one the index was built with (``"l2"``,
    ``"ip"`` or ``"cosine"``). Labels become ids and deleted marks become deletes; the graph
    is kept, plus the edges that make every vector reachable, so searches return what
    hnswlib returned at the same ef (rarely other answers at equal or better recall). ``dst``
    must not exist; it appears complete or not at all (written beside it as
    ``<dst>.migrating``, then renamed)::

        ix = chassis.migrate_hnswlib("index.bin", "docs.chassis", "cosine")
    """
    return Index._wrap(_RawIndex.migrate_hnswlib(str(src), str(dst), metric))


def apply_patch(dst, patch: bytes) -> dict:
    """Replay a patch from :meth:`Index.backup_patch` on the copy at ``dst``: a full patch
    writes a new file and renames it over ``dst``; an incremental one needs ``dst`` to hold
    exactly the state the patch starts from (:class:`InvalidArgumentError` otherwise, with
    ``dst`` untouched: ask for a full patch). A crash while replaying leaves ``dst`` at its
    previous state or the new one. Returns what it did, as :meth:`Index.backup`."""
    return _apply_patch(os.fspath(dst), bytes(patch))


def set_resident_limit(limit) -> None:
    """Sets the most bytes of index files this process keeps locked in memory. Only a file
    with codes larger than half the process's memory (the machine's, or its cgroup limit, page
    cache included) locks anything: the bytes every search walks (codes, neighbor lists, slot
    headers), so the page cache can't evict them for the vectors each query reads once.
    ``None`` restores the default, three quarters of that memory; ``0`` turns locking off (the
    page cache alone decides, 2.5 to 3x slower under a tight cap). Applies to files opened and
    segments mapped after the call. Locking needs ``ulimit -l`` (RLIMIT_MEMLOCK) at least the
    bytes locked, or CAP_IPC_LOCK; refused, it is not tried again."""
    if limit is not None:
        limit = int(limit)
        if limit < 0:
            raise InvalidArgumentError(f"resident limit must be >= 0 bytes, got {limit}")
    _set_resident_limit(limit)


def resident_bytes() -> int:
    """Bytes of index files this process holds locked in memory now (see
    :func:`set_resident_limit`); 0 where no file is larger than memory or locks are refused."""
    return int(_resident_bytes())


def shard_of(ids, shards: int) -> np.ndarray:
    """The shard of a :class:`Collection` of ``shards`` shards that each id lives in (a fixed
    mix of the id's bits, modulo ``shards``): how a collection, and :mod:`chassis.ray`, route
    rows. Returns a uint64 array."""
    return _shard_of(_ids(ids), int(shards))


class Collection:
    """Many Chassis files searched as one index: a directory of shard files and a manifest.

    Open it with :meth:`Collection.create` or :meth:`Collection.open`. Ids are global (uint64);
    each row lives in the shard :func:`shard_of` names, so a get, delete or replace touches one
    shard. A search asks every shard (in parallel) for its exact ``k`` nearest and merges them by
    distance: the merged list is the exact top ``k`` of what the shards found, with exact
    distances, as one file's search.

    Writes are per shard and become durable at :meth:`flush`, which flushes every shard and
    then publishes the manifest (``collection.json``, replaced atomically) naming each shard's
    committed state. A crash between two shards' flushes leaves each shard at its own last
    flush (the next writer takes those states and publishes them). ``read_only=True`` opens
    lock-free readers that serve one consistent set: every shard exactly as the last published
    manifest names it, until :meth:`refresh`. Each shard is a plain Chassis file: back it up,
    check it or open it with :class:`Index` on its own (``info()["shard_files"]``).
    """

    __slots__ = ("_raw", "_dims")

    def __init__(self, *_args, **_kwargs):
        raise TypeError("use chassis.Collection.create(...) or chassis.Collection.open(...)")

    @classmethod
    def _wrap(cls, raw) -> "Collection":
        self = object.__new__(cls)
        self._raw = raw
        self._dims = raw.dims()
        return self

    @classmethod
    def create(
        cls,
        path,
        dims: int,
        metric: str = "cosine",
        shards: int = 4,
        M: int = 16,
        ef_construction: int = 200,
        format: int = 6,
        codes: str = "none",
        precision: str = "f32",
    ) -> "Collection":
        """Create a collection of ``shards`` empty shards in the directory ``path`` (created
        if missing; it must not hold a collection) and open it as the writer. The other
        arguments are :meth:`Index.create`'s, for every shard."""
        return cls._wrap(
            _RawCollection.create(
                str(path),
                int(dims),
                metric,
                int(shards),
                int(M),
                int(ef_construction),
                int(format),
                str(codes),
                str(precision),
            )
        )

    @classmethod
    def open(cls, path, read_only: bool = False) -> "Collection":
        """Open a collection: as its writer (every shard's lock; :class:`LockedError` if
        another writer has one), or with ``read_only=True`` as lock-free readers pinned to the
        last published manifest."""
        return cls._wrap(_RawCollection.open(str(path), bool(read_only)))

    @property
    def dims(self) -> int:
        """Vector dimensions."""
        return self._dims

    def add(self, vectors, ids=None, metadata=None) -> np.ndarray:
        """Add rows (as :meth:`Index.add`): each shard takes its rows as one batch, the shards
        in parallel. Without ``ids`` the collection assigns them (one above every id stored;
        never the same id twice, even after a failed call). Returns the ids. Durable at
        :meth:`flush`.

        All or nothing: every row is checked first (dimensions, finite values, metadata
        limits, an id given twice or already live), before any shard is written; a failure
        after that (an I/O error in one shard) takes back what the other shards added, so
        searches see the collection as before the call and the next flush publishes nothing
        of it. Retrying the same call then works."""
        v = _matrix(vectors, self._dims, "vectors")
        ids = None if ids is None else _ids(ids)
        if ids is not None and ids.shape[0] != v.shape[0]:
            raise InvalidArgumentError(f"{ids.shape[0]} ids for {v.shape[0]} vectors")
        return self._raw.add(v, ids, _docs(metadata, v.shape[0]))

    def upsert(self, vectors, ids, metadata=None) -> None:
        """Store each row under its id: an add where the id is not live, a replacement of
        vector and metadata where it is. All or nothing, as :meth:`add` (an id given twice
        in one call raises :class:`DuplicateIdError`). Durable at :meth:`flush`."""
        v = _matrix(vectors, self._dims, "vectors")
        ids = _ids(ids)
        if ids.shape[0] != v.shape[0]:
            raise InvalidArgumentError(f"{ids.shape[0]} ids for {v.shape[0]} vectors")
        self._raw.upsert(v, ids, _docs(metadata, v.shape[0]))

    def set_metadata(self, ids, metadata) -> None:
        """Replace the metadata of one id (a dict) or several (a list of dicts), keeping the
        vectors. All or nothing: every id must be live (:class:`NotFoundError`) and every
        document valid before any shard changes. Durable at :meth:`flush`."""
        ids = _ids(ids)
        docs = _docs(metadata, ids.shape[0])
        if docs is None:
            raise InvalidArgumentError("set_metadata needs the metadata to store")
        self._raw.set_metadata(ids, docs)

    def search(self, queries, k: int = 10, ef: int | None = None, threads: int = 0, filter=None):
        """The ``k`` nearest live vectors of each query over every shard, nearest first, as
        :meth:`Index.search` (``ef`` per shard; ``filter`` one dict for every query).
        ``threads``: shards searched at once (0: one per core, 1: one after another).
        Returns ``(ids, distances)`` of shape (n, k), padded with :data:`MISSING_ID` and
        ``inf``."""
        q = _matrix(queries, self._dims, "queries")
        k, ef = _k_ef(k, ef)
        return self._raw.search(q, k, ef, int(threads), filter)

    def delete(self, ids) -> None:
        """Delete ids, all or nothing: :class:`NotFoundError`, with nothing deleted, if one
        is not live. Durable at :meth:`flush`."""
        self._raw.delete(_ids(ids))

    def get(self, ids):
        """The stored vector of one id (1-D) or several (2-D)."""
        scalar = np.ndim(ids) == 0
        out = self._raw.get_vectors(_ids(ids))
        return out[0] if scalar else out

    def get_metadata(self, ids):
        """The metadata dict of one id, or a list of dicts for several."""
        scalar = np.ndim(ids) == 0
        out = self._raw.get_metadata(_ids(ids))
        return out[0] if scalar else out

    def flush(self) -> None:
        """Flush every shard, then publish the manifest naming their committed states."""
        self._raw.flush()

    def refresh(self) -> bool:
        """A read-only collection moves to the newest published manifest; returns whether
        every shard is exactly as it names (False while a writer is between shard flushes, or
        stopped there: the newest shard states are served). A writer's does nothing."""
        return self._raw.refresh()

    def info(self) -> dict:
        """Shards, their files and committed sequences, the manifest's generation, count."""
        return self._raw.info()

    def close(self) -> None:
        """Flush (a writer) and close every shard. Idempotent."""
        self._raw.close()

    def __len__(self) -> int:
        return int(self._raw.len())

    def __contains__(self, id) -> bool:
        try:
            i = int(id)
        except (TypeError, ValueError):
            return False
        return 0 <= i <= MISSING_ID and self._raw.contains(i)

    def __enter__(self) -> "Collection":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._raw.is_closed():
            return "<chassis.Collection closed>"
        i = self.info()
        kind = "reader" if i["read_only"] else "writer"
        return f"<chassis.Collection {kind} {i['path']!r}: {i['shards']} shards, {i['count']} vectors>"
