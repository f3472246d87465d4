"""ondevice eval: teacher, students, codes and bundles side by side on public benchmarks, with a report and plots."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ondevice.errors import OndeviceError
from ondevice.eval import evaluate, markdown_table, write_report
from ondevice.eval.report import REPORT_FILES, is_report_folder, merge_reports
from ondevice.eval.runner import FIT_SENTENCES
from ondevice.eval.tasks import DEFAULT_TASKS, TASKS
from ondevice.eval.views import SPEC_HELP
from ondevice.io import check_replace_dir, read_json

HELP = "evaluate encoders and their binary codes on STS-B, SICK-R, MRPC, SentEval probes and SNLI retrieval"

DEFAULT_ENCODERS = ("teacher", "glove")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--encoder", action="append", default=None, metavar="NAME=SPEC",
                   help=f"{SPEC_HELP} Default: {' '.join(DEFAULT_ENCODERS)}.")
    p.add_argument("--tasks", default=",".join(DEFAULT_TASKS),
                   help=f"comma-separated subset of: {', '.join(TASKS)}")
    p.add_argument("--data", default=None, help="benchmark data folder (default: $ONDEVICE_DATA or ../shared/data)")
    p.add_argument("--out", default="eval-report", help="folder for report.json, report.md and the PNG plots")
    p.add_argument("--seed", type=int, default=0, help="CV folds, retrieval queries, random projections")
    p.add_argument("--queries", type=int, default=1000, help="retrieval queries sampled from the catalog")
    p.add_argument("--fit-sentences", type=int, default=FIT_SENTENCES,
                   help="wiki sentences used to fit +METHOD:BITS binarizers")
    p.add_argument("--reference", default=None, help="encoder name whose float top-10 is the retrieval reference "
                                                     "(default: the first teacher)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="let glove:FILE be a gensim pickle (.kv/.model/.wv): loading it RUNS ANY CODE it holds; "
                        "only for files you made yourself")
    p.add_argument("--no-cache", action="store_true", help="do not read or write ~/.cache/ondevice/eval")
    p.add_argument("--no-speed", action="store_true", help="skip the encode-speed measurement")
    p.add_argument("--no-plots", action="store_true", help="write report.json and report.md only")
    p.add_argument("--force", action="store_true",
                   help="write into an --out folder that holds other files named like the report's (they are replaced)")
    p.add_argument("--merge", nargs="+", metavar="REPORT_JSON", default=None,
                   help="evaluate nothing: merge these report.json files into one report in --out")


def run(a: argparse.Namespace) -> int:
    # new, empty or an earlier report: never a bundle, a student, or a folder whose report.json is someone else's
    check_replace_dir(a.out, "--out", REPORT_FILES, force=a.force, ours=is_report_folder,
                      what="part of an earlier `ondevice eval` report", inputs=tuple(a.merge or ()))
    if a.merge:
        report = merge_reports([read_json(p, "report") for p in a.merge], names=a.merge)
        paths = write_report(report, Path(a.out), command=_command(), plots=not a.no_plots)
        print(markdown_table(report))
        print(f"wrote {', '.join(str(p) for p in paths)}")
        return 0
    tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    if not tasks:
        raise OndeviceError("--tasks is empty; name at least one task")
    if a.queries < 1:
        raise OndeviceError("--queries must be >= 1")
    if a.fit_sentences < 2:
        raise OndeviceError("--fit-sentences must be >= 2")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report = evaluate(a.encoder or list(DEFAULT_ENCODERS), tasks=tasks, data_dir=a.data, seed=a.seed,
                      cache_root=not a.no_cache, queries=a.queries, measure_speed=not a.no_speed,
                      fit_sentences=a.fit_sentences, reference=a.reference, log=log, allow_pickle=a.allow_pickle)
    paths = write_report(report, Path(a.out), command=_command(), plots=not a.no_plots)
    print(markdown_table(report))
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


def _command() -> str | None:
    """The command line that made the report (when run as `ondevice eval ...`)."""
    if sys.argv[1:2] != ["eval"]:
        return None
    return "ondevice eval " + " ".join(shlex.quote(x) for x in sys.argv[2:])
