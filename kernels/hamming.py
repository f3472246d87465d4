"""Exact Hamming k-NN and range search over packed binary codes, multi-threaded with Numba.

Codes are uint8 rows in ondevice's bit order (see ondevice.bits); any whole number of bytes per code works and
nothing is copied or padded up front: kernels read rows in place with unaligned loads (memmaps included).

How the scan is organised (the reasons are in BENCHMARKS.md):
- The database is cut into one contiguous chunk per thread; each chunk keeps its own top-k heap per query and the
  heaps are merged at the end, so threads never share state.
- A chunk is scanned in L1-sized tiles and every query of the batch runs over a tile before the next tile is read,
  so a batch reads the database from memory once.
- Few queries ("rows" kernel): each row's distance is one fully unrolled XOR/popcount/reduce, bound by memory.
- Many queries ("blocks" kernel): each tile is first interleaved 8 rows at a time, word by word, into a small
  per-thread buffer; a query then compares 8 rows per vector instruction with no horizontal sums.
- Each distance is compared with the heap's current k-th best (a vector compare in the blocks kernel), so heap
  bookkeeping runs only for real candidates. Ties are broken by the smaller id.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import numpy as np
from numba import njit, prange
from ondevice.kernels.intrinsics import (
    LANES,
    block_distances,
    load_word,
    prefetch,
    row_distance,
    rows8_distances,
    rows8_query_words,
    rows8_supports,
)

PATHS = ("native", "portable")
PATH_ENV = "ONDEVICE_HAMMING_PATH"
TILE_BYTES = 16 * 1024  # database bytes scanned by the whole batch before moving on; fits L1 with the queries
BLOCKS_MIN_QUERIES = 4  # below this the interleaving pass costs more than it saves
PREFETCH_BYTES = 2048  # single-query scans ask for the rows 2 KB ahead: ~10% faster than the hardware prefetcher alone
MIN_CHUNK_BYTES = 256 << 10  # a thread's share below this costs more to hand out than to scan (~30 us)
QUERY_SLICE_HEAP_BYTES = 64 << 20  # top-k heap memory per kernel call; larger batches are cut into slices
_FAR = 1 << 62  # admission threshold of a heap that is not full yet


def _host_features() -> tuple[str, str]:
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


def resolve_path(path: str | None = None) -> str:
    """'native' or 'portable' from the argument, else $ONDEVICE_HAMMING_PATH, else `auto` (see host_path)."""
    choice = (path or os.environ.get(PATH_ENV) or "auto").lower()
    if choice == "auto":
        return host_path()
    if choice not in PATHS:
        raise ValueError(f"unknown Hamming kernel path {choice!r}; use one of auto, {', '.join(PATHS)}")
    return choice


# ---------------------------------------------------------------------------------------------- top-k heaps
# One max-heap of (distance, id) per (chunk, query) "slot", stored flat: slot s owns [s*k, s*k + k).
# The root is the worst kept pair, so a candidate only needs comparing with the root.


@njit(cache=True)
def _better(d1, i1, d2, i2):
    return d1 < d2 or (d1 == d2 and i1 < i2)


@njit(cache=True)
def _sift_down(hd, hi, base, size, d, i):
    """Put (d, i) at the root of the heap hd/hi[base : base+size] and restore the heap order."""
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= size:
            break
        if c + 1 < size and _better(hd[base + c], hi[base + c], hd[base + c + 1], hi[base + c + 1]):
            c += 1  # the worse child moves up
        if not _better(d, i, hd[base + c], hi[base + c]):
            break
        hd[base + pos] = hd[base + c]
        hi[base + pos] = hi[base + c]
        pos = c
    hd[base + pos] = d
    hi[base + pos] = i


@njit(cache=True)
def _offer(hd, hi, hn, slot, k, d, i):
    """Keep (d, i) in slot's top-k heap if it is among the k best seen so far."""
    base = slot * k
    n = hn[slot]
    if n < k:
        pos = n
        while pos > 0:
            parent = (pos - 1) // 2
            if not _better(hd[base + parent], hi[base + parent], d, i):
                break
            hd[base + pos] = hd[base + parent]
            hi[base + pos] = hi[base + parent]
            pos = parent
        hd[base + pos] = d
        hi[base + pos] = i
        hn[slot] = n + 1
    elif _better(d, i, hd[base], hi[base]):
        _sift_down(hd, hi, base, k, d, i)


@njit(cache=True)
def _threshold(hd, hn, slot, k, strict):
    """Largest distance that can still enter the slot's heap; `strict` when later rows have larger ids."""
    if hn[slot] < k:
        return _FAR
    return hd[slot * k] - strict


