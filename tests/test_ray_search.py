"""Sharded search on Ray actors: exactly one HammingIndex's answer; a killed shard is reported, never hidden."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.scale.shards import build_shards

pytest.importorskip("ray", reason="ray is not installed: the Ray tests need `pip install 'ondevice[scale]'`")

from ondevice.scale.ray_search import RayShardedIndex


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """4 shards x 250k random 256-bit codes, and the single index over all of them."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (1_000_000, 32), dtype=np.uint8)
    folder = tmp_path_factory.mktemp("sharded")
    build_shards(codes, folder, shards=4)
    single = HammingIndex(256)
    single.add(codes)
    return folder, single, rng.integers(0, 256, (100, 32), dtype=np.uint8)


def test_ray_sharded_search_equals_single_index(ray_local, catalog):
    folder, single, queries = catalog
    index = RayShardedIndex.open(folder, cpus_per_shard=0.25)
    try:
        for k in (1, 10):
            d, i = index.search(queries, k)
            want_d, want_i = single.search(queries, k)
            np.testing.assert_array_equal(d, want_d)
            np.testing.assert_array_equal(i, want_i)
    finally:
        index.close()


def test_killed_shard_is_an_error_or_a_flagged_partial_result(ray_local, catalog):
    folder, single, queries = catalog
    index = RayShardedIndex.open(folder, cpus_per_shard=0.25)
    try:
        ray_local.kill(index.actors[2])
        with pytest.raises(OndeviceError, match="shard 2 .*did not answer"):
            index.search(queries, 5)
        result = index.search_partial(queries, 5)
        assert result.partial and result.missing == [2]
        keep = ~np.isin(single.ids, np.arange(500_000, 750_000))  # shard 2 holds rows 500k..750k
        rest = HammingIndex(256)
        rest.add(single.codes[keep], single.ids[keep])
        want_d, want_i = rest.search(queries, 5)
        np.testing.assert_array_equal(result.ids, want_i)
        np.testing.assert_array_equal(result.distances, want_d)
    finally:
        index.close()


def test_missing_shard_file_is_reported_at_open(ray_local, tmp_path):
    codes = np.random.default_rng(1).integers(0, 256, (40, 8), dtype=np.uint8)
    build_shards(codes, tmp_path, shards=2)
    (tmp_path / "shard-00000.odx").unlink()
    with pytest.raises(OndeviceError, match="shard 0 .*missing"):
        RayShardedIndex.open(tmp_path, cpus_per_shard=0.25)
    index = RayShardedIndex.open(tmp_path, cpus_per_shard=0.25, allow_missing=True)
    try:
        assert index.search_partial(codes[:3], 2).missing == [0]
        with pytest.raises(OndeviceError, match="shard 0"):
            index.search(codes[:3], 2)
    finally:
        index.close()


def test_cli_search_on_ray_and_impossible_placement(ray_local, tmp_path, capsys):
    from ondevice.cli import main

    codes = np.random.default_rng(2).integers(0, 256, (200, 8), dtype=np.uint8)
    np.save(tmp_path / "q.npy", codes[:3])
    build_shards(codes, tmp_path / "cat", shards=4)
    assert main(["index", "search", str(tmp_path / "cat"), "--queries", str(tmp_path / "q.npy"), "-k", "2",
                 "--backend", "ray", "--json"]) == 0
    got = [[h["id"] for h in __import__("json").loads(x)["results"]] for x in capsys.readouterr().out.splitlines()]
    single = HammingIndex(64)
    single.add(codes)
    assert got == single.search(codes[:3], 2)[1].tolist()
    with pytest.raises(OndeviceError, match="do not fit"):
        RayShardedIndex.open(tmp_path / "cat", cpus_per_shard=1.0)  # 4 x 1 CPU on a 2-CPU Ray
