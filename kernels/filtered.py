"""Exact Hamming k-NN that skips rows by their attributes inside the scan: filtered search and rescoring shortlists.

A row is allowed when its uint64 tag mask holds every bit of `tags_all`, at least one bit of `tags_any` (when
non-zero) and its int32 category is one of `categories` (when given). Disallowed rows never enter a heap, so a search
returns k rows whenever k allowed rows exist (a post-filter on the top k would not). The kernel returns row positions
(not ids) so a caller can gather per-row data (int8 vectors) for the same rows; ties go to the smaller id, as in knn.

One kernel source serves every width: codes whose width is a multiple of 8 bytes are scanned as uint64 words, the
others byte by byte (both with the same SWAR popcount), so only two types per mode are ever compiled. The database is
cut into one chunk per thread; each chunk keeps its own sorted top-k per query and the chunks are merged in numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from ondevice.kernels.hamming import _numba_threads


@njit(cache=True, inline="always")
def _pop(x):
    x = np.uint64(x)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def _allowed(tag, cat, tags_all, tags_any, cats, use_cats):
    if (tag & tags_all) != tags_all:
        return False
    if tags_any != 0 and (tag & tags_any) == 0:
        return False
    if use_cats:
        # `cats` is sorted: a binary search keeps long category lists cheap
        lo, hi = 0, cats.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            if cats[mid] < cat:
                lo = mid + 1
            else:
                hi = mid
        return lo < cats.shape[0] and cats[lo] == cat
    return True


@njit(cache=True, inline="always")
def _scan_chunk(codes, queries, k, ids, tags, cats_row, tags_all, tags_any, cats, use_cats, lo, hi, c, hd, hr, hid,
                keep):
    nq, nw = queries.shape
    has_ids = ids.shape[0] > 0
    has_tags = tags.shape[0] > 0
    has_cats = cats_row.shape[0] > 0
    # First the allowed rows of the chunk, written unconditionally and counted by the test's result: no branch to
    # mispredict on a random filter; then the distances of those rows only (a sparse filter reads few codes).
    cnt = lo
    for r in range(lo, hi):
        tag = tags[r] if has_tags else np.uint64(0)
        cat = cats_row[r] if has_cats else np.int32(0)
        keep[cnt] = r
        cnt += 1 if _allowed(tag, cat, tags_all, tags_any, cats, use_cats) else 0
    for j in range(lo, cnt):
        r = keep[j]
        rid = ids[r] if has_ids else np.int64(r)
        for q in range(nq):
            d = np.int64(0)
            for w in range(nw):
                d += _pop(codes[r, w] ^ queries[q, w])
            # the chunk's top k for query q is kept sorted by (distance, id); -1 marks an empty slot
            last = k - 1
            if hr[c, q, last] >= 0 and (d > hd[c, q, last] or (d == hd[c, q, last] and rid > hid[c, q, last])):
                continue
            j = last
            while j > 0 and (hr[c, q, j - 1] < 0 or d < hd[c, q, j - 1] or (d == hd[c, q, j - 1] and rid < hid[c, q, j - 1])):
                hd[c, q, j] = hd[c, q, j - 1]
                hr[c, q, j] = hr[c, q, j - 1]
                hid[c, q, j] = hid[c, q, j - 1]
                j -= 1
            hd[c, q, j] = d
            hr[c, q, j] = r
            hid[c, q, j] = rid


def _scan_all_impl(codes, queries, k, ids, tags, cats_row, tags_all, tags_any, cats, use_cats, bounds, hd, hr, hid,
                   keep):
    for c in prange(bounds.shape[0] - 1):
        _scan_chunk(codes, queries, k, ids, tags, cats_row, tags_all, tags_any, cats, use_cats,
                    bounds[c], bounds[c + 1], c, hd, hr, hid, keep)


_scan_parallel = njit(parallel=True, cache=True)(_scan_all_impl)
_scan_serial = njit(cache=True)(_scan_all_impl)


def filtered_knn(codes: np.ndarray, queries: np.ndarray, k: int, ids: np.ndarray | None, tags: np.ndarray | None,
                 categories_of_rows: np.ndarray | None, tags_all: int, tags_any: int,
                 categories: np.ndarray | None, threads: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top k allowed rows per query: (int32 distances, int64 ids, int64 rows), each (nq, k), by (distance, id), -1 padded."""
    n, nb = codes.shape
    nq = queries.shape[0]
    if nb % 8 == 0:  # whole 64-bit words: an eighth of the popcounts
        codes_w = np.ascontiguousarray(codes).view(np.uint64)
        queries_w = np.ascontiguousarray(queries).view(np.uint64)
    else:
        codes_w, queries_w = np.ascontiguousarray(codes), np.ascontiguousarray(queries)
    nchunks = int(max(1, min(threads, n // 64 or 1)))
    bounds = np.linspace(0, n, nchunks + 1).astype(np.int64)
    hd = np.zeros((nchunks, nq, k), np.int64)
    hr = np.full((nchunks, nq, k), -1, np.int64)
    hid = np.full((nchunks, nq, k), -1, np.int64)
    empty_i64, empty_u64, empty_i32 = np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.int32)
    use_cats = categories is not None
    cats = np.sort(np.asarray(categories, np.int32)) if use_cats else empty_i32
    args = (codes_w, queries_w, k, empty_i64 if ids is None else np.ascontiguousarray(ids, np.int64),
            empty_u64 if tags is None else np.ascontiguousarray(tags, np.uint64),
            empty_i32 if categories_of_rows is None else np.ascontiguousarray(categories_of_rows, np.int32),
            np.uint64(tags_all), np.uint64(tags_any), cats, use_cats, bounds, hd, hr, hid,
            np.empty(n, np.int32 if n < (1 << 31) else np.int64))  # allowed rows: 4 bytes per row of scratch
    if nchunks == 1:
        _scan_serial(*args)
    else:
        with _numba_threads(nchunks):
            _scan_parallel(*args)
    # merge the chunks' sorted lists: empty slots sort last, then (distance, id)
    hd = hd.transpose(1, 0, 2).reshape(nq, -1)
    hr = hr.transpose(1, 0, 2).reshape(nq, -1)
    hid = hid.transpose(1, 0, 2).reshape(nq, -1)
    empty = hr < 0
    order = np.lexsort((hid, hd, empty), axis=-1)[:, :k]
    rows = np.take_along_axis(hr, order, -1)
    out_d = np.where(rows >= 0, np.take_along_axis(hd, order, -1), -1).astype(np.int32)
    out_i = np.where(rows >= 0, np.take_along_axis(hid, order, -1), -1).astype(np.int64)
    return out_d, out_i, rows
