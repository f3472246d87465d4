"""Results files of measurements: one JSON per run, with what is needed to tell runs apart, never overwritten.

Every benchmark (and `ondevice demo`) calls `start_run()` before measuring and `write_result()` at the end:

    meta = start_run(threads=2)                    # commit, date, command line, versions, CPU, load average
    ...measure...
    path = write_result("bundle", {"rows": rows}, meta)   # benchmarks/results/bundle-20261122T201501Z.json

The tables in README.md and docs/results/ are rendered from these files (benchmarks/tables.py), and a test
checks that the documents match, so a number without a file, or a stale one, fails the test suite.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any

import numpy as np

from ondevice.io import _default, read_json

# Libraries whose version can move a measured number; missing ones are left out.
PACKAGES = ("ondevice", "numpy", "numba", "onnxruntime", "torch", "transformers", "sentence-transformers", "scipy",
            "scikit-learn", "faiss-cpu", "onnx", "safetensors")


def repo_root() -> Path:
    """The checkout this module runs from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "benchmarks").is_dir() else Path.cwd()


def results_dir() -> Path:
    """Where results files go: $ONDEVICE_RESULTS or <repo>/benchmarks/results."""
    return Path(os.environ.get("ONDEVICE_RESULTS", repo_root() / "benchmarks" / "results"))


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], check=False, cwd=repo_root(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def commit() -> str:
    """The checkout's commit, "+dirty" when tracked files differ from it ("" outside a git checkout)."""
    if os.environ.get("ONDEVICE_COMMIT"):  # a copy of the tree (e.g. on a rented GPU machine) says which commit it is
        return os.environ["ONDEVICE_COMMIT"]
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return head + ("+dirty" if head and dirty else "")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_details() -> dict[str, Any]:
    """Vendor, family/model/stepping and cache sizes of CPU 0 (Linux; {} elsewhere): VMs report one "model name"
    for CPUs of different generations, whose cache sizes and bandwidth differ (seen: 2.5x)."""
    out: dict[str, Any] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "stepping") and key.replace(" ", "_") not in out:
                out[key.replace(" ", "_")] = value.strip()
            elif key == "flags":
                flags = value.split()
                out["avx512_vpopcntdq"] = "avx512_vpopcntdq" in flags
                # int8 matrix products: without VNNI onnxruntime needs ondevice.ort_session's exact setting
                out["vnni"] = "avx512_vnni" in flags or "avx_vnni" in flags
                break
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            if kind != "Instruction":
                out[f"l{level}_cache"] = (index / "size").read_text().strip()
    except (OSError, ValueError):
        pass
    return out


def gpu_model() -> str | None:
    """The CUDA GPU torch trains on, when torch is already imported and sees one (never imports torch itself)."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken CUDA install must not stop a results file
        return None


def versions() -> dict[str, str]:
    """Installed versions of Python and the libraries in PACKAGES (without importing them)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = _metadata.version(name)
        except _metadata.PackageNotFoundError:
            continue
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def start_run(threads: int | None = None, argv: list[str] | None = None, **settings: Any) -> dict[str, Any]:
    """Metadata of a run about to start; pass it to write_result. `settings` are stored as given."""
    return {
        "commit": commit(),
        "date": _now(),
        "command": " ".join([Path(sys.executable).name, *(sys.argv if argv is None else argv)]),
        "versions": versions(),
        "cpu_model": cpu_model(),
        "cpu": cpu_details(),
        "gpu_model": gpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "started": time.time(),
        "settings": settings,
    }


NAME = re.compile(r"[a-z0-9_]+")  # a results file is <name>-<YYYYMMDDTHHMMSSZ>[-N].json, name in these characters
FILE = re.compile(r"(?P<name>[a-z0-9_]+)-(?P<stamp>\d{8}T\d{6}Z)(?:-(?P<attempt>\d+))?\.(?P<ext>json|png|log|md|time\.log)")


def stamped(name: str) -> str:
    """`<name>-<UTC time>`: the one naming scheme of results files (dashes in `name` become underscores)."""
    name = name.replace("-", "_").lower()
    if not NAME.fullmatch(name):
        raise ValueError(f"results name {name!r}: use lowercase letters, digits and underscores")
    return f"{name}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"


