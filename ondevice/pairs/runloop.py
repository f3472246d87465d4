"""The run-folder plumbing the pair and sentence fine-tuning runs share: start or resume, then epochs that
checkpoint after each epoch and on Ctrl-C (torch-free at import; checkpoints are ondevice.distill's)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ondevice import layouts
from ondevice.errors import OndeviceError
from ondevice.io import check_out_dir, check_out_kind, dataclass_from_dict, read_json, write_json, write_text


@dataclass
class Position:
    """Where a run is: the epoch being trained and the batch within it (advanced by the epoch function)."""

    epoch: int
    step: int


# The artifact kind (layouts.KINDS) of the run folder each config file marks.
_RUN_KINDS = {layouts.DSE_CONFIG: "dse-run", layouts.DVBERT_CONFIG: "dvbert-run", layouts.DIPAIR_CONFIG: "dipair-run"}


def check_resume(out: Path, config: Any, config_file: str, what: str, keys: Sequence[str], resume: bool,
                 extendable: Sequence[str] = ()) -> None:
    """A checkpoint without --resume, --resume without one, or --resume with other settings: one-line errors.

    Keys in `extendable` (epoch counts whose schedule does not depend on the total) may grow on resume: the run
    then continues past its old end, exactly as a run configured with the larger count from the start, and its
    saved config is rewritten to say so.
    """
    check_out_dir(out)  # an --out that is a file (or inside one) is one line, not a NotADirectoryError later
    kind = _RUN_KINDS.get(config_file)
    if kind is not None:  # never into a student, a bundle or another artifact: the run would write among its files
        check_out_kind(out, kind)
    if (out / layouts.CHECKPOINT).exists() and not resume:
        raise OndeviceError(f"{out} holds a checkpoint of an earlier run; pass --resume to continue it, or choose another --out")
    if resume and not (out / layouts.CHECKPOINT).exists():
        raise OndeviceError(f"nothing to resume in {out} (no {layouts.CHECKPOINT}/); run without --resume")
    if resume:
        saved = dataclass_from_dict(type(config), read_json(out / config_file, what), what)
        diff = [k for k in keys if getattr(saved, k) != getattr(config, k)
                and not (k in extendable and getattr(config, k) > getattr(saved, k))]
        if diff:
            raise OndeviceError(f"--resume with different settings ({', '.join(diff)}); use the original flags or a new --out")
        if any(getattr(saved, k) != getattr(config, k) for k in extendable):
            write_json(out / config_file, config)


def same_settings(out: Path, config: Any, config_file: str, what: str, keys: Sequence[str]) -> None:
    """A finished run folder about to be reused in place of training `config`: one-line error unless its saved
    settings equal `config`'s in every key of `keys`."""
    saved = dataclass_from_dict(type(config), read_json(out / config_file, what), what)
    diff = [k for k in keys if getattr(saved, k) != getattr(config, k)]
    if diff:
        raise OndeviceError(f"{out} holds a finished run with other settings ({', '.join(diff)}); "
                            "use another folder, or the flags it was trained with")


def start_or_resume(out: Path, holder, opt, config: Any, config_file: str, resume: bool) -> dict:
    """The run state {"epoch", "step", "log", "best"}: from the checkpoint, or fresh (config saved beside)."""
    from ondevice.distill import _load_checkpoint

    if resume:
        state = _load_checkpoint(out, holder, opt)
        state.pop("param_groups", None)
        return state
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / config_file, config)
    return {"epoch": 0, "step": 0, "log": [], "best": None}


def run_epochs(out: Path, holder, opt, state: dict, epochs: int, train_epoch: Callable[[Position], dict]) -> None:
    """Call `train_epoch(position)` until `epochs` are done; it trains from batch `position.step` (advancing it),
    handles its dev-best, and returns the epoch's log entry. Checkpoint + train_log.jsonl after each epoch;
    Ctrl-C saves a checkpoint and ends with a one-line error saying how to resume."""
    from ondevice.distill import _save_checkpoint

    pos = Position(state["epoch"], state["step"])

    def save() -> None:
        _save_checkpoint(out, holder, opt, {"epoch": pos.epoch, "step": pos.step, "log": state["log"], "best": state["best"]})

    try:
        while pos.epoch < epochs:
            state["log"].append(train_epoch(pos))
            pos.epoch, pos.step = pos.epoch + 1, 0
            save()
            write_text(out / layouts.TRAIN_LOG, "".join(json.dumps(e) + "\n" for e in state["log"]))
    except KeyboardInterrupt:
        save()
        raise OndeviceError(f"interrupted at epoch {pos.epoch + 1}, batch {pos.step}; checkpoint saved, continue with --resume") from None
