"""The package's import graph (top-level and function-level imports alike) has no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Installed names of the source folders (pyproject's package-dir mapping).
PACKAGES = {"ondevice": ROOT / "ondevice", "ondevice.kernels": ROOT / "kernels", "ondevice.export": ROOT / "export"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = f
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of this package that `name` imports anywhere in its file."""
    found = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    # `if TYPE_CHECKING:` imports never run, so they cannot close a cycle.
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_no_import_cycles() -> None:
    mods = _modules()
    # A package's __init__ is imported with any of its submodules, which is not a cycle of their own making.
    graph = {m: {t for t in _imports(m, p, set(mods)) if not m.startswith(t + ".")} for m, p in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


# The core: what `ondevice.load()`, distillation, binarization and search need. Pair models are an add-on that plugs
# in through entry points (ondevice.addons), so none of these may reach ondevice.pairs, at import or in their code.
CORE = ("ondevice", "ondevice.runtime", "ondevice.distill", "ondevice.binarize", "ondevice.binarize_ae", "ondevice.index",
        "ondevice.student", "ondevice.teacher", "ondevice.kernels.hamming", "ondevice.export.bundle", "ondevice.cli")


def test_importing_the_core_loads_no_add_on() -> None:
    import subprocess
    import sys

    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "print(sorted(m for m in sys.modules if m.startswith('ondevice.pairs')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]", out.stdout


def test_core_code_names_no_add_on_module() -> None:
    """Not even inside a function: the core reaches pair models only through ondevice.addons."""
    mods = _modules()
    for name in CORE:
        if name in mods:
            reached = {t for t in _imports(name, mods[name], set(mods)) if t.startswith("ondevice.pairs")}
            assert not reached, f"{name} imports {sorted(reached)}"


def test_the_pairs_add_on_is_registered() -> None:
    from ondevice import addons

    assert set(addons.entry_points(addons.PARTS)) >= {"pair_head", "dipair"}
    assert "pairs" in addons.entry_points(addons.COMMANDS)


def test_only_the_bundle_package_writes_a_bundle_manifest() -> None:
    """Every bundle writer (export, pair heads, DiPair, migrations) seals through ondevice.bundle.manifest; the one
    other manifest.json is the sharded index's, a different artifact with its own owner (ondevice.scale.shards)."""
    import re

    owners = {"ondevice.bundle.manifest", "ondevice.scale.shards"}
    writes = re.compile(r"write_(json|text|bytes)\([^)\n]*(MANIFEST|manifest\.json)")
    found = sorted(name for name, path in _modules().items() if name not in owners and writes.search(path.read_text()))
    assert not found, f"modules writing manifest.json themselves: {found}"
    assert writes.search((PACKAGES["ondevice"] / "bundle" / "manifest.py").read_text())
