"""Cross-encoder teachers: the packaged MiniLM fine-tuned per pair task with sentence-transformers' CrossEncoder.

Outputs are raw logits (no activation): regression tasks are trained with MSE on gold mapped to [0, 1]
(identity output), binary tasks with BCE on one logit, SICK-E with cross-entropy on three. DSE distills
exactly these logits. Training runs through `CrossEncoderTrainer` (tqdm with ETA, a checkpoint every epoch,
resume, seeded); the finished model is `model/` (safetensors) beside `teacher.json`.
Checkpoints are Hugging Face Trainer folders: weights in safetensors, optimizer / scheduler / RNG state in
torch files that the Trainer reads back with `weights_only=True` (no code runs on load).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.configs import Composed, Compute, Optimization, composed, first_problem
from ondevice.devices import resolve_device
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import PairData, load_pairs, task_spec
from ondevice.io import (
    artifact_file,
    check_out_kind,
    read_json,
    sha256_file,
    write_json,
    write_record,
    write_text,
)
from ondevice.pairs.config import PairSource
from ondevice.pairs.logits import teacher_logits
from ondevice.pairs.metrics import dev_metrics, evaluate_scores
from ondevice.teacher import quiet_loading, resolve_teacher


@composed
class CrossEncoderConfig(Composed):
    """Every setting of a cross-encoder fine-tuning run, in pieces; saved (flat) in teacher.json and config.json."""

    REQUIRED = ("task", "data")

    pairs: PairSource = field(default_factory=PairSource)
    base: str = "all-MiniLM-L6-v2"
    optim: Optimization = field(default_factory=lambda: Optimization(epochs=3, batch_size=16, lr=5e-5))
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128
    seed: int = 0
    logging_steps: int = 50
    swap: bool = False  # A/B input order: fine-tune and score on (b, a) instead of (a, b) (DvBERT teacher views)
    both_orders: bool = False  # fine-tune on (a, b) and (b, a); a logit is the mean over both orders
    compute: Compute = field(default_factory=Compute)  # the saved teacher loads on any device

    def validate(self) -> None:
        """Reject impossible values with a one-line ConfigError naming the field."""
        first_problem([*self.pairs.checks(), *self.optim.checks(),
                       (0 <= self.warmup_ratio < 1, "{warmup_ratio} must be in [0, 1)"),
                       (self.max_length >= 8, "{max_length} must be >= 8"), *self.compute.checks(),
                       (not (self.swap and self.both_orders), "{swap} and {both_orders} exclude each other; pick one")])


def _st():
    return require("sentence_transformers", "pairs")


def _base_path(spec: str) -> Path:
    return resolve_teacher(spec)


def _loss(model, kind: str):
    losses = _st().cross_encoder.losses
    torch = require("torch", "train")
    if kind == "regression":
        return losses.MSELoss(model, activation_fn=torch.nn.Identity())
    if kind == "binary":
        return losses.BinaryCrossEntropyLoss(model)
    return losses.CrossEntropyLoss(model)


class CrossEncoderTeacher:
    """A fine-tuned cross-encoder; `logits(a, b)` gives float32 (n, num_outputs).

    The network is loaded on first use: runs whose logits are all in the cache (`ondevice.pairs.logits`) never
    pay for it, and a teacher folder copied without its weights still serves every cached pair list.
    """

    def __init__(self, directory: Path, info: dict, device: str = "cpu"):
        self.directory = directory
        self.info = info
        self.device = device
        self.spec = task_spec(info["config"]["task"])
        self._model = None

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu") -> CrossEncoderTeacher:
        """Open a teacher folder written by `fine_tune` (the network itself loads on first use, on `device`)."""
        directory = Path(directory)
        model = artifact_file(directory, layouts.TEACHER_MODEL, "cross-encoder teacher")
        # every file transformers may open in model/ too: none may be a link out of the folder
        for name in (layouts.TEACHER_INFO, layouts.TEACHER_CONFIG, *sorted(p.relative_to(directory).as_posix()
                                                                          for p in model.rglob("*"))):
            artifact_file(directory, name, "cross-encoder teacher")
        if not (directory / layouts.TEACHER_INFO).is_file() or not (directory / layouts.TEACHER_MODEL).is_dir():
            raise OndeviceError(f"{directory} is not a cross-encoder teacher (needs {layouts.TEACHER_INFO} and "
                                f"{layouts.TEACHER_MODEL}/); {layouts.what_it_is(directory, 'cross-encoder')}; run "
                                "`ondevice pairs teacher` first")
        return cls(directory, read_json(directory / layouts.TEACHER_INFO, "teacher info"), resolve_device(device))

    @property
    def model(self):
        """The sentence-transformers CrossEncoder (loaded once, when first needed)."""
        if self._model is None:
            torch = require("torch", "train")
            weights = self.directory / layouts.TEACHER_MODEL / "model.safetensors"
            if not weights.is_file():
                raise OndeviceError(f"{weights} is missing: this teacher folder holds no weights, so it can only serve "
                                    "pairs whose logits are already cached; copy the whole folder written by `ondevice pairs teacher`")
            try:
                with quiet_loading():
                    self._model = _st().CrossEncoder(str(self.directory / layouts.TEACHER_MODEL), local_files_only=True,
                                                     device=self.device, activation_fn=torch.nn.Identity())
            except (OSError, ValueError) as exc:
                raise OndeviceError(f"cannot load {self.directory / layouts.TEACHER_MODEL}: {str(exc).splitlines()[0]}") from None
            if not all(bool(torch.isfinite(t).all()) for t in self._model.parameters()):
                self._model = None  # never scores (or passes `info --verify`) with weights that give NaN
                raise OndeviceError(f"{weights} holds NaN or inf weights (a diverged run); train the teacher again "
                                    "with a lower --lr")
        return self._model

    @property
    def identity(self) -> dict:
        """What makes two teachers' logits interchangeable: task, output width and the weights' hash."""
        out = {"kind": "cross-encoder", "task": self.spec.name, "num_outputs": self.spec.num_outputs,
               "weights_sha256": self.info["weights_sha256"], "max_length": self.info["config"]["max_length"]}
        if self.swapped:  # only swapped teachers carry the key, so caches of (a, b) teachers keep their keys
            out["input_order"] = "ba"
        if self.both_orders:
            out["input_order"] = "mean(ab,ba)"
        return out

    @property
    def swapped(self) -> bool:
        """Whether this teacher was fine-tuned on, and scores, (b, a) instead of (a, b)."""
        return bool(self.info["config"].get("swap", False))

    @property
    def both_orders(self) -> bool:
        """Whether this teacher was fine-tuned on both orders and scores the mean of (a, b) and (b, a)."""
        return bool(self.info["config"].get("both_orders", False))

    def logits(self, a: Sequence[str], b: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Raw logits float32 (n, num_outputs) for the pairs (a[i], b[i])."""
        torch = require("torch", "train")
        if len(a) != len(b):
            raise OndeviceError(f"got {len(a)} first and {len(b)} second sentences; pairs need equal counts")
        if not len(a):
            return np.zeros((0, self.spec.num_outputs), np.float32)

        def run(first: Sequence[str], second: Sequence[str]) -> np.ndarray:
            out = self.model.predict(list(zip(first, second)), batch_size=batch_size, show_progress_bar=False,
                                     activation_fn=torch.nn.Identity(), convert_to_numpy=True)
            return np.asarray(out, np.float32).reshape(len(first), self.spec.num_outputs)

        if self.both_orders:
            return ((run(a, b) + run(b, a)) / 2).astype(np.float32)
        return run(b, a) if self.swapped else run(a, b)


