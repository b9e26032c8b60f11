"""Metadata and filtered search from Python: every operator against a brute-force filter over
the same dicts, per-query filters, get/set/upsert of metadata, readers, errors."""

import math

import numpy as np
import pytest

import chassis


def docs(n):
    tenants = ["acme", "globex", "initech"]
    out = []
    for i in range(n):
        d = {"tenant": tenants[i % 3], "year": 2000 + i % 20, "score": (i * 37 % 100) / 100}
        if i % 4:
            d["tags"] = [f"t{(i * 7 + j) % 11}" for j in range(i % 4)]
        if i % 10 == 0:
            d["rare"] = None
        out.append(d)
    return out


def passes(d, f):
    """The filter language's meaning, restated for the test (docs/FILTERS.md)."""
    for key, cond in f.items():
        if key == "$and":
            ok = all(passes(d, g) for g in cond)
        elif key == "$or":
            ok = any(passes(d, g) for g in cond)
        elif key == "$not":
            ok = not passes(d, cond)
        else:
            ok = field(d, key, cond)
        if not ok:
            return False
    return True


def field(d, key, cond):
    if not isinstance(cond, dict):
        cond = {"$eq": cond}
    present = key in d
    vals = d.get(key)
    vals = vals if isinstance(vals, list) else [vals]
    for op, x in cond.items():
        if op in ("$eq", "$contains"):
            ok = present and any(v == x and type(v) is not bool or v is x for v in vals)
        elif op == "$ne":
            ok = not field(d, key, {"$eq": x})
        elif op == "$in":
            ok = any(field(d, key, {"$eq": y}) for y in x)
        elif op == "$nin":
            ok = not field(d, key, {"$in": x})
        elif op == "$exists":
            ok = present == x
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            cmp = {"$gt": lambda a: a > x, "$gte": lambda a: a >= x,
                   "$lt": lambda a: a < x, "$lte": lambda a: a <= x}[op]
            ok = present and any(
                v is not None and not isinstance(v, bool) and
                isinstance(v, str) == isinstance(x, str) and cmp(v) for v in vals)
        else:
            raise AssertionError(op)
        if not ok:
            return False
    return True


FILTERS = [
    {"tenant": "acme"},
    {"tenant": {"$ne": "acme"}},
    {"year": {"$gte": 2015}},
    {"year": {"$gt": 2003, "$lte": 2005}},
    {"score": {"$lt": 0.1}},
    {"tags": {"$contains": "t3"}},
    {"tags": {"$in": ["t1", "t9"]}},
    {"tags": {"$nin": ["t1"]}},
    {"tags": {"$exists": False}},
    {"rare": None},
    {"$or": [{"tenant": "globex"}, {"year": 2001}]},
    {"$and": [{"tenant": "initech"}, {"score": {"$gte": 0.5}}]},
    {"$not": {"tenant": {"$in": ["acme", "globex"]}}},
]


@pytest.fixture
def index(tmp_path):
    rng = np.random.default_rng(5)
    data = rng.normal(size=(1500, 12)).astype(np.float32)
    meta = docs(1500)
    ix = chassis.Index.create(tmp_path / "m.chassis", dims=12, metric="l2")
    ix.add(data, metadata=meta)
    ix.flush()
    return ix, data, meta, tmp_path / "m.chassis"


def exact(data, meta, q, f, k, live=None):
    ids = [i for i, d in enumerate(meta) if passes(d, f) and (live is None or i in live)]
    d = ((data[ids] - q) ** 2).sum(axis=1) if ids else np.array([])
    order = np.argsort(d, kind="stable")[:k]
    return [ids[i] for i in order]


def test_every_operator_against_brute_force(index):
    ix, data, meta, path = index
    reader = chassis.Index.open(path, read_only=True)
    rng = np.random.default_rng(1)
    for f in FILTERS:
        for h in (ix, reader):
            q = data[rng.integers(len(data))] + 0.1
            found, dist = h.search(q, k=10, filter=f)
            want = exact(data, meta, q, f, 10)
            got = [int(x) for x in found[0] if x != chassis.MISSING_ID]
            assert len(got) == len(want), f
            assert len(set(got) & set(want)) >= 0.9 * len(want), f
            for i in got:
                assert passes(meta[i], f), (f, meta[i])


def test_per_query_filters_and_padding(index):
    ix, data, meta, _ = index
    q = data[:3]
    found, dist = ix.search(q, k=5, filter=[{"tenant": "acme"}, None, {"year": 1999}])
    assert all(passes(meta[int(i)], {"tenant": "acme"}) for i in found[0])
    assert int(found[1, 0]) == 1
    assert (found[2] == chassis.MISSING_ID).all() and np.isinf(dist[2]).all()
    with pytest.raises(chassis.InvalidArgumentError, match="2 filters for 3 queries"):
        ix.search(q, k=5, filter=[{}, {}])


