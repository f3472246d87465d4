"""Projections shared by the binarizers: PCA basis, components and whitening, against numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.projections import orthogonal_rows, pca_basis, pca_components, random_projection, whitening

SCALES = np.array([8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0])  # variances 64, 16, 4, 1, 0.25, 0.0625, 0


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    """Anisotropic vectors in a random rotation, off-center, with one direction of no variance at all."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(4000, len(SCALES))) * SCALES
    rot = np.linalg.qr(rng.normal(size=(len(SCALES), len(SCALES))))[0]
    return (z @ rot.T + 3.0).astype(np.float32)


def test_pca_basis_matches_numpy(x):
    mean, vals, axes = pca_basis(x)
    ref = np.linalg.eigvalsh(np.cov(x.T.astype(np.float64)))[::-1]
    np.testing.assert_allclose(mean, x.mean(0), atol=1e-5)
    np.testing.assert_allclose(vals, np.maximum(ref, 0), rtol=1e-6, atol=1e-9)
    assert np.all(np.diff(vals) <= 0)
    np.testing.assert_allclose(axes.T @ axes, np.eye(len(SCALES)), atol=1e-9)
    # signs fixed: each axis's largest-magnitude entry is positive, so a refit gives the same bits
    assert np.all(axes[np.argmax(np.abs(axes), axis=0), np.arange(axes.shape[1])] > 0)
    np.testing.assert_array_equal(pca_components(x, 3)[1], axes[:, :3])


@pytest.mark.parametrize("variance,k", [(0.5, 1), (0.7, 1), (0.8, 2), (0.9, 2), (0.96, 3), (0.992, 4), (0.998, 5), (1.0, 6)])
def test_whitening_keeps_the_axes_that_hold_the_variance(x, variance, k):
    """k = the fewest top axes holding `variance` of the total (cumulative shares 0.75, 0.94, 0.985, 0.996, 0.999, 1),
    never the zero-variance one; the whitened columns are uncorrelated with unit variance."""
    mean, T = whitening(x, variance)
    assert T.shape == (len(SCALES), k)
    z = (x - mean) @ T
    np.testing.assert_allclose(np.cov(z.T).reshape(k, k), np.eye(k), atol=1e-6)


def test_whitening_refuses_constant_vectors():
    with pytest.raises(OndeviceError, match="do not vary"):
        whitening(np.ones((10, 4), np.float32), 0.99)


def test_random_projection_is_reproducible_and_bounded():
    w = random_projection(5, 64, 7)
    np.testing.assert_array_equal(w, random_projection(5, 64, 7))
    assert w.shape == (64, 5) and np.abs(w).max() <= 1 / 8
    assert not np.array_equal(w, random_projection(5, 64, 8))


@pytest.mark.parametrize("bits,dim", [(3, 7), (7, 7), (20, 7)])
def test_orthogonal_rows_are_orthogonal_per_block_and_keep_norms_and_first_direction(bits, dim):
    w = random_projection(dim, bits, 5)
    o = orthogonal_rows(w)
    assert o.shape == w.shape and o.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(o, axis=1), np.linalg.norm(w, axis=1), rtol=1e-5)
    for start in range(0, bits, dim):
        block = o[start : start + dim].astype(np.float64)
        gram = block @ block.T
        np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-6)
        # Gram-Schmidt in order: each block's first row keeps its direction, so the first bit is the random one
        np.testing.assert_allclose(o[start], w[start], rtol=1e-5, atol=1e-7)
    # orthogonalized within blocks only: rows of different blocks are as random as before
    if bits > dim:
        assert abs(float(o[0] @ o[dim])) > 1e-6
