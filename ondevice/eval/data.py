"""Readers for the public benchmark files in the shared data folder (formats and quirks: each set's SOURCE.md).

Every reader takes the data folder and returns plain lists and numpy arrays. A missing data set raises
`DataMissing` (the evaluation skips that task with its message); a folder that holds none of the sets raises
`OndeviceError` from `check_data_dir`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ondevice.errors import OndeviceError

BOM = "\ufeff"

# Folder of each data set, relative to the data dir; `check_data_dir` looks for any of them.
FOLDERS = ("stsb", "sick", "mrpc", "senteval_classification", "snli", "qqp")


class DataMissing(OndeviceError):
    """A data set is not in the data folder: its task is skipped, the others still run."""


@dataclass
class Pairs:
    """Sentence pairs with a gold score (STS, SICK: float) or label (MRPC, QQP: 0/1)."""

    a: list[str]
    b: list[str]
    gold: np.ndarray


@dataclass
class Labeled:
    """Single sentences with integer class labels."""

    texts: list[str]
    labels: np.ndarray


def check_data_dir(data_dir: str | Path) -> Path:
    """The data folder as a Path; a folder that does not exist or holds no known data set is an error."""
    path = Path(data_dir)
    if not path.is_dir():
        raise OndeviceError(f"data folder not found: {path}; pass --data DIR (the shared benchmark data, see its README.md)")
    if not any((path / f).is_dir() for f in FOLDERS):
        raise OndeviceError(
            f"{path} holds none of the benchmark folders ({', '.join(FOLDERS)}); pass --data DIR pointing at the shared data"
        )
    return path


def _file(data_dir: str | Path, rel: str, task: str) -> Path:
    path = Path(data_dir) / rel
    if not path.is_file():
        raise DataMissing(f"{task}: {path} not found; skipping {task} (see the data folder's README.md)")
    return path


def _lines(path: Path, encoding: str = "utf-8") -> list[str]:
    """Lines without their line ends (a file's final newline does not make an extra empty line)."""
    text = path.read_bytes().decode(encoding)
    text = text.removeprefix(BOM)
    return text.splitlines()


def _bad(path: Path, lineno: int, why: str) -> OndeviceError:
    return OndeviceError(f"{path}:{lineno}: {why}; the file is not in the format its SOURCE.md describes")


STSB_SPLITS = ("train", "dev", "test")


def read_stsb(data_dir: str | Path, split: str = "test") -> Pairs:
    """STS Benchmark: tab-separated, no header, no quoting; rows may carry 2 extra trailing columns (ignored)."""
    if split not in STSB_SPLITS:
        raise OndeviceError(f"unknown STS-B split {split!r}; choose one of {', '.join(STSB_SPLITS)}")
    path = _file(data_dir, f"stsb/sts-{split}.csv", f"stsb-{split}")
    return _scored_pairs(path, _lines(path), score=4, first=5, second=6, what="score")


def _scored_pairs(path: Path, lines: list[str], score: int, first: int, second: int, what: str,
                  header: str | None = None) -> Pairs:
    """Tab-separated rows with a float score and two sentences at the given columns; extra columns ignored."""
    need = max(score, first, second) + 1
    a, b, gold = [], [], []
    for i, line in enumerate(lines, 1):
        if not line.strip() or (i == 1 and header is not None and line.startswith(header)):
            continue
        f = line.split("\t")
        if len(f) < need:
            raise _bad(path, i, f"expected at least {need} tab-separated fields, got {len(f)}")
        try:
            gold.append(float(f[score]))
        except ValueError:
            raise _bad(path, i, f"{what} {f[score]!r} is not a number") from None
        a.append(f[first])
        b.append(f[second])
    return Pairs(a, b, np.asarray(gold, dtype=np.float64))


SICK_SPLITS = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


def read_sick(data_dir: str | Path, split: str = "trial") -> Pairs:
    """SICK relatedness: tab-separated with a header line; columns pair_ID, A, B, relatedness_score, entailment."""
    if split not in SICK_SPLITS:
        raise OndeviceError(f"unknown SICK split {split!r}; choose one of {', '.join(SICK_SPLITS)}")
    path = _file(data_dir, f"sick/{SICK_SPLITS[split]}", f"sick-{split}")
    return _scored_pairs(path, _lines(path), score=3, first=1, second=2, what="relatedness score", header="pair_ID")


def read_mrpc(data_dir: str | Path, split: str = "test", tokenized: bool = False) -> Pairs:
    """MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; UTF-8 BOM on line 1; a header line in the SentEval copy.

    The default reads the original untokenized text (`raw_untokenized/`, what a user's sentences look like),
    falling back to the SentEval (PTB-tokenized) copy when it is absent; labels and order are the same in both.
    """
    if split not in ("train", "test"):
        raise OndeviceError(f"unknown MRPC split {split!r}; choose train or test (MRPC has no dev split)")
    name = f"msr_paraphrase_{split}.txt"
    raw = Path(data_dir) / "mrpc" / "raw_untokenized" / name
    path = raw if (raw.is_file() and not tokenized) else _file(data_dir, f"mrpc/{name}", f"mrpc-{split}")
    a, b, gold = [], [], []
    for i, line in enumerate(_lines(path), 1):
        if not line.strip() or (i == 1 and line.startswith("Quality")):
            continue
        f = line.split("\t")
        if len(f) != 5 or f[0] not in ("0", "1"):
            raise _bad(path, i, "expected 5 tab-separated fields starting with label 0 or 1")
        gold.append(int(f[0]))
        a.append(f[3])
        b.append(f[4])
    return Pairs(a, b, np.asarray(gold, dtype=np.int64))


def read_qqp(data_dir: str | Path) -> Pairs:
    """QQP train subset: id, qid1, qid2, q1, q2, is_duplicate, no header; one GLUE row has the label glued to q2."""
    path = _file(data_dir, "qqp/qqp_glue_train_subset_23k.tsv", "qqp")
    a, b, gold = [], [], []
    for i, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) == 5 and f[4][-2:] in (" 0", " 1"):  # the malformed GLUE row: "question2 0"
            f = f[:4] + [f[4][:-2], f[4][-1]]
        if len(f) != 6 or f[5] not in ("0", "1"):
            raise _bad(path, i, "expected 6 tab-separated fields ending with label 0 or 1")
        a.append(f[3])
        b.append(f[4])
        gold.append(int(f[5]))
    return Pairs(a, b, np.asarray(gold, dtype=np.int64))


