"""ondevice unpack: a student folder from a bundle (the shipped pretrained one too), to fine-tune or distill on."""

from __future__ import annotations

import argparse
import json

from ondevice.cli import add_seed

HELP = ("write a student folder from an exported bundle ('pretrained': the shipped model), to continue distilling "
        "(--init-from) or train pair models (--student) from it")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", required=True, help="bundle folder, or 'pretrained' / 'pretrained:NAME'")
    p.add_argument("--out", required=True, help="student folder to write (config.json, model.safetensors, vocab)")
    p.add_argument("--precision", default=None, choices=["fp32", "int8"],
                   help="which half of a `--precision both` export (default: int8 if present)")
    add_seed(p)


def run(a: argparse.Namespace) -> int:
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.unpack import unpack_bundle

    record = unpack_bundle(a.bundle, a.out, a.precision)
    print(json.dumps(record, indent=2))
    return 0
