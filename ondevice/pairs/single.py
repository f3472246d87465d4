"""Single-sentence (Wu et al., 2020, §3.2) fine-tuning: an MLP (ReLU hidden layer) over the student vector, trained end to
end with cross-entropy on a labeled task (SST-2); the dev-best epoch is kept.

A run folder holds `student/` (fine-tuned encoder), `sentence_head.safetensors` + `sentence_head.json`,
`sentence_config.json`, `train_log.jsonl`, `dev.json` and `checkpoint/` (resume).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.checkpoints import checkpoint_errors
from ondevice.checks import first_failure, training_checks
from ondevice.eval.pair_tasks import load_sst2
from ondevice.io import artifact_file, atomic_path, read_json, write_json, write_record
from ondevice.student import Student
from ondevice.tokenizer import pad_ids
from ondevice.trainloop import Position, check_resume, run_folder_epochs, start_or_resume

TASKS = ("sst2",)


@dataclass
class SentenceHeadConfig:
    """Every setting of a single-sentence fine-tuning run; saved as sentence_config.json."""

    data: str
    student: str
    task: str = "sst2"
    hidden: int = 256
    epochs: int = 2
    batch_size: int = 64
    lr: float = 5e-4
    max_train: int | None = None
    seed: int = 0
    threads: int = 0

    def validate(self) -> None:
        """Reject impossible values with a one-line error naming the flag."""
        first_failure([(self.task in TASKS, f"--task must be one of {', '.join(TASKS)}"), (self.hidden >= 1, "--hidden must be >= 1"),
                       *training_checks(self.epochs, self.batch_size, self.lr),
                       (self.max_train is None or self.max_train >= 2, "--max-train must be >= 2"),
                       (self.threads >= 0, "--threads must be >= 0")])


def _model(encoder, dim: int, hidden: int, classes: int):
    torch = require("torch", "train")

    class SentenceModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.head = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))

        def forward(self, ids, lengths):
            return self.head(self.encoder(ids, lengths))

    return SentenceModel()


def _predict(model, ids: list[np.ndarray], batch: int = 256) -> np.ndarray:
    torch = require("torch", "train")
    model.eval()
    out = []
    with torch.inference_mode():
        for s in range(0, len(ids), batch):
            x, lens = pad_ids(ids[s : s + batch])
            out.append(model(torch.from_numpy(x), torch.from_numpy(lens)).numpy())
    return np.concatenate(out) if out else np.zeros((0, 2), np.float32)


def train_sentence_head(config: SentenceHeadConfig, out_dir: str | Path, resume: bool = False,
                        progress: bool = True) -> dict:
    """Fine-tune student + MLP on the task's train split; returns dev (and, once done, test) accuracy."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    config.validate()
    torch = require("torch", "train")
    out = Path(out_dir)
    check_resume(out, config, "sentence_config.json", "config",
                 ("task", "hidden", "epochs", "batch_size", "lr", "max_train", "seed"), resume)
    if config.threads:
        torch.set_num_threads(config.threads)
    student = Student.load(config.student)
    train, dev = load_sst2("train", config.data), load_sst2("dev", config.data)
    rng = np.random.default_rng(config.seed)
    idx = rng.permutation(len(train.texts))[: config.max_train] if config.max_train else np.arange(len(train.texts))
    tr_ids = [np.asarray(student.tokenizer.ids(train.texts[i]), np.int64) for i in idx]
    tr_y = torch.from_numpy(train.labels[idx])
    dev_ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in dev.texts]
    classes = int(max(train.labels.max(), dev.labels.max())) + 1
    torch.manual_seed(config.seed)
    model = _model(student.model, student.config.output_dim, config.hidden, classes)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    state = start_or_resume(out, model, opt, config, "sentence_config.json", resume,
                            {"epoch": 0, "step": 0, "log": [], "best": None})

    def train_epoch(pos: Position) -> dict:
        epoch = pos.epoch
        perm = np.random.default_rng(config.seed * 1000003 + epoch).permutation(len(tr_ids))
        batches = [perm[i : i + config.batch_size] for i in range(0, len(perm), config.batch_size)]
        model.train()
        losses = []
        for rows in tqdm(batches[pos.step:], desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch", disable=not progress):
            x, lens = pad_ids([tr_ids[i] for i in rows])
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x), torch.from_numpy(lens)), tr_y[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            pos.step += 1
            losses.append(loss.item())
        acc = float((_predict(model, dev_ids).argmax(1) == dev.labels).mean())
        if state["best"] is None or acc > state["best"]["dev_accuracy"]:
            state["best"] = {"epoch": epoch + 1, "dev_accuracy": acc}
            _save_head(out, model, student, {"task": config.task, "dim": student.config.output_dim,
                                              "hidden": config.hidden, "classes": classes})
            write_record(out / layouts.RUN_DEV, {"accuracy": round(100 * acc, 2), "epoch": epoch + 1, "n": len(dev_ids)})
        return {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None,
                "dev_accuracy": round(100 * acc, 2), "time": time.time()}

    run_folder_epochs(out, model, opt, state, config.epochs, train_epoch)
    return read_json(out / layouts.RUN_DEV, "dev metrics")


def _save_head(out: Path, model, student: Student, cfg: dict) -> None:
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.head.state_dict().items()}
    with atomic_path(out / "sentence_head.safetensors") as tmp:
        save_file(state, str(tmp), metadata={"format": "ondevice-sentence-head"})
    write_json(out / "sentence_head.json", cfg)
    student.save(out / layouts.RUN_STUDENT)


def evaluate_sentence_head(run_dir: str | Path, data_dir: str | Path, split: str = "test") -> dict:
    """Accuracy of a finished run on `split` (SST-2 test by default)."""
    torch = require("torch", "train")
    run = Path(run_dir)

    for name in ("sentence_head.json", "sentence_head.safetensors", layouts.RUN_STUDENT):
        artifact_file(run, name, "sentence-head run")
    cfg = read_json(run / "sentence_head.json", "sentence head config")
    student = Student.load(run / layouts.RUN_STUDENT)
    with checkpoint_errors(run, "train the sentence head again"):  # one line, not a traceback
        model = _model(student.model, int(cfg["dim"]), int(cfg["hidden"]), int(cfg["classes"]))
        model.head.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(str(run / "sentence_head.safetensors")).items()})
    data = load_sst2(split, data_dir)
    ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in data.texts]
    acc = float((_predict(model, ids).argmax(1) == data.labels).mean())
    return {"accuracy": round(100 * acc, 2), "n": len(ids), "split": split}
