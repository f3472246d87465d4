"""Run metadata and file names of the distillation benchmarks' results files (one new file per run).

Built on `ondevice.results` (the one place that reads the commit, versions and CPU); these files keep their
flat layout (`commit`, `date`, `machine`, ... beside the results), which `benchmarks/tables.py` reads.
"""

from __future__ import annotations

from pathlib import Path

from ondevice.results import results_dir, stamped, start_run


def run_metadata(threads: int) -> dict:
    """Commit (with `dirty`), UTC date, command line, library versions, CPU model, cores, threads, load average."""
    meta = start_run(threads=threads)
    commit = meta["commit"]
    return {"commit": commit.removesuffix("+dirty") or "unknown", "dirty": commit.endswith("+dirty"),
            "date": meta["date"], "command": meta["command"], "versions": meta["versions"],
            "machine": {"cpu": meta["cpu_model"], "gpu": meta["gpu_model"], "cores": meta["cpu_count"], "threads": threads,
                        "loadavg_at_start": meta["load_average_start"]}}


def results_path(name: str) -> Path:
    """<results dir>/<name>-<UTC time>.json, a name no earlier run has."""
    root, stem = results_dir(), stamped(name)
    path, n = root / f"{stem}.json", 1
    while path.exists():
        path, n = root / f"{stem}-{n}.json", n + 1
    return path
