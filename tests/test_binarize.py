"""Binarizer: the six methods, the affine contract, packing, persistence, the AE losses, errors and the CLI."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from ondevice.binarize import METHODS, Binarizer, methods_for
from ondevice.bits import BIT_ORDER, code_bytes, hamming_reference, pack, unpack
from ondevice.cli import main
from ondevice.errors import OndeviceError

DIM = 16
FAST_AE = {"epochs": 2, "batch_size": 64, "sp_triplets": 64, "progress": False}


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, DIM)).astype(np.float32)
    return base + 0.3  # off-center, so centering matters


def _fit(x, method, bits, seed=0, **kw):
    if method in ("ae", "ae-sp"):
        pytest.importorskip("torch")  # the autoencoders train with torch (the `train` extra)
        kw = {**FAST_AE, **kw}
    return Binarizer.fit(x, method, bits, seed=seed, **kw)


CASES = [("threshold", DIM), ("random", 72), ("random", 100), ("random", 2048), ("orthogonal", 40), ("pca", 8), ("pca", DIM),
         ("itq", 8), ("itq", 13), ("ae", 72), ("ae", 100), ("ae-sp", 100)]


@pytest.mark.parametrize("method,bits", CASES)
def test_shapes_affine_contract_and_padding(x, method, bits):
    b = _fit(x, method, bits)
    codes = b.transform(x)
    assert codes.dtype == np.uint8 and codes.shape == (len(x), code_bytes(bits))
    A, c = b.affine()
    assert A.dtype == np.float32 and c.dtype == np.float32 and A.shape == (DIM, bits) and c.shape == (bits,)
    np.testing.assert_array_equal(codes, pack((x.astype(np.float32) @ A + c) > 0))
    bits01 = unpack(codes, bits)
    np.testing.assert_array_equal(pack(bits01), codes)  # round trip
    if bits % 8:  # padding bits are zero
        assert not (codes[:, -1] >> (bits % 8)).any()
    assert (b.method, b.bits, b.dim) == (method, bits, DIM)


@pytest.mark.parametrize("method,bits", [("random", 72), ("orthogonal", 72), ("pca", 8), ("itq", 8), ("ae", 72), ("ae-sp", 72)])
def test_deterministic_with_seed(x, method, bits):
    a, b = _fit(x, method, bits, seed=3), _fit(x, method, bits, seed=3)
    np.testing.assert_array_equal(a.affine()[0], b.affine()[0])
    np.testing.assert_array_equal(a.transform(x), b.transform(x))
    if method != "pca":
        assert not np.array_equal(a.affine()[0], _fit(x, method, bits, seed=4).affine()[0])


def test_threshold_bit_order_and_cut():
    h = np.full((2, DIM), -1.0, dtype=np.float32)
    h[0, 0] = 1.0  # bit 0 -> byte 0, least significant bit
    h[1, 9] = 1.0  # bit 9 -> byte 1, bit 1
    b = Binarizer.fit(h, "threshold", DIM)
    assert BIT_ORDER == "little" and b.config.bit_order == "little"
    np.testing.assert_array_equal(b.transform(h), [[1, 0], [0, 2]])
    cut = Binarizer.fit(h, "threshold", DIM, threshold=2.0)
    assert not cut.transform(h).any()
    np.testing.assert_array_equal(cut.affine()[1], np.full(DIM, -2.0, dtype=np.float32))


def test_random_and_pca_center_and_scale(x):
    r = _fit(x, "random", 64, seed=1)
    A, c = r.affine()
    assert np.abs(A).max() <= 1 / np.sqrt(64)
    np.testing.assert_allclose(c, -(x.mean(0) @ A), rtol=1e-4, atol=1e-5)
    p = _fit(x, "pca", 4)
    A, _ = p.affine()
    np.testing.assert_allclose(A.T @ A, np.eye(4), atol=1e-5)  # orthonormal principal axes
    assert np.allclose(unpack(p.transform(x), 4).mean(0), 0.5, atol=0.15)  # centered: balanced bits


def test_orthogonal_is_the_random_projection_with_orthogonal_rows(x):
    """Same seed, same mean and row norms as `random`; rows orthogonal within each block of dim, the first of each
    block unchanged, so the first bit is the random projection's."""
    from ondevice.projections import orthogonal_rows

    r, o = _fit(x, "random", 40, seed=2), _fit(x, "orthogonal", 40, seed=2)
    Ar, (Ao, co) = r.affine()[0], o.affine()
    np.testing.assert_allclose(Ao, orthogonal_rows(Ar.T).T, rtol=1e-6)
    np.testing.assert_allclose(co, -(x.mean(0) @ Ao), rtol=1e-4, atol=1e-5)
    block = Ao[:, :DIM].astype(np.float64)
    gram = block.T @ block
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-6)
    np.testing.assert_array_equal(unpack(o.transform(x), 40)[:, [0, DIM, 2 * DIM]],
                                  unpack(r.transform(x), 40)[:, [0, DIM, 2 * DIM]])


