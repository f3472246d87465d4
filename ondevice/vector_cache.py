"""One disk cache for rows computed from texts (teacher vectors, eval encodings, codes): content-addressed,
memory-mapped, filled chunk by chunk so an interrupted run resumes, and able to reuse the finished rows of
other caches of the same encoder by sentence hash. No pickle: `.npy` and JSON only.

Layout: <root>/<key>/ with key.json (what the rows are), vectors.npy (n, dim), state.json (finished chunks)
and rows.npy (a 64-bit hash per text, for reuse by other text lists).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, read_json, sha256_text, write_json

Check = Callable[[np.ndarray, str], None]


def row_hashes(sentences: Sequence[str]) -> np.ndarray:
    """64-bit content hash of each sentence (blake2b): lets another sentence list reuse these rows."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")
                        for s in sentences), dtype=np.uint64, count=len(sentences))


def check_vectors(vectors: np.ndarray, normalized: bool, what: str) -> None:
    """Refuse non-finite or degenerate (all-zero, or not unit-length when normalized) float vectors."""
    if not np.isfinite(vectors).all():
        raise OndeviceError(f"{what}: the encoder produced non-finite vectors; check its weights")
    norms = np.linalg.norm(vectors, axis=1)
    if (norms == 0).any() or (normalized and np.abs(norms - 1).max() > 1e-3):
        raise OndeviceError(f"{what}: the encoder produced degenerate vectors (zero or not unit length); check it")


def cache_key(field: str, identity: dict[str, Any], texts: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """(folder name, key source) of the rows of the encoder `identity` for exactly `texts`."""
    key_src = {field: identity, "corpus": sha256_text(texts), "n": len(texts)}
    return hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24], key_src


LOCK_NAME = "fill.lock"


def _try_lock(fd: int, block: bool) -> bool:
    """Lock the open file `fd` exclusively (flock on POSIX, a byte lock on Windows); False if held elsewhere."""
    try:
        # the file-lock module differs per platform
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not block:
                    return False
                time.sleep(0.5)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


@contextmanager
def fill_lock(folder: Path) -> Iterator[None]:
    """Hold `folder`'s fill lock: one process at a time creates and fills a cache folder; a second one waits,
    then finds the chunks done and reuses them (without it both would compute everything, and a second process
    creating the folder's array could truncate the first one's). The lock dies with its process."""
    lock = folder / LOCK_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if lock.is_symlink() or (lock.exists() and not lock.is_file()):
            raise OndeviceError(f"cache {folder}: {LOCK_NAME} is not a plain file (a folder or link stands where the "
                                "lock file goes); remove it and run again")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        raise OndeviceError(f"cannot use the cache {folder} ({exc.strerror or type(exc).__name__}); check "
                            "ONDEVICE_CACHE names a writable folder") from None
    try:
        if not _try_lock(fd, block=False):
            print(f"waiting for another process that is filling the cache {folder}", file=sys.stderr, flush=True)
            _try_lock(fd, block=True)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def chunk_sum(rows: np.ndarray) -> str:
    """A checksum of one chunk's rows as stored (blake2b of their bytes): state.json keeps one per finished chunk,
    so rows damaged on disk later (zeroed, overwritten, a bad sector) are found before anything trains on them."""
    return hashlib.blake2b(np.ascontiguousarray(rows).tobytes(), digest_size=16).hexdigest()


def _sums(state: Any) -> dict[str, str]:
    """The per-chunk checksums of a state.json ({} for one written before they were kept)."""
    sums = state.get("sums") if isinstance(state, dict) else None
    return {k: v for k, v in sums.items() if isinstance(v, str)} if isinstance(sums, dict) else {}


