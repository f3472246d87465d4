"""The Numba scan kernels behind ondevice.kernels.hamming (imported only when a search needs them).

Every kernel exists twice per code width: a parallel one (one prange iteration per database chunk) and a serial
one (one chunk, no thread pool touched), compiled from the same source. The serial variant is what small searches
use: a parallel region costs tens of microseconds to start and far more on a busy machine, more than scanning a
few hundred kilobytes. Kernels reset their own heap counters, so callers may reuse scratch buffers, and they build
their query layouts themselves, so a call is one dispatch with no numpy work around it.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit, prange
from numba.core.dispatcher import Dispatcher
from ondevice.kernels.intrinsics import (
    LANES,
    block_distances,
    block_distances_group,
    load_word,
    lowest_bit,
    prefetch,
    row_distance,
    rows8_distances,
    rows8_distances_lazy,
    rows8_query_words,
    rows8_supports,
    rows8x4_mask,
    stable_identity,
)

from ondevice.errors import SettingError

TILE_BYTES = 16 * 1024  # database bytes scanned by the whole batch before moving on; fits L1 with the queries
# Software prefetch ahead of single-query scans, in bytes (0 = off: the hardware prefetcher alone), for the serial
# (one thread) and the parallel builds. Which is faster depends on the CPU, so the default follows vendor and family:
# - AMD family 25 with AVX-512 (Zen 4; the EPYC VM of 2026-11-23 and -26): off. 2 KB ahead was slower than none at
#   1M x 1024/2048 bits and 100k x 2048 bits (grids benchmarks/results/hamming_grid-20261123T120929Z.json vs
#   -121946.json), and 512-2,048 bytes ahead slower at 1M x 64 bits (2026-11-26).
# - AMD family 25 without AVX-512 (Zen 3; the EPYC model 1 VM of 2026-11-28): 4 KB ahead, both builds, every width.
#   In-process A/B of 0/2/4/8 KB (hamming_prefetch_ab-20261128T020355Z.json at one thread, -014700Z at two): 4 KB
#   ran 7-29% faster than none in every 1M/10M-code cell but the two L3-resident two-thread ones (1M x 64 bits 2%
#   slower; 1M x 256 bits level, a noisy cell), and within 5% of the best distance in all others (one thread: 10M x 64
#   bits from 70% of the read bound to 85%; two threads: 10M x 2048 bits from 80% to 90%).
# - AMD family 26 and later (Zen 5; 2026-11-27): 8 KB ahead; the parallel build only for codes up to 256 bits.
#   4 KB at one thread took every cell from 1M codes from 56-85% of the read bound to 84-95% (1M x 1024 bits 56% ->
#   87%, FAISS 0.84x -> 1.28x; grids -090547 off vs -091324 4 KB). One-thread runs of the 1M/10M-code cells at 2, 4
#   and 8 KB (-094605, -095531, -095055): 8 KB best or level in every cell (91-104%, against 86-97% at 4 KB). At two
#   threads, whole grids one after the other (-110310 off .. -111411 16 KB) swung with the VM's memory bandwidth, so
#   the builds were compared in turns in one process (benchmarks/hamming_prefetch_ab.py; hamming_prefetch_ab_
#   20261127-120702Z.json 0/4/8/16 KB, -120845Z 0/8 KB): 8 KB took 64- and 256-bit codes from 68-84% of the read
#   bound to 78-95% at 1M and 10M codes in both runs, left 1M x 1024 / 2048 bits level, and cost 10M x 1024 bits 6-7
#   points (10M x 2048 bits: +15 in one run, -5 in the other), so wider codes scan without it at two threads. The
#   grid with this rule (hamming_grid-20261127T121747Z.json): every 10M-code cell at 90-97% of the read bound.
# - Intel: 4 KB ahead (2026-11-23 Xeon VM: 512 bytes took 1M x 2048-bit scans from 59% to 90% of the read bound;
#   2026-11-24 Xeon family 6 model 207: 4 KB beat 512 bytes in every 100k-10M-code cell at 1 and 2 threads).
# ONDEVICE_PREFETCH_BYTES overrides both builds at every width. The distance is a compile-time constant of each
# build: 0 costs nothing.
NO_LIMIT = 1 << 62


def _env_bytes(name: str) -> int | None:
    env = os.environ.get(name, "").strip()
    if not env:
        return None
    if not env.isdigit():  # as resolve_path: named, never a silent default
        raise SettingError(f"{name} must be a whole number of bytes (e.g. 0 or 512), got {env!r}; "
                           "unset it for this CPU's default")
    return int(env)


def _cpu_id() -> tuple[str, int, bool]:
    """CPU 0's vendor id, family and whether it has AVX-512 (avx512f), from /proc/cpuinfo (("", 0, False) without)."""
    vendor, family, avx512 = "", 0, False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id":
                    vendor = value.strip()
                elif key == "cpu family":
                    family = int(value) if value.strip().isdigit() else 0
                elif key == "flags":
                    avx512 = "avx512f" in value.split()
                    break
                elif not key and vendor:  # the end of CPU 0's block
                    break
    except OSError:
        pass
    return vendor, family, avx512


