"""Atomic file writes, JSON configs and checksums shared by every artifact."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ondevice import layouts
from ondevice.errors import OndeviceError, SettingError


def cache_dir() -> Path:
    """Root of ondevice's caches: $ONDEVICE_CACHE or ~/.cache/ondevice; a setting that is empty, or names a file or
    something inside a file, is a one-line SettingError (an empty one would otherwise mean the current folder)."""
    raw = os.environ.get("ONDEVICE_CACHE")
    if raw is None:
        return Path.home() / ".cache" / "ondevice"
    if not raw.strip() or "\0" in raw:
        raise SettingError("ONDEVICE_CACHE is set but empty; unset it (for ~/.cache/ondevice) or name a folder")
    path = Path(raw)
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise SettingError(f"ONDEVICE_CACHE={raw}: {p} is not a folder; name a folder for the caches")
            break
    return path


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


def same_or_inside(path: Path, other: Path) -> bool:
    """Whether `path` is the file `other`, or lies inside the folder `other` (links and `..` resolved)."""
    try:
        if path.exists() and other.exists() and os.path.samefile(path, other):
            return True
        return other.is_dir() and path.resolve().is_relative_to(other.resolve())
    except (OSError, ValueError, RuntimeError):  # a link loop, an unreadable folder: compare the spellings only
        return os.path.abspath(path) == os.path.abspath(other)


def _made_by_us(ours: Callable[[Path], bool] | None, path: Path) -> bool:
    """Whether `ours` recognises `path` as an earlier output of the command; unreadable means no."""
    try:
        return bool(ours(path)) if ours is not None else False
    except (OSError, ValueError):
        return False


def check_replace(path: str | os.PathLike, flag: str, *, force: bool = False,
                  inputs: tuple[str | os.PathLike | None, ...] = (), ours: Callable[[Path], bool] | None = None,
                  what: str = "a file of this kind") -> Path:
    """`path` as one file a command writes, checked before any work: it may be new, or a file the same kind of
    run wrote before (`ours(path)` is true); an input of the same run, a file inside an artifact's folder, a link
    or any other file is a one-line error unless `force` (the write itself is atomic either way, `atomic_path`)."""
    path = check_out_file(path, flag)
    for given in inputs:
        if not force and given is not None and same_or_inside(path, Path(given)):
            raise OndeviceError(f"{flag} {path} is an input of this run ({given}); choose another name "
                                "(or --force to replace it)")
    if not (path.exists() or path.is_symlink()) or force:
        return path
    if path.is_symlink():
        raise OndeviceError(f"{flag} {path} is a symbolic link; give the real path (or --force to replace the link)")
    if not path.is_file():
        raise OndeviceError(f"{flag} {path} exists and is not a regular file (a pipe or device); choose another name")
    for folder in (path.parent, path.parent.parent):
        kind = layouts.identify(folder)
        if kind is not None and kind != "index":
            raise OndeviceError(f"{flag} {path} is a file of {layouts.KINDS[kind].what} ({folder}); choose a name "
                                "outside it (or --force to replace it)")
    mine = _made_by_us(ours, path)
    if not mine:
        raise OndeviceError(f"{flag} {path} exists and is not {what}; choose another name (or --force to replace it)")
    return path


def check_replace_dir(path: str | os.PathLike, flag: str, names: tuple[str, ...], *, force: bool = False,
                      inputs: tuple[str | os.PathLike | None, ...] = (), ours: Callable[[Path], bool] | None = None,
                      what: str = "an earlier output of this command") -> Path:
    """`path` as a folder a command writes the files `names` into: new, empty, or an earlier output of the same
    command (`ours(path)`); an artifact's folder, an input of the run or a folder holding other files of those
    names is a one-line error unless `force`."""
    path = check_out_dir(path, flag)
    for given in inputs:
        if given is not None and not force and (same_or_inside(path, Path(given)) or
                                                same_or_inside(Path(given), path)):
            raise OndeviceError(f"{flag} {path} holds or is an input of this run ({given}); choose another folder "
                                "(or --force)")
    if force or not path.is_dir() or not any(path.iterdir()):
        return path
    kind = layouts.identify(path)
    if kind is not None:
        raise OndeviceError(f"{flag} {path} holds {layouts.KINDS[kind].what}; choose an empty or new {flag} "
                            "(or --force to write into it)")
    mine = _made_by_us(ours, path)
    clash = [n for n in names if (path / n).exists() or (path / n).is_symlink()]
    if clash and not mine:
        raise OndeviceError(f"{flag} {path} holds a {clash[0]} that is not {what}; choose an empty or new {flag} "
                            "(or --force to replace it)")
    return path


def is_npy_codes(path: str | os.PathLike) -> bool:
    """Whether `path` is a .npy file of packed codes (a 2-D uint8 array), as `--codes-out` writes."""
    with open(path, "rb") as fh:
        if fh.read(6) != np.lib.format.MAGIC_PREFIX:
            return False
        fh.seek(0)
        version = np.lib.format.read_magic(fh)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = header(fh)
    return dtype == np.uint8 and len(shape) == 2


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
    """Write UTF-8 `text` to `path` atomically; text that is not valid Unicode (a lone surrogate from an undecodable
    file name or an escaped one in JSON) is a one-line error and nothing is written."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = text[max(exc.start - 20, 0): exc.end + 20].encode("utf-8", "backslashreplace").decode("utf-8")
        raise OndeviceError(f"refusing to write {Path(path).name}: it would hold text that is not valid Unicode "
                            f"(near {shown!r}); nothing was written") from None
    write_bytes(path, data)


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` (dataclasses allowed) as indented, key-sorted JSON, atomically; NaN or infinity anywhere in it is
    a one-line error and nothing is written (JSON has no such numbers: the web runtime refuses a file with them)."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, default=_default, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):
            raise
        raise OndeviceError(f"refusing to write {Path(path).name}: it would hold NaN or infinity "
                            f"({_nonfinite_at(obj)}); nothing was written") from None
    write_text(path, text + "\n")


def check_finite_json(obj: Any, what: str) -> Any:
    """`obj` unchanged, or a one-line error naming the first NaN or infinity in it (read from a JSON file that
    Python parsed with its NaN extension): checked before work whose output would carry the value."""
    found = _nonfinite_at(obj)
    if found != "a value":
        raise OndeviceError(f"{what} holds NaN or infinity ({found}); JSON has no such numbers, write null or a number")
    return obj


def nonfinite_to_null(obj: Any) -> Any:
    """`obj` with every NaN or infinite float (numpy ones included) replaced by None: for results where a metric
    is undefined (a constant side of a correlation), written as JSON null rather than refused by `write_json`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        obj = obj.tolist()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: nonfinite_to_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nonfinite_to_null(v) for v in obj]
    return obj


def write_record(path: str | os.PathLike, obj: Any) -> None:
    """`write_json` for measurement records (benchmark results, dev metrics): a metric that is undefined (NaN, a
    correlation with a constant side) is written as null instead of failing the run that measured it."""
    write_json(path, nonfinite_to_null(obj))


def _nonfinite_at(obj: Any, where: str = "") -> str:
    """The first key path in `obj` holding a non-finite float ("a value" when none is found)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        obj = obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"{where or 'the value'} = {obj}"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _nonfinite_at(value, f"{where}.{key}" if where else str(key))
        if found != "a value":
            return found
    return "a value"


MAX_JSON_BYTES = 256 << 20  # settings, manifests and reports are KB to MB; a larger "JSON" file is not one of them
MAX_TEXT_BYTES = 1 << 30  # a text file read whole (pairs, golden sentences): larger ones are streamed or refused


def regular_file(path: str | os.PathLike, what: str) -> Path:
    """`path` as a regular file to read: a folder, a pipe (FIFO), a device such as /dev/zero or a missing file is a
    one-line error (a pipe would block forever, /dev/zero never ends)."""
    path = Path(path)
    if path.is_dir():
        raise OndeviceError(f"{what} {path} is a folder; give a file")
    if path.exists() and not path.is_file():
        raise OndeviceError(f"{what} {path} is not a regular file (a pipe, socket or device); give a file, which is "
                            "read to its end (streams are not read)")
    if not path.is_file():
        raise OndeviceError(f"cannot read {what} {path}: no such file")
    return path


def read_bounded(path: str | os.PathLike, what: str, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, read once; larger or non-regular files are a one-line
    error naming `what`, read no further than the limit."""
    path = regular_file(path, what)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise OndeviceError(f"cannot read {what} {path} ({exc.strerror or type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise OndeviceError(f"{what} {path} is larger than {max_bytes >> 20} MB, more than such a file ever holds; "
                            "give a smaller file")
    return data


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Read a JSON file, turning a missing, corrupt, non-regular or oversized file into a one-line error."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():
        regular_file(path, what)  # a pipe or device: its one line
    if not path.is_file():
        raise OndeviceError(f"{what} not found: {path}")
    try:
        obj = json.loads(read_bounded(path, what, MAX_JSON_BYTES).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, an over-long integer, absurd nesting
        raise OndeviceError(f"{what} {path} is not valid JSON ({str(exc)[:160]}); re-create it") from None
    except OSError as exc:
        raise OndeviceError(f"cannot read {what} {path} ({exc.strerror or type(exc).__name__})") from None
    try:
        bad = _bad_text_at(obj)
    except RecursionError:
        raise OndeviceError(f"{what} {path} is nested too deeply for a settings or report file; re-create it") from None
    if bad is not None:  # "\udcff" is valid JSON but no text: writing it anywhere (a manifest, a report) would fail
        raise OndeviceError(f"{what} {path} holds text that is not valid Unicode (an escaped lone surrogate at "
                            f"{bad}); re-create it")
    return obj


def _bad_text_at(obj: Any, where: str = "") -> str | None:
    """The key path of the first string (key or value) in parsed JSON that cannot be encoded as UTF-8, or None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the value"
        return None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        at = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and _bad_text_at(key) is not None:
            return at.encode("utf-8", "backslashreplace").decode("utf-8")
        found = _bad_text_at(value, at)
        if found is not None:
            return found.encode("utf-8", "backslashreplace").decode("utf-8")
    return None


def read_npy(path: str | os.PathLike, what: str = "array", mmap: bool = True) -> Any:
    """A numeric array from a .npy file (memory-mapped unless `mmap` is False), never unpickling anything; an empty,
    truncated, non-.npy or object-dtype file is a one-line error naming `what`."""
    path = Path(path)
    if path.is_dir():
        raise OndeviceError(f"{what} {path} is a folder; give a .npy file (numpy.save)")
    if path.exists() and not path.is_file():
        regular_file(path, what)  # a pipe or device: its one line, not "not found"
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
