import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.static_vectors import GLOVE_RMS, pca, random_word_vectors, scale_to_glove, teacher_word_vectors


def test_pca_keeps_the_top_variance_directions():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6)) * np.array([10, 5, 1, 0.1, 0.1, 0.1]) + 3.0
    y = pca(x, 2)
    assert y.shape == (200, 2)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)
    var = y.var(0)
    assert var[0] > var[1] and var.sum() / (x - x.mean(0)).var(0).sum() > 0.99
    # brute force: the projection's variance equals the top eigenvalues of the covariance
    eig = np.sort(np.linalg.eigvalsh(np.cov(x.T, bias=True)))[::-1][:2]
    np.testing.assert_allclose(var, eig, rtol=1e-4)


def test_scale_and_random_match_glove_rms():
    x = scale_to_glove(np.random.default_rng(1).standard_normal((50, 7)) * 13)
    assert np.sqrt(np.mean(x**2)) == pytest.approx(GLOVE_RMS, rel=1e-5)
    r = random_word_vectors(4000, 8, seed=2)
    assert r.shape == (4000, 8) and np.sqrt(np.mean(r**2)) == pytest.approx(GLOVE_RMS, rel=0.05)
    assert np.array_equal(r, random_word_vectors(4000, 8, seed=2))


def test_bad_dimensions_are_one_line_errors():
    with pytest.raises(OndeviceError, match="embedding-dim"):
        pca(np.ones((5, 3)), 4)
    with pytest.raises(OndeviceError, match="embedding-dim"):
        random_word_vectors(3, 0, seed=0)


def test_teacher_word_vectors_separate_words(tiny_teacher):
    from ondevice.teacher import Teacher

    words = ["cat", "dog", "sat", "mat", "ran", "red", "blue", "house", "tree"]
    v = teacher_word_vectors(Teacher(tiny_teacher), words, dim=4, progress=False)
    assert v.shape == (9, 4) and np.isfinite(v).all()
    assert len({tuple(np.round(r, 5)) for r in v}) == 9  # every word gets its own vector
    np.testing.assert_array_equal(v, teacher_word_vectors(Teacher(tiny_teacher), words, dim=4, progress=False))