def test_itq_rotates_the_principal_axes_and_lowers_the_quantization_loss(x):
    """A = P R with P the PCA axes and R orthogonal: the same subspace and bit balance as PCA, a loss that never rises."""
    from ondevice.projections import itq_rotation, pca_components

    b = _fit(x, "itq", 8, seed=5)
    A, c = b.affine()
    mean, P = pca_components(x, 8)
    R = P.T @ A  # A lies in the span of P, so this recovers the rotation
    np.testing.assert_allclose(R.T @ R, np.eye(8), atol=1e-5)
    np.testing.assert_allclose(P @ R, A, atol=1e-5)
    np.testing.assert_allclose(c, -(mean @ A), rtol=1e-4, atol=1e-5)
    _, losses = itq_rotation((x - mean) @ P, seed=5, iterations=30)
    assert all(b2 <= a2 + 1e-9 for a2, b2 in itertools.pairwise(losses)) and losses[-1] < losses[0]
    loss = b.config.metrics["quantization_loss"]
    assert loss["end"] < loss["start"] and b.config.hyper == {"iterations": 50, "max_rows": 100_000}
    with pytest.raises(OndeviceError, match="takes no hyper-parameters"):
        Binarizer.fit(x, "itq", 8, lr=0.1)


def test_itq_keeps_neighbours_better_than_pca_and_random():
    """Vectors whose variance decays over the axes, like sentence embeddings': at 16 of 64 bits, ITQ's codes keep
    more of each vector's 10 cosine neighbours nearest than PCA's (whose later bits split little variance) and a
    random projection's (which spends bits on low-variance directions)."""
    rng = np.random.default_rng(1)
    v = (rng.normal(size=(2000, 64)) * np.arange(1, 65) ** -0.5).astype(np.float32)
    vn = v / np.linalg.norm(v, axis=1, keepdims=True)
    cos = vn[:200] @ vn.T
    cos[np.arange(200), np.arange(200)] = -np.inf
    true = np.argsort(-cos, axis=1)[:, :10]

    def recall(method, seed=0):
        bits01 = unpack(Binarizer.fit(v, method, 16, seed=seed).transform(v), 16).astype(np.int32)
        d = hamming_distances(bits01[:200], bits01)
        d[np.arange(200), np.arange(200)] = 99
        got = np.argsort(d, axis=1, kind="stable")[:, :10]
        return np.mean([len(set(a) & set(b)) for a, b in zip(got, true)])

    itq = np.median([recall("itq", s) for s in range(3)])
    assert itq > 1.3 * recall("pca") and itq > 1.3 * np.median([recall("random", s) for s in range(3)])


def hamming_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.sum(1)[:, None] + b.sum(1)[None, :] - 2 * a @ b.T


def test_save_load_roundtrip_and_config(x, tmp_path):
    b = _fit(x, "ae-sp", 100, seed=2)
    b.save(tmp_path / "bin")
    cfg = json.loads((tmp_path / "bin" / "binarizer.json").read_text())
    assert cfg["method"] == "ae-sp" and cfg["bits"] == 100 and cfg["dim"] == DIM and cfg["bit_order"] == "little"
    assert cfg["seed"] == 2 and len(cfg["train_sha256"]) == 64 and cfg["hyper"]["sp_lambda"] == 2.0 and cfg["version"]
    back = Binarizer.load(tmp_path / "bin")
    np.testing.assert_array_equal(back.transform(x), b.transform(x))
    from safetensors.numpy import load_file

    t = load_file(str(tmp_path / "bin" / "binarizer.safetensors"))
    assert t["projection"].dtype == np.float32 and t["projection"].shape == (DIM, 100) and t["offset"].shape == (100,)


def test_load_and_transform_without_torch(x, tmp_path):
    _fit(x, "random", 72).save(tmp_path / "bin")
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any torch import now fails
        "import numpy as np\nfrom ondevice.binarize import Binarizer\n"
        f"b = Binarizer.load({str(tmp_path / 'bin')!r}); c = b.transform(np.load({str(tmp_path / 'x.npy')!r}))\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None; print(c.shape)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(200, 9)"


def test_faiss_binary_flat_matches_reference(x):
    faiss = pytest.importorskip("faiss")
    for bits in (64, 128, 256):  # IndexBinaryFlat needs a multiple of 8 bits; codes load unchanged
        codes = _fit(x, "random", bits).transform(x)
        index = faiss.IndexBinaryFlat(bits)
        index.add(codes)
        dist, ids = index.search(codes[:10], len(codes))
        ref = hamming_reference(codes[:10], codes)
        np.testing.assert_array_equal(np.take_along_axis(ref, ids, axis=1), dist)


