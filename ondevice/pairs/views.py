"""Teacher views: which teachers a pair student learns from, and several of them as one teacher.

A view is a teacher and an input order. `DIR` is a cross-encoder folder (`ondevice pairs teacher`) scoring (a, b),
`DIR:ba` the same teacher scoring (b, a); `bi-encoder` (or `bi-encoder:MODEL_DIR`) is a sentence encoder's cosine
calibrated on the task's training pairs (ondevice.pairs.biencoder), symmetric in a and b. DvBERT keeps its views
apart (its loss is over the K teachers); DSE and DiPair take `--teacher` as comma-separated views too, and several
views teach them as one `MeanTeacher`: the mean of the views' logits. Every view outputs the same space (regression:
the normalized score; binary and class tasks: logits), so the mean is a prediction of that space; for the bi-encoder
and a cross-encoder on STS-B it ranks better than either alone (docs/results/pairs.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ondevice.checks import first_failure
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.pairs.biencoder import BiEncoderTeacher, is_bi_encoder_view
from ondevice.pairs.crossencoder import CrossEncoderTeacher
from ondevice.pairs.logits import teacher_logits
from ondevice.pairs.metrics import dev_metrics


def parse_view(spec: str) -> tuple[str, str]:
    """'DIR' -> (DIR, 'ab'); 'DIR:ba' / 'DIR:ab' -> (DIR, order)."""
    spec = str(spec).strip()
    path, sep, order = spec.rpartition(":")
    if sep and order in ("ab", "ba") and path:
        return path, order
    if not spec:
        raise OndeviceError("the teacher list has an empty entry; give comma-separated teacher dirs, each optionally DIR:ba")
    return spec, "ab"


def parse_teachers(text: str | Sequence[str], both_orders: bool = False) -> list[str]:
    """Comma-separated teacher views (or a list); `both_orders` adds the (b, a) view of every (a, b) cross-encoder
    one (a bi-encoder view is symmetric)."""
    items = [t.strip() for t in text.split(",")] if isinstance(text, str) else [str(t).strip() for t in text]
    items = [t for t in items if t]
    if both_orders:
        items = items + [f"{p}:ba" for p, o in map(parse_view, items)
                         if o == "ab" and f"{p}:ba" not in items and not is_bi_encoder_view(p)]
    return items


def view_checks(views: Sequence[str], flag: str) -> list[tuple[bool, str]]:
    """`first_failure` checks of a view list given with `flag` (empty, a bi-encoder with :ba, a view twice)."""
    parsed = [parse_view(t) for t in views]
    return [(len(parsed) >= 1, (f"{flag} needs at least one teacher view: a cross-encoder teacher dir (comma-separated; "
                                "DIR:ba for its (b, a) view) or bi-encoder[:MODEL_DIR]")),
            (not any(is_bi_encoder_view(p) and o == "ba" for p, o in parsed),
             f"{flag}: a bi-encoder view is symmetric in a and b; list it without :ba"),
            (len(set(parsed)) == len(parsed), f"{flag} lists the same teacher view twice; list each DIR[:ba] once")]


def check_teacher_dir(path: str) -> None:
    """One line if a cross-encoder view's folder is missing (before anything is loaded or encoded)."""
    if not Path(path).is_dir():
        problem = "is not a folder" if Path(path).exists() else "not found"
        raise OndeviceError(f"teacher dir {path} {problem}; pass folders written by `ondevice pairs teacher` "
                            "(or bi-encoder for the packaged sentence encoder)")


def open_view(path: str, task: str, data: str | Path, split_seed: int = 0, device: str = "cpu", progress: bool = False):
    """The teacher behind a view's path: a `BiEncoderTeacher` for bi-encoder[:MODEL_DIR], else the cross-encoder
    folder (its network loads on first use)."""
    if is_bi_encoder_view(path):
        return BiEncoderTeacher(path, task, data, split_seed, progress=progress)
    check_teacher_dir(path)
    return CrossEncoderTeacher.load(path, device=device)


def load_views(views: Sequence[str], task: str, data: str | Path, split_seed: int = 0, device: str = "cpu",
               progress: bool = False) -> list[tuple[str, str, object]]:
    """(path, order, teacher) per view, each teacher opened once and checked to be a teacher of `task`."""
    spec = task_spec(task)
    parsed = [parse_view(t) for t in views]
    for path, _ in parsed:  # every folder named before any encoder is loaded or any pair is encoded
        if not is_bi_encoder_view(path):
            check_teacher_dir(path)
    loaded: dict[str, object] = {}
    for path, _ in parsed:
        if path not in loaded:
            loaded[path] = open_view(path, task, data, split_seed, device, progress)
        if loaded[path].spec.name != spec.name:
            raise OndeviceError(f"teacher {path} was trained for {loaded[path].spec.name}, not {spec.name}; "
                                f"pass {spec.name} teachers")
    return [(path, order, loaded[path]) for path, order in parsed]


def view_logits(teacher, order: str, a: Sequence[str], b: Sequence[str], progress: bool = False) -> np.ndarray:
    """Cached logits of one view: a (b, a) view is the teacher over the swapped pair list (its own cache entry)."""
    return teacher_logits(teacher, b, a, progress=progress) if order == "ba" else teacher_logits(teacher, a, b, progress=progress)


class MeanTeacher:
    """Several teacher views as one teacher (the same interface as CrossEncoderTeacher): the mean of their logits."""

    def __init__(self, views: list[tuple[str, str, object]], data: str | Path, split_seed: int = 0,
                 progress: bool = False):
        self.views = views
        self.spec = views[0][2].spec
        self.progress = progress
        dev = load_pairs(self.spec.name, "dev", data, split_seed)
        self.info = {"kind": "mean", "views": [{"dir": p, "order": o} for p, o, _ in views]}
        self.info["dev"], self.info["threshold"] = dev_metrics(self.spec, self.logits(dev.a, dev.b), dev.gold)

    def logits(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Mean logits (n, outputs) of the views for the pairs (a[i], b[i]); each view's own logits are cached."""
        return np.mean([view_logits(t, o, list(a), list(b), self.progress) for _, o, t in self.views], axis=0,
                       dtype=np.float64).astype(np.float32)

    @property
    def identity(self) -> dict:
        """The views' identities and orders: what makes two mean teachers' logits interchangeable."""
        return {"kind": "mean", "task": self.spec.name, "num_outputs": self.spec.num_outputs,
                "views": [{"order": o, "teacher": t.identity} for _, o, t in self.views]}


def open_teacher(text: str, task: str, data: str | Path, split_seed: int = 0, device: str = "cpu",
                 progress: bool = False):
    """The teacher a `--teacher` value names: one view's teacher as is (a lone DIR keeps its cache entries), several
    views as their `MeanTeacher`."""
    views = parse_teachers(text)
    first_failure(view_checks(views, "--teacher"))
    loaded = load_views(views, task, data, split_seed, device, progress)
    if len(loaded) == 1 and loaded[0][1] == "ab":
        return loaded[0][2]
    return MeanTeacher(loaded, data, split_seed, progress)