def test_get_set_upsert_metadata(index):
    ix, data, meta, path = index
    assert ix.get_metadata(7) == meta[7]
    assert ix.get_metadata([7, 8]) == [meta[7], meta[8]]
    v, m = ix.get(9, metadata=True)
    np.testing.assert_array_equal(v, data[9])
    assert m == meta[9]
    ix.set_metadata(9, {"tenant": "moved", "n": np.int64(3)})
    np.testing.assert_array_equal(ix.get(9), data[9])
    assert ix.get_metadata(9) == {"tenant": "moved", "n": 3}
    found, _ = ix.search(data[9], k=1, filter={"tenant": "moved"})
    assert int(found[0, 0]) == 9
    reader = chassis.Index.open(path, read_only=True)
    assert reader.get_metadata(9) == meta[9], "unflushed work is invisible to readers"
    ix.upsert(data[10] * 2, ids=10, metadata={"tenant": "up"})
    ix.upsert(data[11], ids=[999_999], metadata=[{"new": True}])
    ix.flush()
    assert reader.get_metadata(9)["tenant"] == "moved"
    assert reader.get_metadata(10) == {"tenant": "up"}
    assert reader.get_metadata(999_999) == {"new": True}
    np.testing.assert_allclose(reader.get(10), data[10] * 2)
    with pytest.raises(chassis.NotFoundError):
        ix.set_metadata(123_456, {})
    info = ix.info()
    # Metadata needs write version 5; the default layout (format 6) has 6 already.
    assert info["write_version"] == 6 and info["metadata_bytes"] > 0


def test_bad_metadata_and_filters_raise_before_work(tmp_path):
    ix = chassis.Index.create(tmp_path / "e.chassis", dims=2, metric="l2")
    for bad in ({"x": math.nan}, {1: 2}, {"x": {"nested": 1}}, {"x": [[1]]}, {"$x": 1},
                {"x": "y" * 70_000}, {"x": object()}):
        with pytest.raises(chassis.InvalidArgumentError):
            ix.add([1.0, 2.0], metadata=bad)
    assert len(ix) == 0
    with pytest.raises(chassis.InvalidArgumentError, match="2 metadata dicts for 1"):
        ix.add([1.0, 2.0], metadata=[{}, {}])
    ix.add([1.0, 2.0], metadata={"a": 1})
    for bad in ({"a": {"$foo": 1}}, {"a": {"$gt": None}}, {"$and": []}, {"a": {"$in": 1}}, [],
                {"a": math.nan}, {"a": {"$gt": math.inf}}, {"a": object()}):
        with pytest.raises(chassis.InvalidArgumentError):
            ix.search([1.0, 2.0], k=1, filter=bad)
    # numpy scalars and arrays in a filter are plain values (converted natively, no JSON text).
    for good in ({"a": np.int64(1)}, {"a": {"$in": np.array([0, 1])}}, {"a": np.float32(1.0)},
                 {"a": {"$in": (0, 1)}}, {"a": np.uint8(1)}, {"$and": [{"a": 1}, {"a": {"$lt": 2.5}}]}):
        ids, _ = ix.search([1.0, 2.0], k=1, filter=good)
        assert ids[0][0] == 0
    for bad in ({"a": np.int64(2)}, {"a": {"$gt": 1}}, {"a": True}):
        ids, _ = ix.search([1.0, 2.0], k=1, filter=bad)
        assert ids[0][0] == chassis.MISSING_ID, bad


def test_filter_and_metadata_conversion_edges(tmp_path):
    """Python values reach the core as json.dumps then a JSON parse would give them, with
    every key a string at any depth, and nothing that loops or nests without end."""
    ix = chassis.Index.create(tmp_path / "c.chassis", dims=2, metric="l2")
    doc = {"i": 2**40, "f": 0.5, "b": True, "n": None, "s": "x", "l": ("a", np.str_("b")),
           "nb": np.bool_(False), "arr": np.array([1.5, 2.5], dtype=np.float32)}
    ix.add([[1.0, 2.0], [3.0, 4.0]], metadata=[doc, None])
    got = ix.get_metadata(0)
    assert got == {"i": 2**40, "f": 0.5, "b": True, "n": None, "s": "x", "l": ["a", "b"],
                   "nb": False, "arr": [1.5, 2.5]}
    # get_metadata's values keep their Python types (ints stay ints, bools bools).
    assert type(got["i"]) is int and type(got["b"]) is bool and type(got["f"]) is float
    assert ix.get_metadata([1, 0]) == [{}, got]
    loop = {}
    loop["$and"] = [loop]
    deep = {"a": 1}
    for _ in range(200):
        deep = {"$not": deep}
    for bad, why in ((loop, "nested more than"), (deep, "nested more than"),
                     ({"a": {1: 2}}, "keys must be strings"),
                     ({"a": {"$gt": 10**400}}, "too large"), ({"a": math.inf}, "NaN")):
        with pytest.raises(chassis.InvalidArgumentError, match=why):
            ix.search([1.0, 2.0], k=1, filter=bad)
    # Past 64 bits an integer is the nearest float, as a JSON parse gives it.
    ids, _ = ix.search([1.0, 2.0], k=1, filter={"i": 2**70})
    assert ids[0][0] == chassis.MISSING_ID
    with pytest.raises(chassis.InvalidArgumentError, match="filter must be a dict"):
        ix.search([1.0, 2.0], k=1, filter=["not a dict"])
    # With several documents the error names the one at fault; nothing is added.
    with pytest.raises(chassis.InvalidArgumentError, match="metadata 1: .*keys must be strings"):
        ix.add([[1.0, 2.0], [3.0, 4.0]], metadata=[{"a": 1}, {2: "b"}])
    with pytest.raises(chassis.InvalidArgumentError, match="metadata 0: .*must be a dict"):
        ix.add([[1.0, 2.0], [3.0, 4.0]], metadata=["a", {}])
    assert len(ix) == 2
