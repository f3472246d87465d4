"""`ondevice requantize` (export/requantize.py, quantize.requantize_7bit): an 8-bit int8 bundle -> 7-bit LSTM weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import WORDS as CORPUS_WORDS
from conftest import make_sentences

from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.runtime import Bundle

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")


def _student(seed: int = 0):
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *CORPUS_WORDS, ".", "!", "?"]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=24, hidden_size=32, pooling="max", output_dim=32, max_tokens=20)
    emb = np.random.default_rng(seed).normal(0, 0.7, (len(vocab), 24)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=20), emb, seed=seed)


@pytest.fixture(scope="module")
def bundle8(tmp_path_factory):
    """An int8 bundle with 8-bit LSTM weights (as exported before 7 bits were the default), golden files and an eval."""
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer

    student = _student()
    binarizer = Binarizer.fit(student.encode(make_sentences(300, seed=1)), "random", 64, seed=3)
    out = tmp_path_factory.mktemp("rq") / "bundle8"
    export(student, binarizer, out, ExportConfig(precision="int8", golden=True, golden_count=80, int8_weight_bits=8),
           evaluation={"stsb_test": 12.34})
    return out


def _lstm(model_bytes: bytes) -> dict[str, np.ndarray]:
    model = onnx.load_model_from_string(model_bytes)
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.startswith("lstm_")}


def test_requantize_7bit_rerounds_every_channel_within_one_step(bundle8):
    from ondevice.export.quantize import int8_weight_peak, requantize_7bit

    model = onnx.load_model_from_string((bundle8 / "encoder.onnx").read_bytes())
    before = _lstm(model.SerializeToString())
    assert int8_weight_peak(model) == 127
    changed = requantize_7bit(model)
    after = _lstm(model.SerializeToString())
    assert int8_weight_peak(model) == 64 and requantize_7bit(model) == 0  # a second pass has nothing left to do
    channels = 0
    for name in ("lstm_W", "lstm_R"):
        q, s = before[f"{name}_quantized"].astype(np.float64), before[f"{name}_scale"].astype(np.float64)
        q2, s2 = after[f"{name}_quantized"].astype(np.float64), after[f"{name}_scale"].astype(np.float64)
        w, w2 = q * s[:, None, :], q2 * s2[:, None, :]
        # brute force: each channel's old dequantized weights lie within half a new step of the new ones
        assert np.all(np.abs(w - w2) <= s2[:, None, :] / 2 + 1e-6)
        assert np.abs(q2).max() <= 64
        channels += int((np.abs(q).max(axis=1) > 64).sum())
    assert changed == channels > 0


def test_requantized_bundle(bundle8, tmp_path):
    """Same files byte for byte except the graph, card and manifest; checks measured again; eval kept aside; vectors
    close to the source's; the default and exact onnxruntime sessions now agree bit for bit."""
    from ondevice.export.requantize import requantize_bundle

    from ondevice.ort_session import cpu_session, session_options

    out = tmp_path / "bundle7"
    record = requantize_bundle(bundle8, out)
    src, new = Bundle.load(bundle8), Bundle.load(out)
    m = new.manifest
    assert m["onnx"]["int8_weight_bits"] == 7 and m["requantized"] == record and record["largest_weight_before"] == 127
    assert record["from_encoder_sha256"] == src.manifest["files"]["encoder.onnx"]["sha256"]
    assert record["source_checks"] == src.manifest["checks"] and record["bit_packing"] == "unchanged"
    assert "eval" not in m and m["eval_before_requantization"] == {"stsb_test": 12.34}
    assert "encoder_identity" not in m and new.encoder_id != src.encoder_id
    changed = {n for n, e in m["files"].items() if src.manifest["files"].get(n) != e}
    assert changed == {"encoder.onnx", "README.md"} and set(m["files"]) == set(src.manifest["files"])
    assert m["checks"]["sentences"] == 80 and m["checks"]["mean_cosine_vs_golden_fp32"] > 0.99
    assert record["source_checks_vs_golden_fp32"]["sentences"] == 80
    card = (out / "README.md").read_text()
    assert "| int8 LSTM weights | 7-bit |" in card and "## Requantized" in card and "before requantization" in card
    texts = make_sentences(120, seed=4)
    a, b = src.encode(texts), new.encode(texts)
    assert ((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean() > 0.99
    ids, lengths = new.tokenizer.batch(texts)
    graph = (out / "encoder.onnx").read_bytes()
    exact, default = (cpu_session(graph, session_options(threads=1, exact_int8=e)) for e in (True, False))
    assert np.array_equal(*(s.run(["code"], {"ids": ids, "lengths": lengths})[0] for s in (exact, default)))
    # an evaluation of the new graph replaces the old one
    requantize_bundle(bundle8, out, evaluation={"stsb_test": 12.3})
    m = Bundle.load(out).manifest
    assert m["eval"] == {"stsb_test": 12.3} and "eval_before_requantization" not in m


def test_requantize_refuses_fp32_and_7bit_bundles(bundle8, tmp_path, capsys):
    from ondevice.export.requantize import requantize_bundle

    out = tmp_path / "b7"
    requantize_bundle(bundle8, out)
    with pytest.raises(OndeviceError, match=r"within \+-64 already \(7-bit\); nothing to requantize"):
        requantize_bundle(out, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    manifest = json.loads((bundle8 / "manifest.json").read_text())
    fp32 = tmp_path / "fp32"
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer

    student = _student()
    export(student, Binarizer.fit(student.encode(make_sentences(100)), "random", 64, seed=3), fp32, ExportConfig())
    assert main(["requantize", "--bundle", str(fp32), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a fp32 bundle; only int8 bundles have int8 weights to requantize" in err and len(err.splitlines()) == 1
    assert manifest == json.loads((bundle8 / "manifest.json").read_text())  # the source is never touched
    import shutil

    from ondevice.pairs.export import seal_bundle

    dipair = tmp_path / "dipair"
    shutil.copytree(bundle8, dipair)
    seal_bundle(dipair, {**manifest, "dipair": {"task": "stsb"}})
    with pytest.raises(OndeviceError, match="carries a DiPair head.*dipair-export"):
        requantize_bundle(dipair, tmp_path / "d7")
    # a graph with asymmetric int8 weights (not what export writes): one line on the command line, nothing written
    model = onnx.load_model_from_string((bundle8 / "encoder.onnx").read_bytes())
    zero = next(t for t in model.graph.initializer if t.name == "lstm_R_zero_point")
    zero.CopyFrom(onnx.numpy_helper.from_array(np.ones(onnx.numpy_helper.to_array(zero).shape, np.int8), zero.name))
    crafted = tmp_path / "asym"
    shutil.copytree(bundle8, crafted)
    (crafted / "encoder.onnx").write_bytes(model.SerializeToString())
    seal_bundle(crafted, json.loads((bundle8 / "manifest.json").read_text()))
    assert main(["requantize", "--bundle", str(crafted), "--out", str(tmp_path / "a7")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nonzero int8 zero points" in err and not (tmp_path / "a7").exists()


def test_cli_requantize(bundle8, tmp_path, capsys):
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"measured": "by the caller"}))
    assert main(["requantize", "--bundle", str(bundle8), "--out", str(tmp_path / "b"), "--eval", str(ev)]) == 0
    out = capsys.readouterr().out
    assert '"weight_bits": 7' in out and f"bundle written to {tmp_path / 'b'}" in out
    assert Bundle.load(tmp_path / "b").manifest["eval"] == {"measured": "by the caller"}


def test_requantize_refits_a_pair_heads_blend(pair_env, tmp_path):
    """A bundle with a DSE head and its blend: the blend is fitted again through the new encoder, golden keys rewritten."""
    from ondevice.export.bundle import ExportConfig, export
    from ondevice.export.requantize import requantize_bundle

    from ondevice.binarize import Binarizer
    from ondevice.pairs.blend import Blend
    from ondevice.pairs.export import add_head_to_bundle
    from ondevice.pairs.metrics import cosines
    from ondevice.pairs.train import train_dse
    from ondevice.student import Student

    base = tmp_path / "base"
    student = Student.load(pair_env.student)
    export(student, Binarizer.fit(student.encode(make_sentences(200)), "random", 64, seed=1), base,
           ExportConfig(precision="int8", golden=True, golden_count=40, int8_weight_bits=8))
    run = tmp_path / "frozen"
    train_dse(pair_env.dse_config(freeze_encoder=True), run, progress=False)
    headed = tmp_path / "headed"
    add_head_to_bundle(run, base, headed, blend=True, data=pair_env.data)
    requantize_bundle(headed, tmp_path / "new", data=pair_env.data)
    old, new = (json.loads((p / "manifest.json").read_text()) for p in (headed, tmp_path / "new"))
    assert new["pairs"]["blend"]["fitted_on"]["graphs"] == "this folder's encoder and head"
    assert new["pairs"]["blend"]["head_mean"] != old["pairs"]["blend"]["head_mean"]
    g = tmp_path / "new" / "golden"
    blend = Blend.from_dict(new["pairs"]["blend"], "test")
    logits, rows, ia, ib = (np.load(g / f) for f in ("pair_logits.npy", "embeddings.npy", "pair_a.npy", "pair_b.npy"))
    np.testing.assert_allclose(np.load(g / "pair_blend_keys.npy"), blend.keys(logits[:, 0], cosines(rows[ia], rows[ib])),
                               rtol=1e-6, atol=1e-6)
    assert "## Pair head" in (tmp_path / "new" / "README.md").read_text()
    encoder = new["pairs"]["encoder"]  # measured again, against the encoder the head's own check was made on
    assert encoder["check_before_requantization"] == old["pairs"]["encoder"]["check"]
    assert encoder["check"]["mean_cosine"] > 0.99 and encoder["check"]["against"].startswith("the encoder this one")
    with pytest.raises(OndeviceError, match=r"stsb dev pairs: .*\(pass --data DIR"):
        requantize_bundle(headed, tmp_path / "nodata", data=tmp_path / "nowhere")


def _old_packing(model) -> None:
    """The bit packing exports wrote before 2026-11-28: a (B, bytes, 8) x (8,) MatMul (the inverse of the rewrite)."""
    nodes = {n.name: n for n in model.graph.node}
    inits = {t.name: t for t in model.graph.initializer}
    nbytes = int(onnx.numpy_helper.to_array(inits["shape_bytes"])[1])
    inits["shape_bytes"].CopyFrom(onnx.numpy_helper.from_array(np.array([0, nbytes, 8], np.int64), "shape_bytes"))
    inits["bit_values"].CopyFrom(onnx.numpy_helper.from_array((1 << np.arange(8)).astype(np.float32), "bit_values"))
    nodes["bits_by_byte"].input[1] = "shape_bytes"
    model.graph.initializer.remove(inits["shape_bits_by_byte"])
    model.graph.node.remove(nodes["pack_rows"])
    nodes["code_uint8"].input[0] = "pack"


def test_single_product_packing_restores_the_current_graph(bundle8):
    """An old-style packing rewritten gives the graph export writes now, node for node, and the same codes."""
    from ondevice.export.onnx_graph import single_product_packing

    from ondevice.ort_session import cpu_session

    current = onnx.load_model_from_string((bundle8 / "encoder.onnx").read_bytes())
    old = onnx.load_model_from_string(current.SerializeToString())
    _old_packing(old)
    assert single_product_packing(old) and not single_product_packing(old)
    key = lambda m: (sorted(n.SerializeToString() for n in m.graph.node),
                     sorted(t.SerializeToString() for t in m.graph.initializer))
    assert key(old) == key(current)
    _old_packing(old)
    ids, lengths = Bundle.load(bundle8).tokenizer.batch(make_sentences(50, seed=2))
    codes = [cpu_session(m.SerializeToString()).run(["code"], {"ids": ids, "lengths": lengths})[0] for m in (old, current)]
    assert np.array_equal(*codes)
    with pytest.raises(OndeviceError, match="no bit packing nodes"):
        model = onnx.load_model_from_string(current.SerializeToString())
        model.graph.node.remove(next(n for n in model.graph.node if n.name == "pack"))
        single_product_packing(model)
