"""The pretrained default model that ships inside the package: an int8 bundle loadable with no path.

`ondevice.load()` returns it as an `ondevice.runtime.Bundle` (this module is a leaf: runtime imports it) (numpy + onnxruntime only); its folder holds the
bundle's manifest with checksums (verified on load) and a model card (README.md) with its measured scores.
"""

from __future__ import annotations

from pathlib import Path

from ondevice.errors import OndeviceError

ROOT = Path(__file__).resolve().parent / "pretrained"
DEFAULT = "default"
PREFIX = "pretrained"  # `--bundle pretrained` or `--bundle pretrained:NAME` on the command line


def names() -> list[str]:
    """The pretrained models this install carries."""
    return sorted(p.name for p in ROOT.iterdir() if (p / "manifest.json").is_file()) if ROOT.is_dir() else []


def pretrained_path(name: str = DEFAULT) -> Path:
    """Folder of the pretrained bundle `name`."""
    if name not in names():
        have = ", ".join(names()) or "none"
        raise OndeviceError(f"no pretrained model {name!r} in this install (have: {have}); reinstall ondevice")
    return ROOT / name


def parse_spec(spec: str | Path) -> Path | None:
    """'pretrained' or 'pretrained:NAME' -> that bundle's folder; anything else -> None (a path)."""
    text = str(spec)
    if text == PREFIX:
        return pretrained_path(DEFAULT)
    if text.startswith(PREFIX + ":"):
        return pretrained_path(text.split(":", 1)[1])
    return None
