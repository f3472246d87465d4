"""Scores of pair predictions: Spearman / Pearson, accuracy / F1, and dev-tuned decision thresholds."""

from __future__ import annotations

import numpy as np

from ondevice._deps import require
from ondevice.eval.pair_tasks import TaskSpec


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho (average ranks for ties)."""
    spearmanr = require("scipy.stats", "eval").spearmanr

    return float(spearmanr(np.asarray(x, np.float64), np.asarray(y, np.float64)).statistic)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r."""
    return float(np.corrcoef(np.asarray(x, np.float64), np.asarray(y, np.float64))[0, 1])


def accuracy_f1(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """Accuracy and binary F1 (positive class 1)."""
    pred, gold = np.asarray(pred).astype(np.int64), np.asarray(gold).astype(np.int64)
    acc = float((pred == gold).mean()) if len(gold) else 0.0
    tp = int(((pred == 1) & (gold == 1)).sum())
    denom = int((pred == 1).sum()) + int((gold == 1).sum())
    return acc, (2.0 * tp / denom if denom else 0.0)


def best_threshold(scores: np.ndarray, gold: np.ndarray) -> float:
    """The threshold t maximizing accuracy of `score > t` on (dev) data; ties keep the smaller t.

    Candidates are the midpoints between consecutive distinct scores, plus one below the lowest and one above
    the highest score.
    """
    s = np.asarray(scores, np.float64)
    g = np.asarray(gold).astype(np.int64)
    order = np.argsort(s, kind="stable")
    s, g = s[order], g[order]
    distinct = np.flatnonzero(np.diff(s) > 0)
    if not len(s):
        return 0.0
    cands = np.concatenate([[s[0] - 1.0], (s[distinct] + s[distinct + 1]) / 2.0, [s[-1] + 1.0]])
    # predicted 1 for score > t: correct = (#0 at or below t) + (#1 above t)
    cum0 = np.cumsum(g == 0)
    ones_total = int((g == 1).sum())
    cum1 = np.cumsum(g == 1)
    below = np.concatenate([[0], distinct + 1, [len(s)]])  # number of items at or below each candidate
    zeros_below = np.where(below > 0, cum0[np.maximum(below - 1, 0)], 0)
    ones_below = np.where(below > 0, cum1[np.maximum(below - 1, 0)], 0)
    correct = zeros_below + (ones_total - ones_below)
    return float(cands[int(np.argmax(correct))])


def evaluate_scores(spec: TaskSpec, logits: np.ndarray, gold: np.ndarray, threshold: float | None = None) -> dict:
    """Task metrics of raw model outputs: regression ranks the first logit; binary thresholds it (default 0);
    classes take the argmax. Values x100 as the README tables show them."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim == 1:
        logits = logits[:, None]
    if spec.kind == "regression":
        return {"spearman": round(100 * spearman(logits[:, 0], gold), 2), "pearson": round(100 * pearson(logits[:, 0], gold), 2),
                "n": len(gold)}
    if spec.kind == "binary":
        t = 0.0 if threshold is None else float(threshold)
        acc, f1 = accuracy_f1(logits[:, 0] > t, gold)
        return {"accuracy": round(100 * acc, 2), "f1": round(100 * f1, 2), "threshold": t, "n": len(gold)}
    acc = float((logits.argmax(1) == np.asarray(gold)).mean())
    return {"accuracy": round(100 * acc, 2), "n": len(gold)}


def dev_metrics(spec: TaskSpec, logits: np.ndarray, gold: np.ndarray) -> tuple[dict, float | None]:
    """Metrics of dev logits and the threshold tuned on them (binary tasks; None otherwise), as every trainer scores dev."""
    threshold = best_threshold(logits[:, 0], gold) if spec.kind == "binary" else None
    return evaluate_scores(spec, logits, gold, threshold), threshold


def headline(spec: TaskSpec, metrics: dict) -> float:
    """The single number dev selection maximizes (Spearman or accuracy)."""
    return float(metrics[spec.metric])


def pair_vectors(encode, a: list[str], b: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Sentence vectors (u, v) of the pairs (a[i], b[i]), `encode` (texts -> float vectors) run once per distinct sentence."""
    uniq = list(dict.fromkeys([*a, *b]))
    pos = {s: i for i, s in enumerate(uniq)}
    vec = np.asarray(encode(uniq))
    return vec[[pos[s] for s in a]], vec[[pos[s] for s in b]]


def cosines(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two float matrices (float64)."""
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    return (u * v).sum(1) / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), 1e-12)


def pair_cosines(encode, a: list[str], b: list[str]) -> np.ndarray:
    """Cosine of each pair's sentence vectors, `encode` (texts -> float vectors) run once per distinct sentence."""
    return cosines(*pair_vectors(encode, a, b))


def cosine_metrics(spec: TaskSpec, encode, dev, test) -> dict:
    """Task metrics of the vectors' cosine as the pair score on `test` (a binary threshold tuned on `dev`)."""
    if spec.kind == "classes":
        return {"note": "no cosine baseline for a 3-class task"}
    t = best_threshold(pair_cosines(encode, dev.a, dev.b), dev.gold) if spec.kind == "binary" else None
    return evaluate_scores(spec, pair_cosines(encode, test.a, test.b), test.gold, t)