@pytest.mark.parametrize("init,bits", [("random", 40), ("orthogonal", 40), ("pca", 16), ("pca", DIM + 8)])
def test_autoencoder_starts_at_its_init(x, init, bits):
    """With a vanishing learning rate the autoencoder's codes are its start: the random projection's, its rows made
    orthogonal per block, or PCA's for the first min(bits, dim) bits and the random projection's for the rest."""
    ae = _fit(x, "ae", bits, seed=3, init=init, input="standardize", select="last", lr=1e-12, epochs=1)
    codes = unpack(ae.transform(x), bits)
    random_codes = unpack(_fit(x, "random", bits, seed=3).transform(x), bits)
    if init == "random":
        np.testing.assert_array_equal(codes, random_codes)
        return
    if init == "orthogonal":
        from ondevice.projections import orthogonal_rows, random_projection

        w = orthogonal_rows(random_projection(DIM, bits, 3))
        z = x - x.mean(axis=0)  # the start sees the centered input (its global scale does not move a sign)
        expected = (z.astype(np.float64) @ w.T.astype(np.float64)) > 0
        agree = (codes.astype(bool) == expected).mean()
        assert agree > 0.999  # float32 training-side arithmetic may flip a bit that sits on the hyperplane
        assert (codes[:, DIM:] != random_codes[:, DIM:]).any()  # not the plain random projection
        return
    top = min(bits, DIM)
    np.testing.assert_array_equal(codes[:, :top], unpack(_fit(x, "pca", top).transform(x), top))
    np.testing.assert_array_equal(codes[:, top:], random_codes[:, top:])


def test_straight_through_gradient_is_nonzero():
    torch = pytest.importorskip("torch")
    from ondevice.binarize_ae import straight_through

    z = torch.tensor([[-2.0, -0.1, 0.3, 4.0]], requires_grad=True)
    p, b = straight_through(z)
    assert b.tolist() == [[0.0, 0.0, 1.0, 1.0]]  # forward: hard bits
    (b * torch.tensor([[1.0, 2.0, 3.0, 4.0]])).sum().backward()
    assert (z.grad.abs() > 0).all()
    np.testing.assert_allclose(z.grad.numpy(), (p * (1 - p)).detach().numpy() * [[1, 2, 3, 4]], rtol=1e-6)


@pytest.mark.parametrize("relax", ["expected", "st"])
def test_sp_loss_zero_when_ordered_positive_when_violated(relax):
    torch = pytest.importorskip("torch")
    from ondevice.binarize_ae import sp_loss

    h = torch.tensor([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.2]])  # cos(0,1) >> cos(1,2)
    trip = torch.tensor([[0, 1, 2]])
    right = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # Ham(0,1)=1 < Ham(1,2)=3
    wrong = right[[2, 1, 0]]  # Ham(0,1)=3 > Ham(1,2)=1
    assert float(sp_loss(h, right, trip, relax)) == 0.0
    assert float(sp_loss(h, wrong, trip, relax)) == pytest.approx(0.5)  # (3 - 1) / 4 bits
    soft = torch.full((3, 4), 0.5, requires_grad=True)
    sp_loss(h, soft + torch.tensor([[0.3], [0.0], [-0.3]]), trip, relax).backward()
    assert soft.grad is not None  # differentiable in the codes


def test_sp_gap_weighting_ignores_tied_triplets():
    torch = pytest.importorskip("torch")
    from ondevice.binarize_ae import sp_loss

    h = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.9, 0.1], [-1.0, 0.2]])
    codes = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0],
                          [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    tied = torch.tensor([[0, 1, 2]])  # cos(0,1) == cos(1,2): the label is arbitrary
    clear = torch.tensor([[3, 4, 5]])  # the same codes, cos(3,4) >> cos(4,5), Hamming order violated
    both = torch.cat([tied, clear])
    assert float(sp_loss(h, codes, tied, weighting="uniform")) > 0  # uniform: the tie counts as a violation
    assert float(sp_loss(h, codes, tied, weighting="gap")) == 0.0
    assert float(sp_loss(h, codes, both, weighting="gap")) == pytest.approx(float(sp_loss(h, codes, clear)))


def test_neighbor_sampling_picks_the_nearest_as_anchor():
    torch = pytest.importorskip("torch")
    from ondevice.binarize_ae import sample_triplets

    h = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.95, 0.05], [0.05, 0.95]])
    trip = sample_triplets(h, 64, "neighbor", torch.Generator().manual_seed(0))
    nearest = {0: 2, 1: 3, 2: 0, 3: 1}
    assert all(int(a) == nearest[int(b)] for a, b in trip[:, :2])
    assert trip.shape == (64, 3) and int(trip.min()) >= 0 and int(trip.max()) < 4