def _default_prefetch(cpu: tuple[str, int, bool] | None = None) -> int:
    """Prefetch distance (bytes, whole 64-byte lines) of single-query scans on this CPU."""
    env = _env_bytes("ONDEVICE_PREFETCH_BYTES")
    if env is not None:
        return env // 64 * 64
    vendor, family, avx512 = cpu or _cpu_id()
    if vendor == "GenuineIntel":
        return 4096
    if vendor != "AuthenticAMD":
        return 0
    if family >= 26:
        return 8192
    return 4096 if family == 25 and not avx512 else 0  # Zen 3: on; Zen 4: off


def _parallel_prefetch_words(cpu: tuple[str, int, bool] | None = None) -> int:
    """Widest code (64-bit words) the parallel build prefetches ahead of; wider codes are scanned without."""
    if _env_bytes("ONDEVICE_PREFETCH_BYTES") is not None:
        return NO_LIMIT
    vendor, family, _ = cpu or _cpu_id()
    return ROWS8X4_MAX_WORDS if vendor == "AuthenticAMD" and family >= 26 else NO_LIMIT


_CPU = _cpu_id()
PREFETCH_BYTES = _default_prefetch(_CPU)  # the serial build's (one-thread searches)
PREFETCH_PARALLEL_BYTES = PREFETCH_BYTES  # the parallel build's, for codes up to PREFETCH_PARALLEL_MAX_WORDS
# Widest code (64-bit words) the 8-row interleaved kernel scans; wider codes go row by row, which streamed memory
# better at 2048 bits on the same VM (1M codes, one query, one thread; same grid runs).
ROWS8_MAX_WORDS = 16
# Codes at least this wide (bytes) test each row's distance with a branch instead of the branch-free candidate
# pass: a wide row costs enough that a rarely taken, well predicted branch is cheaper than writing every row out.
BRANCH_MIN_BYTES = 128
# Codes up to this many 64-bit words first test 32 rows at once for any row within the threshold (rows8x4_mask, no
# stores) and compute distances only under a set mask: narrow codes are bound by the work per row, not by memory.
ROWS8X4_MAX_WORDS = 4
# Heap scans of codes up to this many 64-bit words start with a tile whose k-th distance is counted (a histogram of
# all its distances) before any row is offered, so only rows within that bound enter the heap, and later tiles start
# from the tile's exact k-th distance. Without it the first 256 rows all entered the heap and the second tile was
# tested against the k-th distance of 256 rows; every row that enters costs a few unpredictable branches. On the AMD
# EPYC family 25 model 17 (Zen 4, 2026-11-29; in-process A/B, benchmarks/results/hamming_prefetch_ab-
# 20261129T035713Z.json and -T035749Z.json): 64-bit codes at one thread 7% / 12% / 2% faster at 30k / 100k / 1M codes, at two
# threads 10% / 5% at 30k / 1M and 1-3% slower (noise level) at 100k and 10M; 256-bit codes level or slower
# (-033802Z), so 64-bit codes only. Counting is also what gives a width the long passes below, and with them 128- and
# 256-bit codes gain too (same CPU; in-process A/Bs of COUNT_FIRST_MAX_WORDS 1 against 4, 9 rounds): one
# thread 3-12% faster from 30k to 10M codes (1M x 128 bits 0.2533 -> 0.2251 ms, 79% -> 89% of the read bound;
# 30k x 128 bits level; -172758Z), two threads 2-13% faster from 100k codes, 30k level to 4% slower, 1M x 256 bits
# level (-172833Z). So up to 256 bits on that CPU, 64-bit codes only elsewhere (not measured).
COUNT_FIRST_MAX_WORDS = 4 if _CPU[1] == 25 and _CPU[0] == "AuthenticAMD" and _CPU[2] else 1  # Zen 4: 4
# Tiles per candidate pass of the 32-rows-at-once scan of 64-bit codes (those whose first tile is counted) after the
# first tile, in the serial (one-thread) and the parallel builds; candidates are offered after each pass, from
# buffers sized for a whole pass. On the AMD EPYC family 25 model 17 (Zen 4, 2026-11-29; in-process A/Bs in
# benchmarks/results/hamming_prefetch_ab-20261129T*.json): 8-tile passes took one-thread 1M x 64-bit scans from
# 73-75% of the read bound to 86-87% (-080342Z, -081009Z; 10M, 100k and 30k level); at two threads level (-080449Z),
# so the parallel build keeps 1-tile passes. A first version that offered candidates early when a one-tile buffer
# filled gained 83-85% at one thread but made two-thread scans 20-25% slower (-072457Z, -080153Z: the test in the
# 32-row loop, 2-tile passes as slow as 8). 256-bit codes (threshold not counted first) ran 30k-100k codes up to 40%
# slower with long passes at two threads and 10% at one (-080342Z, -080449Z); 16 tiles were slower than 8 (-072658Z).
# 8 tiles for the serial build on AMD family 25 with AVX-512 only, the CPU measured.
X4_PASS_TILES = 8 if _CPU[1] == 25 and _CPU[0] == "AuthenticAMD" and _CPU[2] else 1  # Zen 4 only
X4_PASS_TILES_PARALLEL = 1
PREFETCH_PARALLEL_MAX_WORDS = _parallel_prefetch_words(_CPU)  # see the prefetch notes above
# Serial scans of at most this many bytes of those widths select the top k by counting instead of with heaps: the
# k-th distance of an evenly spread sample bounds the true one, a pass of 32-row tests against that bound collects
# the few candidates, and their histogram gives the exact k-th distance and each distance's place in the sorted
# result. A heap fed row by row costs a few mispredicted branches per row that enters it; in a small catalog most
# rows are scanned before the heap's threshold settles. Measured on the Intel Xeon VM (2026-11-23, k=10, one
# thread, a different query each call): counting ahead up to 8k x 64-bit and ~4k x 256-bit codes, heaps ahead
# from 16k x 64-bit and 8k x 256-bit codes.
SELECT_MAX_BYTES = 96 * 1024
SELECT_MAX_K = 32  # larger k leaves more candidates (~k x rows / sampled rows) than the buffer is meant for
SAMPLE_WEIGHT = 1.0  # sampled blocks ~ sqrt(blocks x k x SAMPLE_WEIGHT), measured as above
_FAR = 1 << 62  # admission threshold of a heap that is not full yet
GROUP = 4  # queries per group in the batch kernel: each database vector is loaded once per group
# Heap slots left empty after each chunk's in the parallel kernels, so no two threads' heaps (distances, ids, sizes)
# share a cache line: a write to one invalidates the line in the other core, and a scan reads its heap's root at
# every sub-tile. 8 slots are at least 64 bytes of each array.
HEAP_PAD = 8

