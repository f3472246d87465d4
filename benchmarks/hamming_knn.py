"""Exact Hamming top-10 on device-sized catalogs: ondevice vs FAISS IndexBinaryFlat vs numpy, the whole grid.

    .venv/bin/python benchmarks/hamming_knn.py                              # every size x width x thread count
    .venv/bin/python benchmarks/hamming_knn.py --bits 64 256 --sizes 1000 10000   # part of the grid
    .venv/bin/python benchmarks/hamming_knn.py --report benchmarks/results/hamming_grid-*.json   # combine runs

One query (k=10; each call the next of 100 distinct queries) over catalogs of --sizes codes at --bits widths, with 1 and 2 threads (FAISS through
omp_set_num_threads; ondevice through `threads=`, which may use fewer where a thread's share would be too small,
and also with its default, threads=None, chosen from the work size). Plus: a 100-query batch on 1M x 1024-bit codes
(2 threads), the machine's read bandwidth (a Numba parallel sum over 512 MB, per thread count) and its popcount
peak (XOR + popcount over an L1-resident buffer, per thread count). Before a cell is timed, ondevice's top-10
distances are checked equal to FAISS's on three of its queries (the batch: on all of them); a difference stops the run.

Every width runs in --rounds rounds of worker processes, on the same random codes (same seed). Each library has
its own worker per thread setting (at 2+ threads FAISS's OpenMP threads keep spinning after a call and would slow
whatever ran next in the same process; at 1 thread FAISS's copy of the catalog and numpy's temporaries evicted the
catalog from the cache before the next library's turn), in reversed order every other round (ondevice, FAISS, numpy;
numpy, FAISS, ondevice; ...), so a swing of the VM's core speed does not land on one library only. The read bound
of a cell is timed in ondevice's worker, in turns with it over the same bytes. Within a worker each cell is
the median of its repeats after one warm-up call (repeats adapt to the cell's time: --budget seconds per cell and
round, at least 3); the reported cell is the median over rounds, and every round's cell is kept in the JSON. The
run writes one results JSON (commit, command, CPU model, library versions, load averages) and, with --plot, a plot
of time vs catalog size.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ondevice.results import cpu_details, cpu_model, create_new, stamped

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
WIDTHS = [64, 256, 1024, 2048]
THREADS = [1, 2]
BANDWIDTH_BYTES = 512 << 20
READ_PROBE_MIN = 1_000_000  # catalogs from this size get their own read-bound cell (the bandwidth target's range)
PAIRED_MAX_BYTES = 4 << 20  # one-thread catalogs up to this size are also timed with ondevice and FAISS in one process
PAIRED_BLOCK_SECONDS = 0.01  # in the paired cells the two libraries alternate about this often
K = 10


def _meta(argv: list[str]) -> dict:
    import faiss
    import numba
    import numpy
    from ondevice.kernels import _scan

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True, check=False).stdout.strip())
    return {"commit": commit + ("-dirty" if dirty else ""), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv[:1], *argv]), "cpu_model": cpu_model(),
            "cpu": cpu_details(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "versions": {"numpy": numpy.__version__, "numba": numba.__version__, "faiss": faiss.__version__},
            "numba_threads": numba.config.NUMBA_NUM_THREADS, "load_average_start": os.getloadavg(),
            "prefetch_bytes": _scan.PREFETCH_BYTES, "prefetch_parallel_bytes": _scan.PREFETCH_PARALLEL_BYTES,
            "prefetch_parallel_max_words": _scan.PREFETCH_PARALLEL_MAX_WORDS,
            "prefetch_env": os.environ.get("ONDEVICE_PREFETCH_BYTES")}


# ------------------------------------------------------------------------------------------------ probes


def read_sum_kernel():
    """A Numba parallel sum of uint64 words: the plainest full read of a buffer (the read bound of a scan)."""
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def read_sum(a):
        s = np.uint64(0)
        for i in prange(a.shape[0]):
            s += a[i]
        return s

    return read_sum


def _probes(threads: list[int], repeats: int) -> dict:
    """Read bandwidth (parallel sum over 512 MB) and popcount peak (L1-resident XOR/popcount), per thread count."""
    import numba
    import numpy as np
    from numba import njit, prange
    from ondevice.kernels.intrinsics import row_distance

    total = read_sum_kernel()

    @njit(parallel=True, cache=False)
    def popcount_peak(buf, q, reps, nthreads):
        # each thread XOR/popcounts its own 16 KB buffer (in L1) against a 64-byte query, reps times, 8 words at once
        out = np.zeros(nthreads, np.int64)
        for t in prange(nthreads):
            acc = 0
            for _ in range(reps):
                for r in range(256):
                    acc += row_distance(buf[t], r * 64, q, 0, 64, 0)
            out[t] = acc
        return out

    buf = np.ones(BANDWIDTH_BYTES // 8, np.uint64)
    rng = np.random.default_rng(0)
    pbuf = rng.integers(0, 256, (max(threads), 16384), dtype=np.uint8)
    q = rng.integers(0, 256, 64, dtype=np.uint8)
    out = {"read_gbps": {}, "popcount_gwords": {}}
    for t in threads:
        numba.set_num_threads(t)
        wall = _median(lambda: total(buf), repeats)
        out["read_gbps"][t] = buf.nbytes / wall / 1e9
        reps = 2000
        wall = _median(lambda t=t, reps=reps: popcount_peak(pbuf, q, reps, t), repeats)
        out["popcount_gwords"][t] = t * reps * 16384 / 8 / wall / 1e9
    return out


def _median(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


# ------------------------------------------------------------------------------------------------ worker


def _check_against_faiss(hamming, index, db, queries: list, threads: int) -> None:
    """Stop before timing a cell whose top-k distances differ from FAISS's: a fast wrong kernel is no result (on
    2026-11-27 a Numba disk-cache symbol clash made kernels of one build run another build's code)."""
    import numpy as np

    for q in queries:
        got = hamming.knn(db, q, K, threads=threads)[0]
        want = index.search(q, K)[0]
        if not (got == want).all():
            bad = int(np.argmax((got != want).any(axis=1)))
            raise SystemExit(f"ondevice's top-{K} distances differ from FAISS's on {len(db):,} x {db.shape[1] * 8} bits at "
                             f"{threads} thread(s): {got[bad][:5].tolist()} vs {want[bad][:5].tolist()}; not timing wrong results")


