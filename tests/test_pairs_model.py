"""Pair head and DSE loss: torch head equals the numpy reference; loss is Eq. 2 at alpha 0, 0.5 and 1."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ondevice.errors import OndeviceError
from ondevice.pairs.model import (
    PairHeadConfig,
    build_head,
    dse_loss,
    head_forward_numpy,
    load_head_weights,
    pair_features,
    save_head,
)


def test_head_matches_numpy_reference_and_roundtrips(tmp_path):
    cfg = PairHeadConfig(dim=6, hidden=5, outputs=3, kind="classes", labels=["a", "b", "c"])
    torch.manual_seed(0)
    head = build_head(cfg)
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(7, 6)).astype(np.float32), rng.normal(size=(7, 6)).astype(np.float32)
    with torch.no_grad():
        ref = head(torch.from_numpy(u), torch.from_numpy(v)).numpy()
    save_head(tmp_path, head, cfg)
    cfg2, w = load_head_weights(tmp_path)
    assert cfg2 == cfg
    np.testing.assert_allclose(head_forward_numpy(w, u, v), ref, atol=1e-5)
    f = pair_features(u, v)
    assert f.shape == (7, 24) and np.allclose(f[:, 18:], np.abs(u - v))
    (tmp_path / "pair_head.json").write_text('{"dim": 6, "hidden": 4, "outputs": 3, "kind": "classes"}')
    with pytest.raises(OndeviceError, match="shape"):
        load_head_weights(tmp_path)


@pytest.mark.parametrize("change, problem", [
    ({"gold_high": "5"}, "gold_high"), ({"dim": 6.0}, "dim"), ({"hidden": 0}, "hidden"), ({"kind": "ranking"}, "kind"),
    ({"kind": "binary"}, "1 output"), ({"threshold": float("nan")}, "threshold"), ({"labels": "abc"}, "labels"),
    ({"features": "u,v"}, "features")])
def test_a_head_config_no_head_could_have_is_one_line(tmp_path, change, problem):
    cfg = PairHeadConfig(dim=6, hidden=5, outputs=3, kind="classes", labels=["a", "b", "c"])
    save_head(tmp_path, build_head(cfg), cfg)
    raw = json.loads((tmp_path / "pair_head.json").read_text())
    (tmp_path / "pair_head.json").write_text(json.dumps({**raw, **change}))
    with pytest.raises(OndeviceError, match=problem):
        load_head_weights(tmp_path)


def test_non_finite_head_weights_are_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    cfg = PairHeadConfig(dim=6, hidden=5, outputs=1, kind="binary", labels=["no", "yes"], threshold=0.0)
    save_head(tmp_path, build_head(cfg), cfg)
    weights = load_file(str(tmp_path / "pair_head.safetensors"))
    weights["out.bias"][:] = np.nan
    save_file(weights, str(tmp_path / "pair_head.safetensors"))
    with pytest.raises(OndeviceError, match="NaN or inf"):
        load_head_weights(tmp_path)


def test_dse_loss_is_equation_2():
    logits = torch.tensor([[0.5], [2.0], [-1.0]])
    teacher = torch.tensor([[1.0], [1.0], [0.0]])
    gold = torch.tensor([1.0, 0.0, 0.0])
    labeled = torch.tensor([True, True, False])  # the third is an augmentation pair
    distill = ((logits - teacher) ** 2).mean()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[:2, 0], gold[:2])
    assert torch.isclose(dse_loss(logits, teacher, gold, labeled, "binary", 1.0), distill)
    assert torch.isclose(dse_loss(logits, teacher, gold, labeled, "binary", 0.0), bce)
    assert torch.isclose(dse_loss(logits, teacher, gold, labeled, "binary", 0.5), 0.5 * distill + 0.5 * bce)
    mse = ((logits[:2, 0] - gold[:2]) ** 2).mean()
    assert torch.isclose(dse_loss(logits, teacher, gold, labeled, "regression", 0.0), mse)
    three = torch.tensor([[1.0, 0.0, -1.0]])
    ce = torch.nn.functional.cross_entropy(three, torch.tensor([2]))
    assert torch.isclose(dse_loss(three, three * 0, torch.tensor([2.0]), torch.tensor([True]), "classes", 0.0), ce)
