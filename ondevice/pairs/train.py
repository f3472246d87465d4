"""DSE students: the SRA-distilled BiLSTM as a shared encoder + the pair head, trained end to end on teacher
logits (of training and augmentation pairs) and gold labels (DSE, Barkan et al., 2020, Eq. 2), alpha picked on dev.

A run folder holds `student/` (the fine-tuned encoder, a normal student dir that `ondevice export` takes),
`pair_head.safetensors` + `pair_head.json` (the dev-best epoch), `dse_config.json`, `train_log.jsonl` and
`checkpoint/` (latest epoch: model, optimizer, position; `--resume` continues from it).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.configs import Composed, Compute, Optimization, composed, first_problem
from ondevice.corpus import read_corpus
from ondevice.devices import on_device, resolve_device
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import PairData, load_pairs, task_spec
from ondevice.io import artifact_file, check_out_kind, read_json, write_json, write_record
from ondevice.pairs.augment import AUGMENT_KEYS, AugmentConfig, extra_texts, transfer_set
from ondevice.pairs.config import PairSource
from ondevice.pairs.logits import teacher_logits
from ondevice.pairs.metrics import dev_metrics, evaluate_scores, headline
from ondevice.pairs.model import (
    PairHeadConfig,
    build_head,
    build_pair_model,
    dse_loss,
    load_head_weights,
    save_head,
)
from ondevice.pairs.views import open_teacher, parse_teachers, view_checks
from ondevice.student import Student
from ondevice.tokenizer import pad_ids
from ondevice.trainloop import (
    Position,
    check_resume,
    optimizer_step,
    run_folder_epochs,
    same_settings,
    start_or_resume,
)

ALPHAS = (0.0, 0.5, 1.0)


@composed
class DSEConfig(Composed):
    """Every setting of a DSE student run, in pieces; saved (flat) as dse_config.json."""

    REQUIRED = ("task", "data", "student")

    pairs: PairSource = field(default_factory=PairSource)
    student: str  # SRA-distilled student dir (`ondevice distill`)
    teacher: str = ""  # teacher view(s), comma-separated (ondevice.pairs.views; several: their mean); only alpha 0 trains without
    alpha: float = 0.5
    head_hidden: int = 256  # SRA paper (Wu et al., 2020): task layer 256
    optim: Optimization = field(default_factory=lambda: Optimization(epochs=4, batch_size=32, lr=5e-4))
    # lr: the SRA paper picks from {2, 3, 5, 10} x 1e-4
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    freeze_encoder: bool = False
    seed: int = 0
    compute: Compute = field(default_factory=Compute)  # the device trains only: the saved run loads on any device

    def validate(self) -> None:
        """Reject impossible values with a one-line ConfigError naming the field."""
        first_problem([*self.pairs.checks(), (0.0 <= self.alpha <= 1.0, "{alpha} must be in [0, 1]"),
                       (self.head_hidden >= 1, "{head_hidden} must be >= 1"), *self.compute.checks(),
                       *self.optim.checks(), *self.augment.checks(),
                       (self.alpha == 0 or bool(self.teacher),
                        f"alpha {self.alpha:g} distills teacher logits; pass {{teacher}} DIR (only alpha 0 trains without one)"),
                       *(view_checks(parse_teachers(self.teacher), "{teacher}") if self.teacher else [])])


_RESUME_KEYS = ("task", "alpha", "head_hidden", "epochs", "batch_size", "lr", *AUGMENT_KEYS, "freeze_encoder",
                "max_train_pairs", "seed", "split_seed")


class PairStudent:
    """A trained DSE student: encoder + head; `logits(a, b)` in torch (training-side reference)."""

    def __init__(self, student: Student, head_cfg: PairHeadConfig, head):
        self.student = student
        self.head_cfg = head_cfg
        self.head = head.eval()

    @classmethod
    def load(cls, directory: str | Path) -> PairStudent:
        """Load a run folder written by `train_dse`."""
        torch = require("torch", "train")
        directory = Path(directory)
        for name in layouts.RUN_FILES:
            artifact_file(directory, name, "pair-model run")
        student = Student.load(directory / layouts.RUN_STUDENT)
        cfg, weights = load_head_weights(directory)
        head = build_head(cfg)
        head.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        return cls(student, cfg, head)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Sentence vectors of the fine-tuned encoder."""
        return self.student.encode(list(texts))

    def logits_from_vectors(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Head logits (n, outputs) of precomputed vectors."""
        torch = require("torch", "train")
        with torch.inference_mode():
            return self.head(torch.from_numpy(np.asarray(u, np.float32)), torch.from_numpy(np.asarray(v, np.float32))).numpy()

    def logits(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Head logits of the pairs (a[i], b[i])."""
        uniq = list(dict.fromkeys([*a, *b]))
        pos = {s: i for i, s in enumerate(uniq)}
        vec = self.vectors(uniq)
        return self.logits_from_vectors(vec[[pos[s] for s in a]], vec[[pos[s] for s in b]])

    def evaluate(self, data: PairData) -> dict:
        """Task metrics on `data` with the dev-tuned threshold."""
        return evaluate_scores(task_spec(data.task), self.logits(data.a, data.b), data.gold, self.head_cfg.threshold)


def _batches(n: int, batch_size: int, seed: int) -> list[np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    return [perm[i : i + batch_size] for i in range(0, n, batch_size)]


def _batch_logits(model, ids: list[np.ndarray], pa: np.ndarray, pb: np.ndarray, rows: np.ndarray, device):
    """Pair-model logits of training pairs `rows`, each distinct sentence of the batch encoded once (DSE and DvBERT)."""
    uniq, inv = np.unique(np.concatenate([pa[rows], pb[rows]]), return_inverse=True)
    x, lens = pad_ids([ids[i] for i in uniq])
    return model(on_device(x, device), on_device(lens, device), on_device(inv[: len(rows)], device), on_device(inv[len(rows):], device))


def _dev_logits(model, ids: list[np.ndarray], pa: np.ndarray, pb: np.ndarray, batch: int = 256) -> np.ndarray:
    torch = require("torch", "train")
    device = next(model.parameters()).device
    model.eval()
    with torch.inference_mode():
        vec = []
        for s in range(0, len(ids), batch):
            x, lens = pad_ids(ids[s : s + batch])
            vec.append(model.encoder(on_device(x, device), on_device(lens, device)))
        v = torch.cat(vec)
        return model.head(v[on_device(pa, device)], v[on_device(pb, device)]).cpu().numpy()


def _index(texts: list[str], a: Sequence[str], b: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    pos: dict[str, int] = {t: i for i, t in enumerate(texts)}
    for s in (*a, *b):
        pos.setdefault(s, len(pos))
    return list(pos), np.fromiter((pos[s] for s in a), np.int64, len(a)), np.fromiter((pos[s] for s in b), np.int64, len(b))


def train_dse(config: DSEConfig, out_dir: str | Path, resume: bool = False, progress: bool = True) -> PairStudent:
    """Train (or resume) one DSE student with `config.alpha`; keeps the dev-best epoch."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    config.validate()
    torch = require("torch", "train")
    out = Path(out_dir)
    extra = extra_texts(config) if config.alpha > 0 else []  # before the resume check: it fills in a checksum
    check_resume(out, config, layouts.DSE_CONFIG, "DSE config", _RESUME_KEYS, resume, kind="dse-run")
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    spec = task_spec(config.task)
    # the teacher scores the augmentation pairs: on the run's device too (on a GPU run, CPU scoring is the bottleneck)
    teacher = open_teacher(config.teacher, spec.name, config.data, config.split_seed, device, progress) \
        if config.teacher else None
    student = Student.load(config.student)
    train = load_pairs(config.task, "train", config.data, config.split_seed)
    dev = load_pairs(config.task, "dev", config.data, config.split_seed)
    if config.max_train_pairs:
        train = train.subset(np.random.default_rng(config.seed).permutation(len(train))[: config.max_train_pairs])

    # teacher logits of training + augmentation pairs (cached by content; the SRA student finds neighbours).
    # At alpha 0 neither is used: augmentation pairs have no label, and the loss ignores the teacher.
    no_logits = np.zeros((0, spec.num_outputs), np.float32)
    use_teacher = config.alpha > 0
    t_train = teacher_logits(teacher, train.a, train.b, progress=progress) if use_teacher else \
        np.zeros((len(train), spec.num_outputs), np.float32)
    aug = transfer_set(train, student.encode, config, extra) if use_teacher else None
    use_aug = aug is not None and len(aug) > 0
    t_aug = teacher_logits(teacher, aug.a, aug.b, progress=progress) if use_aug else no_logits

    a = train.a + (aug.a if use_aug else [])
    b = train.b + (aug.b if use_aug else [])
    gold = np.concatenate([spec.normalize(train.gold).astype(np.float32),
                           np.full(len(aug) if use_aug else 0, np.nan, np.float32)])
    targets = np.concatenate([t_train, t_aug]).astype(np.float32)
    texts, pa, pb = _index([], a, b)
    ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in texts]
    dev_texts, da, db = _index([], dev.a, dev.b)
    dev_ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in dev_texts]

    head_cfg = PairHeadConfig(dim=student.config.output_dim, hidden=config.head_hidden, outputs=spec.num_outputs,
                              task=spec.name, kind=spec.kind, labels=list(spec.labels), gold_low=spec.low,
                              gold_high=spec.high)
    torch.manual_seed(config.seed)
    model = build_pair_model(student.model, head_cfg)
    model.encoder.requires_grad_(not config.freeze_encoder)
    frozen = None
    if config.freeze_encoder:  # encoder frozen: its vectors are computed once (on the CPU, before the move)
        with torch.inference_mode():
            frozen = torch.from_numpy(student.encode(texts)).to(device)
    model.to(device)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    state = start_or_resume(out, model, opt, config, layouts.DSE_CONFIG, resume,
                            {"epoch": 0, "step": 0, "log": [], "best": None})
    if not resume:
        write_json(out / layouts.RUN_DATA, {"train_pairs": len(train), "augment_pairs": len(aug) if use_aug else 0,
                                        "augment_pairs_made": len(aug) if aug is not None else 0, "dev_pairs": len(dev),
                                        "teacher": teacher.identity if teacher is not None else None})

    def publish(metrics: dict, threshold: float | None) -> None:
        head_cfg.threshold = threshold
        save_head(out, model.head, head_cfg)
        student.save(out / layouts.RUN_STUDENT)
        write_record(out / layouts.RUN_DEV, metrics)

    gold_t, target_t = torch.from_numpy(np.nan_to_num(gold)).to(device), torch.from_numpy(targets).to(device)
    labeled_t = torch.from_numpy(~np.isnan(gold)).to(device)

    def train_epoch(pos: Position) -> dict:
        epoch = pos.epoch
        batches = _batches(len(a), config.batch_size, config.seed * 1000003 + epoch)
        model.train()
        losses: list[float] = []
        bar = tqdm(batches[pos.step:], desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch", disable=not progress)
        for rows in bar:
            if frozen is not None:  # encoder frozen: its vectors were computed once
                logits = model.head(frozen[on_device(pa[rows], device)], frozen[on_device(pb[rows], device)])
            else:
                logits = _batch_logits(model, ids, pa, pb, rows, device)
            r = on_device(rows, device)
            loss = dse_loss(logits, target_t[r], gold_t[r], labeled_t[r], spec.kind, config.alpha)
            optimizer_step(loss, opt, pos, losses, bar, "lower --lr")
        bar.close()
        dl = _dev_logits(model, dev_ids, da, db)
        metrics, threshold = dev_metrics(spec, dl, dev.gold)
        entry = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None, "dev": metrics,
                 "time": time.time()}
        return end_epoch(spec, entry, metrics, threshold, state, publish, progress)

    run_folder_epochs(out, model, opt, state, config.epochs, train_epoch)
    return PairStudent.load(out)


def end_epoch(spec, entry: dict, metrics: dict, threshold, state: dict, publish: Callable, progress: bool) -> dict:
    """An epoch's end in a pair run: its line printed, the run published when its dev score is the best so far."""
    epoch = entry["epoch"]
    if progress:
        print(f"epoch {epoch}: train loss {entry['train_loss']:.4f}, dev {spec.metric} {metrics[spec.metric]}", flush=True)
    if state["best"] is None or headline(spec, metrics) > state["best"]["score"]:
        state["best"] = {"epoch": epoch, "score": headline(spec, metrics)}
        publish({**metrics, "epoch": epoch}, threshold)
    return entry


def chosen_run(path: str | Path) -> Path:
    """The student folder of a DSE run: `path` itself, or for a `train_dse_alphas` folder its dev-best alpha
    sub-folder (selection.json's `chosen_dir`, accepted only as an `alpha-<number>` folder inside `path`)."""
    p = Path(path)
    artifact_file(p, "selection.json", "pair-model run")
    if not (p / "selection.json").is_file():
        return p
    selection = read_json(p / "selection.json", "alpha selection")
    chosen = selection.get("chosen_dir") if isinstance(selection, dict) else None
    if not isinstance(chosen, str) or not re.fullmatch(r"alpha-[0-9][0-9.e+-]*", chosen) or (p / chosen).is_symlink() \
            or not (p / chosen).is_dir():
        raise OndeviceError(f"{p / 'selection.json'} names {chosen!r} as its chosen student, which is not an alpha-<a> "
                            f"folder inside {p}; pass that folder itself as --run, or train the run again")
    return p / chosen


def train_dse_alphas(config: DSEConfig, out_dir: str | Path, alphas: Sequence[float] = ALPHAS, resume: bool = False,
                     progress: bool = True) -> dict:
    """One student per alpha in `out_dir/alpha-<a>`; the dev-best alpha is recorded in selection.json.

    Every alpha's settings, the --augment-text file and --resume are checked before the first alpha trains: a
    problem of the last alpha must not surface after the first has trained for hours."""
    out = check_out_kind(out_dir, "dse-run")  # the alphas' folders go inside: never inside another artifact
    plan = []
    for alpha in alphas:
        sub = out / f"alpha-{alpha:g}"
        cfg = dataclasses.replace(config, alpha=float(alpha))
        done = (sub / layouts.TRAIN_LOG).is_file() and len((sub / layouts.TRAIN_LOG).read_text().splitlines()) >= cfg.epochs
        if not done:
            cfg.validate()
        plan.append((alpha, sub, cfg, done))
    if config.augment_text:  # readable text with sentences, even when no alpha scores augmentation pairs with it
        read_corpus(config.augment_text, flag="--augment-text")
    if resume and not any(done or (sub / layouts.CHECKPOINT).exists() for _, sub, _, done in plan):
        raise OndeviceError(f"nothing to resume in {out} (no {layouts.CHECKPOINT}/ in its alpha-<a> folders); "
                            "run without --resume")
    rows = {}
    for alpha, sub, cfg, done in plan:
        if done:  # reused as is: only if it was trained with these settings
            if cfg.alpha > 0:  # as train_dse: fills in the --augment-text checksum the saved config holds
                extra_texts(cfg)
            same_settings(sub, cfg, layouts.DSE_CONFIG, "DSE config", _RESUME_KEYS)
        else:
            train_dse(cfg, sub, resume=resume and (sub / layouts.CHECKPOINT).exists(), progress=progress)
        rows[f"{alpha:g}"] = read_json(sub / layouts.RUN_DEV, "dev metrics")
    spec = task_spec(config.task)
    best = max(rows, key=lambda k: (headline(spec, rows[k]), -abs(float(k) - 0.5)))
    selection = {"metric": spec.metric, "dev": rows, "chosen_alpha": float(best), "chosen_dir": f"alpha-{best}"}
    write_json(out / "selection.json", selection)
    return selection
