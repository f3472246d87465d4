"""Optional dependencies: import them on use and say which extra to install when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from ondevice.errors import OndeviceError


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or fail with the pip command that installs the extra providing it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # ModuleNotFoundError or a broken install
        hint = "pip install torch==2.13.0 && " if module.split(".")[0] == "torch" else ""
        raise OndeviceError(
            f"{module} is not installed ({exc.__class__.__name__}: {exc}); "
            f"install it with: {hint}pip install 'ondevice[{extra}]'"
        ) from None
