"""Teacher logits cached on disk by content: teacher identity + the exact pair list, like the teacher-vector cache.

`cache_dir()/pair_logits/<key>/` is a `vector_cache` folder (the one disk cache of ondevice): `vectors.npy`
(float32 (n, outputs), memory-mapped while filling), `key.json` (what the key was made of), `state.json` (the
finished chunks, each checked finite before it is marked) and `rows.npy` (a hash per pair), so an interrupted run
resumes, a second run computes nothing, and a pair another list already holds is copied, not scored again.
Folders of the earlier layout (`logits.npy`, `identity.json`) are adopted in place. No pickle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.io import cache_dir
from ondevice.vector_cache import cached_rows


def pair_texts(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Each pair as one text, the JSON of [a, b]: unambiguous, and order kept (a teacher's logit is not symmetric)."""
    return [json.dumps([x, y], ensure_ascii=False) for x, y in zip(a, b)]


def pairs_sha256(a: Sequence[str], b: Sequence[str], texts: Sequence[str] | None = None) -> str:
    """Hex sha256 of the pair list: its `pair_texts` (pass them when already made), one per line."""
    h = hashlib.sha256()
    for t in pair_texts(a, b) if texts is None else texts:
        h.update(t.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _check_logits(rows: np.ndarray, what: str) -> None:
    if not np.isfinite(rows).all():
        raise OndeviceError(f"{what}: the teacher gave non-finite logits; check its weights")


def _adopt_old_layout(folder: Path) -> None:
    """Rename a folder of the earlier pair-logit layout to the VectorCache names (its state format is read as is)."""
    for old, new in (("logits.npy", "vectors.npy"), ("identity.json", "key.json")):
        if (folder / old).is_file() and not (folder / new).exists():
            (folder / old).rename(folder / new)


def cached_logits(identity: dict, a: Sequence[str], b: Sequence[str],
                  fn: Callable[[list[str], list[str]], np.ndarray], outputs: int, chunk: int = 1024,
                  root: Path | None = None, progress: bool = True) -> np.ndarray:
    """`fn(a, b)` (float32 (n, outputs)) for the pairs, computed once per (identity, pair) and resumable by chunk.

    Pairs that another pair list of the same teacher already scored (the training pairs inside a DiPair run's
    list, the augmentation pairs DSE scores on their own) are copied from that cache, not scored again."""
    if len(a) != len(b):
        raise OndeviceError(f"got {len(a)} first and {len(b)} second sentences; pairs need equal counts")
    n = len(a)
    if n == 0:
        return np.zeros((0, outputs), np.float32)
    texts = pair_texts(a, b)  # a pair is one text to the row cache: its key and its donor hash
    key_src = {"teacher": identity, "pairs_sha256": pairs_sha256(a, b, texts), "n": n, "outputs": outputs}
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    root = root or cache_dir() / "pair_logits"
    _adopt_old_layout(root / key)

    def score(pairs: list[str]) -> np.ndarray:
        xy = [json.loads(t) for t in pairs]
        return np.asarray(fn([x for x, _ in xy], [y for _, y in xy]), np.float32).reshape(len(xy), outputs)

    rows, _ = cached_rows(root, "teacher", identity, texts, score, chunk=chunk, check=_check_logits, progress=progress,
                          desc="teacher logits", dim=outputs, dtype=np.float32, key=(key, key_src), unit="pair")
    return np.array(rows)


def teacher_logits(teacher, a: Sequence[str], b: Sequence[str], progress: bool = True, root: Path | None = None) -> np.ndarray:
    """Cached logits of a `CrossEncoderTeacher` for the pairs."""
    return cached_logits(teacher.identity, a, b, teacher.logits, teacher.spec.num_outputs, root=root, progress=progress)