def _log_losses(trainer) -> list[dict]:
    return [{k: v for k, v in e.items() if k in ("epoch", "step", "loss", "learning_rate")}
            for e in trainer.state.log_history if "loss" in e]


def fine_tune(config: CrossEncoderConfig, out_dir: str | Path, resume: bool = False,
              progress: bool = True) -> CrossEncoderTeacher:
    """Fine-tune the base model as a cross-encoder on the task's train split; dev picks the threshold."""
    config.validate()
    out = check_out_kind(out_dir, "cross-encoder")
    torch = require("torch", "train")
    datasets = require("datasets", "pairs")
    st = _st()
    ckpts = sorted((out / layouts.TEACHER_CHECKPOINTS).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    if ckpts and not resume:
        raise OndeviceError(f"{out} holds checkpoints of an earlier run; pass --resume to continue it, or choose another --out")
    if resume and not ckpts:
        raise OndeviceError(f"nothing to resume in {out} (no {layouts.TEACHER_CHECKPOINTS}/checkpoint-*); run without --resume")
    if resume and (out / layouts.TEACHER_CONFIG).is_file():
        saved = CrossEncoderConfig.from_dict(read_json(out / layouts.TEACHER_CONFIG, "teacher config"), "teacher config")
        keys = [k for k in ("task", "base", "epochs", "batch_size", "lr", "seed", "split_seed", "max_train_pairs",
                            "max_length", "swap", "both_orders") if getattr(saved, k) != getattr(config, k)]
        if keys:
            raise OndeviceError(f"--resume with different settings ({', '.join(keys)}); use the original flags or a new --out")
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    spec = task_spec(config.task)
    train = load_pairs(config.task, "train", config.data, config.split_seed)
    dev = load_pairs(config.task, "dev", config.data, config.split_seed)
    if config.max_train_pairs:
        train = train.subset(np.random.default_rng(config.seed).permutation(len(train))[: config.max_train_pairs])
    base = _base_path(config.base)  # an unknown or unfetched base is an error before anything is written
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / layouts.TEACHER_CONFIG, config.to_dict())

    torch.manual_seed(config.seed)
    with quiet_loading():  # the base has no classifier yet: its load report says so, which is the point
        model = st.CrossEncoder(str(base), num_labels=spec.num_outputs, max_length=config.max_length,
                                local_files_only=True, device=device, activation_fn=torch.nn.Identity())
    labels = spec.normalize(train.gold)
    first, second = (train.b, train.a) if config.swap else (train.a, train.b)
    if config.both_orders:
        first, second, labels = first + second, second + first, np.concatenate([labels, labels])
    dataset = datasets.Dataset.from_dict({"sentence1": first, "sentence2": second,
                                          "label": labels.tolist()})
    args = st.cross_encoder.CrossEncoderTrainingArguments(
        output_dir=str(out / layouts.TEACHER_CHECKPOINTS), num_train_epochs=config.epochs, per_device_train_batch_size=config.batch_size,
        learning_rate=config.lr, warmup_steps=config.warmup_ratio, weight_decay=config.weight_decay,
        seed=config.seed, data_seed=config.seed, save_strategy="epoch", save_total_limit=2, eval_strategy="no",
        logging_steps=config.logging_steps, report_to="none", use_cpu=device == "cpu", disable_tqdm=not progress,
        dataloader_num_workers=0,
    )
    trainer = st.cross_encoder.CrossEncoderTrainer(model=model, args=args, train_dataset=dataset,
                                                   loss=_loss(model, spec.kind))
    started = time.time()
    try:
        trainer.train(resume_from_checkpoint=str(ckpts[-1]) if resume else None)
    except KeyboardInterrupt:
        raise OndeviceError("interrupted; the last epoch's checkpoint is kept, continue with --resume") from None
    if not all(bool(torch.isfinite(t).all()) for t in model.parameters()):  # diverged: never saved as a teacher
        raise OndeviceError(f"training diverged: the teacher's weights hold NaN or inf (--lr {config.lr:g} is too "
                            "large for this task); nothing was saved as a teacher, lower --lr and run again")
    model.save_pretrained(str(out / layouts.TEACHER_MODEL))
    weights = out / layouts.TEACHER_MODEL / "model.safetensors"
    info = {"config": config.to_dict(), "weights_sha256": sha256_file(weights), "train_pairs": len(train),
            "train_seconds": round(time.time() - started, 1), "losses": _log_losses(trainer)}
    write_text(out / layouts.TRAIN_LOG, "".join(json.dumps(e) + "\n" for e in info["losses"]))
    write_record(out / layouts.TEACHER_INFO, json.loads(json.dumps(info, default=lambda o: o.__dict__)))
    teacher = CrossEncoderTeacher.load(out, device=device)
    dev_logits = teacher.logits(dev.a, dev.b)
    info = teacher.info
    info["dev"], threshold = dev_metrics(spec, dev_logits, dev.gold)
    info["threshold"] = threshold
    write_record(out / layouts.TEACHER_INFO, info)
    return teacher  # its info is the dict just written


def evaluate_teacher(teacher: CrossEncoderTeacher, data: PairData) -> dict:
    """Task metrics of the teacher on `data`, with the dev-tuned threshold for binary tasks (logits via the cache)."""
    return evaluate_scores(teacher.spec, teacher_logits(teacher, data.a, data.b, progress=False), data.gold,
                           teacher.info.get("threshold"))