def damaged_chunks(vectors: np.ndarray, chunk: int, done: set[int], sums: dict[str, str], check: Check | None,
                   what: str) -> set[int]:
    """The finished chunks whose rows no longer match their checksum (or, for a chunk of an older cache without
    one, fail `check`: zero rows, rows of the wrong length for a normalized teacher, non-finite values)."""
    bad = set()
    for c in sorted(done):
        rows = np.asarray(vectors[c * chunk: min(len(vectors), (c + 1) * chunk)])
        if str(c) in sums:
            if chunk_sum(rows) != sums[str(c)]:
                bad.add(c)
            continue
        try:
            (check or plain_rows)(rows, what)
        except OndeviceError:
            bad.add(c)
    return bad


def plain_rows(rows: np.ndarray, what: str) -> None:
    """The check of a finished chunk without a checksum when its cache names none: float rows must be finite and
    none of them all zero (what a zeroed or never-written stretch of the file holds)."""
    if rows.dtype.kind == "f" and (not np.isfinite(rows).all() or (rows.ndim == 2 and rows.shape[1] and
                                                                    not np.any(rows, axis=1).all())):
        raise OndeviceError(f"{what}: rows that are zero or not finite")


def parse_state(state: Any, n: int | None = None) -> tuple[int, set[int]] | None:
    """(chunk size, finished chunk numbers) of a state.json, or None unless every field is sound: a chunk size
    >= 1, chunk numbers inside the array, and the row count `n` when given."""
    if not isinstance(state, dict) or not _is_int(state.get("chunk")) or state["chunk"] < 1:
        return None
    rows = state.get("n", n)
    if not _is_int(rows) or rows < 0 or (n is not None and rows != n) or not isinstance(state.get("chunks"), list):
        return None
    chunks = state["chunks"]
    last = -(-rows // state["chunk"])
    if not all(_is_int(c) and 0 <= c < last for c in chunks):
        return None
    return int(state["chunk"]), set(chunks)


class VectorCache:
    """A memory-mapped (n, dim) array file filled chunk by chunk, in any order, with the done chunks recorded.

    A chunk is marked done only after its rows are flushed and pass `check`, so an interrupted or failed run
    never leaves rows marked done that hold bad values.
    """

    def __init__(self, folder: Path, n: int, dim: int, chunk: int, key_src: dict, dtype: Any = np.float32,
                 check: Check | None = None):
        if chunk < 1:
            raise OndeviceError(f"cache chunk must be >= 1, got {chunk}")
        self.folder, self.n, self.dim, self.check = folder, n, dim, check
        self.vec_path, self.state_path = folder / "vectors.npy", folder / "state.json"
        folder.mkdir(parents=True, exist_ok=True)
        self.chunk, self.done, self.sums = chunk, set(), {}
        if self.state_path.is_file() and self.vec_path.is_file():
            state = read_json(self.state_path, "vector cache state")
            try:
                self.vectors = np.lib.format.open_memmap(self.vec_path, mode="r+")
            except (OSError, ValueError, EOFError) as exc:
                raise OndeviceError(f"cache {folder}: vectors.npy cannot be opened ({exc}); delete that folder") from None
            if self.vectors.shape != (n, dim) or self.vectors.dtype != np.dtype(dtype):
                raise OndeviceError(f"cache {folder} holds {self.vectors.dtype} {self.vectors.shape}, expected "
                                    f"{np.dtype(dtype)} {(n, dim)}; delete that folder")
            parsed = parse_state(state, n)
            self.sums = _sums(state)
            if parsed is not None:
                self.chunk, self.done = parsed
                bad = damaged_chunks(self.vectors, self.chunk, self.done, self.sums, check, f"cache {folder}")
                if bad:  # damaged on disk since they were written: computed again, never used
                    print(f"cache {folder}: {len(bad)} finished chunk(s) do not match what was written (damaged "
                          "on disk); computing them again", file=sys.stderr, flush=True)
                    self.done -= bad
                    self._save_state()
            elif isinstance(state, dict) and "chunks" not in state and _is_int(state.get("done")) and state["done"] >= 0:
                # format of earlier versions: a finished prefix of `done` rows, rewritten as chunks (donors read those)
                prefix = int(state["done"])
                self.done = {c for c in range(self.n_chunks) if min(n, (c + 1) * self.chunk) <= prefix}
                bad = damaged_chunks(self.vectors, self.chunk, self.done, {}, check, f"cache {folder}")
                if bad:  # no checksums in that format: rows that fail the check are computed again, never used
                    print(f"cache {folder}: {len(bad)} finished chunk(s) of an older cache hold zero or non-finite "
                          "rows; computing them again", file=sys.stderr, flush=True)
                    self.done -= bad
                self._save_state()
            else:
                raise OndeviceError(f"cache {folder} has a state.json this ondevice cannot trust (chunk size, chunk "
                                    "numbers or row count wrong); delete that folder and run again")
        else:
            write_json(folder / "key.json", key_src)
            self.vectors = np.lib.format.open_memmap(self.vec_path, mode="w+", dtype=dtype, shape=(n, dim))

    def done_rows(self) -> np.ndarray:
        """Boolean mask of the rows whose chunk is finished."""
        mask = np.zeros(self.n, dtype=bool)
        for c in self.done:
            lo, hi = self.bounds(c)
            mask[lo:hi] = True
        return mask

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk)

    def bounds(self, c: int) -> tuple[int, int]:
        return c * self.chunk, min(self.n, (c + 1) * self.chunk)

    def pending(self) -> list[int]:
        return [c for c in range(self.n_chunks) if c not in self.done]

    def write(self, c: int, rows: np.ndarray, normalized: bool | None = None) -> None:
        """Store chunk `c` and mark it done (after checking its values; `normalized` adds check_vectors)."""
        lo, hi = self.bounds(c)
        rows = np.asarray(rows, dtype=self.vectors.dtype)
        if rows.shape != (hi - lo, self.dim):
            raise OndeviceError(f"chunk {c} has shape {rows.shape}, expected {(hi - lo, self.dim)}")
        if self.check is not None:
            self.check(rows, f"cache {self.folder} chunk {c}")
        if normalized is not None:
            check_vectors(rows, normalized, f"cache {self.folder} chunk {c}")
        self.vectors[lo:hi] = rows
        self.vectors.flush()
        self.done.add(c)
        self.sums[str(c)] = chunk_sum(self.vectors[lo:hi])
        self._save_state()

    def _save_state(self) -> None:
        """Write state.json: the finished chunks and each one's checksum (atomically)."""
        sums = {str(c): self.sums[str(c)] for c in sorted(self.done) if str(c) in self.sums}
        write_json(self.state_path, {"chunk": self.chunk, "chunks": sorted(self.done), "n": self.n, "sums": sums})

    def result(self) -> np.ndarray:
        """The finished vectors, read-only and memory-mapped."""
        if self.pending():
            raise OndeviceError(f"cache {self.folder} is missing {len(self.pending())} chunks; run again to finish it")
        del self.vectors
        return np.load(self.vec_path, mmap_mode="r")


