"""DvBERT students (Cheng, 2021): a siamese student taught by K cross-encoder teachers with teacher annealing.

The student is the SRA-distilled BiLSTM (as in DSE) with DvBERT's head `softmax(W [u, v, |u-v|] + b)` for binary
and class tasks (binary: one logit, sigmoid, the same model as a 2-way softmax) and, by default, the DSE head for
regression (`head="mlp"`). Each training pair gets, from every teacher view k, a prediction q_k in target space
(regression: the teacher's logit, gold units [0, 1]; binary: sigmoid; classes: softmax), and the loss is the
paper's sum over teachers, here divided by K:

    L = 1/K sum_k D(lambda * gold + (1 - lambda) * q_k, student)

with D = squared error (regression), BCE (binary) or cross-entropy (classes). lambda follows `anneal`: `linear`
rises from 0 at the first optimizer step to 1 at the last (Clark et al. 2019), `none` keeps 0 (teachers only),
`constant:X` keeps X. D is linear in the target for BCE and cross-entropy, so this equals D against the mean
teacher; for squared error the two differ by a constant, with the same gradients.

The student is DSE's, and so is its transfer set (DSE, Barkan et al., 2020, Sec. 3.2, `ondevice.pairs.augment`): unlabeled pairs
made from the training sentences, scored by every teacher view. They have no gold label, so their target stays the
teachers' (lambda = 0 for them); the same augmentation flags as a DSE run draw the same pairs.

A teacher view is a teacher folder and an input order: `DIR` scores (a, b), `DIR:ba` scores (b, a); a teacher
fine-tuned with `--swap` is already a (b, a) teacher. `bi-encoder` (or `bi-encoder:MODEL_DIR`) is a different kind
of teacher: a sentence encoder's cosine, calibrated on the training split (ondevice.pairs.biencoder). Each view's
logits are cached by `ondevice.pairs.logits`.

The linear head is saved in the DSE head format (`pair_head.safetensors`, hidden = 2 x outputs) using
x = relu(x) - relu(-x), which is exact in floating point, so `PairStudent`, `ondevice pairs eval`,
`ondevice pairs export`, the bundle runtime and the Java core's `PairHead` take a DvBERT run unchanged.
A run folder holds what a DSE run holds, with `dvbert_config.json` instead of `dse_config.json`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.configs import (
    Check,
    Composed,
    Compute,
    ConfigError,
    Optimization,
    composed,
    first_problem,
    literal,
)
from ondevice.devices import on_device, resolve_device
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.io import atomic_path, read_json, write_json, write_record
from ondevice.pairs.augment import AUGMENT_KEYS, AugmentConfig, extra_texts, transfer_set
from ondevice.pairs.config import PairSource
from ondevice.pairs.metrics import dev_metrics, evaluate_scores
from ondevice.pairs.model import PairHeadConfig, build_head
from ondevice.pairs.train import PairStudent, _batch_logits, _batches, _dev_logits, _index, end_epoch
from ondevice.pairs.views import load_views, view_checks, view_logits
from ondevice.student import Student
from ondevice.trainloop import Position, check_resume, optimizer_step, run_folder_epochs, start_or_resume

HEADS = ("auto", "linear", "mlp")


@composed
class DvBERTConfig(Composed):
    """Every setting of a DvBERT student run, in pieces; saved (flat) as dvbert_config.json."""

    REQUIRED = ("task", "data", "student")

    pairs: PairSource = field(default_factory=PairSource)
    student: str  # SRA-distilled student dir (`ondevice distill`)
    teachers: list = field(default_factory=list)  # teacher views: "DIR" (a, b) or "DIR:ba" (b, a)
    anneal: str = "linear"  # linear | none | constant:X
    head: str = "auto"  # auto (linear for binary/classes, mlp for regression) | linear | mlp
    head_hidden: int = 256  # mlp head only
    optim: Optimization = field(default_factory=lambda: Optimization(epochs=4, batch_size=32, lr=5e-4))
    # DSE's transfer set, scored by every teacher view (the same piece and defaults as ondevice.pairs.train.DSEConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    seed: int = 0
    compute: Compute = field(default_factory=Compute)  # the device trains only: the saved run loads on any device

    def validate(self) -> None:
        """Reject impossible values with a one-line ConfigError naming the field."""
        first_problem([*self.pairs.checks(), anneal_check(self.anneal), *view_checks(self.teachers, "{teachers}"),
                       (self.head in HEADS, f"{{head}} must be one of {', '.join(HEADS)}"),
                       (self.head_hidden >= 1, "{head_hidden} must be >= 1"), *self.compute.checks(),
                       *self.optim.checks(), *self.augment.checks()])

    def augments(self) -> bool:
        """Whether this run makes any augmentation pairs."""
        return self.augment.any()

    def head_type(self) -> str:
        """The head this run trains: `linear` (DvBERT) or `mlp` (DSE)."""
        if self.head != "auto":
            return self.head
        return "mlp" if task_spec(self.task).kind == "regression" else "linear"


_RESUME_KEYS = ("task", "teachers", "anneal", "head", "head_hidden", "epochs", "batch_size", "lr", *AUGMENT_KEYS,
                "max_train_pairs", "seed", "split_seed")


def parse_anneal(spec: str) -> tuple[str, float]:
    """'linear' | 'none' | 'constant:X' (0 <= X <= 1) -> (kind, value); anything else is a ConfigError."""
    if spec in ("linear", "none"):
        return spec, 0.0
    if spec.startswith("constant:"):
        try:
            x = float(spec.split(":", 1)[1])
        except ValueError:
            x = -1.0
        if 0.0 <= x <= 1.0:
            return "constant", x
    raise ConfigError(f"{{anneal}} must be linear, none or constant:X with X in [0, 1], got {literal(repr(spec))}")


def anneal_check(spec: str) -> Check:
    """The (ok, message) check of an `anneal` setting."""
    try:
        parse_anneal(spec)
    except ConfigError as exc:
        return False, exc.template
    return True, ""


def anneal_lambda(spec: str, step: int, total_steps: int) -> float:
    """Weight of the gold label at optimizer step `step` (0-based) of `total_steps`: 0 = teachers only, 1 = gold."""
    kind, value = parse_anneal(spec)
    if kind == "none":
        return 0.0
    if kind == "constant":
        return value
    return 1.0 if total_steps <= 1 else min(1.0, max(0.0, step / (total_steps - 1)))


def teacher_predictions(logits: np.ndarray, kind: str) -> np.ndarray:
    """A teacher's logits (n, outputs) in target space: regression as is, binary sigmoid, classes softmax."""
    x = np.asarray(logits, np.float64)
    if kind == "regression":
        out = x
    elif kind == "binary":
        out = 1.0 / (1.0 + np.exp(-x))
    else:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out = e / e.sum(axis=1, keepdims=True)
    return out.astype(np.float32)


