"""Atomic file writes, JSON configs and checksums shared by every artifact."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ondevice import layouts
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


# Our temp names: ".NAME.<pid>-<random>.tmp" beside the target. The pid tells a later run whether the writer is
# still alive; a name without one (older ondevice: ".NAME.<8 random chars>.tmp") counts as stale after an hour.
_LEGACY_STALE_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's live process, or an impossible pid
        return True
    return True


def temp_name(target: str) -> str:
    """A fresh temp name for `target` in the naming that `clean_stale_temps` recognizes."""
    return f".{target}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def clean_stale_temps(folder: str | os.PathLike, target: str) -> list[Path]:
    """Remove temp files/dirs of ours for `target` in `folder` left by a killed run; returns what was removed."""
    folder = Path(folder)
    pattern = re.compile(rf"^\.{re.escape(target)}\.(?:(\d+)-[0-9a-f]{{8}}|[A-Za-z0-9_]{{8}})\.tmp$")
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry.name)
        if not m:
            continue
        try:
            if m.group(1) is not None:
                if int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
                    continue
            elif time.time() - entry.lstat().st_mtime < _LEGACY_STALE_S:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
        except OSError:  # vanished meanwhile or not ours to delete: leave it
            continue
    return removed


def check_out_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """`path` as a file to (over)write; a directory there is a one-line error."""
    path = Path(path)
    if path.is_dir():
        raise OndeviceError(f"{flag} {path} is a directory; give a file path")
    if path.parent.exists() and not path.parent.is_dir():
        raise OndeviceError(f"{flag} {path}: {path.parent} is a file, not a directory")
    return path


def check_out_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """`path` as a directory to write into; an existing file there is a one-line error."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise OndeviceError(f"{flag} {path}: {p} is a file, not a directory; choose another {flag}")
        if p.exists():
            break
    return path


# The files each kind of artifact writes: an --out folder of no known kind that already holds one of them holds
# someone else's file of that name, which the writer would replace.
_WRITES = {
    "student": (*layouts.STUDENT_FILES, layouts.UNPACKED),
    "binarizer": layouts.BINARIZER_FILES,
    "sharded-index": (layouts.MANIFEST,),
}
# Left by an interrupted ondevice run before its artifact is complete: the folder is one of ours, resumable.
_IN_PROGRESS = (layouts.CHECKPOINT, layouts.AE_CHECKPOINT, layouts.TRAIN_LOG, layouts.DISTILL_CONFIG)


def check_out_kind(path: str | os.PathLike, kind: str, flag: str = "--out") -> Path:
    """`path` as the folder of an artifact of `kind` (a key of layouts.KINDS): new, empty, or holding that kind,
    which is written over; a folder holding another artifact, or files of the same names that are not an
    artifact's, is a one-line error, so no command replaces what it did not write."""
    path = check_out_dir(path, flag)
    if not path.is_dir():
        return path
    found = layouts.identify(path)
    if found is not None and found != kind:
        other = layouts.KINDS[found]
        raise OndeviceError(f"{flag} {path} holds {other.what} (made by {other.made_by}), not "
                            f"{layouts.KINDS[kind].what}; choose an empty or new {flag}")
    if found is None and not any((path / name).exists() for name in _IN_PROGRESS):
        clash = [name for name in _WRITES.get(kind, ()) if (path / name).exists()]
        if clash:
            raise OndeviceError(f"{flag} {path} holds a {clash[0]} that is not part of {layouts.KINDS[kind].what}; "
                                f"choose an empty or new {flag} (nothing there is replaced)")
    return path


