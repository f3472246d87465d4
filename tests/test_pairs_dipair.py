"""DiPair model: position selection against a brute-force reference, masking of short sentences, torch == numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.dipair import (
    DiPairHeadConfig,
    build_head,
    build_projection,
    dequantize_states,
    encoder_outputs,
    head_forward_numpy,
    quantize_states,
    select_positions,
    states_numpy,
    token_states,
)


def _brute(length: int, n: int, mode: str) -> list[int]:
    """Kept positions written out the slow way."""
    if length <= n:
        return list(range(length))
    if mode == "first":
        return list(range(n))
    half = n // 2
    return list(range(half)) + list(range(length - (n - half), length))


@pytest.mark.parametrize("mode", ["first", "firstlast"])
def test_select_positions_matches_brute_force(mode):
    lengths = np.arange(1, 30)
    for n in (1, 2, 3, 4, 7, 8):
        idx, valid = select_positions(lengths, n, mode)
        for row, length in enumerate(lengths):
            want = _brute(int(length), n, mode)
            assert idx[row, valid[row]].tolist() == want
            assert valid[row].sum() == len(want) and (idx[row, ~valid[row]] == 0).all()
    with pytest.raises(OndeviceError, match="unknown selection"):
        select_positions(lengths, 4, "middle")


def _cfg(**kw):
    base = {"in_dim": 6, "n": 4, "m": 3, "d": 8, "layers": 2, "heads": 1, "ffn": 12, "outputs": 1}
    base.update(kw)
    return DiPairHeadConfig(**base)


def test_head_matches_numpy_reference_and_masks_padding():
    import torch

    cfg = _cfg(heads=2, outputs=3)
    torch.manual_seed(0)
    head = build_head(cfg).eval()
    w = {k: v.numpy() for k, v in head.state_dict().items()}
    rng = np.random.default_rng(0)
    sa, sb = np.tanh(rng.normal(size=(5, 4, 8))).astype(np.float32), np.tanh(rng.normal(size=(5, 3, 8))).astype(np.float32)
    sa[:, 2:] = 0  # short sentences: padding slots are zero rows
    sb[1:, 1:] = 0
    with torch.no_grad():
        got = head(torch.from_numpy(sa), torch.from_numpy(sb)).numpy()
    np.testing.assert_allclose(got, head_forward_numpy(cfg, w, sa, sb), atol=1e-5)
    # padding slots are masked out of attention: whatever the position embedding there, the output is unchanged
    w2 = dict(w)
    w2["position"] = w["position"].copy()
    w2["position"][2:4] += 5.0
    w2["position"][5:] += 5.0
    sb2 = sb.copy()
    sb2[0, 1:] = 0
    sa2 = sa
    np.testing.assert_allclose(head_forward_numpy(cfg, w2, sa2, sb2)[1:], head_forward_numpy(cfg, w, sa2, sb2)[1:], atol=1e-5)


@pytest.mark.parametrize("vec_dim", [0, 6])
def test_last_layer_on_slot_zero_only_equals_the_full_last_layer(vec_dim):
    """The head runs its last layer for slot 0 only (the logits read nothing else): same logits as over all slots."""
    import torch

    cfg = _cfg(heads=2, outputs=3, vec_dim=vec_dim)
    torch.manual_seed(1)
    head = build_head(cfg).eval()
    rng = np.random.default_rng(1)
    sa = torch.from_numpy(np.tanh(rng.normal(size=(4, cfg.n, cfg.d))).astype(np.float32))
    sb = torch.from_numpy(np.tanh(rng.normal(size=(4, cfg.m, cfg.d))).astype(np.float32))
    widths: list[int] = []
    last = head.layers[-1]
    last.register_forward_hook(lambda mod, args, out: widths.append(out.shape[1]))
    with torch.no_grad():
        short = head(sa, sb)
        layer_forward = last.forward
        last.forward = lambda x, add, first_only=False: layer_forward(x, add, first_only=False)
        full = head(sa, sb)
    assert widths == [1, cfg.slots]
    np.testing.assert_allclose(short.numpy(), full.numpy(), atol=1e-6)


def test_dropout_acts_in_training_only():
    import torch

    cfg = _cfg(heads=2, outputs=1)
    torch.manual_seed(0)
    head = build_head(cfg, dropout=0.5)
    w = {k: v.numpy() for k, v in head.state_dict().items()}
    rng = np.random.default_rng(1)
    sa, sb = np.tanh(rng.normal(size=(6, 4, 8))).astype(np.float32), np.tanh(rng.normal(size=(6, 3, 8))).astype(np.float32)
    ta, tb = torch.from_numpy(sa), torch.from_numpy(sb)
    with torch.no_grad():
        head.train()
        assert not torch.allclose(head(ta, tb), head(ta, tb))  # random masks in training
        head.eval()
        got = head(ta, tb).numpy()
    # no new weights and, in eval mode, exactly the reference maths: exports and parity are unaffected
    assert set(w) == set(build_head(cfg).state_dict())
    np.testing.assert_allclose(got, head_forward_numpy(cfg, w, sa, sb), atol=1e-5)


def test_token_states_short_sentences_and_int8_roundtrip():
    import torch

    from ondevice.student import StudentConfig, build_model

    scfg = StudentConfig(vocab_size=20, embedding_dim=4, hidden_size=3, pooling="meanmax", output_dim=5, max_tokens=16)
    torch.manual_seed(1)
    model = build_model(scfg).eval()
    cfg = _cfg(in_dim=6, n=4)
    proj = build_projection(cfg)
    lengths = np.array([1, 2, 4, 9], np.int64)
    ids = np.zeros((4, 9), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = np.arange(2, 2 + n)
    with torch.no_grad():
        vec, out = encoder_outputs(model, torch.from_numpy(ids), torch.from_numpy(lengths))
        np.testing.assert_allclose(vec.numpy(), model(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy(), atol=1e-6)
        for mode in ("first", "firstlast"):
            s = token_states(proj, out, torch.from_numpy(lengths), 4, mode).numpy()
            ref = states_numpy(out.numpy(), lengths, 4, mode, proj.weight.numpy(), proj.bias.numpy())
            np.testing.assert_allclose(s, ref, atol=1e-6)
            assert s.shape == (4, 4, 8)
            for row, n in enumerate(lengths):  # exactly min(n, 4) non-zero rows, padding rows exactly 0
                assert (np.abs(s[row]).sum(-1) > 0).sum() == min(n, 4) and (s[row, min(n, 4):] == 0).all()
    q = quantize_states(s)
    assert q.dtype == np.int8 and np.abs(dequantize_states(q) - s).max() <= 0.5 / 127 + 1e-7
    assert ((np.abs(dequantize_states(q)).sum(-1) > 0) == (np.abs(s).sum(-1) > 0)).all()


def test_cache_size_at_defaults_is_at_most_1kb():
    from ondevice.pairs.dipair_train import DiPairConfig

    c = DiPairConfig(task="stsb", data="", student="", teacher="t")
    assert c.head_config(1024, type("S", (), {"num_outputs": 1, "name": "stsb", "kind": "regression", "labels": [],
                                              "low": 0.0, "high": 5.0})).cache_bytes(int8=True) <= 1024


@pytest.mark.parametrize("kw,msg", [({"n": 0}, "^n must be >= 1"), ({"d": 6, "heads": 4}, "divisible"),
                                    ({"mode": "x"}, "^select must be one of")])
def test_bad_head_config(kw, msg):
    with pytest.raises(OndeviceError, match=msg):
        _cfg(**kw).validate()


def test_pooled_head_matches_numpy_reference_and_never_masks_the_comparison_slot():
    import torch

    cfg = _cfg(heads=2, outputs=2, vec_dim=5)
    assert cfg.pooled and cfg.slots == 4 + 3 + 1 and cfg.cache_bytes(True) == 3 * 8
    torch.manual_seed(0)
    head = build_head(cfg).eval()
    w = {k: v.numpy() for k, v in head.state_dict().items()}
    assert w["position"].shape == (8, 8) and w["compare.weight"].shape == (8, 32)
    rng = np.random.default_rng(2)
    sa, sb = np.tanh(rng.normal(size=(5, 4, 8))).astype(np.float32), np.tanh(rng.normal(size=(5, 3, 8))).astype(np.float32)
    sa[:, 2:] = 0
    sb[1:, 1:] = 0  # only the pooled slot left on side b
    with torch.no_grad():
        got = head(torch.from_numpy(sa), torch.from_numpy(sb)).numpy()
    ref = head_forward_numpy(cfg, w, sa, sb)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # the comparison slot reads the two pooled slots: changing a token slot's state moves the logits, and so does
    # changing a pooled slot; a comparison slot that happens to sum to zero is still attended to (never masked)
    sb2 = sb.copy()
    sb2[:, 0] = -sb2[:, 0]
    assert np.abs(head_forward_numpy(cfg, w, sa, sb2) - ref).max() > 1e-3
    w0 = dict(w, **{"compare.weight": np.zeros_like(w["compare.weight"]), "compare.bias": np.zeros_like(w["compare.bias"])})
    w1 = dict(w0, position=w["position"].copy())
    w1["position"][0] += 3.0
    assert np.abs(head_forward_numpy(cfg, w1, sa, sb) - head_forward_numpy(cfg, w0, sa, sb)).max() > 1e-3


def test_pooled_side_states_hold_the_sentence_vector_then_tokens():
    import torch

    from ondevice.pairs.dipair import build_vector_projection, side_states
    from ondevice.student import StudentConfig, build_model

    scfg = StudentConfig(vocab_size=20, embedding_dim=4, hidden_size=3, pooling="max", output_dim=5, max_tokens=16)
    torch.manual_seed(3)
    model = build_model(scfg).eval()
    cfg = _cfg(in_dim=6, n=4, vec_dim=5)
    proj, vproj = build_projection(cfg), build_vector_projection(cfg)
    lengths = np.array([1, 3, 9], np.int64)
    ids = np.zeros((3, 9), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = np.arange(2, 2 + n)
    with torch.no_grad():
        vec, out = encoder_outputs(model, torch.from_numpy(ids), torch.from_numpy(lengths))
        s = side_states(proj, vproj, vec, out, torch.from_numpy(lengths), 4, "first").numpy()
    ref = states_numpy(out.numpy(), lengths, 4, "first", proj.weight.detach().numpy(), proj.bias.detach().numpy(),
                       vec.numpy(), vproj.weight.detach().numpy(), vproj.bias.detach().numpy())
    np.testing.assert_allclose(s, ref, atol=1e-6)
    np.testing.assert_allclose(s[:, 0], np.tanh(vec.numpy() @ vproj.weight.detach().numpy().T + vproj.bias.detach().numpy()), atol=1e-6)
    for row, n in enumerate(lengths):  # pooled slot + min(n, 3) token rows, the rest zero
        assert (np.abs(s[row]).sum(-1) > 0).sum() == 1 + min(n, 3) and (s[row, 1 + min(n, 3):] == 0).all()
    with pytest.raises(OndeviceError, match="^pooled_slot needs n and m >= 2"):
        _cfg(n=1, vec_dim=5).validate()


@pytest.mark.parametrize("name", ["dipair_head.safetensors", "dipair_head.json"])
def test_a_linked_head_file_is_refused(tmp_path, name):
    """A DiPair run someone sends must not make ondevice read other files of this machine through a symbolic link."""
    pytest.importorskip("torch")
    from ondevice.pairs.dipair import load_head_weights, save_head

    cfg = _cfg()
    save_head(tmp_path / "run", build_projection(cfg), build_head(cfg), cfg)
    assert load_head_weights(tmp_path / "run")[0] == cfg  # the plain folder loads
    (tmp_path / "run" / name).rename(tmp_path / name)  # same bytes, so only the link is wrong
    (tmp_path / "run" / name).symlink_to(tmp_path / name)
    with pytest.raises(OndeviceError, match=rf"^pair-model run {tmp_path / 'run'}: {name} is a symbolic link; "):
        load_head_weights(tmp_path / "run")
