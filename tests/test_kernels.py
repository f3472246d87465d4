"""The Hamming k-NN and range-search kernels agree exactly with a brute-force numpy reference."""

from __future__ import annotations

import json

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ondevice.kernels import hamming as H

from ondevice.bits import hamming_reference

# Few distinct widths keep the number of compiled specializations (and cold-cache test time) small:
# 8, 72, 200, 256 and 1024 bits; 72 and 200 have a tail that is not a whole 64-bit word.
WIDTHS = (1, 9, 25, 32, 128)


@pytest.fixture(autouse=True, scope="module")
def _split_small_databases():
    """Production kernels keep small databases on one thread; here every database is split so chunk edges,
    per-chunk heaps and their merge are exercised on the small arrays the property tests use."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(H, "_PARALLEL_MIN_BYTES", [1])
        yield


def reference_knn(codes, queries, k, ids=None):
    """Brute force: sort each query's distances by (distance, id), keep k, pad with -1."""
    n = len(codes)
    ids = np.arange(n, dtype=np.int64) if ids is None else ids
    dist = hamming_reference(queries, codes) if n else np.zeros((len(queries), 0), np.int64)
    out_d = np.full((len(queries), k), -1, np.int64)
    out_i = np.full((len(queries), k), -1, np.int64)
    for q in range(len(queries)):
        order = np.lexsort((ids, dist[q]))[:k]
        out_d[q, : len(order)] = dist[q, order]
        out_i[q, : len(order)] = ids[order]
    return out_d, out_i


def reference_range(codes, queries, radius, ids):
    dist = hamming_reference(queries, codes)
    lims, out_d, out_i = [0], [], []
    for q in range(len(queries)):
        hit = np.nonzero(dist[q] < radius)[0]
        order = np.lexsort((ids[hit], dist[q, hit]))
        out_d.append(dist[q, hit][order])
        out_i.append(ids[hit][order])
        lims.append(lims[-1] + len(hit))
    return np.array(lims), np.concatenate(out_d), np.concatenate(out_i)


