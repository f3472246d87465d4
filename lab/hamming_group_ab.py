"""The batch kernel with query groups (GROUP=4, the default) against the same kernel one query at a time (GROUP=1).

    .venv/bin/python lab/hamming_group_ab.py        # 200k x 1024-bit codes, 100 queries, k=10, one thread

Both builds of kernels/_scan.py's serial `blocks` kernel run in one process on the same codes, in turns, and must
give identical results; each timing is the process CPU time of one call (less sensitive than wall time to other
load on a shared machine), median of --repeats. The question: should a database block be read once per group of queries?
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from ondevice.results import start_run, write_result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--bits", type=int, default=1024)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default=None)
    a = p.parse_args(argv)
    from ondevice.kernels import _scan

    meta = start_run(threads=1, argv=argv, n=a.n, bits=a.bits, queries=a.queries, k=10, seed=a.seed)
    rng = np.random.default_rng(a.seed)
    nb, k = a.bits // 8, 10
    codes = rng.integers(0, 256, (a.n, nb), dtype=np.uint8)
    queries = rng.integers(0, 256, (a.queries, nb), dtype=np.uint8)
    default_group = _scan.GROUP

    def build(group: int):
        _scan.GROUP = group  # read when the kernels are built
        try:
            kern = _scan.Kernels(nb, 0)
        finally:
            _scan.GROUP = default_group
        scratch = np.empty(_scan.scratch_words(nb, kern.tile_rows, 1, a.queries, k), np.int64)
        out = (np.empty((a.queries, k), np.int32), np.empty((a.queries, k), np.int64))
        bounds, ids = np.array([0, a.n], np.int64), np.empty(0, np.int64)
        return (lambda: kern.blocks_serial(codes, queries, k, ids, 1, bounds, scratch, *out)), out

    calls = {f"group {g}": build(g) for g in (default_group, 1)}
    for fn, _ in calls.values():
        fn()  # compile or load, warm up
    (d0, i0), (d1, i1) = (out for _, out in calls.values())
    if not (np.array_equal(d0, d1) and np.array_equal(i0, i1)):
        print("the two builds disagree", file=sys.stderr)
        return 1
    cpu = {name: [] for name in calls}
    for _ in range(a.repeats):
        for name, (fn, _) in calls.items():
            c0 = time.process_time()
            fn()
            cpu[name].append(time.process_time() - c0)
    rows = []
    for name, samples in cpu.items():
        ms = statistics.median(samples) * 1e3
        gw = a.n * a.queries * nb / 8 / (ms / 1e3) / 1e9
        rows.append({"kernel": name, "cpu_ms": ms, "gwords_per_s": gw, "samples_ms": [s * 1e3 for s in samples]})
        print(f"{name}: {ms:.1f} ms CPU = {gw:.2f} G 64-bit words compared/s (one thread)")
    print(f"speed-up of groups: {rows[1]['cpu_ms'] / rows[0]['cpu_ms']:.2f}x")
    print(f"wrote {write_result('hamming_group_ab', {'rows': rows}, meta, root=a.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
