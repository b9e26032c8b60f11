"""Half precision from Python: ``precision="f16"`` stores each value as the nearest IEEE half
float, ``get`` returns those values, every distance is exact to them, and compaction moves a
file between precisions."""

import numpy as np
import pytest

import chassis


def test_f16_stores_rounded_values_and_searches_them_exactly(tmp_path):
    rng = np.random.default_rng(3)
    v = rng.normal(size=(2000, 48)).astype(np.float32) * 3
    ix = chassis.Index.create(tmp_path / "h.chassis", dims=48, metric="l2", precision="f16")
    ix.add(v[:1900])
    ix.flush()
    info = ix.info()
    assert (info["precision"], info["format"], info["read_version"]) == ("f16", 5, 5)
    stored = v[:1900].astype(np.float16).astype(np.float32)
    assert np.array_equal(ix.get(np.arange(0, 1900, 37)), stored[::37])
    found, dist = ix.search(v[1900:], k=10, ef=128)
    exact = ((stored[found.astype(np.int64)] - v[1900:, None, :]) ** 2).sum(-1)
    assert np.allclose(dist, exact, rtol=1e-4, atol=1e-3)
    truth = np.argsort(((stored[None, :, :] - v[1900:, None, :]) ** 2).sum(-1), axis=1)[:, :10]
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found.tolist(), truth.tolist())])
    assert recall >= 0.95
    with pytest.raises(chassis.InvalidVectorError, match="half precision"):
        ix.add(np.full((1, 48), 70000.0, dtype=np.float32))
    with pytest.raises(chassis.InvalidArgumentError):
        chassis.Index.create(tmp_path / "x.chassis", dims=4, format=3, precision="f16")
    with pytest.raises(chassis.InvalidArgumentError):
        chassis.Index.create(tmp_path / "y.chassis", dims=4, precision="f8")
    reader = chassis.Index.open(tmp_path / "h.chassis", read_only=True)
    assert reader.info()["precision"] == "f16"
    assert np.array_equal(reader.get(7), stored[7])
    ix.compact(precision="f32", codes="int4")
    assert ix.info()["precision"] == "f32" and ix.info()["codes"] == "int4"
    # Back to f32 is the default split layout; with codes its halves lie side by side (4).
    assert (ix.info()["format"], ix.info()["read_version"]) == (4, 4)
    assert np.array_equal(ix.get(7), stored[7])
    ix.compact(format=6, codes="none")
    assert (ix.info()["format"], ix.info()["read_version"]) == (6, 6)
    assert np.array_equal(ix.get(7), stored[7])
    # A precision without a format keeps a layout that already stores it: f32 leaves a
    # format 3 file format 3 (readable by the releases that read only format 3).
    ix.compact(format=3)
    ix.compact(precision="f32")
    assert (ix.info()["format"], ix.info()["precision"]) == (3, "f32")
    ix.compact(precision="f16")
    assert (ix.info()["format"], ix.info()["precision"]) == (5, "f16")
    assert np.array_equal(ix.get(7), stored[7])
    with pytest.raises(chassis.InvalidArgumentError):
        ix.compact(precision="f8")
    ix.close()