@njit(parallel=True, cache=True)
def _merge(hd, hi, hn, nchunks, k, out_d, out_i):
    """Merge each query's per-chunk heaps (size k) into sorted (distance, id) rows of out_*, -1 padded."""
    nq = out_d.shape[0]
    for q in prange(nq):
        md = np.empty(k, np.int64)
        mi = np.empty(k, np.int64)
        mn = np.zeros(1, np.int64)
        for c in range(nchunks):
            slot = c * nq + q
            for j in range(hn[slot]):
                _offer(md, mi, mn, 0, k, hd[slot * k + j], hi[slot * k + j])
        n = mn[0]
        for end in range(n - 1, 0, -1):  # heapsort: move the worst to the end, shrink, repeat
            d = md[end]
            i = mi[end]
            md[end] = md[0]
            mi[end] = mi[0]
            _sift_down(md, mi, 0, end, d, i)
        for j in range(n):
            out_d[q, j] = md[j]
            out_i[q, j] = mi[j]
        for j in range(n, out_d.shape[1]):
            out_d[q, j] = -1
            out_i[q, j] = -1


# ---------------------------------------------------------------------------------------------- scan kernels


class _Kernels:
    """The scan kernels compiled for one code width (bytes) and popcount path; the width is a compile-time constant."""

    def __init__(self, nbytes: int, pop: int):
        self.nbytes = nbytes
        self.tile_rows = max(LANES, TILE_BYTES // nbytes // LANES * LANES)
        self.words = (nbytes + 7) // 8  # 64-bit words per row in the interleaved buffer, tail zero-padded
        self.rows, self.blocks, self.range_rows, self.rows8 = _build(nbytes, pop, self.tile_rows)


def _build(NB: int, POP: int, TILE: int):  # upper case: compile-time constants frozen into the kernels
    W = (NB + 7) // 8
    FULL, TAIL = divmod(NB, 8)
    QW = rows8_query_words(FULL)  # words per query in the rows8 pattern

    @njit(parallel=True, cache=True)
    def rows(codes, queries, k, ids, strict, bounds, hd, hi, hn):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        for c in prange(bounds.shape[0] - 1):
            cand_r = np.empty(TILE, np.int64)
            cand_d = np.empty(TILE, np.int64)
            for start in range(bounds[c], bounds[c + 1], TILE):
                stop = min(start + TILE, bounds[c + 1])
                for q in range(nq):
                    slot = c * nq + q
                    thr = _threshold(hd, hn, slot, k, strict)
                    # Branch-free pass: every row is written, only rows within thr advance the cursor.
                    nc = 0
                    for r in range(start, stop):
                        for j in range((NB + 63) // 64):
                            prefetch(codes, r * NB + PREFETCH_BYTES + 64 * j)
                        d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                        cand_r[nc] = r
                        cand_d[nc] = d
                        nc += d <= thr
                    for j in range(nc):
                        if cand_d[j] <= thr:  # thr drops as the heap fills
                            r = cand_r[j]
                            _offer(hd, hi, hn, slot, k, cand_d[j], ids[r] if has_ids else r)
                            thr = _threshold(hd, hn, slot, k, strict)

    @njit(parallel=True, cache=True)
    def blocks(codes, qwords, k, ids, strict, bounds, hd, hi, hn):
        nq = qwords.shape[0] // W
        has_ids = ids.shape[0] > 0
        for c in prange(bounds.shape[0] - 1):
            buf = np.zeros(TILE * W, np.uint64)
            cand_d = np.empty(TILE, np.int64)  # 8 distances per candidate block
            cand_b = np.empty(TILE // LANES, np.int64)
            cand_m = np.empty(TILE // LANES, np.int64)
            for start in range(bounds[c], bounds[c + 1], TILE):
                nrows = min(TILE, bounds[c + 1] - start)
                for j in range(nrows):  # interleave: word w of row j -> buf[(j // 8) * 8W + 8w + j % 8]
                    src = (start + j) * NB
                    dst = (j >> 3) * (W * LANES) + (j & 7)
                    for w in range(FULL):
                        buf[dst + LANES * w] = load_word(codes, src + 8 * w, 8)
                    if TAIL > 0:
                        buf[dst + LANES * FULL] = load_word(codes, src + 8 * FULL, TAIL)
                nblk = (nrows + LANES - 1) // LANES
                last = (1 << (nrows - (nblk - 1) * LANES)) - 1  # lanes past the tile's end hold stale rows
                for q in range(nq):
                    slot = c * nq + q
                    thr = _threshold(hd, hn, slot, k, strict)
                    nc = 0
                    for b in range(nblk):  # no branch, no call: the query words stay in registers
                        m = block_distances(buf, b * W * LANES, qwords, q * W, W, POP, thr, cand_d, nc * LANES)
                        cand_b[nc] = b
                        cand_m[nc] = m
                        nc += m != 0
                    for j in range(nc):
                        b = cand_b[j]
                        m = cand_m[j]
                        if b == nblk - 1:
                            m &= last
                        for lane in range(LANES):
                            d = cand_d[j * LANES + lane]
                            if (m >> lane) & 1 and d <= thr:  # thr drops as the heap fills
                                r = start + b * LANES + lane
                                _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                                thr = _threshold(hd, hn, slot, k, strict)

    @njit(parallel=True, cache=True)
    def range_rows(codes, queries, radius, ids, bounds, counts, cursor, out_d, out_i, fill):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        for c in prange(bounds.shape[0] - 1):
            for start in range(bounds[c], bounds[c + 1], TILE):
                stop = min(start + TILE, bounds[c + 1])
                for q in range(nq):
                    slot = c * nq + q
                    for r in range(start, stop):
                        d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                        if d < radius:
                            if fill:
                                p = cursor[slot]
                                out_d[p] = d
                                out_i[p] = ids[r] if has_ids else r
                                cursor[slot] = p + 1
                            else:
                                counts[slot] += 1

    @njit(parallel=True, cache=True)
    def rows8(codes, qpattern, k, ids, strict, bounds, hd, hi, hn):
        nq = qpattern.shape[0] // QW
        has_ids = ids.shape[0] > 0
        for c in prange(bounds.shape[0] - 1):
            cand_d = np.empty(TILE, np.int64)
            cand_b = np.empty(TILE // LANES, np.int64)
            cand_m = np.empty(TILE // LANES, np.int64)
            for start in range(bounds[c], bounds[c + 1], TILE):
                nrows = min(TILE, bounds[c + 1] - start)
                nblk = nrows // LANES
                for q in range(nq):
                    slot = c * nq + q
                    thr = _threshold(hd, hn, slot, k, strict)
                    nc = 0
                    for b in range(nblk):
                        for j in range(NB * LANES // 64):  # rows8 widths make 8 rows a whole number of lines
                            prefetch(codes, (start + b * LANES) * NB + PREFETCH_BYTES + 64 * j)
                        m = rows8_distances(codes, (start + b * LANES) * NB, qpattern, q * QW, FULL, POP, thr,
                                            cand_d, nc * LANES)
                        cand_b[nc] = b
                        cand_m[nc] = m
                        nc += m != 0
                    for j in range(nc):
                        m = cand_m[j]
                        for lane in range(LANES):
                            d = cand_d[j * LANES + lane]
                            if (m >> lane) & 1 and d <= thr:
                                r = start + cand_b[j] * LANES + lane
                                _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                                thr = _threshold(hd, hn, slot, k, strict)
                    # qpattern starts with the query's own words, so it doubles as the query row here.
                    for r in range(start + nblk * LANES, start + nrows):  # the ragged end of the last chunk
                        d = row_distance(codes, r * NB, qpattern, q * QW * 8, NB, POP)
                        if d <= thr:
                            _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                            thr = _threshold(hd, hn, slot, k, strict)

    return rows, blocks, range_rows, (rows8 if TAIL == 0 and rows8_supports(FULL) else None)


_KERNELS: dict[tuple[int, int], _Kernels] = {}


def _kernels(nbytes: int, path: str) -> _Kernels:
    key = (nbytes, PATHS.index(path))
    if key not in _KERNELS:
        _KERNELS[key] = _Kernels(*key)
    return _KERNELS[key]


# ---------------------------------------------------------------------------------------------- public API


@contextlib.contextmanager
def _numba_threads(threads: int) -> Iterator[None]:
    import numba

    before = numba.get_num_threads()
    want = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    if want == before:  # setting costs a few microseconds, which matters for small databases
        yield
        return
    numba.set_num_threads(want)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def default_threads() -> int:
    """Threads used when none are asked for: every thread Numba was started with."""
    import numba

    return numba.config.NUMBA_NUM_THREADS


def _check_codes(codes: np.ndarray, what: str) -> np.ndarray:
    codes = np.asarray(codes)  # a memmap becomes a plain ndarray view, no copy
    if codes.dtype != np.uint8 or codes.ndim != 2:
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
        ids = np.empty(0, np.int64)
    else:
        ids = np.asarray(ids)
        if ids.dtype != np.int64 or ids.shape != (codes.shape[0],):
            raise ValueError(f"ids must be int64 of shape ({codes.shape[0]},), got {ids.dtype} {ids.shape}")
        ids = np.ascontiguousarray(ids)
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    n = codes.shape[0]
    nchunks = max(1, min(threads, n // LANES, n * codes.shape[1] // MIN_CHUNK_BYTES))
    # Chunk edges on multiples of 8 rows keep every chunk's blocks whole except the last one's.
    bounds = np.arange(nchunks + 1, dtype=np.int64) * (n // LANES) // nchunks * LANES
    bounds[-1] = n
    return codes, queries, ids, threads, bounds


def knn(codes: np.ndarray, queries: np.ndarray, k: int, *, ids: np.ndarray | None = None,
        ids_ascending: bool | None = None, threads: int | None = None,
        path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest codes per query: (int32 distances, int64 ids), each (nq, k), sorted, ties by smaller id, -1 padded."""
    codes, queries, ids, threads, bounds = _prepare(codes, queries, ids, threads)
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    nq, nb = queries.shape
    if ids_ascending is None:
        ids_ascending = ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))
    kk = min(k, codes.shape[0])  # heaps never need more than n entries
    out_d = np.full((nq, k), -1, np.int32)
    out_i = np.full((nq, k), -1, np.int64)
    if kk == 0 or nq == 0:
        return out_d, out_i
    kern = _kernels(nb, resolve_path(path))
    nchunks = len(bounds) - 1
    strict = 1 if ids_ascending else 0
    # Queries go in slices so the per-thread heaps stay small (threads x slice x k x 16 bytes) for any batch.
    step = max(BLOCKS_MIN_QUERIES, min(nq, QUERY_SLICE_HEAP_BYTES // (16 * kk * nchunks)))
    with _numba_threads(threads):
        for q0 in range(0, nq, step):
            q = queries[q0 : q0 + step]
            m = len(q)
            hd = np.empty(nchunks * m * kk, np.int64)
            hi = np.empty(nchunks * m * kk, np.int64)
            hn = np.zeros(nchunks * m, np.int64)
            if m >= BLOCKS_MIN_QUERIES:
                qwords = np.zeros((m, kern.words * 8), np.uint8)
                qwords[:, :nb] = q
                kern.blocks(codes, qwords.view(np.uint64).reshape(-1), kk, ids, strict, bounds, hd, hi, hn)
            elif kern.rows8 is not None:
                words = q.view(np.uint64)
                reps = rows8_query_words(nb // 8) // (nb // 8)
                qpattern = (np.tile(words, (1, reps)) if reps > 1 else words).reshape(-1)
                kern.rows8(codes, qpattern, kk, ids, strict, bounds, hd, hi, hn)
            else:
                kern.rows(codes, q, kk, ids, strict, bounds, hd, hi, hn)
            _merge(hd, hi, hn, nchunks, kk, out_d[q0 : q0 + m], out_i[q0 : q0 + m])
    return out_d, out_i


def range_search(codes: np.ndarray, queries: np.ndarray, radius: int, *, ids: np.ndarray | None = None,
                 threads: int | None = None, path: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All codes with distance < radius (as FAISS): (lims int64 (nq+1,), int32 distances, int64 ids), by (distance, id)."""
    codes, queries, ids, threads, bounds = _prepare(codes, queries, ids, threads)
    nq, nb = queries.shape
    nchunks = len(bounds) - 1
    counts = np.zeros(nchunks * nq, np.int64)
    empty_d = np.empty(0, np.int64)
    kern = _kernels(nb, resolve_path(path))
    with _numba_threads(threads):
        # Two passes (count, then fill) keep the kernel free of allocation; range search is not the hot path.
        kern.range_rows(codes, queries, int(radius), ids, bounds, counts, counts, empty_d, empty_d, False)
        per = counts.reshape(nchunks, nq)
        lims = np.zeros(nq + 1, np.int64)
        np.cumsum(per.sum(axis=0), out=lims[1:])
        # Results are laid out query-major, chunk-minor, so each query's hits are contiguous.
        starts = lims[:-1][None, :] + np.cumsum(per, axis=0) - per
        cursor = np.ascontiguousarray(starts).reshape(-1)
        out_d = np.empty(lims[-1], np.int64)
        out_i = np.empty(lims[-1], np.int64)
        kern.range_rows(codes, queries, int(radius), ids, bounds, counts, cursor, out_d, out_i, True)
    qidx = np.repeat(np.arange(nq), np.diff(lims))
    order = np.lexsort((out_i, out_d, qidx))
    return lims, out_d[order].astype(np.int32), out_i[order]
