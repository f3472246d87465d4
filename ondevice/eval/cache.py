"""Disk cache of encodings: one .npy per (encoder identity, representation, exact text list). No pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

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


class EncodingCache:
    """Arrays keyed by identity + tag + texts; `root=None` disables the cache (always compute)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else None
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
        if path.is_file():
            try:
                arr = np.load(path, allow_pickle=False)
                if arr.shape[0] == len(texts):
                    self.hits += 1
                    return arr
            except (OSError, ValueError):
                pass  # a damaged entry is recomputed and overwritten below
        self.misses += 1
        arr = unique_encode(texts, fn)
        if not (folder / "identity.json").is_file():
            write_json(folder / "identity.json", json.loads(json.dumps(identity, sort_keys=True)))
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)
        return arr
