"""ondevice.describe and `ondevice info`: every kind is summarised from its saved settings, --verify loads it with
its loader's checks, and what is not an artifact is one clear line."""

from __future__ import annotations

import json

import pytest

from ondevice import layouts
from ondevice.cli import main
from ondevice.describe import describe, summary_lines
from ondevice.errors import OndeviceError


def test_every_kind_is_described_and_verified(artifacts):
    for kind, path in artifacts.items():
        info = describe(path, verify=True)
        assert info["kind"] == kind and info["verified"] is True
        assert info["what"] == layouts.KINDS[kind].what and info["bytes"] > 0
        assert info["summary"] and "None" not in info["summary"], (kind, info["summary"])
        lines = summary_lines(info)
        assert lines[0].startswith(f"{path}: {info['what']}") and "loaded with every check" in lines[-1]


def test_facts_come_from_the_saved_settings(artifacts):
    from ondevice.binarize import Binarizer
    from ondevice.index import read_header
    from ondevice.runtime import read_manifest

    b = Binarizer.load(artifacts["binarizer"])
    assert describe(artifacts["binarizer"])["summary"] == f"random: {b.dim}-d vectors to {b.bits} bits"
    head = read_header(artifacts["index"])
    index = describe(artifacts["index"])
    assert index["summary"].startswith(f"{head['count']:,} codes x {head['bits']} bits")
    assert index["origin"] == (head["encoder"].describe() if head["encoder"] else "encoder not recorded")
    manifest = read_manifest(artifacts["bundle"])
    info = describe("pretrained")  # the shipped bundle by name
    assert info["path"] == str(artifacts["bundle"])
    assert info["summary"].startswith(f"{manifest['precision']} encoder, {manifest['dim']}-d vectors, "
                                      f"{manifest['bits']}-bit")
    both = describe(artifacts["bundles"])
    assert set(both["precisions"]) == set(layouts.PRECISIONS)
    run = describe(artifacts["dse-run"])
    assert run["config"]["dev"] == json.loads((artifacts["dse-run"] / layouts.RUN_DEV).read_text())


def test_verify_catches_what_reading_the_settings_does_not(artifacts, tmp_path):
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(artifacts["bundles"] / "fp32", copy)
    with open(copy / layouts.ENCODER_ONNX, "r+b") as fh:  # one flipped byte in the graph
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    assert describe(copy)["kind"] == "bundle"  # names and settings only
    with pytest.raises(OndeviceError, match="sha256"):
        describe(copy, verify=True)


def test_not_an_artifact(tmp_path):
    with pytest.raises(OndeviceError, match="does not exist"):
        describe(tmp_path / "missing")
    with pytest.raises(OndeviceError, match="is nothing ondevice writes"):
        describe(tmp_path)


def test_cli(artifacts, capsys, tmp_path):
    assert main(["info", str(artifacts["student"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{artifacts['student']}: a student encoder") and "add --verify" in out
    assert main(["info", str(artifacts["index"]), "--json", "--verify"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["kind"] == "index" and parsed["verified"] is True
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ondevice info: error:") and "Traceback" not in err


def test_settings_that_are_not_ours_are_one_line(artifacts, tmp_path):
    import shutil

    copy = tmp_path / "binarizer"
    shutil.copytree(artifacts["binarizer"], copy)
    (copy / layouts.BINARIZER_CONFIG).write_text("[1, 2]")
    with pytest.raises(OndeviceError, match="is not a JSON object"):
        describe(copy)
    with open(copy / layouts.BINARIZER_CONFIG, "wb") as fh:  # sparse: nothing is written but the size
        fh.truncate(17 << 20)
    with pytest.raises(OndeviceError, match="far more than any settings file"):
        describe(copy)


def test_a_distilled_student_says_what_it_was_distilled_from(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    from ondevice.distill import DistillConfig, distill

    cfg = DistillConfig(corpus=str(tiny_corpus), teacher=str(tiny_teacher), word_vectors=str(tiny_word_vectors),
                        hidden_size=8, epochs=1, batch_size=16, val_fraction=0.1, seed=4, threads=1,
                        checkpoint_minutes=0)
    distill(cfg, tmp_path / "student", progress=False)
    info = describe(tmp_path / "student", verify=True)
    assert info["kind"] == "student" and info["config"]["distill"]["seed"] == 4
    assert info["origin"].startswith(f"distilled from {tiny_teacher.parent.name}/{tiny_teacher.name} on all "
                                     f"sentences of {tiny_corpus}, 1 epoch(s), seed 4")
    assert info["scores"].startswith("last epoch: {")


@pytest.mark.parametrize("field,value", [("student", [1, 2]), ("training", "x"), ("binarizer", 7)])
def test_settings_of_the_wrong_shape_are_one_line(artifacts, tmp_path, field, value):
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(artifacts["bundles"] / "fp32", copy)
    manifest = json.loads((copy / layouts.MANIFEST).read_text())
    manifest[field] = value
    (copy / layouts.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match="its settings are not what `ondevice export` writes"):
        describe(copy)


def test_a_linked_file_in_a_student_is_one_line(tmp_path, capsys):
    """`ondevice info --verify S` refuses a student whose weights are a link out of its folder (exit 2, one line);
    without --verify, a linked settings file is refused too, before it is read."""
    pytest.importorskip("torch")
    import numpy as np

    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, "the", "cat"]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=4, hidden_size=3, output_dim=5)
    s = tmp_path / "S"
    Student.from_embeddings(cfg, Tokenizer(vocab), np.zeros((4, 4), np.float32), seed=0).save(s)
    assert main(["info", "--verify", str(s)]) == 0  # the plain folder verifies
    capsys.readouterr()
    (tmp_path / "elsewhere").mkdir()
    for name, args in (("model.safetensors", ["--verify"]), ("config.json", [])):
        (s / name).rename(tmp_path / "elsewhere" / name)  # same bytes, so only the link is wrong
        (s / name).symlink_to(tmp_path / "elsewhere" / name)
        assert main(["info", *args, str(s)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ondevice info: error:") and "Traceback" not in err
        assert f"{name} is a symbolic link; artifacts are read only from plain files inside their folder" in err
        (s / name).unlink()
        (tmp_path / "elsewhere" / name).rename(s / name)


def test_a_corrupt_manifest_or_config_is_named_not_described(tmp_path, capsys):
    """`ondevice info` (without --verify) on a sharded index whose manifest.json is broken JSON names the JSON error;
    on a student or binarizer config with a field of the wrong type it is one line, not "BiLSTM abc hidden"."""
    import numpy as np

    from ondevice.scale.shards import build_shards

    build_shards(np.zeros((4, 2), np.uint8), tmp_path / "shards", 2)
    (tmp_path / "shards" / layouts.MANIFEST).write_text('{"format": ')
    student = tmp_path / "student"
    student.mkdir()
    (student / layouts.STUDENT_CONFIG).write_text(json.dumps({"vocab_size": 4, "embedding_dim": 4, "hidden_size": "abc"}))
    (student / layouts.STUDENT_WEIGHTS).write_bytes(b"x")
    binarizer = tmp_path / "binarizer"
    binarizer.mkdir()
    (binarizer / layouts.BINARIZER_CONFIG).write_text(json.dumps({"method": "random", "bits": "x", "dim": 8}))
    (binarizer / layouts.BINARIZER_WEIGHTS).write_bytes(b"x")
    for path, expected in ((tmp_path / "shards", "manifest.json is not valid JSON (Expecting value"),
                           (student, "hidden_size must be an integer, got 'abc'"),
                           (binarizer, "bits must be a positive integer, got 'x'")):
        assert main(["info", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err, err
