"""k-NN retrieval over a sentence catalog: exact top-k by cosine (floats) or Hamming distance (codes).

Ties are broken by catalog index (lower first) so results are deterministic; the query itself is excluded.
"""

from __future__ import annotations

import numpy as np

from ondevice.bits import unpack
from ondevice.eval.metrics import is_codes, recall_at_k  # noqa: F401  (recall_at_k: benchmarks import it from here)

_BLOCK = 256  # queries per matrix product: bounds the (block, catalog) score matrix


def _topk_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores per row, best first, ties by lower index."""
    n = scores.shape[1]
    k = min(k, n)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    # the k-th value may be tied with entries argpartition left out: widen to every entry >= it, then sort stably
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    out = np.empty((scores.shape[0], k), dtype=np.int64)
    for i in range(scores.shape[0]):
        cand = np.flatnonzero(scores[i] >= kth[i])
        order = np.lexsort((cand, -scores[i, cand]))
        out[i] = cand[order[:k]]
    return out


def topk(catalog: np.ndarray, query_ids: np.ndarray, k: int = 10, bits: int | None = None) -> np.ndarray:
    """(len(query_ids), k) nearest catalog rows of each query row, the query excluded.

    Floats: cosine similarity. Packed uint8 codes: Hamming distance, computed exactly as
    (bits - <±1, ±1>) / 2 with a float32 matrix product (integers below 2^24 are exact in float32).
    """
    query_ids = np.asarray(query_ids, dtype=np.int64)
    if is_codes(catalog):
        nbits = bits if bits is not None else catalog.shape[1] * 8
        signs = unpack(np.asarray(catalog), nbits).astype(np.float32) * 2.0 - 1.0
        base = signs
    else:
        x = np.asarray(catalog, dtype=np.float32)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        base = x / np.where(norms > 0, norms, 1.0)
    out = np.empty((len(query_ids), min(k, len(base) - 1)), dtype=np.int64)
    for s in range(0, len(query_ids), _BLOCK):
        ids = query_ids[s : s + _BLOCK]
        scores = base[ids] @ base.T  # higher is closer for both (±1 dot = bits - 2 * Hamming)
        scores[np.arange(len(ids)), ids] = -np.inf
        out[s : s + _BLOCK] = _topk_rows(scores, out.shape[1])
    return out


def sample_queries(n: int, count: int, seed: int) -> np.ndarray:
    """A fixed, seeded sample of `count` distinct catalog indices (all of them if the catalog is smaller)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=min(count, n), replace=False))