# ---------------------------------------------------------------------------------------------- top-k heaps
# One max-heap of (distance, id) per (chunk, query) "slot", stored flat: slot s owns [s*k, s*k + k).
# The root is the worst kept pair, so a candidate only needs comparing with the root.


@njit(cache=True, inline="always")
def _better(d1, i1, d2, i2):
    return d1 < d2 or (d1 == d2 and i1 < i2)


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
def _hist_kth(hist, hb, k):
    """The k-th smallest distance counted in 4 interleaved histograms of hb bins each (hb - 1 if fewer than k)."""
    total = 0
    for d in range(hb):
        total += hist[d] + hist[hb + d] + hist[2 * hb + d] + hist[3 * hb + d]
        if total >= k:
            return d
    return hb - 1


@njit(cache=True, inline="always")
def _threshold(hd, hn, slot, k, strict):
    """Largest distance that can still enter the slot's heap; `strict` when later rows have larger ids."""
    if hn[slot] < k:
        return _FAR
    return hd[slot * k] - strict


@njit(cache=True, inline="always")
def _offer_blocks(hd, hi, hn, slot, k, strict, cand_d, cand_b, cand_m, nc, start, ids, has_ids, thr):
    """Offer the rows of nc candidate blocks (block numbers from start, lane masks, 8 distances each) to slot's
    heap; returns the threshold after them."""
    for j in range(nc):
        m = cand_m[j]
        for lane in range(LANES):
            d = cand_d[j * LANES + lane]
            if (m >> lane) & 1 and d <= thr:  # thr drops as the heap fills
                r = start + cand_b[j] * LANES + lane
                _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                thr = _threshold(hd, hn, slot, k, strict)
    return thr


@njit(cache=True)
def _merge_one(hd, hi, hn, nchunks, sq, k, q, out_d, out_i, md, mi):
    """Merge query q's per-chunk heaps (size k, sq slots per chunk) into the sorted (distance, id) row q of out_*,
    -1 padded."""
    n = 0
    for c in range(nchunks):
        slot = c * sq + q
        for j in range(hn[slot]):
            d = hd[slot * k + j]
            i = hi[slot * k + j]
            if n < k:  # heap push
                pos = n
                while pos > 0:
                    parent = (pos - 1) // 2
                    if not _better(md[parent], mi[parent], d, i):
                        break
                    md[pos] = md[parent]
                    mi[pos] = mi[parent]
                    pos = parent
                md[pos] = d
                mi[pos] = i
                n += 1
            elif _better(d, i, md[0], mi[0]):
                _sift_down(md, mi, 0, k, d, i)
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


@njit(parallel=True, cache=True)
def merge(hd, hi, hn, nchunks, sq, k, out_d, out_i):
    """Merge every query's per-chunk heaps (sq slots per chunk) into sorted rows of out_d / out_i, queries in
    parallel."""
    for q in prange(out_d.shape[0]):
        _merge_one(hd, hi, hn, nchunks, sq, k, q, out_d, out_i, np.empty(k, np.int64), np.empty(k, np.int64))


@njit(cache=True)
def _merge_all(hd, hi, hn, nchunks, sq, k, out_d, out_i, md, mi):
    """As merge, on the calling thread: the serial kernels, and the parallel few-query ones after their parallel
    loop, end with it, so a search is a single launch (a second parallel one for the merge cost ~8 us on the Xeon
    VM, a twentieth of a 1M x 64-bit scan on 2 threads)."""
    for q in range(out_d.shape[0]):
        _merge_one(hd, hi, hn, nchunks, sq, k, q, out_d, out_i, md, mi)


