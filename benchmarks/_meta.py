"""What every results file records about its run, and where it goes (one new file per run, never overwritten)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("ondevice", "numpy", "numba", "onnxruntime", "torch", "transformers", "faiss-cpu", "model2vec", "scipy")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (falls back to platform)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_metadata(threads: int) -> dict:
    """Commit, UTC date, command line, library versions, CPU model, cores, threads and load average."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"commit": commit, "dirty": dirty, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]), "versions": versions,
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": threads,
                        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}}


def results_path(name: str) -> Path:
    """benchmarks/results/<name>-<UTC time>.json, a name no earlier run has."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{name}-{stamp}.json"
    n = 1
    while path.exists():
        path, n = RESULTS / f"{name}-{stamp}-{n}.json", n + 1
    return path
