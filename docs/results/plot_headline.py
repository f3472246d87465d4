"""Draw docs/results/headline.png: quality against encode speed for the teacher, the shipped int8 bundle and model2vec.

Reads three committed results files, nothing else:

- benchmarks/results/distill_quality-20261123T102242Z.json (benchmarks/distill_quality.py): STS-B test Spearman x100
  and sentences/s of every encoder, measured in one run on the same 500 STS-B sentences, one thread;
- benchmarks/results/make_pretrained-20261123T111643Z.json (benchmarks/make_pretrained.py): the size of the int8
  bundle that run measured;
- benchmarks/results/bundle-20261123T122050Z.json (benchmarks/bundle.py): the size of the fp32 ONNX teacher.

No results file records model2vec's size, so its point carries no size. Run from the checkout:

    .venv/bin/python docs/results/plot_headline.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[2]
QUALITY = "benchmarks/results/distill_quality-20261123T102242Z.json"
BUNDLE_SIZE = "benchmarks/results/make_pretrained-20261123T111643Z.json"
TEACHER_SIZE = "benchmarks/results/bundle-20261123T122050Z.json"
OUT = ROOT / "docs" / "results" / "headline.png"


def _load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def points() -> list[dict]:
    """(name, STS-B test, sentences/s, MB or None) of the three encoders, straight from the files."""
    q = _load(QUALITY)
    scores, speed = q["scores_x100"], q["sentences_per_second"]
    bundle_mb = _load(BUNDLE_SIZE)["bytes"] / 1e6
    teacher_mb = _load(TEACHER_SIZE)["results"]["sizes"]["teacher fp32 (onnxruntime)"] / 1e6
    return [
        {"name": "teacher: all-MiniLM-L6-v2, fp32", "score": scores["teacher"]["stsb_test"],
         "speed": speed["teacher torch"], "mb": teacher_mb, "color": "#7f7f7f", "offset": (45, -6), "ha": "left"},
        {"name": "ondevice: the shipped int8 bundle", "score": scores["student int8 bundle"]["stsb_test"],
         "speed": speed["student int8 bundle"], "mb": bundle_mb, "color": "#d62728", "offset": (0, -34), "ha": "center"},
        {"name": "model2vec from the same teacher", "score": scores["model2vec"]["stsb_test"],
         "speed": speed["model2vec"], "mb": None, "color": "#1f77b4", "offset": (8, 14), "ha": "right"},
    ]


def main() -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=120)
    for p in points():
        area = 60 if p["mb"] is None else 25 * p["mb"]  # marker area proportional to the size on disk
        size = "size not recorded" if p["mb"] is None else f"{p['mb']:.2f} MB"
        ax.scatter(p["speed"], p["score"], s=area, color=p["color"], alpha=0.7, edgecolors="black", linewidths=0.6,
                   zorder=3)
        ax.annotate(f"{p['name']}\nSTS-B {p['score']:.2f}, {p['speed']:,.0f} sentences/s, {size}",
                    (p["speed"], p["score"]), textcoords="offset points", xytext=p["offset"],
                    ha=p["ha"], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(80, 200_000)
    ax.set_ylim(60, 86)
    ax.set_xlabel("encode speed, sentences/s (1 thread, log scale)")
    ax.set_ylabel("STS-B test Spearman x100")
    ax.set_title("Quality against speed; marker area is the size on disk", fontsize=10)
    ax.grid(True, which="both", alpha=0.3, zorder=0)
    fig.text(0.01, 0.01, f"from {QUALITY}", fontsize=6, color="#555555")
    fig.tight_layout()
    fig.savefig(OUT)
    plt.close(fig)
    return OUT


if __name__ == "__main__":
    print(main())
