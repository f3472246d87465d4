"""Atomic writes give files the mode a plain open() would (the umask), not mkstemp's 0600."""

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


def _folder(path, files):
    path.mkdir(parents=True)
    for name, text in files.items():
        if name.endswith("/"):
            (path / name).mkdir()
        else:
            (path / name).write_text(text)
    return path


def test_an_out_folder_of_another_kind_or_with_foreign_files_is_refused(tmp_path):
    """check_out_kind: new, empty and same-kind folders pass; another artifact, or a file of the writer's names that
    is no artifact's, is a one-line error naming it; an interrupted run's folder (a checkpoint) stays resumable."""
    from ondevice.errors import OndeviceError
    from ondevice.io import check_out_kind

    bundle = _folder(tmp_path / "bundle", {"manifest.json": '{"format": "ondevice-bundle"}', "encoder.onnx": "x"})
    student = _folder(tmp_path / "student", {"config.json": "{}", "model.safetensors": "x", "vocab.txt": "x"})
    foreign = _folder(tmp_path / "foreign", {"config.json": '{"theme": "dark"}', "notes.txt": "mine"})
    running = _folder(tmp_path / "running", {"config.json": "{}", "checkpoint/": ""})
    (tmp_path / "empty").mkdir()
    for path, kind in ((tmp_path / "new", "student"), (tmp_path / "empty", "binarizer"), (student, "student"),
                       (running, "student"), (foreign, "binarizer"), (bundle / "sub", "student")):
        assert check_out_kind(path, kind) == path
    with pytest.raises(OndeviceError, match=r"holds an exported bundle .*not a student encoder; choose an empty"):
        check_out_kind(bundle, "student")
    with pytest.raises(OndeviceError, match="holds a student encoder"):
        check_out_kind(student, "binarizer")
    with pytest.raises(OndeviceError, match="holds an exported bundle"):
        check_out_kind(bundle, "sharded-index")
    with pytest.raises(OndeviceError, match="holds a config.json that is not part of a student encoder"):
        check_out_kind(foreign, "student")
    with pytest.raises(OndeviceError, match="is a file"):
        check_out_kind(foreign / "notes.txt", "student")


def test_an_index_file_is_written_only_over_an_index_file(tmp_path):
    from ondevice.errors import OndeviceError

    index = HammingIndex(16)
    index.add(np.arange(8, dtype=np.uint8).reshape(4, 2))
    index.save(tmp_path / "a.odx")
    index.save(tmp_path / "a.odx")  # an earlier index is replaced
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(OndeviceError, match="exists and is not a Hamming index file"):
        index.save(tmp_path / "model.safetensors")
    assert (tmp_path / "model.safetensors").read_bytes() == b"weights"


def test_artifact_file_refuses_links_inside_the_folder_only(tmp_path):
    from ondevice.errors import OndeviceError
    from ondevice.io import artifact_file

    art, outside = tmp_path / "art", tmp_path / "outside"
    (art / "sub").mkdir(parents=True)
    outside.mkdir()
    (art / "a.json").write_text("{}")
    (outside / "secret.txt").write_text("secret")
    assert artifact_file(art, "a.json", "student") == art / "a.json"
    assert artifact_file(art, "missing.txt", "student") == art / "missing.txt"  # a missing file is the caller's to report
    (art / "b.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(OndeviceError, match=r"^student .*art: b\.txt is a symbolic link; .*copy the file in instead"):
        artifact_file(art, "b.txt", "student")
    (art / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OndeviceError, match=r"linked/secret\.txt lies in linked/, a symbolic link"):
        artifact_file(art, "linked/secret.txt", "bundle")
    (tmp_path / "alias").symlink_to(art, target_is_directory=True)  # the folder itself is the user's choice
    assert artifact_file(tmp_path / "alias", "a.json", "student").read_text() == "{}"
    os.mkfifo(art / "pipe.json")  # reading a FIFO would block forever
    with pytest.raises(OndeviceError, match=r"pipe\.json is not a regular file"):
        artifact_file(art, "pipe.json", "student")
    assert artifact_file(art, "sub", "student") == art / "sub"  # folders (a run's student/) pass


def test_read_npy_refuses_every_file_that_is_not_a_numeric_npy(tmp_path):
    """An empty, foreign, truncated, zipped or pickled .npy is one line naming the flag, never EOFError or an unpickle."""
    from ondevice.errors import OndeviceError
    from ondevice.io import read_npy

    np.save(tmp_path / "good.npy", np.arange(12, dtype=np.uint8).reshape(3, 4))
    good = (tmp_path / "good.npy").read_bytes()
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "z.npz", a=np.zeros(3))
    cases = {"empty.npy": (b"", "is empty"), "text.npy": (b"hello\n", "not a .npy file"),
             "trunc.npy": (good[:-3], "check the file is complete"), "head.npy": (good[:20], "check the file is complete"),
             "zip.npy": ((tmp_path / "z.npz").read_bytes(), ".npz archive"),
             "obj.npy": ((tmp_path / "obj.npy").read_bytes(), "Python objects")}
    for name, (data, match) in cases.items():
        (tmp_path / name).write_bytes(data)
        for mmap in (True, False):
            with pytest.raises(OndeviceError, match=match) as e:
                read_npy(tmp_path / name, "--codes", mmap=mmap)
            assert str(e.value).startswith("--codes") or "cannot read --codes" in str(e.value)
            assert "\n" not in str(e.value)
    with pytest.raises(OndeviceError, match="is a folder"):
        read_npy(tmp_path, "--codes")
    with pytest.raises(OndeviceError, match="--codes file not found"):
        read_npy(tmp_path / "nope.npy", "--codes")
    assert np.array_equal(read_npy(tmp_path / "good.npy", "--codes"), np.arange(12).reshape(3, 4))
