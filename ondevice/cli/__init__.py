"""The `ondevice` command: one subcommand per module in this package, each thin over the Python API.

A subcommand module defines HELP (one line), add_arguments(parser) and run(args) -> int.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import pkgutil
import random
import sys
from collections.abc import Sequence

from ondevice import __version__, addons
from ondevice.errors import OndeviceError


def _commands() -> dict[str, object]:
    """The core's commands (the modules of this package) and those add-ons register (ondevice.addons.COMMANDS)."""
    pkg = sys.modules[__name__]
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
    found = {name.replace("_", "-"): importlib.import_module(f"{__name__}.{name}") for name in names}
    for name, ep in addons.entry_points(addons.COMMANDS).items():
        found.setdefault(name, ep.load())
    return dict(sorted(found.items()))


def _shown(default) -> bool:
    """Whether --help should print this default (not None, False, "" or suppressed; 0 is a value worth showing)."""
    return not (default is None or default is False or default == "" or default == argparse.SUPPRESS)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" once: not when the help already names its default, nor for None, False or "" defaults."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not _shown(action.default) or not action.option_strings:
            return text
        return super()._get_help_string(action)


def add_seed(p: argparse.ArgumentParser) -> None:
    """`--seed` for a command that draws no random numbers of its own (every command takes one)."""
    p.add_argument("--seed", type=int, default=0, help="seed of Python's and numpy's global generators (this command "
                                                       "draws no random numbers itself: its output does not depend on it)")


def seed_globals(seed: int) -> None:
    """Seed the process-wide generators that library code may draw from (Python's, numpy's, torch's if loaded)."""
    # numpy loads on use: `import ondevice.cli` stays light
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:  # importing torch only to seed it would cost a second on torch-free commands
        sys.modules["torch"].manual_seed(seed)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other user mistake
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `command`, only that subcommand's arguments are built (they import what their defaults need)."""
    parser = _Parser(prog="ondevice", description="Distill, binarize, search and export tiny sentence encoders.")
    parser.add_argument("--version", action="version", version=f"ondevice {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    hidden = []
    for name, module in _commands().items():
        # a HIDDEN command (a migration) works as before but is not listed: argparse lists a sub-parser given help=
        listed = {} if getattr(module, "HIDDEN", False) else {"help": module.HELP}
        if not listed:
            hidden.append(name)
        p = sub.add_parser(name, description=module.HELP, formatter_class=HelpFormatter, **listed)
        if command is None or name == command:
            # building every subcommand would import torch-free but heavy modules (eval, binarize: ~0.2 s)
            module.add_arguments(p)
            _show_bare_defaults(p)
        p.set_defaults(_run=module.run)
    parser.epilog = f"migrations, not listed above: {', '.join(hidden)} (ondevice COMMAND --help)" if hidden else None
    return parser


def _show_bare_defaults(parser: argparse.ArgumentParser) -> None:
    """An option declared without help text still shows its default in --help (argparse prints nothing for it)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_bare_defaults(child)
        elif action.help is None and action.option_strings and _shown(action.default):
            action.help = "(default: %(default)s)"


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first argument that is not an option), if any."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user mistakes print one line to stderr and return non-zero."""
    for stream in (sys.stdout, sys.stderr):  # a query or file name of invalid UTF-8 prints escaped, never crashes
        with contextlib.suppress(AttributeError, ValueError, OSError):  # a stream without reconfigure (a test's)
            stream.reconfigure(errors="backslashreplace")
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser(_command(argv))
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed by argparse
        return int(exc.code or 0)
    try:
        from ondevice.checks import check_flag_ranges  # it imports numpy: loaded once a command runs

        check_flag_ranges(parser, args)  # every number of the command line in its range, before any work
        if getattr(args, "seed", None) is not None:
            seed_globals(args.seed)
        return int(args._run(args) or 0)
    except OndeviceError as exc:
        _say_error(args.command, str(exc))
        return 2
    except KeyboardInterrupt:
        print(f"ondevice {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`ondevice ... | head`): stop quietly, as cat and grep do
        # Python would report the pipe again when it flushes stdout at exit; point stdout at /dev/null first
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a stdout without a descriptor (a test's)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a read-only or full disk, a permission, a vanished file: one line, never a traceback
        _say_error(args.command, os_error_line(exc))
        return 2
    except MemoryError:
        _say_error(args.command, "out of memory; use smaller inputs or limits (see --help)")
        return 2
    except Exception as exc:
        if type(exc).__name__ != "SafetensorError":  # a real bug: its traceback is what a report needs
            raise
        # the safetensors writer reports a full or read-only disk as its own error type, not an OSError
        _say_error(args.command, f"cannot write a weights file ({(str(exc).splitlines() or ['failed'])[0][:200]})")
        return 2


def os_error_line(exc: OSError) -> str:
    """One line for an OSError: what failed and on which path (ENOSPC and EROFS say what to do)."""
    reason = exc.strerror or type(exc).__name__
    hint = {errno.ENOSPC: "; free some space and run again (nothing half-written was kept)",
            errno.EROFS: "; write to another folder",
            errno.EACCES: "; check the permissions", errno.EDQUOT: "; free some space and run again"}.get(exc.errno, "")
    where = f" {exc.filename}" if exc.filename is not None else ""
    return f"cannot complete the command:{where} ({reason}){hint}"[:400]


def _say_error(command: str, message: str) -> None:
    """Print the one error line on stderr, safely on any terminal: text that is not valid in its encoding (an
    undecodable file name, a query of invalid UTF-8 bytes) is escaped, never a UnicodeEncodeError."""
    line = f"ondevice {command}: error: {' '.join(message.splitlines()) or 'failed'}\n"
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    try:
        sys.stderr.write(line.encode(encoding, "backslashreplace").decode(encoding, "replace"))
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing more can be said
        pass


if __name__ == "__main__":
    sys.exit(main())