@pytest.mark.parametrize("bits", [8, DIM + 8])
def test_whitened_autoencoder_starts_at_pca_and_exports_one_affine_map(bits):
    """input "whiten": the encoder reads the top principal components scaled to unit variance; from init "pca" its
    first bits are PCA's codes (a sign does not see the scale), the rest the random projection of the whitened
    vector; the exported map still gives codes = pack(h @ A + c > 0) on raw vectors."""
    from ondevice.projections import random_projection, whitening

    rng = np.random.default_rng(1)
    xa = (rng.normal(size=(300, DIM)) * np.geomspace(4.0, 0.01, DIM) + 1.0).astype(np.float32)  # anisotropic
    ae = _fit(xa, "ae", bits, seed=3, init="pca", input="whiten", select="last", lr=1e-12, epochs=1)
    mean, T = whitening(xa, 0.99)
    k = T.shape[1]
    assert 1 < k < DIM and ae.extras["input_whitening"].shape == (DIM, k) and ae.config.hyper["input"] == "whiten"
    codes = unpack(ae.transform(xa), bits)
    top = min(bits, k)
    np.testing.assert_array_equal(codes[:, :top], unpack(_fit(xa, "pca", top).transform(xa), top))
    w = random_projection(k, bits, 3)
    np.testing.assert_array_equal(codes[:, top:], ((xa - mean) @ T @ w[top:].T) > 0)
    A, c = ae.affine()
    np.testing.assert_array_equal(ae.transform(xa), pack(xa @ A + c > 0))
    with pytest.raises(OndeviceError, match="input"):
        _fit(xa, "ae", 8, input="sphere")
    with pytest.raises(OndeviceError, match="whiten_variance"):
        _fit(xa, "ae", 8, input="whiten", whiten_variance=1.5)


def test_ae_learns_and_checkpoint_resume(x, tmp_path):
    full = _fit(x, "ae", 32, seed=5, epochs=2)
    log = full.config.metrics["log"]
    assert len(log) == 2 and log[-1]["rec_loss"] < log[0]["rec_loss"]
    _fit(x, "ae", 32, seed=5, epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(OndeviceError, match="--resume"):
        _fit(x, "ae", 32, seed=5, epochs=2, checkpoint_dir=tmp_path)
    resumed = _fit(x, "ae", 32, seed=5, epochs=2, checkpoint_dir=tmp_path, resume=True)
    np.testing.assert_array_equal(resumed.affine()[0], full.affine()[0])
    with pytest.raises(OndeviceError, match="different"):
        _fit(x, "ae", 32, seed=6, epochs=3, checkpoint_dir=tmp_path, resume=True)


@pytest.mark.parametrize("geometry", ["standardize", "whiten"])
def test_ae_holdout_init_and_epoch_selection(x, tmp_path, geometry):
    """init "auto" starts from the projection that keeps the held-out order better; select "holdout" exports the
    epoch (0 = the start) whose codes keep it best (order judged in the input's geometry: raw or whitened cosine),
    and a resumed run keeps that pick."""
    from ondevice.binarize_ae import holdout_order, order_pairs
    from ondevice.projections import whitening

    hyper = {"init": "auto", "select": "holdout", "holdout": 0.25, "epochs": 3, "lr": 0.05, "input": geometry}
    ae = _fit(x, "ae", 8, seed=4, **hyper)
    m = ae.config.metrics
    assert set(m["init_holdout_order"]) == {"random", "pca"}
    assert m["init_chosen"] == max(m["init_holdout_order"], key=m["init_holdout_order"].get)
    orders = [m["init_holdout_order"][m["init_chosen"]]] + [e["holdout_order"] for e in m["log"]]
    assert m["selected_epoch"] == int(np.argmax(orders)) and m["selected_holdout_order"] == max(orders)
    # the exported codes are the picked encoder's: recompute its held-out order from the same split
    n_val = round(len(x) * 0.25)
    perm = np.random.default_rng([4, 13]).permutation(len(x))
    held = x[np.sort(perm[:n_val])]
    judged = held
    if geometry == "whiten":
        mean, T = whitening(x[np.sort(perm[n_val:])], 0.99)
        judged = (held - mean) @ T
    assert holdout_order(unpack(ae.transform(held), 8).astype(bool), order_pairs(judged, 4)) == pytest.approx(max(orders))
    _fit(x, "ae", 8, seed=4, checkpoint_dir=tmp_path, **{**hyper, "epochs": 2})
    resumed = _fit(x, "ae", 8, seed=4, checkpoint_dir=tmp_path, resume=True, **hyper)
    np.testing.assert_array_equal(resumed.affine()[0], ae.affine()[0])
    assert resumed.config.metrics["selected_epoch"] == m["selected_epoch"]
    with pytest.raises(OndeviceError, match="holdout"):
        _fit(x, "ae", 8, select="holdout", holdout=0.9)


def _judge(x, seed=0, n=80):
    """Labelled pairs the codes can rank: row i of x against itself plus noise of scale s_i, gold = -s_i."""
    from ondevice.binarize_ae import JudgePairs

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(x), n)
    scale = rng.uniform(0.0, 2.0, n).astype(np.float32)
    b = x[rows] + scale[:, None] * rng.normal(size=(n, x.shape[1])).astype(np.float32)
    return JudgePairs(x[rows], b, -scale, name="synthetic")


