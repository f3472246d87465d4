"""DiPair on device: head graph == torch/numpy head, encoder token-state outputs == torch, bundle API, golden pairs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.dipair import DiPairHeadConfig, build_head, head_forward_numpy, load_head_weights
from ondevice.pairs.dipair_export import (
    build_head_graph,
    build_int8_head_graph,
    export_dipair_bundle,
    run_head,
)
from ondevice.runtime import Bundle


@pytest.fixture(scope="module", params=[False, True], ids=["tokens", "pooled-slot"])
def dipair_env(pair_env, tmp_path_factory, request):
    from ondevice.pairs.dipair_train import DiPairConfig, train_dipair

    root = tmp_path_factory.mktemp("dipair")
    cfg = DiPairConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teacher=str(pair_env.teacher()),
                       n=4, m=5, d=8, ffn=16, layers=2, select="firstlast", stage1_epochs=1, stage2_epochs=1, batch_size=16,
                       sra_weight=0.0, augment_random=20, pooled_slot=request.param)
    train_dipair(cfg, root / "run", progress=False)
    export_dipair_bundle(root / "run", root / "bundle", bits=64, precision="both", golden=True)
    return root / "run", root / "bundle"


def _states(rng, b, n, d, pad=True):
    s = np.tanh(rng.normal(0, 0.8, (b, n, d))).astype(np.float32)
    if pad:
        for i, keep in enumerate(rng.integers(1, n + 1, b)):
            s[i, keep:] = 0
    return s


@pytest.mark.parametrize("vec_dim", [0, 5])
@pytest.mark.parametrize("heads,layers", [(2, 2), (1, 2), (1, 1)])  # one head: the graph has no head axis
def test_head_graph_equals_torch_and_reference(vec_dim, heads, layers):
    import torch

    cfg = DiPairHeadConfig(in_dim=6, n=3, m=4, d=8, layers=layers, heads=heads, ffn=12, outputs=3, kind="classes", vec_dim=vec_dim)
    torch.manual_seed(0)
    head = build_head(cfg).eval()
    w = {k: v.numpy() for k, v in head.state_dict().items()}
    rng = np.random.default_rng(0)
    sa, sb = _states(rng, 40, 3, 8), _states(rng, 40, 4, 8)
    with torch.no_grad():
        ref = head(torch.from_numpy(sa), torch.from_numpy(sb)).numpy()
    np.testing.assert_allclose(head_forward_numpy(cfg, w, sa, sb), ref, atol=1e-5)
    np.testing.assert_allclose(run_head(build_head_graph(cfg, w).SerializeToString(), sa, sb), ref, atol=1e-5)
    q = run_head(build_int8_head_graph(cfg, w).SerializeToString(), sa, sb)
    assert np.abs(q - ref).max() < 0.15 * ref.std() + 0.05


def test_bundle_states_scores_and_rerank(dipair_env):
    from ondevice.pairs.dipair_train import DiPairStudent

    run, root = dipair_env
    ds = DiPairStudent.load(run)
    texts = ["", "cat", "the cat sat on the mat.", "a big red car drove past the old house by the river today."]
    for precision, tol in (("fp32", 1e-5), ("int8", None)):
        bundle = Bundle.load(root, precision=precision)
        dp = bundle.dipair()
        block = bundle.manifest["dipair"]
        assert block["file"] in bundle.manifest["files"] and block["weights"] in bundle.manifest["files"]
        assert block["cache"]["per_item_bytes_int8"] == 5 * 8 and block["head"]["select"] == "firstlast"
        sa, sb = dp.states(texts, "a"), dp.states(texts, "b")
        assert sa.shape == (4, 4, 8) and sb.shape == (4, 5, 8)
        lengths = [len(bundle.tokenizer.ids(t)) for t in texts]
        pooled = int(block["head"]["pooled_slot"])
        for row, n in enumerate(lengths):  # short sentences: exactly min(length, token slots) non-zero token rows
            assert (np.abs(sb[row]).sum(-1) > 0).sum() == pooled + min(n, 5 - pooled)
        q = dp.states(texts, "b", int8=True)
        assert q.dtype == np.int8 and q.nbytes == 4 * 5 * 8
        np.testing.assert_array_equal(q, np.clip(np.rint(sb * 127), -127, 127).astype(np.int8))
        if tol:
            np.testing.assert_allclose(sb, ds.states(texts, "b"), atol=tol)
            np.testing.assert_allclose(sa, ds.states(texts, "a"), atol=tol)
            np.testing.assert_allclose(dp.pair_scores(texts, texts[::-1]), ds.logits(texts, texts[::-1])[:, 0] * 5.0, atol=1e-4)
        codes = bundle.codes(texts)
        both = dp.states_and_codes(texts, "b", int8=True, batch_size=3)  # one encoder pass, what a catalog caches
        np.testing.assert_array_equal(both[0], q)
        np.testing.assert_array_equal(both[1], codes)
        for blend in (True, False):  # the bundle's head + Hamming blend, and the head alone
            _, rows_t = dp.rerank("the cat sat", texts, k=3, blend=blend)
            _, rows_c = dp.rerank("the cat sat", sb, k=3, codes=codes, blend=blend)
            np.testing.assert_array_equal(rows_t, rows_c)
            # Hamming shortlist covering the catalog gives exactly the exhaustive order
            bundle.index_codes(both[1]) if blend else bundle.index_texts(texts)  # the same index either way
            _, ids = dp.search_rerank("the cat sat", q, k=3, shortlist=len(texts), blend=blend)
            _, rows = dp.rerank("the cat sat", q, k=3, codes=codes, blend=blend)
            np.testing.assert_array_equal(ids, rows)
        with pytest.raises(OndeviceError, match="the cache holds 2 rows"):  # states of part of the catalog
            dp.search_rerank("the cat sat", q[:2], k=3, shortlist=len(texts))


def test_blend_fitted_on_dev_through_the_bundle(dipair_env, pair_env):
    # dipair-export fits z(logit) + w z(-Hamming) on the task's dev pairs through each folder's own graphs; the runtime
    # ranks by it unless blend=False, and needs the candidates' codes to blend cached states
    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.blend import Blend, fit_blend, hamming_distances

    _, root = dipair_env
    dev = load_pairs("stsb", "dev", pair_env.data)
    for precision in ("fp32", "int8"):
        bundle = Bundle.load(root, precision=precision)
        dp = bundle.dipair()
        block = bundle.manifest["dipair"]["blend"]
        assert block["bits"] == bundle.bits == 64 and block["fitted_on"]["pairs"] == len(dev.gold)
        logits = dp.logits(dp.states(dev.a, "a"), dp.states(dev.b, "b"))
        dist = hamming_distances(bundle.codes(dev.a), bundle.codes(dev.b))
        refit, dev_metrics = fit_blend(task_spec("stsb"), logits[:, 0], -dist.astype(float), dev.gold, "minus_hamming")
        assert refit == dp.blend == Blend.from_dict(block, "test") and block["dev"] == dev_metrics
        assert dev_metrics["spearman"] >= dev_metrics["head_alone"]
        z = (logits[:, 0].astype(np.float64) - refit.head_mean) / refit.head_std + refit.weight * (-dist - refit.sim_mean) / refit.sim_std
        np.testing.assert_allclose(dp.pair_keys(dev.a, dev.b), z, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dp.pair_keys(dev.a, dev.b, blend=False), logits[:, 0], atol=1e-6)
        with pytest.raises(OndeviceError, match="pass codes="):
            dp.rerank("a cat", dp.states(dev.b[:4], "b"), k=2)
        with pytest.raises(OndeviceError, match="codes must be uint8"):
            dp.rerank("a cat", dp.states(dev.b[:4], "b"), k=2, codes=bundle.codes(dev.b[:3]))
        with pytest.raises(OndeviceError, match="binary tasks"):
            dp.pair_decisions(dev.a, dev.b)
    g = root / "int8" / "golden"  # golden keys: the int8 folder's blend of the fp32 golden logits and golden codes
    blend = Bundle.load(root, precision="int8").dipair().blend
    codes, ia, ib = np.load(g / "codes.npy"), np.load(g / "dipair_pair_a.npy"), np.load(g / "dipair_pair_b.npy")
    want = blend.keys(np.load(g / "dipair_logits.npy")[:, 0], -hamming_distances(codes[ia], codes[ib]).astype(float))
    np.testing.assert_allclose(np.load(g / "dipair_blend_keys.npy"), want, rtol=1e-6)


def test_blend_block_checked_on_load_and_optional(dipair_env, tmp_path):
    _, root = dipair_env
    for change, match in ((lambda b: b.update(weight="x"), "weight"), (lambda b: b.update(head_std=0.0), "head_std"),
                          (lambda b: b.update(bits=128), "Hamming"), (lambda b: b.update(similarity="cosine"), "Hamming"),
                          (lambda b: b.update(weight=-1.0), "negative")):
        bad = tmp_path / "bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(root / "fp32", bad)
        m = json.loads((bad / "manifest.json").read_text())
        change(m["dipair"]["blend"])
        (bad / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(OndeviceError, match=match):
            Bundle.load(bad).dipair()
    m = json.loads((bad / "manifest.json").read_text())
    del m["dipair"]["blend"]  # a bundle without a blend (older, or --no-blend) ranks by the head, and says so if asked
    (bad / "manifest.json").write_text(json.dumps(m))
    dp = Bundle.load(bad).dipair()
    assert dp.blend is None
    _, rows = dp.rerank("the cat", ["a cat", "the dog", "the cat sat"], k=3)
    _, rows_head = Bundle.load(root / "fp32").dipair().rerank("the cat", ["a cat", "the dog", "the cat sat"], k=3, blend=False)
    np.testing.assert_array_equal(rows, rows_head)
    with pytest.raises(OndeviceError, match="no blend"):
        dp.rerank("the cat", ["a cat"], blend=True)


def test_golden_pairs(dipair_env):
    from ondevice.pairs.dipair_train import DiPairStudent

    run, root = dipair_env
    cfg, w = load_head_weights(run)
    for precision in ("fp32", "int8"):
        g = root / precision / "golden"
        sa, sb = np.load(g / "dipair_states_a.npy"), np.load(g / "dipair_states_b.npy")
        ia, ib = np.load(g / "dipair_pair_a.npy"), np.load(g / "dipair_pair_b.npy")
        np.testing.assert_allclose(np.load(g / "dipair_logits.npy"), head_forward_numpy(cfg, w, sa[ia], sb[ib]), atol=1e-5)
        assert json.loads((root / precision / "manifest.json").read_text())["dipair"]["golden"]["pairs"] == len(ia)
    sentences = [json.loads(x) for x in (root / "fp32" / "golden" / "sentences.jsonl").read_text().splitlines()][: len(sa)]
    sentences = [s if isinstance(s, str) else s.get("text", s.get("sentence")) for s in sentences]
    np.testing.assert_allclose(sb, DiPairStudent.load(run).states(sentences, "b"), atol=1e-5)


def test_tampered_missing_and_bad_input(dipair_env, tmp_path):
    _, root = dipair_env
    bad = tmp_path / "bad"
    shutil.copytree(root / "int8", bad)
    data = bytearray((bad / "dipair_head.onnx").read_bytes())
    data[-5] ^= 0xFF
    (bad / "dipair_head.onnx").write_bytes(bytes(data))
    with pytest.raises(OndeviceError, match="sha256|modified"):
        Bundle.load(bad)
    plain = tmp_path / "plain"
    shutil.copytree(root / "int8", plain)
    m = json.loads((plain / "manifest.json").read_text())
    del m["dipair"]
    (plain / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OndeviceError, match="no DiPair head"):
        Bundle.load(plain).dipair()
    dp = Bundle.load(root / "fp32").dipair()
    with pytest.raises(OndeviceError, match="shape"):
        dp.logits(np.zeros((2, 3, 8), np.float32), np.zeros((2, 5, 8), np.float32))
    with pytest.raises(OndeviceError, match="role"):
        dp.states(["x"], role="c")
    with pytest.raises(OndeviceError, match="equal counts"):
        dp.pair_scores(["a", "b"], ["c"])
    with pytest.raises(OndeviceError, match="no index attached"):
        dp.search_rerank("a cat", np.zeros((2, 5, 8), np.float32))
    dp.bundle.index_texts(["a cat", "a dog"])
    with pytest.raises(OndeviceError, match="query codes must be uint8"):
        dp.bundle.search_codes(np.zeros((1, 3), np.uint8))
    with pytest.raises(OndeviceError, match="catalog codes must be uint8"):
        dp.bundle.index_codes(np.zeros((4, 3), np.int64))


def _reference_rerank(run, bundle) -> tuple[list[int], np.ndarray]:
    """Every golden side-b row ranked for golden side-a row 0 by the numpy head (the run's fp32 weights) and the
    bundle's blend over the golden codes' distances (the head alone without one): the top 10 rows and keys."""
    from ondevice.pairs.blend import Blend, hamming_distances

    cfg, w = load_head_weights(run)
    g = bundle / "golden"
    sa, sb = np.load(g / "dipair_states_a.npy"), np.load(g / "dipair_states_b.npy")
    codes = np.load(g / "codes.npy")[: len(sb)]
    logits = head_forward_numpy(cfg, w, np.repeat(sa[:1], len(sb), 0), sb)[:, 0]
    block = json.loads((bundle / "manifest.json").read_text())["dipair"]
    dist = hamming_distances(codes[0], codes)
    keys = Blend.from_dict(block["blend"], "test").keys(logits, -dist) if block.get("blend") else logits.astype(np.float64)
    order = np.lexsort((np.arange(len(keys)), -keys))[:10]
    return order.tolist(), keys[order]


JAVAC, JAVA = shutil.which("javac"), shutil.which("java")


@pytest.fixture(scope="module")
def java_core(tmp_path_factory):
    """android_demo/core (main and test sources) compiled for Java 8."""
    import subprocess
    from pathlib import Path

    out = tmp_path_factory.mktemp("java-core")
    core = Path(__file__).resolve().parents[1] / "android_demo" / "core"
    sources = [str(p) for p in (core / "src").rglob("*.java")]
    res = subprocess.run(check=False, args=[JAVAC, "-J-XX:TieredStopAtLevel=1", "--release", "8", "-Xlint:all", "-Xlint:-options",
                                            "-Werror", "-encoding", "UTF-8", "-d", str(out), *sources],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.mark.skipif(not (JAVAC and JAVA), reason="javac/java not on PATH")
def test_java_dipair_head_parity(dipair_env, java_core, tmp_path):
    import re
    import subprocess

    run, root = dipair_env
    for precision in ("fp32", "int8"):  # both ship fp32 dipair_head.safetensors; golden logits are the fp32 graph's
        out = subprocess.run(check=False, args=[JAVA, "-XX:TieredStopAtLevel=1", "-cp", str(java_core),
                                                "ai.ondevice.core.DiPairParityCheck", str(root / precision), "--max-abs-diff", "1e-4"],
                             capture_output=True, text=True, timeout=300)
        values = dict(re.findall(r"^(\w+)=(\S+)", out.stdout, flags=re.MULTILINE))
        assert out.returncode == 0, out.stdout + out.stderr
        assert int(values["pairs"]) == 300 and float(values["max_abs_diff"]) <= 1e-4
        assert int(values["blend_pairs"]) == 300 and float(values["blend_max_abs_diff"]) <= 1e-5
        # the rerank of every golden side-b row for side-a row 0 equals the numpy head's (fp32 weights, the same blend)
        top, keys = _reference_rerank(run, root / precision)
        got = [int(x) for x in values["rerank_top10"].split(",")]
        got_keys = np.array([float(x) for x in values["rerank_top10_keys"].split(",")])
        np.testing.assert_allclose(got_keys, keys, atol=1e-3)
        assert all(g == w or abs(k - keys[i]) < 1e-3 for i, (g, w, k) in enumerate(zip(got, top, got_keys)))
    bad = tmp_path / "bad"  # a blend over other codes than the bundle's is refused by the Java core too
    shutil.copytree(root / "fp32", bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["dipair"]["blend"]["bits"] = 128
    (bad / "manifest.json").write_text(json.dumps(m))
    out = subprocess.run(check=False, args=[JAVA, "-XX:TieredStopAtLevel=1", "-cp", str(java_core),
                                            "ai.ondevice.core.DiPairParityCheck", str(bad)], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "dipair.blend" in out.stderr


@pytest.mark.skipif(not (JAVAC and JAVA), reason="javac/java not on PATH")
def test_java_catalog_rerank_equals_numpy(dipair_env, java_core, tmp_path):
    """The Android app's DiPair search on the JVM: the core's Catalog verifies every catalog file against catalog.json,
    and the Hamming top 100 of a query reranked over the catalog's int8 states (dequantized row by row) equals the
    numpy head's (fp32 weights) over the same states, with the bundle's blend; a tampered states file and a
    catalog.json without checksums are refused in one line, exit 2."""
    import importlib.util
    import re
    import subprocess
    from pathlib import Path

    from ondevice.export.golden import hamming_topk

    from ondevice.catalog import read_sentences
    from ondevice.pairs.blend import Blend

    spec = importlib.util.spec_from_file_location(
        "android_make_catalog", Path(__file__).resolve().parents[1] / "android_demo" / "tools" / "make_catalog.py")
    android_tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(android_tool)
    run, root = dipair_env
    bundle = Bundle.load(root / "int8")
    sentences = read_sentences(root / "int8" / "golden" / "sentences.jsonl")[:300]
    info = android_tool.build(root, sentences, tmp_path / "assets", precision="int8")  # states cached by default
    assert info["dipair_states"]["shape"] == [300, bundle.dipair().m, bundle.dipair().d]
    bundle_dir, catalog = tmp_path / "assets" / "bundle", tmp_path / "assets" / "catalog"
    assert (bundle_dir / "dipair_head.safetensors").is_file() and not (bundle_dir / "golden").exists()

    def check(cat, query: str) -> tuple[subprocess.CompletedProcess, np.ndarray, np.ndarray]:
        qs, qc = bundle.dipair().states_and_codes([query], "a")
        np.save(tmp_path / "qa.npy", np.ascontiguousarray(qs[0], np.float32))
        np.save(tmp_path / "qc.npy", qc[0])
        out = subprocess.run(check=False, args=[JAVA, "-XX:TieredStopAtLevel=1", "-cp", str(java_core),
                                                "ai.ondevice.core.CatalogRerankCheck", str(bundle_dir), str(cat),
                                                str(tmp_path / "qa.npy"), str(tmp_path / "qc.npy"), "100"],
                             capture_output=True, text=True, timeout=300)
        return out, qs, qc

    cfg, w = load_head_weights(run)
    block = json.loads((bundle_dir / "manifest.json").read_text())["dipair"]
    states = np.load(catalog / "dipair_states.npy").astype(np.float32) / 127
    for query in (sentences[3], sentences[40] + " " + sentences[41], "an unrelated question?"):
        out, qs, qc = check(catalog, query)
        values = dict(re.findall(r"^(\w+)=(\S+)", out.stdout, flags=re.MULTILINE))
        assert out.returncode == 0, out.stdout + out.stderr
        assert int(values["count"]) == 300 and int(values["dipair_states"]) == states.size
        dist, rows = hamming_topk(qc, np.load(catalog / "codes.npy"), 100)
        logits = head_forward_numpy(cfg, w, np.repeat(qs[:1], 100, 0), states[rows[0]])[:, 0]
        keys = Blend.from_dict(block["blend"], "test").keys(logits, -dist[0]) if block.get("blend") else logits
        order = np.lexsort((rows[0], -keys))[:10]
        got = [int(x) for x in values["rerank_top10"].split(",")]
        got_keys = np.array([float(x) for x in values["rerank_top10_keys"].split(",")])
        np.testing.assert_allclose(got_keys, keys[order], atol=1e-4)
        # the same rows in the same order, but where two keys tie within float rounding
        assert all(g == r or abs(k - keys[order][i]) < 1e-4 for i, (g, r, k) in
                   enumerate(zip(got, rows[0][order], got_keys))), query
        # the comparison of the query with the top row: the task score of its logit and its key (the app's compare)
        top1 = int(np.flatnonzero(rows[0] == got[0])[0])
        want_score = bundle.dipair().transform(logits[top1 : top1 + 1, None].astype(np.float32))[0]
        assert float(values["top1_score"]) == pytest.approx(float(want_score), abs=1e-4)
        assert float(values["top1_key"]) == pytest.approx(float(keys[top1]), abs=1e-4)
    bad = tmp_path / "bad"
    shutil.copytree(catalog, bad)
    raw = bytearray((bad / "dipair_states.npy").read_bytes())
    raw[-1] ^= 1
    (bad / "dipair_states.npy").write_bytes(bytes(raw))
    out, _, _ = check(bad, sentences[3])
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "dipair_states.npy does not match catalog.json" in out.stderr
    info = json.loads((catalog / "catalog.json").read_text())
    del info["files"]
    shutil.rmtree(bad)
    shutil.copytree(catalog, bad)
    (bad / "catalog.json").write_text(json.dumps(info))
    out, _, _ = check(bad, sentences[3])
    assert out.returncode == 2 and "lists no file checksums" in out.stderr


def test_bad_bits_fail_before_the_run_is_loaded(tmp_path):
    with pytest.raises(OndeviceError, match="--bits must be between 1 and"):
        export_dipair_bundle(tmp_path / "no-run", tmp_path / "b", bits=0)