# SentEval binary tasks: (positive file, negative file); label 1 = first file.
BINARY_TASKS = {
    "mr": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "cr": ("CR/custrev.pos", "CR/custrev.neg"),
    "subj": ("SUBJ/subj.subjective", "SUBJ/subj.objective"),
    "mpqa": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
SENTEVAL = "senteval_classification"


def read_binary(data_dir: str | Path, task: str) -> Labeled:
    """MR / CR / SUBJ / MPQA: one sentence per line, label = file; empty lines are kept as SentEval counts them."""
    if task not in BINARY_TASKS:
        raise OndeviceError(f"unknown binary classification task {task!r}; choose one of {', '.join(BINARY_TASKS)}")
    pos, neg = (_lines(_file(data_dir, f"{SENTEVAL}/{rel}", task)) for rel in BINARY_TASKS[task])
    texts = [t.strip() for t in pos + neg]
    labels = np.asarray([1] * len(pos) + [0] * len(neg), dtype=np.int64)
    return Labeled(texts, labels)


def read_sst(data_dir: str | Path, split: str = "train", fine: bool = False) -> Labeled:
    """SST: binary files are `sentence<TAB>0|1`; fine (SST-5) files are `label sentence` with the label 0-4 first."""
    if split not in ("train", "dev", "test"):
        raise OndeviceError(f"unknown SST split {split!r}; choose train, dev or test")
    kind = "fine" if fine else "binary"
    path = _file(data_dir, f"{SENTEVAL}/SST/{kind}/sentiment-{split}", f"sst{5 if fine else 2}-{split}")
    texts, labels = [], []
    for i, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        if fine:
            label, _, text = line.partition(" ")
        else:
            text, _, label = line.rpartition("\t")
        if not label.strip().isdigit():
            raise _bad(path, i, f"label {label!r} is not an integer")
        texts.append(text.strip())
        labels.append(int(label))
    return Labeled(texts, np.asarray(labels, dtype=np.int64))


TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}


