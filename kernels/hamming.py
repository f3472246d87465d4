"""Exact Hamming k-NN and range search over packed binary codes: Numba kernels, serial or multi-threaded.

Codes are uint8 rows in ondevice's bit order (see ondevice.bits); any whole number of bytes per code works and
nothing is copied or padded up front: kernels read rows in place with unaligned loads (memmaps included).

How the scan is organised (the measurements behind it are in docs/results/search.md):
- Small searches run on the calling thread with no thread pool (serial kernels): below a few megabytes of work,
  starting a parallel region costs more than it saves. `plan_threads` picks the thread count from the work size;
  the crossover is measured per machine by `calibrate()` (a default is used until then).
- Larger databases are cut into one contiguous chunk per thread; each chunk keeps its own top-k heap per query
  (heaps padded apart, so threads never share state or a cache line) and the heaps are merged at the end: for a few
  queries inside the same call, after the parallel loop, so a search is one Numba call and one parallel launch.
- A chunk is scanned in L1-sized tiles and every query of the batch runs over a tile before the next tile is read,
  so a batch reads the database from memory once.
- Few queries ("rows"/"rows8" kernels): each row's distance is one fully unrolled XOR/popcount/reduce (8 rows at a
  time for 64/128/256-bit and multiple-of-512-bit codes), bound by memory.
- Many queries ("blocks" kernel): each tile is first interleaved 8 rows at a time, word by word, into a small
  per-thread buffer; a query then compares 8 rows per vector instruction with no horizontal sums.
- Each distance is compared with the heap's current k-th best, so heap bookkeeping runs only for real candidates.
  Ties are broken by the smaller id.
- Kernels are compiled with Numba's on-disk cache (`cache=True`): a new process loads them instead of compiling.
  Loading Numba itself still costs about half a second, so `oneshot_path` lets a one-shot command (the CLI) search
  small databases with plain numpy instead (the "numpy" path: same results, no Numba import).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np

from ondevice.errors import SettingError
from ondevice.io import cache_dir, write_json
from ondevice.results import cpu_details, cpu_model

PATHS = ("native", "portable", "numpy")
PATH_ENV = "ONDEVICE_HAMMING_PATH"
LANES = 8  # rows per block in the kernels; chunk edges fall on multiples of it
BLOCKS_MIN_QUERIES = 4  # below this the interleaving pass costs more than it saves
DEFAULT_PARALLEL_MIN_BYTES = 2 << 20  # work (code bytes x queries) per thread below which fewer threads are faster
QUERY_SLICE_HEAP_BYTES = 64 << 20  # top-k heap memory per kernel call; larger batches are cut into slices
SCRATCH_KEEP_WORDS = 1 << 18  # kernel scratch up to this size (2 MB) is kept per thread and reused across calls
ONESHOT_NUMPY_BYTES = 256 << 20  # oneshot_path: work below this is cheaper in numpy than loading Numba (~0.7 s)
CALIBRATION_NAME = "hamming_threads.json"


def _host_features() -> tuple[str, str]:
    # numba: loaded on first use (importing it costs about a second)
    import llvmlite.binding as ll
    from numba.core import config

    # Numba compiles for config.CPU_NAME/CPU_FEATURES when set (e.g. portable caches), else for the host.
    features = config.CPU_FEATURES if config.CPU_NAME else ll.get_host_cpu_features().flatten()
    return ll.get_process_triple(), features


@functools.cache  # asking LLVM for the host's features costs ~0.4 ms, more than a small search
def host_path() -> str:
    """The popcount path `auto` picks on this CPU: 'native' where LLVM has a fast vector popcount, else 'portable'."""
    triple, features = _host_features()
    flags = set(features.split(","))
    if triple.startswith(("aarch64", "arm64")) or "+avx512vpopcntdq" in flags or "+avx2" in flags:
        return "native"
    return "portable"


_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(PATH_ENV) if isinstance(_ENV_DATA, dict) else None


def _env_path() -> str | None:
    if _ENV_KEY is not None:  # os.environ.get costs ~1 us (key encoding, a KeyError), a fifth of a small search
        raw = _ENV_DATA.get(_ENV_KEY)
        return None if raw is None else os.environ.decodevalue(raw)
    return os.environ.get(PATH_ENV)


def resolve_path(path: str | None = None) -> str:
    """'native', 'portable' or 'numpy' from the argument, else $ONDEVICE_HAMMING_PATH, else `auto` (see host_path)."""
    choice = path or _env_path()
    if not choice:  # the common case, kept cheap: it runs on every search
        return host_path()
    choice = choice.lower()
    if choice == "auto":
        return host_path()
    if choice not in PATHS:
        raise SettingError(f"unknown Hamming kernel path {choice!r}; use one of auto, {', '.join(PATHS)}")
    return choice


def kernels_loaded() -> bool:
    """Whether this process has already loaded the Numba kernels (then they are the fastest path for any size)."""
    return "ondevice.kernels._scan" in sys.modules


def oneshot_path(n: int, nbytes: int, nq: int) -> str | None:
    """Path for a search that runs once in a fresh process: 'numpy' when that beats loading Numba, else None (auto)."""
    if os.environ.get(PATH_ENV) or kernels_loaded() or n * nbytes * max(1, nq) > ONESHOT_NUMPY_BYTES:
        return None
    return "numpy"


# ---------------------------------------------------------------------------------------------- threads


_SCAN: list = []  # the ondevice.kernels._scan module once imported (importing it loads Numba)


def _scan():
    if not _SCAN:
        from ondevice.kernels import _scan as scan

        _SCAN.append(scan)
    return _SCAN[0]


_KERNELS: dict = {}


def _kernels(nbytes: int, path: str):
    """The compiled kernels for one width and Numba path (imports Numba on first use)."""
    found = _KERNELS.get((nbytes, path))
    if found is None:
        found = _KERNELS[nbytes, path] = _scan().kernels(nbytes, PATHS.index(path))
    return found


@functools.cache
def default_threads() -> int:
    """Most threads a search uses: every thread Numba was started with (NUMBA_NUM_THREADS, default: all cores)."""
    import numba

    return numba.config.NUMBA_NUM_THREADS


def calibration_file():
    """Where `calibrate` stores this machine's measured thread crossover."""
    return cache_dir() / "kernels" / CALIBRATION_NAME


