"""Word vectors for the student's embedding layer made without GloVe: from the teacher itself, or random.

Teacher-derived vectors (as model2vec does): each vocabulary word goes through the teacher alone as a
"sentence", its pooled vector is reduced by PCA to `dim` dimensions and scaled to GloVe's per-coordinate RMS,
so the LSTM sees inputs of the size the paper's GloVe initialization gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.teacher import cached_vectors

if TYPE_CHECKING:
    from ondevice.teacher import Teacher

TEACHER = "teacher"
RANDOM = "random"
SPECS = (TEACHER, RANDOM)
# Per-coordinate RMS of GloVe 6B 50d over its 50k most frequent words (0.688; mean vector norm 4.79).
GLOVE_RMS = 0.688


def pca(x: np.ndarray, dim: int) -> np.ndarray:
    """Rows of `x` projected on their top `dim` principal components (centered, float64 SVD)."""
    if not 1 <= dim <= min(x.shape):
        raise OndeviceError(f"--embedding-dim must be in 1..{min(x.shape)} for {x.shape[0]} words of {x.shape[1]} dims, got {dim}")
    centered = x.astype(np.float64) - x.mean(axis=0, dtype=np.float64)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return (centered @ vt[:dim].T).astype(np.float32)


def scale_to_glove(x: np.ndarray) -> np.ndarray:
    """`x` scaled so its per-coordinate RMS equals GloVe's."""
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return (x * (GLOVE_RMS / rms if rms > 0 else 1.0)).astype(np.float32)


def teacher_word_vectors(teacher: Teacher, words: Sequence[str], dim: int, batch_size: int = 256,
                         progress: bool = True) -> np.ndarray:
    """(len(words), dim) vectors: each word's teacher vector (cached like any sentence list), PCA, GloVe scale."""
    if not words:
        raise OndeviceError("no words to embed; the corpus has no tokens")
    vectors = np.asarray(cached_vectors(teacher, list(words), batch_size=batch_size, progress=progress))
    return scale_to_glove(pca(vectors, dim))


def random_word_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    """(n, dim) Gaussian vectors at GloVe's per-coordinate RMS (the no-prior-knowledge baseline)."""
    if dim < 1:
        raise OndeviceError(f"--embedding-dim must be >= 1, got {dim}")
    return (np.random.default_rng(seed).standard_normal((n, dim)) * GLOVE_RMS).astype(np.float32)