class Donors:
    """Finished rows of other caches of the same encoder, looked up by sentence hash (no recomputation)."""

    def __init__(self, root: Path, field: str, identity: dict, skip: Path, dtype: Any = None):
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # sorted hashes, their rows, vectors
        for key in sorted(root.glob("*/key.json")) if root.is_dir() else []:
            folder = key.parent
            if folder == skip or not (folder / "rows.npy").is_file():
                continue
            try:
                meta = read_json(key, "cache key")
                if not isinstance(meta, dict) or meta.get(field) != identity:
                    continue
                hashes = np.load(folder / "rows.npy")
                vectors = np.load(folder / "vectors.npy", mmap_mode="r")
                state = read_json(folder / "state.json", "cache state")
                parsed = parse_state(state, len(vectors))
            except (OndeviceError, OSError, ValueError, EOFError):
                continue  # an unreadable cache is just not a donor
            if parsed is None or hashes.shape != (len(vectors),) or hashes.dtype != np.uint64 or vectors.ndim != 2 \
                    or (dtype is not None and vectors.dtype != dtype):
                continue
            cache = VectorCache.__new__(VectorCache)
            cache.n, (cache.chunk, cache.done) = len(hashes), parsed
            try:  # a donor's damaged rows must not spread into this cache: only its intact chunks are lent
                cache.done -= damaged_chunks(vectors, cache.chunk, cache.done, _sums(state), None, str(folder))
            except (OSError, ValueError):
                continue
            rows = np.flatnonzero(cache.done_rows())
            order = np.argsort(hashes[rows], kind="stable")
            self.parts.append((hashes[rows][order], rows[order], vectors))

    def fill(self, hashes: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Copy known rows into `out`; return the mask of rows still missing."""
        missing = np.ones(len(hashes), dtype=bool)
        for keys, rows, vectors in self.parts:
            if not missing.any():
                break
            if vectors.shape[1:] != out.shape[1:]:
                continue
            want = np.flatnonzero(missing)
            pos = np.minimum(np.searchsorted(keys, hashes[want]), len(keys) - 1)
            hit = keys[pos] == hashes[want]
            if hit.any():
                src = rows[pos[hit]]
                order = np.argsort(src)  # read the memory-mapped donor in file order
                out[want[hit][order]] = vectors[src[order]]
                missing[want[hit]] = False
        return missing


def cached_rows(root: Path, field: str, identity: dict[str, Any], texts: Sequence[str],
                fn: Callable[[list[str]], np.ndarray], chunk: int = 2048, check: Check | None = None,
                progress: bool = False, desc: str = "encoding", dim: int | None = None,
                dtype: Any = np.float32, key: tuple[str, dict[str, Any]] | None = None,
                unit: str = "sent") -> tuple[np.ndarray, bool]:
    """(fn(texts) as a read-only memmap, whether anything was computed), from the cache under `root`.

    The folder is keyed by `{field: identity}` + the exact text list (or by `key`, a (folder name, key source)
    whose source holds `{field: identity}`). Rows are computed chunk by chunk (finished chunks survive an
    interruption) and rows other caches of the same identity already hold are copied, not recomputed. Without
    `dim` the row width and dtype come from the first computed chunk. One process fills a folder at a time
    (`fill_lock`); a finished folder is read without the lock.
    """
    name, key_src = key or cache_key(field, identity, texts)
    folder = root / name
    if _finished(folder, len(texts)):  # a finished folder is only read (no lock needed), once its rows check out
        found = _intact(folder, dim, check)
        if found is not None:
            return found, False
    with fill_lock(folder):
        return _fill(folder, key_src, field, identity, texts, fn, chunk, check, progress, desc, dim, dtype, unit)


def _intact(folder: Path, dim: int | None, check: Check | None) -> np.ndarray | None:
    """A finished folder's vectors when every chunk matches its checksum and the row width is `dim`; else None
    (the fill under the lock then recomputes what is damaged)."""
    try:
        state = read_json(folder / "state.json", "vector cache state")
        vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        parsed = parse_state(state, len(vectors))
        if parsed is None or (dim is not None and vectors.shape[1] != dim):
            return None
        if damaged_chunks(vectors, parsed[0], parsed[1], _sums(state), check, f"cache {folder}"):
            return None
    except (OndeviceError, OSError, ValueError, EOFError):
        return None
    return vectors


def _unusable(folder: Path, n: int, dim: int | None) -> tuple[str | None, int, Any]:
    """(why the folder's array cannot be resumed, or None; its row width; its dtype)."""
    try:
        head = np.load(folder / "vectors.npy", mmap_mode="r")
    except (OSError, ValueError, EOFError) as exc:  # truncated, empty, or not an array at all
        return f"its array cannot be read ({(str(exc).splitlines() or ['damaged'])[0][:120]})", 0, None
    if head.ndim != 2 or len(head) != n or head.dtype.kind != "f":
        return f"its array is {head.dtype} {head.shape}, not ({n}, dim) floats", 0, None
    if dim is not None and head.shape[1] != dim:
        return f"its rows are {head.shape[1]} wide, not {dim}", 0, None
    # a state.json that cannot be trusted is refused by VectorCache with one line (someone edited it: look first)
    return None, int(head.shape[1]), head.dtype


def _discard(folder: Path, reason: str) -> None:
    """Remove a cache folder's damaged array and state (under its fill lock) so that it is computed again."""
    print(f"cache {folder}: {reason}; computing it again", file=sys.stderr, flush=True)
    for name in ("vectors.npy", "state.json", "rows.npy"):
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass


def _finished(folder: Path, n: int) -> bool:
    """Whether the folder's state records every chunk of n rows done (states are written atomically)."""
    try:
        parsed = parse_state(read_json(folder / "state.json", "vector cache state"), n)
        head = np.load(folder / "vectors.npy", mmap_mode="r")
    except (OndeviceError, OSError, ValueError, EOFError):
        return False
    return parsed is not None and head.ndim == 2 and len(head) == n and parsed[1] == set(range(-(-n // parsed[0])))


def _fill(folder: Path, key_src: dict[str, Any], field: str, identity: dict[str, Any], texts: Sequence[str],
          fn: Callable[[list[str]], np.ndarray], chunk: int, check: Check | None, progress: bool, desc: str,
          dim: int | None, dtype: Any, unit: str) -> tuple[np.ndarray, bool]:
    """`cached_rows` under the folder's fill lock: open or create the cache, then compute its pending chunks."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    root, n = folder.parent, len(texts)
    cache = None
    if (folder / "state.json").is_file() and (folder / "vectors.npy").is_file():
        problem, width, dtype_found = _unusable(folder, n, dim)
        if problem is not None:  # what a crash, a full disk or a bad sector left: computed again under the lock
            _discard(folder, problem)
        else:
            cache = VectorCache(folder, n, width, chunk, key_src, dtype_found, check)
            if not cache.pending():  # another process finished it while this one waited for the lock
                return cache.result(), False
    hashes = row_hashes(texts)
    donors = Donors(root, field, identity, skip=folder)

    def compute(lo: int, hi: int, like: np.ndarray | None) -> np.ndarray:
        if like is None:  # shape unknown yet: compute the whole chunk
            return np.asarray(fn(list(texts[lo:hi])))
        rows = np.zeros((hi - lo, *like.shape[1:]), dtype=like.dtype)
        missing = np.flatnonzero(donors.fill(hashes[lo:hi], rows))
        if len(missing):
            rows[missing] = fn([texts[lo + i] for i in missing])
        return rows

    first = None
    if cache is None and dim is not None:
        cache = VectorCache(folder, n, dim, chunk, key_src, dtype, check)
    elif cache is None:
        if n == 0:
            return np.asarray(fn([])), True
        step = min(chunk, n)
        # another text list of this encoder tells the row shape, so even the first chunk can reuse its rows
        first = compute(0, step, donors.parts[0][2][:1] if donors.parts else None)
        if first.ndim != 2 or len(first) != step:
            raise OndeviceError(f"encoder returned shape {first.shape} for {step} texts; expected ({step}, dim)")
        cache = VectorCache(folder, n, first.shape[1], chunk, key_src, first.dtype, check)
    if not (folder / "rows.npy").is_file():
        with atomic_path(folder / "rows.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, hashes)
    pending = cache.pending()
    done_rows = n - sum(cache.bounds(c)[1] - cache.bounds(c)[0] for c in pending)
    with tqdm(total=n, initial=done_rows, desc=desc, unit=unit, disable=not progress) as bar:
        for c in pending:
            lo, hi = cache.bounds(c)
            rows = first if (first is not None and c == 0) else compute(lo, hi, cache.vectors[:1])
            cache.write(c, rows)
            bar.update(hi - lo)
    return cache.result(), True
