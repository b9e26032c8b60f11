"""The systems behind one small interface, with the same parameters for each: Chassis (with
and without int8 or int4 codes, f32 or f16 vectors), hnswlib, FAISS, USearch (f32 and its own
int8) and chassisdb, the upstream engine of Chassis's specification (full and half precision).

Every adapter builds from a float32 matrix with M = 16 and ef_construction = 200, saves to one
file, opens that file in another process, and searches with one thread at a given ef. Cosine
data reaches each system the way its users would pass it: Chassis, hnswlib and USearch take a
cosine metric; FAISS has none, so its vectors and queries are normalised and it searches by
inner product (the same ranking).
"""

import numpy as np

M = 16
EF_CONSTRUCTION = 200


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class Chassis:
    name = "chassis"
    parallel_build = True  # a batch add links on several threads inside the one writer
    codes = "none"
    precision = "f32"

    def version(self):
        import importlib.metadata as md

        return md.version("chassis")

    def build(self, path, base, metric, threads):
        import chassis

        ix = chassis.Index.create(
            path,
            dims=base.shape[1],
            metric=metric,
            M=M,
            ef_construction=EF_CONSTRUCTION,
            codes=self.codes,
            precision=self.precision,
        )
        ix.add(base, threads=threads)
        ix.flush()
        ix.close()

    def open(self, path, metric, dims):
        import chassis

        return chassis.Index.open(path, read_only=True)

    def search(self, h, queries, k, ef):
        ids, _ = h.search(queries, k=k, ef=ef, threads=1)
        return ids

    def distance_count(self, h, queries, k, ef):
        before = h.distance_computations
        h.search(queries, k=k, ef=ef, threads=1)
        return (h.distance_computations - before) / len(queries)

    def files(self, path):
        return [path]


class ChassisInt8(Chassis):
    """Chassis with int8 codes: the walk reads one byte per dimension, the ranking f32."""

    name = "chassis-int8"
    codes = "int8"


class ChassisInt4(Chassis):
    """Chassis with int4 codes: the walk reads half a byte per dimension, the ranking f32."""

    name = "chassis-int4"
    codes = "int4"


class ChassisDB:
    """`chassisdb` (PyPI), the engine the design record Chassis implements came from, with
    full-precision (f32) vectors. Its search beam is fixed when an index is opened
    (`IndexOptions(ef_search=...)`), so each ef of the sweep gets its own read-only handle on
    the same file (a mapping: opening costs microseconds), made once and reused. Its batch add
    links on every core the process may use: the harness's CPU affinity makes "one thread" one
    core for it as for the others."""

    name = "chassisdb"
    parallel_build = True
    precision = "full"

    def version(self):
        import importlib.metadata as md

        return md.version("chassisdb")

    def _metric(self, metric):
        if metric not in ("cosine", "l2"):
            raise SystemExit(f"chassisdb has no {metric} metric")
        return {"cosine": "cosine", "l2": "euclidean"}[metric]

    def _options(self, metric, **kw):
        import chassisdb

        return chassisdb.IndexOptions(
            max_connections=M,
            ef_construction=EF_CONSTRUCTION,
            metric=self._metric(metric),
            precision=self.precision,
            **kw,
        )

    def build(self, path, base, metric, threads):
        import chassisdb

        ix = chassisdb.VectorIndex(str(path), base.shape[1], self._options(metric))
        ix.add_batch(base, ids=np.arange(len(base), dtype=np.uint64))
        ix.flush()
        ix.close()

    def open(self, path, metric, dims):
        return {"path": str(path), "metric": metric, "dims": dims, "by_ef": {}}

    def _handle(self, h, ef):
        import chassisdb

        if ef not in h["by_ef"]:
            h["by_ef"][ef] = chassisdb.VectorIndex(
                h["path"], h["dims"], self._options(h["metric"], ef_search=ef), read_only=True
            )
        return h["by_ef"][ef]

    def search(self, h, queries, k, ef):
        ids, _ = self._handle(h, ef).search_batch(queries, k=k)
        return ids

    # chassisdb reports no distance count.
    distance_count = None

    def files(self, path):
        return [path]


class ChassisDBHalf(ChassisDB):
    """chassisdb with half-precision (IEEE f16) vectors: half the vector bytes."""

    name = "chassisdb-half"
    precision = "half"


class ChassisF16(Chassis):
    """Chassis storing half-precision vectors (format 5): half the vector bytes, walked and
    ranked by the stored halves (every distance exact to them)."""

    name = "chassis-f16"
    precision = "f16"


class ChassisF16Int4(Chassis):
    """Half-precision vectors with int4 codes: the walk reads half a byte per dimension, the
    ranking the halves."""

    name = "chassis-f16-int4"
    precision = "f16"
    codes = "int4"