@pytest.mark.parametrize("geometry", ["standardize", "whiten"])
def test_ae_select_pairs(x, tmp_path, geometry):
    """select "pairs" exports the epoch (0 = the start) whose codes rank the labelled judge pairs best; the
    recorded score is the exported codes' own; training that cannot move (lr ~ 0) keeps the start; a resumed
    run must be judged by the same pairs."""
    from ondevice.binarize_ae import pairs_spearman

    judge = _judge(x)
    hyper = {"select": "pairs", "epochs": 3, "lr": 0.05, "input": geometry, "init": "orthogonal"}
    ae = _fit(x, "ae-sp", 8, seed=2, judge_pairs=judge, **hyper)
    m = ae.config.metrics
    scores = [m["start_pairs_spearman"]] + [e["pairs_spearman"] for e in m["log"]]
    assert m["selected_epoch"] == int(np.argmax(scores)) and m["selected_pairs_spearman"] == max(scores)
    assert m["judge_pairs"] == {"name": "synthetic", "pairs": 80, "sha256": judge.sha256}
    own = pairs_spearman(unpack(ae.transform(judge.a), 8), unpack(ae.transform(judge.b), 8), judge.gold)
    assert own == pytest.approx(max(scores))
    assert max(scores) > 0.3  # the synthetic task is rankable: the judge sees signal, not ties
    still = _fit(x, "ae", 8, seed=2, judge_pairs=judge, **{**hyper, "lr": 1e-12})
    start = _fit(x, "ae", 8, seed=2, **{**hyper, "select": "last", "epochs": 1, "lr": 1e-12})
    assert still.config.metrics["selected_epoch"] == 0  # no epoch beats the start strictly
    np.testing.assert_array_equal(still.transform(x), start.transform(x))
    _fit(x, "ae", 8, seed=2, judge_pairs=judge, checkpoint_dir=tmp_path, **{**hyper, "epochs": 1})
    with pytest.raises(OndeviceError, match="judge_pairs_sha256"):
        _fit(x, "ae", 8, seed=2, judge_pairs=_judge(x, seed=1), checkpoint_dir=tmp_path, resume=True, **hyper)


def test_ae_sp_fine_tune_of_ae_keeps_ae_as_a_candidate(x):
    """sp_start "ae": the first epochs are ae's own (same losses, judge scores and pick); the fine-tune continues
    from that pick, so ae-sp's judged score is never below ae's, and where the judge keeps ae's pick the codes are
    ae's. Over six seeds both outcomes occur (the fine-tune kept in some, ae's pick in others)."""
    judge = _judge(x)
    hyper = {"select": "pairs", "lr": 0.05, "input": "whiten", "init": "orthogonal", "epochs": 2}
    outcomes = set()
    for seed in range(6):
        ae = _fit(x, "ae", 8, seed=seed, judge_pairs=judge, **hyper)
        sp = _fit(x, "ae-sp", 8, seed=seed, judge_pairs=judge, sp_start="ae", sp_epochs=2, **hyper)
        m, ms = ae.config.metrics, sp.config.metrics
        assert [e["phase"] for e in ms["log"]] == ["ae", "ae", "sp", "sp"] and ms["sp_from_epoch"] == 3
        assert [e["sp_loss"] for e in ms["log"][:2]] == [0.0, 0.0] and min(e["sp_loss"] for e in ms["log"][2:]) > 0
        for mine, theirs in zip(ms["log"][:2], m["log"], strict=True):
            assert (mine["rec_loss"], mine["pairs_spearman"]) == (theirs["rec_loss"], theirs["pairs_spearman"])
        assert ms["ae_selected_epoch"] == m["selected_epoch"]
        assert ms["ae_selected_pairs_spearman"] == m["selected_pairs_spearman"]
        assert ms["selected_pairs_spearman"] >= m["selected_pairs_spearman"]
        if ms["selected_epoch"] < ms["sp_from_epoch"]:
            assert ms["selected_epoch"] == m["selected_epoch"]
            np.testing.assert_array_equal(sp.transform(x), ae.transform(x))
            outcomes.add("ae kept")
        else:
            assert ms["selected_pairs_spearman"] > m["selected_pairs_spearman"]
            outcomes.add("fine-tune kept")
    assert outcomes == {"ae kept", "fine-tune kept"}


def test_ae_sp_fine_tune_of_the_start_is_the_joint_training(x):
    """When ae's judge keeps the start, the fine-tune starts from the start (encoder and decoder, fresh Adam) and
    replays the first epochs' batches: the same run as joint training (sp_start "start") of sp_epochs epochs."""
    judge = _judge(x)
    hyper = {"select": "pairs", "lr": 0.05, "input": "whiten", "init": "orthogonal", "epochs": 2}
    ae = _fit(x, "ae", 8, seed=3, judge_pairs=judge, **hyper)
    assert ae.config.metrics["selected_epoch"] == 0  # the precondition this seed was chosen for
    phased = _fit(x, "ae-sp", 8, seed=3, judge_pairs=judge, sp_start="ae", sp_epochs=2, **hyper)
    joint = _fit(x, "ae-sp", 8, seed=3, judge_pairs=judge, **hyper)
    keys = ("rec_loss", "sp_loss", "pairs_spearman", "ones_fraction")
    assert [[e[k] for k in keys] for e in phased.config.metrics["log"][2:]] == \
        [[e[k] for k in keys] for e in joint.config.metrics["log"]]
    np.testing.assert_array_equal(phased.affine()[0], joint.affine()[0])


