"""Read a sentence corpus: one sentence per line, plain or gzip, UTF-8."""

from __future__ import annotations

import gzip
import io
import os
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


MAX_LINE_CHARS = 10_000  # a sentence is far shorter; longer lines are cut (the teacher reads ~256 word pieces)


def iter_lines(path: str | Path) -> Iterator[str]:
    """Yield stripped, non-empty lines of a text or .gz file, each cut to MAX_LINE_CHARS characters."""
    path = Path(path)
    if not path.is_file():
        raise OndeviceError(f"corpus not found: {path}; pass --corpus FILE (one sentence per line, .gz allowed)")
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    try:
        with opener(path, "rb") as fh, io.TextIOWrapper(fh, encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(_bounded_lines(text), 1):
                if "\0" in line:
                    raise OndeviceError(f"corpus {path} line {number} holds a NUL byte: it is a binary file, "
                                        "not text; give one sentence per line (UTF-8, .gz allowed)")
                line = line.strip()
                if line:
                    yield line
    except (OSError, EOFError) as exc:
        raise OndeviceError(f"cannot read corpus {path}: {exc}; check the file is complete") from None


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
                exclude: Collection[str] = ()) -> list[str]:
    """Read up to `limit` sentences from one file or several (in order), skipping any line in `exclude`."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise OndeviceError(f"the number of sentences to read must be >= 1, got {limit!r}")
    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not files:
        raise OndeviceError("no corpus given; pass --corpus FILE [FILE ...]")
    out: list[str] = []
    for path in files:
        for line in iter_lines(path):
            if limit is not None and len(out) >= limit:
                break
            if line not in exclude:
                out.append(line)
    if not out:
        names = ", ".join(str(f) for f in files)
        raise OndeviceError(f"corpus {names} has no sentences; give a file with one sentence per line")
    return out
