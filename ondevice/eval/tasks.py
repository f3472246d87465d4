"""The benchmark tasks: what each reads, how a view is scored on it, and its headline metric."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.eval import data as D
from ondevice.eval.metrics import (
    above_mean,
    accuracy,
    f1_binary,
    is_codes,
    pair_scores,
    pearson,
    recall_at_k,
    spearman,
)
from ondevice.eval.probe import kfold_accuracy, probe_features, split_accuracy
from ondevice.eval.retrieval import sample_queries, topk


@dataclass
class Task:
    """A benchmark: its data files (relative to the data dir), headline metric and runner."""

    name: str
    title: str
    files: tuple[str, ...]
    metric: str  # key of the headline number in the task's result dict
    group: str  # similarity | paraphrase | transfer | retrieval


def _sts(pairs: D.Pairs, feats: Callable[[list[str]], np.ndarray]) -> dict:
    a, b = feats(pairs.a), feats(pairs.b)
    s = pair_scores(a, b)
    return {"spearman": round(100 * spearman(s, pairs.gold), 2), "pearson": round(100 * pearson(s, pairs.gold), 2),
            "n": len(pairs.gold)}


def _paraphrase(pairs: D.Pairs, feats: Callable[[list[str]], np.ndarray]) -> dict:
    s = pair_scores(feats(pairs.a), feats(pairs.b))
    pred = above_mean(s)
    return {"acc": round(100 * accuracy(pairs.gold, pred), 2), "f1": round(100 * f1_binary(pairs.gold, pred), 2),
            "threshold": float(s.mean()), "n": len(pairs.gold)}


SENTEVAL = D.SENTEVAL
TASKS: dict[str, Task] = {t.name: t for t in [
    Task("stsb-dev", "STS-B dev", ("stsb/sts-dev.csv",), "spearman", "similarity"),
    Task("stsb-test", "STS-B test", ("stsb/sts-test.csv",), "spearman", "similarity"),
    Task("sick-r", "SICK-R trial", ("sick/SICK_trial.txt",), "spearman", "similarity"),
    Task("mrpc", "MRPC test", ("mrpc/raw_untokenized/msr_paraphrase_test.txt", "mrpc/msr_paraphrase_test.txt"),
         "acc", "paraphrase"),
    Task("mr", "MR", tuple(f"{SENTEVAL}/{p}" for p in D.BINARY_TASKS["mr"]), "acc", "transfer"),
    Task("cr", "CR", tuple(f"{SENTEVAL}/{p}" for p in D.BINARY_TASKS["cr"]), "acc", "transfer"),
    Task("subj", "SUBJ", tuple(f"{SENTEVAL}/{p}" for p in D.BINARY_TASKS["subj"]), "acc", "transfer"),
    Task("mpqa", "MPQA", tuple(f"{SENTEVAL}/{p}" for p in D.BINARY_TASKS["mpqa"]), "acc", "transfer"),
    Task("sst2", "SST-2", tuple(f"{SENTEVAL}/SST/binary/sentiment-{s}" for s in ("train", "dev", "test")), "acc", "transfer"),
    Task("trec", "TREC", (f"{SENTEVAL}/TREC/train_5500.label", f"{SENTEVAL}/TREC/TREC_10.label"), "acc", "transfer"),
    Task("retrieval", "SNLI retrieval R@10", tuple(f"snli/{s}.{p}" for p in ("dev", "test") for s in ("s1", "s2")),
         "recall_vs_float", "retrieval"),
    # Optional (not in the default set): QQP train subset (the untuned protocol of Wu et al., 2020, §5.5), SST-5.
    Task("qqp", "QQP train subset", ("qqp/qqp_glue_train_subset_23k.tsv",), "acc", "paraphrase"),
    Task("sst5", "SST-5", tuple(f"{SENTEVAL}/SST/fine/sentiment-{s}" for s in ("train", "dev", "test")), "acc", "transfer"),
]}
DEFAULT_TASKS = ("stsb-dev", "stsb-test", "sick-r", "mrpc", "mr", "cr", "subj", "mpqa", "sst2", "trec", "retrieval")


@dataclass
class RunContext:
    """What every task run shares: data folder, seed, loaded data and the retrieval reference."""

    data_dir: Path
    seed: int = 0
    queries: int = 1000
    k: int = 10
    reference: Any = None  # the float view whose top-k is the "teacher" reference in retrieval
    _loaded: dict | None = None

    def load(self, key: str, fn: Callable[[], Any]) -> Any:
        """Read a data set once per run."""
        if self._loaded is None:
            self._loaded = {}
        if key not in self._loaded:
            self._loaded[key] = fn()
        return self._loaded[key]


def run_task(name: str, view: Any, ctx: RunContext) -> dict:
    """Score `view` on task `name`; raises `DataMissing` when its data is absent."""
    t0 = time.perf_counter()
    info = view.info() if hasattr(view, "info") else None
    bits = info.dim if (info is not None and info.binary) else None

    def feats(texts: list[str]) -> np.ndarray:
        return view.features(texts)

    def probe(texts: list[str]) -> np.ndarray:
        return probe_features(feats(texts), bits)

    d = ctx.data_dir
    if name in ("stsb-dev", "stsb-test"):
        out = _sts(ctx.load(name, lambda: D.read_stsb(d, name.split("-")[1])), feats)
    elif name == "sick-r":
        out = _sts(ctx.load(name, lambda: D.read_sick(d, "trial")), feats)
    elif name == "mrpc":
        out = _paraphrase(ctx.load(name, lambda: D.read_mrpc(d, "test")), feats)
    elif name == "qqp":
        out = _paraphrase(ctx.load(name, lambda: D.read_qqp(d)), feats)
    elif name in D.BINARY_TASKS:
        ds = ctx.load(name, lambda: D.read_binary(d, name))
        out = kfold_accuracy(probe(ds.texts), ds.labels, seed=ctx.seed)
    elif name in ("sst2", "sst5"):
        fine = name == "sst5"
        tr, dv, te = (ctx.load(f"{name}-{s}", lambda s=s: D.read_sst(d, s, fine=fine)) for s in ("train", "dev", "test"))
        out = split_accuracy(probe(tr.texts), tr.labels, probe(te.texts), te.labels, probe(dv.texts), dv.labels, seed=ctx.seed)
    elif name == "trec":
        tr, te = (ctx.load(f"trec-{s}", lambda s=s: D.read_trec(d, s)) for s in ("train", "test"))
        out = split_accuracy(probe(tr.texts), tr.labels, probe(te.texts), te.labels, seed=ctx.seed)
    elif name == "retrieval":
        out = _retrieval(view, ctx, bits)
    else:
        raise KeyError(name)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _retrieval(view: Any, ctx: RunContext, bits: int | None) -> dict:
    """Recall@k of this view's top-k against its own float view's and against the reference's top-k."""
    catalog = ctx.load("retrieval", lambda: D.read_snli_sentences(ctx.data_dir))
    queries = sample_queries(len(catalog), ctx.queries, ctx.seed)

    def float_topk(v: Any) -> np.ndarray:
        return ctx.load(f"topk:{id(v)}", lambda: topk(v.features(catalog), queries, ctx.k))

    x = view.features(catalog)
    mine = topk(x, queries, ctx.k, bits) if is_codes(x) else float_topk(view)
    out: dict[str, Any] = {"catalog": len(catalog), "queries": len(queries), "k": ctx.k}
    base = getattr(view, "base", None)
    out["recall_vs_float"] = round(100 * recall_at_k(mine, float_topk(base)), 2) if (is_codes(x) and base is not None) else None
    if ctx.reference is not None:
        out["recall_vs_reference"] = round(100 * recall_at_k(mine, float_topk(ctx.reference)), 2)
        out["reference"] = ctx.reference.name
    return out


def transfer_average(results: dict[str, Any]) -> float | None:
    """Mean accuracy over the transfer tasks a view has results for (None if none)."""
    accs = [r["acc"] for t, r in results.items() if t in TASKS and TASKS[t].group == "transfer"]
    return sum(accs) / len(accs) if accs else None