@st.composite
def problems(draw, widths=WIDTHS):
    nb = draw(st.sampled_from(widths))
    n = draw(st.integers(0, 300))
    nq = draw(st.sampled_from([1, 2, 5, 9]))  # below and above the blocks-kernel threshold
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.sampled_from([0.5, 0.03]))  # sparse bits: many equal distances (ties)
    codes = np.packbits(rng.random((n, nb * 8)) < density, axis=1, bitorder="little")
    if n and draw(st.booleans()):  # exact duplicates
        codes[rng.integers(0, n, n // 3)] = codes[rng.integers(0, n)]
    queries = np.packbits(rng.random((nq, nb * 8)) < density, axis=1, bitorder="little")
    if n:
        queries[0] = codes[rng.integers(0, n)]  # a query that is in the database
    kind = draw(st.sampled_from(["none", "ascending", "shuffled"]))
    ids = None
    if kind == "ascending":
        ids = np.cumsum(rng.integers(1, 5, n)).astype(np.int64)
    elif kind == "shuffled":
        ids = rng.permutation(3 * n + 1)[:n].astype(np.int64)
    k = draw(st.integers(1, n + 5))
    threads = draw(st.sampled_from([1, 2, 3, 4]))
    return codes, queries, ids, k, threads


# One test per width: each width compiles its own kernels (~50 s cold on a slow core), so that `make test`'s two
# workers can share them.
@pytest.mark.parametrize("nb", WIDTHS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_knn_matches_brute_force(nb, data):
    codes, queries, ids, k, threads = data.draw(problems(widths=(nb,)))
    d, i = H.knn(codes, queries, k, ids=ids, threads=threads)
    rd, ri = reference_knn(codes, queries, k, ids)
    assert d.dtype == np.int32 and i.dtype == np.int64 and d.shape == i.shape == (len(queries), k)
    np.testing.assert_array_equal(d, rd)
    np.testing.assert_array_equal(i, ri)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(widths=(9, 32)), st.integers(0, 80))
def test_range_search_matches_brute_force(problem, radius):
    codes, queries, ids, _, threads = problem
    ids = np.arange(len(codes), dtype=np.int64) if ids is None else ids
    lims, d, i = H.range_search(codes, queries, radius, ids=ids, threads=threads)
    rl, rd, ri = reference_range(codes, queries, radius, ids) if len(codes) else (np.zeros(len(queries) + 1), [], [])
    np.testing.assert_array_equal(lims, rl)
    np.testing.assert_array_equal(d, rd)
    np.testing.assert_array_equal(i, ri)


@pytest.mark.parametrize("nq", [1, 7])
def test_forced_portable_path_matches(monkeypatch, nq):
    """The SWAR popcount path (for CPUs without a fast vector popcount) gives identical results."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, (1000, 9), dtype=np.uint8)
    queries = rng.integers(0, 256, (nq, 9), dtype=np.uint8)
    monkeypatch.setenv(H.PATH_ENV, "portable")
    assert H.resolve_path() == "portable"
    d, i = H.knn(codes, queries, 20, threads=2)
    rd, ri = reference_knn(codes, queries, 20)
    np.testing.assert_array_equal(d, rd)
    np.testing.assert_array_equal(i, ri)
    monkeypatch.delenv(H.PATH_ENV)
    d2, i2 = H.knn(codes, queries, 20, threads=2, path="native")
    np.testing.assert_array_equal(d2, rd)
    np.testing.assert_array_equal(i2, ri)


def test_path_selection():
    assert H.host_path() in H.PATHS
    assert H.resolve_path("auto") == H.host_path()
    assert H.resolve_path("PORTABLE") == "portable"
    with pytest.raises(ValueError, match="unknown Hamming kernel path"):
        H.resolve_path("avx9000")


def test_tiles_blocks_and_chunks_with_many_ties():
    """Several L1 tiles per chunk, a ragged last block and 8-bit codes (every distance is tied with many)."""
    rng = np.random.default_rng(5)
    for nb in (1, 128):
        tile = H._kernels(nb, H.resolve_path()).tile_rows
        n = 3 * tile + 5
        codes = rng.integers(0, 256, (n, nb), dtype=np.uint8)
        queries = rng.integers(0, 256, (12, nb), dtype=np.uint8)
        ids = rng.permutation(n).astype(np.int64)
        for nq in (1, 12):
            d, i = H.knn(codes, queries[:nq], 50, ids=ids, threads=2)
            rd, ri = reference_knn(codes, queries[:nq], 50, ids)
            np.testing.assert_array_equal(d, rd)
            np.testing.assert_array_equal(i, ri)


def test_searches_with_and_without_ids_share_compiled_kernels():
    """Numba types a read-only array apart from a writable one: a read-only sentinel for "no ids" (or cached read-only
    bounds) made every kernel compile twice, once per kind of search. Each kernel has one signature for all of them
    on writable codes (the literal-typed ones come from calls inside other kernels, typed where they are compiled;
    read-only codes, e.g. a memmapped index searched by another test in this worker, are a type of their own)."""
    rng = np.random.default_rng(8)
    nb = 9  # compiled for test_knn_matches_brute_force already, in the same worker or from the disk cache
    codes = rng.integers(0, 256, (700, nb), dtype=np.uint8)
    ids = rng.permutation(700).astype(np.int64)
    for nq in (1, 3, H.BLOCKS_MIN_QUERIES + 1):
        q = rng.integers(0, 256, (nq, nb), dtype=np.uint8)
        for threads in (1, 2):
            for with_ids in (None, ids):
                d, i = H.knn(codes, q, 5, ids=with_ids, threads=threads)
                rd, ri = reference_knn(codes, q, 5, with_ids)
                np.testing.assert_array_equal(d, rd)
                np.testing.assert_array_equal(i, ri)
            H.range_search(codes, q, 30, threads=threads)
            H.range_search(codes, q, 30, ids=ids, threads=threads)
    kern = H._kernels(nb, H.resolve_path())
    for name in ("rows", "blocks", "range_rows", "rows_serial", "blocks_serial", "range_rows_serial", "few_par"):
        sigs = [s for s in getattr(kern, name).signatures
                if s[0].mutable and not any(isinstance(t, numba.types.Literal) for t in s)]
        assert len(sigs) == 1, (name, sigs)


@pytest.mark.parametrize("nb", [8, 32])
def test_rows8_passes_after_the_first(nb):
    """Narrow codes past the counting select's size: a short first pass, then whole-tile passes, and a ragged end;
    dense and sparse (tied) codes, with and without ids, k below and above a pass's candidates."""
    from ondevice.kernels import _scan

    rng = np.random.default_rng(200 + nb)
    tile = H._kernels(nb, H.resolve_path()).tile_rows
    n = _scan.SELECT_MAX_BYTES // nb + 2 * tile + 13
    dense = rng.integers(0, 256, (n, nb), dtype=np.uint8)
    sparse = np.packbits(rng.random((n, nb * 8)) < 0.05, axis=1, bitorder="little")
    for codes in (dense, sparse):
        queries = np.concatenate([codes[[n - 1]], rng.integers(0, 256, (1, nb), dtype=np.uint8)])
        for ids in (None, rng.permutation(n).astype(np.int64)):
            for k in (1, 10, 300):
                for q in range(2):
                    d, i = H.knn(codes, queries[q : q + 1], k, ids=ids, threads=1)
                    rd, ri = reference_knn(codes, queries[q : q + 1], k, ids)
                    np.testing.assert_array_equal(d, rd, err_msg=f"k={k}")
                    np.testing.assert_array_equal(i, ri, err_msg=f"k={k}")


@pytest.mark.parametrize("count_words", [0, 4])
def test_rows8_counted_first_tile(monkeypatch, count_words):
    """A chunk of at least four tiles starts by counting its first tile's k-th distance (COUNT_FIRST_MAX_WORDS);
    built with it for 64- and 256-bit codes and without it, serial and parallel, exact against brute force: dense
    and tied codes, ids out of order, k of 1, 10 and more than a tile's rows, nearest rows inside the first tile."""
    from ondevice.kernels import _scan

    monkeypatch.setattr(_scan, "COUNT_FIRST_MAX_WORDS", count_words)
    rng = np.random.default_rng(17 + count_words)
    for nb in (8, 32):
        kern = _scan.Kernels(nb, 0)  # a fresh build with the patched setting (its own kernel names)
        assert ("_count1" in kern.few_par.py_func.__name__) is (nb // 8 <= count_words)
        tile = kern.tile_rows
        n = max(_scan.SELECT_MAX_BYTES // nb, 8 * tile) + 2 * tile + 13  # past the counting select; 2 chunks of 4+ tiles
        dense = rng.integers(0, 256, (n, nb), dtype=np.uint8)
        tied = np.packbits(rng.random((n, nb * 8)) < 0.03, axis=1, bitorder="little")
        for codes in (dense, tied):
            # query 0 is the last row; query 1's 60 nearest rows sit in the first tile, 1 to 12 bits off (a first
            # tile's k-th distance counted too low would drop some of them)
            q = np.concatenate([codes[[n - 1]], rng.integers(0, 256, (1, nb), dtype=np.uint8)])
            bits = np.unpackbits(q[1])
            for j, row in enumerate(rng.choice(tile, 60, replace=False)):
                off = bits.copy()
                off[rng.choice(nb * 8, 1 + j % 12, replace=False)] ^= 1
                codes[row] = np.packbits(off)
            ids = rng.permutation(n).astype(np.int64)
            for k in (1, 10, tile + 5):
                d, i = np.empty((2, k), np.int32), np.empty((2, k), np.int64)
                for chunks in (1, 2):
                    if chunks == 1:
                        scratch = np.empty(2 + _scan.scratch_words(nb, tile, 1, 1, k), np.int64)
                        for j in range(2):
                            kern.one(codes, q[j : j + 1], k, scratch, d[j : j + 1], i[j : j + 1])
                        rd, ri = reference_knn(codes, q, k)
                    else:
                        scratch = np.empty(3 + _scan.scratch_words(nb, tile, 2, 2, k), np.int64)
                        kern.few_par(codes, q, k, ids, 0, 2, scratch, d, i)
                        rd, ri = reference_knn(codes, q, k, ids)
                    np.testing.assert_array_equal(d, rd, err_msg=f"nb={nb} k={k} chunks={chunks}")
                    np.testing.assert_array_equal(i, ri, err_msg=f"nb={nb} k={k} chunks={chunks}")


@pytest.mark.parametrize(("pass_tiles", "count_words"), [(1, 1), (4, 1), (4, 4)])
def test_rows8_long_passes(monkeypatch, pass_tiles, count_words):
    """Passes of several tiles (X4_PASS_TILES, X4_PASS_TILES_PARALLEL) collect a whole pass's candidates in their own
    buffers: exact against brute force, serial and parallel, where every row is a candidate (all codes equal, or each
    row closer than the last, ids out of order so ties stay in) and on dense codes; only widths whose first tile is
    counted (COUNT_FIRST_MAX_WORDS: 64-bit codes, or up to 256 bits as on the Zen 4) take long passes."""
    from ondevice.kernels import _scan

    monkeypatch.setattr(_scan, "X4_PASS_TILES", pass_tiles)
    monkeypatch.setattr(_scan, "X4_PASS_TILES_PARALLEL", pass_tiles)
    monkeypatch.setattr(_scan, "COUNT_FIRST_MAX_WORDS", count_words)
    rng = np.random.default_rng(23 + pass_tiles + count_words)
    for nb in (8, 32):
        kern = _scan.Kernels(nb, 0)  # a fresh build with the patched setting (its own kernel names)
        long_passes = pass_tiles > 1 and nb // 8 <= count_words  # only where the first tile is counted
        assert ("_pass" in kern.few_par.py_func.__name__) is long_passes
        assert ("_pass" in kern.one_ids.py_func.__name__) is long_passes
        tile = kern.tile_rows
        n = max(_scan.SELECT_MAX_BYTES // nb, 8 * tile) + 3 * tile + 13
        query = rng.integers(0, 256, (1, nb), dtype=np.uint8)
        equal = np.repeat(query, n, axis=0)
        closer = np.repeat(np.unpackbits(query, axis=1), n, axis=0)  # row r: the query with its first f(r) bits flipped
        flips = (nb * 8 * (n - 1 - np.arange(n))) // n
        closer[np.arange(nb * 8)[None, :] < flips[:, None]] ^= 1
        closer = np.packbits(closer, axis=1)
        dense = rng.integers(0, 256, (n, nb), dtype=np.uint8)
        ids = rng.permutation(n).astype(np.int64)
        for name, codes in (("equal", equal), ("closer", closer), ("dense", dense)):
            for k in (1, 10, tile + 5):
                rd, ri = reference_knn(codes, query, k, ids)
                d, i = np.empty((1, k), np.int32), np.empty((1, k), np.int64)
                scratch = np.empty(2 + _scan.scratch_words(nb, tile, 1, 1, k), np.int64)
                kern.one_ids(codes, query, k, ids, 0, scratch, d, i)
                np.testing.assert_array_equal(d, rd, err_msg=f"{name} nb={nb} k={k} serial")
                np.testing.assert_array_equal(i, ri, err_msg=f"{name} nb={nb} k={k} serial")
                scratch = np.empty(3 + _scan.scratch_words(nb, tile, 2, 1, k), np.int64)
                kern.few_par(codes, query, k, ids, 0, 2, scratch, d, i)
                np.testing.assert_array_equal(d, rd, err_msg=f"{name} nb={nb} k={k} 2 chunks")
                np.testing.assert_array_equal(i, ri, err_msg=f"{name} nb={nb} k={k} 2 chunks")


@pytest.mark.parametrize("nb", [8, 16, 32, 128, 256])
def test_rows8_single_query(nb):
    """64/128/256/512/1024-bit single queries use the 8-rows-at-once kernel (wider ones go row by row; up to 256 bits
    32 rows are tested at once first, rows8x4_mask); sparse codes (many ties), ragged ends."""
    from ondevice.kernels import _scan

    assert (nb <= 8 * _scan.ROWS8X4_MAX_WORDS) == (nb <= 32)
    rng = np.random.default_rng(nb)
    codes = np.packbits(rng.random((1003, nb * 8)) < 0.05, axis=1, bitorder="little")
    queries = codes[[0, 500]]
    for threads in (1, 3):
        for k in (1, 17, 1100):
            d, i = H.knn(codes, queries[:1], k, threads=threads)
            rd, ri = reference_knn(codes, queries[:1], k)
            np.testing.assert_array_equal(d, rd)
            np.testing.assert_array_equal(i, ri)


@pytest.mark.parametrize("nwords", [1, 2, 4])
@pytest.mark.parametrize("pop", [0, 1])
def test_rows8x4_mask_marks_exactly_the_rows_within_the_threshold(nwords, pop):
    """The 32-row test sets bit 8j+l exactly when row l of block j is within the threshold, whatever the threshold:
    below 0, 0, around the mean distance, at the widest distance and "infinite"; dense and sparse (tied) codes."""
    from numba import njit
    from ondevice.kernels.intrinsics import rows8_query_words, rows8x4_mask

    nw, pp = nwords, pop  # closure constants: the intrinsic takes its sizes as compile-time literals

    @njit
    def masks(codes, qpattern, thr):
        out = np.empty(codes.shape[0] // (32 * 8 * nw), np.int64)
        for b in range(out.shape[0]):
            out[b] = rows8x4_mask(codes, b * 32 * 8 * nw, qpattern, 0, nw, pp, thr)
        return out

    nb = 8 * nwords
    rng = np.random.default_rng(nwords)
    for density in (0.5, 0.03):
        codes = np.packbits(rng.random((32 * 40, nb * 8)) < density, axis=1, bitorder="little")
        codes[5] = ~codes[7]  # a row at the widest distance from another
        for query in (codes[7], codes[100]):
            qpattern = np.tile(query.view(np.uint64), rows8_query_words(nwords) // nwords)
            dist = hamming_reference(query[None], codes)[0].reshape(-1, 32)
            for thr in (-3, -1, 0, 1, nb * 4 - 6, nb * 4, nb * 8 - 1, nb * 8, 1 << 62):
                got = masks(codes.reshape(-1), qpattern, thr)
                bits = (got[:, None] >> np.arange(32)) & 1
                np.testing.assert_array_equal(bits, (dist <= thr).astype(np.int64), err_msg=f"thr={thr}")


@pytest.mark.parametrize("nb", [8, 32])
def test_counting_select_small_catalogs(nb):
    """Serial scans of small catalogs of 64/256-bit codes select by counting (SELECT_MAX_BYTES): results equal brute
    force for dense and sparse (tied) codes, sorted catalogs, ascending ids, and where the kernel falls back to
    heaps: identical codes (more candidates than the buffer), unordered ids, k past SELECT_MAX_K, bigger catalogs."""
    from ondevice.kernels import _scan

    rng = np.random.default_rng(100 + nb)
    small = _scan.SELECT_MAX_BYTES // nb
    dense = rng.integers(0, 256, (small + 40, nb), dtype=np.uint8)
    sparse = np.packbits(rng.random((small, nb * 8)) < 0.03, axis=1, bitorder="little")
    catalogs = [dense[:n] for n in (1, 9, 31, 32, 33, 700, small)] + [dense]  # the last one is past the limit
    catalogs += [sparse, np.sort(dense[:small], axis=0), np.zeros((3000, nb), np.uint8)]
    for codes in catalogs:
        n = len(codes)
        queries = np.concatenate([codes[:1], rng.integers(0, 256, (2, nb), dtype=np.uint8)])
        ascending = np.cumsum(rng.integers(1, 4, n)).astype(np.int64)
        for ids in (None, ascending, rng.permutation(n).astype(np.int64)):
            for k in (1, 10, _scan.SELECT_MAX_K, _scan.SELECT_MAX_K + 1, n + 2):
                for nq in (1, 3):
                    d, i = H.knn(codes, queries[:nq], k, ids=ids, threads=1)
                    rd, ri = reference_knn(codes, queries[:nq], k, ids)
                    np.testing.assert_array_equal(d, rd, err_msg=f"n={n} k={k}")
                    np.testing.assert_array_equal(i, ri, err_msg=f"n={n} k={k}")


@pytest.mark.parametrize("nb", [129, 160, 256])
def test_wide_rows_branchy_scan(nb):
    """Codes from BRANCH_MIN_BYTES up are scanned row by row with a branch: ties, unordered ids, k past n."""
    from ondevice.kernels import _scan

    assert nb >= _scan.BRANCH_MIN_BYTES
    rng = np.random.default_rng(nb)
    codes = np.packbits(rng.random((700, nb * 8)) < 0.02, axis=1, bitorder="little")  # sparse: many ties
    queries = np.concatenate([codes[[3]], rng.integers(0, 256, (2, nb), dtype=np.uint8)])
    ids = rng.permutation(700).astype(np.int64)
    for threads in (1, 2):
        for nq in (1, 3):
            for k in (1, 25, 800):
                for use_ids in (None, ids):
                    d, i = H.knn(codes, queries[:nq], k, ids=use_ids, threads=threads)
                    rd, ri = reference_knn(codes, queries[:nq], k, use_ids)
                    np.testing.assert_array_equal(d, rd)
                    np.testing.assert_array_equal(i, ri)


def test_large_batches_are_sliced(monkeypatch):
    """A batch whose heaps would exceed the scratch budget is searched in slices (the last one short)."""
    monkeypatch.setattr(H, "QUERY_SLICE_HEAP_BYTES", 1)  # slices of BLOCKS_MIN_QUERIES queries
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 256, (300, 9), dtype=np.uint8)
    queries = rng.integers(0, 256, (H.BLOCKS_MIN_QUERIES * 2 + 2, 9), dtype=np.uint8)
    d, i = H.knn(codes, queries, 15, threads=2)
    rd, ri = reference_knn(codes, queries, 15)
    np.testing.assert_array_equal(d, rd)
    np.testing.assert_array_equal(i, ri)


def test_empty_database_and_k_beyond_n():
    codes = np.zeros((0, 32), np.uint8)
    d, i = H.knn(codes, np.zeros((2, 32), np.uint8), 3)
    assert (d == -1).all() and (i == -1).all() and d.shape == (2, 3)
    codes = np.arange(6, dtype=np.uint8).reshape(3, 2)
    d, i = H.knn(codes, codes[:1], 5, threads=2)
    assert i[0].tolist() == [0, 1, 2, -1, -1] and d[0].tolist() == [0, 2, 2, -1, -1]


def test_memmap_and_strided_inputs(tmp_path):
    rng = np.random.default_rng(6)
    codes = rng.integers(0, 256, (500, 32), dtype=np.uint8)
    path = tmp_path / "codes.bin"
    codes.tofile(path)
    mm = np.memmap(path, np.uint8, "r", shape=(500, 32))
    queries = rng.integers(0, 256, (3, 64), dtype=np.uint8)[:, ::2]  # non-contiguous
    _, i = H.knn(mm, queries, 10)
    _, ri = reference_knn(codes, np.ascontiguousarray(queries), 10)
    np.testing.assert_array_equal(i, ri)


def test_bad_arguments():
    codes = np.zeros((10, 4), np.uint8)
    with pytest.raises(ValueError, match="bytes per code"):
        H.knn(codes, np.zeros((1, 5), np.uint8), 1)
    with pytest.raises(ValueError, match="uint8"):
        H.knn(codes.astype(np.int8), np.zeros((1, 4), np.uint8), 1)
    with pytest.raises(ValueError, match="k must be"):
        H.knn(codes, np.zeros((1, 4), np.uint8), 0)
    with pytest.raises(ValueError, match="threads"):
        H.knn(codes, np.zeros((1, 4), np.uint8), 1, threads=0)
    with pytest.raises(ValueError, match="ids must be"):
        H.knn(codes, np.zeros((1, 4), np.uint8), 1, ids=np.arange(3))


def test_thread_plan_and_calibration(tmp_path, monkeypatch):
    """Small work stays on one thread; threads= is an upper bound; calibrate() stores the crossover it measured."""
    monkeypatch.setattr(H, "_PARALLEL_MIN_BYTES", [1 << 20])
    assert H.plan_threads(1000, 32, 1, None) == 1 and H.plan_threads(1000, 32, 1, 4) == 1
    assert H.plan_threads(10**6, 32, 1, 1) == 1
    assert H.plan_threads(10**6, 32, 1, 2) == 2 and H.plan_threads(10**6, 32, 1, None) == min(2, H.default_threads())
    assert H.plan_threads(100_000, 32, 1, 64) == 3  # 3.2 MB of work: three threads' worth
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path))
    monkeypatch.setattr(H, "_PARALLEL_MIN_BYTES", [])
    result = H.calibrate(repeats=1, max_bytes=1 << 17)
    assert H.calibration_file().is_file() and result["measurements"][0]["bytes"] == 1 << 16
    assert H.parallel_min_bytes() == result["parallel_min_bytes"] > 0
    assert result["machine"] == H.machine_identity()


def test_calibration_forces_the_threads_it_measures(tmp_path, monkeypatch):
    """calibrate() times every size on all threads even where the current crossover would keep it serial (else a
    calibration could only confirm the one before), and leaves that crossover as it found it."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path))
    monkeypatch.setattr(H, "_PARALLEL_MIN_BYTES", [64 << 20])  # larger than any size measured below
    threads = H.default_threads()
    used = []
    real = H.knn
    monkeypatch.setattr(H, "knn", lambda codes, q, k, threads=None: used.append(
        H.plan_threads(len(codes), codes.shape[1], len(q), threads)) or real(codes, q, k, threads=threads))
    result = H.calibrate(repeats=2, max_bytes=1 << 17, save=False)
    assert [r["bytes"] for r in result["measurements"]] == [1 << 16, 1 << 17][: len(result["measurements"])]
    assert {r["threaded_chunks"] for r in result["measurements"]} == {threads}
    assert set(used) == {1, threads}  # the serial and the threaded kernels both ran
    assert H._PARALLEL_MIN_BYTES == [64 << 20]


def test_a_calibration_from_another_machine_is_ignored(tmp_path, monkeypatch):
    """~/.cache outlives a VM whose CPU changes: a crossover measured on another CPU or thread count is not used."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path))
    path = H.calibration_file()
    path.parent.mkdir(parents=True)
    here = H.machine_identity()
    for machine, want in ((here, 12345), ({**here, "cpu_model": "Another CPU"}, H.DEFAULT_PARALLEL_MIN_BYTES),
                          ({**here, "threads": here["threads"] + 1}, H.DEFAULT_PARALLEL_MIN_BYTES),
                          (None, H.DEFAULT_PARALLEL_MIN_BYTES)):
        data = {"parallel_min_bytes": 12345}
        if machine is not None:
            data["machine"] = machine
        path.write_text(json.dumps(data))
        monkeypatch.setattr(H, "_PARALLEL_MIN_BYTES", [])
        assert H.parallel_min_bytes() == want


def test_numpy_path_matches_kernels():
    """The numpy path (one-shot CLI searches) gives the kernels' exact results, ties and padding included."""
    rng = np.random.default_rng(9)
    for nb in (1, 9, 32):
        codes = np.packbits(rng.random((700, nb * 8)) < 0.1, axis=1, bitorder="little")
        queries = codes[[3, 50, 3]]
        ids = rng.permutation(5000)[:700].astype(np.int64)
        for k in (1, 10, 800):
            for got, want in zip(H.knn(codes, queries, k, ids=ids, path="numpy"), reference_knn(codes, queries, k, ids)):
                np.testing.assert_array_equal(got, want)
        lims, d, i = H.range_search(codes, queries, 6, ids=ids, path="numpy")
        rl, rd, ri = reference_range(codes, queries, 6, ids)
        np.testing.assert_array_equal(lims, rl)
        np.testing.assert_array_equal(d, rd)
        np.testing.assert_array_equal(i, ri)
    assert H.oneshot_path(20_000, 32, 1) in ("numpy", None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_single_query_fast_path_matches_brute_force(problem):
    """The fast path (few queries, one chunk: one Numba call into cached scratch) gives the reference's exact
    results, ties by smaller id included, with and without ids, ascending or not; it is really the path taken."""
    codes, queries, ids, k, _ = problem
    queries = queries[: H.BLOCKS_MIN_QUERIES - 1]
    ascending = None if ids is None else bool(np.all(ids[1:] > ids[:-1]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(H, "_PARALLEL_MIN_BYTES", [1 << 30])  # every test size is "small": one chunk
        fast = H._fast_knn(codes, queries, k, ids, ascending, None)
        for threads in (None, 1, 2):
            d, i = H.knn(codes, queries, k, ids=ids, ids_ascending=ascending, threads=threads)
            rd, ri = reference_knn(codes, queries, k, ids)
            np.testing.assert_array_equal(d, rd)
            np.testing.assert_array_equal(i, ri)
    assert (fast is not None) == (0 < k <= len(codes))  # k beyond n (padding) goes the general way
    if fast is not None:
        np.testing.assert_array_equal(fast[0], rd)
        np.testing.assert_array_equal(fast[1], ri)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_parallel_fast_path_matches_brute_force(problem):
    """Few queries over several chunks (`few_par`: one parallel launch, bounds and merge inside, heaps padded apart)
    give the reference's exact results, with and without ids, ascending or not; it is really the path taken."""
    codes, queries, ids, k, _ = problem
    queries = queries[: H.BLOCKS_MIN_QUERIES - 1]
    ascending = None if ids is None else bool(np.all(ids[1:] > ids[:-1]))
    nb = codes.shape[1]
    kern = H._kernels(nb, H.resolve_path(None))
    calls = []

    def counted(*args):
        calls.append((args[5], numba.get_num_threads()))  # chunks, threads during the search
        return few_par(*args)

    few_par = kern.few_par
    threads_before = numba.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kern, "few_par", counted)
        fast = H._fast_knn(codes, queries, k, ids, ascending, 2)
    assert numba.get_num_threads() == threads_before  # set for the search, then restored
    if not 0 < k <= len(codes):  # k beyond n (padding) goes the general way
        assert fast is None
        return
    rd, ri = reference_knn(codes, queries, k, ids)
    np.testing.assert_array_equal(fast[0], rd)
    np.testing.assert_array_equal(fast[1], ri)
    assert calls == ([(2, min(2, H.default_threads()))] if H.plan_threads(len(codes), nb, len(queries), 2) == 2 else [])


def test_fast_path_declines_what_it_does_not_handle():
    """Wrong dtypes, shapes, threads or strided arrays leave the fast path for knn's checks and messages."""
    codes = np.zeros((100, 4), np.uint8)
    q = np.zeros((1, 4), np.uint8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(H, "_PARALLEL_MIN_BYTES", [1 << 30])
        assert H._fast_knn(codes, q, 3, None, None, None) is not None
        assert H._fast_knn(codes.astype(np.int8), q, 3, None, None, None) is None
        assert H._fast_knn(codes, np.zeros((1, 5), np.uint8), 3, None, None, None) is None
        assert H._fast_knn(codes, np.zeros((8, 4), np.uint8), 3, None, None, None) is None  # a batch
        assert H._fast_knn(codes, q, 3, None, None, 0) is None
        assert H._fast_knn(codes[::2], q, 3, None, None, None) is None
        assert H._fast_knn(codes, q, 3, np.arange(100), None, None) is None  # ids without their order known
        mp.setattr(H, "_PARALLEL_MIN_BYTES", [])
        assert H._fast_knn(codes, q, 3, None, None, 2) is None  # thread crossover not loaded yet: the general path
        assert H._fast_knn(codes, q, 3, None, None, 1) is not None
    with pytest.raises(ValueError, match="threads"):
        H.knn(codes, q, 1, threads=0)


@pytest.mark.parametrize("cpuinfo, distance, words", [
    ("vendor_id\t: GenuineIntel\ncpu family\t: 6\n", 4096, None),
    ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx2 avx512f avx512_vpopcntdq\n", 0,
     None),  # Zen 4: off
    (("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu avx2 popcnt\n\n"
      "processor\t: 1\nflags\t\t: avx512f\n"), 4096, None),  # Zen 3: 4 KB (CPU 0's flags decide)
    ("vendor_id\t: AuthenticAMD\ncpu family\t: 26\n", 8192, 4),  # Zen 5: parallel scans of codes up to 256 bits
    ("vendor_id\t: SomethingElse\n", 0, None)])
def test_prefetch_distance_follows_env_vendor_and_family(monkeypatch, tmp_path, cpuinfo, distance, words):
    """ONDEVICE_PREFETCH_BYTES overrides the distance (rounded down to whole 64-byte lines) at every width;
    otherwise vendor and family choose the distance and the widest code the parallel build prefetches for."""
    import builtins

    from ondevice.kernels import _scan

    monkeypatch.setenv("ONDEVICE_PREFETCH_BYTES", "700")
    assert _scan._default_prefetch() == 640 and _scan._parallel_prefetch_words() == _scan.NO_LIMIT
    monkeypatch.setenv("ONDEVICE_PREFETCH_BYTES", "0")
    assert _scan._default_prefetch() == 0
    monkeypatch.setenv("ONDEVICE_PREFETCH_BYTES", "2k")
    with pytest.raises(ValueError, match="ONDEVICE_PREFETCH_BYTES must be a whole number"):
        _scan._default_prefetch()
    monkeypatch.delenv("ONDEVICE_PREFETCH_BYTES")
    fake = tmp_path / "cpuinfo"
    fake.write_text(cpuinfo)
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(fake if f == "/proc/cpuinfo" else f, *a, **k))
    assert _scan._default_prefetch() == distance
    assert _scan._parallel_prefetch_words() == (_scan.NO_LIMIT if words is None else words)


@pytest.mark.parametrize("pf", [0, 512])
def test_prefetch_on_and_off_builds_match_brute_force(monkeypatch, pf):
    """Both prefetch builds are correct whichever one this CPU defaults to: serial (`one`) and parallel (`few_par`,
    two chunks) scans of narrow (rows8) and wide (row by row) codes, built here with the patched constants."""
    from ondevice.kernels import _scan

    monkeypatch.setattr(_scan, "PREFETCH_BYTES", pf)
    monkeypatch.setattr(_scan, "PREFETCH_PARALLEL_BYTES", pf)
    monkeypatch.setattr(_scan, "PREFETCH_PARALLEL_MAX_WORDS", _scan.NO_LIMIT)
    rng = np.random.default_rng(1)
    for nb in (8, 256):
        kern = _scan.Kernels(nb, 0)
        assert f"_pf{pf}" in kern.one.py_func.__name__ and f"_pf{pf}" in kern.few_par.py_func.__name__
        codes = np.packbits(rng.random((2000, nb * 8)) < 0.05, axis=1, bitorder="little")
        q = codes[[7]]
        rd, ri = reference_knn(codes, q, 20)
        d, i = np.empty((1, 20), np.int32), np.empty((1, 20), np.int64)
        kern.one(codes, q, 20, np.empty(2 + _scan.scratch_words(nb, kern.tile_rows, 1, 1, 20), np.int64), d, i)
        np.testing.assert_array_equal(d, rd, err_msg=f"nb={nb} serial")
        np.testing.assert_array_equal(i, ri, err_msg=f"nb={nb} serial")
        scratch = np.empty(3 + _scan.scratch_words(nb, kern.tile_rows, 2, 1, 20), np.int64)
        kern.few_par(codes, q, 20, np.empty(0, np.int64), 1, 2, scratch, d, i)
        np.testing.assert_array_equal(d, rd, err_msg=f"nb={nb} parallel")
        np.testing.assert_array_equal(i, ri, err_msg=f"nb={nb} parallel")


def test_parallel_prefetch_by_width_matches_brute_force(monkeypatch):
    """A parallel build that prefetches for codes up to 4 words only (the family-26 rule), built here whatever the
    CPU: narrow codes scan with prefetch, wide ones without, both exact."""
    from ondevice.kernels import _scan

    monkeypatch.setattr(_scan, "PREFETCH_PARALLEL_BYTES", 512)
    monkeypatch.setattr(_scan, "PREFETCH_PARALLEL_MAX_WORDS", 4)
    rng = np.random.default_rng(2)
    for nb, prefetched in ((8, True), (32, True), (128, False)):
        kern = _scan.Kernels(nb, 0)  # a fresh build with the patched constants (its own names: the variant)
        assert ("_pf512" in kern.few_par.py_func.__name__) is prefetched
        codes = np.packbits(rng.random((3000, nb * 8)) < 0.05, axis=1, bitorder="little")
        q = codes[[11]]
        scratch = np.empty(3 + _scan.scratch_words(nb, kern.tile_rows, 2, 1, 10), np.int64)
        d, i = np.empty((1, 10), np.int32), np.empty((1, 10), np.int64)
        kern.few_par(codes, q, 10, np.empty(0, np.int64), 1, 2, scratch, d, i)
        ref = np.unpackbits(codes ^ q, axis=1).sum(1)
        order = np.lexsort((np.arange(len(ref)), ref))[:10]
        assert (d[0] == ref[order]).all() and (i[0] == order).all(), nb


@pytest.mark.parametrize("nb", [8, 128])
def test_parallel_build_on_one_chunk_fits_scratch_words_and_refuses_less(nb):
    """The parallel build pads its heap slots even for one chunk: scratch_words(..., 1, ...) must leave room for that
    (it did not, and a one-thread benchmark of the parallel build corrupted the process's heap), and a kernel handed
    less scratch than its layout needs refuses the call instead of writing past the end."""
    from ondevice.kernels import _scan

    kern = _scan.kernels(nb, 0)
    rng = np.random.default_rng(5)
    codes = np.packbits(rng.random((5000, nb * 8)) < 0.05, axis=1, bitorder="little")
    q = codes[[3]]
    d, i = np.empty((1, 10), np.int32), np.empty((1, 10), np.int64)
    words = 2 + _scan.scratch_words(nb, kern.tile_rows, 1, 1, 10)
    kern.few_par(codes, q, 10, np.empty(0, np.int64), 1, 1, np.empty(words, np.int64), d, i)
    ref = np.unpackbits(codes ^ q, axis=1).sum(1)
    order = np.lexsort((np.arange(len(ref)), ref))[:10]
    assert (d[0] == ref[order]).all() and (i[0] == order).all()
    short = 2 + (1 + _scan.HEAP_PAD) * 21 + kern.serial_temp  # the heaps fit, the temporaries do not
    with pytest.raises(ValueError, match="scratch too small"):
        kern.few_par(codes, q, 10, np.empty(0, np.int64), 1, 1, np.empty(short, np.int64), d, i)
    with pytest.raises(ValueError, match="scratch too small"):
        kern.one(codes, q, 10, np.empty(2 + 21 + kern.serial_temp, np.int64), d, i)


def test_first_parallel_search_of_a_process_leaves_torch_thread_count_alone():
    """The first parallel search launches Numba's OpenMP pool, which alone sets the OpenMP count to every core: a
    `--threads 1` pair run searched its augmentation neighbours once and then trained on two spinning threads."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = """
import numpy as np, torch
torch.set_num_threads(1)
from ondevice.kernels import hamming as H
codes = np.random.default_rng(0).integers(0, 256, (20000, 32), dtype=np.uint8)
for q in (codes[:1], codes[:64]):  # one query, then a batch: whichever launches the pool
    d, _ = H.knn(codes, q, 5, threads=2)
    assert (d[:, 0] == 0).all()
    print(torch.get_num_threads())
"""
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 0 and out.stdout.split() == ["1", "1"], (out.stdout, out.stderr[-2000:])


def test_parallel_search_leaves_torch_thread_count_alone():
    """numba's OpenMP layer shares libgomp with torch; a parallel search must not raise torch's thread count."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    codes = np.random.default_rng(0).integers(0, 256, (20000, 32), dtype=np.uint8)
    try:
        torch.set_num_threads(1)
        d, _ = H.knn(codes, codes[:64], 5, threads=2)
        assert torch.get_num_threads() == 1
        assert (d[:, 0] == 0).all()
        H.range_search(codes, codes[:64], 3, threads=2)
        assert torch.get_num_threads() == 1
        d, _ = H.knn(codes, codes[:1], 5, threads=2)  # the few-query path (one parallel call, threads set inline)
        assert torch.get_num_threads() == 1 and d[0, 0] == 0
    finally:
        torch.set_num_threads(before)


def test_closure_kernels_have_the_same_disk_cache_key_in_every_process():
    """Numba's disk cache keys a closure kernel by its pickled cells, which hold other kernels and, through their
    globals, the intrinsics; each carried a random per-process identity, so rows8 / one / one_ids / few_par were
    compiled again in every process (~4 s before the first search). Two fresh processes must agree on every key."""
    import subprocess
    import sys

    script = """
import hashlib
from numba.core.serialize import dumps
from ondevice.kernels import _scan
out = []
for nb in (8, 32, 256):
    kern = _scan.Kernels(nb, 0)
    for name in ("rows", "rows8", "blocks", "rows_serial", "rows8_serial", "one", "one_ids", "few_par"):
        f = getattr(kern, name)
        if f is not None:
            cells = tuple(c.cell_contents for c in f.py_func.__closure__ or ())
            out.append(f"{nb}/{name}/{hashlib.sha256(dumps(cells)).hexdigest()[:16]}")
print(" ".join(out))
"""
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    first, second = (r.stdout.split() for r in runs)
    assert len(first) >= 20 and any(k.startswith("32/one/") for k in first)
    assert first == second, sorted(set(first) ^ set(second))


def test_kernels_of_two_widths_from_cache_and_fresh_in_one_process(tmp_path):
    """Numba names machine code by qualified name and a per-process counter, so the same kernel of two widths could
    share a symbol when one came from the disk cache and the other was compiled in this process; LLVM then bound one
    to the other's body. Seen 2026-11-27: a process that searched 256-bit codes and then 64-bit codes whose kernels
    another process had cached got wrong distances (106 on 64-bit codes) or a segfault. Each build has its own names."""
    import os
    import subprocess
    import sys

    script = """
import sys
import numpy as np
from ondevice.kernels import hamming as H
rng = np.random.default_rng(int(sys.argv[1]))
for nb in map(int, sys.argv[2:]):
    codes = rng.integers(0, 256, (3000, nb), dtype=np.uint8)
    q = rng.integers(0, 256, (1, nb), dtype=np.uint8)
    ref = np.unpackbits(codes ^ q, axis=1).sum(1)
    order = np.lexsort((np.arange(len(ref)), ref))[:10]
    for threads in (1, 2):
        d, i = H.knn(codes, q, 10, threads=threads)
        assert (d[0] == ref[order]).all() and (i[0] == order).all(), (nb, threads, d[0][:4], ref[order][:4])
print("ok")
"""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    # 64-bit kernels cached by one process; the next compiles 256-bit ones, then loads the cached 64-bit ones (the
    # case that failed); the last loads both from the cache in the other order
    for seed, widths in ((0, ["8"]), (1, ["32", "8"]), (2, ["8", "32"])):
        out = subprocess.run([sys.executable, "-c", script, str(seed), *widths], env=env, capture_output=True, text=True,
                             timeout=600, check=False)
        assert out.returncode == 0 and out.stdout.strip() == "ok", (widths, out.returncode, out.stderr[-2000:])
