"""Disk cache of encodings: one .npy per (encoder identity, representation, exact text list). No pickle."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.io import atomic_path, cache_dir, sha256_text, write_json


def default_cache_root() -> Path:
    """Where `ondevice eval` keeps encodings: cache_dir()/eval."""
    return cache_dir() / "eval"


def unique_encode(texts: Sequence[str], fn: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """`fn` over the distinct texts only, scattered back to input order (benchmarks repeat sentences)."""
    index: dict[str, int] = {}
    inverse = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    out = np.asarray(fn(list(index)))
    if out.shape[0] != len(index):
        raise ValueError(f"encoder returned {out.shape[0]} rows for {len(index)} texts")
    return out[inverse]


CHUNK = 4096  # distinct texts per cached piece of a long list: an interrupted run keeps the finished pieces


class EncodingCache:
    """Arrays keyed by identity + tag + texts; `root=None` disables the cache (always compute)."""

    def __init__(self, root: str | Path | None = None, chunk: int = CHUNK):
        self.root = Path(root) if root is not None else None
        self.chunk = chunk
        self.hits = 0
        self.misses = 0

    def get(self, identity: dict[str, Any], tag: str, texts: Sequence[str],
            fn: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """Cached `fn(texts)` (computed on distinct texts) for the encoder described by `identity`."""
        from ondevice.eval.encoders import identity_key

        if self.root is None:
            self.misses += 1
            return unique_encode(texts, fn)
        folder = self.root / identity_key(identity)
        path = folder / f"{tag}-{sha256_text(texts)[:24]}-{len(texts)}.npy"
        arr = _load(path, len(texts))
        if arr is not None:
            self.hits += 1
            return arr
        self.misses += 1
        if not (folder / "identity.json").is_file():
            write_json(folder / "identity.json", json.loads(json.dumps(identity, sort_keys=True)))
        parts: list[Path] = []
        arr = unique_encode(texts, lambda distinct: self._chunked(folder, tag, distinct, fn, parts))
        _save(path, arr)
        for part in parts:  # the whole list is saved now; its pieces would only double the disk use
            part.unlink(missing_ok=True)
        return arr

    def _chunked(self, folder: Path, tag: str, texts: list[str], fn: Callable[[list[str]], np.ndarray],
                 parts: list[Path]) -> np.ndarray:
        """`fn(texts)` piece by piece, each piece cached, so a long encoding can resume after an interruption."""
        if len(texts) <= self.chunk:
            return np.asarray(fn(texts))
        pieces = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            path = folder / "parts" / f"{tag}-{sha256_text(part)[:24]}-{len(part)}.npy"
            arr = _load(path, len(part))
            if arr is None:
                arr = np.asarray(fn(part))
                _save(path, arr)
            parts.append(path)
            pieces.append(arr)
        return np.concatenate(pieces)


def _load(path: Path, rows: int) -> np.ndarray | None:
    """A cached array with `rows` rows, or None (absent or damaged: it gets recomputed)."""
    if not path.is_file():
        return None
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return arr if arr.shape[0] == rows else None


def _save(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, arr, allow_pickle=False)
