"""Chassis collections served on Ray (``pip install chassis[ray]``; docs/SCALING.md).

A :class:`chassis.Collection` is a directory of shard files. This module serves one on a Ray
cluster, over the Rust core (each actor opens plain Chassis files with :mod:`chassis`):

* :func:`build` builds a collection's shards from a large array, or a ``.npy`` file each
  task reads its own rows of, in parallel Ray tasks, one task per shard, each writing its own
  shard file.
* :class:`ServedCollection` starts one writer actor for the collection (adds, deletes and
  flushes go through :class:`chassis.Collection` there) and ``replicas`` reader actors per
  shard, each replica of a shard on a different node (a ``STRICT_SPREAD`` placement group).
  ``search`` fans each batch of queries out to one live replica of every shard and merges
  their exact top ``k`` lists into the exact top ``k`` (as the local collection does); a
  replica whose actor or node died is dropped and the shard's query is retried on another
  replica, so a lost node loses no query while one replica of each shard lives.
* Replicas read the shard files where the writer wrote them when the nodes share a file
  system (``shared_storage=True``: each replica is a lock-free reader that follows every
  flush), or hold a copy on their own node's disk kept current by incremental sync patches
  (``shared_storage=False``: :meth:`ServedCollection.sync` ships each replica only what
  changed since its last sync, made by :meth:`chassis.Index.backup_patch` on the writer's
  node and replayed by :func:`chassis.apply_patch` on the replica's). A replica synced to a
  shard's sequence answers exactly as the shard file did at that sequence.

Nothing here re-implements search, storage or sync: the actors call the Rust core.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import ray
from ray.exceptions import RayError, RayTaskError
from ray.dag import InputNode, MultiOutputNode
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import chassis

__all__ = ["build", "ServedCollection"]


def _shard_error(e: RayTaskError):
    """The error a shard's own search raised (a :class:`chassis.ChassisError`), as itself."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, chassis.ChassisError):
        return cause
    return e


def _get(ref):
    """``ray.get``, with a chassis error raised by the actor re-raised as itself."""
    try:
        return ray.get(ref)
    except RayTaskError as e:
        raise _shard_error(e) from None


def _error_data(e: chassis.ChassisError):
    """A shard's error as plain data (class name, message) for the trip back. Not the
    exception object itself: a compiled graph that carried one in its output stopped
    answering (Ray 2.60: the next execution timed out, and tearing the graph down then
    could crash a node's raylet)."""
    return type(e).__name__, str(e)


def _error_from(data):
    """The :class:`chassis.ChassisError` subclass :func:`_error_data` named, rebuilt."""
    name, message = data
    cls = getattr(chassis, name, None)
    if not (isinstance(cls, type) and issubclass(cls, chassis.ChassisError)):
        cls = chassis.ChassisError
    return cls(message)


def _answers(parts):
    """The shards' answers, raising the first error a shard's search returned."""
    for p in parts:
        if p[3] is not None:
            raise _error_from(p[3])
    return parts


