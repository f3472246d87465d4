"""How fast can any exact scan go here? Bare XOR/popcount test loops against the read sum and the search, in turns.

    .venv/bin/python benchmarks/hamming_stream_bound.py                     # 1M x 64 and 256 bits, 1 and 2 threads
    .venv/bin/python benchmarks/hamming_stream_bound.py --sizes 100000 1000000 10000000 --bits 64

The target: a one-query scan from 1M codes for >= 90% of the read bound (a plain parallel sum of the same bytes).
Where the catalog sits in L3 the sum reads faster than a core can XOR, popcount and compare, so this benchmark
times, over the same codes and with the same thread count, loops that do only the work every exact scan must do,
built from the search's own intrinsics (kernels/intrinsics.py):

- `read`: the read bound of benchmarks/hamming_knn.py (a Numba parallel sum of the words);
- `test`: each 32 rows XORed with the query, popcounted and compared with a threshold (rows8x4_mask), the four
  blocks' masks ORed together and kept, no branch: the least work that still decides every row;
- `test+branch`: the same with a branch on each 32 rows' mask, as the search's scan loop has (never taken here:
  the threshold is -1);
- `call floor`: a Numba function taking the search kernel's arguments that scans nothing (with one parallel loop
  over the chunks when the search has several): the dispatch and thread launch every call from Python pays;
- `kernel`: the search's own Numba entry point (what hamming.knn's fast path calls), called directly with its
  scratch and result arrays made once: the search without its Python wrapper;
- `ondevice`: hamming.knn(codes, query, 10, threads=...), a different query each call.

Each round times every loop in turn (a burst of --budget seconds, median call); a cell is the median over rounds.
The results JSON keeps every round. Codes of at most 4 words (64, 128, 256 bits: the widths rows8x4_mask takes).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

import numpy as np
from hamming_knn import read_sum_kernel

from ondevice.results import start_run, write_result


def _loop(nwords: int, parallel: bool, branch: bool):
    """A bare loop for codes of `nwords` words, one chunk per thread (`nch` chunks of whole 32-row groups): each 32
    rows' mask ORed into an accumulator, or (`branch`) a branch on it as the search's scan loop has."""
    from numba import njit, prange
    from ondevice.kernels.intrinsics import rows8x4_mask

    @njit(parallel=parallel, cache=False)
    def loop(codes, qp, thr, nch):
        n = codes.shape[0]
        s = 0
        for c in prange(nch):
            lo = n * c // nch // 32 * 32
            hi = n * (c + 1) // nch // 32 * 32
            acc = 0
            for r in range(lo, hi, 32):
                m = rows8x4_mask(codes, r * nwords * 8, qp, 0, nwords, 0, thr)
                if branch:  # a compile-time constant: one of the two bodies is compiled
                    if m != 0:
                        acc += 1
                else:
                    acc |= m
            s += acc
        return s

    return loop


def _floor(parallel: bool):
    """A Numba function with the search entry point's arguments that scans nothing: one (parallel) pass over the
    chunks writing one id each, so the call, its argument dispatch and the thread launch are all that is left."""
    from numba import njit, prange

    @njit(parallel=parallel, cache=False)
    def floor(codes, queries, k, ids, strict, nchunks, scratch, out_d, out_i):
        for c in prange(nchunks):
            out_i[0, c % out_i.shape[1]] = c
        return 0

    return floor


def _kernel_call(hamming, codes, threads: int, k: int):
    """hamming.knn's fast-path kernel for one query over `codes` (the thread plan knn would use), as a function of
    the query, with its scratch and result arrays made once; the matching call floor; the chunks; the result arrays."""
    from ondevice.kernels import _scan

    n, nb = codes.shape
    chunks = hamming.plan_threads(n, nb, 1, threads)
    kern = hamming._kernels(nb, hamming.resolve_path(None))
    out_d, out_i = np.empty((1, k), np.int32), np.empty((1, k), np.int64)
    no_ids = np.empty(0, np.int64)
    floor = _floor(chunks > 1)
    if chunks == 1:
        scratch = np.empty(2 + _scan.scratch_words(nb, kern.tile_rows, 1, 1, k), np.int64)
        return (lambda q: kern.one(codes, q, k, scratch, out_d, out_i),
                lambda q: floor(codes, q, k, no_ids, 1, 1, scratch, out_d, out_i), chunks, (out_d, out_i))
    scratch = np.empty(chunks + 1 + _scan.scratch_words(nb, kern.tile_rows, chunks, 1, k), np.int64)
    return (lambda q: kern.few_par(codes, q, k, no_ids, 1, chunks, scratch, out_d, out_i),
            lambda q: floor(codes, q, k, no_ids, 1, chunks, scratch, out_d, out_i), chunks, (out_d, out_i))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--bits", type=int, nargs="+", default=[64, 256], choices=[64, 128, 256])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.1, help="seconds of calls per loop and round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default=None)
    a = p.parse_args(argv)
    import numba
    from ondevice.kernels import hamming
    from ondevice.kernels.intrinsics import rows8_query_words

    meta = start_run(threads=max(a.threads), argv=argv, sizes=a.sizes, bits=a.bits, thread_counts=a.threads,
                     rounds=a.rounds, budget=a.budget, seed=a.seed)
    read_sum = read_sum_kernel()
    rng = np.random.default_rng(a.seed)
    rows = []
    for bits, n, threads in itertools.product(a.bits, sorted(a.sizes), a.threads):
        nwords = bits // 64
        codes = rng.integers(0, 2**63, n * nwords, dtype=np.int64).view(np.uint8).reshape(n, nwords * 8)
        words = codes.reshape(-1).view(np.uint64)
        queries = [rng.integers(0, 256, (1, nwords * 8), dtype=np.uint8) for _ in range(100)]
        qwords = queries[0].view(np.uint64).reshape(-1)
        qp = np.tile(qwords, rows8_query_words(nwords) // nwords)  # the query's words repeated over 8 lanes
        test, test_branch = _loop(nwords, threads > 1, False), _loop(nwords, threads > 1, True)
        numba.set_num_threads(threads)
        turn, kturn, fturn = itertools.cycle(queries), itertools.cycle(queries), itertools.cycle(queries)
        kernel, floor, chunks, out = _kernel_call(hamming, codes, threads, 10)
        for q in queries[:3]:  # the kernel called directly is the search: same top 10 as hamming.knn, or no timing
            kernel(q)
            want = hamming.knn(codes, q, 10, threads=threads)
            if not (np.array_equal(out[0], want[0]) and np.array_equal(out[1], want[1])):
                raise SystemExit(f"the kernel called directly disagrees with hamming.knn at {n} x {bits} bits")
        calls = {"read": lambda w=words: read_sum(w),  # every name bound now: the calls run in this iteration only
                 "test": lambda c=codes, t=threads, f=test, q=qp: f(c, q, -1, t),
                 "test+branch": lambda c=codes, t=threads, f=test_branch, q=qp: f(c, q, -1, t),
                 "call floor": lambda f=floor, nxt=fturn.__next__: f(nxt()),
                 "kernel": lambda f=kernel, nxt=kturn.__next__: f(nxt()),
                 "ondevice": lambda c=codes, t=threads, nxt=turn.__next__: hamming.knn(c, nxt(), 10, threads=t)}
        for call in calls.values():  # compile and warm up
            call()
        samples = {name: [] for name in calls}
        for _ in range(a.rounds):
            for name, call in calls.items():
                times, until = [], time.perf_counter() + a.budget
                while time.perf_counter() < until or len(times) < 3:
                    t0 = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t0)
                samples[name].append(statistics.median(times) * 1e3)
        ms = {name: statistics.median(v) for name, v in samples.items()}
        row = {"n": n, "bits": bits, "threads": threads, "chunks": chunks, "ms": ms, "round_ms": samples,
               "read_share": {name: ms["read"] / v for name, v in ms.items() if name != "read"}}
        rows.append(row)
        print(f"{n:>10,} x {bits:>3} bits, {threads} thread(s): read {ms['read']:.4f} ms; "
              + ", ".join(f"{name} {ms[name]:.4f} ms ({row['read_share'][name]:.0%})" for name in calls if name != "read"),
              flush=True)
    print(f"wrote {write_result('hamming_stream_bound', {'rows': rows}, meta, root=a.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
