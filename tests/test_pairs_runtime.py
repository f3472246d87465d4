"""Runtime pair scoring without torch: rerank equals brute force, Hamming shortlist + head, input errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.model import head_forward_numpy, load_head_weights
from ondevice.runtime import Bundle


def test_rerank_is_brute_force_order(pair_env):
    from ondevice.pairs.metrics import cosines

    bundle = Bundle.load(pair_env.bundle(), precision="fp32")
    cands = ["the cat sat", "a dog runs fast", "the moon", "the cat sat on the mat", "red car", "the cat sat"]
    vec = bundle.encode(cands)
    q = bundle.encode(["the cat sat on the mat"])
    _, w = load_head_weights(pair_env.run())
    ref = head_forward_numpy(w, np.repeat(q, len(cands), 0), vec)[:, 0]
    blend = bundle.pair_head().blend  # fitted on dev at export: the head's z-score + w x the embedding cosine's
    z = (ref - blend.head_mean) / blend.head_std + blend.weight * (cosines(np.repeat(q, len(cands), 0), vec) - blend.sim_mean) / blend.sim_std
    for on, want in ((False, ref), (None, z)):  # the head alone, and the bundle's default: its blend
        keys, rows = bundle.rerank("the cat sat on the mat", cands, k=4, blend=on)
        order = sorted(range(len(cands)), key=lambda i: (-round(float(want[i]), 5), i))[:4]
        assert rows.tolist() == order and np.allclose(keys, want[order], atol=1e-4)
        _, r2 = bundle.rerank("the cat sat on the mat", vec, k=4, blend=on)  # precomputed vectors give the same
        assert r2.tolist() == rows.tolist()
    np.testing.assert_allclose(bundle.pair_head().pair_keys(["the cat sat on the mat"] * 6, cands), z, atol=1e-5)
    assert bundle.rerank("x", [], k=3)[1].shape == (0,)


def test_dse_blend_fitted_on_dev_and_optional(pair_env, tmp_path):
    import json
    import shutil

    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.blend import fit_blend
    from ondevice.pairs.metrics import cosines, pair_vectors

    dev = load_pairs("stsb", "dev", pair_env.data)
    for precision in ("fp32", "int8"):
        bundle = Bundle.load(pair_env.bundle(), precision=precision)
        block = bundle.manifest["pairs"]["blend"]
        u, v = pair_vectors(bundle.encode, dev.a, dev.b)
        refit, dev_metrics = fit_blend(task_spec("stsb"), bundle.pair_head().logits(u, v)[:, 0], cosines(u, v), dev.gold, "cosine")
        assert refit == bundle.pair_head().blend and block["dev"] == dev_metrics and block["dim"] == bundle.dim
        assert dev_metrics["spearman"] >= dev_metrics["head_alone"]
        with pytest.raises(OndeviceError, match="binary tasks"):
            bundle.pair_head().pair_decisions(["a"], ["b"])
    g = pair_env.bundle() / "int8" / "golden"  # golden keys: the folder's blend of the fp32 golden logits and embeddings
    emb, ia, ib = np.load(g / "embeddings.npy"), np.load(g / "pair_a.npy"), np.load(g / "pair_b.npy")
    want = refit.keys(np.load(g / "pair_logits.npy")[:, 0], cosines(emb[ia], emb[ib]))
    np.testing.assert_allclose(np.load(g / "pair_blend_keys.npy"), want, rtol=1e-6, atol=1e-6)
    bad = tmp_path / "bad"
    shutil.copytree(pair_env.bundle() / "fp32", bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["pairs"]["blend"]["similarity"] = "minus_hamming"  # a blend over what this head does not have
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OndeviceError, match="embedding cosine"):
        Bundle.load(bad).pair_head()
    del m["pairs"]["blend"]
    (bad / "manifest.json").write_text(json.dumps(m))
    plain = Bundle.load(bad)
    assert plain.pair_head().blend is None
    assert plain.rerank("a cat", ["a dog", "the sun"], k=2)[1].tolist() == \
        Bundle.load(pair_env.bundle(), precision="fp32").rerank("a cat", ["a dog", "the sun"], k=2, blend=False)[1].tolist()
    with pytest.raises(OndeviceError, match="no blend"):
        plain.rerank("a cat", ["a dog"], blend=True)


def test_search_rerank_with_full_shortlist_is_exhaustive(pair_env):
    from conftest import make_sentences

    bundle = Bundle.load(pair_env.bundle(), precision="int8")
    catalog = make_sentences(300, seed=4)
    bundle.index_texts(catalog)
    vec = bundle.encode(catalog)
    for blend in (None, False):
        exhaustive = bundle.rerank("the cat sat on the mat", vec, k=10, blend=blend)
        shortlisted = bundle.search_rerank("the cat sat on the mat", vec, k=10, shortlist=300, blend=blend)
        assert shortlisted[1].tolist() == exhaustive[1].tolist()
    small = bundle.search_rerank("the cat sat on the mat", vec, k=10, shortlist=50)
    assert len(small[1]) == 10 and set(small[1].tolist()) <= set(range(300))
    with pytest.raises(OndeviceError, match="the cache holds 20 rows"):  # a cache of part of the catalog
        bundle.search_rerank("the cat sat on the mat", vec[:20], k=10, shortlist=300)


def test_bad_inputs(pair_env):
    bundle = Bundle.load(pair_env.bundle(), precision="int8")
    with pytest.raises(OndeviceError, match="equal counts"):
        bundle.pair_scores(["a", "b"], ["c"])
    with pytest.raises(OndeviceError, match="k must be"):
        bundle.rerank("a", ["b"], k=0)
    with pytest.raises(OndeviceError, match="shape"):
        bundle.rerank("a", np.zeros((3, 5), np.float32), k=1)
    with pytest.raises(OndeviceError, match="must all be str"):
        bundle.pair_scores([b"bytes"], ["c"])


def test_runtime_scoring_never_imports_torch(pair_env):
    code = ("import sys; from ondevice.runtime import Bundle; b = Bundle.load(sys.argv[1]); "
            "print(b.pair_scores(['a cat'], ['a dog'])[0]); b.rerank('a cat', ['a dog', 'the sun'], 1); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    res = subprocess.run([sys.executable, "-c", code, str(pair_env.bundle() / "int8")], check=False, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr


def _reseal(folder, name: str, data: bytes | None = None, edit=None) -> None:
    """Rewrite `name` (and/or edit the manifest) with a matching file table, as a hostile bundle would."""
    import hashlib
    import json

    manifest = json.loads((folder / "manifest.json").read_text())
    if data is not None:
        (folder / name).write_bytes(data)
        manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if edit is not None:
        edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _head_graph(dim: int, names=("u", "v"), external: bool = False, value: float = 1.0) -> bytes:
    """A pair head graph logits = (u + v) @ w (w filled with `value`), optionally keeping w in an external data file."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((dim, 1), value, np.float32), "w")
    if external:
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        w.external_data.add(key="location", value="secret.bin")
    graph = helper.make_graph(
        [helper.make_node("Add", list(names), ["s"]), helper.make_node("MatMul", ["s", "w"], ["logits"])], "head",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", dim]) for n in names],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_head_that_does_not_fit_its_manifest_is_a_one_line_error(pair_env, tmp_path):
    import shutil

    src = pair_env.bundle() / "fp32"
    name = Bundle.load(src).manifest["pairs"]["file"]
    cases = {
        "no outputs": (None, lambda m: m["pairs"]["head"].pop("outputs"), "outputs"),
        "outputs 3": (None, lambda m: m["pairs"]["head"].update(outputs=3), "do not fit"),
        "no transform": (None, lambda m: m["pairs"].update(output_transform=None), "do not fit"),
        "input names": (lambda dim: _head_graph(dim, ("x", "v")), None, "takes"),
        "external data": (lambda dim: _head_graph(dim, external=True), None, "external data"),
        "nan weights": (lambda dim: _head_graph(dim, value=float("nan")), None, "non-finite logits"),
        "threshold text": (None, lambda m: m["pairs"].update(threshold="abc"), "threshold 'abc'"),
        "threshold nan": (None, lambda m: m["pairs"].update(threshold=float("nan")), "threshold nan"),
        "threshold list": (None, lambda m: m["pairs"].update(threshold=[1]), "threshold"),
    }
    for case, (graph, edit, message) in cases.items():
        bad = tmp_path / case.replace(" ", "-")
        shutil.copytree(src, bad)
        (bad / "secret.bin").write_bytes(np.ones(64, np.float32).tobytes())  # what an external tensor would read
        _reseal(bad, name, graph(Bundle.load(src).dim) if graph else None, edit)
        bundle = Bundle.load(bad)  # the encoder is fine: the head is checked when it is first used
        with pytest.raises(OndeviceError, match=message):
            bundle.pair_scores(["a cat"], ["a dog"])
