"""Disk cache of encodings (ondevice.vector_cache): one .npy per (encoder identity, representation, distinct texts). No pickle."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.io import cache_dir, write_json
from ondevice.vector_cache import cached_rows


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


CHUNK = 4096  # distinct texts per cached chunk of a long list: an interrupted run keeps the finished chunks


def _finite(rows: np.ndarray, what: str) -> None:
    """Float encodings must be finite before their chunk is marked done (codes, integers, always are)."""
    if rows.dtype.kind == "f" and not np.isfinite(rows).all():
        raise OndeviceError(f"{what}: the encoder produced NaN or inf values; check its weights")


class EncodingCache:
    """Arrays keyed by identity + tag + texts; `root=None` disables the cache (always compute).

    Stored with the same mechanism as the teacher's vectors (ondevice.vector_cache): one memory-mapped
    `.npy` per (encoder identity, tag, distinct text list), filled chunk by chunk, reusing rows that the same
    encoder already has for other text lists.
    """

    def __init__(self, root: str | Path | None = None, chunk: int = CHUNK):
        self.root = Path(root) if root is not None else None
        self.chunk = chunk
        self.hits = 0
        self.misses = 0

    def get(self, identity: dict[str, Any], tag: str, texts: Sequence[str],
            fn: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """Cached `fn(texts)` (computed on distinct texts) for the encoder described by `identity`."""
        # imported on use: at the top it would close an import cycle through the ondevice.eval package
        from ondevice.eval.encoders import identity_key

        if self.root is None:
            self.misses += 1
            return unique_encode(texts, fn)
        folder = self.root / identity_key(identity)
        if not (folder / "identity.json").is_file():
            write_json(folder / "identity.json", json.loads(json.dumps(identity, sort_keys=True)))
        computed = False

        def encode_distinct(distinct: list[str]) -> np.ndarray:
            nonlocal computed
            arr, computed = cached_rows(folder, "tag", {"tag": tag}, distinct, fn, chunk=self.chunk, check=_finite)
            return np.asarray(arr)

        arr = unique_encode(texts, encode_distinct)
        if computed:
            self.misses += 1
        else:
            self.hits += 1
        return arr