class Hnswlib:
    name = "hnswlib"
    parallel_build = True

    def version(self):
        import importlib.metadata as md

        return md.version("hnswlib")

    def _space(self, metric):
        return {"cosine": "cosine", "l2": "l2", "ip": "ip"}[metric]

    def build(self, path, base, metric, threads):
        import hnswlib

        p = hnswlib.Index(space=self._space(metric), dim=base.shape[1])
        p.init_index(
            max_elements=len(base), ef_construction=EF_CONSTRUCTION, M=M, random_seed=100
        )
        p.add_items(base, np.arange(len(base)), num_threads=threads)
        p.save_index(str(path))

    def open(self, path, metric, dims):
        import hnswlib

        p = hnswlib.Index(space=self._space(metric), dim=dims)
        p.load_index(str(path))
        p.set_num_threads(1)
        return p

    def search(self, h, queries, k, ef):
        h.set_ef(ef)
        ids, _ = h.knn_query(queries, k=k, num_threads=1)
        return ids

    # Counted by a C++ program over hnswlib's own headers (count_hnswlib.cpp), not here.
    distance_count = None

    def files(self, path):
        return [path]


class Faiss:
    name = "faiss"
    parallel_build = True

    def version(self):
        import faiss

        return faiss.__version__

    def build(self, path, base, metric, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        if metric == "cosine":
            base = _unit(base)
        kind = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
        ix = faiss.IndexHNSWFlat(base.shape[1], M, kind)
        ix.hnsw.efConstruction = EF_CONSTRUCTION
        ix.add(base)
        faiss.write_index(ix, str(path))

    def open(self, path, metric, dims):
        import faiss

        faiss.omp_set_num_threads(1)
        return (faiss.read_index(str(path)), metric)

    def _queries(self, metric, queries):
        return _unit(queries) if metric == "cosine" else queries

    def search(self, h, queries, k, ef):
        ix, metric = h
        ix.hnsw.efSearch = ef
        _, ids = ix.search(self._queries(metric, queries), k)
        return ids

    def distance_count(self, h, queries, k, ef):
        import faiss

        ix, metric = h
        ix.hnsw.efSearch = ef
        faiss.cvar.hnsw_stats.reset()
        ix.search(self._queries(metric, queries), k)
        return faiss.cvar.hnsw_stats.ndis / len(queries)

    def files(self, path):
        return [path]


class FaissMapped(Faiss):
    """FAISS HNSW reading its vectors through a memory map of its file (IO_FLAG_MMAP_IFC)
    instead of into memory: the graph is read in, the vectors are paged in as searches touch
    them. For files larger than memory (bench/ann/larger_than_memory.py)."""

    name = "faiss-mmap"

    def open(self, path, metric, dims):
        import faiss

        faiss.omp_set_num_threads(1)
        return (faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC), metric)


class Usearch:
    name = "usearch"
    parallel_build = True
    dtype = "f32"

    def version(self):
        import usearch

        return usearch.__version__

    def _metric(self, metric):
        return {"cosine": "cos", "l2": "l2sq", "ip": "ip"}[metric]

    def build(self, path, base, metric, threads):
        from usearch.index import Index

        ix = Index(
            ndim=base.shape[1],
            metric=self._metric(metric),
            dtype=self.dtype,
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
            expansion_search=64,
        )
        ix.add(np.arange(len(base)), base, threads=threads)
        ix.save(str(path))

    def open(self, path, metric, dims):
        from usearch.index import Index

        return Index.restore(str(path))

    def search(self, h, queries, k, ef):
        h.expansion_search = ef
        return h.search(queries, k, threads=1).keys

    def distance_count(self, h, queries, k, ef):
        h.expansion_search = ef
        return h.search(queries, k, threads=1).computed_distances / len(queries)

    def files(self, path):
        return [path]


class UsearchI8(Usearch):
    """USearch with its own int8 quantization (vectors stored as i8, no f32 re-ranking)."""

    name = "usearch-i8"
    dtype = "i8"


class UsearchI8View(UsearchI8):
    """USearch int8 viewing its file (`Index.restore(view=True)`: memory-mapped, nothing read
    in). For files larger than memory (bench/ann/larger_than_memory.py)."""

    name = "usearch-i8-view"

    def open(self, path, metric, dims):
        from usearch.index import Index

        return Index.restore(str(path), view=True)


SYSTEMS = {
    s.name: s
    for s in [
        Chassis(),
        ChassisInt8(),
        ChassisInt4(),
        ChassisF16(),
        ChassisF16Int4(),
        Hnswlib(),
        Faiss(),
        FaissMapped(),
        Usearch(),
        UsearchI8(),
        UsearchI8View(),
        ChassisDB(),
        ChassisDBHalf(),
    ]
}
