"""The training loop every trainer shares (distillation, the autoencoder binarizer, the pair runs): start or resume,
epochs that end in a checkpoint, a NaN stop, and Ctrl-C that saves where it stopped.

A trainer supplies what differs: how one epoch trains (`train_epoch`, from a batch position so a resume is exact),
how its position is saved (`checkpoints` folder or file), and what it publishes at an epoch's end.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ondevice import checkpoints, layouts
from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import check_out_dir, check_out_kind, dataclass_from_dict, read_json, write_json, write_text


@dataclass
class Position:
    """Where a run is: the epoch being trained and the batch within it (advanced by the epoch function)."""

    epoch: int
    step: int


def check_start(out: Path, resume: bool, found: bool, marker: str, what: str = "a checkpoint") -> None:
    """One line for a checkpoint (`found`) without --resume, and for --resume without one (`marker`: its name)."""
    if found and not resume:
        raise OndeviceError(f"{out} holds {what} of an earlier run; pass --resume to continue it, or choose another --out")
    if resume and not found:
        raise OndeviceError(f"nothing to resume in {out} (no {marker}); run without --resume")


def changed_settings(saved: Any, config: Any, keys: Sequence[str], extendable: Sequence[str] = ()) -> list[str]:
    """The `keys` whose value differs between a saved config and `config`; keys in `extendable` (epoch counts whose
    schedule does not depend on the total) may grow."""
    return [k for k in keys if getattr(saved, k) != getattr(config, k)
            and not (k in extendable and getattr(config, k) > getattr(saved, k))]


def refuse_changes(saved: Any, config: Any, keys: Sequence[str], extendable: Sequence[str] = ()) -> None:
    """One line naming every setting of `keys` that a resumed run would change (`changed_settings`)."""
    diff = changed_settings(saved, config, keys, extendable)
    if diff:
        detail = ", ".join(f"{k}: {getattr(saved, k)!r} -> {getattr(config, k)!r}" for k in diff)
        raise OndeviceError(f"--resume with different settings ({detail}); use the original flags or a new --out")


def saved_config(out: Path, cls: type, config_file: str, what: str) -> Any:
    """The config a run folder saved (a composed config: flat, or nested as `dataclasses.asdict` writes it)."""
    data = read_json(out / config_file, what)
    return cls.from_dict(data, what) if hasattr(cls, "from_dict") else dataclass_from_dict(cls, data, what)


def _saved_form(config: Any) -> Any:
    """What a run folder holds of `config`: a composed config's flat layout, a plain dataclass as it is."""
    return config.to_dict() if hasattr(config, "to_dict") else config


def check_resume(out: Path, config: Any, config_file: str, what: str, keys: Sequence[str], resume: bool,
                 kind: str | None = None, extendable: Sequence[str] = ()) -> None:
    """A run folder about to be trained: never inside another artifact (`kind`: what the folder becomes), a
    checkpoint only with --resume, and --resume only with the saved settings in `keys` (`refuse_changes`)."""
    check_out_dir(out)  # an --out that is a file (or inside one) is one line, not a NotADirectoryError later
    if kind is not None:  # never into a student, a bundle or another artifact: the run would write among its files
        check_out_kind(out, kind)
    check_start(out, resume, (out / layouts.CHECKPOINT).exists(), f"{layouts.CHECKPOINT}/")
    if resume:
        refuse_changes(saved_config(out, type(config), config_file, what), config, keys, extendable)


def same_settings(out: Path, config: Any, config_file: str, what: str, keys: Sequence[str]) -> None:
    """A finished run folder about to be reused in place of training `config`: one-line error unless its saved
    settings equal `config`'s in every key of `keys`."""
    diff = changed_settings(saved_config(out, type(config), config_file, what), config, keys)
    if diff:
        raise OndeviceError(f"{out} holds a finished run with other settings ({', '.join(diff)}); "
                            "use another folder, or the flags it was trained with")


def start_or_resume(out: Path, model, opt, config: Any, config_file: str, resume: bool, fresh: dict) -> dict:
    """The run state: from the checkpoint in `out`, or `fresh` in a new run folder. Either way the config is saved
    (flat) beside, so it holds what the run last ran with (threads, device may change on resume)."""
    if resume:
        state = checkpoints.load(out, model, opt)
    else:
        out.mkdir(parents=True, exist_ok=True)
        state = fresh
    write_json(out / config_file, _saved_form(config))
    return state


def nonfinite_weight(model) -> str | None:
    """The first parameter or buffer of `model` holding NaN or inf, if any."""
    torch = require("torch", "train")
    return next((n for n, p in model.state_dict().items() if p.is_floating_point() and not bool(torch.isfinite(p).all())),
                None)