def _merge(parts, k: int):
    """Merge per-shard (ids, distances) arrays of shape (n, k) into the top k per row, by
    distance then id (as the Rust collection's merge)."""
    ids = np.concatenate([p[0] for p in parts], axis=1)
    dist = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((ids, dist), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(dist, order, axis=1)


@ray.remote(num_cpus=0)
class _Writer:
    """The collection's writer: one :class:`chassis.Collection`, and the staging copies that
    make each local replica's sync patches."""

    def __init__(self, path: str):
        self.path = path
        self.c = chassis.Collection.open(path)
        self.staging = os.path.join(path, ".replicas")
        os.makedirs(self.staging, exist_ok=True)

    def add(self, vectors, ids, metadata):
        return self.c.add(vectors, ids=ids, metadata=metadata)

    def delete(self, ids):
        self.c.delete(ids)

    def flush(self) -> List[int]:
        self.c.flush()
        return list(self.c.info()["shard_sequences"])

    def info(self) -> dict:
        return self.c.info()

    def patch(self, shard: int, replica: str, full: bool):
        """The sync patch that brings replica ``replica`` of ``shard`` to the shard's last
        flush (a lock-free reader of the shard file makes it; the writer keeps writing)."""
        files = self.c.info()["shard_files"]
        reader = chassis.Index.open(os.path.join(self.path, files[shard]), read_only=True)
        try:
            staging = os.path.join(self.staging, f"{shard}-{replica}.chassis")
            return reader.backup_patch(staging, full=full)
        finally:
            reader.close()

    def close(self):
        self.c.close()


@ray.remote(num_cpus=0)
class _Replica:
    """One replica of one shard: a lock-free reader of the shard file (shared storage) or of
    a copy on this node (kept current by sync patches)."""

    def __init__(self, shard_path: Optional[str], local_dir: Optional[str]):
        self.local = None
        self.ix = None
        if local_dir is None:
            self.ix = chassis.Index.open(shard_path, read_only=True)
        else:
            os.makedirs(local_dir, exist_ok=True)
            self.local = os.path.join(local_dir, "shard.chassis")

    def apply(self, patch: bytes) -> dict:
        report = chassis.apply_patch(self.local, patch)
        if self.ix is not None:
            self.ix.close()
        self.ix = chassis.Index.open(self.local, read_only=True)
        return report

    def search_packed(self, args):
        """:meth:`search` with its arguments in one tuple (a compiled graph's input)."""
        return self.search(*args)

    def search(self, queries, k: int, ef: int, flt):
        """(ids, distances, seconds this shard's search took, None), or, when the search
        itself fails, (None, None, 0, the error as :func:`_error_data`): returned, not
        raised, and as plain data, because an exception inside a compiled graph, raised or
        returned, breaks the graph (Ray 2.60)."""
        if self.ix is None:
            never = chassis.InvalidArgumentError("this replica was never synced")
            return None, None, 0.0, _error_data(never)
        t = time.perf_counter()
        try:
            ids, dist = self.ix.search(queries, k=k, ef=ef, filter=flt, threads=1)
        except chassis.ChassisError as e:
            return None, None, 0.0, _error_data(e)
        return ids, dist, time.perf_counter() - t, None

    def sequence(self) -> int:
        return -1 if self.ix is None else int(self.ix.info()["sequence"])

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


def _build_shard(path: str, vectors, ids, metadata, threads: int, source=None) -> int:
    if source is not None:
        # Rows of a .npy file on shared storage, read (memory-mapped) by this task only.
        npy, rows = source
        vectors = np.ascontiguousarray(np.load(npy, mmap_mode="r")[rows], dtype=np.float32)
    ix = chassis.Index.open(path)
    try:
        if len(ids):
            ix.add(vectors, ids=ids, metadata=metadata, threads=threads)
        ix.flush()
        return len(ix)
    finally:
        ix.close()


_build_task = ray.remote(_build_shard)


def build(
    path,
    vectors,
    ids=None,
    metadata=None,
    shards: int = 4,
    dims: Optional[int] = None,
    metric: str = "cosine",
    M: int = 16,
    ef_construction: int = 200,
    format: int = 6,
    num_cpus: float = 1,
) -> chassis.Collection:
    """Build a new collection at ``path`` from rows (``vectors``, optional ``ids`` and
    ``metadata``), each shard's file in its own Ray task (``num_cpus`` each: one linking
    thread per CPU asked for), then publish the manifest. Rows route to shards as
    :func:`chassis.shard_of` says, so the result is the collection :meth:`Collection.add`
    would have made. ``vectors`` is an array, or the path of a ``.npy`` file on storage every
    worker reads: then each task reads only its own rows (memory-mapped), and no vector goes
    through the driver. ``path`` must be on storage every worker node can write (the tasks
    write the shard files in place). Returns the collection, opened as its writer."""
    source = None
    if isinstance(vectors, (str, os.PathLike)):
        source = os.fspath(vectors)
        v = np.load(source, mmap_mode="r")
    else:
        v = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if v.ndim != 2:
        raise chassis.InvalidArgumentError("vectors must be 2-D (rows x dims)")
    dims = v.shape[1] if dims is None else int(dims)
    n = v.shape[0]
    all_ids = np.arange(n, dtype=np.uint64) if ids is None else np.asarray(ids, dtype=np.uint64)
    if all_ids.shape != (n,):
        raise chassis.InvalidArgumentError("ids need one entry per row")
    if metadata is not None and len(metadata) != n:
        raise chassis.InvalidArgumentError("metadata needs one entry per row")
    c = chassis.Collection.create(
        path, dims=dims, metric=metric, shards=shards, M=M,
        ef_construction=ef_construction, format=format,
    )
    files = c.info()["shard_files"]
    c.close()
    route = chassis.shard_of(all_ids, shards)
    tasks = []
    for s in range(shards):
        rows = np.nonzero(route == s)[0]
        meta = None if metadata is None else [metadata[i] for i in rows]
        tasks.append(
            _build_task.options(num_cpus=num_cpus).remote(
                os.path.join(os.fspath(path), files[s]),
                None if source else v[rows],
                all_ids[rows],
                meta,
                max(1, int(num_cpus)),
                (source, rows) if source else None,
            )
        )
    ray.get(tasks)
    # The shards moved past the manifest: the writer's open publishes their new sequences.
    return chassis.Collection.open(path)


class ServedCollection:
    """A collection served by Ray actors: one writer, ``replicas`` readers per shard on
    distinct nodes. See the module doc. Use :meth:`start`, never the constructor."""

    def __init__(self, *_args, **_kwargs):
        raise TypeError("use chassis.ray.ServedCollection.start(...)")

    @classmethod
    def start(
        cls,
        path,
        replicas: int = 2,
        shared_storage: bool = True,
        replica_dir: Optional[str] = None,
        writer_resources: Optional[Dict[str, float]] = None,
        compiled: bool = True,
        replica_resources: Optional[Dict[str, float]] = None,
    ) -> "ServedCollection":
        """Serve the collection at ``path`` (which must exist): a writer actor (placed by
        ``writer_resources``, e.g. ``{"node:10.0.0.1": 0.01}``, on the node holding the
        files) and ``replicas`` replicas per shard, each shard's on distinct nodes.
        ``shared_storage=False``: replicas keep copies under ``replica_dir`` (a node-local
        directory, default the system temp dir) and need :meth:`sync` before they answer.
        ``compiled``: send queries through a Ray compiled graph over one replica per shard
        (shared-memory channels instead of a task per shard per query: a third to a half of
        the fan-out cost here); on any failure the handle drops to ordinary calls for that
        query and compiles again over the live replicas on the next one.
        ``replica_resources``: custom resources each replica asks for (to keep replicas on
        the nodes that offer them)."""
        self = object.__new__(cls)
        self.path = os.fspath(path)
        self.shared = bool(shared_storage)
        opts = {} if writer_resources is None else {"resources": writer_resources}
        self.writer = _Writer.options(**opts).remote(self.path)
        info = ray.get(self.writer.info.remote())
        self.shards = int(info["shards"])
        self.dims = int(info["dims"])
        self._next = 0
        self.compiled = bool(compiled)
        self._dag = None
        #: Seconds each shard's own search took in the last :meth:`search` (its replica's).
        self.last_shard_seconds: List[float] = []
        self.groups = []
        self.replicas: List[List[dict]] = []
        base = replica_dir or tempfile.gettempdir()
        for s in range(self.shards):
            bundle = {"CPU": 0.01, **(replica_resources or {})}
            pg = placement_group([bundle] * replicas, strategy="STRICT_SPREAD")
            ray.get(pg.ready(), timeout=120)
            self.groups.append(pg)
            shard_path = os.path.join(self.path, info["shard_files"][s])
            row = []
            for r in range(replicas):
                name = f"{s}-{r}-{os.getpid()}-{int(time.time() * 1e6)}"
                actor = _Replica.options(
                    num_cpus=0.01,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=pg, placement_group_bundle_index=r
                    ),
                ).remote(
                    shard_path if self.shared else None,
                    None if self.shared else os.path.join(base, "chassis-replicas", name),
                )
                row.append({"actor": actor, "name": name, "alive": True})
            self.replicas.append(row)
        if not self.shared:
            self.sync()
        return self

    # Writes: through the collection's writer.
    def add(self, vectors, ids=None, metadata=None) -> np.ndarray:
        """:meth:`chassis.Collection.add` on the writer actor; its errors come back as the
        same :mod:`chassis` exceptions."""
        return _get(self.writer.add.remote(vectors, ids, metadata))

    def delete(self, ids) -> None:
        """:meth:`chassis.Collection.delete` on the writer actor."""
        _get(self.writer.delete.remote(ids))

    def flush(self) -> List[int]:
        """Flush the collection (every shard, then its manifest); returns the shard
        sequences. Replicas on shared storage see it at once; local ones at :meth:`sync`."""
        return _get(self.writer.flush.remote())

    def sync(self) -> List[List[dict]]:
        """Bring every live local replica to its shard's last flush with an incremental
        patch (a full one for a replica that is new or out of step). Returns the reports."""
        if self.shared:
            return []
        out = []
        for s, row in enumerate(self.replicas):
            reports = []
            for rep in row:
                if not rep["alive"]:
                    continue
                try:
                    reports.append(self._sync_one(s, rep))
                except RayTaskError:
                    raise
                except RayError:
                    rep["alive"] = False
            out.append(reports)
        return out

    def _sync_one(self, s: int, rep: dict) -> dict:
        _, patch = _get(self.writer.patch.remote(s, rep["name"], False))
        try:
            return ray.get(rep["actor"].apply.remote(patch))
        except RayTaskError as e:
            if not isinstance(_shard_error(e), chassis.InvalidArgumentError):
                raise _shard_error(e) from None
        # Out of step (a crash, a lost patch): a full copy.
        _, patch = _get(self.writer.patch.remote(s, rep["name"], True))
        return _get(rep["actor"].apply.remote(patch))

    def live_replicas(self) -> List[int]:
        """Live replicas per shard, as far as this handle knows."""
        return [sum(r["alive"] for r in row) for row in self.replicas]

    def search(self, queries, k: int = 10, ef: Optional[int] = None, filter=None):
        """The ``k`` nearest of each query over every shard, as
        :meth:`chassis.Collection.search`: one live replica per shard (through the compiled
        graph, or round robin with ordinary calls), merged exactly. A replica that died is
        dropped and its shard asked again on another; a shard's own error (a
        :class:`chassis.ChassisError` subclass) is raised as itself."""
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        k = int(k)
        ef = max(64, k) if ef is None else int(ef)
        parts = self._search_compiled(q, k, ef, filter)
        if parts is not None:
            parts = _answers(parts)
            self.last_shard_seconds = [p[2] for p in parts]
            return _merge(parts, k)
        # A large batch goes to the object store once; a small one travels inside each call
        # (putting it costs more than sending it 2S times).
        q_arg = ray.put(q) if q.nbytes > 64 * 1024 else q
        self._next += 1
        pending = [self._ask(s, q_arg, k, ef, filter, skip=set()) for s in range(self.shards)]
        try:
            parts = ray.get([ref for _, ref in pending])
        except RayTaskError as e:
            raise _shard_error(e) from None
        except RayError:
            parts = [self._retry(s, pending[s], q_arg, k, ef, filter) for s in range(self.shards)]
        parts = _answers(parts)
        self.last_shard_seconds = [p[2] for p in parts]
        return _merge(parts, k)

    def _search_compiled(self, q, k, ef, flt):
        """The shards' answers through the compiled graph, or None when there is none (or it
        failed: then the replicas that no longer answer are marked dead)."""
        if not self.compiled:
            return None
        if self._dag is None:
            picks = []
            for s, row in enumerate(self.replicas):
                live = [r for r in row if r["alive"]]
                if not live:
                    return None
                picks.append(live[s % len(live)])
            try:
                with InputNode() as inp:
                    dag = MultiOutputNode([r["actor"].search_packed.bind(inp) for r in picks])
                self._dag = (dag.experimental_compile(), picks)
            except Exception:  # noqa: BLE001 - no compiled graphs here: ordinary calls
                self.compiled = False
                return None
        dag, picks = self._dag
        try:
            return ray.get(dag.execute((q, k, ef, flt)))
        except RayTaskError as e:
            raise _shard_error(e) from None
        except RayError:
            self._drop_dag()
            self._check_replicas()
            return None

    def _check_replicas(self, timeout: float = 10.0):
        """Marks dead every replica that doesn't answer a ping (all at once, ``timeout``
        seconds in all), so the next graph is compiled over live ones only."""
        pings = [(r, r["actor"].node.remote()) for row in self.replicas for r in row if r["alive"]]
        deadline = time.monotonic() + timeout
        for r, ref in pings:
            try:
                ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except RayError:
                r["alive"] = False

    def _drop_dag(self):
        if self._dag is not None:
            dag, _ = self._dag
            self._dag = None
            try:
                dag.teardown()
            except Exception:  # noqa: BLE001 - its actors may be gone already
                pass
            # Collect the graph (it sits in reference cycles) while Ray is still up: its
            # finalizer, run by a later collection after ray.shutdown(), crashed the process.
            del dag
            gc.collect()

    def _retry(self, s, first, q_arg, k, ef, flt):
        """Shard ``s``'s answer after a failure somewhere in the batch: its own call if that
        one succeeded, else the call again on each other live replica in turn."""
        rep, ref = first
        tried = set()
        while True:
            try:
                return ray.get(ref)
            except RayTaskError as e:
                raise _shard_error(e) from None
            except RayError:
                rep["alive"] = False
                tried.add(rep["name"])
                rep, ref = self._ask(s, q_arg, k, ef, flt, skip=tried)

    def _ask(self, s, q_ref, k, ef, flt, skip):
        live = [r for r in self.replicas[s] if r["alive"] and r["name"] not in skip]
        if not live:
            raise chassis.ChassisError(f"no live replica of shard {s}")
        rep = live[self._next % len(live)]
        return rep, rep["actor"].search.remote(q_ref, k, ef, flt)

    def replica_nodes(self) -> List[List[str]]:
        """The node id of each live replica, per shard."""
        return [
            [ray.get(r["actor"].node.remote()) for r in row if r["alive"]]
            for row in self.replicas
        ]

    def replica_sequences(self) -> List[List[int]]:
        """The shard sequence each live replica serves."""
        return [
            [ray.get(r["actor"].sequence.remote()) for r in row if r["alive"]]
            for row in self.replicas
        ]

    def shutdown(self) -> None:
        """Close the writer (flushing) and stop every actor."""
        self._drop_dag()
        try:
            ray.get(self.writer.close.remote())
        finally:
            for row in self.replicas:
                for r in row:
                    ray.kill(r["actor"], no_restart=True)
            ray.kill(self.writer, no_restart=True)
            for pg in self.groups:
                remove_placement_group(pg)
