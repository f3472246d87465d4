"""Run configs built from shared pieces: each piece (optimisation, compute, ...) checks its own fields, and a run
config (`Composed`) holds pieces beside its own settings.

A run config is saved flat, one key per setting (`Composed.to_dict`): the layout every release has written and
read, so files written before and after the pieces existed load alike. `Composed.from_dict` also reads the nested
layout of `dataclasses.asdict`. The flat names keep working in Python too: `DistillConfig(epochs=2)` and
`config.epochs` reach `config.optim.epochs`. Validation names fields; a CLI turns them into its flags
(`flags_for_fields`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ondevice.devices import device_check
from ondevice.errors import OndeviceError
from ondevice.tokenizer import MAX_TOKENS

# (ok, message): a message names fields as {field} (their flat names), rendered as the field or as a CLI flag;
# a value quoted in it goes through `literal`
Check = tuple[bool, str]
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([a-z][a-z0-9_]*)\}")


def literal(value: Any) -> str:
    """`value` as text inside a check's message: braces doubled, so a value is never read as a field name."""
    return str(value).replace("{", "{{").replace("}", "}}")


class ConfigError(OndeviceError, ValueError):
    """A setting with an impossible value; the message names fields, `render` can name them otherwise (as flags)."""

    def __init__(self, template: str):
        self.template = template
        super().__init__(self.render())

    @property
    def fields(self) -> list[str]:
        """The fields the message names, in order."""
        return [m.group(1) for m in _PLACEHOLDER.finditer(self.template) if m.group(1)]

    def render(self, name: Callable[[str], str] = str) -> str:
        """The message with each field shown as `name(field)` (and doubled braces as one)."""
        return _PLACEHOLDER.sub(lambda m: name(m.group(1)) if m.group(1) else m.group(0)[0], self.template)


def first_problem(checks: list[Check]) -> None:
    """Raise the ConfigError of the first (ok, message) check that is not ok."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def flag_of(field: str, renamed: Mapping[str, str] | None = None) -> str:
    """The command-line flag of a config field: `renamed[field]`, else --field-name."""
    return (renamed or {}).get(field) or "--" + field.replace("_", "-")


@contextmanager
def flags_for_fields(renamed: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise a ConfigError as the one-line error of a command: the fields it names become flags (`flag_of`)."""
    try:
        yield
    except ConfigError as exc:
        raise OndeviceError(exc.render(lambda f: flag_of(f, renamed))) from None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def int_check(value: Any, field: str, lo: int, hi: int) -> Check:
    """`value` an integer (not a bool) in [lo, hi]."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        return False, f"{{{field}}} must be an integer, got {literal(repr(value))}"
    return lo <= value <= hi, f"{{{field}}} must be between {lo:,} and {hi:,}, got {value:,}"


def float_check(value: Any, field: str, lo: float, hi: float, lo_open: bool = False) -> Check:
    """`value` a finite number in [lo, hi] (or (lo, hi] with `lo_open`): NaN or inf would silently switch features off."""
    if not _number(value):
        return False, f"{{{field}}} must be a number, got {literal(repr(value))}"
    if not math.isfinite(float(value)):
        return False, f"{{{field}}} must be a finite number, got {value}"
    ok = lo <= value <= hi and not (lo_open and value == lo)
    return ok, f"{{{field}}} must be {'>' if lo_open else '>='} {lo:g} and <= {hi:g}, got {float(value):g}"


def choice_check(value: Any, field: str, allowed: tuple[str, ...]) -> Check:
    """`value` one of `allowed`."""
    return value in allowed, f"{{{field}}} must be one of {', '.join(allowed)}, got {literal(repr(value))}"


MAX_EPOCHS = 100_000
MAX_BATCH = 1 << 20
MAX_LR = 10.0
MAX_SEED = 2**32 - 1  # what every generator takes (numpy's legacy seed is 32-bit)


@dataclass
class Optimization:
    """Optimisation: passes over the data, examples per Adam step, Adam's learning rate."""

    epochs: int = 4
    batch_size: int = 32
    lr: float = 5e-4

    def checks(self) -> list[Check]:
        """Epochs and batch size in range, a finite positive rate (an infinite step makes every weight NaN)."""
        return [int_check(self.epochs, "epochs", 1, MAX_EPOCHS), int_check(self.batch_size, "batch_size", 1, MAX_BATCH),
                float_check(self.lr, "lr", 0.0, MAX_LR, lo_open=True)]


