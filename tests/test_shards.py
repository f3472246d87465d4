"""Sharded index files and the in-process router: manifest checks and exact equality with one HammingIndex."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.scale.shards import ShardedIndex, build_shards, merge_topk, read_manifest, shard_bounds


def _codes(n: int, nbytes: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, nbytes), dtype=np.uint8)


def test_shard_bounds_cover_rows_once():
    for n, s in [(10, 3), (7, 7), (1000, 4), (5, 1)]:
        b = shard_bounds(n, s)
        assert b[0][0] == 0 and b[-1][1] == n and all(b[i][1] == b[i + 1][0] for i in range(s - 1))
        assert max(h - lo for lo, h in b) - min(h - lo for lo, h in b) <= 1


@pytest.mark.parametrize("k", [1, 7, 40])
def test_sharded_equals_single_with_ties(tmp_path, k):
    base = _codes(60, 4, seed=1)
    codes = np.concatenate([base] * 5)  # every code five times: ties everywhere, across shards
    ids = np.random.default_rng(2).permutation(10_000)[: len(codes)].astype(np.int64)  # unordered global ids
    build_shards(codes, tmp_path, shards=3, ids=ids)
    single = HammingIndex(32)
    single.add(codes, ids)
    queries = _codes(25, 4, seed=3)
    got = ShardedIndex.open(tmp_path).search(queries, k)
    want = single.search(queries, k)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_shard_files_are_ordinary_indexes_with_global_ids(tmp_path):
    codes = _codes(101, 8)
    manifest = build_shards(codes, tmp_path, shards=4)
    assert [s.count for s in manifest.shards] == [26, 25, 25, 25]
    parts = [HammingIndex.load(tmp_path / s.file) for s in manifest.shards]
    np.testing.assert_array_equal(np.concatenate([p.ids for p in parts]), np.arange(101))
    np.testing.assert_array_equal(np.concatenate([p.codes for p in parts]), codes)


def test_merge_pads_when_fewer_than_k(tmp_path):
    d, i = merge_topk([np.array([[3, -1]], np.int32)], [np.array([[5, -1]], np.int64)], 2)
    assert d.tolist() == [[3, -1]] and i.tolist() == [[5, -1]]


def test_corrupt_missing_and_escaping_shards_are_errors(tmp_path):
    build_shards(_codes(50, 8), tmp_path, shards=2)
    shard = tmp_path / "shard-00001.odx"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    with pytest.raises(OndeviceError, match="shard 1 .*checksum"):
        ShardedIndex.open(tmp_path)
    shard.unlink()
    with pytest.raises(OndeviceError, match="shard 1 .*missing"):
        ShardedIndex.open(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["shards"][0]["file"] = "../elsewhere.odx"
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OndeviceError, match="outside its folder"):
        read_manifest(tmp_path)
    good = json.loads(json.dumps(m))
    good["shards"][0]["file"] = "shard-00000.odx"
    for field, value, message in (("file", 7, "malformed"), ("count", "25", "malformed|inconsistent"),
                                  ("bytes", None, "malformed"), ("file", "C:x.odx", "outside its folder")):
        bad = json.loads(json.dumps(good))
        bad["shards"][0][field] = value
        (tmp_path / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(OndeviceError, match=message):
            read_manifest(tmp_path)


def test_bad_arguments(tmp_path):
    with pytest.raises(OndeviceError, match="--shards"):
        build_shards(_codes(3, 8), tmp_path / "a", shards=5)
    with pytest.raises(OndeviceError, match="duplicates"):
        build_shards(_codes(3, 8), tmp_path / "b", shards=2, ids=np.array([4, 2, 4]))
    with pytest.raises(OndeviceError, match="not an ondevice sharded index"):
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / "manifest.json").write_text("{}")
        read_manifest(tmp_path / "c")


def test_cli_build_shards_search_and_info(tmp_path, capsys):
    from ondevice.cli import main

    codes = _codes(300, 8, seed=5)
    np.save(tmp_path / "codes.npy", codes)
    np.save(tmp_path / "q.npy", codes[:4])
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--shards", "3", "--out", str(tmp_path / "cat")]) == 0
    assert main(["index", "info", str(tmp_path / "cat"), "--verify"]) == 0
    assert "3 shards, checksums ok" in capsys.readouterr().out
    assert main(["index", "search", str(tmp_path / "cat"), "--queries", str(tmp_path / "q.npy"), "-k", "3", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    single = HammingIndex(64)
    single.add(codes)
    want_d, want_i = single.search(codes[:4], 3)
    assert [[h["id"] for h in ln["results"]] for ln in lines] == want_i.tolist()
    assert [[h["distance"] for h in ln["results"]] for ln in lines] == want_d.tolist()
    assert main(["index", "search", str(tmp_path / "cat"), "--queries", str(tmp_path / "q.npy"), "--radius", "3"]) == 2
    assert "not supported on a sharded index" in capsys.readouterr().err


def test_shards_are_never_written_into_a_bundle(tmp_path):
    """A folder whose manifest.json belongs to a bundle (or to no artifact) is not a sharded index to replace."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"format": "ondevice-bundle"}')
    (bundle / "encoder.onnx").write_bytes(b"graph")
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text('{"mine": 1}')
    codes = np.arange(32, dtype=np.uint8).reshape(16, 2)
    with pytest.raises(OndeviceError, match="holds an exported bundle"):
        build_shards(codes, bundle, 2)
    with pytest.raises(OndeviceError, match="holds a manifest.json that is not part of a sharded"):
        build_shards(codes, other, 2)
    assert sorted(p.name for p in bundle.iterdir()) == ["encoder.onnx", "manifest.json"]
    assert (other / "manifest.json").read_text() == '{"mine": 1}'
    build_shards(codes, tmp_path / "idx", 2)
    assert build_shards(codes[:8], tmp_path / "idx", 2).count == 8  # an earlier sharded index is replaced


def test_a_linked_shard_or_manifest_is_refused(tmp_path):
    """A sharded index someone sends must not make ondevice read other files of this machine through a link."""
    folder = tmp_path / "cat"
    build_shards(_codes(50, 8), folder, shards=2)
    assert len(ShardedIndex.open(folder)) == 50  # the plain folder opens
    (tmp_path / "elsewhere").mkdir()
    for name in ("shard-00001.odx", "manifest.json"):
        (folder / name).rename(tmp_path / "elsewhere" / name)  # same bytes: every checksum still agrees
        (folder / name).symlink_to(tmp_path / "elsewhere" / name)
        with pytest.raises(OndeviceError, match=rf"^sharded index {folder}: {name} is a symbolic link; "):
            ShardedIndex.open(folder)
        (folder / name).unlink()
        (tmp_path / "elsewhere" / name).rename(folder / name)
    (tmp_path / "alias").symlink_to(folder)  # the folder itself may be a link
    assert len(ShardedIndex.open(tmp_path / "alias")) == 50


def test_a_single_index_file_given_as_a_sharded_index_says_so(tmp_path):
    """`index serve c.odx` (and ShardedIndex.open) on a single-file index: what is needed, not "not valid JSON"."""
    path = tmp_path / "c.odx"
    index = HammingIndex(16)
    index.add(np.zeros((3, 2), np.uint8))
    index.save(path)
    for call in (read_manifest, ShardedIndex.open):
        with pytest.raises(OndeviceError, match=r"is a single index file; .*`ondevice index build --shards N"):
            call(path)
