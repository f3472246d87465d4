"""Issue 17 item 7: atomic writes give files the mode a plain open() would (the umask), not mkstemp's 0600."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from safetensors.numpy import save_file

from ondevice.index import HammingIndex
from ondevice.io import atomic_path, new_file_mode, write_json, write_text


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_respect_the_umask(tmp_path, umask):
    before = os.umask(umask)
    try:
        assert new_file_mode() == 0o666 & ~umask
        write_text(tmp_path / "a.txt", "x")
        write_json(tmp_path / "b.json", {"a": 1})
        with atomic_path(tmp_path / "c.bin") as tmp:
            tmp.write_bytes(b"x")
        HammingIndex(8).save(tmp_path / "d.odx")
        with atomic_path(tmp_path / "e.safetensors") as tmp:  # safetensors replaces the file it is given, as 0600
            save_file({"w": np.zeros(2, np.float32)}, str(tmp))
        with open(tmp_path / "plain.txt", "w") as fh:  # what the user's shell would give
            fh.write("x")
    finally:
        os.umask(before)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert set(modes.values()) == {modes["plain.txt"]} == {0o666 & ~umask}, modes


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "x.npy") as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_canonical_safetensors_gives_the_same_bytes_for_the_same_tensors(tmp_path):
    """The library writes its header maps in hash order; after canonical_safetensors equal inputs are equal bytes."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from ondevice.io import canonical_safetensors

    rng = np.random.default_rng(0)
    tensors = {name: rng.normal(size=(3, 4)).astype(np.float32) for name in ("b", "a", "d", "c")}
    metadata = {f"key{i}": f"value{i}" for i in range(8)}
    files = []
    for i in range(6):
        path = tmp_path / f"{i}.safetensors"
        save_file(tensors, str(path), metadata=metadata)
        canonical_safetensors(path)
        files.append(path.read_bytes())
    assert len(set(files)) == 1
    loaded = load_file(str(tmp_path / "0.safetensors"))
    assert all(np.array_equal(loaded[k], v) for k, v in tensors.items())
    with safe_open(str(tmp_path / "0.safetensors"), "np") as fh:
        assert fh.metadata() == metadata