def test_ae_sp_fine_tune_resume_and_extend(x, tmp_path):
    """A finished fine-tune extends with more --sp-epochs on --resume (the same result as running them at once);
    changing the ae epochs, where the fine-tune starts, is refused."""
    judge = _judge(x)
    hyper = {"select": "pairs", "lr": 0.05, "input": "whiten", "init": "orthogonal", "epochs": 2, "sp_start": "ae"}
    direct = _fit(x, "ae-sp", 8, seed=4, judge_pairs=judge, sp_epochs=2, **hyper)
    _fit(x, "ae-sp", 8, seed=4, judge_pairs=judge, sp_epochs=1, checkpoint_dir=tmp_path, **hyper)
    resumed = _fit(x, "ae-sp", 8, seed=4, judge_pairs=judge, sp_epochs=2, checkpoint_dir=tmp_path, resume=True, **hyper)
    np.testing.assert_array_equal(resumed.affine()[0], direct.affine()[0])
    assert resumed.config.metrics["selected_epoch"] == direct.config.metrics["selected_epoch"]
    with pytest.raises(OndeviceError, match="sp_start"):
        _fit(x, "ae-sp", 8, seed=4, judge_pairs=judge, checkpoint_dir=tmp_path, resume=True,
             **{**hyper, "epochs": 3, "sp_epochs": 2})
    with pytest.raises(OndeviceError, match="sp_start must be one of"):
        _fit(x, "ae-sp", 8, sp_start="later")


def test_judge_pairs_errors(x):
    from ondevice.binarize_ae import JudgePairs

    judge = _judge(x)
    with pytest.raises(OndeviceError, match="needs labelled judge pairs"):
        _fit(x, "ae", 8, select="pairs")
    with pytest.raises(OndeviceError, match="judge pairs need select"):
        _fit(x, "ae", 8, select="holdout", judge_pairs=judge)
    with pytest.raises(OndeviceError, match="same model"):
        _fit(x, "ae", 8, select="pairs", judge_pairs=JudgePairs(judge.a[:, :8], judge.b[:, :8], judge.gold))
    with pytest.raises(OndeviceError, match="two"):
        JudgePairs(judge.a, judge.b[:-1], judge.gold)
    with pytest.raises(OndeviceError, match="finite"):
        JudgePairs(judge.a, judge.b, np.where(np.arange(len(judge.gold)) == 3, np.nan, judge.gold))
    with pytest.raises(OndeviceError, match="all equal"):
        JudgePairs(judge.a, judge.b, np.ones(len(judge.gold)))


