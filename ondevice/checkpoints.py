"""Checkpoint formats of the training runs; a checkpoint is only ever replaced by a complete one.

- A folder (`checkpoint/`: model.safetensors, optimizer.safetensors, state.json; distillation and the pair runs):
  written beside as `.checkpoint.tmp` and swapped in by two renames; `recover` finishes a swap a kill interrupted.
- One safetensors file (the autoencoder binarizer): model, optimizer and extra tensors, the position in its
  metadata, written atomically.

Optimizer state is saved flat as `<param index>.<name>` tensors with the param groups beside: no pickle anywhere.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from ondevice import layouts
from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, atomic_path, read_json, write_json


def _folders(out: Path) -> tuple[Path, Path, Path]:
    """(being written, current, previous) checkpoint folders of run folder `out`."""
    return out / f".{layouts.CHECKPOINT}.tmp", out / layouts.CHECKPOINT, out / f".{layouts.CHECKPOINT}.old"


def optimizer_tensors(opt) -> tuple[dict[str, Any], list]:
    """An optimizer's state as flat `<param index>.<name>` CPU tensors, and its param groups."""
    torch = require("torch", "train")
    osd = opt.state_dict()
    tensors = {f"{i}.{k}": (v.detach().cpu() if torch.is_tensor(v) else torch.tensor(v)).contiguous()
               for i, s in osd["state"].items() for k, v in s.items()}
    return tensors, osd["param_groups"]


def load_optimizer(opt, flat: dict, param_groups: Any) -> None:
    """Restore an optimizer from its flat `<param index>.<name>` tensors and its saved param groups."""
    opt_state: dict = {}
    for key, value in flat.items():
        i, name = key.split(".", 1)
        opt_state.setdefault(int(i), {})[name] = value
    opt.load_state_dict({"state": opt_state, "param_groups": param_groups})


def save(out: Path, model, opt, state: dict) -> None:
    """Model, optimizer and `state` (the position, JSON) as `out`/checkpoint, written beside and swapped in whole."""
    st = require("safetensors.torch", "train")
    tmp, final, old = _folders(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    st.save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp / layouts.CKPT_WEIGHTS))
    tensors, groups = optimizer_tensors(opt)
    st.save_file(tensors, str(tmp / layouts.CKPT_OPTIMIZER))
    write_json(tmp / layouts.CKPT_STATE, {**state, "param_groups": groups})  # last: it marks the folder complete
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def _complete(folder: Path) -> bool:
    """Whether a checkpoint folder was fully written (state.json is written last)."""
    return all((folder / n).is_file() for n in (layouts.CKPT_WEIGHTS, layouts.CKPT_OPTIMIZER, layouts.CKPT_STATE))


def recover(out: Path) -> bool:
    """Finish a checkpoint swap that a kill interrupted; True when `out` then holds a checkpoint.

    A save writes .checkpoint.tmp, renames checkpoint -> .checkpoint.old, .checkpoint.tmp -> checkpoint, then deletes
    .checkpoint.old. Killed between the renames, the complete .tmp is the newest state and .old the one before.
    """
    tmp, final, old = _folders(out)
    if not final.exists():
        for candidate in (tmp, old):
            if candidate.is_dir() and _complete(candidate):
                candidate.rename(final)
                break
    if final.exists():
        if old.exists():  # the new checkpoint is in place; the previous one is no longer needed
            shutil.rmtree(old, ignore_errors=True)
        return True
    return False


@contextmanager
def checkpoint_errors(folder: Path, fix: str = "run without --resume, or with a new --out") -> Iterator[None]:
    """Turn a damaged or foreign checkpoint (bad safetensors, missing keys, shapes of another model) into one line."""
    try:
        yield
    except OndeviceError:
        raise
    except (SafetensorError, OSError, KeyError, ValueError, TypeError, IndexError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise OndeviceError(f"checkpoint {folder} cannot be loaded ({type(exc).__name__}: {first}); it is damaged or "
                            f"from another run: {fix}") from None


def checkpoint_file(out: Path, name: str) -> Path:
    """`out`/checkpoint/`name`, refused when it (or the checkpoint folder) is a link, pipe or device: a resumed run
    reads only its own plain files."""
    return artifact_file(out, f"{layouts.CHECKPOINT}/{name}", "run")


def read_state(out: Path) -> dict:
    """The position and log saved in `out`/checkpoint (state.json), its optimizer's param groups included."""
    state = read_json(checkpoint_file(out, layouts.CKPT_STATE), "checkpoint state")
    with checkpoint_errors(out / layouts.CHECKPOINT):
        if not isinstance(state, dict):
            raise TypeError("state.json is not an object")
    return state


def load(out: Path, model, opt, state: dict | None = None) -> dict:
    """Load `out`/checkpoint into `model` and, unless `opt` is None, the optimizer; returns the saved state without
    its param groups. `state`: the one `read_state` gave (when the optimizer depends on it)."""
    st = require("safetensors.torch", "train")
    state = read_state(out) if state is None else state
    with checkpoint_errors(out / layouts.CHECKPOINT):
        model.load_state_dict(st.load_file(str(checkpoint_file(out, layouts.CKPT_WEIGHTS))))
        if opt is not None:
            load_optimizer(opt, st.load_file(str(checkpoint_file(out, layouts.CKPT_OPTIMIZER))), state["param_groups"])
    return {k: v for k, v in state.items() if k != "param_groups"}


def save_file(path: Path, model, opt, extra: dict, meta: dict[str, str]) -> None:
    """Model (`model.`), optimizer (`opt.`) and `extra` tensors with string metadata `meta`: one safetensors file,
    written atomically (the param groups go in the metadata)."""
    st = require("safetensors.torch", "train")
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update(extra)
    opt_tensors, groups = optimizer_tensors(opt)
    tensors.update({f"opt.{k}": v for k, v in opt_tensors.items()})
    with atomic_path(path) as tmp:
        st.save_file(tensors, str(tmp), metadata={**meta, "param_groups": json.dumps(groups)})


def read_file(path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """(metadata, tensors) of a checkpoint file; an unreadable one is a one-line error."""
    st = require("safetensors.torch", "train")
    try:
        with st.safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 -- safe_open is not iterable
    except Exception as exc:  # noqa: BLE001 -- truncated file, foreign file
        raise OndeviceError(f"cannot read checkpoint {path} ({type(exc).__name__}); delete it and start again") from None
    return meta, tensors


def load_file(meta: dict[str, str], tensors: dict[str, Any], model, opt) -> None:
    """Restore `model` and `opt` from a checkpoint file's `read_file` parts."""
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    load_optimizer(opt, {k[4:]: v for k, v in tensors.items() if k.startswith("opt.")}, json.loads(meta["param_groups"]))
