"""ondevice demo: the whole pipeline on built-in defaults, end to end, with the results printed."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from ondevice.corpus import WIKI_RELPATH, default_data_dir
from ondevice.demo import DemoConfig, run_demo
from ondevice.io import cache_dir, check_out_dir
from ondevice.results import start_run, write_result

HELP = ("distill the packaged teacher on the first N Wikipedia sentences, binarize, export an int8 bundle, "
        "index a catalog, answer example queries, print STS-B scores")


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DemoConfig(corpus="", data="", out="")
    p.add_argument("--corpus", default=None, help="sentences, one per line (default: <data>/wiki/wiki_en_sentences_1m.txt.gz)")
    p.add_argument("--data", default=None, help="data folder with stsb/ (default: $ONDEVICE_DATA or ../shared/data)")
    p.add_argument("--sentences", type=int, default=d.sentences, help="first N corpus sentences to distill on")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--bits", type=int, default=d.bits, help="code length of the binarizer")
    p.add_argument("--method", default=d.method, help="binarization method")
    p.add_argument("--teacher-backend", default=d.teacher_backend, choices=["torch", "onnx", "onnx-int8"],
                   help="how the teacher labels the corpus (see `ondevice distill --help`)")
    p.add_argument("--catalog", type=int, default=d.catalog, help="corpus sentences after the training ones to index")
    p.add_argument("--query", action="append", default=None, help="a query to answer (repeatable; default: built-in)")
    p.add_argument("--out", default=None, help="output dir (default: <cache>/demo/<settings>)")
    p.add_argument("--results-dir", default=None, help="also write a results JSON there (e.g. benchmarks/results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def run(a: argparse.Namespace) -> int:
    data = Path(a.data) if a.data else default_data_dir()
    corpus = Path(a.corpus) if a.corpus else data / WIKI_RELPATH
    name = f"s{a.sentences}-e{a.epochs}-{a.method}{a.bits}-c{a.catalog}-{a.teacher_backend}-seed{a.seed}"
    out = Path(a.out) if a.out else cache_dir() / "demo" / name
    config = DemoConfig(corpus=str(corpus), data=str(data), out=str(out), sentences=a.sentences, epochs=a.epochs,
                        bits=a.bits, method=a.method, catalog=a.catalog, seed=a.seed,
                        teacher_backend=a.teacher_backend)
    if a.query:
        config.queries = tuple(a.query)
    if a.results_dir:  # run_demo checks the settings and --out first thing; this one it never sees
        check_out_dir(a.results_dir, "--results-dir")  # not found out only after the whole demo ran
    meta = start_run(threads=None)
    result = run_demo(config, progress=not a.quiet)
    if a.results_dir:
        path = write_result("demo", {"config": asdict(config), **asdict(result)}, meta, root=a.results_dir)
        print(f"results: {path}")
    return 0
