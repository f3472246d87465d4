"""`ondevice unpack`: a bundle's network back as a student folder (fp32 exact, int8 dequantized), every pooling."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_sentences
from test_export import _binarizer, _state, _student

from ondevice.cli import main
from ondevice.errors import OndeviceError

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

TEXTS = make_sentences(30, seed=7) + ["", "the the the", " ".join(["a cat"] * 25)]


def _export(tmp_path, pooling: str, **kw):
    from ondevice.export.bundle import ExportConfig, export

    student = _student(pooling, seed=1)
    (folder,) = export(student, _binarizer(student, bits=24), tmp_path / f"b-{pooling}", ExportConfig(**kw))
    return student, folder


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("pooling", ["mean", "max", "last", "meanmax"])
def test_fp32_bundle_unpacks_to_the_same_network(tmp_path, pooling):
    from ondevice.student import Student
    from ondevice.unpack import unpack_bundle

    student, folder = _export(tmp_path, pooling, precision="fp32", torchscript=False)
    record = unpack_bundle(folder, tmp_path / "s")
    back = Student.load(tmp_path / "s")
    assert back.config == student.config and back.tokenizer.vocab == student.tokenizer.vocab
    original = _state(student)
    for name, value in _state(back).items():  # gate order and bias halves restored exactly
        np.testing.assert_allclose(value, original[name], rtol=0, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(back.encode(TEXTS), student.encode(TEXTS), atol=1e-6)
    assert record["weights_from"] == "encoder.onnx (fp32)" and record["golden"] is None


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_int8_bundle_unpacks_to_its_dequantized_weights(tmp_path, pooling):
    from ondevice.export.onnx_graph import rowwise_int8

    from ondevice.student import Student
    from ondevice.unpack import unpack_bundle

    student, folder = _export(tmp_path, pooling, precision="int8", golden=True, torchscript=False)
    record = unpack_bundle(folder, tmp_path / "s")
    back, original = _state(Student.load(tmp_path / "s")), _state(student)
    q, scale = rowwise_int8(original["embedding.weight"])  # the table is exactly its row-wise int8 values
    np.testing.assert_allclose(back["embedding.weight"], q * scale, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(back["proj.weight"], original["proj.weight"])  # the projection stays float
    for name in ("lstm.weight_ih_l0", "lstm.weight_hh_l0_reverse"):  # per gate row: within half a 7-bit step
        peak = np.abs(original[name]).max(axis=1, keepdims=True)
        assert (np.abs(back[name] - original[name]) <= peak / 64 * 0.5 + 1e-6).all(), name
    for name in ("lstm.bias_ih_l0", "lstm.bias_hh_l0_reverse"):
        np.testing.assert_array_equal(back[name], original[name])
    assert record["weights_from"] == "encoder.onnx (int8, weights dequantized)"
    assert record["golden"]["mean_cosine"] > 0.999  # against the fp32 graph's golden embeddings
    assert _cosines(Student.load(tmp_path / "s").encode(TEXTS), student.encode(TEXTS)).min() > 0.995


def test_weights_in_the_bundle_are_taken_as_they_are(tmp_path):
    from ondevice.student import Student
    from ondevice.unpack import unpack_bundle

    student, folder = _export(tmp_path, "max", precision="int8", with_weights=True, torchscript=False)
    assert unpack_bundle(folder, tmp_path / "s")["weights_from"] == "student.safetensors (fp32, exact)"
    back = _state(Student.load(tmp_path / "s"))
    for name, value in _state(student).items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_the_pretrained_model_unpacks_close_to_its_fp32_golden_vectors(tmp_path, capsys):
    assert main(["unpack", "--bundle", "pretrained", "--out", str(tmp_path / "s")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["precision"] == "int8" and record["golden"]["sentences"] == 64
    assert record["golden"]["min_cosine"] > 0.998  # 7-bit LSTM weights since 2026-11-28 (0.9998 with 8-bit)
    assert json.loads((tmp_path / "s" / "unpacked.json").read_text()) == record


def test_bad_bundles_are_one_line_errors(tmp_path, capsys):
    from ondevice.unpack import unpack_bundle

    _, folder = _export(tmp_path, "mean", precision="fp32", torchscript=False)
    onnx_file = folder / "encoder.onnx"
    data = bytearray(onnx_file.read_bytes())
    data[-5] ^= 1
    onnx_file.write_bytes(bytes(data))
    with pytest.raises(OndeviceError, match="sha256"):
        unpack_bundle(folder, tmp_path / "s")
    assert not (tmp_path / "s").exists()  # nothing written from a bundle that failed its checks
    (tmp_path / "empty").mkdir()
    assert main(["unpack", "--bundle", str(tmp_path / "empty"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest.json is missing" in err


def test_a_bundle_where_a_student_is_expected_says_to_unpack_it(tmp_path):
    from ondevice.distill import DistillConfig, apply_init
    from ondevice.student import Student

    _, folder = _export(tmp_path, "mean", precision="fp32", torchscript=False)
    with pytest.raises(OndeviceError, match=f"ondevice unpack --bundle {folder} --out DIR"):
        Student.load(folder)
    with pytest.raises(OndeviceError, match="it is a bundle: `ondevice unpack --bundle pretrained --out DIR`"):
        apply_init(DistillConfig(corpus="x.txt", init_from="pretrained"))
    with pytest.raises(OndeviceError, match="run `ondevice distill` first"):
        Student.load(tmp_path)


def test_golden_files_that_do_not_parse_are_one_line_errors(tmp_path):
    """The golden files are checked against the bundle's own manifest, which a hand-made bundle also controls."""
    import hashlib

    from ondevice.unpack import unpack_bundle

    _, folder = _export(tmp_path, "mean", precision="fp32", golden=True, torchscript=False)
    for body in ("[" * 100_000 + "\n", '{"not": "a string"}\n'):
        (folder / "golden" / "sentences.jsonl").write_text(body)
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["files"]["golden/sentences.jsonl"] = {"bytes": len(body.encode()),
                                                       "sha256": hashlib.sha256(body.encode()).hexdigest()}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(OndeviceError, match="cannot read its golden files|do not match its student"):
            unpack_bundle(folder, tmp_path / "s")
        assert not any((tmp_path / "s").iterdir())  # nothing half-written is left (a rerun would refuse it)


