"""The DSE pair head f(u, v) = w^T ReLU(W [u, v, u*v, |u-v|]) (with biases), its weights file, and the loss.

`pair_features` and `head_forward_numpy` are the reference the ONNX graph, the runtime and the Java core are
tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.checks import check_float, check_int, first_failure
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, atomic_path, dataclass_from_dict, read_json, write_json

TENSORS = ("hidden.weight", "hidden.bias", "out.weight", "out.bias")
KINDS = ("regression", "binary", "classes")
FEATURES = "u,v,u*v,|u-v|"


@dataclass
class PairHeadConfig:
    """Shape and meaning of a pair head; saved as pair_head.json beside its weights."""

    dim: int
    hidden: int
    outputs: int
    task: str = ""
    kind: str = "regression"  # regression | binary | classes
    labels: list = field(default_factory=list)
    gold_low: float = 0.0  # regression: score = gold_low + f * (gold_high - gold_low)
    gold_high: float = 1.0
    threshold: float | None = None  # binary: predict 1 when the logit is above it (dev-tuned)
    features: str = FEATURES
    format_version: int = 1

    def validate(self, where: str = layouts.PAIR_HEAD_CONFIG) -> PairHeadConfig:
        """Refuse a config no head could have (it is read from a run folder, which may come from anywhere)."""
        try:
            check_int(self.dim, "dim", 1, 65_536)
            check_int(self.hidden, "hidden", 1, 65_536)
            check_int(self.outputs, "outputs", 1, 1024)
            first_failure([(self.kind in KINDS, f"kind {self.kind!r} is not one of {', '.join(KINDS)}"),
                           (self.kind == "classes" or self.outputs == 1, f"a {self.kind} head has 1 output, not {self.outputs!r}")])
            for name in ("gold_low", "gold_high", *(("threshold",) if self.threshold is not None else ())):
                check_float(getattr(self, name), name, -math.inf, math.inf)
            first_failure([(isinstance(self.labels, list) and all(isinstance(x, str) for x in self.labels),
                            "labels are not a list of strings"),
                           (self.features == FEATURES and self.format_version == 1,
                            (f"features {self.features!r} / format_version {self.format_version!r} are not this "
                             f"ondevice's ({FEATURES!r} / 1)"))])
        except OndeviceError as exc:
            raise OndeviceError(f"{where}: {exc}; retrain the pair student or restore the file") from None
        return self

    def output_transform(self) -> dict:
        """How a runtime turns the head's logits into the task's score (the manifest's `output_transform`)."""
        if self.kind == "regression":
            return {"type": "affine", "scale": self.gold_high - self.gold_low, "offset": self.gold_low}
        if self.kind == "binary":
            return {"type": "sigmoid", "decision": "logit > threshold"}
        return {"type": "softmax", "decision": "argmax"}


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[u, v, u*v, |u-v|] in float32, (n, 4 dim)."""
    u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
    return np.concatenate([u, v, u * v, np.abs(u - v)], axis=1)


def head_forward_numpy(weights: dict[str, np.ndarray], u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Reference forward pass in numpy (float64 accumulate): logits (n, outputs)."""
    h = pair_features(u, v).astype(np.float64)
    z = np.maximum(h @ weights["hidden.weight"].T.astype(np.float64) + weights["hidden.bias"], 0.0)
    return (z @ weights["out.weight"].T.astype(np.float64) + weights["out.bias"]).astype(np.float32)


def build_head(cfg: PairHeadConfig):
    """The torch module: (u, v) -> logits (n, outputs)."""
    torch = require("torch", "train")
    nn = torch.nn

    class PairHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(4 * cfg.dim, cfg.hidden)
            self.out = nn.Linear(cfg.hidden, cfg.outputs)

        def forward(self, u, v):
            return self.out(torch.relu(self.hidden(torch.cat([u, v, u * v, (u - v).abs()], dim=-1))))

    return PairHead()


def build_pair_model(encoder, cfg: PairHeadConfig):
    """Siamese student: a shared sentence encoder (ids, lengths) -> vectors, and the head over two of them."""
    torch = require("torch", "train")

    class PairModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.head = build_head(cfg)

        def forward(self, ids, lengths, ia, ib):
            vec = self.encoder(ids, lengths)  # each distinct sentence of the batch once
            return self.head(vec[ia], vec[ib])

    return PairModel()


def dse_loss(logits, teacher, gold, labeled, kind: str, alpha: float):
    """Paper Eq. 2: alpha * ||f - teacher logit||^2 + (1 - alpha) * label loss (labeled rows only).

    Label loss: squared error to gold in [0, 1] (regression), BCE with logits (binary), cross-entropy (classes).
    """
    torch = require("torch", "train")
    F = torch.nn.functional
    total = logits.new_zeros(())
    if alpha > 0:
        total = total + alpha * ((logits - teacher) ** 2).sum(-1).mean()
    if alpha < 1 and bool(labeled.any()):
        f, y = logits[labeled], gold[labeled]
        if kind == "regression":
            label = ((f[:, 0] - y) ** 2).mean()
        elif kind == "binary":
            label = F.binary_cross_entropy_with_logits(f[:, 0], y)
        else:
            label = F.cross_entropy(f, y.long())
        total = total + (1 - alpha) * label
    return total


def save_head(directory: str | Path, head, cfg: PairHeadConfig) -> None:
    """pair_head.safetensors (float32) + pair_head.json."""
    state = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in head.state_dict().items()}
    directory = Path(directory)
    with atomic_path(directory / layouts.PAIR_HEAD_WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"format": "ondevice-pair-head"})
    write_json(directory / layouts.PAIR_HEAD_CONFIG, cfg)


def load_head_weights(directory: str | Path) -> tuple[PairHeadConfig, dict[str, np.ndarray]]:
    """Config and float32 weights of a saved head, shapes checked."""
    directory = Path(directory)
    for name in (layouts.PAIR_HEAD_CONFIG, layouts.PAIR_HEAD_WEIGHTS):
        artifact_file(directory, name, "pair-model run")
    cfg = dataclass_from_dict(PairHeadConfig, read_json(directory / layouts.PAIR_HEAD_CONFIG, "pair head config"), "pair head config")
    cfg.validate(str(directory / layouts.PAIR_HEAD_CONFIG))
    path = directory / layouts.PAIR_HEAD_WEIGHTS
    if not path.is_file():
        raise OndeviceError(f"{path} not found; train a pair student with `ondevice pairs train` first")
    try:
        weights = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for corrupt files
        raise OndeviceError(f"cannot read {path}: {str(exc).splitlines()[0]}; the file is corrupt") from None
    shapes = {"hidden.weight": (cfg.hidden, 4 * cfg.dim), "hidden.bias": (cfg.hidden,),
              "out.weight": (cfg.outputs, cfg.hidden), "out.bias": (cfg.outputs,)}
    for name, shape in shapes.items():
        if name not in weights or weights[name].shape != shape:
            raise OndeviceError(f"{path}: tensor {name} missing or not of shape {shape}; the head does not match {layouts.PAIR_HEAD_CONFIG}")
        if not np.isfinite(weights[name]).all():
            raise OndeviceError(f"{path}: tensor {name} holds NaN or inf (the run diverged); retrain with a lower --lr")
    return cfg, {k: np.ascontiguousarray(weights[k], np.float32) for k in TENSORS}
