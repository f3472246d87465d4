"""The binary autoencoder (paper §3.4) and its semantic-preserving regularizer (§3.4.1), trained with torch.

Encoder: b = 1[sigmoid(W x + k) > 0.5] on the prepared input x, with a straight-through gradient (forward: the hard
bit; backward: the sigmoid's gradient). Decoder: linear, x^ = W' b~ + k', where b~ is b read as 0/1 ("01", the
paper's Eq. 4) or as -1/+1 ("pm1", the authors' code). Loss: MSE(x, x^) plus, for ae-sp, sp_lambda times the
triplet hinge of Eq. 6 on Hamming distances relaxed to be differentiable (see `relaxed_hamming`).

The input x (`AEConfig.input`): "standardize" (default, the paper's setting) = (h - mean) / one global scale, or
"whiten" = the top principal components of the fit vectors that hold 99% of their variance, each scaled to unit
variance. They serve two uses: codes from whitened input rank STS-B pairs better (PCA's sign codes already weigh
each principal direction alike, and so do they) but find fewer of the teacher's and the student's nearest
neighbours, the search the codes are mostly for; docs/results/binarize.md has the numbers. Either way
the preparation is affine and folded into the exported map, so the codes are still pack((h @ A + c) > 0) on the
raw vectors; Eq. 6's cosines and the held-out judge use the same geometry as the input.

The SP term is Eq. 6 averaged over triplets (not summed) with Hamming distances as a fraction of the bits, so it
does not grow with the batch or the code length. Triplets are drawn uniformly within each batch (sp_triplets per
batch; the middle index is the pivot) and, by default ("gap"), each triplet's hinge is weighted by how far apart its
two cosines are: a triplet whose cosines nearly tie has a coin-flip label l, and with uniform weights those
triplets dominated and made ae-sp worse than ae. lambda 2, "gap" and the "expected" relaxation were chosen on
STS-B dev with 100k training vectors and 8 epochs (README "Autoencoder choices, measured"); the pair-scoring setting
(input "whiten", select "holdout", lr 3e-4) later, on the shipped student, first with init "auto", then
"orthogonal", whose start leads the random one on STS-B dev at every width over 15 seeds (README "Orthogonal rows").

Which epoch is exported (`AEConfig.select`): the last; the one whose codes keep the held-out vectors' similarity order
best ("holdout": no labels, but at 64-128 bits that order keeps rising while STS-B scores fall); or the one whose codes
rank a task's labelled *train* pairs best ("pairs", `JudgePairs`: the pair-scoring setting). Both judges see the
start as epoch 0, so training that only hurts leaves the start.

When the SP term starts (`AEConfig.sp_start`): "start" trains MSE + SP jointly from the first step, as the paper does;
"ae" first trains exactly as `ae` does (same start, batches and judge, so the same pick), then fine-tunes that pick
with the SP term for `sp_epochs` epochs, the judge choosing among ae's pick and the fine-tune's epochs. With a judge,
ae-sp then never scores below ae on the judge's own pairs; whether the fine-tune's epochs also rank unseen pairs
better is what the benchmark measures. The fine-tune replays the first epochs' batch streams, so a fine-tune of the
start is the joint training of as many epochs.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import checkpoints, layouts
from ondevice._deps import require
from ondevice.configs import (
    Composed,
    Optimization,
    choice_check,
    composed,
    first_problem,
    float_check,
    int_check,
)
from ondevice.errors import OndeviceError
from ondevice.eval.metrics import spearman
from ondevice.io import artifact_file
from ondevice.projections import column_mean, orthogonal_rows, pca_components, random_projection, whitening
from ondevice.trainloop import Position, check_start, check_weights, run_epochs

DECODER_INPUTS = ("pm1", "01")
RELAXATIONS = ("expected", "st")
SAMPLINGS = ("uniform", "gap", "neighbor")
INITS = ("random", "orthogonal", "pca", "xavier", "auto")
SELECTS = ("last", "holdout", "pairs")
INPUTS = ("standardize", "whiten")
SP_STARTS = ("start", "ae")


@composed
class AEConfig(Composed):
    """Autoencoder hyper-parameters (saved flat in binarizer.json under "hyper")."""

    optim: Optimization = field(default_factory=lambda: Optimization(epochs=8, batch_size=256, lr=1e-3))
    # lr: 3e-4 with input "whiten" (docs/results/binarize.md)
    decoder_input: str = "pm1"  # how the decoder reads a bit: "pm1" = -1/+1, "01" = 0/1
    init: str = "random"  # encoder start: "random" = the centered random projection, "orthogonal" = the same rows
    # made orthogonal in blocks of the input width (Super-Bit LSH), "pca" = the top principal axes (then random rows
    # past dim), "xavier" = torch default, "auto" = random or pca, whichever keeps the held-out similarity order
    # better (see holdout_order)
    select: str = "last"  # "last" = the weights after the last epoch; "holdout" = those of the epoch (0 = the start)
    # whose codes keep the held-out similarity order best; "pairs" = those whose codes rank labelled pairs (a task's
    # train split, `JudgePairs`) best by their gold scores
    holdout: float = 0.05  # fraction of the vectors held out of training for init "auto" / select "holdout"
    # (at most HOLDOUT_MAX vectors)
    input: str = "standardize"  # what the encoder sees: "standardize" = (h - mean) / one global scale (the paper's
    # geometry: similarity is the raw vectors' cosine), "whiten" = the top principal components holding
    # whiten_variance of the variance, each scaled to unit variance (similarity is the whitened vectors' cosine)
    whiten_variance: float = 0.99
    sp_lambda: float = 2.0  # SP loss weight (ae-sp only); chosen on STS-B dev, see the module docstring
    sp_relax: str = "expected"  # relaxed Hamming: "expected" (sigmoid probabilities) or "st" (hard bits, ST gradient)
    sp_triplets: int = 1024  # triplets sampled per batch (ae-sp only)
    sp_sampling: str = "gap"  # triplets: "uniform", "gap" (weighted by the cosine gap), "neighbor" (a = b's nearest)
    sp_start: str = "start"  # ae-sp only: "start" = the SP term from the first step (the paper's joint training);
    # "ae" = train exactly as ae first (epochs, judge), then fine-tune ae's pick (encoder and decoder) with the SP
    # term for sp_epochs more epochs, judged against that pick, so ae's codes stay a candidate
    sp_epochs: int = 0  # sp_start "ae": epochs of the SP fine-tune (0 = epochs)
    threads: int = 0  # torch threads; 0 = torch default

    def validate(self) -> None:
        """Reject values that cannot train, with a one-line ConfigError naming the field."""
        first_problem([
            *self.optim.checks(), (self.optim.batch_size != 1, "{batch_size} must be >= 2 (a batch has pairs)"),
            int_check(self.sp_triplets, "sp_triplets", 1, 1 << 24), int_check(self.threads, "threads", 0, 4096),
            int_check(self.sp_epochs, "sp_epochs", 0, 100_000),
            float_check(self.sp_lambda, "sp_lambda", 0.0, 1e6),  # NaN would silently switch the SP loss off
            float_check(self.holdout, "holdout", 0.0, 0.5, lo_open=True),
            float_check(self.whiten_variance, "whiten_variance", 0.0, 1.0, lo_open=True),
            *(choice_check(getattr(self, name), name, allowed) for name, allowed in (
                ("decoder_input", DECODER_INPUTS), ("sp_relax", RELAXATIONS), ("init", INITS),
                ("sp_sampling", SAMPLINGS), ("select", SELECTS), ("input", INPUTS), ("sp_start", SP_STARTS)))])


@dataclass
class JudgePairs:
    """Labelled pairs that select "pairs" judges the epochs by: raw vectors of both sides (n, dim) and gold scores.

    Spearman of -Hamming against gold, like the STS benchmarks score codes; give a task's *train* split (never the
    dev or test pairs that will report the codes' score). `name` says where the pairs came from (saved in the config).
    """

    a: np.ndarray
    b: np.ndarray
    gold: np.ndarray
    name: str = ""

    def __post_init__(self) -> None:
        self.a = np.asarray(self.a, dtype=np.float32)
        self.b = np.asarray(self.b, dtype=np.float32)
        self.gold = np.asarray(self.gold, dtype=np.float64).reshape(-1)
        n = len(self.gold)
        if self.a.ndim != 2 or self.a.shape != self.b.shape or self.a.shape[0] != n:
            raise OndeviceError(f"judge pairs need two (n, dim) matrices and n gold scores, got {self.a.shape}, "
                                f"{self.b.shape} and {n}")
        if n < 3 or not (np.isfinite(self.a).all() and np.isfinite(self.b).all() and np.isfinite(self.gold).all()):
            raise OndeviceError("judge pairs need at least 3 pairs with finite vectors and gold scores")
        if np.ptp(self.gold) == 0:
            raise OndeviceError("judge pairs' gold scores are all equal: they cannot rank codes; give a labelled split")

    @property
    def sha256(self) -> str:
        """Fingerprint of the vectors and gold (a resumed run must be judged by the same pairs)."""
        h = hashlib.sha256()
        for arr in (self.a, self.b, self.gold):
            h.update(str(arr.shape).encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()

    def describe(self) -> dict:
        """What the config records about the judge."""
        return {"name": self.name, "pairs": len(self.gold), "sha256": self.sha256}


def pairs_spearman(codes_a: np.ndarray, codes_b: np.ndarray, gold: np.ndarray) -> float:
    """Spearman of -Hamming between (n, bits) 0/1 code rows a[i], b[i] and the gold scores (-1 when undefined)."""
    score = spearman(-(codes_a != codes_b).sum(axis=1).astype(np.float64), gold)
    return float(score) if np.isfinite(score) else -1.0


@dataclass
class AEResult:
    """What training produced: the exported affine map, extra tensors and a training log."""

    projection: np.ndarray
    offset: np.ndarray
    extras: dict[str, np.ndarray]
    metrics: dict[str, Any] = field(default_factory=dict)


def straight_through(logits):
    """(p, b): sigmoid probabilities and hard bits 1[p > 0.5] whose gradient is the gradient of p."""
    p = logits.sigmoid()
    hard = (logits > 0).to(p.dtype)
    return p, hard + (p - p.detach())  # parenthesized: the forward value is exactly 0.0 or 1.0


def relaxed_hamming(u, v, relax: str = "expected"):
    """Differentiable Hamming distance / bits between code rows u, v (probabilities for "expected", ST bits for "st").

    "expected": sum p(1-q) + q(1-p), the expected Hamming distance of independent Bernoulli bits (equal to
    (bits - <2p-1, 2q-1>) / 2). "st": the same formula on straight-through bits, so the forward value is the
    exact Hamming distance and the gradient flows through the sigmoids.
    """
    if relax not in RELAXATIONS:
        raise OndeviceError(f"sp_relax must be one of {', '.join(RELAXATIONS)}, got {relax!r}")
    return (u * (1 - v) + v * (1 - u)).mean(dim=-1)


def sp_loss(h, codes, triplets, relax: str = "expected", weighting: str = "uniform"):
    """Eq. 6 (mean instead of sum): hinge on l * (d_h(a,b) - d_h(b,c)), l = +1 if cos(a,b) >= cos(b,c) else -1.

    h: (n, dim) continuous vectors; codes: (n, bits) relaxed codes (see `relaxed_hamming`); triplets: (t, 3) long
    indices (a, b, c), b being the pivot. Zero when every triplet's Hamming order already agrees with its cosine order.
    """
    torch = require("torch", "train")
    hn = torch.nn.functional.normalize(h, dim=-1)
    a, b, c = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    cos_ab = (hn[a] * hn[b]).sum(-1)
    cos_bc = (hn[b] * hn[c]).sum(-1)
    sign = torch.where(cos_ab >= cos_bc, 1.0, -1.0).to(codes.dtype)
    gap = relaxed_hamming(codes[a], codes[b], relax) - relaxed_hamming(codes[b], codes[c], relax)
    hinge = torch.relu(sign * gap)
    if weighting == "gap":  # a triplet whose two cosines nearly tie has a coin-flip label: weight by how clear it is
        w = (cos_ab - cos_bc).abs().detach()
        return (w * hinge).sum() / w.sum().clamp_min(1e-12)
    return hinge.mean()


def sample_triplets(h, count: int, sampling: str, gen):
    """(count, 3) indices (a, b, c) into the batch h, b the pivot: uniform, or a = b's nearest neighbour by cosine."""
    torch = require("torch", "train")
    n = h.shape[0]
    trip = torch.randint(0, n, (count, 3), generator=gen)
    if sampling == "neighbor":
        hn = torch.nn.functional.normalize(h, dim=-1)
        sims = hn @ hn.T
        sims.fill_diagonal_(-2.0)
        trip[:, 0] = sims.argmax(dim=1)[trip[:, 1]]
    return trip


