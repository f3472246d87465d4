"""PNG plots of a report (matplotlib, Agg backend): quality vs bits, vs encode speed, vs size."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ondevice._deps import require
from ondevice.eval.tasks import TASKS, transfer_average
from ondevice.io import atomic_path

Metric = tuple[str, Callable[[dict], float | None]]


def _get(task: str, key: str) -> Callable[[dict], float | None]:
    return lambda res: (res.get(task) or {}).get(key)


def metrics_of(report: dict[str, Any]) -> list[Metric]:
    """(label, getter) for every headline quality number the report has."""
    ran = [t for t in report["tasks"] if t not in report["skipped"]]
    out: list[Metric] = []
    for t in ran:
        if TASKS[t].group == "similarity":
            out.append((f"{TASKS[t].title} Spearman ×100", _get(t, "spearman")))
    if any(TASKS[t].group == "transfer" for t in ran):
        out.append(("transfer avg acc", transfer_average))
    if "retrieval" in ran:
        out.append(("R@10 of codes vs own float", _get("retrieval", "recall_vs_float")))
    return out


def _primary(report: dict[str, Any]) -> Metric | None:
    ms = metrics_of(report)
    return next((m for m in ms if m[0].startswith("STS-B test")), ms[0] if ms else None)


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    return path


def plot_bits(report: dict[str, Any], path: Path) -> Path | None:
    """Quality vs code bits: one panel per (encoder, metric), one line per binarization method, and the
    encoder's float vectors as a dashed line (the shape of Shen et al.'s Figure 3)."""
    plt = require("matplotlib.pyplot", "eval")
    views, results = report["views"], report["results"]
    binary = {n: m for n, m in views.items() if m["binary"]}
    if not binary:
        return None
    metrics = [m for m in metrics_of(report) if any(m[1](results[n]) is not None for n in binary)]
    if not metrics:
        return None
    groups: dict[str, dict[str, list[str]]] = {}
    for n, m in binary.items():
        groups.setdefault(m["encoder"], {}).setdefault(m["method"], []).append(n)
    encoders = sorted(groups)
    fig, axes = plt.subplots(len(metrics), len(encoders), figsize=(4.4 * len(encoders), 3.0 * len(metrics)),
                             squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    methods = sorted({m for g in groups.values() for m in g})
    for row, (label, get) in enumerate(metrics):
        for col, enc in enumerate(encoders):
            ax = axes[row][col]
            for method, names in sorted(groups[enc].items()):
                pts = sorted((views[n]["dim"], get(results[n])) for n in names if get(results[n]) is not None)
                if pts:
                    mi = methods.index(method)
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colors[mi % len(colors)], marker="o",
                            label=method)
            flo = get(results[enc]) if enc in results else None
            if flo is not None:
                ax.axhline(flo, color="k", linewidth=1, linestyle="--", label="float vectors")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bits per code")
            ax.set_ylabel(label, fontsize=9)
            ax.set_title(enc, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("quality vs bits per binarization method", fontsize=10)
    _save(fig, path)
    plt.close(fig)
    return path


def _scatter(report: dict[str, Any], path: Path, panels: list[tuple[str, Callable[[dict], float | None]]], title: str) -> Path | None:
    plt = require("matplotlib.pyplot", "eval")
    primary = _primary(report)
    if primary is None:
        return None
    label, get = primary
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False)
    any_point = False
    for ax, (xlabel, xget) in zip(axes[0], panels):
        xs = []
        for name, meta in report["views"].items():
            x, y = xget(meta), get(report["results"][name])
            if x is None or y is None or math.isnan(x):
                continue
            any_point = True
            xs.append(x)
            ax.scatter([x], [y], marker="s" if meta["binary"] else "o")
            ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        if xs and max(xs) > 10 * min(xs):  # a log axis only when the values span more than 10x
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    if any_point:
        _save(fig, path)
    plt.close(fig)
    return path if any_point else None


def write_plots(report: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """quality_vs_bits.png (when codes were evaluated), quality_vs_speed.png, quality_vs_size.png."""
    require("matplotlib", "eval").use("Agg")
    out = Path(out_dir)
    made = [
        plot_bits(report, out / "quality_vs_bits.png"),
        _scatter(report, out / "quality_vs_speed.png",
                 [("encode speed, sentences/s", lambda m: m.get("sentences_per_second"))],
                 "quality vs encode speed (circles: floats, squares: codes)"),
        _scatter(report, out / "quality_vs_size.png",
                 [("bytes per sentence", lambda m: m["bytes_per_sentence"] or None),
                  ("model size on disk, MB", lambda m: m["model_bytes"] / 2**20 or None)],
                 "quality vs size (circles: floats, squares: codes)"),
    ]
    return [p for p in made if p is not None]
