"""Which torch device a training run uses: `cpu` (the default), `cuda` / `cuda:N`, or `auto` (CUDA when present).

Only the training side (`distill`'s teacher and student, cross-encoder teachers, DSE, DvBERT and DiPair students)
takes a device; everything a bundle runs stays on the CPU. Checkpoints and saved weights are always written from
CPU copies, so a run trained on a GPU resumes and loads on a machine without one.
"""

from __future__ import annotations

import re

from ondevice._deps import require
from ondevice.errors import OndeviceError

DEVICE_HELP = "torch device for training: cpu, cuda, cuda:N or auto (CUDA when available)"


def device_check(spec: str, name: str = "--device") -> tuple[bool, str]:
    """The (ok, message) check of a device setting called `name`, for `checks.first_failure`."""
    ok = spec in ("cpu", "auto") or re.fullmatch(r"cuda(:\d+)?", str(spec)) is not None
    return ok, f"{name} must be cpu, cuda, cuda:N or auto, got {spec!r}"


def on_device(x, device):
    """A numpy array as a torch tensor on `device` (shares memory on the CPU)."""
    return require("torch", "train").from_numpy(x).to(device)


def resolve_device(spec: str) -> str:
    """The torch device string for `spec`; a one-line error when CUDA is asked for and this torch has none."""
    ok, message = device_check(spec)
    if not ok:
        raise OndeviceError(message)
    if spec == "cpu":
        return "cpu"
    torch = require("torch", "train")
    available = torch.cuda.is_available()
    if spec == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise OndeviceError(f"--device {spec}: this torch ({torch.__version__}) sees no CUDA GPU; use --device cpu or auto")
    index = int(spec.split(":")[1]) if ":" in spec else 0
    if index >= torch.cuda.device_count():
        raise OndeviceError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) here; use cuda:0..")
    return spec