_PARALLEL_MIN_BYTES: list[int] = []


def parallel_min_bytes() -> int:
    """Work per thread (code bytes x queries) below which an extra thread does not pay: measured or the default.

    A calibration counts only on the machine that made it (same CPU and thread count): ~/.cache outlives a VM whose
    CPU changes between sessions, and another CPU's crossover can be 10x off."""
    if not _PARALLEL_MIN_BYTES:
        value = DEFAULT_PARALLEL_MIN_BYTES
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(calibration_file().read_text())
            if int(data["parallel_min_bytes"]) > 0 and data["machine"] == machine_identity():
                value = int(data["parallel_min_bytes"])
        _PARALLEL_MIN_BYTES.append(value)
    return _PARALLEL_MIN_BYTES[0]


def machine_identity() -> dict:
    """What a calibration depends on: the CPU (vendor, family, model, caches) and the threads a search may use."""
    return {"cpu_model": cpu_model(), "cpu": cpu_details(), "threads": default_threads()}


def plan_threads(n: int, nbytes: int, nq: int = 1, threads: int | None = None) -> int:
    """Threads (= database chunks) a search of nq queries over n codes uses; 1 means the serial kernels.

    `threads` is an upper bound (None: default_threads()); within it the count follows the work size, one thread
    per `parallel_min_bytes` of code bytes x queries, so a small search never pays for waking a thread pool.
    """
    if threads == 1:
        return 1
    pmb = _PARALLEL_MIN_BYTES[0] if _PARALLEL_MIN_BYTES else parallel_min_bytes()
    work = n * nbytes * nq
    if work < 2 * pmb:  # the common small case, decided without further calls
        return 1
    cap = default_threads() if threads is None else threads
    return int(max(1, min(cap, work // pmb, n // LANES)))


@functools.cache
def _thread_count_functions():
    """Numba's thread-count getter and setter: the raw ctypes pair behind numba.get/set_num_threads (0.13 / 0.44 us
    against 0.87 / 1.34 us, which re-check the pool at every call) where this Numba has them, else the public pair.
    The raw pair exists once the pool is launched, which the public getter does."""
    import numba

    numba.get_num_threads()
    from numba.np.ufunc import parallel

    raw = getattr(parallel, "_get_num_threads", None), getattr(parallel, "_set_num_threads", None)
    return raw if all(callable(f) for f in raw) else (numba.get_num_threads, numba.set_num_threads)


def _enter_threads(threads: int) -> tuple:
    """Set Numba's thread count for a parallel search; returns what _leave_threads needs to restore it (and torch's).

    numba's OpenMP layer shares libgomp with torch, and a parallel launch raises the calling thread's OpenMP thread
    count, which torch's ops then use: a `--threads 1` training run that searched codes in process (DSE/DiPair
    augmentation) ran every later op on two spinning threads. Only parallel searches come here, so the two calls
    on torch (when it is imported at all) never touch the serial hot path. A plain pair of calls rather than only
    a context manager: the generator costs ~1 us, which the few-query path (_fast_knn) does not pay."""
    torch = sys.modules.get("torch")
    # read before _thread_count_functions: its first call launches Numba's pool, which raises the OpenMP count itself
    torch_before = torch.get_num_threads() if torch is not None else 0
    get_threads, set_threads = _thread_count_functions()
    before = get_threads()
    want = max(1, min(threads, default_threads()))
    if want != before:  # setting costs a few microseconds, which matters for small databases
        set_threads(want)
    return before, want, torch, torch_before


def _leave_threads(state: tuple) -> None:
    """Restore the thread counts _enter_threads changed."""
    before, want, torch, torch_before = state
    if want != before:
        _thread_count_functions()[1](before)
    if torch is not None and torch.get_num_threads() != torch_before:
        torch.set_num_threads(torch_before)


@contextlib.contextmanager
def _numba_threads(threads: int) -> Iterator[None]:
    """Numba's thread count for a parallel search, restored after it (see _enter_threads)."""
    state = _enter_threads(threads)
    try:
        yield
    finally:
        _leave_threads(state)


_SCRATCH = threading.local()


def _scratch(words: int) -> np.ndarray:
    """An int64 work array of at least `words` entries: this thread's cached one when small enough."""
    if words > SCRATCH_KEEP_WORDS:
        return np.empty(words, np.int64)
    cached = getattr(_SCRATCH, "array", None)
    if cached is None or cached.shape[0] < words:
        cached = _SCRATCH.array = np.empty(max(words, 1 << 12), np.int64)
    return cached  # kernels initialise everything they read, so it is never cleared


# ---------------------------------------------------------------------------------------------- input checks


_U8 = np.dtype(np.uint8)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)


def _check_codes(codes: np.ndarray, what: str) -> np.ndarray:
    if type(codes) is not np.ndarray:
        codes = np.asarray(codes)  # a memmap becomes a plain ndarray view, no copy
    if (codes.dtype is not _U8 and codes.dtype != _U8) or codes.ndim != 2:
        raise ValueError(f"{what} must be a 2-d uint8 array of packed codes, got {codes.dtype} {codes.shape}")
    if codes.shape[1] == 0:
        raise ValueError(f"{what} have zero bytes per code")
    if not codes.flags.c_contiguous:
        codes = np.ascontiguousarray(codes)  # only strided views get here; rows must be contiguous to scan
    return codes


def _prepare(codes, queries, ids, threads):
    codes = _check_codes(codes, "codes")
    queries = _check_codes(queries, "queries")
    if queries.shape[1] != codes.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} bytes per code, the database {codes.shape[1]}")
    if ids is None:
        ids = _NO_IDS
    else:
        ids = np.asarray(ids)
        if ids.dtype != np.int64 or ids.shape != (codes.shape[0],):
            raise ValueError(f"ids must be int64 of shape ({codes.shape[0]},), got {ids.dtype} {ids.shape}")
        if not ids.flags.c_contiguous:
            ids = np.ascontiguousarray(ids)
    if threads is not None:
        threads = int(threads)
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
    return codes, queries, ids, threads


# Writable, like the arrays callers pass: Numba types a read-only array apart from a writable one, so a read-only
# sentinel made every kernel compile twice (once for searches without ids, once with); an empty array holds nothing
# to overwrite. Bounds are made per call for the same reason (a cached array would have to be read-only).
_NO_IDS = np.empty(0, np.int64)


def _bounds(n: int, nchunks: int) -> np.ndarray:
    bounds = np.empty(nchunks + 1, np.int64)
    if nchunks == 1:
        bounds[0], bounds[1] = 0, n
        return bounds
    _scan().chunk_bounds(bounds, n)
    return bounds


# ---------------------------------------------------------------------------------------------- public API


def knn(codes: np.ndarray, queries: np.ndarray, k: int, *, ids: np.ndarray | None = None,
        ids_ascending: bool | None = None, threads: int | None = None,
        path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest codes per query: (int32 distances, int64 ids), each (nq, k), sorted, ties by smaller id, -1 padded.

    threads=None chooses the thread count from the work size (see plan_threads); path picks the popcount path
    ('native', 'portable') or plain numpy ('numpy'); all give identical results.
    """
    if type(codes) is np.ndarray and type(queries) is np.ndarray and type(k) is int and path is None:
        found = _fast_knn(codes, queries, k, ids, ids_ascending, threads)
        if found is not None:
            return found
    codes, queries, ids, threads = _prepare(codes, queries, ids, threads)
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = codes.shape[0]
    nq, nb = queries.shape
    kk = min(k, n)  # heaps never need more than n entries
    if kk == 0 or nq == 0:
        return np.full((nq, k), -1, np.int32), np.full((nq, k), -1, np.int64)
    path = resolve_path(path)
    if path == "numpy":
        return _knn_numpy(codes, queries, k, ids)
    if ids_ascending is None:
        ids_ascending = ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))
    strict = 1 if ids_ascending else 0
    kern = _kernels(nb, path)
    nchunks = plan_threads(n, nb, nq, threads)
    out_d = np.empty((nq, k), np.int32)
    out_i = np.empty((nq, k), np.int64)
    bounds = _bounds(n, nchunks)
    if nchunks == 1 and nq < BLOCKS_MIN_QUERIES:  # the hot path of small searches: one call, nothing else
        scan = kern.rows8_serial or kern.rows_serial
        scan(codes, queries, kk, ids, strict, bounds,
             _scratch(nq * (2 * kk + 1 + kern.query_words) + kern.serial_temp + 2 * kk), out_d, out_i)
        return out_d, out_i
    # Queries go in slices so the per-thread heaps stay small (threads x slice x k x 16 bytes) for any batch.
    step = max(BLOCKS_MIN_QUERIES, min(nq, QUERY_SLICE_HEAP_BYTES // (16 * kk * nchunks)))
    if nchunks == 1:  # no thread pool at all; the serial kernels also write the sorted result
        if nq <= step:  # the usual case, without slicing
            scan = kern.blocks_serial if nq >= BLOCKS_MIN_QUERIES else (kern.rows8_serial or kern.rows_serial)
            scratch = _scratch(nq * (2 * kk + 1 + kern.query_words) + kern.serial_temp + 2 * kk)
            scan(codes, queries, kk, ids, strict, bounds, scratch, out_d, out_i)
            return out_d, out_i
        words = _scan().scratch_words
        for q0 in range(0, nq, step):
            q = queries[q0 : q0 + step]
            m = len(q)
            scan = kern.blocks_serial if m >= BLOCKS_MIN_QUERIES else (kern.rows8_serial or kern.rows_serial)
            scan(codes, q, kk, ids, strict, bounds, _scratch(words(nb, kern.tile_rows, 1, m, kk)),
                 out_d[q0 : q0 + m], out_i[q0 : q0 + m])
        return out_d, out_i
    merge, words = _scan().merge, _scan().scratch_words
    with _numba_threads(nchunks):
        for q0 in range(0, nq, step):
            q = queries[q0 : q0 + step]
            m = len(q)
            o_d, o_i = out_d[q0 : q0 + m], out_i[q0 : q0 + m]
            scratch = _scratch(words(nb, kern.tile_rows, nchunks, m, kk))
            if m < BLOCKS_MIN_QUERIES:  # the few-query kernels sort their result themselves
                (kern.rows8 or kern.rows)(codes, q, kk, ids, strict, bounds, scratch, o_d, o_i)
                continue
            kern.blocks(codes, q, kk, ids, strict, bounds, scratch, o_d, o_i)
            sq = m + _scan().HEAP_PAD  # heap slots per chunk (the parallel kernels' layout)
            hd, hi, hn, _ = _scan()._carve_heaps(scratch, nchunks, sq, kk)
            merge(hd, hi, hn, nchunks, sq, kk, o_d, o_i)
    return out_d, out_i


_FAST: dict = {}  # (code bytes, path) -> (Kernels, scratch words per query, fixed scratch words)
_FAST_PAR: dict = {}  # (code bytes, path, queries, k, chunks) -> (Kernels, scratch words)


def _fast_knn(codes, queries, k, ids, ids_ascending, threads):
    """The few-query fast path: fewer than BLOCKS_MIN_QUERIES queries, well-formed arrays; None when that does not hold.

    Everything knn checks is checked here too, only in the order that is cheapest for the common case; the search
    itself is one Numba call (`one`/`one_ids` for one chunk, 5-6 array arguments; `few_par` over several) into a
    cached per-thread scratch buffer, so the only allocations are the two result arrays.
    """
    cs, qs = codes.shape, queries.shape
    if (len(cs) != 2 or len(qs) != 2 or codes.dtype is not _U8 or queries.dtype is not _U8 or cs[1] != qs[1]
            or not 0 < qs[0] < BLOCKS_MIN_QUERIES or not 0 < k <= cs[0] or cs[1] == 0):
        return None
    n, nb = cs
    nq = qs[0]
    if threads != 1 and ((threads is not None and (type(threads) is not int or threads < 1)) or not _PARALLEL_MIN_BYTES):
        return None
    # as plan_threads: serial when threads=1 or the work is below two threads' worth
    nchunks = 1 if threads == 1 or n * nb * nq < 2 * _PARALLEL_MIN_BYTES[0] else plan_threads(n, nb, nq, threads)
    if not (codes.flags.c_contiguous and queries.flags.c_contiguous):
        return None
    if ids is not None and (type(ids) is not np.ndarray or ids.dtype != np.int64 or ids.shape != (n,)
                            or not ids.flags.c_contiguous or ids_ascending is None):
        return None
    # resolve_path(None) when $ONDEVICE_HAMMING_PATH is unset, without its two calls (~40 ns of a ~3.5 us search)
    path = host_path() if _ENV_KEY is not None and _ENV_KEY not in _ENV_DATA else resolve_path(None)
    if path == "numpy":
        return None
    if nchunks > 1:  # one parallel launch that also merges the chunks' heaps (scratch: bounds, heaps, temporaries)
        plan = _FAST_PAR.get((nb, path, nq, k, nchunks))
        if plan is None:
            kern = _kernels(nb, path)
            plan = _FAST_PAR[nb, path, nq, k, nchunks] = (
                kern, nchunks + 1 + _scan().scratch_words(nb, kern.tile_rows, nchunks, nq, k))
        kern, words = plan
        scratch = _scratch(words)
        out_d = np.empty((nq, k), _I32)
        out_i = np.empty((nq, k), _I64)
        strict = 1 if ids is None or ids_ascending else 0
        state = _enter_threads(nchunks)
        try:
            kern.few_par(codes, queries, k, _NO_IDS if ids is None else ids, strict, nchunks, scratch, out_d, out_i)
        finally:
            _leave_threads(state)
        return out_d, out_i
    fast = _FAST.get((nb, path))
    if fast is None:
        kern = _kernels(nb, path)
        fast = _FAST[nb, path] = (kern, kern.query_words + 1, kern.serial_temp + 2)
    kern, per_query, fixed = fast
    words = nq * (2 * k + per_query) + fixed + 2 * k
    scratch = getattr(_SCRATCH, "array", None)  # _scratch(words) without the call: this is the per-query hot path
    if scratch is None or scratch.shape[0] < words:
        scratch = _scratch(words)
    out_d = np.empty((nq, k), _I32)
    out_i = np.empty((nq, k), _I64)
    if ids is None:
        kern.one(codes, queries, k, scratch, out_d, out_i)
    else:
        kern.one_ids(codes, queries, k, ids, 1 if ids_ascending else 0, scratch, out_d, out_i)
    return out_d, out_i


def range_search(codes: np.ndarray, queries: np.ndarray, radius: int, *, ids: np.ndarray | None = None,
                 threads: int | None = None, path: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All codes with distance < radius (as FAISS): (lims int64 (nq+1,), int32 distances, int64 ids), by (distance, id)."""
    codes, queries, ids, threads = _prepare(codes, queries, ids, threads)
    nq, nb = queries.shape
    n = codes.shape[0]
    radius = int(radius)
    path = resolve_path(path)
    if path == "numpy":
        return _range_numpy(codes, queries, radius, ids)
    nchunks = plan_threads(n, nb, nq, threads)
    bounds = _bounds(n, nchunks)
    counts = np.zeros(nchunks * nq, np.int64)
    empty_d = np.empty(0, np.int64)
    kern = _kernels(nb, path)
    scan = kern.range_rows if nchunks > 1 else kern.range_rows_serial
    with _numba_threads(nchunks) if nchunks > 1 else contextlib.nullcontext():
        # Two passes (count, then fill) keep the kernel free of allocation; range search is not the hot path.
        scan(codes, queries, radius, ids, bounds, counts, counts, empty_d, empty_d, False)
        per = counts.reshape(nchunks, nq)
        lims = np.zeros(nq + 1, np.int64)
        np.cumsum(per.sum(axis=0), out=lims[1:])
        # Results are laid out query-major, chunk-minor, so each query's hits are contiguous.
        starts = lims[:-1][None, :] + np.cumsum(per, axis=0) - per
        cursor = np.ascontiguousarray(starts).reshape(-1)
        out_d = np.empty(lims[-1], np.int64)
        out_i = np.empty(lims[-1], np.int64)
        scan(codes, queries, radius, ids, bounds, counts, cursor, out_d, out_i, True)
    qidx = np.repeat(np.arange(nq), np.diff(lims))
    order = np.lexsort((out_i, out_d, qidx))
    return lims, out_d[order].astype(np.int32), out_i[order]


# ---------------------------------------------------------------------------------------------- numpy path

_NUMPY_ROWS_BYTES = 8 << 20  # database bytes per numpy step, so temporaries stay small for any database


def _distances_numpy(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """int64 Hamming distances of one query to every row, in steps of a few MB (np.bitwise_count)."""
    n, nb = codes.shape
    if nb % 8 == 0:
        codes, query = codes.view(np.uint64), query.view(np.uint64)
    dist = np.empty(n, np.int64)
    step = max(1, _NUMPY_ROWS_BYTES // nb)
    for s in range(0, n, step):
        np.bitwise_count(codes[s : s + step] ^ query).sum(axis=1, dtype=np.int64, out=dist[s : s + step])
    return dist


def _knn_numpy(codes, queries, k, ids):
    n = codes.shape[0]
    kk = min(k, n)
    out_d = np.full((len(queries), k), -1, np.int32)
    out_i = np.full((len(queries), k), -1, np.int64)
    for qi in range(len(queries)):
        dist = _distances_numpy(codes, queries[qi])
        if kk < n:  # every row tied with the k-th best is a candidate, so ties still go to the smaller id
            cand = np.flatnonzero(dist <= np.partition(dist, kk - 1)[kk - 1])
        else:
            cand = np.arange(n)
        cid = ids[cand] if ids.size else cand
        order = np.lexsort((cid, dist[cand]))[:kk]
        out_d[qi, :kk] = dist[cand[order]]
        out_i[qi, :kk] = cid[order]
    return out_d, out_i


def _range_numpy(codes, queries, radius, ids):
    lims, all_d, all_i = [0], [], []
    for qi in range(len(queries)):
        dist = _distances_numpy(codes, queries[qi])
        hit = np.flatnonzero(dist < radius)
        hid = ids[hit] if ids.size else hit
        order = np.lexsort((hid, dist[hit]))
        all_d.append(dist[hit[order]].astype(np.int32))
        all_i.append(hid[order].astype(np.int64))
        lims.append(lims[-1] + len(hit))
    return np.array(lims, np.int64), np.concatenate(all_d), np.concatenate(all_i)


# ---------------------------------------------------------------------------------------------- calibration


def calibrate(nbytes: int = 32, repeats: int = 15, save: bool = True, max_bytes: int = 64 << 20,
              seed: int = 0, progress=None) -> dict:
    """Measure where a second thread starts to pay on this machine (single query, k=10) and store it.

    Databases from 64 KB to `max_bytes` are searched on one thread and on default_threads() threads (forced: the
    current crossover must not decide which kernel runs, or a calibration could only ever confirm the one before);
    the first of two sizes in a row where threads are at least 10% faster (75th percentile of `repeats` calls, each
    the next of 16 random queries), halved, becomes `parallel_min_bytes` (the work each thread needs); without one,
    `max_bytes`. `progress(row)` is called after each size. Returns the measurements; with save=True writes them
    (with machine_identity()) to calibration_file() for every later process on this machine.
    """
    threads = default_threads()
    rng = np.random.default_rng(seed)
    rows = []
    crossover = None
    size = 64 << 10
    before = list(_PARALLEL_MIN_BYTES)
    _PARALLEL_MIN_BYTES[:] = [1]  # every size gets `threads` chunks (plan_threads still caps them at n // LANES)
    try:
        while size <= max_bytes:
            codes = rng.integers(0, 256, (size // nbytes, nbytes), dtype=np.uint8)
            # distinct queries: one repeated query lets the CPU learn that search's branches
            queries = rng.integers(0, 256, (16, nbytes), dtype=np.uint8)
            timings = {}
            for t in (1, threads):
                knn(codes, queries[:1], 10, threads=t)
                samples = []
                for r in range(max(2, repeats)):  # quantiles need two samples
                    q = queries[r % 16 : r % 16 + 1]
                    t0 = time.perf_counter()
                    knn(codes, q, 10, threads=t)
                    samples.append(time.perf_counter() - t0)
                # the 75th percentile, not the median: on a shared machine a thread pool's cost is in its tail
                timings[t] = statistics.quantiles(samples, n=4)[2]
            row = {"bytes": size, "serial_s": timings[1], "threaded_s": timings[threads],
                   "threaded_chunks": plan_threads(size // nbytes, nbytes, 1, threads)}
            rows.append(row)
            if progress is not None:
                progress(row)
            wins = threads > 1 and timings[threads] <= 0.9 * timings[1]
            if wins and crossover is not None:
                break  # two sizes in a row: a real crossover, not one lucky measurement
            crossover = size if wins else None
            size *= 2
    finally:
        _PARALLEL_MIN_BYTES[:] = before
    result = {"threads": threads, "nbytes": nbytes, "crossover_bytes": crossover, "seed": seed,
              "parallel_min_bytes": (crossover // 2) if crossover else max_bytes, "measurements": rows,
              "machine": machine_identity()}
    if save:
        write_json(calibration_file(), result)
        _PARALLEL_MIN_BYTES.clear()
    return result