class Diverged(OndeviceError):
    """Training produced a NaN or infinite loss or weight; nothing non-finite was saved."""


Fix = str | Callable[[], str]  # what to do about a divergence; a callable is asked only when one happens


def check_loss(loss, where: str, fix: Fix) -> None:
    """Stop before a NaN or infinite loss reaches the weights, a checkpoint or a published model."""
    value = loss.item()
    if not math.isfinite(value):
        raise Diverged(f"training diverged {where}: the loss is {value}; {fix if isinstance(fix, str) else fix()}")


def optimizer_step(loss, opt, pos: Position, losses: list[float], bar, fix: Fix, **shown: str) -> None:
    """One optimiser step on a batch's `loss`, stopped first if the loss is not finite; the batch is counted in `pos`,
    its loss kept in `losses`, and every 20 batches the running loss (and `shown`) goes on the progress bar."""
    check_loss(loss, f"at epoch {pos.epoch + 1}, batch {pos.step + 1}", fix)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    pos.step += 1
    losses.append(loss.item())
    if len(losses) % 20 == 0:
        bar.set_postfix(loss=f"{sum(losses[-20:]) / 20:.4f}", **shown)


def check_weights(model, where: str, fix: Fix) -> None:
    """Stop before weights holding NaN or inf replace a good checkpoint."""
    bad = nonfinite_weight(model)
    if bad is not None:
        raise Diverged(f"training diverged {where}: NaN or inf weights in {bad}; {fix if isinstance(fix, str) else fix()}")


def write_log(path: Path, log: list[dict]) -> None:
    """The epochs' log entries as JSON lines (train_log.jsonl)."""
    write_text(path, "".join(json.dumps(e) + "\n" for e in log))


class Every:
    """A timer for saves within an epoch: `due()` once `minutes` have passed since the last `reset()` (0 = never)."""

    def __init__(self, minutes: float):
        self.seconds = minutes * 60
        self.reset()

    def reset(self) -> None:
        """Start counting again (after a save)."""
        self.last = time.monotonic()

    def due(self) -> bool:
        """Whether a save is due."""
        return self.seconds > 0 and time.monotonic() - self.last > self.seconds


def run_epochs(pos: Position, epochs: int, train_epoch: Callable[[Position], dict],
               save: Callable[[Position], None] | None, log: list[dict], end_epoch: Callable[[], None] | None = None,
               steps_resume: bool = True) -> None:
    """Train from `pos` until `epochs` are done.

    `train_epoch(pos)` trains epoch `pos.epoch` from batch `pos.step` (advancing it) and returns the epoch's log
    entry, appended to `log`. Then `pos` moves to the next epoch's start, `save(pos)` checkpoints it and
    `end_epoch()` publishes what the epoch made. Ctrl-C: with `steps_resume` the batch reached is saved (a resume
    continues there exactly); without, the last epoch's checkpoint stays. Either way one line says how to continue;
    a run without checkpoints (`save` None) passes the KeyboardInterrupt on.
    """
    try:
        while pos.epoch < epochs:
            log.append(train_epoch(pos))
            pos.epoch, pos.step = pos.epoch + 1, 0
            if save is not None:
                save(pos)
            if end_epoch is not None:
                end_epoch()
    except KeyboardInterrupt:
        if save is None:
            raise
        if not steps_resume:
            raise OndeviceError(f"interrupted in epoch {pos.epoch + 1}; the checkpoint of the epochs before is kept, "
                                "continue with --resume") from None
        save(pos)
        raise OndeviceError(f"interrupted at epoch {pos.epoch + 1}, batch {pos.step}; checkpoint saved, continue with "
                            "--resume") from None


def run_folder_epochs(out: Path, model, opt, state: dict, epochs: int, train_epoch: Callable[[Position], dict],
                      fix: str = "lower --lr") -> None:
    """`run_epochs` for a run folder: the folder checkpoint holds the position with `state`'s log and dev-best
    ("best"), saved only while the weights are finite; train_log.jsonl is rewritten after each epoch."""
    log = state["log"]

    def save(pos: Position) -> None:
        check_weights(model, f"at epoch {pos.epoch + 1}, batch {pos.step}", fix)
        checkpoints.save(out, model, opt, {"epoch": pos.epoch, "step": pos.step, "log": log, "best": state["best"]})

    run_epochs(Position(state["epoch"], state["step"]), epochs, train_epoch, save, log,
               lambda: write_log(out / layouts.TRAIN_LOG, log))
