"""Evaluation on public benchmarks: STS-B, SICK-R, MRPC, SentEval transfer probes and SNLI retrieval.

Quick use:

    from ondevice.eval import sts_spearman, evaluate, write_report
    sts_spearman(my_encoder, "../shared/data")                     # STS-B test Spearman x100
    report = evaluate({"teacher": "teacher", "glove": "glove", "student": "student:DIR+random:2048"})
    write_report(report, "eval-out")                               # report.json, report.md, PNG plots

The submodules: data (readers), metrics, probe (linear probes), retrieval, encoders/views (what is measured),
cache (encodings on disk), tasks, runner (`evaluate`), report and plots.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.corpus import default_data_dir
from ondevice.errors import OndeviceError
from ondevice.eval.data import DataMissing, check_data_dir, read_sick, read_stsb
from ondevice.eval.metrics import pair_scores, spearman

# The runner, encoders, report and task table load on first use, so that a light submodule imported alone (the pair
# task splits a runtime's rerank reads, the data readers) does not load the whole evaluation stack.
_LAZY = {"GloveAverageEncoder": "encoders", "glove_average_encoder": "encoders", "markdown_table": "report",
         "write_report": "report", "evaluate": "runner", "DEFAULT_TASKS": "tasks", "TASKS": "tasks"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"ondevice.eval.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ondevice.eval' has no attribute {name!r}")

__all__ = [
    "DEFAULT_TASKS", "TASKS", "DataMissing", "GloveAverageEncoder", "evaluate", "glove_average_encoder",
    "markdown_table", "sts_spearman", "write_report",
]


def sts_spearman(encoder: Any, data_dir: str | Path | None = None, task: str = "stsb", split: str = "test") -> float:
    """Spearman x100 of cosine (or negative Hamming, when `encoder.encode` returns packed uint8 codes) vs gold.

    `task` is "stsb" (splits train/dev/test) or "sick" (splits train/trial); `data_dir` defaults to the
    shared data folder. Raises OndeviceError (DataMissing) when the data set is not there.
    """
    path = check_data_dir(data_dir if data_dir is not None else default_data_dir())
    readers = {"stsb": read_stsb, "sick": read_sick}
    if task not in readers:
        raise OndeviceError(f"unknown STS task {task!r}; choose stsb or sick")
    pairs = readers[task](path, split)
    texts = list(dict.fromkeys(pairs.a + pairs.b))  # each distinct sentence encoded once
    vectors = np.asarray(encoder.encode(texts))
    row = {t: i for i, t in enumerate(texts)}
    a = vectors[[row[t] for t in pairs.a]]
    b = vectors[[row[t] for t in pairs.b]]
    return 100.0 * spearman(pair_scores(a, b), pairs.gold)