def check_out_index_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """`path` as a Hamming index file to (over)write: an existing file there must be an index file."""
    path = check_out_file(path, flag)
    if path.exists() and layouts.identify(path) != "index":
        raise OndeviceError(f"{flag} {path} exists and is not a Hamming index file; choose another name "
                            "(only an earlier index file is replaced)")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    The file gets the mode a plain open() would give it (0o666 minus the umask), not a private 0600.
    """
    path = check_out_file(path, "output")
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(path.parent, path.name)
    tmp = path.parent / temp_name(path.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    mode = os.fstat(fd).st_mode & 0o777
    os.close(fd)
    try:
        yield tmp
        if os.stat(tmp).st_mode & 0o777 != mode:  # a writer that replaced the file (safetensors does) made it 0600
            os.chmod(tmp, mode)
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
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, an over-long integer, absurd nesting
        raise OndeviceError(f"{what} {path} is not valid JSON ({str(exc)[:160]}); re-create it") from None
    except OSError as exc:
        raise OndeviceError(f"cannot read {what} {path} ({exc.strerror or type(exc).__name__})") from None


def read_npy(path: str | os.PathLike, what: str = "array", mmap: bool = True) -> Any:
    """A numeric array from a .npy file (memory-mapped unless `mmap` is False), never unpickling anything; an empty,
    truncated, non-.npy or object-dtype file is a one-line error naming `what`."""
    import numpy as np

    path = Path(path)
    if path.is_dir():
        raise OndeviceError(f"{what} {path} is a folder; give a .npy file (numpy.save)")
    if not path.is_file():
        raise OndeviceError(f"{what} file not found: {path}")
    fix = "write it with numpy.save"
    try:
        with open(path, "rb") as fh:
            start = fh.read(6)
            if not start:
                raise OndeviceError(f"{what} {path} is empty (0 bytes); {fix}")
            if start.startswith(b"PK\x03\x04"):
                raise OndeviceError(f"{what} {path} is a .npz archive, not a .npy file; save the one array with numpy.save")
            if start != np.lib.format.MAGIC_PREFIX:
                raise OndeviceError(f"{what} {path} is not a .npy file (no numpy header); {fix}")
            fh.seek(0)
            version = np.lib.format.read_magic(fh)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            _, _, dtype = header(fh)
        if dtype.hasobject:
            raise OndeviceError(f"{what} {path} holds Python objects ({dtype}), not numbers; save a numeric array")
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # a truncated header or data, an unreadable file
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise OndeviceError(f"cannot read {what} {path} as a .npy array ({reason}); check the file is complete") from None


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


def dataclass_from_dict(cls: type, data: Any, what: str) -> Any:
    """Build dataclass `cls` from `data`, rejecting non-objects, unknown and missing keys with a one-line error."""
    if not isinstance(data, dict):
        raise OndeviceError(f"{what} must be a JSON object, got {type(data).__name__}; re-create it")
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    unknown = sorted(set(data) - names)
    if unknown:
        raise OndeviceError(f"{what} has unknown keys {unknown}; it was written by another ondevice version")
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise OndeviceError(f"{what} lacks {missing}; it is incomplete, re-create it")
    return cls(**data)


def canonical_safetensors(path: str | os.PathLike) -> None:
    """Rewrite a safetensors file's JSON header with sorted keys, in place and at the same length.

    The safetensors library writes the header's maps (metadata, tensors) in hash-map order, which changes from one
    map to the next, so the same tensors could give different bytes and checksums; the data part is untouched.
    """
    with open(path, "r+b") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(text) > size:  # a reordering of the library's compact JSON is never longer; leave anything else alone
            return
        fh.seek(8)
        fh.write(text + b" " * (size - len(text)))  # the format pads its header with spaces


def artifact_file(folder: str | os.PathLike, name: str, what: str) -> Path:
    """`folder`/`name` (a '/'-separated path inside an artifact folder), refused with a one-line error when it, or a
    folder between `folder` and it, is a symbolic link: an artifact made by someone else must not read any other
    file of this machine. `what` names the artifact kind in the message ("student", "bundle"). `folder` itself may
    be a link (the user chose it); nothing is read here, and a missing file is left to the caller."""
    from pathlib import PurePosixPath

    folder = Path(folder)
    parts = PurePosixPath(name).parts
    current = folder
    for i, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            link = "/".join(parts[: i + 1])
            shown = f"{link} is a symbolic link" if i == len(parts) - 1 else f"{name} lies in {link}/, a symbolic link"
            raise OndeviceError(f"{what} {folder}: {shown}; artifacts are read only from plain files inside their "
                                "folder (copy the file in instead)")
    if current.exists() and not (current.is_file() or current.is_dir()):  # a FIFO would block the read forever
        raise OndeviceError(f"{what} {folder}: {name} is not a regular file (a pipe or device); artifacts are read "
                            "only from plain files")
    return current
