"""Draw the README's speed plots from results files (never from numbers typed in here).

    python benchmarks/plots.py      # docs/results/hamming_scaling.png, docs/results/bundle_latency.png,
                                    # docs/results/hamming_grid.png

Hamming search time against catalog size comes from benchmarks/results/hamming_knn-20261122T025021Z.json (ondevice vs FAISS,
256-bit codes, 2 threads); bundle latency against sentence length from the newest bundle_*.json; the device-sized
grid (time vs catalog size per width, ondevice vs FAISS vs numpy, 1 and 2 threads) from the hamming_grid-*.json runs
that the `hamming_grid` tables of docs/results/search.md cite.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ondevice.results import repo_root

ROOT = repo_root()  # the checkout (not this file's folder: the tests run a copy of benchmarks/)
OUT = ROOT / "docs" / "results"


def hamming_scaling(path: Path, out: Path) -> Path:
    import matplotlib.pyplot as plt

    rows = [r for r in json.loads(path.read_text())["rows"] if r["bits"] == 256 and r["threads"] == 2]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, nq in zip(axes, (1, 100)):
        for lib, style in (("ondevice", "o-"), ("faiss", "s--")):
            pts = sorted((r["n"], r["ms"]) for r in rows if r["lib"] == lib and r["nq"] == nq)
            ax.plot(*zip(*pts), style, label=lib)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("codes in the catalog (256 bits each)")
        ax.set_ylabel("ms per search call (top-10)")
        ax.set_title(f"{nq} quer{'y' if nq == 1 else 'ies'} per call, 2 threads", fontsize=10)
        _grid_legend(ax)
    fig.suptitle(f"exact Hamming top-10 vs FAISS IndexBinaryFlat ({path.name})", fontsize=10)
    return _save(fig, out)


def bundle_latency(path: Path, out: Path) -> Path:
    import matplotlib.pyplot as plt

    blob = json.loads(path.read_text())
    rows = blob["results"]["by_length"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name in dict.fromkeys(r["name"] for r in rows):
        pts = sorted((r["tokens"], r["p50_ms"]) for r in rows if r["name"] == name)
        ax.plot(*zip(*pts), "o-", label=name)
    ax.set_xlabel("sentence length (student tokens)")
    ax.set_ylabel("p50 ms per sentence (thread CPU time)")
    ax.set_yscale("log")
    _grid_legend(ax)
    ax.set_title(f"one sentence, 1 thread ({path.name})", fontsize=9)
    return _save(fig, out)


def _grid_legend(ax) -> None:
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def _save(fig, out: Path) -> Path:
    """Lay out, write and close `fig`; returns `out`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def grid_runs() -> list[Path]:
    """The hamming_grid results files docs/results/search.md's grid tables are rendered from, oldest first (file names carry
    the run's time): a newer run of a cell is drawn over older ones, so the plot shows the latest measurement."""
    import re

    text = (ROOT / "docs" / "results" / "search.md").read_text(encoding="utf-8")
    files = {f for m in re.finditer(r"<!-- results: hamming_grid (?P<files>[^>]*?) -->", text)
             for f in m.group("files").split()}
    return [ROOT / f for f in sorted(files, key=lambda f: Path(f).name)]


def hamming_grid(paths: list[Path], out: Path) -> Path:
    """ms per query against catalog size, one panel per code width (benchmarks/hamming_knn.py's plot)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hamming_knn", Path(__file__).with_name("hamming_knn.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.plot([json.loads(p.read_text()) for p in paths], out)
    return out


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    print(hamming_scaling(a.results / "hamming_knn-20261122T025021Z.json", a.out / "hamming_scaling.png"))
    if grid_runs():
        print(hamming_grid(grid_runs(), a.out / "hamming_grid.png"))
    bundles = sorted(a.results.glob("bundle-2*.json"))
    if bundles:
        print(bundle_latency(bundles[-1], a.out / "bundle_latency.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
