"""A sentence encoder (bi-encoder) as a pair teacher view: the cosine of its two vectors, calibrated to the task.

DvBERT (Cheng, 2021) distils several *different* teachers into one siamese student. Offline, the only pre-trained
transformer is the packaged all-MiniLM-L6-v2, so every cross-encoder teacher is a seed of one recipe, and their
ensemble is no better than its best member. The packaged bi-encoder itself is a different teacher: trained
contrastively on a billion pairs rather than fine-tuned on the task, it ranks STS-B about as well as the
cross-encoder and errs elsewhere (docs/results/pairs.md). As a view it predicts, for a pair (a, b),

    logit = offset + scale * cos(E(a), E(b))

with (scale, offset) fitted on the task's training split: least squares to the normalized score for regression
tasks, logistic regression to the label for binary ones (class tasks have no single similarity axis and are
refused). Its vectors come from the teacher-vector cache, so each sentence is encoded once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.pairs.metrics import dev_metrics, pair_cosines
from ondevice.teacher import cached_vectors

PREFIX = "bi-encoder"  # a teacher view "bi-encoder" (the packaged teacher) or "bi-encoder:PATH" (a local model dir)


def is_bi_encoder_view(path: str) -> bool:
    """Whether a teacher view names a bi-encoder rather than a cross-encoder folder."""
    return path == PREFIX or path.startswith(PREFIX + ":")


def logistic_fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-4, steps: int = 50) -> tuple[float, float]:
    """(scale, offset) of p(y=1 | x) = sigmoid(offset + scale * x) by Newton's method; `l2` keeps a separable set finite."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    w = np.zeros(2)
    design = np.stack([x, np.ones_like(x)], axis=1)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        grad = design.T @ (p - y) + l2 * w
        hess = (design * (p * (1 - p))[:, None]).T @ design + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


def least_squares_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(scale, offset) minimising the squared error of offset + scale * x against y."""
    scale, offset = np.polyfit(np.asarray(x, np.float64), np.asarray(y, np.float64), 1)
    return float(scale), float(offset)


class BiEncoderTeacher:
    """A bi-encoder's calibrated cosine as a teacher of `task` (the same interface as CrossEncoderTeacher)."""

    def __init__(self, view: str, task: str, data: str | Path, split_seed: int = 0, progress: bool = False):
        # looked up on each call, so a patched attribute is seen
        from ondevice.teacher import DEFAULT, Teacher

        self.spec = task_spec(task)
        if self.spec.kind == "classes":
            raise OndeviceError(f"a bi-encoder teacher view scores one similarity, but {task} has "
                                f"{len(self.spec.labels)} classes; use cross-encoder teachers for it")
        model = view.split(":", 1)[1] if ":" in view else DEFAULT
        self.encoder = Teacher(model)
        self.progress = progress
        train = load_pairs(task, "train", data, split_seed)
        cos = self.cosine(train.a, train.b)
        if self.spec.kind == "regression":
            self.scale, self.offset = least_squares_fit(cos, self.spec.normalize(train.gold))
        else:
            self.scale, self.offset = logistic_fit(cos, np.asarray(train.gold, np.float64))
        if not (np.isfinite(self.scale) and np.isfinite(self.offset)):
            raise OndeviceError(f"cannot calibrate the bi-encoder on {task}'s training pairs (the fit diverged)")
        dev = load_pairs(task, "dev", data, split_seed)
        self.info = {"kind": PREFIX, "model": self.encoder.info.path, "train_pairs": len(train),
                     "calibration": {"scale": self.scale, "offset": self.offset}}
        self.info["dev"], self.info["threshold"] = dev_metrics(self.spec, self.logits(dev.a, dev.b), dev.gold)

    def cosine(self, a: list[str], b: list[str]) -> np.ndarray:
        """cos(E(a_i), E(b_i)) for every pair, each distinct sentence encoded once (and cached on disk)."""
        return pair_cosines(lambda texts: cached_vectors(self.encoder, texts, progress=self.progress), a, b)

    def logits(self, a: list[str], b: list[str]) -> np.ndarray:
        """Calibrated logits (n, 1) of the pairs (a[i], b[i]); symmetric in a and b."""
        return (self.offset + self.scale * self.cosine(list(a), list(b))).astype(np.float32)[:, None]

    @property
    def identity(self) -> dict:
        """What makes two such teachers' logits interchangeable: encoder content, pooling, task and calibration."""
        enc = self.encoder.info
        return {"kind": PREFIX, "task": self.spec.name, "num_outputs": 1, "weights_sha256": enc.weights_sha256,
                "pooling": enc.pooling, "normalize": enc.normalize, "max_length": enc.max_length,
                "precision": enc.precision, "calibration": [round(self.scale, 12), round(self.offset, 12)]}