def read_trec(data_dir: str | Path, split: str = "train") -> Labeled:
    """TREC: `COARSE:fine question` per line; read as Latin-1 (train_5500 is Latin-1; TREC_10 is ASCII), as SentEval."""
    if split not in TREC_FILES:
        raise OndeviceError(f"unknown TREC split {split!r}; choose train or test")
    path = _file(data_dir, f"{SENTEVAL}/TREC/{TREC_FILES[split]}", f"trec-{split}")
    texts, labels = [], []
    for i, line in enumerate(_lines(path, encoding="latin-1"), 1):
        if not line.strip():
            continue
        target, _, text = line.partition(" ")
        coarse = target.split(":")[0]
        if coarse not in TREC_CLASSES:
            raise _bad(path, i, f"unknown coarse class {coarse!r}")
        texts.append(text.strip())
        labels.append(TREC_CLASSES.index(coarse))
    return Labeled(texts, np.asarray(labels, dtype=np.int64))


def read_snli_sentences(data_dir: str | Path, splits: tuple[str, ...] = ("dev", "test")) -> list[str]:
    """Unique SNLI premises and hypotheses of `splits`, in first-seen order (trailing spaces stripped)."""
    seen: dict[str, None] = {}
    for split in splits:
        for side in ("s1", "s2"):
            for line in _lines(_file(data_dir, f"snli/{side}.{split}", "retrieval")):
                line = line.strip()
                if line:
                    seen.setdefault(line, None)
    return list(seen)


def held_out_texts(data_dir: str | Path, pair_train: bool = True) -> set[str]:
    """Every sentence of the evaluation material (dev/test splits, and sets used only to evaluate or to carve
    dev splits from), stripped: text that must never be used as an unlabeled distillation corpus.

    `pair_train=False` leaves out the raw SICK train, MRPC train and QQP files (whose carved dev/test splits the
    caller must then hold out itself, as `ondevice.eval.pair_tasks.unlabeled_train_sentences` does)."""
    texts: set[str] = set()

    def add(fn, *args) -> None:
        try:
            got = fn(data_dir, *args)
        except DataMissing:
            return
        if isinstance(got, Pairs):
            texts.update(s.strip() for s in got.a + got.b)
        elif isinstance(got, Labeled):
            texts.update(s.strip() for s in got.texts)
        else:
            texts.update(s.strip() for s in got)

    for split in ("dev", "test"):
        add(read_stsb, split)
    for split in ("train", "trial") if pair_train else ("trial",):
        add(read_sick, split)
    for split in ("train", "test") if pair_train else ("test",):
        add(read_mrpc, split)
    if pair_train:
        add(read_qqp)
    add(read_snli_sentences)
    for task in BINARY_TASKS:
        add(read_binary, task)
    for split in ("train", "dev", "test"):
        add(read_sst, split)
    for split in TREC_FILES:
        add(read_trec, split)
    texts.discard("")
    return texts


def train_split_sentences(data_dir: str | Path) -> list[str]:
    """Unique STS-B train sentences that appear in no held-out text: in-domain unlabeled corpus for distillation."""
    held = held_out_texts(data_dir)
    pairs = read_stsb(data_dir, "train")
    seen: dict[str, None] = {}
    for s in pairs.a + pairs.b:
        s = s.strip()
        if s and s not in held:
            seen.setdefault(s, None)
    return list(seen)
