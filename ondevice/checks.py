"""Range checks for numeric settings: one line naming the flag; NaN, inf, bools and absurd sizes rejected."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError


def check_int(value: Any, flag: str, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi], else a one-line error naming `flag`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OndeviceError(f"{flag} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise OndeviceError(f"{flag} must be between {lo:,} and {hi:,}, got {value:,}")
    return int(value)


def check_float(value: Any, flag: str, lo: float, hi: float, lo_open: bool = False) -> float:
    """`value` as a finite float in [lo, hi] (or (lo, hi] with `lo_open`), else a one-line error naming `flag`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OndeviceError(f"{flag} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise OndeviceError(f"{flag} must be a finite number, got {value}")
    if value < lo or value > hi or (lo_open and value == lo):
        raise OndeviceError(f"{flag} must be {'>' if lo_open else '>='} {lo:g} and <= {hi:g}, got {value:g}")
    return value


def finite_float(text: str) -> float:
    """argparse type: a float that is not NaN or inf (those would silently switch a feature off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def first_failure(checks: list[tuple[bool, str]]) -> None:
    """Raise the one-line OndeviceError of the first (ok, message) pair that is not ok."""
    for ok, message in checks:
        if not ok:
            raise OndeviceError(message)


def _finite_in(x: Any, lo: float, hi: float) -> bool:
    """Whether `x` is a real number (not a bool), finite, with lo < x <= hi."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(float(x)) and lo < float(x) <= hi


def training_checks(epochs: int, batch_size: int, lr: float) -> list[tuple[bool, str]]:
    """The (ok, message) checks every training config shares: --epochs, --batch-size, --lr (finite: an infinite or
    1e308 step turns every weight into NaN)."""
    return [(_is_int_in(epochs, 1, MAX_EPOCHS), f"--epochs must be >= 1 and <= {MAX_EPOCHS:,}, got {epochs!r}"),
            (_is_int_in(batch_size, 1, MAX_BATCH), f"--batch-size must be >= 1 and <= {MAX_BATCH:,}, got {batch_size!r}"),
            (_finite_in(lr, 0.0, MAX_LR), f"--lr must be > 0 and <= {MAX_LR:g} (a finite number), got {lr!r}")]


def _is_int_in(x: Any, lo: int, hi: int) -> bool:
    """Whether `x` is an int (not a bool) in [lo, hi]."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and lo <= x <= hi


MAX_EPOCHS = 100_000
MAX_BATCH = 1 << 20
MAX_LR = 10.0
MAX_SEED = 2**32 - 1  # what every generator takes (numpy's legacy seed is 32-bit); a negative seed is refused
MAX_COUNT = 10**9  # sentences, pairs, queries: a billion is beyond any machine this runs on
MAX_WIDTH = 1 << 16  # dims, bits, hidden sizes, token lengths
BIG = 1e6

# The range of every numeric flag of the CLI, by option name: (lowest, highest, lowest excluded). `ondevice` checks
# each parsed value once, before any work (`check_flag_ranges`); a flag missing here still gets a finite range
# (GENERIC_INT, GENERIC_FLOAT). A lowest of None leaves the lower bound to the command's own check (which names
# what the bound means: "--queries must be >= 1").
FLAG_RANGES: dict[str, tuple[float | None, float, bool]] = {
    "--seed": (0, MAX_SEED, False), "--split-seed": (0, MAX_SEED, False),
    "--epochs": (1, MAX_EPOCHS, False), "--stage1-epochs": (0, MAX_EPOCHS, False),
    "--stage2-epochs": (0, MAX_EPOCHS, False), "--sp-epochs": (0, MAX_EPOCHS, False),
    "--batch-size": (1, MAX_BATCH, False), "--teacher-batch-size": (1, 1 << 16, False),
    "--lr": (0.0, MAX_LR, True), "--lr1": (0.0, MAX_LR, True), "--lr2": (0.0, MAX_LR, True),
    "--warmup-ratio": (0.0, 1.0, False), "--warmup-steps": (0, MAX_COUNT, False),
    "--threads": (None, 4096, False), "--ray-workers": (0, 4096, False),
    "--max-sentences": (None, MAX_COUNT, False), "--max-train-pairs": (None, MAX_COUNT, False),
    "--max-train": (None, MAX_COUNT, False), "--queries": (None, 10_000_000, False),
    "--fit-sentences": (None, MAX_COUNT, False), "--sentences": (None, MAX_COUNT, False),
    "--catalog": (None, MAX_COUNT, False), "--train-split-repeats": (None, 1000, False),
    "--bits": (None, MAX_WIDTH, False), "--augment-bits": (None, MAX_WIDTH, False),
    "--embedding-dim": (None, MAX_WIDTH, False), "--vocab-size": (None, 10_000_000, False),
    "--max-tokens": (None, MAX_WIDTH, False), "--max-length": (1, MAX_WIDTH, False), "--hidden": (None, MAX_WIDTH, False),
    "--head-hidden": (1, MAX_WIDTH, False), "--n": (None, MAX_WIDTH, False), "--m": (None, MAX_WIDTH, False),
    "--d": (None, MAX_WIDTH, False), "--ffn": (None, MAX_WIDTH, False), "--layers": (None, 256, False),
    "--heads": (None, 256, False), "--temperature": (0.0, BIG, True), "--sra-weight": (0.0, BIG, False),
    "--dropout": (0.0, 1.0, False), "--augment-random": (None, MAX_COUNT, False),
    "--augment-neighbors": (None, 1000, False), "--augment-tasks-max": (None, MAX_COUNT, False),
    "--augment-text-max": (None, MAX_COUNT, False), "--augment-edits": (None, 1000, False),
    "--holdout": (0.0, 0.5, True), "--whiten-variance": (0.0, 1.0, True), "--sp-lambda": (0.0, BIG, False),
    "--sp-triplets": (1, 1 << 24, False), "--threshold": (-BIG, BIG, False),
    "--clip-grad-norm": (None, BIG, False), "--sim-loss-weight": (None, BIG, False),
    "--val-fraction": (None, 1.0, False), "--checkpoint-minutes": (None, 10_000_000, False),
    "--int8-weight-bits": (7, 8, False),
    # index commands: -k, --rerank and --rescore are clamped to the catalog's size (ondevice.index), so any count works
    "--radius": (None, MAX_WIDTH, False), "--category": (-(2**63), 2**63 - 1, False), "--port": (0, 65535, False),
    "--replicas": (1, 1024, False), "--cpus-per-shard": (0.0, 1024.0, True), "--max-mb": (None, 65_536, False),
    "--repeats": (1, 1000, False), "--shards": (None, 4096, False),
}
GENERIC_INT = (-(2**63), 2**63 - 1)  # what numpy and the index take as an int64; counts beyond are clamped
GENERIC_FLOAT = (-1e15, 1e15)


def check_flag(option: str, value: Any) -> None:
    """One parsed numeric flag against FLAG_RANGES (or the generic finite range): a one-line error naming it."""
    if value is None or isinstance(value, (bool, str, list, tuple)):
        return
    lo, hi, lo_open = FLAG_RANGES.get(option, (None, None, False))
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise OndeviceError(f"{option} must be a finite number, got {value}")
    if hi is None:
        lo, hi = GENERIC_INT if isinstance(value, (int, np.integer)) else GENERIC_FLOAT
    if lo is None:  # the command's own check says what the low end means; beyond an int64 nothing is sensible
        lo = GENERIC_INT[0] if isinstance(value, (int, np.integer)) else GENERIC_FLOAT[0]
    bad = value > hi or value < lo or (lo_open and value == lo)
    if bad:
        low = "" if lo == -math.inf else f"{'>' if lo_open else '>='} {_num(lo)} and "
        raise OndeviceError(f"{option} must be {low}<= {_num(hi)}, got {_num(value)}")


def _num(x: float) -> str:
    """A bound or value as the message shows it: integers with thousands separators, floats shortest."""
    return f"{x:,}" if isinstance(x, (int, np.integer)) else f"{float(x):g}"


def check_flag_ranges(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check every numeric value the command line gave (`parser` and its sub-parsers' int and float options)."""
    for action in _numeric_actions(parser):
        value = getattr(args, action.dest, None)
        if action.option_strings and value is not None and value is not action.default:
            for item in value if isinstance(value, (list, tuple)) else [value]:  # append / nargs options
                check_flag(max(action.option_strings, key=len), item)


def _numeric_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The int and float options of `parser` and of the sub-parsers chosen on this command line."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _numeric_actions(child)
        elif action.type in (int, float, finite_float):
            found.append(action)
    return found


def pair_run_checks(threads: int, max_train_pairs: int | None, augment: tuple[int, int] | None = None) -> list[tuple[bool, str]]:
    """The checks the pair-student runs share: --threads, --max-train-pairs and, for runs that augment, the two counts."""
    checks = [(threads >= 0, "--threads must be >= 0"),
              (max_train_pairs is None or max_train_pairs >= 2, "--max-train-pairs must be >= 2")]
    if augment is not None:
        checks += [(augment[0] >= 0, "--augment-random must be >= 0"), (augment[1] >= 0, "--augment-neighbors must be >= 0")]
    return checks
