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
    bundle = Bundle.load(pair_env.bundle(), precision="fp32")
    cands = ["the cat sat", "a dog runs fast", "the moon", "the cat sat on the mat", "red car", "the cat sat"]
    keys, rows = bundle.rerank("the cat sat on the mat", cands, k=4)
    vec = bundle.encode(cands)
    q = bundle.encode(["the cat sat on the mat"])
    _, w = load_head_weights(pair_env.run())
    ref = head_forward_numpy(w, np.repeat(q, len(cands), 0), vec)[:, 0]
    order = sorted(range(len(cands)), key=lambda i: (-round(float(ref[i]), 5), i))[:4]
    assert rows.tolist() == order and np.allclose(keys, ref[order], atol=1e-5)
    _, r2 = bundle.rerank("the cat sat on the mat", vec, k=4)  # precomputed vectors give the same
    assert r2.tolist() == rows.tolist()
    assert bundle.rerank("x", [], k=3)[1].shape == (0,)


def test_search_rerank_with_full_shortlist_is_exhaustive(pair_env):
    from conftest import make_sentences

    bundle = Bundle.load(pair_env.bundle(), precision="int8")
    catalog = make_sentences(300, seed=4)
    bundle.index_texts(catalog)
    vec = bundle.encode(catalog)
    exhaustive = bundle.rerank("the cat sat on the mat", vec, k=10)
    shortlisted = bundle.search_rerank("the cat sat on the mat", vec, k=10, shortlist=300)
    assert shortlisted[1].tolist() == exhaustive[1].tolist()
    small = bundle.search_rerank("the cat sat on the mat", vec, k=10, shortlist=50)
    assert len(small[1]) == 10 and set(small[1].tolist()) <= set(range(300))


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