def gold_targets(gold: np.ndarray, kind: str, outputs: int) -> np.ndarray:
    """Gold in target space (n, outputs): normalized score, 0/1, or one-hot."""
    g = np.asarray(gold)
    if kind == "classes":
        return np.eye(outputs, dtype=np.float32)[g.astype(np.int64)]
    return g.astype(np.float32).reshape(-1, 1)


def annealed_targets(teacher_probs, gold, lam):
    """lambda * gold + (1 - lambda) * q_k for every teacher view: (K, n, outputs) from (K, n, outputs), (n, outputs);
    `lam` is one weight or one per pair, shaped (n, 1)."""
    return lam * gold[None] + (1.0 - lam) * teacher_probs


def dvbert_loss(logits, teacher_probs, gold, lam: float, kind: str, labeled=None):
    """Mean over the K teacher views of D(annealed target_k, student logits), each averaged over the batch.
    `labeled` (bool per pair, default all): unlabeled (augmentation) pairs keep the teachers' target, lambda 0."""
    torch = require("torch", "train")
    F = torch.nn.functional
    if labeled is not None:  # gold of unlabeled rows is a placeholder: weight 0, and no NaN may reach the sum
        lam = (lam * labeled.to(teacher_probs.dtype)).unsqueeze(-1)
        gold = torch.where(labeled.unsqueeze(-1), gold, torch.zeros_like(gold))
    targets = annealed_targets(teacher_probs, gold, lam)  # (K, B, O)
    k = targets.shape[0]
    f = logits.unsqueeze(0).expand(k, *logits.shape)
    if kind == "regression":
        per = ((f - targets) ** 2).sum(-1)
    elif kind == "binary":
        per = F.binary_cross_entropy_with_logits(f, targets, reduction="none").sum(-1)
    else:
        per = -(targets * F.log_softmax(f, dim=-1)).sum(-1)
    return per.mean()


