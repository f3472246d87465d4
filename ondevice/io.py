"""Atomic file writes, JSON configs and checksums shared by every artifact."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ondevice.errors import OndeviceError


def cache_dir() -> Path:
    """Root of ondevice's caches: $ONDEVICE_CACHE or ~/.cache/ondevice."""
    return Path(os.environ.get("ONDEVICE_CACHE", Path.home() / ".cache" / "ondevice"))


def new_file_mode() -> int:
    """The mode a plain open() gives a new file: 0o666 without the process umask."""
    try:  # Linux says it without changing anything; os.umask can only be read by setting it (racy with threads)
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    The file ends with the mode a plain open() would give it (0o666 minus the umask), not mkstemp's private 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX
            os.fchmod(fd, new_file_mode())
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:  # make the bytes durable before the rename publishes them
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    write_bytes(path, text.encode("utf-8"))


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` (dataclasses allowed) as indented, key-sorted JSON, atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_default, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Read a JSON file, turning a missing or corrupt file into a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise OndeviceError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OndeviceError(f"{what} {path} is not valid JSON ({exc}); re-create it") from None


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_text(lines: Any) -> str:
    """Hex sha256 of an iterable of strings, each terminated by a newline."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def dataclass_from_dict(cls: type, data: dict, what: str) -> Any:
    """Build dataclass `cls` from `data`, rejecting unknown keys with a one-line error."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise OndeviceError(f"{what} has unknown keys {unknown}; it was written by another ondevice version")
    return cls(**data)