LR_SCHEDULES = ("constant", "cosine")


@dataclass
class Schedule:
    """How the learning rate moves over a run, and how large one step may be."""

    lr_schedule: str = "constant"  # constant | cosine (decay to 0 over the run; lost to constant at 20k x 2 epochs)
    warmup_steps: int = 0  # linear warmup from 0 over this many steps
    clip_grad_norm: float = 0.0  # 0 = off

    def checks(self) -> list[Check]:
        """A known schedule, a warmup length and a finite clipping norm."""
        return [choice_check(self.lr_schedule, "lr_schedule", LR_SCHEDULES),
                int_check(self.warmup_steps, "warmup_steps", 0, 1 << 40),
                float_check(self.clip_grad_norm, "clip_grad_norm", 0.0, 1e9)]


@dataclass
class Checkpointing:
    """When a run saves its position besides each epoch's end: every `checkpoint_minutes` (0 = at epoch ends only)."""

    checkpoint_minutes: float = 5.0

    def checks(self) -> list[Check]:
        """A finite, non-negative interval."""
        return [float_check(self.checkpoint_minutes, "checkpoint_minutes", 0.0, 1e6)]


@dataclass
class Compute:
    """Where a run computes: torch threads (0 = torch's default) and device (cpu, cuda, cuda:N, auto)."""

    threads: int = 0
    device: str = "cpu"  # training only: the saved run loads on any device

    def checks(self) -> list[Check]:
        """Threads in range and a device spelled as torch takes it."""
        return [int_check(self.threads, "threads", 0, 4096), device_check(self.device, "{device}")]


POOLINGS = ("mean", "max", "last", "meanmax")


@dataclass(kw_only=True)
class Architecture:
    """The student's shape that a distillation chooses and a student folder records (`StudentConfig`): LSTM units
    per direction, how the token states are pooled, how many tokens a text keeps."""

    hidden_size: int = 256  # paper: 512; 256 trains 3x faster on 2 cores (see README)
    pooling: str = "mean"
    max_tokens: int = 128

    def checks(self) -> list[Check]:
        """Sizes in range and a known pooling."""
        return [int_check(self.hidden_size, "hidden_size", 1, 8192), int_check(self.max_tokens, "max_tokens", 1, MAX_TOKENS),
                choice_check(self.pooling, "pooling", POOLINGS)]


def seed_check(seed: Any, field: str = "seed") -> Check:
    """A seed every generator takes (numpy's legacy seed is 32-bit; a negative one is refused)."""
    return int_check(seed, field, 0, MAX_SEED)


