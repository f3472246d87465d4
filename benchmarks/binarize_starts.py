"""Untrained codes over many seeds: the random projection against its orthogonal-row form, raw and whitened.

    .venv/bin/python benchmarks/binarize_starts.py --bundle pretrained --seeds 15

The codes every autoencoder starts from, and the `random` method itself, depend on one random draw; at 64-256 bits
their STS-B score moves by a point or more from seed to seed, so a three-seed median can sit far from the typical
draw. For each width and seed this scores four untrained projections of the same draw (`ondevice.projections`):

- `random`: the `random` method, sign((h - mean) W^T) with W ~ U(-1/sqrt(bits), 1/sqrt(bits)) (paper Eq. 2);
- `orthogonal`: the same W with its rows made orthogonal per block of the input width (`--init orthogonal`);
- `whiten-random`, `whiten-orthogonal`: both on the whitened input (`--input whiten`: the top principal components
  holding 99% of the fit vectors' variance, each at unit variance).

Each row: STS-B dev and test Spearman x100 of -Hamming, and on held-out fit vectors (never used for the mean or the
whitening) the autoencoder's held-out judge (`holdout_order`) and the Hamming top-10 recall of the cosine top-10
(the search the codes serve). Writes one results JSON (benchmarks/results/binarize_starts-*.json) with the rows and
per-(codes, bits) medians and standard deviations over the seeds.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from binarize_epochs import top10_recall
from binarize_quality import BITS, bundle_vectors, fit_corpus, spearman100

from ondevice.binarize_ae import holdout_order, order_pairs
from ondevice.corpus import default_data_dir
from ondevice.eval.data import read_stsb
from ondevice.projections import column_mean, orthogonal_rows, random_projection, whitening
from ondevice.results import start_run, write_result

CODES = ("random", "orthogonal", "whiten-random", "whiten-orthogonal")


def summarize(rows: list[dict]) -> list[dict]:
    """Median and standard deviation over the seeds of every measure, per (codes, bits)."""
    out = []
    for codes in CODES:
        for bits in sorted({r["bits"] for r in rows}):
            sel = [r for r in rows if r["codes"] == codes and r["bits"] == bits]
            if not sel:
                continue
            s = {"codes": codes, "bits": bits, "seeds": len(sel)}
            for key in ("stsb_dev", "stsb_test", "holdout_order", "top10_recall"):
                v = np.array([r[key] for r in sel], dtype=np.float64)
                s[f"{key}_median"] = round(float(np.median(v)), 4)
                s[f"{key}_sd"] = round(float(v.std()), 4)
            out.append(s)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default="pretrained", help="the student: a bundle folder or 'pretrained'")
    p.add_argument("--bits", nargs="+", type=int, default=list(BITS))
    p.add_argument("--seeds", type=int, default=15, help="seeds 0..N-1")
    p.add_argument("--train-sentences", type=int, default=100_000)
    p.add_argument("--fit-train-splits", default="stsb,sick,mrpc,qqp")
    p.add_argument("--held-out", type=int, default=5000, help="fit vectors held out for the neighbour measures")
    p.add_argument("--whiten-variance", type=float, default=0.99)
    a = p.parse_args(argv)
    if not 1 <= a.seeds <= 1000:
        p.error("--seeds must be 1..1000")
    if not 10 <= a.held_out < a.train_sentences // 2:
        p.error("--held-out must be at least 10 and under half of --train-sentences")
    meta = start_run(threads=None, seeds=a.seeds, fit_train_splits=a.fit_train_splits, held_out=a.held_out,
                     whiten_variance=a.whiten_variance)
    data = default_data_dir()
    splits = {name: read_stsb(data, name) for name in ("dev", "test")}
    texts = fit_corpus(data, a.train_sentences, a.fit_train_splits)
    sentences = [t for pairs in splits.values() for t in pairs.a + pairs.b]
    x, s, info = bundle_vectors(a.bundle, texts, sentences)  # one pass: the bundle and its cached fit vectors once
    x, s = np.asarray(x, np.float64), np.asarray(s, np.float64)
    ends = np.cumsum([2 * len(pairs.a) for pairs in splits.values()])
    sts_x = dict(zip(splits, np.split(s, ends[:-1])))
    perm = np.random.default_rng([0, 99]).permutation(len(x))  # one held-out part for every seed: seeds vary W only
    val, fit = x[perm[: a.held_out]], x[perm[a.held_out :]]
    judge = order_pairs(val.astype(np.float32), 0)
    anchors = np.unique(judge[0])
    mean = column_mean(fit)
    w_mean, T = whitening(fit, a.whiten_variance)
    # each geometry's input, prepared once: the STS-B sentences of both splits and the held-out vectors
    inputs = {prefix: {name: prepare(h) for name, h in (*sts_x.items(), ("val", val))}
              for prefix, prepare in (("", lambda h: h - mean), ("whiten-", lambda h: (h - w_mean) @ T))}
    rows = []
    for bits in a.bits:
        for seed in range(a.seeds):
            for prefix, prepared in inputs.items():
                w = random_projection(prepared["val"].shape[1], bits, seed).astype(np.float64)
                for kind, proj in (("random", w), ("orthogonal", orthogonal_rows(w).astype(np.float64))):
                    r = {"codes": prefix + kind, "bits": bits, "seed": seed}
                    for name, pairs in splits.items():
                        c = prepared[name] @ proj.T > 0
                        n = len(pairs.a)
                        r[f"stsb_{name}"] = spearman100(-(c[:n] != c[n:]).sum(axis=1).astype(np.float64), pairs.gold)
                    held = prepared["val"] @ proj.T > 0
                    r["holdout_order"] = round(holdout_order(held, judge), 4)
                    r["top10_recall"] = top10_recall(held, val.astype(np.float32), anchors)
                    rows.append(r)
            print(" | ".join(f"{r['codes']} {r['stsb_dev']:.2f}/{r['stsb_test']:.2f}" for r in rows[-4:]),
                  f"({bits} bits, seed {seed}; dev/test)", flush=True)
    summary = summarize(rows)
    for s in summary:
        print(f"{s['codes']:18s} {s['bits']:5d} dev {s['stsb_dev_median']:6.2f} (sd {s['stsb_dev_sd']:.2f}) "
              f"test {s['stsb_test_median']:6.2f} (sd {s['stsb_test_sd']:.2f}) order {s['holdout_order_median']:.4f} "
              f"top10 {s['top10_recall_median']:.4f}")
    path = write_result("binarize_starts", {"student": info, "held_out": a.held_out, "summary": summary, "rows": rows},
                        meta)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
