"""Linear-algebra helpers shared by the binarizers (ondevice.binarize) and the autoencoders (ondevice.binarize_ae).

A leaf module: both import it, it imports neither, so the two have no import cycle.
"""

from __future__ import annotations

import math

import numpy as np

from ondevice.errors import OndeviceError

_CHUNK = 32768  # rows per block, so memory-mapped inputs are never copied whole


def column_mean(x: np.ndarray) -> np.ndarray:
    """Float64-accumulated column mean, chunked so memmapped inputs are not copied whole."""
    total = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, x.shape[0], _CHUNK):
        total += np.asarray(x[start : start + _CHUNK], dtype=np.float64).sum(axis=0)
    return total / x.shape[0]


def random_projection(dim: int, bits: int, seed: int) -> np.ndarray:
    """W (bits, dim), W_ij ~ U(-1/sqrt(bits), 1/sqrt(bits)) (paper Eq. 2), reproducible from `seed`."""
    bound = 1.0 / math.sqrt(bits)
    return np.random.default_rng(seed).uniform(-bound, bound, size=(bits, dim)).astype(np.float32)


def orthogonal_rows(w: np.ndarray) -> np.ndarray:
    """w (bits, dim) with its rows made orthogonal in consecutive blocks of `dim` (Super-Bit LSH, Ji et al., NIPS
    2012), each row keeping its direction's sign and its norm. Orthogonal hyperplanes estimate an angle with less
    variance than independent ones, so the codes' Hamming distances track the cosine more closely at few bits."""
    w = np.asarray(w, dtype=np.float64)
    out = np.empty_like(w)
    dim = w.shape[1]
    for start in range(0, w.shape[0], dim):
        block = w[start : start + dim]
        q, r = np.linalg.qr(block.T)  # Gram-Schmidt of the rows in order: row i keeps its part orthogonal to rows < i
        q = q * np.where(np.diag(r) < 0, -1.0, 1.0)
        out[start : start + dim] = q.T * np.linalg.norm(block, axis=1, keepdims=True)
    return out.astype(np.float32)


def pca_basis(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean (dim,), variances (dim,) descending, axes (dim, dim) as columns in that order, signs fixed)."""
    mean = column_mean(x)
    cov = np.zeros((x.shape[1], x.shape[1]), dtype=np.float64)
    for start in range(0, x.shape[0], _CHUNK):
        block = np.asarray(x[start : start + _CHUNK], dtype=np.float64) - mean
        cov += block.T @ block
    vals, vecs = np.linalg.eigh(cov / max(1, x.shape[0] - 1))
    order = np.argsort(vals)[::-1]
    comps = vecs[:, order]
    # eigh's signs are arbitrary; make each axis's largest-magnitude entry positive so refits give the same bits
    flip = np.sign(comps[np.argmax(np.abs(comps), axis=0), np.arange(comps.shape[1])])
    return mean, np.maximum(vals[order], 0.0), comps * np.where(flip == 0, 1.0, flip)


def pca_components(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean (dim,), components (dim, bits)): the top principal axes as columns, signs fixed deterministically."""
    mean, _, comps = pca_basis(x)
    return mean, comps[:, :bits]


def whitening(x: np.ndarray, variance: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean (dim,), T (dim, k)): (h - mean) @ T has k uncorrelated unit-variance columns, the top principal axes
    that together hold `variance` (a fraction) of the total; axes of (numerically) zero variance are never kept."""
    mean, vals, comps = pca_basis(x)
    total = float(vals.sum())
    if total <= 0.0:
        raise OndeviceError("cannot whiten vectors that do not vary; give more (distinct) training vectors")
    k = int(np.searchsorted(np.cumsum(vals) / total, variance - 1e-12) + 1)
    k = max(1, min(k, int((vals > total * 1e-9).sum())))
    return mean, comps[:, :k] / np.sqrt(vals[:k])


def itq_rotation(v: np.ndarray, seed: int, iterations: int) -> tuple[np.ndarray, list[float]]:
    """Iterative quantization (Gong & Lazebnik, CVPR 2011): the orthogonal R (k, k) that brings sign(V R) close to
    V R, by alternating B = sign(V R) and the orthogonal Procrustes step R = U W^T (U S W^T = svd(V^T B)), from a
    random rotation drawn from `seed`. V (n, k) is centered, PCA-projected data. Also returns the quantization loss
    ||B - V R||_F^2 / n before each step and after the last (it never increases)."""
    v = np.asarray(v, dtype=np.float64)
    k = v.shape[1]
    r, _ = np.linalg.qr(np.random.default_rng([seed, 17]).standard_normal((k, k)))
    losses = []
    for _ in range(iterations + 1):
        z = v @ r
        b = np.where(z >= 0, 1.0, -1.0)
        losses.append(float(((b - z) ** 2).sum() / len(v)))
        if len(losses) > iterations:
            break
        u, _, wt = np.linalg.svd(v.T @ b)
        r = u @ wt
    return r, losses