def test_cli_select_pairs(pair_env, tmp_path, capsys):
    """`ondevice binarize --select pairs --judge-task stsb` encodes the task's train pairs with the same student and
    records the judge; the flags that cannot work end in one line, exit 2."""
    pytest.importorskip("torch")
    from ondevice.eval.pair_tasks import load_pairs

    train = load_pairs("stsb", "train", pair_env.data)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(train.a + train.b) + "\n")
    base = ["binarize", "--student", str(pair_env.student), "--corpus", str(corpus), "--method", "ae", "--bits", "8",
            "--epochs", "2", "--quiet"]
    rc = main([*base, "--select", "pairs", "--judge-task", "stsb", "--data", str(pair_env.data),
               "--out", str(tmp_path / "b")])
    metrics = json.loads((tmp_path / "b" / "binarizer.json").read_text())["metrics"]
    assert rc == 0 and metrics["judge_pairs"]["name"] == "stsb train" and metrics["judge_pairs"]["pairs"] == len(train)
    assert 0 <= metrics["selected_epoch"] <= 2
    capsys.readouterr()
    for extra, words in ((["--select", "pairs"], "go together"), (["--judge-task", "stsb"], "go together")):
        rc = main([*base, *extra, "--out", str(tmp_path / "c")])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and words in err
    np.save(tmp_path / "x.npy", np.zeros((10, 16), np.float32))
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae", "--bits", "8", "--select", "pairs",
               "--judge-task", "stsb", "--data", str(pair_env.data), "--out", str(tmp_path / "d"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--student" in err
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "random", "--bits", "8",
               "--judge-task", "stsb", "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "autoencoders" in err


def test_methods_for():
    assert methods_for(384, 384) == list(METHODS)
    assert methods_for(2048, 384) == ["random", "orthogonal", "ae", "ae-sp"]
    assert methods_for(256, 384) == ["random", "orthogonal", "pca", "itq", "ae", "ae-sp"]


@pytest.mark.parametrize("method,bits,match", [
    ("threshold", 100, "use random, orthogonal, ae, ae-sp"),
    ("pca", 17, "at most 16 bits.*use random, orthogonal, ae, ae-sp"),
    ("itq", 17, "at most 16 bits.*use random, orthogonal, ae, ae-sp"),
    ("nope", 8, "unknown binarization method"),
    ("random", 0, "positive integer"),
])
def test_unsupported_bits_name_the_methods_that_can(x, method, bits, match):
    with pytest.raises(OndeviceError, match=match) as err:
        Binarizer.fit(x, method, bits)
    assert "\n" not in str(err.value)


def test_bad_inputs(x):
    with pytest.raises(OndeviceError, match="2-d"):
        Binarizer.fit(x[0], "random", 8)
    with pytest.raises(OndeviceError, match="2-d"):
        Binarizer.fit(np.zeros((0, DIM), np.float32), "random", 8)
    bad = x.copy()
    bad[7, 3] = np.nan
    with pytest.raises(OndeviceError, match="NaN.*row 7"):
        Binarizer.fit(bad, "random", 8)
    b = Binarizer.fit(x, "random", 8)
    with pytest.raises(OndeviceError, match="dim 15"):
        b.transform(x[:, :15])
    with pytest.raises(OndeviceError, match="NaN"):
        b.transform(bad)
    with pytest.raises(OndeviceError, match="takes no hyper-parameters"):
        Binarizer.fit(x, "random", 8, lr=0.1)
    pytest.importorskip("torch")
    with pytest.raises(OndeviceError, match="unknown hyper-parameters"):
        Binarizer.fit(x, "ae", 8, bogus=1)
    with pytest.raises(OndeviceError, match="decoder_input"):
        Binarizer.fit(x, "ae", 8, decoder_input="x", progress=False)


def test_load_missing_and_corrupt(x, tmp_path):
    with pytest.raises(OndeviceError, match="not a binarizer dir"):
        Binarizer.load(tmp_path / "none")
    d = tmp_path / "bin"
    Binarizer.fit(x, "random", 8).save(d)
    weights = (d / "binarizer.safetensors").read_bytes()
    (d / "binarizer.safetensors").write_bytes(weights[:40])
    with pytest.raises(OndeviceError, match="corrupt"):
        Binarizer.load(d)
    (d / "binarizer.safetensors").write_bytes(weights)
    (d / "binarizer.json").write_text("{not json")
    with pytest.raises(OndeviceError, match="not valid JSON"):
        Binarizer.load(d)
    (d / "binarizer.json").write_text(json.dumps({"method": "random", "bits": 8, "dim": 15}))
    with pytest.raises(OndeviceError, match="expected"):
        Binarizer.load(d)  # shapes disagree with the config


def test_cli_fit_codes_and_errors(x, tmp_path, capsys):
    np.save(tmp_path / "x.npy", x)
    out, codes = tmp_path / "bin", tmp_path / "codes.npy"
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "random", "--bits", "100",
               "--seed", "7", "--out", str(out), "--codes-out", str(codes), "--quiet"])
    assert rc == 0
    np.testing.assert_array_equal(np.load(codes), Binarizer.load(out).transform(x))
    assert json.loads((out / "binarizer.json").read_text())["seed"] == 7
    capsys.readouterr()
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "threshold", "--bits", "2048",
               "--out", str(tmp_path / "b2")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "random, orthogonal, ae, ae-sp" in err
    rc = main(["binarize", "--embeddings", str(tmp_path / "missing.npy"), "--bits", "8", "--out", str(tmp_path / "b3")])
    assert rc == 2 and "not found" in capsys.readouterr().err
    rc = main(["binarize", "--bits", "8", "--out", str(tmp_path / "b4")])
    assert rc == 2 and "exactly one input" in capsys.readouterr().err
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae", "--bits", "8", "--init", "auto",
               "--select", "holdout", "--holdout", "0.7", "--out", str(tmp_path / "b5"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "holdout" in err
    if importlib.util.find_spec("torch") is not None:  # the autoencoders train with torch (the `train` extra)
        rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae", "--bits", "8", "--epochs", "2",
                   "--init", "auto", "--select", "holdout", "--out", str(tmp_path / "b6"), "--quiet"])
        metrics = json.loads((tmp_path / "b6" / "binarizer.json").read_text())["metrics"]
        assert rc == 0 and metrics["init_chosen"] in ("random", "pca") and 0 <= metrics["selected_epoch"] <= 2
        rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae", "--bits", "8", "--epochs", "1",
                   "--input", "whiten", "--whiten-variance", "0.9", "--out", str(tmp_path / "b7"), "--quiet"])
        hyper = json.loads((tmp_path / "b7" / "binarizer.json").read_text())["hyper"]
        assert rc == 0 and hyper["input"] == "whiten" and hyper["whiten_variance"] == 0.9
        rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae-sp", "--bits", "8", "--epochs",
                   "1", "--sp-start", "ae", "--sp-epochs", "1", "--out", str(tmp_path / "b9"), "--quiet"])
        saved = json.loads((tmp_path / "b9" / "binarizer.json").read_text())
        assert rc == 0 and (saved["hyper"]["sp_start"], saved["hyper"]["sp_epochs"]) == ("ae", 1)
        assert [e["phase"] for e in saved["metrics"]["log"]] == ["ae", "sp"]
    capsys.readouterr()
    rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "ae", "--bits", "8",
               "--whiten-variance", "0", "--out", str(tmp_path / "b8"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--whiten-variance must be" in err  # the field, named by its flag


def test_codes_load_into_the_hamming_kernels(x):
    hamming = pytest.importorskip("ondevice.kernels.hamming")
    codes = _fit(x, "random", 72).transform(x)  # 9 bytes, not whole 64-bit words
    dist, ids = hamming.knn(codes, codes[:3], k=5, threads=1)
    ref = hamming_reference(codes[:3], codes)
    np.testing.assert_array_equal(np.take_along_axis(ref, ids, axis=1), dist)
    assert (dist[:, 0] == 0).all()


def test_ae_resumes_a_checkpoint_whose_pick_has_no_decoder(x, tmp_path):
    """Checkpoints written before the pick kept its decoder (only best.weight / best.bias) still resume and save."""
    st = pytest.importorskip("safetensors.numpy")
    from ondevice import layouts

    judge = _judge(x)
    hyper = {"select": "pairs", "lr": 0.05, "input": "whiten", "init": "orthogonal"}
    direct = _fit(x, "ae", 8, seed=2, judge_pairs=judge, epochs=2, **hyper)
    _fit(x, "ae", 8, seed=2, judge_pairs=judge, epochs=1, checkpoint_dir=tmp_path, **hyper)
    path = tmp_path / layouts.AE_CHECKPOINT
    with st.safe_open(str(path), framework="np") as fh:
        meta, tensors = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    st.save_file({k: v for k, v in tensors.items() if not k.startswith("best.dec_")}, str(path), metadata=meta)
    resumed = _fit(x, "ae", 8, seed=2, judge_pairs=judge, epochs=2, checkpoint_dir=tmp_path, resume=True, **hyper)
    np.testing.assert_array_equal(resumed.affine()[0], direct.affine()[0])
    path.rename(tmp_path / "outside.safetensors")  # a resumed fit reads only its own plain checkpoint
    path.symlink_to(tmp_path / "outside.safetensors")
    with pytest.raises(OndeviceError, match="ae_checkpoint.safetensors is a symbolic link"):
        _fit(x, "ae", 8, seed=2, judge_pairs=judge, epochs=2, checkpoint_dir=tmp_path, resume=True, **hyper)


def test_binarize_never_writes_into_another_artifact(x, tmp_path, capsys):
    """--out holding a bundle or a student is refused before any fitting, and nothing there changes."""
    np.save(tmp_path / "x.npy", x)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"format": "ondevice-bundle"}')
    (bundle / "binarizer.json").write_text('{"the bundle": "own"}')
    student = tmp_path / "student"
    student.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        (student / name).write_text("x")
    for out, expected in ((bundle, "holds an exported bundle"), (student, "holds a student encoder")):
        rc = main(["binarize", "--embeddings", str(tmp_path / "x.npy"), "--method", "random", "--bits", "16",
                   "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and expected in err
    assert (bundle / "binarizer.json").read_text() == '{"the bundle": "own"}'
    assert sorted(p.name for p in student.iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
    with pytest.raises(OndeviceError, match="holds an exported bundle"):
        Binarizer.fit(x, method="random", bits=16).save(bundle)


@pytest.mark.parametrize("name", ["binarizer.safetensors", "binarizer.json"])
def test_a_linked_file_in_a_binarizer_folder_is_refused(x, tmp_path, name):
    """A binarizer someone sends must not make ondevice read other files of this machine through a symbolic link."""
    z = tmp_path / "Z"
    Binarizer.fit(x, method="random", bits=16, seed=0).save(z)
    Binarizer.load(z)  # the plain folder loads
    (tmp_path / "elsewhere").mkdir()
    (z / name).rename(tmp_path / "elsewhere" / name)  # same bytes, so only the link is wrong
    (z / name).symlink_to(tmp_path / "elsewhere" / name)
    with pytest.raises(OndeviceError, match=rf"^binarizer {z}: {name} is a symbolic link; .*copy the file in instead"):
        Binarizer.load(z)


def test_cli_bad_input_is_one_line_before_any_progress_line(x, tmp_path, capsys):
    """An empty or 1-d --embeddings file, a negative --threads with any method, and a missing --student are the only
    stderr line: no traceback, no "encoding ..." or "fitting ..." line first."""
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "flat.npy", x[0])
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "corpus.txt").write_text("a cat sat\na dog ran\n")
    base = ["binarize", "--method", "random", "--bits", "16", "--out", str(tmp_path / "z")]
    for extra, expected in ((["--embeddings", str(tmp_path / "empty.npy")], "--embeddings"),
                            (["--embeddings", str(tmp_path / "flat.npy")], "2-d (n, dim)"),
                            (["--embeddings", str(tmp_path / "x.npy"), "--threads", "-3"], "--threads"),
                            (["--student", str(tmp_path / "nope"), "--corpus", str(tmp_path / "corpus.txt")],
                             "not a student dir")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err and "Traceback" not in err, err
    assert not (tmp_path / "z").exists()
