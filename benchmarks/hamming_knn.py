"""Exact Hamming k-NN: ondevice kernels vs FAISS IndexBinaryFlat vs numpy, plus the machine's read bandwidth.

    .venv/bin/python benchmarks/hamming_knn.py                 # the full run recorded in BENCHMARKS.md
    .venv/bin/python benchmarks/hamming_knn.py --n 100000      # a quick look

Every library runs in its own subprocess (Numba and FAISS each bring an OpenMP runtime, and fresh processes keep
one library's caches and threads from disturbing another). Each timing is the median of --repeats runs after one
warm-up run. Random codes, k=10. Read bandwidth is a multi-threaded Numba sum over a buffer larger than any cache,
measured in the same run, so "% of bandwidth" compares like with like; the ondevice worker also runs that sum over
the very codes buffer it searches ("% of buffer sum"), because where a fresh buffer's pages land moves its read
speed by 10-20% against the probe's. Rates (codes/s, GB/s, G words/s) come from
wall-clock time; "CPU ms" is the process CPU time per call summed over threads, which stays meaningful when other
jobs share the machine (it includes OpenMP threads spinning while they wait for work).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

BANDWIDTH_BYTES = 512 << 20


def _median_ms(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median process CPU milliseconds (all threads) of `repeats` calls after a warm-up."""
    fn()  # warm-up: JIT compilation, page faults, thread start
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def _codes(n: int, nbytes: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size=(n, nbytes), dtype=np.uint8)


# ------------------------------------------------------------------------------------------------ workers


def _sum_kernel():
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def total(a):
        s = np.uint64(0)
        for i in prange(a.shape[0]):
            s += a[i]
        return s

    return total


