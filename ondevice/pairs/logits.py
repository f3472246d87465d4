"""Teacher logits cached on disk by content: teacher identity + the exact pair list, like the teacher-vector cache.

`cache_dir()/pair_logits/<key>/` holds `logits.npy` (float32 (n, outputs), memory-mapped while filling),
`identity.json` (what the key was made of) and `state.json` (rows done), so an interrupted run resumes and a
second run computes nothing. No pickle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.io import cache_dir, read_json, write_json


def pairs_sha256(a: Sequence[str], b: Sequence[str]) -> str:
    """Hex sha256 of the pair list (each pair as 'a<TAB>b<LF>', with tabs and newlines escaped)."""
    h = hashlib.sha256()
    for x, y in zip(a, b):
        h.update(json.dumps([x, y], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def cached_logits(identity: dict, a: Sequence[str], b: Sequence[str],
                  fn: Callable[[list[str], list[str]], np.ndarray], outputs: int, chunk: int = 1024,
                  root: Path | None = None, progress: bool = True) -> np.ndarray:
    """`fn(a, b)` (float32 (n, outputs)) for the pairs, computed once per (identity, pairs) and resumable by chunk."""
    from tqdm.auto import tqdm

    if len(a) != len(b):
        raise OndeviceError(f"got {len(a)} first and {len(b)} second sentences; pairs need equal counts")
    n = len(a)
    key_src = {"teacher": identity, "pairs_sha256": pairs_sha256(a, b), "n": n, "outputs": outputs}
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    folder = (root or cache_dir() / "pair_logits") / key
    folder.mkdir(parents=True, exist_ok=True)
    path, state_path = folder / "logits.npy", folder / "state.json"
    done = 0
    if state_path.is_file() and path.is_file():
        done = int(read_json(state_path, "logit cache state")["done"])
        arr = np.lib.format.open_memmap(path, mode="r+")
        if arr.shape != (n, outputs):
            raise OndeviceError(f"logit cache {folder} has shape {arr.shape}, expected {(n, outputs)}; delete that folder")
    else:
        write_json(folder / "identity.json", key_src)
        arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, outputs))
        write_json(state_path, {"done": 0, "n": n})
    if done < n:
        with tqdm(total=n, initial=done, desc="teacher logits", unit="pair", disable=not progress) as bar:
            while done < n:
                stop = min(n, done + chunk)
                rows = np.asarray(fn(list(a[done:stop]), list(b[done:stop])), np.float32).reshape(stop - done, outputs)
                if not np.isfinite(rows).all():  # never mark rows done that hold bad values
                    raise OndeviceError(f"the teacher gave non-finite logits for pairs {done}..{stop - 1}; check its weights")
                arr[done:stop] = rows
                arr.flush()
                done = stop
                write_json(state_path, {"done": done, "n": n})
                bar.update(stop - bar.n)
    del arr
    return np.array(np.load(path, mmap_mode="r"))


def teacher_logits(teacher, a: Sequence[str], b: Sequence[str], progress: bool = True, root: Path | None = None) -> np.ndarray:
    """Cached logits of a `CrossEncoderTeacher` for the pairs."""
    return cached_logits(teacher.identity, a, b, teacher.logits, teacher.spec.num_outputs, root=root, progress=progress)