def worker(cfg: dict) -> dict:
    """One width and the worker's libraries (one per process in main; ondevice's also times the read sum): every size
    and thread count, the calls interleaved; returns {"cells": [...], ...}."""
    import faiss
    import numba
    import numpy as np
    from ondevice.kernels import hamming

    read_sum = read_sum_kernel()

    bits, sizes, budget, libs = cfg["bits"], sorted(cfg["sizes"]), cfg["budget"], cfg["libs"]
    nbytes = bits // 8
    rng = np.random.default_rng(bits)
    # uint64 draws are several times faster than uint8 ones; a prefix of random codes is a random catalog.
    codes = rng.integers(0, 2**63, (sizes[-1] * nbytes + 7) // 8, dtype=np.int64).view(np.uint8)[: sizes[-1] * nbytes]
    codes = codes.reshape(sizes[-1], nbytes)
    queries = rng.integers(0, 256, (cfg["batch"], nbytes), dtype=np.uint8)
    # Single-query cells search the batch's queries in turn, each library the same sequence: the same query over
    # and over lets the branch predictor learn that search's exact branches (measured: FAISS and the heap scan
    # ~20% faster at 1,000 codes than with a new query each call), which an app's searches never get.
    singles = [np.ascontiguousarray(queries[i : i + 1]) for i in range(1 if cfg.get("same_query") else len(queries))]

    def q1s():  # a fresh turn through the queries per call site (bound as a default: one per lambda)
        return itertools.cycle(singles).__next__

    q1 = singles[0]
    if cfg.get("paired"):
        return _paired(cfg, codes, singles, q1s)
    index = faiss.IndexBinaryFlat(bits) if "faiss" in libs else None
    faiss.omp_set_num_threads(max(cfg["threads"]))  # a 1-thread worker never starts an OpenMP team, warm-up included
    cells = []

    # Process warm-up before the first timed cell: the first few hundred calls of a fresh process run slower
    # (measured: the first cell of every worker up to 2x), which would bias whichever cell comes first.
    warm_db = codes[: sizes[0]]
    warm = {"ondevice": lambda: (hamming.knn(warm_db, q1, K, threads=1), hamming.knn(warm_db, q1, K)),
            "numpy": lambda: hamming.knn(warm_db, q1, K, path="numpy")}
    if "faiss" in libs:
        index.add(warm_db)
        warm["faiss"] = lambda: index.search(q1, K)
    until = time.perf_counter() + 0.5
    while time.perf_counter() < until:
        for lib in libs:
            warm[lib]()
    if index is not None:
        index.reset()
    added = 0
    for n in sizes:
        db = codes[:n]
        if index is not None:
            index.add(codes[added:n])  # the FAISS index holds exactly the first n codes
        added = n
        for threads in cfg["threads"]:
            calls = {}
            if "ondevice" in libs:
                calls["ondevice"] = lambda db=db, t=threads, q=q1s(): hamming.knn(db, q(), K, threads=t)  # noqa: B008
                if threads == cfg.get("auto_threads", max(cfg["threads"])):
                    calls["ondevice-auto"] = lambda db=db, q=q1s(): hamming.knn(db, q(), K)  # noqa: B008
            if "faiss" in libs:
                calls["faiss"] = lambda q=q1s(): index.search(q(), K)  # noqa: B008
            if "ondevice" in libs and n >= cfg.get("read_min", READ_PROBE_MIN):
                # the read bound of this very cell: a plain sum over the same bytes, same threads, same turns
                words = db.reshape(-1).view(np.uint64)
                calls["read"] = lambda words=words: read_sum(words)
            if "numpy" in libs and threads == 1 and bits % 64 == 0:
                # numpy's fastest exact route: bitwise_count over the XOR (8 MB steps), partition, lexsort
                calls["numpy"] = lambda db=db, q=q1s(): hamming.knn(db, q(), K, path="numpy")  # noqa: B008
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            faiss.omp_set_num_threads(threads)
            if index is not None and "ondevice" in libs:
                _check_against_faiss(hamming, index, db, singles[:3], threads)
            cells += _interleaved(calls, budget, {"n": n, "bits": bits, "threads": threads, "nq": 1},
                                  plan=hamming.plan_threads(n, nbytes, 1, threads))
        if n == cfg.get("batch_n") and libs != ["numpy"]:
            t = max(cfg["threads"])
            numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
            faiss.omp_set_num_threads(t)
            calls = {}
            if index is not None and "ondevice" in libs:
                _check_against_faiss(hamming, index, db, [queries], t)
            if "ondevice" in libs:
                calls["ondevice"] = lambda db=db, t=t: hamming.knn(db, queries, K, threads=t)
            if "faiss" in libs:
                calls["faiss"] = lambda: index.search(queries, K)
            cells += _interleaved(calls, budget, {"n": n, "bits": bits, "threads": t, "nq": len(queries)})
        print(f"  {bits} bits: {n:,} codes done", file=sys.stderr, flush=True)
    return {"cells": cells, "path": hamming.resolve_path(), "parallel_min_bytes": hamming.parallel_min_bytes()}


def _paired(cfg: dict, codes, singles: list, q1s) -> dict:
    """ondevice and FAISS at one thread in one process, alternating every few milliseconds, on the catalogs whose two
    copies (ours and FAISS's) fit in the cache together (n x bytes <= --paired-max-bytes).

    Separate workers run minutes apart, and this VM's core speed has phases of a fraction of a second to minutes
    that differ up to 2x: on 2026-11-28 (AMD EPYC family 25 model 1) ondevice's 1,000 x 256-bit cell read 8.5, 13.5,
    12.4, 12.2, 8.1 us over five rounds and FAISS's 9.4, 9.6, 10.0, 17.0, 15.3, so the median ratio came out 0.82x
    where a same-process A/B gave 1.8x. Here both libraries see the same phases; cells are named "*-paired".
    """
    import faiss
    from ondevice.kernels import hamming

    bits = cfg["bits"]
    faiss.omp_set_num_threads(1)  # one thread: no OpenMP team that would spin into ondevice's turns
    index = faiss.IndexBinaryFlat(bits)
    cells, added = [], 0
    for n in sorted(cfg["sizes"]):
        if n * bits // 8 > cfg["paired_max_bytes"]:
            break
        db = codes[:n]
        index.add(codes[added:n])
        added = n
        _check_against_faiss(hamming, index, db, singles[:3], 1)
        calls = {"ondevice-paired": lambda db=db, q=q1s(): hamming.knn(db, q(), K, threads=1),  # noqa: B008
                 "faiss-paired": lambda q=q1s(): index.search(q(), K)}  # noqa: B008
        cells += _interleaved(calls, cfg["budget"], {"n": n, "bits": bits, "threads": 1, "nq": 1},
                              block_seconds=PAIRED_BLOCK_SECONDS)
    return {"cells": cells, "path": hamming.resolve_path(), "parallel_min_bytes": hamming.parallel_min_bytes()}


def _interleaved(calls: dict, budget: float, key: dict, plan: int | None = None,
                 block_seconds: float | None = None) -> list[dict]:
    """Median wall and CPU time per call of each caller: blocks of calls, callers taking turns (A B C A B C).

    Blocks rather than single calls: a call made right after another caller's can see what that one left behind
    (OpenMP threads still spinning, other data in the cache); within a block only its first call can.
    """
    first = {}
    for name, fn in calls.items():
        fn()  # warm-up: compilation, page faults, thread start
        t0 = time.perf_counter()
        fn()  # the repeats follow a warm call's time (a cold one, e.g. a first threads=None call, left just 3)
        first[name] = time.perf_counter() - t0
    per_round = sum(first.values())
    rounds = int(max(3, min(300, budget / max(per_round, 1e-6))))
    blocks = min(3, rounds)
    if block_seconds:  # many short blocks instead of three: callers alternate every block_seconds or so
        rounds = int(max(3, budget / max(per_round, 1e-7)))
        blocks = int(max(1, min(rounds, budget / len(calls) / block_seconds)))
    wall = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    for b in range(blocks):
        for name, fn in calls.items():
            for _ in range(rounds // blocks + (b < rounds % blocks)):
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    out = []
    for name in calls:
        row = {**key, "lib": name, "ms": statistics.median(wall[name]) * 1e3, "cpu_ms": statistics.median(cpu[name]) * 1e3,
               "repeats": rounds, "p25_ms": statistics.quantiles(wall[name], n=4)[0] * 1e3}
        if name == "ondevice" and plan is not None:
            row["ondevice_threads_used"] = plan
        out.append(row)
    return out


def median_cells(round_cells: list[dict]) -> list[dict]:
    """One cell per (library, size, width, threads, queries): the median over rounds of each round's median."""
    groups: dict[tuple, list[dict]] = {}
    for c in round_cells:
        groups.setdefault((c["lib"], c["n"], c["bits"], c["threads"], c["nq"]), []).append(c)
    out = []
    for group in groups.values():
        cell = {k: v for k, v in group[0].items() if k not in ("round", "ms", "cpu_ms", "p25_ms", "repeats")}
        cell.update(ms=statistics.median(c["ms"] for c in group), cpu_ms=statistics.median(c["cpu_ms"] for c in group),
                    round_ms=[c["ms"] for c in group], repeats=sum(c["repeats"] for c in group))
        out.append(cell)
    return out


def run_worker(cfg: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], capture_output=True, text=True,
                          check=False)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"worker {cfg} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ report


def report(results: list[dict]) -> str:
    """The grid as markdown tables, from one or more results files."""
    # every cell is compared with the probes of its own run
    cells = [{**c, "_probes": r["probes"]} for r in results for c in r["cells"]]
    lines = []
    for r in results:
        probes = r["probes"]
        lines.append(("Read bandwidth: " if len(results) == 1 else f"Run of {r['date']}: read bandwidth ")
                     + ", ".join(f"{t} thread(s) {g:.1f} GB/s" for t, g in sorted(probes["read_gbps"].items()))
                     + "; popcount peak: " + ", ".join(f"{t} thread(s) {g:.1f} G words/s"
                                                       for t, g in sorted(probes["popcount_gwords"].items())))
    lines.append("")

    def read_pct(c: dict) -> float:
        # The cell's own read bound (a sum over the same bytes, timed in turns with it) where the run has one: a
        # machine-wide probe taken minutes apart on a shared machine compares unlike loads.
        own = get("read", c["n"], c["bits"], c["threads"], c["nq"], c["_probes"])
        if own is not None:
            return 100 * own["ms"] / c["ms"]
        bw = {int(k): v for k, v in c["_probes"]["read_gbps"].items()}[c["threads"]]
        return 100 * c["n"] * c["bits"] / 8 / (c["ms"] / 1e3) / 1e9 / bw

    def get(lib, n, bits, t, nq=1, run=None):
        return next((c for c in cells if (c["lib"], c["n"], c["bits"], c["threads"], c["nq"]) == (lib, n, bits, t, nq)
                     and (run is None or c["_probes"] is run)), None)

    widths = sorted({c["bits"] for c in cells})
    sizes = sorted({c["n"] for c in cells})
    threads = sorted({c["threads"] for c in cells})
    bound = ("the read bound timed in turns with it: a plain sum over the same bytes at the same thread count"
             if any(c["lib"] == "read" for c in cells) else "the read-bandwidth probe at the same thread count")
    # FAISS / ondevice of the one-thread cells timed in one process, by (codes, bits)
    paired = {(c["n"], c["bits"]): f["ms"] / c["ms"] for c in cells if c["lib"] == "ondevice-paired"
              for f in [get("faiss-paired", c["n"], c["bits"], 1)] if f}
    lines += [("One query, k=10: milliseconds (ondevice / FAISS IndexBinaryFlat ratio = FAISS ms / ondevice ms; "
               f"% = ondevice read speed as a share of {bound}"
               + ("; same process: the ratio with both libraries alternating every ~10 ms in one process, one thread, "
                  "catalogs that fit in the cache twice" if paired else "") + ")"), "",
              ("| codes | bits | threads | ondevice ms | FAISS ms | numpy ms | FAISS / ondevice | ondevice default "
               "threads ms | % of read BW |" + (" FAISS / ondevice, same process |" if paired else "")),
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if paired else "")]
    worst = None
    for bits in widths:
        for n in sizes:
            for t in threads:
                o, f = get("ondevice", n, bits, t), get("faiss", n, bits, t)
                if o is None:
                    continue
                npy, auto = get("numpy", n, bits, 1), get("ondevice-auto", n, bits, t)
                ratio = f["ms"] / o["ms"] if f else None
                if ratio is not None and (worst is None or ratio < worst[0]):
                    worst = (ratio, n, bits, t)
                pct = read_pct(o) if n >= 1_000_000 or get("read", n, bits, t) else None
                row = [f"{n:,}", str(bits), str(t), f"{o['ms']:.4f}", f"{f['ms']:.4f}" if f else "",
                       f"{npy['ms']:.3f}" if npy and t == 1 else "", f"{ratio:.2f}x" if ratio else "",
                       f"{auto['ms']:.4f}" if auto else "", f"{pct:.0f}%" if pct else ""]
                if paired:
                    row.append(f"{paired[n, bits]:.2f}x" if t == 1 and (n, bits) in paired else "")
                lines.append("| " + " | ".join(row) + " |")
    if worst:
        lines += ["", (f"Smallest FAISS / ondevice ratio in the grid: {worst[0]:.2f}x ({worst[1]:,} codes, "
                       f"{worst[2]} bits, {worst[3]} thread(s))")]
    misses, slow, read_cells = [], [], 0
    for bits in widths:
        for n in sizes:
            for t in threads:
                o, f = get("ondevice", n, bits, t), get("faiss", n, bits, t)
                if o and f and f["ms"] < o["ms"]:
                    misses.append(f"{n:,} x {bits} bits, {t} thread(s): {f['ms'] / o['ms']:.2f}x")
                if o and n >= 1_000_000:
                    read_cells += 1
                    pct = read_pct(o)
                    if pct < 90:
                        slow.append(f"{n:,} x {bits} bits, {t} thread(s): {pct:.0f}%")
    lines += ["", "Targets:",
              f"- ondevice >= FAISS in every cell: {'met' if not misses else 'missed in ' + '; '.join(misses)}"]
    if paired:
        behind = [f"{n:,} x {bits} bits: {r:.2f}x" for (n, bits), r in sorted(paired.items(), key=lambda x: x[0][::-1])
                  if r < 1]
        lines.append(f"- the same in the {len(paired)} one-thread cells also timed in one process: "
                     + ("met" if not behind else "missed in " + "; ".join(behind)))
    lines.append("- >= 90% of read bandwidth from 1M codes: " + ("not measured (no catalog of 1M codes)" if not read_cells
                                                                  else "met" if not slow else "missed in " + "; ".join(slow)))
    for c in cells:
        if c["nq"] > 1 and c["lib"] == "ondevice":
            f = next(x for x in cells if x["lib"] == "faiss" and x["_probes"] is c["_probes"] and  # same run
                     (x["n"], x["bits"], x["threads"], x["nq"]) == (c["n"], c["bits"], c["threads"], c["nq"]))
            gw = c["n"] * c["nq"] * c["bits"] / 64 / (c["ms"] / 1e3) / 1e9
            pops = c["_probes"]["popcount_gwords"]
            peak = pops.get(str(c["threads"]), pops.get(c["threads"]))
            lines += ["", (f"{c['nq']}-query batch, {c['n']:,} x {c['bits']} bits, {c['threads']} threads: ondevice "
                           f"{c['ms']:.1f} ms = {gw:.1f} G 64-bit words compared/s (popcount peak {peak:.1f}); FAISS "
                           f"{f['ms']:.1f} ms ({f['ms'] / c['ms']:.2f}x); target >= 20 G words/s: "
                           f"{'met' if gw >= 20 else 'missed'}")]
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one point per (library, width, threads, size): the last run given wins, so runs can be layered
    latest = {(c["lib"], c["bits"], c["threads"], c["n"]): c for r in results for c in r["cells"] if c["nq"] == 1}
    cells = list(latest.values())
    widths = sorted({c["bits"] for c in cells})
    fig, axes = plt.subplots(1, len(widths), figsize=(4.2 * len(widths), 4), sharey=True, squeeze=False)
    styles = {"ondevice": "C0", "faiss": "C1", "numpy": "C2"}
    for ax, bits in zip(axes[0], widths):
        for lib, color in styles.items():
            for t, dash in ((1, "-"), (2, "--")):
                pts = sorted((c["n"], c["ms"]) for c in cells if c["lib"] == lib and c["bits"] == bits and c["threads"] == t)
                if pts:
                    ax.plot(*zip(*pts), dash, color=color, marker="o", ms=3, label=f"{lib}, {t} thread{'s' * (t > 1)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{bits}-bit codes, one query, k=10")
        ax.set_xlabel("catalog size (codes)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("ms per query (median)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    p.add_argument("--bits", type=int, nargs="+", default=WIDTHS)
    p.add_argument("--threads", type=int, nargs="+", default=THREADS)
    p.add_argument("--libs", nargs="+", default=["ondevice", "faiss", "numpy"])
    p.add_argument("--batch", type=int, default=100,
                   help="queries in the batch measurement; single-query cells search them in turn")
    p.add_argument("--same-query", action="store_true",
                   help="single-query cells repeat one query (the method of runs before 2026-11-24)")
    p.add_argument("--batch-n", type=int, default=1_000_000, help="catalog size of the batch measurement (at 1024 bits)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds of timed calls per cell and round (repeats adapt, >= 3)")
    # 5, not 3: this VM's slow phases last seconds and hit whichever worker runs then, so two slow rounds of three
    # decided a cell's median (1k x 2048 bits: ondevice 11.2 / 15.2 / 15.3 us, FAISS 14.7 in between)
    p.add_argument("--rounds", type=int, default=5,
                   help="worker rounds per width, libraries taking turns; a cell is the median over rounds")
    p.add_argument("--read-min", type=int, default=READ_PROBE_MIN,
                   help="catalogs from this many codes get a read-bound cell (a sum over the same bytes)")
    p.add_argument("--paired-max-bytes", type=int, default=PAIRED_MAX_BYTES,
                   help="one-thread catalogs up to this many bytes are also timed with ondevice and FAISS alternating "
                        "in one process (0: none)")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--plot", action="store_true", help="also plot time vs catalog size (PNG beside the JSON)")
    p.add_argument("--calibrate", action="store_true",
                   help="first measure this machine's thread crossover (kernels.hamming.calibrate) and store it")
    p.add_argument("--report", nargs="+", help="print the grid of these results files (and --plot it) instead")
    a = p.parse_args(argv)
    if a.worker:
        cfg = json.loads(a.worker)
        if cfg.get("calibrate"):
            from ondevice.kernels import hamming

            print(json.dumps(hamming.calibrate()))
            return 0
        print(json.dumps(_probes(cfg["threads"], 7) if cfg.get("probes") else worker(cfg)))
        return 0
    if a.report:
        results = [json.loads(Path(f).read_text()) for f in a.report]
        print(report(results))
        if a.plot:
            out = Path(a.report[-1]).with_suffix(".png")
            plot(results, out)
            print(f"\nplot: {out}")
        return 0

    meta = _meta(argv)
    started = time.time()
    print(f"# {meta['cpu_model']}, {meta['cpus']} CPUs, load {meta['load_average_start'][0]:.2f}", flush=True)
    calibration = run_worker({"calibrate": True}) if a.calibrate else None
    if calibration:
        print(f"# calibrated: a thread pays from {calibration['crossover_bytes']} bytes of work; "
              f"parallel_min_bytes = {calibration['parallel_min_bytes']}", flush=True)
    probes = run_worker({"probes": True, "threads": a.threads})
    round_cells, extra = [], {}
    single = [t for t in a.threads if t == 1]
    multi = [t for t in a.threads if t > 1]
    for bits in a.bits:
        base = {"bits": bits, "sizes": a.sizes, "budget": a.budget, "batch": a.batch, "read_min": a.read_min,
                "auto_threads": max(a.threads), "same_query": a.same_query}
        batch_n = a.batch_n if bits == 1024 else None
        for r in range(a.rounds):
            workers = []
            order = a.libs if r % 2 == 0 else a.libs[::-1]  # turns reversed every other round
            # One process per library and thread setting, the libraries taking turns. At 2+ threads FAISS's OpenMP
            # threads spin after each call and would slow whatever ran next in the same process. At 1 thread, in
            # one shared rotation whichever block followed FAISS's (its own copy of the catalog) or numpy's
            # (temporaries of hundreds of MB per call at 1M codes) found the catalog pushed out of the cache
            # (2026-11-25: 1M x 256 bits, ondevice 2.00 ms per search after numpy's blocks, 1.09 ms without; 10M x
            # 64 bits, the read sum 5.2 ms after FAISS's blocks, ondevice 3.1 ms after the read sum's). The read
            # sum runs in ondevice's process, in turns with it over the same bytes, so both find them alike.
            if single:
                workers += [{**base, "threads": single, "libs": [lib], "batch_n": None if multi else batch_n}
                            for lib in order]
            workers += [{**base, "threads": multi, "libs": [lib], "batch_n": batch_n}
                        for lib in order if multi and lib != "numpy"]  # numpy: 1 thread only
            if single and a.paired_max_bytes and {"ondevice", "faiss"} <= set(a.libs):
                workers.append({**base, "threads": single, "libs": ["ondevice", "faiss"], "paired": True,
                                "paired_max_bytes": a.paired_max_bytes})
            for cfg in workers:
                res = run_worker(cfg)
                round_cells += [{**c, "round": r} for c in res["cells"]]
                if "ondevice" in cfg["libs"] and not cfg.get("paired"):
                    extra = {"path": res["path"], "parallel_min_bytes": res["parallel_min_bytes"]}
    result = {**meta, **extra, "load_average_end": os.getloadavg(), "seconds": round(time.time() - started, 1),
              "k": K, "rounds": a.rounds, "single_queries": 1 if a.same_query else a.batch, "probes": probes,
              "paired_max_bytes": a.paired_max_bytes, "paired_block_seconds": PAIRED_BLOCK_SECONDS,
              "calibration": calibration,
              "cells": median_cells(round_cells), "round_cells": round_cells}
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = create_new(out_dir, stamped("hamming_grid"), json.dumps(result, indent=1) + "\n")
    print(report([result]))
    if a.plot:
        plot([result], out.with_suffix(".png"))
    print(f"\n# {result['seconds']:.0f} s; results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
