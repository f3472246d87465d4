"""Read a sentence corpus: one sentence per line, plain or gzip, UTF-8."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from ondevice.errors import OndeviceError

WIKI_RELPATH = Path("wiki") / "wiki_en_sentences_1m.txt.gz"


def default_data_dir() -> Path:
    """The evaluation/distillation data folder: $ONDEVICE_DATA, else ../shared/data beside the checkout."""
    if env := os.environ.get("ONDEVICE_DATA"):
        return Path(env)
    candidates = [Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[2] / "shared" / "data"]
    return next((c for c in candidates if c.is_dir()), candidates[0])


MAX_EXACT_BYTES = 64 << 20  # golden sentences are copied into a bundle: a few KB, never this much
MAX_LINE_CHARS = 10_000  # a sentence is far shorter; longer lines are cut (the teacher reads ~256 word pieces)


def _checked_file(path: str | Path, flag: str) -> tuple[Path, str]:
    """`path` as a file to read, and the name errors call it by; a folder or a missing file is a one-line error."""
    path = Path(path)
    what = "corpus" if flag == "--corpus" else flag
    if path.is_dir():
        raise OndeviceError(f"{what} {path} is a folder; pass {flag} FILE (one sentence per line, .gz allowed)")
    if path.exists() and not path.is_file():  # a FIFO would block forever, /dev/zero never ends
        raise OndeviceError(f"{what} {path} is not a regular file (a pipe or device); pass {flag} FILE (one sentence "
                            "per line, .gz allowed)")
    if not path.is_file():
        raise OndeviceError(f"{what} not found: {path}; pass {flag} FILE (one sentence per line, .gz allowed)")
    return path, what


MAX_GZIP_RATIO = 100  # text compresses 3-5x; a file that inflates 100x is a bomb (2 MB -> 2 GB of empty lines)
GZIP_SLACK = 64 << 20  # small files may inflate more: they are allowed this much whatever their ratio


class _Bounded(io.RawIOBase):
    """A gunzipped stream that stops with a one-line error past `limit` inflated bytes."""

    def __init__(self, inner, limit: int, path: Path):
        self.inner, self.limit, self.path, self.count = inner, limit, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.inner.read(len(b))
        self.count += len(data)
        if self.count > self.limit:
            raise OndeviceError(f"{self.path} inflates to more than {self.limit >> 20} MB ({MAX_GZIP_RATIO}x its "
                                "size and more): not a text corpus; decompress it yourself if it really is one")
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def _open_bytes(path: Path):
    """The file's bytes as a stream: gunzipped (at most MAX_GZIP_RATIO times its size) when it starts with the gzip
    magic."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    if not gz:
        return open(path, "rb")
    limit = MAX_GZIP_RATIO * path.stat().st_size + GZIP_SLACK
    return io.BufferedReader(_Bounded(gzip.open(path, "rb"), limit, path), 1 << 16)


def _read_error(what: str, path: Path, exc: BaseException) -> OndeviceError:
    """The one line for a file that cannot be read: truncated or corrupt gzip (zlib.error), an OS error."""
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return OndeviceError(f"cannot read {what} {path}: {reason}; check the file is complete")


def iter_lines(path: str | Path, flag: str = "--corpus") -> Iterator[str]:
    """Yield stripped, non-empty lines of a text or .gz file, each cut to MAX_LINE_CHARS characters; errors name
    `flag`, the option that gave the file."""
    path, what = _checked_file(path, flag)
    try:
        with _open_bytes(path) as fh, io.TextIOWrapper(fh, encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(_bounded_lines(text), 1):
                if "\0" in line:
                    raise OndeviceError(f"{what} {path} line {number} holds a NUL byte: it is a binary file, "
                                        "not text; give one sentence per line (UTF-8, .gz allowed)")
                line = line.strip()
                if line:
                    yield line
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; corrupt deflate data a zlib.error
        raise _read_error(what, path, exc) from None


def read_exact_lines(path: str | Path, flag: str) -> list[str]:
    """Every non-blank line of a small UTF-8 text or .gz file exactly as written (not stripped, cut or checked for
    NUL): for text whose every character matters, such as golden sentences. Text that is not UTF-8 is an error,
    not read with replacement characters; so are a corrupt gzip file and one without a sentence."""
    path, what = _checked_file(path, flag)
    try:
        with _open_bytes(path) as fh:
            text = fh.read(MAX_EXACT_BYTES + 1)
            if len(text) > MAX_EXACT_BYTES:
                raise OndeviceError(f"{what} {path} holds more than {MAX_EXACT_BYTES >> 20} MB of text; give fewer sentences")
            text = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OndeviceError(f"{what} {path} is not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} cannot be "
                            "decoded); convert it to UTF-8") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _read_error(what, path, exc) from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise OndeviceError(f"{what} {path} has no sentences; give a file with one sentence per line")
    return lines


def _bounded_lines(text: io.TextIOBase) -> Iterator[str]:
    """Lines cut to MAX_LINE_CHARS without ever holding a longer line in memory (a binary file may have none)."""
    while True:
        line = text.readline(MAX_LINE_CHARS)
        if not line:
            return
        if not line.endswith("\n"):  # cut: skip the rest of this line
            while (rest := text.readline(1 << 16)) and not rest.endswith("\n"):
                pass
        yield line


def read_corpus(paths: str | Path | Sequence[str | Path], limit: int | None = None,
                exclude: Collection[str] = (), flag: str = "--corpus") -> list[str]:
    """Read up to `limit` sentences from one file or several (in order), skipping any line in `exclude`; errors
    name `flag`, the option that gave the files."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise OndeviceError(f"the number of sentences to read must be >= 1, got {limit!r}")
    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not files:
        raise OndeviceError(f"no corpus given; pass {flag} FILE [FILE ...]")
    out: list[str] = []
    for path in files:
        for line in iter_lines(path, flag):
            if limit is not None and len(out) >= limit:
                break
            if line not in exclude:
                out.append(line)
    if not out:
        names = ", ".join(str(f) for f in files)
        raise OndeviceError(f"{'corpus' if flag == '--corpus' else flag} {names} has no sentences; give a file with "
                            "one sentence per line")
    return out
