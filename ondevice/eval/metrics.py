"""Metric functions: pair scores and recall@k in numpy; correlations from scipy, classification scores from
scikit-learn (the `eval` extra), so the figures are the ones other libraries report.
"""

from __future__ import annotations

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError


def is_codes(x: np.ndarray) -> bool:
    """Packed binary codes are uint8; continuous embeddings are floats."""
    return np.asarray(x).dtype == np.uint8


def cosine_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (n, d) float arrays (a zero vector scores 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    denom = na * nb
    dot = np.einsum("ij,ij->i", a, b)
    cos = np.divide(dot, denom, out=np.zeros_like(dot), where=denom > 0)
    # Round off float noise so equal similarities (e.g. identical sentence pairs) tie exactly in rank metrics.
    return np.round(cos, 12)


def hamming_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Hamming distance of two (n, bytes) packed uint8 code arrays."""
    a = np.ascontiguousarray(a, dtype=np.uint8)
    b = np.ascontiguousarray(b, dtype=np.uint8)
    return np.bitwise_count(a ^ b).sum(axis=1, dtype=np.int64)


def pair_scores(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Similarity of each pair: cosine for float vectors, negative Hamming distance for packed codes."""
    if a.shape != b.shape:
        raise OndeviceError(f"pair arrays differ in shape: {a.shape} vs {b.shape}")
    if is_codes(a) != is_codes(b):
        raise OndeviceError("cannot compare packed codes with float vectors")
    return -hamming_pairs(a, b).astype(np.float64) if is_codes(a) else cosine_pairs(a, b)


def _check_1d(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise OndeviceError(f"correlation needs two 1-d arrays of equal length >= 2, got {x.shape} and {y.shape}")
    return x, y


def _correlation(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """scipy.stats' pearsonr / spearmanr statistic; nan (without a warning) when either side is constant."""
    stats = require("scipy.stats", "eval")
    x, y = _check_1d(x, y)
    if np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(getattr(stats, name)(x, y).statistic)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation (scipy); nan when either side is constant."""
    return _correlation("pearsonr", x, y)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (scipy, average ranks for ties); nan when either side is constant."""
    return _correlation("spearmanr", x, y)


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of equal labels (scikit-learn accuracy_score)."""
    return float(require("sklearn.metrics", "eval").accuracy_score(np.asarray(y_true), np.asarray(y_pred)))


def f1_binary(y_true: np.ndarray, y_pred: np.ndarray, positive: int = 1) -> float:
    """F1 of the positive class (scikit-learn f1_score, average='binary'); 0 when nothing is predicted or true."""
    skm = require("sklearn.metrics", "eval")
    return float(skm.f1_score(np.asarray(y_true) == positive, np.asarray(y_pred) == positive, zero_division=0.0))


def above_mean(scores: np.ndarray) -> np.ndarray:
    """1 where a pair's score is above the mean score over the set, else 0 (the MRPC rule of Shen et al., 2019, §4.3)."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores > scores.mean()).astype(np.int64)


def recall_at_k(found: np.ndarray, reference: np.ndarray) -> float:
    """Mean over queries of |found_i ∩ reference_i| / |reference_i| for two (nq, k) index arrays."""
    found, reference = np.asarray(found), np.asarray(reference)
    if found.ndim != 2 or reference.ndim != 2 or len(found) != len(reference):
        raise OndeviceError(f"recall needs two (queries, k) arrays, got {found.shape} and {reference.shape}")
    hits = [len(np.intersect1d(f, r)) / reference.shape[1] for f, r in zip(found, reference)]
    return float(np.mean(hits))
