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


def training_checks(epochs: int, batch_size: int, lr: float) -> list[tuple[bool, str]]:
    """The (ok, message) checks every training config shares: --epochs, --batch-size, --lr."""
    return [(epochs >= 1, "--epochs must be >= 1"), (batch_size >= 1, "--batch-size must be >= 1"),
            (lr > 0, "--lr must be > 0")]


def pair_run_checks(threads: int, max_train_pairs: int | None, augment: tuple[int, int] | None = None) -> list[tuple[bool, str]]:
    """The checks the pair-student runs share: --threads, --max-train-pairs and, for runs that augment, the two counts."""
    checks = [(threads >= 0, "--threads must be >= 0"),
              (max_train_pairs is None or max_train_pairs >= 2, "--max-train-pairs must be >= 2")]
    if augment is not None:
        checks += [(augment[0] >= 0, "--augment-random must be >= 0"), (augment[1] >= 0, "--augment-neighbors must be >= 0")]
    return checks
