"""End-to-end time of a one-shot `ondevice index search` (a fresh process per search), cold and warm.

    .venv/bin/python benchmarks/cli_search.py                    # 20,000 x 256-bit codes, 10 runs per setting
    .venv/bin/python benchmarks/cli_search.py --n 1000000 --runs 5

Each run is `python -m ondevice index search INDEX --queries Q.npy -k 10` in a new process; the wall time includes
Python start-up, imports, loading and checksumming the index and the search. The CPU time (user + system of the
child) is what the run needs from a free core: on a shared machine the wall time also counts waiting for one. Settings:
- default: what a user gets (for small indexes the numpy path, so Numba is never imported);
- numba, cold: ONDEVICE_HAMMING_PATH=native with an empty Numba cache (the kernels are compiled in the run);
- numba, warm: the same with the cache the cold runs filled (kernels loaded from disk).
The CLI's own report line (search ms, kernel load ms) is parsed from stderr. "first" is the first run of a
setting, "median" the median of the others. The warm setting also counts Numba's cache files after its fill run and
after the other runs: a warm run that adds any compiled a kernel that should have come from the cache. Writes
benchmarks/results/cli_search-<time>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"searched [\d,]+ codes for \d+ queries in ([\d.]+) ms \((numpy|numba, (\d+) ms to load kernels);")


def _run(index: Path, queries: Path, env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ondevice", "index", "search", str(index), "--queries", str(queries),
                           "-k", "10", "--json"], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"search failed: {proc.stderr.strip()}")
    m = LINE.search(proc.stderr)
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "search_ms": float(m.group(1)) if m else None,
            "kernel_load_ms": float(m.group(3)) if m and m.group(3) else 0.0, "stderr": proc.stderr.strip()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--bits", type=int, default=256)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--cold-runs", type=int, default=None, help="runs that compile every kernel (default: runs / 3, at least 2)")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    a = p.parse_args(argv)
    import numpy as np

    from ondevice.results import cpu_model, create_new, stamped

    tmp = Path(tempfile.mkdtemp(prefix="ondevice-cli-bench-"))
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (a.n, a.bits // 8), dtype=np.uint8)
    np.save(tmp / "codes.npy", codes)
    np.save(tmp / "q.npy", codes[:1])
    subprocess.run([sys.executable, "-m", "ondevice", "index", "build", "--codes", str(tmp / "codes.npy"),
                    "--out", str(tmp / "c.odx")], check=True, capture_output=True)
    base = {k: v for k, v in os.environ.items() if k != "ONDEVICE_HAMMING_PATH"}
    cache = tmp / "numba-cache"
    settings = {"default": dict(base),
                "numba, cold": {**base, "ONDEVICE_HAMMING_PATH": "native"},
                "numba, warm": {**base, "ONDEVICE_HAMMING_PATH": "native", "NUMBA_CACHE_DIR": str(cache)}}
    results = {}
    load = [os.getloadavg()]
    cache_files = {}
    for name, env in settings.items():
        runs = []
        cold = a.cold_runs if a.cold_runs is not None else max(2, a.runs // 3)
        for i in range(a.runs if name != "numba, cold" else cold):
            if name == "numba, cold":  # a new empty cache each time: every run compiles
                env = {**env, "NUMBA_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}
            if name == "numba, warm" and i == 0:
                _run(tmp / "c.odx", tmp / "q.npy", env)  # fill this setting's cache
                cache_files["after_fill"] = len(list(cache.rglob("*.nbc")))
            runs.append(_run(tmp / "c.odx", tmp / "q.npy", env))
        if name == "numba, warm":  # a warm run that compiles adds cache entries: its kernels missed the cache
            cache_files["added_by_warm_runs"] = len(list(cache.rglob("*.nbc"))) - cache_files["after_fill"]
        rest = runs[1:] or runs
        results[name] = {"first_wall_ms": runs[0]["wall_ms"],
                         "median_wall_ms": statistics.median(r["wall_ms"] for r in rest),
                         "first_cpu_ms": runs[0]["cpu_ms"], "median_cpu_ms": statistics.median(r["cpu_ms"] for r in rest),
                         "median_search_ms": statistics.median(r["search_ms"] for r in rest),
                         "median_kernel_load_ms": statistics.median(r["kernel_load_ms"] for r in rest),
                         "runs": runs}
        print(f"{name:>12}: first {runs[0]['wall_ms']:.0f} ms, median {results[name]['median_wall_ms']:.0f} ms end to end, "
              f"median CPU {results[name]['median_cpu_ms']:.0f} ms "
              f"(search {results[name]['median_search_ms']:.3f} ms, kernel load "
              f"{results[name]['median_kernel_load_ms']:.0f} ms)", flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    python_ms = (time.perf_counter() - t0) * 1e3
    load.append(os.getloadavg())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    out = {"commit": commit, "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "command": " ".join(["python", "benchmarks/cli_search.py", *argv]), "cpu_model": cpu_model(),
           "cpus": os.cpu_count(), "load_average": load, "n": a.n, "bits": a.bits,
           "python_startup_ms": python_ms, "numba_cache_files": cache_files, "settings": results}
    path = create_new(a.out_dir, stamped("cli_search"),
                      json.dumps(out, indent=1) + "\n")
    print(f"(python -c pass: {python_ms:.0f} ms; Numba cache files: {cache_files['after_fill']} after the fill run, "
          f"{cache_files['added_by_warm_runs']} added by the warm runs)\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
