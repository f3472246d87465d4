"""Builds of the single-query scan (prefetch distance, other build settings), A/B in one process, call by call.

    .venv/bin/python benchmarks/hamming_prefetch_ab.py --distances 0 8192 --sizes 1000000 10000000 --bits 64 1024
    .venv/bin/python benchmarks/hamming_prefetch_ab.py --distances -1 --set COUNT_FIRST_MAX_WORDS=0,1 --threads 1

Whole grids run one after the other swing with the VM's memory bandwidth (on the family-26 EPYC the two-thread read
probe gave 33-81 GB/s across one hour), so a distance is judged here against the others within the same rounds:
every build of kernels/_scan.py's kernels (one per distance and setting, at any code width) and a plain parallel
sum of the same bytes (the read bound) take turns, each round a new query, the same queries for every build, and
all builds must return the same top k. A cell is the median over rounds of each build's median call (wall time).
Which distance, for which catalogs, at two threads. `--set NAME=V1,V2` builds the kernels once per
value of a kernels/_scan.py setting read at build time (several --set: every combination), e.g.
COUNT_FIRST_MAX_WORDS; `--distances -1` keeps the CPU's default distance; `--threads 1` times the serial kernels
(the one-thread search) instead of the parallel ones.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--distances", type=int, nargs="+", default=[0, 8192],
                   help="prefetch distances in bytes (0 = off, -1 = this CPU's default)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2",
                   help="a kernels/_scan.py setting and the whole-number values to build it with")
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--bits", type=int, nargs="+", default=[64, 256, 1024, 2048])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="turns through every build per cell")
    p.add_argument("--budget", type=float, default=0.15, help="seconds of calls per build and round")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default=None)
    a = p.parse_args(argv)
    import numba
    from ondevice.kernels import _scan

    settings = {}
    for item in a.set:
        name, _, values = item.partition("=")
        if not hasattr(_scan, name) or not name.isupper():
            p.error(f"--set {item}: kernels/_scan.py has no setting {name!r}")
        try:
            settings[name] = [int(v) for v in values.split(",")]
        except ValueError:
            p.error(f"--set {item}: values must be whole numbers separated by commas")

    numba.set_num_threads(a.threads)
    meta = start_run(threads=a.threads, argv=argv, distances=a.distances, settings=settings,
                     sizes=a.sizes, bits=a.bits, k=a.k, rounds=a.rounds, seed=a.seed)
    read_sum = read_sum_kernel()
    rng = np.random.default_rng(a.seed)
    rows = []
    for bits in a.bits:
        nb = bits // 8
        codes_all = rng.integers(0, 2**63, (max(a.sizes) * nb + 7) // 8, dtype=np.int64).view(np.uint8)
        codes_all = codes_all[: max(a.sizes) * nb].reshape(max(a.sizes), nb)
        queries = [rng.integers(0, 256, (1, nb), dtype=np.uint8) for _ in range(64)]
        builds = {}
        need = 0  # scratch words (beyond the chunk bounds) the hungriest build needs
        names = ("PREFETCH_BYTES", "PREFETCH_PARALLEL_BYTES", "PREFETCH_PARALLEL_MAX_WORDS", *settings)
        saved = {name: getattr(_scan, name) for name in names}
        for dist, *values in itertools.product(a.distances, *settings.values()):  # read when the kernels are built
            if dist >= 0:
                _scan.PREFETCH_BYTES = _scan.PREFETCH_PARALLEL_BYTES = dist
                _scan.PREFETCH_PARALLEL_MAX_WORDS = _scan.NO_LIMIT
            for name, value in zip(settings, values):
                setattr(_scan, name, value)
            name = ", ".join(["default" if dist < 0 else f"{dist} B"] + [f"{n}={v}" for n, v in zip(settings, values)])
            try:
                builds[name] = _scan.Kernels(nb, 0)  # each build has its own machine code (and kernel names)
                # the scratch layout follows the settings too (e.g. long passes' buffers): the largest fits every build
                need = max(need, 1 + _scan.scratch_words(nb, builds[name].tile_rows, a.threads, 1, a.k))
            finally:
                for key, value in saved.items():
                    setattr(_scan, key, value)
        for n in sorted(a.sizes):
            codes = codes_all[:n]
            ids = np.empty(0, np.int64)
            if a.threads == 1:  # the serial build, as a one-thread search calls it
                scratch = np.empty(1 + need, np.int64)

                def search(kern, q, out, codes=codes, scratch=scratch):
                    kern.one(codes, q, a.k, scratch, *out)
            else:
                scratch = np.empty(a.threads + need, np.int64)

                def search(kern, q, out, codes=codes, ids=ids, scratch=scratch):
                    kern.few_par(codes, q, a.k, ids, 1, a.threads, scratch, *out)

            outs = {name: (np.empty((1, a.k), np.int32), np.empty((1, a.k), np.int64)) for name in builds}
            for q in queries[:4]:  # compile or load, warm up, and all builds agree
                for name, kern in builds.items():
                    search(kern, q, outs[name])
                first = next(iter(outs.values()))
                if not all(np.array_equal(o[0], first[0]) and np.array_equal(o[1], first[1]) for o in outs.values()):
                    print(f"the builds disagree at {n:,} x {bits} bits", file=sys.stderr)
                    return 1
            words = codes.reshape(-1).view(np.uint64)
            read_sum(words)
            samples = {name: [] for name in [*builds, "read"]}
            turn = itertools.cycle(queries)
            for _ in range(a.rounds):
                for name, got in samples.items():  # every build and the read bound, in turns, each a median of a burst
                    times, until = [], time.perf_counter() + a.budget
                    while time.perf_counter() < until or len(times) < 3:
                        q = next(turn)
                        t0 = time.perf_counter()
                        if name == "read":
                            read_sum(words)
                        else:
                            search(builds[name], q, outs[name])
                        times.append(time.perf_counter() - t0)
                    got.append(statistics.median(times) * 1e3)
            ms = {name: statistics.median(v) for name, v in samples.items()}
            row = {"n": n, "bits": bits, "threads": a.threads, "ms": ms, "round_ms": samples,
                   "read_share": {name: ms["read"] / v for name, v in ms.items() if name != "read"}}
            rows.append(row)
            print(f"{n:>10,} x {bits:>4} bits, {a.threads} threads: "
                  + ", ".join(f"{name} {v:.4f} ms ({row['read_share'][name]:.0%})" for name, v in ms.items() if name != "read")
                  + f"; read bound {ms['read']:.4f} ms", flush=True)
    print(f"wrote {write_result('hamming_prefetch_ab', {'rows': rows}, meta, root=a.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