@njit(cache=True)
def chunk_bounds(bounds, n):
    """Fill bounds (nchunks + 1 entries) with the chunk edges of n rows: on multiples of 8 rows, so every chunk's
    blocks are whole except the last one's."""
    nchunks = bounds.shape[0] - 1
    for c in range(nchunks):
        bounds[c] = c * (n // LANES) // nchunks * LANES
    bounds[nchunks] = n


@njit(cache=True)
def _carve_heaps(scratch, nchunks, sq, k):
    """Views of one int64 scratch array: heap distances and ids (slots x k each), heap sizes, then the temporaries;
    sq slots per chunk."""
    slots = nchunks * sq
    return (scratch[: slots * k], scratch[slots * k : 2 * slots * k], scratch[2 * slots * k : 2 * slots * k + slots],
            2 * slots * k + slots)


def scratch_words(nbytes: int, tile: int, nchunks: int, nq: int, k: int) -> int:
    """int64 words of scratch a knn kernel call needs: heaps, then each chunk's temporaries (in the caller's cached
    buffer rather than allocated per call: a parallel search allocating 120 KB per chunk cost a few microseconds)."""
    # The parallel builds pad each chunk's heap slots apart even for one chunk; sizing for that fits both builds.
    heaps = nchunks * (nq + HEAP_PAD) * (2 * k + 1)
    w = (nbytes + 7) // 8
    return heaps + nchunks * (_temp_words(tile, w) + nq * max(w, rows8_query_words(nbytes // 8)) + 2 * k)


def _hist_bins(w: int) -> int:
    """Histogram bins of the counting select for codes of w 64-bit words: one per distance; 0 where it never runs."""
    return 64 * w + 1 if w <= ROWS8X4_MAX_WORDS else 0


def _pass_words(tile: int, w: int) -> int:
    """int64 words of the candidate buffers of passes longer than a tile (distances, block numbers, masks); 0
    where no build of this width has such passes."""
    tiles = max(X4_PASS_TILES, X4_PASS_TILES_PARALLEL)
    counted = w <= min(ROWS8X4_MAX_WORDS, COUNT_FIRST_MAX_WORDS)  # the widths with long passes (see _build)
    return tiles * tile + 2 * (tiles * tile // LANES) if counted and tiles > 1 else 0


def _temp_words(tile: int, w: int) -> int:
    """int64 words of a kernel's per-chunk temporaries before the query words (the layout is in _build)."""
    return tile * (w + 2) + 2 * (tile // LANES) + GROUP * tile + GROUP + 5 * _hist_bins(w) + _pass_words(tile, w)


# ---------------------------------------------------------------------------------------------- scan kernels


class Kernels:
    """The scan kernels compiled for one code width (bytes) and popcount path; the width is a compile-time constant.

    Attributes `rows`, `blocks`, `range_rows`, `rows8` are the parallel kernels, `*_serial` the one-chunk ones
    (`rows8*` is None for widths the 8-row kernel does not handle); `one`/`one_ids` (serial) and `few_par` (parallel)
    are the few-query fast paths of hamming.knn. The few-query kernels (`rows*`) write the sorted result themselves;
    after the parallel `blocks`, `merge` does.
    """

    def __init__(self, nbytes: int, pop: int):
        self.nbytes = nbytes
        self.tile_rows = max(LANES, TILE_BYTES // nbytes // LANES * LANES)
        self.words = (nbytes + 7) // 8
        # scratch_words(nbytes, tile, 1, nq, k) == nq * (2k + 1 + query_words) + serial_temp + 2k, kept for speed
        self.query_words = max(self.words, rows8_query_words(nbytes // 8))
        self.serial_temp = _temp_words(self.tile_rows, self.words)
        self.rows, self.blocks, self.range_rows, self.rows8, _, _, self.few_par = _build(nbytes, pop, self.tile_rows, 1)
        self.rows_serial, self.blocks_serial, self.range_rows_serial, self.rows8_serial, self.one, self.one_ids, _ = \
            _build(nbytes, pop, self.tile_rows, 0)


def _build(NB: int, POP: int, TILE: int, PAR: int):  # upper case: compile-time constants frozen into the kernels
    # PAR is read inside every kernel so that it is one of the closure's cell values: Numba's disk cache keys
    # closures by those, which keeps the parallel and serial builds of one source apart.
    W = (NB + 7) // 8
    FULL, TAIL = divmod(NB, 8)
    QW = rows8_query_words(FULL)  # words per query in the rows8 pattern
    QQ = max(W, QW)  # scratch words per query for either query layout
    # Scratch layout after the heaps (int64 words): interleave buffer, two candidate arrays, block numbers and masks,
    # the query group's distances and thresholds, the select histograms, then the query words (QQ per query) and two
    # k-sized merge buffers; see _temp_words.
    C1 = TILE * W
    C2 = C1 + TILE
    BO = C2 + TILE
    MO = BO + TILE // LANES
    GD = MO + TILE // LANES
    GT = GD + GROUP * TILE
    CAP = TILE * W // 2  # candidates select can hold
    HB = _hist_bins(W)  # every distance a code of W words can have (select runs only for X4 widths)
    HO = GT + GROUP  # 4 interleaved histograms (no store-to-load chains) and the write positions, HB words each
    XO = HO + 5 * HB  # candidate buffers of passes longer than a tile (see X4_PASS_TILES)
    QO = XO + _pass_words(TILE, W)
    TEMP = QO
    G = GROUP
    BRANCHY = NB >= BRANCH_MIN_BYTES
    X4 = FULL <= ROWS8X4_MAX_WORDS
    COUNT1 = X4 and FULL <= COUNT_FIRST_MAX_WORDS  # the first tile selected by counting (see above)
    # Rows in the first pass of the 8-row scan (see its candidate loop); later passes take a whole tile. A narrow
    # code's first pass is short so that the threshold ("infinite" until k rows are in) tightens early; after it
    # the pass size only adds per-pass work: on the AMD EPYC VM (2026-11-26; L3-resident 1M x 64-bit catalog, one
    # query, A/B in alternating processes) 2,048-row passes after the first took one thread from 72-74% of the read
    # bound to 82-84% (256-row passes before), two threads from 52-58% to 57-68%.
    T8 = min(TILE, 256) if X4 else TILE
    # rows per later pass: long ones only where the first tile's k-th distance was counted (tight from the start)
    PASS = TILE * (X4_PASS_TILES_PARALLEL if PAR else X4_PASS_TILES) if COUNT1 else TILE
    # a closure cell: Numba's disk cache keys the build by it
    PF = (PREFETCH_PARALLEL_BYTES if W <= PREFETCH_PARALLEL_MAX_WORDS else 0) if PAR else PREFETCH_BYTES
    GLAST = sum(1 << (8 * q) for q in range(G))  # multiplier copying an 8-lane mask into each query's byte
    variant = (f"nb{NB}_pop{POP}_tile{TILE}_par{PAR}_pf{PF}" + ("_count1" if COUNT1 else "")
               + (f"_pass{PASS // TILE}" if PASS != TILE else ""))

    def compiled(fn, **options):
        # Each build's kernels get their own names. Numba names a function's machine code by its qualified name and a
        # per-process counter, so the same kernel of two widths could carry the same symbol when one came from the
        # disk cache (written by another process) and the other was compiled here; LLVM then bound the cached kernel's
        # call to the other width's body: wrong distances or a segfault (2026-11-27; numba issue 10486).
        fn.__name__ = f"{fn.__name__}_{variant}"
        fn.__qualname__ = f"{fn.__qualname__}_{variant}"
        return njit(cache=True, **options)(fn)

    def jit(fn):
        return compiled(fn, parallel=bool(PAR))


    def rows(codes, queries, k, ids, strict, bounds, scratch, out_d, out_i):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        nchunks = (bounds.shape[0] - 1) * PAR + 1 - PAR  # serial builds scan chunk 0 only
        sq = nq + HEAP_PAD * PAR  # heap slots per chunk
        hd, hi, hn, tmp0 = _carve_heaps(scratch, bounds.shape[0] - 1, sq, k)
        _check_scratch(scratch, tmp0, nchunks, nq, k)
        for c in prange(nchunks):
            tmp = scratch[tmp0 + c * (TEMP + nq * QQ + 2 * k) : tmp0 + (c + 1) * (TEMP + nq * QQ + 2 * k)]
            for q in range(nq):
                hn[c * sq + q] = 0
            cand_r = tmp[C1 : C1 + TILE]
            cand_d = tmp[C2 : C2 + TILE]
            for start in range(bounds[c], bounds[c + 1], TILE):
                stop = min(start + TILE, bounds[c + 1])
                for q in range(nq):
                    slot = c * sq + q
                    thr = _threshold(hd, hn, slot, k, strict)
                    if BRANCHY:
                        for r in range(start, stop):
                            if PF:
                                for j in range((NB + 63) // 64):
                                    prefetch(codes, r * NB + PF + 64 * j)
                            d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                            if d <= thr:
                                _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                                thr = _threshold(hd, hn, slot, k, strict)
                        continue
                    # Branch-free pass: every row is written, only rows within thr advance the cursor.
                    nc = 0
                    for r in range(start, stop):
                        if PF:
                            for j in range((NB + 63) // 64):
                                prefetch(codes, r * NB + PF + 64 * j)
                        d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                        cand_r[nc] = r
                        cand_d[nc] = d
                        nc += d <= thr
                    for j in range(nc):
                        if cand_d[j] <= thr:  # thr drops as the heap fills
                            r = cand_r[j]
                            _offer(hd, hi, hn, slot, k, cand_d[j], ids[r] if has_ids else r)
                            thr = _threshold(hd, hn, slot, k, strict)
        md = scratch[tmp0 + TEMP + nq * QQ :]  # chunk 0's merge buffers, free once the chunks are scanned
        _merge_all(hd, hi, hn, bounds.shape[0] - 1, sq, k, out_d, out_i, md[:k], md[k : 2 * k])

    def blocks(codes, queries, k, ids, strict, bounds, scratch, out_d, out_i):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        nchunks = (bounds.shape[0] - 1) * PAR + 1 - PAR  # serial builds scan chunk 0 only
        sq = nq + HEAP_PAD * PAR  # heap slots per chunk
        hd, hi, hn, tmp0 = _carve_heaps(scratch, bounds.shape[0] - 1, sq, k)
        _check_scratch(scratch, tmp0, nchunks, nq, k)
        for c in prange(nchunks):
            tmp = scratch[tmp0 + c * (TEMP + nq * QQ + 2 * k) : tmp0 + (c + 1) * (TEMP + nq * QQ + 2 * k)]
            qwords = tmp[QO : QO + nq * W].view(np.uint64)  # each query as W little-endian words, tail zero-padded
            for q in range(nq):
                hn[c * sq + q] = 0
                for w in range(FULL):
                    qwords[q * W + w] = load_word(queries, q * NB + 8 * w, 8)
                if TAIL > 0:
                    qwords[q * W + FULL] = load_word(queries, q * NB + 8 * FULL, TAIL)
            buf = tmp[0 : TILE * W].view(np.uint64)  # every word a scan reads is written first
            cand_d = tmp[C1 : C1 + TILE]  # 8 distances per candidate block
            cand_b = tmp[BO : BO + TILE // LANES]
            cand_m = tmp[MO : MO + TILE // LANES]
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
                # Groups of G queries: each block vector is loaded once per group (block_distances_group).
                gthr = tmp[GT : GT + G]
                gd = tmp[GD : GD + G * TILE]
                for g in range(nq // G):
                    q0 = g * G
                    for qq in range(G):
                        gthr[qq] = _threshold(hd, hn, c * sq + q0 + qq, k, strict)
                    nc = 0
                    for b in range(nblk):
                        m = block_distances_group(buf, b * W * LANES, qwords, q0 * W, W, G, POP, gthr, 0, gd,
                                                  nc * LANES * G)
                        cand_b[nc] = b
                        cand_m[nc] = m
                        nc += m != 0
                    for j in range(nc):
                        b = cand_b[j]
                        m = cand_m[j]
                        if b == nblk - 1:
                            m &= last * GLAST
                        for qq in range(G):
                            mq = (m >> (8 * qq)) & 255
                            if mq == 0:
                                continue
                            slot = c * sq + q0 + qq
                            thr = gthr[qq]
                            for lane in range(LANES):
                                d = gd[(j * G + qq) * LANES + lane]
                                if (mq >> lane) & 1 and d <= thr:  # thr drops as the heap fills
                                    r = start + b * LANES + lane
                                    _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                                    thr = _threshold(hd, hn, slot, k, strict)
                            gthr[qq] = thr
                for q in range(nq // G * G, nq):  # the queries left over after the groups
                    slot = c * sq + q
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
        if PAR == 0:  # the serial build also sorts the result: one call, no separate merge
            md = scratch[tmp0 + TEMP + nq * QQ :]
            _merge_all(hd, hi, hn, 1, sq, k, out_d, out_i, md[:k], md[k : 2 * k])

    def range_rows(codes, queries, radius, ids, bounds, counts, cursor, out_d, out_i, fill):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        nchunks = (bounds.shape[0] - 1) * PAR + 1 - PAR  # serial builds scan chunk 0 only
        for c in prange(nchunks):
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

    def rows8(codes, queries, k, ids, strict, bounds, scratch, out_d, out_i):
        nq = queries.shape[0]
        has_ids = ids.shape[0] > 0
        nchunks = (bounds.shape[0] - 1) * PAR + 1 - PAR  # serial builds scan chunk 0 only
        sq = nq + HEAP_PAD * PAR  # heap slots per chunk
        hd, hi, hn, tmp0 = _carve_heaps(scratch, bounds.shape[0] - 1, sq, k)
        _check_scratch(scratch, tmp0, nchunks, nq, k)
        if (X4 and PAR == 0 and k <= SELECT_MAX_K and bounds[1] - bounds[0] <= SELECT and (strict == 1 or not has_ids)
                and select(codes, queries, k, ids, has_ids, bounds[0], bounds[1], scratch[tmp0:], out_d, out_i)):
            return  # selected by counting; it declines (False) only when its candidates overflow
        for c in prange(nchunks):
            tmp = scratch[tmp0 + c * (TEMP + nq * QQ + 2 * k) : tmp0 + (c + 1) * (TEMP + nq * QQ + 2 * k)]
            qpattern = tmp[QO : QO + nq * QW].view(np.uint64)  # each query's words, repeated to fill 8 lanes
            for q in range(nq):
                hn[c * sq + q] = 0
                for j in range(QW):
                    qpattern[q * QW + j] = load_word(queries, q * NB + 8 * (j % FULL), 8)
            if PASS > TILE:  # buffers for a whole pass: no test for a full buffer in the scan loop
                cand_d = tmp[XO : XO + PASS]
                cand_b = tmp[XO + PASS : XO + PASS + PASS // LANES]
                cand_m = tmp[XO + PASS + PASS // LANES : XO + PASS + 2 * (PASS // LANES)]
            else:
                cand_d = tmp[C1 : C1 + TILE]
                cand_b = tmp[BO : BO + TILE // LANES]
                cand_m = tmp[MO : MO + TILE // LANES]
            start = bounds[c]
            step = T8
            # (chunks of a few tiles skip it: a 2-thread search of 10k x 64-bit codes ran 15% slower with it)
            first_rows = TILE if COUNT1 and bounds[c + 1] - start >= 4 * TILE else 0
            if first_rows > 0:  # the first tile: its k-th distance by counting, then only rows within it enter
                hist = tmp[HO : HO + 4 * HB]
                for q in range(nq):
                    slot = c * sq + q
                    for j in range(4 * HB):
                        hist[j] = 0
                    for b in range(first_rows // LANES):
                        rows8_distances(codes, (start + b * LANES) * NB, qpattern, q * QW, FULL, POP, 0, cand_d,
                                        b * LANES)
                    for r in range(first_rows):
                        hist[(r & 3) * HB + cand_d[r]] += 1  # 4 histograms: no store-to-load chain
                    bound = _hist_kth(hist, HB, k)
                    for r in range(first_rows):
                        d = cand_d[r]
                        if d <= bound:
                            _offer(hd, hi, hn, slot, k, d, ids[start + r] if has_ids else start + r)
                start += first_rows
                step = PASS
            while start < bounds[c + 1]:
                nrows = min(step, bounds[c + 1] - start)
                step = PASS
                nblk = nrows // LANES
                for q in range(nq):
                    slot = c * sq + q
                    thr = _threshold(hd, hn, slot, k, strict)
                    # Candidates are offered after the pass over a sub-tile, which keeps the scan loop small:
                    # offering each block's at once ran 10M x 256-bit scans ~18% slower, and visiting mask bits one by
                    # one (lowest_bit) instead of the 8 lanes ran 16k x 64-bit ones ~20% slower (2026-11-23 Xeon, A/B
                    # in separate processes). For narrow codes the first sub-tile is 256 rows (T8).
                    nc = 0
                    first = 0
                    if X4:
                        first = nblk // 4 * 4
                        for b4 in range(0, first, 4):
                            if PF:
                                for j in range(NB * LANES * 4 // 64):
                                    prefetch(codes, (start + b4 * LANES) * NB + PF + 64 * j)
                            m4 = rows8x4_mask(codes, (start + b4 * LANES) * NB, qpattern, q * QW, FULL, POP, thr)
                            if m4 != 0:
                                for j in range(4):
                                    m = (m4 >> (8 * j)) & 255
                                    if m != 0:
                                        rows8_distances(codes, (start + (b4 + j) * LANES) * NB, qpattern, q * QW, FULL,
                                                        POP, thr, cand_d, nc * LANES)
                                        cand_b[nc] = b4 + j
                                        cand_m[nc] = m
                                        nc += 1
                    for b in range(first, nblk):
                        if PF:
                            for j in range(NB * LANES // 64):  # rows8 widths make 8 rows a whole number of lines
                                prefetch(codes, (start + b * LANES) * NB + PF + 64 * j)
                        m = rows8_distances_lazy(codes, (start + b * LANES) * NB, qpattern, q * QW, FULL, POP, thr,
                                                 cand_d, nc * LANES)
                        if m != 0:
                            cand_b[nc] = b
                            cand_m[nc] = m
                            nc += 1
                    thr = _offer_blocks(hd, hi, hn, slot, k, strict, cand_d, cand_b, cand_m, nc, start, ids, has_ids,
                                        thr)
                    for r in range(start + nblk * LANES, start + nrows):  # the ragged end of the last chunk
                        d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                        if d <= thr:
                            _offer(hd, hi, hn, slot, k, d, ids[r] if has_ids else r)
                            thr = _threshold(hd, hn, slot, k, strict)
                start += nrows
        md = scratch[tmp0 + TEMP + nq * QQ :]  # chunk 0's merge buffers, free once the chunks are scanned
        _merge_all(hd, hi, hn, bounds.shape[0] - 1, sq, k, out_d, out_i, md[:k], md[k : 2 * k])

    def select(codes, queries, k, ids, has_ids, lo, hi, tmp, out_d, out_i):
        # Top k of rows lo..hi by counting (see SELECT_MAX_BYTES); ties keep scan order, so ids must ascend. False
        # when a query had more candidates than the buffer holds (the caller then scans with heaps).
        qpattern = tmp[QO : QO + QW].view(np.uint64)
        hist = tmp[HO : HO + 4 * HB]
        pos = tmp[HO + 4 * HB : HO + 5 * HB]  # pos[d]: the result place of the next row at distance d
        d8 = tmp[C1 : C1 + 4 * LANES]
        cand_d = tmp[:CAP]  # the interleave buffer of the batch kernel, unused here
        cand_r = tmp[CAP : 2 * CAP]
        nblk = (hi - lo) // LANES
        first = nblk // 4 * 4
        # Sample size: sampled rows cost a histogram update each, and the candidates they leave cost ~10x that, in
        # number about k x rows / sampled rows: sqrt(rows x k) balances them.
        step = max(1, nblk // max(1, int(np.sqrt(nblk * k * SAMPLE_WEIGHT))))  # every step-th block (no division each)
        nsample = nblk // step
        for q in range(queries.shape[0]):
            for j in range(QW):
                qpattern[j] = load_word(queries, q * NB + 8 * (j % FULL), 8)
            # 1. The k-th distance of a sample bounds the k-th distance of all rows from above.
            for j in range(4 * HB):
                hist[j] = 0
            for i in range(nsample):
                rows8_distances(codes, (lo + i * step * LANES) * NB, qpattern, 0, FULL, POP, 0, d8, 0)
                for lane in range(LANES):
                    hist[(lane & 3) * HB + d8[lane]] += 1
            bound = _hist_kth(hist, HB, k)
            # 2. Every row within the bound is a candidate, in row order (32 rows per test).
            nc = 0
            for b4 in range(0, first, 4):
                m4 = rows8x4_mask(codes, (lo + b4 * LANES) * NB, qpattern, 0, FULL, POP, bound)
                if m4 != 0:
                    if nc > CAP - 4 * LANES:
                        return False
                    row0 = lo + b4 * LANES
                    for j in range(4):
                        rows8_distances(codes, (row0 + j * LANES) * NB, qpattern, 0, FULL, POP, bound, d8, j * LANES)
                    while m4 != 0:
                        j = lowest_bit(m4)
                        m4 &= m4 - 1
                        cand_d[nc] = d8[j]
                        cand_r[nc] = row0 + j
                        nc += 1
            for r in range(lo + first * LANES, hi):  # fewer than 32 rows (and the ragged end)
                d = row_distance(codes, r * NB, queries, q * NB, NB, POP)
                if d <= bound:
                    if nc == CAP:
                        return False
                    cand_d[nc] = d
                    cand_r[nc] = r
                    nc += 1
            # 3. The candidates' histogram gives the exact k-th distance and each distance's first place.
            for d in range(bound + 1):
                pos[d] = 0
            for j in range(nc):
                pos[cand_d[j]] += 1
            total = 0
            for d in range(bound + 1):
                count = pos[d]
                pos[d] = total
                total += count
            for j in range(nc):
                d = cand_d[j]
                p = pos[d]
                if p < k:  # rows tied at the k-th distance past the k-th place are not kept
                    r = cand_r[j]
                    out_d[q, p] = d
                    out_i[q, p] = ids[r] if has_ids else r
                    pos[d] = p + 1
            for j in range(k, out_d.shape[1]):
                out_d[q, j] = -1
                out_i[q, j] = -1
        return True

    SELECT = SELECT_MAX_BYTES // NB if X4 else 0  # rows
    def fixed(kernel):  # a kernel other kernels capture: the same identity in every process (stable_identity)
        return stable_identity(kernel, kernel.py_func.__name__, NB, POP, TILE, PAR)

    select = fixed(compiled(select, inline="always"))

    def _check_scratch(scratch, tmp0, nchunks, nq, k):
        # Kernels index their scratch without bounds checks: a buffer sized for another build (the serial layout
        # has no heap padding) would be written past its end, corrupting the process's heap (seen 2026-11-28: a
        # benchmark ran the parallel build on one chunk with serial-sized scratch).
        if scratch.shape[0] < tmp0 + nchunks * (TEMP + nq * QQ + 2 * k):
            raise ValueError("kernel scratch too small for this call (see scratch_words)")

    _check_scratch = fixed(compiled(_check_scratch, inline="always"))

    with_rows8 = TAIL == 0 and rows8_supports(FULL) and FULL <= ROWS8_MAX_WORDS
    rows_j, rows8_j = fixed(jit(rows)), (fixed(jit(rows8)) if with_rows8 else None)
    few = rows8_j or rows_j  # the few-query scan of this width, called directly below (no dispatch in between)

    # Entry points of the single-query fast path (hamming.knn): the bounds live in the scratch array and the
    # missing ids are made inside, so a call passes 5-6 arrays instead of 7; each array argument costs ~0.2-0.3 us
    # of Numba dispatch, which is a tenth of a 1,000-code search.
    def one(codes, queries, k, scratch, out_d, out_i):
        if codes.shape[1] != NB or POP < 0 or PAR:  # never true; NB, POP and PAR key the disk cache (see _build)
            raise ValueError("kernel built for another width")
        bounds = scratch[:2]
        bounds[0] = 0
        bounds[1] = codes.shape[0]
        few(codes, queries, k, np.empty(0, np.int64), 1, bounds, scratch[2:], out_d, out_i)

    def one_ids(codes, queries, k, ids, strict, scratch, out_d, out_i):
        if codes.shape[1] != NB or POP < 0 or PAR:  # never true; NB, POP and PAR key the disk cache (see _build)
            raise ValueError("kernel built for another width")
        bounds = scratch[:2]
        bounds[0] = 0
        bounds[1] = codes.shape[0]
        few(codes, queries, k, ids, strict, bounds, scratch[2:], out_d, out_i)

    # The parallel fast path: a few queries over nchunks chunks in one call, the chunk bounds computed inside, the
    # merge done at the end of the scan (_merge_all), so no numpy work or second launch around it.
    # Compiled without parallel=True: the parallel loop is the one in `few`.
    def few_par(codes, queries, k, ids, strict, nchunks, scratch, out_d, out_i):
        if codes.shape[1] != NB or POP < 0 or PAR == 0:  # never true; see `one`
            raise ValueError("kernel built for another width")
        bounds = scratch[: nchunks + 1]
        chunk_bounds(bounds, codes.shape[0])
        few(codes, queries, k, ids, strict, bounds, scratch[nchunks + 1 :], out_d, out_i)

    serial_only = PAR == 0
    return (rows_j, jit(blocks), jit(range_rows), rows8_j, jit(one) if serial_only else None,
            jit(one_ids) if serial_only else None, None if serial_only else compiled(few_par))


_KERNELS: dict[tuple[int, int], Kernels] = {}


def kernels(nbytes: int, pop: int) -> Kernels:
    """The kernels for `nbytes`-byte codes and popcount `pop` (0 hardware, 1 SWAR), built once per process."""
    key = (nbytes, pop)
    found = _KERNELS.get(key)
    if found is None:
        found = _KERNELS[key] = Kernels(nbytes, pop)
    return found


# The module's own kernels are globals of the closure kernels, pickled into their disk-cache keys: fixed identities.
for _name, _obj in list(globals().items()):
    if isinstance(_obj, Dispatcher):
        stable_identity(_obj, "_scan", _name)
