"""ondevice requantize: an int8 bundle with 8-bit LSTM weights -> the same bundle with 7-bit ones (exact and faster
on x86 CPUs without VNNI), pair head included."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ondevice.cli import add_seed
from ondevice.errors import OndeviceError
from ondevice.io import check_finite_json, read_json, same_or_inside

HIDDEN = True  # a migration: a bundle with 8-bit LSTM weights still loads and runs as it is
HELP = ("rewrite an int8 bundle exported with 8-bit LSTM weights (before ondevice 2026-11-28) with 7-bit ones: the "
        "same results on every CPU, ~1.5x faster on x86 without VNNI")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", required=True, help="int8 bundle folder, or 'pretrained' / 'pretrained:NAME'")
    p.add_argument("--out", required=True, help="bundle folder to write (replaces an earlier bundle there)")
    p.add_argument("--data", default=None,
                   help="data folder with the pair task's dev split, to refit a pair head's blend (default: ../shared/data "
                        "or $ONDEVICE_DATA)")
    p.add_argument("--eval", default=None, help="JSON file with an evaluation of the new bundle to put in the manifest "
                                               "(without it the source's is kept as eval_before_requantization)")
    p.add_argument("--force", action="store_true", help="let --out be the --bundle folder itself (replaced atomically)")
    add_seed(p)


def run(a: argparse.Namespace) -> int:
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.export.requantize import requantize_bundle

    source = Path(a.bundle)
    if not a.force and source.exists() and (same_or_inside(Path(a.out), source) or same_or_inside(source, Path(a.out))):
        raise OndeviceError(f"--out {a.out} is the --bundle being read (or holds it); choose a new --out "
                            "(or --force to replace the source)")
    evaluation = check_finite_json(read_json(a.eval, "--eval summary"), f"--eval {a.eval}") if a.eval else None
    if evaluation is not None and not isinstance(evaluation, dict):
        raise OndeviceError(f"--eval {a.eval} must hold a JSON object")
    record = requantize_bundle(a.bundle, a.out, evaluation=evaluation, data=a.data)
    print(json.dumps({k: v for k, v in record.items() if not k.startswith("source_")}, indent=2))
    print(f"bundle written to {a.out}")
    return 0
