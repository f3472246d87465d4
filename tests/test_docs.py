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


# --- The front door's rules: short pages, no lab-notebook words, no machine's paths -----------------------------

# Records of a run on some machine (they keep the command line and paths as run); everything else is product.
_RECORDS = re.compile(r"^(benchmarks/results/|docs/results/(.*/)?(report\.json|report\.md|unpacked\.json)$"
                      r"|tests/test_docs\.py$)")
# Generated from a manifest (a bundle's model card): checked for process words and paths, not for line length
_GENERATED = re.compile(r"^ondevice/pretrained/[^/]+/README\.md$")
_BINARY = (".png", ".onnx", ".npy", ".safetensors", ".gz", ".jar", ".bin", ".zip", ".ico", ".jpg", ".webp", ".wasm")
# "session 52", "round 1", "issue 16", "paper 003" name steps of our own work; another project's issue may be named
_PROCESS = re.compile(r"(?<!numba )(?<!faiss )(?<!onnxruntime )(?<!pytorch )\b([Ss]ession|[Rr]ound|[Ii]ssue) #?\d+\b"
                      r"|\b[Pp]aper 00\d\b")
_MACHINE_PATH = re.compile(r"(?<![\w.])/(work|root|home/[a-z][\w-]*)/")


def _tracked() -> list[str]:
    import subprocess

    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    if not out:  # not a git checkout (an exported source tree): every file but the build outputs
        skip = {".venv", "node_modules", ".git", "build", "site"}
        return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file() and skip.isdisjoint(p.parts)]
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def test_readme_is_short_and_every_page_fits() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300 and len(readme.encode()) <= 30_000, "README.md: at most 300 lines, 30 KB"
    pages = [f for f in _tracked() if f.endswith(".md") and not _RECORDS.match(f)]
    prose_pages = [f for f in pages if not _GENERATED.match(f)]
    big = sorted(f"{f} ({(ROOT / f).stat().st_size:,} B)" for f in pages if (ROOT / f).stat().st_size > 40_000)
    assert not big, f"Markdown pages over 40 KB: {big}"
    long_lines = []
    for f in prose_pages:
        prose = re.sub(r"```.*?```", "", (ROOT / f).read_text(encoding="utf-8"), flags=re.DOTALL)
        prose = re.sub(r"<!-- results: [^>]*-->\n.*?<!-- /results -->", "", prose, flags=re.DOTALL)  # generated
        long_lines += [f"{f}: {line[:60]}..." for line in prose.splitlines()
                       if len(line) > 200 and not line.lstrip().startswith("|")]
    assert not long_lines, f"prose lines over 200 characters: {long_lines[:10]}"


def test_no_process_words_and_no_machine_paths() -> None:
    found = []
    for f in _tracked():
        if _RECORDS.match(f) or f.endswith(_BINARY):
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _PROCESS.search(line) or _MACHINE_PATH.search(line):
                found.append(f"{f}:{n}: {line.strip()[:100]}")
    assert not found, f"{len(found)} lines name our work process or a machine's path: {found[:15]}"


def test_the_rules_catch_what_they_are_for() -> None:
    assert _PROCESS.search("## QQP (session 67, 2026-11-29)") and _PROCESS.search("the issue 16 target")
    assert _PROCESS.search("paper 004 §3.2") and _PROCESS.search("Round 1's student")
    assert not _PROCESS.search("numba issue 10486") and not _PROCESS.search("rounded to 7 bits")
    assert _MACHINE_PATH.search("/work/main/.venv/bin/python") and _MACHINE_PATH.search("see /root/.cache/x")
    assert not _MACHINE_PATH.search("~/.cache/ondevice") and not _MACHINE_PATH.search("the work/ folder")
