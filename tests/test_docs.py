"""The documents with marked tables (benchmarks/tables.py DOCS): every marked table equals what its results files
give, and every results file the documents cite exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tables():
    spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_marked_tables_match_their_results_files() -> None:
    tables = _tables()
    for doc in tables.DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        blocks = list(tables.BLOCK.finditer(text))
        assert blocks, f"{doc} has no generated tables"
        for m in blocks:
            name, *args = m.group("spec").split()
            expected = tables.RENDERERS[name](*args).rstrip("\n") + "\n"
            assert m.group("body") == expected, f"{doc}: the {name} table differs from {args}; run `make tables`"


def test_cited_results_files_exist() -> None:
    for doc in _tables().DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        cited = set(re.findall(r"(?:benchmarks/results|docs/results)/[\w./-]+\.(?:json|md|png|log)", text))
        assert cited, doc
        missing = sorted(c for c in cited if "*" not in c and not (ROOT / c).is_file())
        assert not missing, f"{doc} cites missing files: {missing}"
