"""Pair tasks (STS-B, SICK-R, SICK-E, MRPC, QQP subset) and SST-2 with documented, seeded train/dev/test splits.

Splits (`describe_splits` returns this text for reports):

- stsb:   the official train / dev / test files.
- sick-r, sick-e: train = SICK_train minus a seeded 10% dev; test = SICK_trial (the data folder has no SICK test).
- mrpc:   train = msr_paraphrase_train minus a seeded, label-stratified 10% dev; test = msr_paraphrase_test.
- qqp:    the 23k-pair subset of GLUE QQP *train* is split 80/10/10 by connected components of the
          question graph (two pairs sharing a question land in the same split), so no question appears on
          both sides of a split; the component order is seeded.
- sst2:   the official SST-2 train / dev / test files (single sentences).

Test splits are only ever read for final evaluation; every trainer in ondevice.pairs takes train and dev only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.eval.data import (
    DataMissing,
    _bad,
    _file,
    _lines,
    held_out_texts,
    read_mrpc,
    read_qqp,
    read_sst,
    read_stsb,
    train_split_sentences,
)

SPLITS = ("train", "dev", "test")
DEV_FRACTION = 0.1
QQP_FRACTIONS = (0.8, 0.1, 0.1)
SICK_E_LABELS = ("NEUTRAL", "ENTAILMENT", "CONTRADICTION")


@dataclass(frozen=True)
class TaskSpec:
    """What a pair task predicts and how it is scored."""

    name: str
    kind: str  # "regression" | "binary" | "classes"
    labels: tuple[str, ...] = ()
    low: float = 0.0  # gold range of a regression task, mapped to [0, 1] for training
    high: float = 1.0
    metric: str = "spearman"  # headline metric on test

    @property
    def num_outputs(self) -> int:
        """Width of the teacher's and the student head's logits."""
        return len(self.labels) if self.kind == "classes" else 1

    def normalize(self, gold: np.ndarray) -> np.ndarray:
        """Gold in training units: regression scores mapped to [0, 1]; class ids unchanged."""
        if self.kind == "regression":
            return ((np.asarray(gold, np.float64) - self.low) / (self.high - self.low)).astype(np.float32)
        return np.asarray(gold, np.int64)


TASKS: dict[str, TaskSpec] = {
    "stsb": TaskSpec("stsb", "regression", low=0.0, high=5.0, metric="spearman"),
    "sick-r": TaskSpec("sick-r", "regression", low=1.0, high=5.0, metric="spearman"),
    "sick-e": TaskSpec("sick-e", "classes", labels=SICK_E_LABELS, metric="accuracy"),
    "mrpc": TaskSpec("mrpc", "binary", labels=("not_paraphrase", "paraphrase"), metric="accuracy"),
    "qqp": TaskSpec("qqp", "binary", labels=("not_duplicate", "duplicate"), metric="accuracy"),
}


@dataclass
class PairData:
    """Sentence pairs of one split with gold scores (regression, original scale) or class ids."""

    task: str
    split: str
    a: list[str]
    b: list[str]
    gold: np.ndarray

    def __len__(self) -> int:
        return len(self.a)

    @property
    def spec(self) -> TaskSpec:
        return TASKS[self.task]

    def subset(self, idx: np.ndarray) -> PairData:
        """The pairs at `idx`, in that order."""
        idx = np.asarray(idx, dtype=np.int64)
        return PairData(self.task, self.split, [self.a[i] for i in idx], [self.b[i] for i in idx], self.gold[idx])


@dataclass
class SentenceData:
    """Single sentences with class ids (SST-2)."""

    task: str
    split: str
    texts: list[str]
    labels: np.ndarray


def task_spec(task: str) -> TaskSpec:
    """The TaskSpec of `task`, or a one-line error listing the tasks."""
    if task not in TASKS:
        raise OndeviceError(f"unknown pair task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[task]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise OndeviceError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")


def _dev_indices(n: int, seed: int, labels: np.ndarray | None = None) -> np.ndarray:
    """A seeded 10% of range(n), stratified by `labels` when given; sorted."""
    rng = np.random.default_rng(seed)
    if labels is None:
        return np.sort(rng.permutation(n)[: max(1, round(n * DEV_FRACTION))])
    out = []
    for value in np.unique(labels):
        rows = np.flatnonzero(labels == value)
        out.append(rng.permutation(rows)[: max(1, round(len(rows) * DEV_FRACTION))])
    return np.sort(np.concatenate(out))


def _carve(full: PairData, split: str, seed: int, stratify: bool) -> PairData:
    dev = _dev_indices(len(full), seed, full.gold if stratify else None)
    if split == "dev":
        idx = dev
    else:
        idx = np.setdiff1d(np.arange(len(full)), dev)
    out = full.subset(idx)
    out.split = split
    return out


def read_sick_pairs(data_dir: str | Path, file_split: str, entailment: bool) -> PairData:
    """SICK train/trial with relatedness (1-5) or entailment class ids (NEUTRAL 0, ENTAILMENT 1, CONTRADICTION 2)."""
    name = {"train": "SICK_train.txt", "trial": "SICK_trial.txt"}[file_split]
    path = _file(data_dir, f"sick/{name}", f"sick-{file_split}")
    a, b, gold = [], [], []
    for i, line in enumerate(_lines(path), 1):
        if not line.strip() or (i == 1 and line.startswith("pair_ID")):
            continue
        f = line.split("\t")
        if len(f) < 5:
            raise _bad(path, i, f"expected 5 tab-separated fields, got {len(f)}")
        if entailment:
            if f[4].strip() not in SICK_E_LABELS:
                raise _bad(path, i, f"unknown entailment label {f[4]!r}")
            gold.append(SICK_E_LABELS.index(f[4].strip()))
        else:
            try:
                gold.append(float(f[3]))
            except ValueError:
                raise _bad(path, i, f"relatedness score {f[3]!r} is not a number") from None
        a.append(f[1])
        b.append(f[2])
    dtype = np.int64 if entailment else np.float64
    return PairData("sick-e" if entailment else "sick-r", file_split, a, b, np.asarray(gold, dtype=dtype))


def qqp_components(a: list[str], b: list[str]) -> np.ndarray:
    """Connected-component id of every pair in the graph whose nodes are questions and edges are pairs."""
    ids: dict[str, int] = {}
    parent: list[int] = []

    def node(q: str) -> int:
        if q not in ids:
            ids[q] = len(parent)
            parent.append(len(parent))
        return ids[q]

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for qa, qb in zip(a, b):
        ra, rb = find(node(qa)), find(node(qb))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.asarray([find(ids[q]) for q in a], dtype=np.int64)


def _qqp_split(full: PairData, split: str, seed: int) -> PairData:
    comp = qqp_components(full.a, full.b)
    roots, sizes = np.unique(comp, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(roots))
    cum = np.cumsum(sizes[order])
    n = len(full)
    bounds = (QQP_FRACTIONS[0] * n, (QQP_FRACTIONS[0] + QQP_FRACTIONS[1]) * n)
    which = np.where(cum <= bounds[0], 0, np.where(cum <= bounds[1], 1, 2))  # component -> split
    split_of_root = dict(zip(roots[order].tolist(), which.tolist()))
    want = SPLITS.index(split)
    idx = np.flatnonzero(np.fromiter((split_of_root[c] == want for c in comp.tolist()), dtype=bool, count=n))
    out = full.subset(idx)
    out.split = split
    return out


def load_pairs(task: str, split: str, data_dir: str | Path, seed: int = 0) -> PairData:
    """One split of a pair task; `seed` fixes the carved dev splits (SICK, MRPC) and the QQP split."""
    task_spec(task)
    _check_split(split)
    if task == "stsb":
        p = read_stsb(data_dir, split)
        return PairData(task, split, p.a, p.b, p.gold)
    if task in ("sick-r", "sick-e"):
        entail = task == "sick-e"
        if split == "test":
            out = read_sick_pairs(data_dir, "trial", entail)
            out.split = "test"
            return out
        return _carve(read_sick_pairs(data_dir, "train", entail), split, seed, stratify=entail)
    if task == "mrpc":
        if split == "test":
            p = read_mrpc(data_dir, "test")
            return PairData(task, split, p.a, p.b, p.gold)
        p = read_mrpc(data_dir, "train")
        return _carve(PairData(task, "train", p.a, p.b, p.gold), split, seed, stratify=True)
    p = read_qqp(data_dir)
    return _qqp_split(PairData(task, "all", p.a, p.b, p.gold), split, seed)


UNLABELED_TASKS = ("stsb", "sick", "mrpc", "qqp")  # whose train-split text `--train-splits` may add to a corpus


def task_list(value: str) -> tuple[str, ...]:
    """The tasks of a comma-separated flag value, trimmed, lower case, in order, without repeats."""
    return tuple(dict.fromkeys(t.strip().lower() for t in value.split(",") if t.strip()))


def unlabeled_tasks_problem(tasks: tuple[str, ...], flag: str = "--train-splits") -> str:
    """The one-line problem with `tasks` as `flag`'s tasks whose train text may join a corpus ("" if none)."""
    unknown = [t for t in tasks if t not in UNLABELED_TASKS]
    if unknown or not tasks:
        what = f"unknown task {unknown[0]!r}" if unknown else "no task given"
        return f"{flag} takes tasks from {','.join(UNLABELED_TASKS)}; {what}"
    return ""