def worker_bandwidth(cfg: dict) -> list[dict]:
    import numba
    import numpy as np

    total = _sum_kernel()
    buf = np.ones(BANDWIDTH_BYTES // 8, np.uint64)
    out = []
    for threads in cfg["threads"]:
        numba.set_num_threads(threads)
        ms, cpu = _median_ms(lambda: total(buf), cfg["repeats"])
        out.append({"threads": threads, "ms": ms, "cpu_ms": cpu, "gbps": buf.nbytes / ms / 1e6,
                    "gbps_per_cpu": buf.nbytes / cpu / 1e6})
    return out


def worker_knn(cfg: dict) -> list[dict]:
    import numpy as np

    lib, n, nbytes, k = cfg["lib"], cfg["n"], cfg["bits"] // 8, cfg["k"]
    codes = _codes(n, nbytes, 0)
    queries_all = _codes(max(nq for nq, _ in cfg["runs"]), nbytes, 1)
    out = []
    if lib == "ondevice":
        import numba
        from ondevice.kernels.hamming import knn, resolve_path

        path = resolve_path()
        total = _sum_kernel()
        words = codes.reshape(-1).view(np.uint64) if codes.nbytes % 8 == 0 else None
        for nq, threads in cfg["runs"]:
            q = queries_all[:nq]
            ms, cpu = _median_ms(lambda q=q, t=threads: knn(codes, q, k, threads=t), cfg["repeats"])
            row = {"nq": nq, "threads": threads, "ms": ms, "cpu_ms": cpu, "path": path}
            if nq == 1 and words is not None:
                # The same sum as the bandwidth probe, over the very buffer the scan reads: the speed of light for
                # this scan. Page placement makes a fresh 128 MB buffer read 10-20% slower or faster than the probe's.
                numba.set_num_threads(threads)
                sum_ms, _ = _median_ms(lambda: total(words), cfg["repeats"])
                row["buffer_gbps"] = codes.nbytes / sum_ms / 1e6
            out.append(row)
    elif lib == "faiss":
        import faiss

        index = faiss.IndexBinaryFlat(cfg["bits"])
        index.add(codes)
        for nq, threads in cfg["runs"]:
            faiss.omp_set_num_threads(threads)
            q = queries_all[:nq]
            ms, cpu = _median_ms(lambda q=q: index.search(q, k), cfg["repeats"])
            out.append({"nq": nq, "threads": threads, "ms": ms, "cpu_ms": cpu})
    elif lib == "numpy":
        def search(q):  # numpy's fastest exact route: bitwise_count over the XOR, then argpartition
            dist = np.bitwise_count(codes ^ q).sum(axis=1, dtype=np.int32)
            top = np.argpartition(dist, k)[:k]
            return top[np.lexsort((top, dist[top]))]

        for nq, threads in cfg["runs"]:
            q = queries_all[:nq]
            ms, cpu = _median_ms(lambda q=q: [search(row) for row in q], cfg["repeats"])
            out.append({"nq": nq, "threads": 1, "ms": ms, "cpu_ms": cpu})
    return out


# ------------------------------------------------------------------------------------------------ driver


def run_worker(cfg: dict) -> list[dict]:
    """Run one worker in a fresh Python process and return its results."""
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker {cfg} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(lib: str, n: int, bits: int, nq: int, threads: int, ms: float, cpu_ms: float,
         buffer_gbps: float | None = None) -> dict:
    nbytes = bits // 8
    sec = ms / 1e3
    return {"lib": lib, "n": n, "bits": bits, "nq": nq, "threads": threads, "ms": ms, "cpu_ms": cpu_ms,
            "buffer_gbps": buffer_gbps,
            "gwords_per_cpu": n * nq * nbytes / 8 / (cpu_ms / 1e3) / 1e9,
            "codes_per_s": n * nq / sec, "gbps": n * nbytes / sec / 1e9, "gwords": n * nq * nbytes / 8 / sec / 1e9}


def _fmt_rate(x: float) -> str:
    return f"{x / 1e9:.2f} G" if x >= 1e9 else f"{x / 1e6:.0f} M"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=1_000_000, help="database codes for the main table")
    p.add_argument("--bits", type=int, nargs="+", default=[256, 1024, 2048])
    p.add_argument("--batch", type=int, default=100, help="queries in the batch rows")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7, help="timed runs per cell (median), after one warm-up")
    p.add_argument("--scaling", type=int, nargs="*", default=[10_000, 100_000, 1_000_000, 10_000_000],
                   help="database sizes of the scaling table (256 bits, 2 threads); empty to skip")
    p.add_argument("--no-numpy", action="store_true", help="skip the (slow) numpy baseline")
    p.add_argument("--json", help="also write all rows to this JSON file")
    a = p.parse_args(argv)
    if a.worker:
        cfg = json.loads(a.worker)
        result = worker_bandwidth(cfg) if cfg["lib"] == "bandwidth" else worker_knn(cfg)
        print(json.dumps(result))
        return 0

    started = time.time()
    print(f"# Hamming k-NN benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, k={a.k}, median of {a.repeats} after warm-up", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# load average at start: {load:.2f}", flush=True)
    bw_rows = run_worker({"lib": "bandwidth", "threads": a.threads, "repeats": a.repeats})
    bw = {r["threads"]: r["gbps"] for r in bw_rows}
    print("\nRead bandwidth (Numba parallel sum over 512 MB): "
          + ", ".join(f"{r['threads']} thread{'s' * (r['threads'] > 1)}: {r['gbps']:.1f} GB/s "
                      f"({r['gbps_per_cpu']:.1f} GB per CPU-second)" for r in bw_rows), flush=True)

    rows: list[dict] = []
    runs = [[nq, t] for nq in (1, a.batch) for t in a.threads]
    path = None
    for bits in a.bits:
        for lib in ("ondevice", "faiss") + (() if a.no_numpy else ("numpy",)):
            lib_runs = [[1, 1]] if lib == "numpy" else runs  # numpy is single-threaded and far too slow for batches
            res = run_worker({"lib": lib, "n": a.n, "bits": bits, "k": a.k, "runs": lib_runs, "repeats": a.repeats})
            for r in res:
                rows.append(_row(lib, a.n, bits, r["nq"], r["threads"], r["ms"], r["cpu_ms"], r.get("buffer_gbps")))
                path = r.get("path", path)
            print(f"  measured {lib} at {bits} bits", file=sys.stderr, flush=True)

    def find(lib, bits, nq, t, n=a.n):
        return next((r for r in rows if (r["lib"], r["bits"], r["nq"], r["threads"], r["n"]) == (lib, bits, nq, t, n)), None)

    print(f"\n{a.n:,} codes, ondevice popcount path: {path}\n")
    print("| bits | queries | threads | library | ms | CPU ms | codes/s | GB/s | G words/s | % of read BW "
          "| % of buffer sum | vs FAISS |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for bits in a.bits:
        for nq in (1, a.batch):
            for t in a.threads:
                for lib in ("ondevice", "faiss", "numpy"):
                    r = find(lib, bits, nq, t)
                    if r is None:
                        continue
                    f = find("faiss", bits, nq, t)
                    pct = f"{100 * r['gbps'] / bw[r['threads']]:.0f}%" if nq == 1 else ""
                    buf_pct = f"{100 * r['gbps'] / r['buffer_gbps']:.0f}%" if r["buffer_gbps"] else ""
                    ratio = f"{f['ms'] / r['ms']:.2f}x" if f else ""
                    print(f"| {bits} | {nq} | {r['threads']} | {lib} | {r['ms']:.1f} | {r['cpu_ms']:.1f} | "
                          f"{_fmt_rate(r['codes_per_s'])} | "
                          f"{r['gbps']:.2f} | {r['gwords']:.2f} | {pct} | {buf_pct} | {ratio} |")

    if a.scaling:
        t = max(a.threads)
        print(f"\nScaling at 256 bits, {t} threads (ms; G words/s in brackets)\n")
        print(f"| codes | ondevice 1 query | FAISS 1 query | ratio | ondevice {a.batch} queries | "
              f"FAISS {a.batch} queries | ratio |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in a.scaling:
            for lib in ("ondevice", "faiss"):
                if find(lib, 256, 1, t, n) and find(lib, 256, a.batch, t, n):
                    continue  # already measured for the main table
                res = run_worker({"lib": lib, "n": n, "bits": 256, "k": a.k, "runs": [[1, t], [a.batch, t]],
                                  "repeats": a.repeats})
                rows.extend(_row(lib, n, 256, r["nq"], r["threads"], r["ms"], r["cpu_ms"]) for r in res)
            cells = []
            for nq in (1, a.batch):
                o, f = find("ondevice", 256, nq, t, n), find("faiss", 256, nq, t, n)
                cells += [f"{o['ms']:.2f} ({o['gwords']:.1f})", f"{f['ms']:.2f} ({f['gwords']:.1f})",
                          f"{f['ms'] / o['ms']:.2f}x"]
            print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)

    if 1024 in a.bits and 2 in a.threads:
        print("\nTargets (1024 bits, 2 threads):")
        o1, f1 = find("ondevice", 1024, 1, 2), find("faiss", 1024, 1, 2)
        ob, fb = find("ondevice", 1024, a.batch, 2), find("faiss", 1024, a.batch, 2)
        checks = [
            ("single query >= 90% of read bandwidth (512 MB probe)", 100 * o1["gbps"] / bw[2], 90, "%"),
            ("single query >= 90% of a sum over the same codes buffer", 100 * o1["gbps"] / o1["buffer_gbps"], 90, "%"),
            ("single query >= 2x FAISS", f1["ms"] / o1["ms"], 2, "x"),
            (f"{a.batch}-query batch >= 4x FAISS", fb["ms"] / ob["ms"], 4, "x"),
            (f"{a.batch}-query batch >= 15 G words/s", ob["gwords"], 15, " G words/s"),
        ]
        for name, value, target, unit in checks:
            print(f"  {'MET ' if value >= target else 'MISS'} {name}: {value:.2f}{unit}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n# finished in {time.time() - started:.0f} s; load average at end: {load:.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"bandwidth_gbps": bw, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