class Composed:
    """Base of a run config: a dataclass whose fields are pieces (dataclasses) and the run's own settings.

    Every field of a piece also has a flat name (the key of the saved file): its own name, or the piece's
    FLAT_NAMES entry (a piece with FLAT_NAMES contributes only those fields). Constructor keywords and attributes
    may use the flat names; REQUIRED names the settings without a default, in the order they may be passed by
    position.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ()
    _FLAT: ClassVar[dict[str, tuple[str, str]]]  # flat name -> (piece attribute, piece field); filled by `composed`

    def __init__(self, *args: Any, **kwargs: Any):
        if len(args) > len(self.REQUIRED):
            raise TypeError(f"{type(self).__name__} takes at most {len(self.REQUIRED)} positional arguments")
        for name, value in zip(self.REQUIRED, args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__} got {name!r} twice")
            kwargs[name] = value
        missing = [n for n in self.REQUIRED if n not in kwargs and self._FLAT[n][0] not in kwargs]
        if missing:
            raise TypeError(f"{type(self).__name__} missing required arguments {missing}")
        pieces = self._pieces()
        for f in dataclasses.fields(self):
            if f.name in kwargs:  # a piece given whole is copied: two configs never share one
                value = kwargs.pop(f.name)
                object.__setattr__(self, f.name, copy.copy(value) if f.name in pieces else value)
            elif f.default is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default_factory())
        unknown = sorted(k for k in kwargs if k not in self._FLAT)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments {unknown}")
        for name, value in kwargs.items():  # flat names after whole pieces: DSEConfig(**{**cfg.__dict__, "lr": x})
            setattr(self, name, value)

    @classmethod
    def _pieces(cls) -> set[str]:
        return {piece for piece, _ in cls._FLAT.values()}

    def __getattr__(self, name: str) -> Any:  # only for names that are not attributes: the flat ones
        where = type(self)._FLAT.get(name) if not name.startswith("__") else None
        if where is None or where[0] not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.__dict__[where[0]], where[1])

    def __setattr__(self, name: str, value: Any) -> None:
        where = type(self)._FLAT.get(name)
        if where is not None and where[0] != name:
            setattr(getattr(self, where[0]), where[1], value)
        else:
            object.__setattr__(self, name, value)

    @classmethod
    def flat_names(cls) -> list[str]:
        """Every setting's flat name (the saved file's keys), in field order."""
        return list(cls._FLAT)

    @classmethod
    def flat_fields(cls) -> dict[str, dataclasses.Field]:
        """The dataclass field behind every flat name (a piece's field, or the config's own), for its type."""
        pieces = {f.name: f for f in dataclasses.fields(cls)}
        out = {}
        for name, (piece, field) in cls._FLAT.items():
            if piece == name:
                out[name] = pieces[name]
            else:
                kind = type(pieces[piece].default_factory())
                out[name] = next(f for f in dataclasses.fields(kind) if f.name == field)
        return out

    @classmethod
    def flat_defaults(cls) -> dict[str, Any]:
        """The default of every setting that has one, by flat name."""
        defaults: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
        out = {}
        for name, (piece, field) in cls._FLAT.items():
            if name in cls.REQUIRED or piece not in defaults:
                continue
            out[name] = defaults[piece] if piece == name else getattr(defaults[piece], field)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The flat layout, one key per setting: what run folders hold (and every release reads)."""
        return {name: copy.deepcopy(getattr(self, name)) for name in self._FLAT}

    @classmethod
    def from_dict(cls, data: Any, what: str) -> Any:
        """The config saved as `data`: the flat layout (files of every release) or the nested one of
        `dataclasses.asdict`; a non-object, unknown keys and missing required keys are one-line errors."""
        if not isinstance(data, dict):
            raise OndeviceError(f"{what} must be a JSON object, got {type(data).__name__}; re-create it")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in cls._pieces() and key not in cls._FLAT and isinstance(value, dict):  # a nested piece
                kind = type(cls.__dataclass_fields__[key].default_factory())
                names = {f.name for f in dataclasses.fields(kind)}
                if set(value) - names:
                    raise OndeviceError(f"{what} has unknown keys {sorted(f'{key}.{k}' for k in set(value) - names)}; "
                                        "it was written by another ondevice version")
                value = kind(**value)
            kwargs[key] = value
        unknown = sorted(k for k in kwargs if k not in cls._FLAT and k not in cls._pieces())
        if unknown:
            raise OndeviceError(f"{what} has unknown keys {unknown}; it was written by another ondevice version")
        missing = [n for n in cls.REQUIRED if n not in kwargs and cls._FLAT[n][0] not in kwargs]
        if missing:
            raise OndeviceError(f"{what} lacks {missing}; it is incomplete, re-create it")
        return cls(**kwargs)


def composed(cls: type) -> type:
    """Class decorator of a `Composed` run config: a dataclass (with Composed's constructor) and its flat names."""
    cls = dataclass(init=False)(cls)
    flat: dict[str, tuple[str, str]] = {}
    for f in dataclasses.fields(cls):
        piece = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(piece):
            names = getattr(piece, "FLAT_NAMES", None) or {p.name: p.name for p in dataclasses.fields(piece)}
            renamed = getattr(cls, "RENAMED", {})
            for field, name in names.items():
                flat[renamed.get(f"{f.name}.{field}", name)] = (f.name, field)
        else:
            flat[f.name] = (f.name, f.name)
    clash = [n for n in flat if flat[n][0] != n and n in {f.name for f in dataclasses.fields(cls)}]
    if clash:
        raise TypeError(f"{cls.__name__}: flat names {clash} are also fields")
    cls._FLAT = flat
    return cls
