"""ondevice.layouts: every artifact kind is told from the files its real writer leaves, and nothing else is taken
for one; the wrong-folder messages name what a folder is."""

from __future__ import annotations

import json

import pytest

from ondevice import layouts
from ondevice.binarize import Binarizer
from ondevice.errors import OndeviceError


def test_every_kind_is_told_from_what_its_writer_wrote(artifacts):
    assert set(artifacts) == set(layouts.KINDS)  # a new kind needs a real artifact here
    for kind, path in artifacts.items():
        assert layouts.identify(path) == kind, (kind, sorted(p.name for p in path.iterdir()) if path.is_dir() else path)


def test_a_pair_runs_encoder_is_a_student(artifacts):
    for kind in ("dse-run", "dvbert-run", "dipair-run"):
        assert layouts.identify(artifacts[kind] / layouts.RUN_STUDENT) == "student"


def test_a_two_precision_export_holds_bundles(artifacts):
    for precision in layouts.PRECISIONS:
        assert layouts.identify(artifacts["bundles"] / precision) == "bundle"


def test_other_paths_are_no_kind(tmp_path):
    assert layouts.identify(tmp_path / "missing") is None
    assert layouts.identify(tmp_path) is None  # empty folder
    (tmp_path / "notes.txt").write_text("ONDVIDX but not the magic\n")
    assert layouts.identify(tmp_path / "notes.txt") is None
    assert layouts.identify(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    assert layouts.identify(tmp_path) is None  # a foreign manifest with no encoder graph
    (tmp_path / "manifest.json").write_text("{not json")
    assert layouts.identify(tmp_path) is None


def test_a_config_and_weights_are_a_student_only_without_a_model_type(tmp_path):
    (tmp_path / layouts.STUDENT_WEIGHTS).write_bytes(b"")
    (tmp_path / layouts.STUDENT_CONFIG).write_text(json.dumps({"model_type": "bert", "hidden_size": 16}))
    assert layouts.identify(tmp_path) == "hf-model"
    (tmp_path / layouts.STUDENT_CONFIG).write_text(json.dumps({"vocab_size": 9, "embedding_dim": 4}))
    assert layouts.identify(tmp_path) == "student"
    (tmp_path / layouts.STUDENT_CONFIG).write_text("[corrupt")  # still ours: its loader names the problem
    assert layouts.identify(tmp_path) == "student"


def test_what_it_is(artifacts, tmp_path):
    assert layouts.what_it_is(tmp_path / "missing") == "it does not exist"
    assert layouts.what_it_is(tmp_path) == "it is nothing ondevice writes"
    assert layouts.what_it_is(artifacts["student"]) == ("it is a student encoder (made by `ondevice distill` or "
                                                        "`ondevice unpack`)")
    (tmp_path / layouts.BINARIZER_CONFIG).write_text("{}")
    assert layouts.what_it_is(tmp_path, "binarizer").endswith("with files missing (an interrupted copy?)")


def test_loaders_handed_the_wrong_folder_say_what_it_is(artifacts):
    from ondevice.pairs.crossencoder import CrossEncoderTeacher
    from ondevice.runtime import Bundle
    from ondevice.student import Student

    with pytest.raises(OndeviceError, match=r"not a binarizer dir .*it is a student encoder \(made by"):
        Binarizer.load(artifacts["student"])
    with pytest.raises(OndeviceError, match=r"manifest.json is missing; it is a binarizer \(made by `ondevice "
                                            r"binarize`\), not a bundle"):
        Bundle.load(artifacts["binarizer"])
    with pytest.raises(OndeviceError, match="it is a bundle: `ondevice unpack"):
        Student.load(artifacts["bundles"])
    with pytest.raises(OndeviceError, match=r"it is a pair-model run: its fine-tuned encoder is \S+/dipair/student$"):
        Student.load(artifacts["dipair-run"])
    with pytest.raises(OndeviceError, match=r"not a cross-encoder teacher .*it is a DSE pair-model run"):
        CrossEncoderTeacher.load(artifacts["dse-run"])


def test_the_guide_table_lists_every_kind():
    from pathlib import Path

    guide = (Path(__file__).parents[1] / "docs" / "guides" / "bundle.md").read_text(encoding="utf-8")
    section = guide.split("## What is this folder? `ondevice info`", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {name.strip("` ") for row in rows for name in row.split("|")[1].split(",")}
    assert listed == set(layouts.KINDS)


def test_a_linked_settings_file_is_not_read(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"format": layouts.SHARDS_FORMAT}))
    folder = tmp_path / "artifact"
    folder.mkdir()
    (folder / layouts.MANIFEST).symlink_to(outside)
    assert layouts.identify(folder) is None  # the outside file would name it a sharded index
    (folder / layouts.MANIFEST).unlink()
    (folder / layouts.MANIFEST).write_text(outside.read_text())
    assert layouts.identify(folder) == "sharded-index"