ORDER_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # neighbour ranks paired with each held-out anchor
ORDER_ANCHORS = 2000
HOLDOUT_MAX = 20_000  # held-out vectors at most, whatever the fraction: the pairs' cosine ranking is anchors x held-out


def order_pairs(h: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, cos) pairs of rows of h for holdout_order: each anchor with its neighbours at ORDER_RANKS and 2 random rows.

    Pairs from near neighbours to strangers, like the range of similar and unrelated pairs a similarity benchmark
    scores; random pairs alone would be nearly all strangers.
    """
    rng = np.random.default_rng([seed, 11])
    hn = np.asarray(h, np.float32)
    hn = hn / np.maximum(np.linalg.norm(hn, axis=1, keepdims=True), 1e-12)
    anchors = rng.permutation(len(hn))[: min(ORDER_ANCHORS, len(hn))]
    sims = hn[anchors] @ hn.T
    sims[np.arange(len(anchors)), anchors] = -np.inf  # never pair a row with itself
    order = np.argsort(-sims, axis=1)
    ranks = [r - 1 for r in ORDER_RANKS if r < len(hn)]
    partners = np.concatenate([order[:, ranks], rng.integers(0, len(hn), (len(anchors), 2))], axis=1)
    a = np.repeat(anchors, partners.shape[1])
    b = partners.reshape(-1)
    keep = a != b
    a, b = a[keep], b[keep]
    return a, b, np.einsum("ij,ij->i", hn[a], hn[b])


def holdout_order(bits01: np.ndarray, pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """Spearman between the pairs' cosines and their codes' Hamming similarity (bits01: (n, bits) 0/1 rows)."""
    a, b, cos = pairs
    return pairs_spearman(bits01[a], bits01[b], cos)  # the cosines are the held-out pairs' gold


def _build(dim: int, bits: int):
    torch = require("torch", "train")

    class BinaryAE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(dim, bits)
            self.decoder = torch.nn.Linear(bits, dim)

    return BinaryAE()


def _decoder_in(b, mode: str):
    return 2 * b - 1 if mode == "pm1" else b


def train_autoencoder(x: np.ndarray, bits: int, seed: int, cfg: AEConfig, sp: bool,
                      checkpoint_dir: str | Path | None = None, resume: bool = False, progress: bool = True,
                      train_sha256: str = "", judge_pairs: JudgePairs | None = None) -> AEResult:
    """Train the (SP-regularized) binary autoencoder on float32 `x` (n, dim); checkpoint each epoch if asked.

    `judge_pairs` (labelled train pairs) is what select "pairs" judges the start and the epochs by."""
    torch = require("torch", "train")
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    cfg.validate()
    if x.shape[0] < 2:
        raise OndeviceError("the autoencoder needs at least 2 training vectors")
    if (cfg.select == "pairs") != (judge_pairs is not None):
        raise OndeviceError("select 'pairs' needs labelled judge pairs (e.g. `ondevice binarize --judge-task stsb`), "
                            "and judge pairs need select 'pairs'")
    if judge_pairs is not None and judge_pairs.a.shape[1] != x.shape[1]:
        raise OndeviceError(f"judge pairs are {judge_pairs.a.shape[1]}-d but the training vectors are {x.shape[1]}-d: "
                            "encode them with the same model")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    held = cfg.select == "holdout" or cfg.init == "auto"
    if held:  # a fixed part of the vectors never trains: it judges the start and the epochs
        n_val = min(max(2, round(x.shape[0] * cfg.holdout)), HOLDOUT_MAX)
        if x.shape[0] - n_val < 2:
            raise OndeviceError(f"holdout {cfg.holdout} leaves fewer than 2 training vectors; give more vectors")
        perm0 = np.random.default_rng([seed, 13]).permutation(x.shape[0])
        xval = np.asarray(x[np.sort(perm0[:n_val])], dtype=np.float32)
        x = np.asarray(x[np.sort(perm0[n_val:])])
    n, dim = x.shape
    if cfg.input == "whiten":  # T (dim, k): the encoder sees k whitened principal components
        mean, T = whitening(x, cfg.whiten_variance)
        scale = 1.0
    else:
        mean, T = column_mean(x), None
        var = 0.0
        for s in range(0, n, 32768):
            var += float(((np.asarray(x[s : s + 32768], dtype=np.float64) - mean) ** 2).sum())
        scale = math.sqrt(var / (n * dim)) or 1.0  # a constant input has no scale to remove

    def to_input(h: np.ndarray) -> np.ndarray:  # raw vectors -> what the encoder reads, float32
        z = np.asarray(h, dtype=np.float64) - mean
        return (z @ T if T is not None else z / scale).astype(np.float32)

    xs = torch.from_numpy(np.concatenate([to_input(x[s : s + 32768]) for s in range(0, n, 32768)]))
    in_dim = xs.shape[1]
    # Eq. 6's cosines and the held-out pairs are taken in the geometry the codes should keep: raw or whitened
    h_sim = xs if T is not None else torch.from_numpy(np.array(x, dtype=np.float32))

    if held:  # transformed once, like the training input; each judgement is then one matrix product
        judged = to_input(xval)
        pairs = order_pairs(judged if T is not None else xval, seed)
        xval = judged

    def order_of(w: np.ndarray, k: np.ndarray) -> float:  # held-out order kept by encoder weights (bits, dim), bias
        return holdout_order(xval @ w.T + k > 0, pairs)

    if judge_pairs is not None:
        judge_a, judge_b = to_input(judge_pairs.a), to_input(judge_pairs.b)

    def judge_of(w: np.ndarray, k: np.ndarray) -> float:  # the labelled pairs' Spearman of -Hamming vs gold
        return pairs_spearman(judge_a @ w.T + k > 0, judge_b @ w.T + k > 0, judge_pairs.gold)

    torch.manual_seed(seed)
    model = _build(in_dim, bits)
    starts: dict[str, float] = {}
    if cfg.init in ("random", "orthogonal", "pca", "auto"):
        # start at the random-projection (or PCA) codes, strong baselines; training only has to improve them
        w = random_projection(in_dim, bits, seed)
        if cfg.init == "orthogonal":
            w = orthogonal_rows(w)
        if cfg.init in ("pca", "auto"):
            # the principal axes, scaled to the random rows' expected norm so the sigmoid starts equally steep
            # (whitened input: the axes are its coordinates, in order of the raw variance they carried)
            k_ax = min(bits, in_dim)
            axes = np.eye(in_dim, dtype=np.float32)[:k_ax] if T is not None else pca_components(x, k_ax)[1].T
            w_pca = w.copy()
            w_pca[:k_ax] = axes * math.sqrt(in_dim / (3.0 * bits))
            if cfg.init == "auto":
                zero = np.zeros(bits, np.float32)
                starts = {"random": order_of(w, zero), "pca": order_of(w_pca, zero)}
            if cfg.init == "pca" or starts["pca"] > starts["random"]:
                w = w_pca
        with torch.no_grad():
            model.encoder.weight.copy_(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)))
            model.encoder.bias.zero_()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr)

    def encoder_now() -> tuple[np.ndarray, np.ndarray]:
        return model.encoder.weight.detach().numpy().copy(), model.encoder.bias.detach().numpy().copy()

    def snapshot(epoch: int, score: float, w: np.ndarray, k: np.ndarray) -> dict[str, Any]:
        # the decoder too: an SP fine-tune (sp_start "ae") continues from the whole picked autoencoder
        return {"epoch": epoch, "order": score, "weight": w, "bias": k,
                "dec_weight": model.decoder.weight.detach().numpy().copy(),
                "dec_bias": model.decoder.bias.detach().numpy().copy()}

    judge = {"holdout": order_of, "pairs": judge_of}.get(cfg.select)
    judged_key = "pairs_spearman" if cfg.select == "pairs" else "holdout_order"
    best: dict[str, Any] = {}
    start_judged = None
    if judge is not None:
        w0, k0 = encoder_now()
        start_judged = judge(w0, k0)
        best = snapshot(0, start_judged, w0, k0)

    # sp_start "ae": epochs [0, epochs) train ae, then [epochs, total) fine-tune its pick with the SP term
    phased = sp and cfg.sp_start == "ae"
    sp_from = cfg.optim.epochs if phased else 0
    total = cfg.optim.epochs + ((cfg.sp_epochs or cfg.optim.epochs) if phased else 0)
    # everything that shapes the trajectory except the (last phase's) epoch count, so a finished run can be extended
    # with --resume; a phased run's ae epochs fix where the fine-tune starts
    identity = {"bits": bits, "dim": dim, "in_dim": in_dim, "seed": seed, "sp": sp, "train_sha256": train_sha256,
                "config": {k: v for k, v in cfg.to_dict().items() if k not in ("epochs", "threads", "sp_start", "sp_epochs")}}
    if phased:
        identity["sp_start"] = {"start": "ae", "ae_epochs": cfg.optim.epochs}
    if judge_pairs is not None:
        identity["judge_pairs_sha256"] = judge_pairs.sha256
    ckpt = artifact_file(checkpoint_dir, layouts.AE_CHECKPOINT, "binarizer") if checkpoint_dir else None
    start_epoch, log = 0, []
    if ckpt is not None:
        check_start(ckpt.parent, resume, ckpt.exists(), layouts.AE_CHECKPOINT, "an autoencoder checkpoint")
        if resume:
            start_epoch, log, saved_best = _load_checkpoint(ckpt, model, opt, identity)
            best = saved_best or best
    elif resume:
        raise OndeviceError(f"nothing to resume in {checkpoint_dir} (no {layouts.AE_CHECKPOINT}); run without --resume")

    began = time.monotonic()

    def train_epoch(pos: Position) -> dict:  # one epoch from its start: a checkpoint is taken at epoch ends only
        nonlocal opt, best
        epoch = pos.epoch
        use_sp = sp and epoch >= sp_from
        if phased and epoch == sp_from:  # the fine-tune starts from ae's pick with fresh Adam moments
            if best:
                with torch.no_grad():
                    for param, key in ((model.encoder.weight, "weight"), (model.encoder.bias, "bias"),
                                       (model.decoder.weight, "dec_weight"), (model.decoder.bias, "dec_bias")):
                        param.copy_(torch.from_numpy(best[key]))
            opt = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr)
        # per-epoch streams: a resumed run replays the same batches; the fine-tune replays the first epochs' streams,
        # so a fine-tune of the start is the joint training (sp_start "start") of as many epochs
        rng = np.random.default_rng([seed, epoch - sp_from if use_sp else epoch])
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        perm = torch.from_numpy(rng.permutation(n))
        size = cfg.optim.batch_size
        batches = [perm[i : i + size] for i in range(0, n, size)]
        if len(batches) > 1 and len(batches[-1]) < 2:
            batches.pop()  # a 1-row batch has no triplets and adds only noise
        sums = {"rec": 0.0, "sp": 0.0, "ones": 0.0}
        model.train()
        bar = tqdm(batches, desc=f"{'ae-sp' if use_sp else 'ae'} {bits} bits, epoch {epoch + 1}/{total}",
                   unit="batch", disable=not progress, leave=False)
        for i, idx in enumerate(bar):
            xb = xs[idx]
            p, b = straight_through(model.encoder(xb))
            rec = torch.nn.functional.mse_loss(model.decoder(_decoder_in(b, cfg.decoder_input)), xb)
            loss = rec
            if use_sp and cfg.sp_lambda > 0:
                hb = h_sim[idx]
                trip = sample_triplets(hb, cfg.sp_triplets, cfg.sp_sampling, gen)
                spl = sp_loss(hb, p if cfg.sp_relax == "expected" else b, trip, cfg.sp_relax,
                              "gap" if cfg.sp_sampling == "gap" else "uniform")
                loss = rec + cfg.sp_lambda * spl
                sums["sp"] += spl.item()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sums["rec"] += rec.item()
            sums["ones"] += float(b.detach().mean())
            if i % 50 == 0:
                bar.set_postfix(rec=f"{sums['rec'] / (i + 1):.4f}", sp=f"{sums['sp'] / (i + 1):.4f}")
        bar.close()
        check_weights(model, f"in epoch {epoch + 1}", "lower --lr")
        entry = {"epoch": epoch + 1, "rec_loss": sums["rec"] / len(batches), "sp_loss": sums["sp"] / len(batches),
                 "ones_fraction": sums["ones"] / len(batches), "seconds": round(time.monotonic() - began, 2)}
        if phased:
            entry["phase"] = "sp" if use_sp else "ae"
        if judge is not None:
            w_e, k_e = encoder_now()
            entry[judged_key] = judge(w_e, k_e)
            if entry[judged_key] > best["order"]:
                best = snapshot(epoch + 1, entry[judged_key], w_e, k_e)
        return entry

    def save(pos: Position) -> None:
        _save_checkpoint(ckpt, model, opt, identity, pos.epoch, log, best)

    run_epochs(Position(start_epoch, 0), total, train_epoch, save if ckpt is not None else None, log, steps_resume=False)
    if best:  # the held-out judge's pick replaces the last epoch's encoder (the decoder stays the last one)
        with torch.no_grad():
            model.encoder.weight.copy_(torch.from_numpy(best["weight"]))
            model.encoder.bias.copy_(torch.from_numpy(best["bias"]))

    W = model.encoder.weight.detach().double().numpy()  # (bits, dim)
    k = model.encoder.bias.detach().double().numpy()
    # sigmoid(W (h - mean) T + k) > 0.5  <=>  h @ (T W^T) + (k - mean @ T W^T) > 0   (T = 1 / scale if standardized)
    A = T @ W.T if T is not None else W.T / scale
    c = k - mean @ A
    extras = {
        "decoder_weight": model.decoder.weight.detach().numpy().astype(np.float32),
        "decoder_bias": model.decoder.bias.detach().numpy().astype(np.float32),
        "input_mean": mean.astype(np.float32),
        "input_scale": np.asarray([scale], dtype=np.float32),
    }
    if T is not None:
        extras["input_whitening"] = T.astype(np.float32)
    metrics = {"log": log, "final_rec_loss": log[-1]["rec_loss"] if log else None}
    if starts:
        metrics["init_holdout_order"] = starts
        metrics["init_chosen"] = "pca" if starts["pca"] > starts["random"] else "random"
    if start_judged is not None:  # the start's score is epoch 0 of the judge's choice
        metrics[f"start_{judged_key}"] = start_judged
    if best:
        metrics["selected_epoch"] = best["epoch"]
        metrics[f"selected_{judged_key}"] = best["order"]
    if phased:
        metrics["sp_start"] = "ae"
        metrics["sp_from_epoch"] = sp_from + 1  # the first fine-tune epoch; a pick at or before sp_from is ae's codes
        if judge is not None and len(log) >= sp_from:  # ae's own pick: the best of the start and the ae epochs
            ae_scores = [start_judged] + [e[judged_key] for e in log[:sp_from]]
            metrics["ae_selected_epoch"] = int(np.argmax(ae_scores))  # first maximum, as the strict > above
            metrics[f"ae_selected_{judged_key}"] = max(ae_scores)
    if judge_pairs is not None:
        metrics["judge_pairs"] = judge_pairs.describe()
    return AEResult(A.astype(np.float32), c.astype(np.float32), extras, metrics)


def _save_checkpoint(path: Path, model, opt, identity: dict, epoch: int, log: list, best: dict) -> None:
    """Model + Adam state + position (+ the held-out pick so far) in one checkpoint file."""
    torch = require("torch", "train")
    extra = {f"best.{key}": torch.from_numpy(best[key]) for key in ("weight", "bias", "dec_weight", "dec_bias")
             if best and key in best}  # a resumed checkpoint from before the decoder was kept has only the encoder
    meta = {"identity": json.dumps(identity, sort_keys=True), "epoch": str(epoch), "log": json.dumps(log),
            "best": json.dumps({"epoch": best["epoch"], "order": best["order"]} if best else {})}
    checkpoints.save_file(path, model, opt, extra, meta)


def _load_checkpoint(path: Path, model, opt, identity: dict) -> tuple[int, list, dict]:
    meta, tensors = checkpoints.read_file(path)
    try:
        saved = json.loads(meta["identity"])
    except (KeyError, ValueError):  # a foreign safetensors file, or one without our metadata
        raise OndeviceError(f"cannot read checkpoint {path} (KeyError); delete it and start again") from None
    if saved != json.loads(json.dumps(identity, sort_keys=True)):
        diff = sorted(k for k in identity if saved.get(k) != json.loads(json.dumps(identity[k])))
        raise OndeviceError(f"--resume with different data or settings ({', '.join(diff)}); use the original ones or a new --out")
    checkpoints.load_file(meta, tensors, model, opt)
    best = json.loads(meta.get("best", "{}"))
    if best:
        for key in ("weight", "bias", "dec_weight", "dec_bias"):
            if f"best.{key}" in tensors:  # checkpoints from before the decoder was kept have only the encoder
                best[key] = tensors[f"best.{key}"].numpy()
    return int(meta["epoch"]), json.loads(meta["log"]), best