def linear_as_mlp(weight: np.ndarray, bias: np.ndarray) -> dict[str, np.ndarray]:
    """W [u, v, |u-v|] + b written in the DSE head format W2 relu(W1 [u, v, u*v, |u-v|] + b1) + b2 (exactly)."""
    weight, bias = np.asarray(weight, np.float32), np.asarray(bias, np.float32)
    outputs, three_d = weight.shape
    d = three_d // 3
    wu, wv, wd = weight[:, :d], weight[:, d : 2 * d], weight[:, 2 * d :]
    w1 = np.concatenate([wu, wv, np.zeros_like(wu), wd], axis=1)
    eye = np.eye(outputs, dtype=np.float32)
    return {"hidden.weight": np.ascontiguousarray(np.concatenate([w1, -w1])),
            "hidden.bias": np.concatenate([bias, -bias]).astype(np.float32),
            "out.weight": np.ascontiguousarray(np.concatenate([eye, -eye], axis=1)),
            "out.bias": np.zeros(outputs, np.float32)}


def build_linear_head(dim: int, outputs: int):
    """DvBERT's head as a torch module: (u, v) -> W [u, v, |u-v|] + b."""
    torch = require("torch", "train")

    class LinearPairHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3 * dim, outputs)

        def forward(self, u, v):
            return self.linear(torch.cat([u, v, (u - v).abs()], dim=-1))

    return LinearPairHead()


def build_dvbert_model(encoder, head):
    """Siamese student: the shared encoder (ids, lengths) -> vectors, and `head` over two of them."""
    torch = require("torch", "train")

    class DvBERTModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.head = head

        def forward(self, ids, lengths, ia, ib):
            vec = self.encoder(ids, lengths)  # each distinct sentence of the batch once
            return self.head(vec[ia], vec[ib])

    return DvBERTModel()


def head_arrays(head, head_type: str, cfg: PairHeadConfig) -> dict[str, np.ndarray]:
    """The head's float32 weights in the DSE head format."""
    state = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in head.state_dict().items()}
    if head_type == "linear":
        return linear_as_mlp(state["linear.weight"], state["linear.bias"])
    return state


def save_head_arrays(directory: Path, weights: dict[str, np.ndarray], cfg: PairHeadConfig) -> None:
    """pair_head.safetensors + pair_head.json, as `ondevice.pairs.model.save_head` writes them."""
    with atomic_path(directory / layouts.PAIR_HEAD_WEIGHTS) as tmp:
        save_file(weights, str(tmp), metadata={"format": "ondevice-pair-head"})
    write_json(directory / layouts.PAIR_HEAD_CONFIG, cfg)


def load_config_views(config: DvBERTConfig, progress: bool = False) -> list[tuple[str, str, object]]:
    """(dir, order, teacher) per teacher view of the run, all checked to be teachers of `config.task`."""
    return load_views(config.teachers, config.task, config.data, config.split_seed, config.device, progress)


def _check_legacy_resume(out: Path, config: DvBERTConfig, resume: bool) -> None:
    """A run saved before DvBERT had a transfer set trained without one: resuming it with augmentation would mix."""
    saved = out / layouts.DVBERT_CONFIG
    if not resume or not saved.is_file():
        return
    raw = read_json(saved, "DvBERT config")
    if isinstance(raw, dict) and not any(k in raw for k in AUGMENT_KEYS):
        if config.augments():
            raise OndeviceError(f"{out} was trained without augmentation pairs (an earlier ondevice); resume it with "
                                "--augment-random 0 --augment-neighbors 0, or train a new --out")
        raw.update({k: getattr(config, k) for k in AUGMENT_KEYS})
        write_json(saved, raw)


