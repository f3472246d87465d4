"""How long the test suite takes on this machine, and what it covers: one results file per run.

    .venv/bin/python benchmarks/suite.py --clone                   # fresh clone of HEAD: `make test` (install included)
    .venv/bin/python benchmarks/suite.py --clone --target coverage # the same run with line coverage (`make coverage`)
    .venv/bin/python benchmarks/suite.py --log make-test.log --command "CI=true bash .ci/run"  # record a run done already

A clone runs `CI=true make <target>` in a temporary folder beside nothing of this checkout (its own `.venv`, npm and
Numba caches, a temporary `ONDEVICE_CACHE`), with `ONDEVICE_DATA` pointing at this checkout's data folder. The file
`benchmarks/results/suite-<UTC time>.json` keeps the pytest time and counts from pytest's summary line, the slowest
tests, the whole command's time (install included) and, for `coverage`, the package's line coverage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ondevice.corpus import default_data_dir
from ondevice.results import repo_root, start_run, write_result

SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s\b", re.MULTILINE)
DURATION = re.compile(r"^\s*(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)\s*$", re.MULTILINE)


def parse_log(text: str) -> dict:
    """Pytest's last summary line (counts and seconds) and its `--durations` list, from a run's output."""
    found = list(SUMMARY.finditer(text))
    if not found:
        raise ValueError("no pytest summary line ('N passed ... in S s') in the log: pass the output of a finished run")
    last = found[-1]
    counts = {}
    for part in last["counts"].split(", "):
        n, word = part.split(" ", 1)
        counts[word.rstrip("s") if word in ("errors", "warnings") else word] = int(n)
    slowest = [{"seconds": float(m["seconds"]), "phase": m["phase"], "test": m["test"]} for m in DURATION.finditer(text)]
    return {"pytest_seconds": float(last["seconds"]), "counts": counts, "slowest": slowest}


def coverage_totals(data_file: Path) -> dict:
    """Line coverage of a `.coverage` data file: percent, statements, statements not run."""
    import coverage as cov_lib

    cov = cov_lib.Coverage(data_file=str(data_file))
    cov.load()
    with tempfile.TemporaryDirectory() as tmp:
        cov.json_report(outfile=f"{tmp}/c.json")
        totals = json.loads(Path(f"{tmp}/c.json").read_text())["totals"]
    return {"percent": totals["percent_covered"], "statements": totals["num_statements"],
            "missing": totals["missing_lines"]}


def run_clone(target: str) -> tuple[str, float, dict | None, str]:
    """Clone HEAD into a temporary folder, run `CI=true make TARGET` there and remove the folder after a passing run:
    (output, seconds, coverage totals or None, commit)."""
    root = repo_root()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                      text=True, check=True).stdout.strip():
        print("note: the checkout has uncommitted changes; the clone runs the last commit", file=sys.stderr)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ondevice-suite-"))
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    env = {**os.environ, "CI": "true", "ONDEVICE_DATA": str(default_data_dir()), "ONDEVICE_CACHE": str(work / "cache")}
    env.pop("VIRTUAL_ENV", None)
    t0 = time.time()
    out = subprocess.run(["make", target], cwd=clone, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, check=False)
    seconds = time.time() - t0
    text = out.stdout + out.stderr
    log = work / "make.log"
    log.write_text(text)
    print(f"make {target}: exit {out.returncode} in {seconds / 60:.1f} min; output in {log}", file=sys.stderr)
    if out.returncode != 0:
        raise SystemExit(f"make {target} failed (exit {out.returncode}); its output and clone are in {work}")
    data = clone / ".coverage"
    totals = coverage_totals(data) if data.is_file() else None
    shutil.rmtree(work)
    return text, seconds, totals, head


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--clone", action="store_true", help="run the suite on a fresh clone of HEAD")
    src.add_argument("--log", type=Path, help="record a finished run from its output (pytest's summary and durations)")
    p.add_argument("--target", choices=("test", "coverage"), default="test", help="with --clone: the make target")
    p.add_argument("--coverage-data", type=Path, help="with --log: the run's .coverage file")
    p.add_argument("--command", default="", help="with --log: the command that produced it")
    p.add_argument("--slowest", type=int, default=30, help="how many of the slowest tests to keep")
    a = p.parse_args(argv)
    meta = start_run()
    if a.clone:
        text, seconds, totals, head = run_clone(a.target)
        command = f"CI=true make {a.target} on a fresh clone of {head[:12]}"
    else:
        for given in (a.log, a.coverage_data):
            if given is not None and not given.is_file():
                p.error(f"{given}: no such file")
        text, seconds, command = a.log.read_text(errors="replace"), None, a.command
        totals = coverage_totals(a.coverage_data) if a.coverage_data is not None else None
    try:
        res = parse_log(text)
    except ValueError as exc:
        p.error(str(exc))
    res["slowest"] = sorted(res["slowest"], key=lambda r: -r["seconds"])[: a.slowest]
    res.update({"test_command": command, "command_seconds": None if seconds is None else round(seconds, 1),
                "coverage": totals})
    path = write_result("suite", res, meta)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
