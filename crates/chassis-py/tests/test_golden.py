"""The golden corpus (crates/chassis/tests/golden/, written once by earlier releases) through
Python: each file reads as its ``.json`` says, and a copy takes writes and compaction in its own
read and write versions."""

import json
import pathlib
import shutil

import numpy as np
import pytest

import chassis

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "chassis" / "tests" / "golden"
NAMES = [
    line.split("  ", 1)[1][: -len(".chassis")]
    for line in (GOLDEN / "SHA256SUMS").read_text().splitlines()
    if line.endswith(".chassis")
]


def expected(name):
    return json.loads((GOLDEN / f"{name}.json").read_text())


def shows_what_it_must(ix, e):
    assert len(ix) == e["count"]
    for g in e["get"]:
        got = ix.get(g["id"])
        want = np.array(g["vector"], dtype=np.float64).astype(np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for i in e["deleted_ids"]:
        assert i not in ix
        with pytest.raises(chassis.NotFoundError):
            ix.get(i)
    for q in e["queries"]:
        found, dist = ix.search(np.array(q["vector"], dtype=np.float32), k=e["k"], ef=e["ef"])
        assert [int(x) for x in found[0]] == q["ids"]
        np.testing.assert_allclose(dist[0], q["distances"], rtol=1e-5, atol=1e-6)
    for g in e["get"]:
        if "metadata" in g:
            assert ix.get_metadata(g["id"]) == g["metadata"]
    for q in e.get("filtered", []):
        found, dist = ix.search(
            np.array(q["vector"], dtype=np.float32), k=e["k"], ef=e["ef"],
            filter=json.loads(q["filter"]),
        )
        assert [int(x) for x in found[0] if x != chassis.MISSING_ID] == q["ids"]
        np.testing.assert_allclose(dist[0][: len(q["ids"])], q["distances"], rtol=1e-5, atol=1e-6)


def test_the_corpus_is_here():
    assert len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_golden_file_reads_writes_and_compacts(name, tmp_path):
    e = expected(name)
    reader = chassis.Index.open(GOLDEN / f"{name}.chassis", read_only=True)
    shows_what_it_must(reader, e)
    info = reader.info()
    assert (info["read_version"], info["write_version"]) == (e["read_version"], e["write_version"])
    reader.close()

    path = tmp_path / f"{name}.chassis"
    shutil.copy(GOLDEN / f"{name}.chassis", path)
    ix = chassis.Index.open(path)
    shows_what_it_must(ix, e)
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(5, e["dims"])).astype(np.float32)
    if e["custom_ids"]:
        ids = ix.add(rows, ids=[9_000_000_000 + i for i in range(5)])
    else:
        ids = ix.add(rows)
    if e["ids"]:
        ix.delete(e["ids"][0])
    ix.flush()
    ix.close()
    ix = chassis.Index.open(path)
    assert len(ix) == e["count"] + 5 - (1 if e["ids"] else 0)
    assert all(int(i) in ix for i in ids)
    ix.compact(threads=1)
    info = ix.info()
    assert (info["read_version"], info["write_version"]) == (e["read_version"], e["write_version"])
    assert len(ix) == e["count"] + 5 - (1 if e["ids"] else 0)
    ix.close()