def check_unlabeled_tasks(tasks: tuple[str, ...]) -> None:
    """One-line error unless `tasks` names at least one task whose train text may join a corpus."""
    problem = unlabeled_tasks_problem(tasks)
    if problem:
        raise OndeviceError(problem)


def pair_held_out_texts(data_dir: str | Path, seed: int = 0) -> set[str]:
    """Every evaluation sentence (`held_out_texts`) plus the dev and test splits SICK, MRPC and QQP carve with split
    `seed`: text no unlabeled corpus of a pair run may hold (a task not in `data_dir` holds out nothing)."""
    held = held_out_texts(data_dir, pair_train=False)
    for task in ("sick-r", "sick-e", "mrpc", "qqp"):  # SICK-R and SICK-E carve differently
        for split in ("dev", "test"):
            try:
                part = load_pairs(task, split, data_dir, seed)
            except DataMissing:
                continue
            held.update(x.strip() for x in part.a + part.b)
    return held


def unlabeled_train_sentences(data_dir: str | Path, tasks: tuple[str, ...] = ("stsb",), seed: int = 0) -> list[str]:
    """Unique train-split sentences of `tasks` as unlabeled distillation text (no scores), STS-B's first.

    SICK, MRPC and QQP contribute only their train part as `load_pairs` carves it with split `seed` (0: the default of
    `ondevice pairs`): a sentence found in any dev, test or evaluation text, carved dev splits included, is left out.
    """
    check_unlabeled_tasks(tasks)
    out: dict[str, None] = dict.fromkeys(train_split_sentences(data_dir) if "stsb" in tasks else [])
    others = [t for t in tasks if t != "stsb"]
    if not others:
        return list(out)
    held = pair_held_out_texts(data_dir, seed)
    for task in others:
        part = load_pairs({"sick": "sick-r"}.get(task, task), "train", data_dir, seed)
        for x in part.a + part.b:
            x = x.strip()
            if x and x not in held:
                out.setdefault(x, None)
    return list(out)


def load_sst2(split: str, data_dir: str | Path) -> SentenceData:
    """SST-2 (official splits)."""
    _check_split(split)
    s = read_sst(data_dir, split)
    return SentenceData("sst2", split, s.texts, s.labels)


def describe_splits() -> str:
    """The split rules as text (the module docstring's list), for reports and manifests."""
    doc = __doc__ or ""
    return doc[doc.index("Splits"):doc.index("Test splits")].strip()


def summary(task: str, data_dir: str | Path, seed: int = 0) -> dict:
    """Sizes and label balance of each split (what `ondevice pairs data` prints)."""
    out: dict = {"task": task, "seed": seed, "splits": {}}
    for split in SPLITS:
        d = load_pairs(task, split, data_dir, seed)
        entry: dict = {"pairs": len(d)}
        if d.spec.kind == "regression":
            entry["gold_mean"] = round(float(d.gold.mean()), 4)
        else:
            entry["label_counts"] = {d.spec.labels[int(k)]: int(v) for k, v in zip(*np.unique(d.gold, return_counts=True))}
        out["splits"][split] = entry
    return out