def write_result(name: str, results: Any, meta: dict[str, Any], root: str | os.PathLike | None = None) -> Path:
    """Write {"meta", "results"} to <root>/<name>-<UTC time>.json; an existing file is never replaced."""
    meta = dict(meta)
    meta["finished"] = _now()
    meta["seconds"] = round(time.time() - meta.pop("started", time.time()), 1)
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    folder = Path(root) if root is not None else results_dir()
    text = json.dumps({"meta": meta, "results": results}, indent=2, default=_default) + "\n"
    return create_new(folder, stamped(name), text)


def create_new(folder: str | os.PathLike, stem: str, text: str) -> Path:
    """Write text to <folder>/<stem>.json, or <stem>-1.json, ... if taken: an earlier run's file is never replaced."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        path = folder / f"{stem}{'' if attempt == 0 else f'-{attempt}'}.json"
        try:
            with open(path, "x", encoding="utf-8") as fh:  # exclusive create: safe against a run in the same second
                fh.write(text)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not find a free results file name for {stem} in {folder}")


def load_results(name: str, root: str | os.PathLike | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every results file of `name` (oldest first by file name) with its parsed content."""
    folder = Path(root) if root is not None else results_dir()
    matches = [(p, FILE.fullmatch(p.name)) for p in folder.glob(f"{name}-*.json")]
    found = [(p, m) for p, m in matches if m and m["name"] == name]
    paths = [p for p, m in sorted(found, key=lambda pm: (pm[1]["stamp"], int(pm[1]["attempt"] or 0)))]

    return [(p, read_json(p, "results file")) for p in paths]


def flat_metadata(script: str, argv: list[str], threads: int | None) -> dict[str, Any]:
    """Run metadata at the top level of a flat results file (the layout of the pair-model benchmarks)."""
    run = start_run(threads, [script, *argv])  # commit honours ONDEVICE_COMMIT, as every results file
    return {"commit": run["commit"].removesuffix("+dirty"), "dirty": run["commit"].endswith("+dirty"), "date": run["date"],
            "command": run["command"], "cpu_model": run["cpu_model"], "gpu_model": run["gpu_model"],
            "cpu_count": run["cpu_count"], "threads": threads, "load_average_start": run["load_average_start"],
            "python": run["versions"]["python"], "versions": run["versions"]}


def write_flat(result: dict[str, Any], name: str, root: str | os.PathLike | None = None) -> Path:
    """One flat results file per run (<root>/<name>-<UTC time>.json), never overwriting an earlier one."""
    result["load_average_end"] = os.getloadavg()
    text = json.dumps(result, indent=2, sort_keys=True, default=float) + "\n"
    return create_new(Path(root) if root is not None else results_dir(), stamped(name), text)


def spread(values: list[float]) -> dict[str, Any]:
    """Mean, sample std (None for one value), min, max, n and the values, rounded to 3 decimals: a seed summary."""
    arr = np.asarray(values, np.float64)
    return {"mean": round(float(arr.mean()), 3), "std": round(float(arr.std(ddof=1)), 3) if len(arr) > 1 else None,
            "min": round(float(arr.min()), 3), "max": round(float(arr.max()), 3), "n": len(arr),
            "values": [round(float(x), 3) for x in arr]}


def run_metadata(threads: int) -> dict[str, Any]:
    """Commit (with `dirty`), UTC date, command line, versions, CPU model, cores, threads, load average: the flat
    `machine` layout of the distillation benchmarks' results files, which benchmarks/tables.py reads."""
    meta = start_run(threads=threads)
    commit_id = meta["commit"]
    return {"commit": commit_id.removesuffix("+dirty") or "unknown", "dirty": commit_id.endswith("+dirty"),
            "date": meta["date"], "command": meta["command"], "versions": meta["versions"],
            "machine": {"cpu": meta["cpu_model"], "gpu": meta["gpu_model"], "cores": meta["cpu_count"], "threads": threads,
                        "loadavg_at_start": meta["load_average_start"]}}


def results_path(name: str) -> Path:
    """<results dir>/<name>-<UTC time>.json, a name no earlier run has (the caller writes it)."""
    root, stem = results_dir(), stamped(name)
    path, n = root / f"{stem}.json", 1
    while path.exists():
        path, n = root / f"{stem}-{n}.json", n + 1
    return path
