"""chassis.Collection: shard files searched as one index."""

import numpy as np
import pytest

import chassis


def clustered(n, dims, seed=1):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 100, 1), dims)) * 4
    return (centres[rng.integers(0, len(centres), n)] + rng.normal(size=(n, dims))).astype(
        np.float32
    )


def brute(data, q, k):
    d = ((data - q) ** 2).sum(axis=1)
    return list(np.argsort(d, kind="stable")[:k])


def test_a_collection_answers_as_one_index(tmp_path):
    data = clustered(3000, 16)
    with chassis.Collection.create(tmp_path / "c", dims=16, metric="l2", shards=4, M=8) as c:
        ids = c.add(data[:2500], metadata=[{"n": i} for i in range(2500)])
        assert list(ids[:3]) == [0, 1, 2] and len(c) == 2500
        # Wide beams: every shard exact, so the merge is the exact global top 10.
        found, dist = c.search(data[2500:2520], k=10, ef=2500)
        for q, row in zip(data[2500:2520], found):
            assert list(row) == brute(data[:2500], q, 10)
        assert found.dtype == np.uint64 and dist.dtype == np.float32
        hits = 0
        found, _ = c.search(data[2500:2700], k=10, ef=64)
        for q, row in zip(data[2500:2700], found):
            hits += len(set(row) & set(brute(data[:2500], q, 10)))
        assert hits / 2000 > 0.95
        f, _ = c.search(data[7], k=5, filter={"n": {"$lt": 50}})
        assert f[0, 0] == 7 and all(i < 50 for i in f[0])
        np.testing.assert_array_equal(c.get(7), data[7])
        assert c.get_metadata([7, 8]) == [{"n": 7}, {"n": 8}]
        c.delete([7, 8])
        assert 7 not in c and 9 in c
        with pytest.raises(chassis.NotFoundError):
            c.delete(7)
        info = c.info()
        assert info["shards"] == 4 and len(info["shard_files"]) == 4
        assert set(np.unique(chassis.shard_of(np.arange(2500), 4))) == {0, 1, 2, 3}
    with chassis.Collection.open(tmp_path / "c", read_only=True) as r:
        assert len(r) == 2498 and r.info()["consistent"]
        with pytest.raises(chassis.ReadOnlyError):
            r.add(data[0])
        # Each shard is a plain Chassis file.
        shard = chassis.Index.open(tmp_path / "c" / r.info()["shard_files"][0], read_only=True)
        assert 0 < len(shard) < 2498


def test_a_reader_serves_the_last_published_flush(tmp_path):
    data = clustered(400, 8)
    w = chassis.Collection.create(tmp_path / "c", dims=8, metric="l2", shards=2)
    w.add(data[:200])
    w.flush()
    r = chassis.Collection.open(tmp_path / "c", read_only=True)
    w.add(data[200:])
    assert len(r) == 200
    w.flush()
    assert len(r) == 200 and r.refresh() and len(r) == 400
    with pytest.raises(chassis.LockedError):
        chassis.Collection.open(tmp_path / "c")
    w.close()
    r.close()
    assert "closed" in repr(r)
