"""Integrity round three, from outside, as a user would: a backup, a patch or a collection
never mixes files or half-applies; ids never repeat; arguments never abort the interpreter;
the user version and rollback tie a flush to the application's own transaction."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import chassis


def rows(n, dims=8, seed=0):
    return np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)


def contents(path):
    with chassis.Index.open(path, read_only=True) as r:
        ids = sorted(int(i) for i in r.search(rows(1), k=10_000, ef=10_000)[0][0] if i != chassis.MISSING_ID)
        return {i: r.get(i).tobytes() for i in ids}


def build(path, data, flushes):
    ix = chassis.Index.create(path, dims=data.shape[1], metric="l2", M=8)
    for part in np.array_split(data, flushes):
        ix.add(part)
        ix.flush()
    return ix


@pytest.mark.parametrize("extra_flush", [False, True])
def test_a_rebuilt_source_backup_holds_the_new_vectors(tmp_path, extra_flush):
    src, dst = tmp_path / "src.chassis", tmp_path / "dst.chassis"
    build(src, rows(300, seed=1), 3).close()
    with chassis.Index.open(src) as ix:
        assert ix.backup(dst)["full_copy"]
    os.remove(src)
    ix = build(src, rows(300, seed=2), 4 if extra_flush else 3)
    report = ix.backup(dst)
    assert report["full_copy"] and not report["unchanged"]
    ix.close()
    assert contents(dst) == contents(src)


def test_a_foreign_patch_is_refused_and_leaves_the_replica_unchanged(tmp_path):
    far = tmp_path / "far"
    far.mkdir()
    a = build(tmp_path / "a.chassis", rows(200, seed=3), 2)
    b = build(tmp_path / "b.chassis", rows(200, seed=4), 2)
    for ix, name in [(a, "a"), (b, "b")]:
        _, full = ix.backup_patch(tmp_path / f"{name}.stage")
        chassis.apply_patch(far / f"{name}.chassis", full)
        ix.add(rows(20, seed=5))
        ix.flush()
    _, a_patch = a.backup_patch(tmp_path / "a.stage")
    before = (far / "b.chassis").read_bytes()
    with pytest.raises(chassis.InvalidArgumentError, match="identity"):
        chassis.apply_patch(far / "b.chassis", a_patch)
    assert (far / "b.chassis").read_bytes() == before
    chassis.apply_patch(far / "a.chassis", a_patch)
    assert contents(far / "a.chassis") == contents(tmp_path / "a.chassis")


def test_a_full_patch_over_a_writer_is_refused_and_its_flush_lands(tmp_path):
    src = build(tmp_path / "src.chassis", rows(100, seed=6), 1)
    _, full = src.backup_patch(tmp_path / "stage.chassis")
    replica = tmp_path / "replica.chassis"
    writer = build(replica, rows(30, seed=7), 1)
    writer.add(rows(5, seed=8))
    with pytest.raises(chassis.LockedError):
        chassis.apply_patch(replica, full)
    writer.flush()
    writer.close()
    assert len(contents(replica)) == 35


def test_a_collection_add_with_a_bad_row_adds_nothing_and_its_retry_adds_all(tmp_path):
    c = chassis.Collection.create(tmp_path / "c", dims=8, metric="l2", shards=4)
    v = rows(40, seed=9)
    bad = v.copy()
    bad[17, 3] = np.nan
    with pytest.raises(chassis.InvalidVectorError):
        c.add(bad)
    assert len(c) == 0
    c.flush()
    assert len(c) == 0
    ids = c.add(v)
    assert list(ids) == list(range(40)) and len(c) == 40
    # A duplicate id inside the call, and one already live: nothing added either way.
    with pytest.raises(chassis.DuplicateIdError):
        c.add(rows(2, seed=10), ids=[100, 100])
    with pytest.raises(chassis.DuplicateIdError):
        c.add(rows(2, seed=10), ids=[100, 5])
    assert len(c) == 40 and 100 not in c
    # Upsert and set_metadata are all or nothing too.
    with pytest.raises(chassis.NotFoundError):
        c.set_metadata([1, 2, 999], [{"a": 1}] * 3)
    assert c.get_metadata(1) == {}
    c.upsert(rows(2, seed=11), ids=[1, 500], metadata=[{"a": 1}, {"a": 2}])
    assert c.get_metadata(1) == {"a": 1} and 500 in c
    c.close()


def test_automatic_ids_never_repeat_at_the_top_of_the_id_space(tmp_path):
    ix = chassis.Index.create(tmp_path / "i.chassis", dims=8, metric="l2")
    ix.add(rows(1), ids=2**64 - 3)
    assert list(ix.add(rows(2, seed=1))) == [2**64 - 2, 2**64 - 1]
    with pytest.raises(chassis.IdsExhaustedError):
        ix.add(rows(1, seed=2))
    with pytest.raises(chassis.InvalidArgumentError):
        ix.add(rows(1, seed=2))
    assert len(ix) == 3
    ix2 = chassis.Index.create(tmp_path / "j.chassis", dims=8, metric="l2")
    ix2.add(rows(1), ids=2**64 - 3)
    with pytest.raises(chassis.IdsExhaustedError):
        ix2.add(rows(3, seed=3))
    assert len(ix2) == 1
    c = chassis.Collection.create(tmp_path / "c", dims=8, metric="l2", shards=2)
    c.add(rows(1), ids=[2**64 - 2])
    assert list(c.add(rows(1, seed=4))) == [2**64 - 1]
    with pytest.raises(chassis.IdsExhaustedError):
        c.add(rows(1, seed=5))
    assert len(c) == 2


def run_child(code):
    """Runs `code` in a fresh interpreter: a crash there (SIGABRT) can't take the tests down."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_absurd_k_returns_or_raises_and_never_aborts(tmp_path):
    r = run_child(
        f"""
        import numpy as np, chassis
        ix = chassis.Index.create({str(tmp_path / 'k.chassis')!r}, dims=8, metric="l2")
        ix.add(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32))
        ix.flush()
        q = np.zeros((1, 8), np.float32)
        ids, d = ix.search(q, k=10**11)
        assert ids.shape == (1, 50), ids.shape
        r = chassis.Index.open({str(tmp_path / 'k.chassis')!r}, read_only=True)
        ids, d = r.search(np.zeros((3, 8), np.float32), k=10**11, ef=10**30)
        assert ids.shape == (3, 50), ids.shape
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_search_arguments_huge_and_negative_never_abort(tmp_path):
    """A sweep of k, ef and batch sizes at their edges, in a child interpreter: every call
    returns arrays of a bounded width or raises a ChassisError subclass (or the TypeError of a
    non-integer), and the interpreter survives them all."""
    r = run_child(
        f"""
        import itertools, numpy as np, chassis
        ix = chassis.Index.create({str(tmp_path / 'a.chassis')!r}, dims=4, metric="cosine")
        ix.add(np.random.default_rng(1).standard_normal((70, 4)).astype(np.float32))
        c = chassis.Collection.create({str(tmp_path / 'c')!r}, dims=4, metric="l2", shards=2)
        c.add(np.random.default_rng(2).standard_normal((30, 4)).astype(np.float32))
        ks = [-2**70, -1, 0, 1, 69, 70, 71, 65536, 65537, 10**11, 2**63 - 1, 2**64, 2**80]
        efs = [None, -5, 0, 1, 10**11, 2**64, 2**200]
        for target, live in [(ix, 70), (c, 30)]:
            for k, ef, n in itertools.product(ks, efs, [1, 3]):
                q = np.ones((n, 4), np.float32)
                try:
                    ids, d = target.search(q, k=k, ef=ef)
                except chassis.ChassisError:
                    continue
                assert ids.shape[0] == n and d.shape == ids.shape, (k, ef, ids.shape)
                width = ids.shape[1]
                assert width == k or (k > 65536 and width == live), (k, ef, width)
                assert (ids[:, :min(width, live)] != chassis.MISSING_ID).all()
        try:
            ix.search(np.ones((5000, 4), np.float32), k=65536)
        except chassis.InvalidArgumentError:
            pass
        else:
            raise SystemExit("a 5000 x 65536 answer was not refused")
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_the_user_version_and_rollback(tmp_path):
    path = tmp_path / "u.chassis"
    ix = chassis.Index.create(path, dims=8, metric="l2")
    ix.add(rows(10))
    ix.user_version = 41
    assert ix.user_version == 41 and ix.info()["user_version"] == 0
    ix.flush()
    reader = chassis.Index.open(path, read_only=True)
    assert reader.user_version == 41 and reader.info()["user_version"] == 41
    ix.add(rows(5, seed=1))
    ix.delete([0, 1])
    ix.user_version = 42
    ix.rollback()
    assert len(ix) == 10 and 0 in ix and ix.user_version == 41
    assert not ix.info()["pending_changes"]
    with pytest.raises(chassis.LockedError):
        chassis.Index.open(path)
    assert list(ix.add(rows(1, seed=2))) == [10]
    ix.user_version = 43
    ix.flush()
    assert reader.user_version == 43 and len(reader) == 11
    assert len(ix.info()["file_id"]) == 32 and ix.info()["file_id"] == reader.info()["file_id"]
    with pytest.raises(chassis.ReadOnlyError):
        reader.user_version = 5
    with pytest.raises(chassis.InvalidArgumentError):
        ix.user_version = -1
    ix.close()
