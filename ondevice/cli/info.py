"""ondevice info: what an artifact is and how it was made (any bundle, student, binarizer, index or pair run)."""

from __future__ import annotations

import argparse
import json

from ondevice.cli import add_seed

HELP = ("say what an artifact is and how it was made (bundle, student, binarizer, index, pair-model run), from "
        "the settings saved beside it; --verify loads it with every check")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="the artifact: a folder, an index file, or 'pretrained' (the shipped bundle)")
    p.add_argument("--verify", action="store_true", help="also load it as its users do: checksums, shapes, headers")
    p.add_argument("--json", action="store_true", help="print everything read, as JSON, instead of a summary")
    add_seed(p)


def run(a: argparse.Namespace) -> int:
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.describe import describe, summary_lines

    info = describe(a.path, verify=a.verify)
    print(json.dumps(info, indent=2, default=str) if a.json else "\n".join(summary_lines(info)))
    return 0
