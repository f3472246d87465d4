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


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_inside_each_document_reach_a_heading() -> None:
    for doc in _tables().DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # a '#' line in a code block is no heading
        anchors: set[str] = set()
        for heading in re.findall(r"^#{1,6} (.+)$", prose, flags=re.MULTILINE):
            slug, n = _slug(heading), 1
            while slug in anchors:  # GitHub numbers repeated headings: x, x-1, x-2
                slug, n = f"{_slug(heading)}-{n}", n + 1
            anchors.add(slug)
        links = set(re.findall(r"\]\(#([^)\s]+)\)", prose))
        assert links or doc != "README.md"
        missing = sorted(link for link in links if link not in anchors)
        assert not missing, f"{doc} links to headings it does not have: {missing}"


def test_links_to_files_reach_files() -> None:
    for doc in _tables().DOCS:
        path = ROOT / doc
        prose = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
        targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", prose)
                   if not t.startswith(("#", "http://", "https://", "mailto:"))}
        missing = sorted(t for t in targets if not (path.parent / t).exists())
        assert not missing, f"{doc} links to files that do not exist: {missing}"