def train_dvbert(config: DvBERTConfig, out_dir: str | Path, resume: bool = False, progress: bool = True,
                 on_step: Callable[[int], None] | None = None):
    """Train (or resume) one DvBERT student; keeps the dev-best epoch. `on_step(global_step)` runs after each step."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    config.validate()
    torch = require("torch", "train")
    out = Path(out_dir)
    extra = extra_texts(config)  # before the resume check: it fills in a checksum
    _check_legacy_resume(out, config, resume)
    check_resume(out, config, layouts.DVBERT_CONFIG, "DvBERT config", _RESUME_KEYS, resume, kind="dvbert-run")
    views = load_config_views(config, progress)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    spec = task_spec(config.task)
    student = Student.load(config.student)
    train = load_pairs(config.task, "train", config.data, config.split_seed)
    dev = load_pairs(config.task, "dev", config.data, config.split_seed)
    if config.max_train_pairs:
        train = train.subset(np.random.default_rng(config.seed).permutation(len(train))[: config.max_train_pairs])

    train_logits = [view_logits(t, order, train.a, train.b, progress) for _, order, t in views]
    aug = transfer_set(train, student.encode, config, extra) if config.augments() else None
    aug_logits = [view_logits(t, order, aug.a, aug.b, progress) for _, order, t in views] if aug is not None and len(aug) else []
    n_aug = len(aug) if aug_logits else 0
    logits = [np.concatenate([x, y]) for x, y in zip(train_logits, aug_logits)] if aug_logits else train_logits
    probs = np.stack([teacher_predictions(x, spec.kind) for x in logits])  # (K, n + n_aug, outputs)
    gold = np.concatenate([gold_targets(spec.normalize(train.gold), spec.kind, spec.num_outputs),
                           np.zeros((n_aug, spec.num_outputs), np.float32)])
    labeled = np.arange(len(train) + n_aug) < len(train)
    a = train.a + (aug.a if n_aug else [])
    b = train.b + (aug.b if n_aug else [])
    texts, pa, pb = _index([], a, b)
    ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in texts]
    dev_texts, da, db = _index([], dev.a, dev.b)
    dev_ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in dev_texts]

    head_type = config.head_type()
    dim, outputs = student.config.output_dim, spec.num_outputs
    head_cfg = PairHeadConfig(dim=dim, hidden=2 * outputs if head_type == "linear" else config.head_hidden,
                              outputs=outputs, task=spec.name, kind=spec.kind, labels=list(spec.labels),
                              gold_low=spec.low, gold_high=spec.high)
    torch.manual_seed(config.seed)
    head = build_linear_head(dim, outputs) if head_type == "linear" else build_head(head_cfg)
    model = build_dvbert_model(student.model, head).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    state = start_or_resume(out, model, opt, config, layouts.DVBERT_CONFIG, resume,
                            {"epoch": 0, "step": 0, "log": [], "best": None})
    if not resume:
        train_metric = [evaluate_scores(spec, x, train.gold, t.info.get("threshold"))
                        for x, (_, _, t) in zip(train_logits, views)]
        write_json(out / layouts.RUN_DATA, {
            "train_pairs": len(train), "augment_pairs": n_aug, "dev_pairs": len(dev), "head": head_type,
            "teacher": views[0][2].identity,
            "teachers": [{"dir": p, "order": o, "identity": t.identity, "dev": t.info.get("dev"), "train": m}
                         for (p, o, t), m in zip(views, train_metric)]})

    def publish(metrics: dict, threshold: float | None) -> None:
        head_cfg.threshold = threshold
        save_head_arrays(out, head_arrays(model.head, head_type, head_cfg), head_cfg)
        student.save(out / layouts.RUN_STUDENT)
        write_record(out / layouts.RUN_DEV, metrics)

    probs_t, gold_t, labeled_t = on_device(probs, device), on_device(gold, device), on_device(labeled, device)

    n = len(a)
    per_epoch = math.ceil(n / config.batch_size)
    total = per_epoch * config.epochs
    def train_epoch(pos: Position) -> dict:
        epoch = pos.epoch
        batches = _batches(n, config.batch_size, config.seed * 1000003 + epoch)
        model.train()
        losses: list[float] = []
        bar = tqdm(batches[pos.step:], desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch", disable=not progress)
        for rows in bar:
            lam = anneal_lambda(config.anneal, epoch * per_epoch + pos.step, total)
            f = _batch_logits(model, ids, pa, pb, rows, device)
            r = on_device(rows, device)
            loss = dvbert_loss(f, probs_t[:, r], gold_t[r], lam, spec.kind, labeled_t[r])
            optimizer_step(loss, opt, pos, losses, bar, "lower --lr", lam=f"{lam:.2f}")
            if on_step is not None:
                on_step(epoch * per_epoch + pos.step)
        bar.close()
        dl = _dev_logits(model, dev_ids, da, db)
        metrics, threshold = dev_metrics(spec, dl, dev.gold)
        entry = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None, "dev": metrics,
                 "lambda_end": anneal_lambda(config.anneal, (epoch + 1) * per_epoch - 1, total), "time": time.time()}
        return end_epoch(spec, entry, metrics, threshold, state, publish, progress)

    run_folder_epochs(out, model, opt, state, config.epochs, train_epoch)
    return PairStudent.load(out)


def finished(out_dir: str | Path, epochs: int) -> bool:
    """Whether a DvBERT (or DSE) run folder holds all `epochs` epochs."""
    log = Path(out_dir) / layouts.TRAIN_LOG
    return log.is_file() and len(log.read_text().splitlines()) >= epochs
