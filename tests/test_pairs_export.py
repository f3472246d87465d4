"""Pair head in a bundle: ONNX fp32 equals the torch head, int8 close, manifest block, golden pairs, Java parity."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.export import add_pair_head, build_head_graph, build_int8_head_graph
from ondevice.pairs.model import PairHeadConfig, head_forward_numpy, load_head_weights
from ondevice.runtime import Bundle


def _ort(model, u, v):
    from ondevice.ort_session import cpu_session

    s = cpu_session(model.SerializeToString())
    return s.run(["logits"], {"u": u, "v": v})[0]


def test_graphs_match_reference():
    rng = np.random.default_rng(0)
    cfg = PairHeadConfig(dim=12, hidden=10, outputs=3, kind="classes", labels=["n", "e", "c"])
    w = {"hidden.weight": rng.normal(0, 0.3, (10, 48)).astype(np.float32), "hidden.bias": rng.normal(size=10).astype(np.float32),
         "out.weight": rng.normal(0, 0.3, (3, 10)).astype(np.float32), "out.bias": rng.normal(size=3).astype(np.float32)}
    u, v = np.tanh(rng.normal(size=(64, 12))).astype(np.float32), np.tanh(rng.normal(size=(64, 12))).astype(np.float32)
    ref = head_forward_numpy(w, u, v)
    np.testing.assert_allclose(_ort(build_head_graph(cfg, w), u, v), ref, atol=1e-5)
    q = _ort(build_int8_head_graph(cfg, w), u, v)
    assert np.abs(q - ref).max() < 0.1 * ref.std() and (q.argmax(1) == ref.argmax(1)).mean() >= 0.9


def test_bundle_has_pair_block_and_scores_like_torch(pair_env):
    from ondevice.pairs.train import PairStudent

    root = pair_env.bundle()
    ps = PairStudent.load(pair_env.run())
    a, b = ["the cat sat on the mat.", "a big red car", ""], ["the cat sat on a mat.", "a small blue car", "moon"]
    ref = ps.logits(a, b)[:, 0] * 5.0  # STS-B: logits in [0, 1] units, scores on the 0-5 scale
    for precision, tol in (("fp32", 1e-4), ("int8", 0.15)):
        bundle = Bundle.load(root, precision=precision)
        block = bundle.manifest["pairs"]
        assert block["task"] == "stsb" and block["output_transform"] == {"type": "affine", "scale": 5.0, "offset": 0.0}
        assert block["file"] in bundle.manifest["files"] and block["weights"] in bundle.manifest["files"]
        assert block["golden"]["pairs"] == 500 and block["run"]["config"]["alpha"] == 0.5
        np.testing.assert_allclose(bundle.pair_scores(a, b), ref, atol=tol)
        card = (root / precision / "README.md").read_text()
        assert "## Pair head" in card and f"weight {block['blend']['weight']:.2f} chosen on 120 stsb dev pairs" in card
    g = root / "fp32" / "golden"
    emb = np.load(g / "embeddings.npy")
    _, w = load_head_weights(pair_env.run())
    ia, ib = np.load(g / "pair_a.npy"), np.load(g / "pair_b.npy")
    np.testing.assert_allclose(np.load(g / "pair_logits.npy"), head_forward_numpy(w, emb[ia], emb[ib]), atol=1e-5)


def test_tampered_or_missing_head_is_a_one_line_error(pair_env, tmp_path):
    src = pair_env.bundle() / "int8"
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    data = bytearray((bad / "pair_head.onnx").read_bytes())
    data[-5] ^= 0xFF
    (bad / "pair_head.onnx").write_bytes(bytes(data))
    with pytest.raises(OndeviceError, match="sha256|modified"):
        Bundle.load(bad)
    plain = tmp_path / "plain"
    shutil.copytree(src, plain)
    m = json.loads((plain / "manifest.json").read_text())
    del m["pairs"]
    (plain / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OndeviceError, match="no pair head"):
        Bundle.load(plain).pair_scores(["a"], ["b"])
    cfg, w = load_head_weights(pair_env.run())
    wrong = PairHeadConfig(**{**cfg.__dict__, "dim": cfg.dim + 1})
    with pytest.raises(OndeviceError, match="-d vectors"):
        add_pair_head(plain, wrong, w, {})


JAVAC, JAVA = shutil.which("javac"), shutil.which("java")


@pytest.mark.skipif(not (JAVAC and JAVA), reason="javac/java not on PATH")
def test_java_pair_head_parity(pair_env, tmp_path):
    from pathlib import Path

    core = Path(__file__).resolve().parents[1] / "android_demo" / "core"
    sources = [str(p) for p in (core / "src").rglob("*.java")]
    res = subprocess.run(check=False, args=[JAVAC, "-J-XX:TieredStopAtLevel=1", "--release", "8", "-Xlint:all", "-Xlint:-options", "-Werror",
                          "-encoding", "UTF-8", "-d", str(tmp_path / "c"), *sources], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    for precision in ("fp32", "int8"):  # both ship fp32 pair_head.safetensors; golden logits are the fp32 graph's
        out = subprocess.run(check=False, args=[JAVA, "-XX:TieredStopAtLevel=1", "-cp", str(tmp_path / "c"), "ai.ondevice.core.PairParityCheck",
                              str(pair_env.bundle() / precision), "--max-abs-diff", "1e-5"],
                             capture_output=True, text=True, timeout=300)
        values = dict(re.findall(r"^(\w+)=(\S+)", out.stdout, flags=re.MULTILINE))
        assert out.returncode == 0, out.stdout + out.stderr
        assert values["pairs"] == "500" and values["decisions_identical"] == "500/500" and float(values["max_abs_diff"]) <= 1e-5
        # the blend the bundle ranks by: head + embedding cosine, the same keys as Python's golden ones
        assert values["blend_pairs"] == "500" and float(values["blend_max_abs_diff"]) <= 1e-5


def test_head_onto_an_existing_bundle_keeps_its_encoder(pair_env, tmp_path):
    """`pairs export --bundle`: a frozen-encoder head added to a copy of a bundle; encoder files byte-identical."""
    from ondevice.pairs.export import add_head_to_bundle
    from ondevice.pairs.train import PairStudent, train_dse

    plain = pair_env.plain_bundle()
    run = tmp_path / "frozen"
    train_dse(pair_env.dse_config(freeze_encoder=True), run, progress=False)
    out = add_head_to_bundle(run, plain, tmp_path / "paired")

    before = json.loads((plain / "manifest.json").read_text())["files"]
    after = Bundle.load(out).manifest
    for name, entry in before.items():  # every file of the source but its model card is the same bytes
        if name != "README.md":
            assert after["files"][name] == entry and (out / name).read_bytes() == (plain / name).read_bytes()
    block = after["pairs"]
    assert block["encoder"]["frozen"] and block["encoder"]["check"]["mean_cosine"] > 0.9999
    assert block["run"]["config"]["freeze_encoder"] is True and "blend" in block
    assert "trained on this bundle's own encoder, frozen" in (out / "README.md").read_text()  # the model card says so
    # same encoder bytes, same identity: an index built with the source bundle matches the copy without a warning
    assert Bundle.load(out).encoder_id == Bundle.load(plain).encoder_id
    from ondevice.index import check_encoder

    catalog = ["the cat sat on the mat.", "a big red car"]
    assert check_encoder(Bundle.load(plain).index_texts(catalog).index.encoder, Bundle.load(out).encoder_id, "x") is None
    a, b = ["the cat sat on the mat.", "a big red car"], ["the cat sat on a mat.", "a small blue car"]
    np.testing.assert_allclose(Bundle.load(out).pair_scores(a, b), PairStudent.load(run).logits(a, b)[:, 0] * 5.0, atol=1e-4)
    g = out / "golden"
    _, w = load_head_weights(run)
    emb, ia, ib = np.load(g / "embeddings.npy"), np.load(g / "pair_a.npy"), np.load(g / "pair_b.npy")
    np.testing.assert_allclose(np.load(g / "pair_logits.npy"), head_forward_numpy(w, emb[ia], emb[ib]), atol=1e-5)

    # a head that fits another encoder, a bundle that has a head, an --out that is not a bundle: one-line errors
    with pytest.raises(OndeviceError, match="fine-tuned its encoder"):
        add_head_to_bundle(pair_env.run(), plain, tmp_path / "x")
    # a bundle with a DSE head gets the new head in its place, none of the old head's files kept; a DiPair bundle refuses
    again = tmp_path / "again"
    train_dse(pair_env.dse_config(freeze_encoder=True, head_hidden=5, augment_random=0), again, progress=False)
    assert (out / "golden" / "pair_blend_keys.npy").is_file()  # the old head's blend: not carried into the new bundle
    replaced = add_head_to_bundle(again, out, tmp_path / "y", blend=False)
    block = Bundle.load(replaced).manifest["pairs"]
    assert block["head"]["hidden"] == 5 and block["encoder"]["replaced_head"] == {"task": "stsb", "method": "dse"}
    assert "blend" not in block and not (replaced / "golden" / "pair_blend_keys.npy").exists()
    np.testing.assert_allclose(Bundle.load(replaced).pair_scores(a, b), PairStudent.load(again).logits(a, b)[:, 0] * 5.0,
                               atol=1e-4)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["dipair"] = {"task": "stsb"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match="has a DiPair head"):
        add_head_to_bundle(run, out, tmp_path / "y2")
    # crafted content of a source bundle or run: one line each, nothing published
    import hashlib
    import shutil

    crafted = tmp_path / "crafted"
    shutil.copytree(replaced, crafted)
    manifest = json.loads((crafted / "manifest.json").read_text())
    manifest["pairs"]["file"] = ["pair_head.onnx"]
    (crafted / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match="file and weights are not files it lists"):
        add_head_to_bundle(run, crafted, tmp_path / "y3")
    shutil.rmtree(crafted)
    shutil.copytree(plain, crafted)
    np.save(crafted / "golden" / "embeddings.npy", np.zeros((4, 7), np.float32))
    manifest = json.loads((crafted / "manifest.json").read_text())
    data = (crafted / "golden" / "embeddings.npy").read_bytes()
    manifest["files"]["golden/embeddings.npy"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (crafted / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match=r"embeddings.npy holds float32 \(4, 7\)"):
        add_head_to_bundle(run, crafted, tmp_path / "y4")
    nan_run = tmp_path / "nan-run"
    shutil.copytree(run, nan_run)
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(nan_run / "pair_head.safetensors"))
    weights["out.bias"][:] = np.nan
    save_file(weights, str(nan_run / "pair_head.safetensors"))
    with pytest.raises(OndeviceError, match="NaN or inf"):
        add_head_to_bundle(nan_run, plain, tmp_path / "y5")
    assert not any((tmp_path / n).exists() for n in ("y3", "y4", "y5"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(OndeviceError, match="not a bundle"):
        add_head_to_bundle(run, plain, tmp_path / "busy")
    from pairs_fixtures import make_student

    other = pair_env.plain_bundle(make_student(tmp_path / "other", seed=3), tmp_path / "other-bundle")
    with pytest.raises(OndeviceError, match="not the bundle's"):
        add_head_to_bundle(run, other, tmp_path / "z")
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging folder left


def test_bad_bits_and_out_fail_before_the_run_is_loaded(tmp_path):
    """`pairs export --bits 0` failed only after encoding the training sentences (~a minute); now at once, as does an
    --out that is a file (the run named here does not even exist)."""
    from ondevice.pairs.export import export_pair_bundle

    with pytest.raises(OndeviceError, match="--bits must be between 1 and"):
        export_pair_bundle(tmp_path / "no-run", tmp_path / "b", bits=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OndeviceError, match="is a file, not a directory"):
        export_pair_bundle(tmp_path / "no-run", tmp_path / "file", bits=64)