def test_a_foreign_encoder_graph_is_a_one_line_error(tmp_path):
    import hashlib

    import onnx

    from ondevice.unpack import unpack_bundle

    _, folder = _export(tmp_path, "mean", precision="fp32", torchscript=False)
    model = onnx.load(str(folder / "encoder.onnx"))
    keep = [t for t in model.graph.initializer if t.name != "lstm_B"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    data = model.SerializeToString()
    (folder / "encoder.onnx").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["encoder.onnx"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match="not an ondevice encoder graph.*lstm_B"):
        unpack_bundle(folder, tmp_path / "s")


def test_weights_that_do_not_fit_the_student_write_nothing(tmp_path):
    import hashlib

    from safetensors.numpy import load_file, save_file

    from ondevice.unpack import unpack_bundle

    _, folder = _export(tmp_path, "max", precision="fp32", with_weights=True, torchscript=False)
    weights = load_file(str(folder / "student.safetensors"))
    for name, value in (("proj.weight", weights["proj.weight"][:, :-1]), ("lstm.bias_ih_l0", weights["lstm.bias_ih_l0"] * np.nan)):
        bad = {**weights, name: np.ascontiguousarray(value)}
        save_file(bad, str(folder / "student.safetensors"))
        data = (folder / "student.safetensors").read_bytes()
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["files"]["student.safetensors"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(OndeviceError, match="do not fit its student config|NaN or inf"):
            unpack_bundle(folder, tmp_path / "s")
        assert not (tmp_path / "s").exists()


def test_unpack_writes_only_into_a_new_empty_or_earlier_unpack_folder(tmp_path, capsys):
    """Never into a bundle (its own folder included), over someone's config.json, or over a trained student."""
    _, folder = _export(tmp_path, "mean", precision="fp32", torchscript=False)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"theme": "dark"}')
    trained = tmp_path / "trained"
    _student("mean", seed=2).save(trained)
    for out, expected in ((folder, "holds an exported bundle"), (foreign, "holds a config.json that is not part of"),
                          (trained, "holds a trained student")):
        assert main(["unpack", "--bundle", str(folder), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert (foreign / "config.json").read_text() == '{"theme": "dark"}' and not (trained / "unpacked.json").exists()
    assert main(["unpack", "--bundle", str(folder), "--out", str(tmp_path / "u")]) == 0
    assert main(["unpack", "--bundle", str(folder), "--out", str(tmp_path / "u")]) == 0  # an earlier unpack: replaced


def test_a_precision_the_bundle_does_not_hold_is_refused(tmp_path, capsys):
    """`unpack --precision fp32` of an int8-only bundle unpacked the int8 weights without a word; now one line naming
    what the bundle holds, and nothing is written."""
    from ondevice.unpack import unpack_bundle

    with pytest.raises(OndeviceError, match="holds only the int8 precision, not fp32; leave out --precision"):
        unpack_bundle("pretrained", tmp_path / "s", "fp32")
    assert main(["unpack", "--bundle", "pretrained", "--out", str(tmp_path / "s"), "--precision", "fp32"]) == 2
    assert "holds only the int8 precision" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
