"""Autoencoder codes epoch by epoch: what they keep of the student's similarity order vs what STS-B dev sees.

    .venv/bin/python benchmarks/binarize_epochs.py --bundle pretrained --bits 64 256 --epochs 8

For each width: the random and PCA codes, then the autoencoder (`--method ae` or `ae-sp`; `--hyper` sets its
options, default init "auto"; select is always "last", each epoch's own codes) after each epoch (one training run,
continued epoch by epoch through its checkpoint). Every row has the STS-B dev Spearman of the codes and three
measures on held-out vectors of the fit corpus (never trained on): the Spearman between cosine and Hamming
similarity over neighbour-to-stranger pairs (`holdout_order`, the autoencoder's select "holdout" criterion), the
same averaged per anchor, and the Hamming top-10 recall of each anchor's cosine top-10; with --teacher-recall also
of the packaged teacher's cosine top-10 (the neighbours a semantic search should find). Dev split only: this is for
choosing, not reporting. Writes one results JSON (benchmarks/results/binarize_epochs-*.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import numpy as np
from binarize_quality import bundle_vectors, fit_corpus, hamming_score

from ondevice.binarize import Binarizer
from ondevice.binarize_ae import holdout_order, order_pairs
from ondevice.bits import unpack
from ondevice.corpus import default_data_dir
from ondevice.eval.data import read_stsb
from ondevice.eval.metrics import spearman
from ondevice.results import start_run, write_result

TOP = 10


def top10_recall(bits01: np.ndarray, ref: np.ndarray, anchors: np.ndarray) -> float:
    """Mean over anchors of |Hamming top-10 & cosine top-10 of `ref`| / 10 (ref: the same rows' reference vectors)."""
    vn = ref / np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-12)
    pm = bits01.astype(np.float32) * 2 - 1  # Hamming = (bits - <pm_i, pm_j>) / 2
    recall = []
    for chunk in np.array_split(anchors, max(1, len(anchors) // 250)):
        cs = vn[chunk] @ vn.T
        hs = pm[chunk] @ pm.T  # larger = closer
        cs[np.arange(len(chunk)), chunk] = -np.inf
        hs[np.arange(len(chunk)), chunk] = -np.inf
        true = np.argsort(-cs, axis=1)[:, :TOP]
        # ties at the Hamming cut are broken by the cosine-free row order, as an index would
        found = np.argsort(-hs, axis=1, kind="stable")[:, :TOP]
        recall += [len(set(t) & set(f)) / TOP for t, f in zip(true, found)]
    return round(float(np.mean(recall)), 4)


def held_out_measures(bits01: np.ndarray, val: np.ndarray, pairs: tuple, teacher: np.ndarray | None) -> dict:
    """holdout_order, its per-anchor mean, Hamming top-10 recall of the student's cosine top-10 (anchors = pair
    anchors) and, given the teacher's vectors of the same rows, of the teacher's cosine top-10."""
    a, b, cos = pairs
    ham = (bits01[a] != bits01[b]).sum(axis=1).astype(np.float64)
    anchors = np.unique(a)
    per = [spearman(cos[a == x], -ham[a == x]) for x in anchors[:500]]
    out = {"holdout_order": round(holdout_order(bits01, pairs), 4), "per_anchor_order": round(float(np.nanmean(per)), 4),
           "top10_recall": top10_recall(bits01, val, anchors)}
    if teacher is not None:
        out["teacher_top10_recall"] = top10_recall(bits01, teacher, anchors)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default="pretrained", help="the student: a bundle folder or 'pretrained'")
    p.add_argument("--bits", nargs="+", type=int, default=[64, 256])
    p.add_argument("--method", choices=["ae", "ae-sp"], default="ae")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--train-sentences", type=int, default=100_000)
    p.add_argument("--fit-train-splits", default="stsb,sick,mrpc,qqp")
    p.add_argument("--held-out", type=int, default=5000, help="fit vectors held out for the neighbour measures")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--teacher-recall", action="store_true",
                   help="also the Hamming top-10 recall of the packaged teacher's cosine top-10 (encodes the held-out "
                        "sentences with the teacher, cached)")
    p.add_argument("--hyper", default='{"init": "auto"}',
                   help='autoencoder hyper-parameters as JSON, e.g. \'{"input": "whiten", "init": "pca"}\'')
    a = p.parse_args(argv)
    if not 10 <= a.held_out < a.train_sentences // 2:
        p.error("--held-out must be at least 10 and under half of --train-sentences")
    try:
        hyper = json.loads(a.hyper)
    except json.JSONDecodeError as exc:
        p.error(f"--hyper is not JSON ({exc.msg})")
    if not isinstance(hyper, dict) or {"epochs", "checkpoint_dir", "resume", "select"} & set(hyper):
        p.error("--hyper must be a JSON object without epochs/checkpoint_dir/resume/select (each epoch is shown)")
    meta = start_run(threads=1, split="dev", seed=a.seed, method=a.method, epochs=a.epochs,
                     fit_train_splits=a.fit_train_splits, hyper=hyper)
    data = default_data_dir()
    sts = read_stsb(data, "dev")
    n1 = len(sts.a)
    texts = fit_corpus(data, a.train_sentences, a.fit_train_splits)
    x, s, info = bundle_vectors(a.bundle, texts, sts.a + sts.b)
    x, s = np.asarray(x, np.float32), np.asarray(s, np.float32)
    perm = np.random.default_rng([a.seed, 99]).permutation(len(x))
    val, train = x[perm[: a.held_out]], x[perm[a.held_out :]]
    teacher = None
    if a.teacher_recall:  # the packaged teacher's view of the held-out sentences: the neighbours search should find
        from ondevice.teacher import Teacher, cached_vectors

        teacher = np.asarray(cached_vectors(Teacher(), [texts[i] for i in perm[: a.held_out]]), np.float32)
    pairs = order_pairs(val, a.seed)
    rows = []
    for bits in a.bits:
        def row(name: str, epoch: int | None, binarizer: Binarizer, bits: int = bits) -> None:
            r = {"bits": bits, "codes": name, "epoch": epoch,
                 "stsb_dev": hamming_score(binarizer.transform(s[:n1]), binarizer.transform(s[n1:]), sts.gold),
                 **held_out_measures(unpack(binarizer.transform(val), bits).astype(bool), val, pairs, teacher)}
            rows.append(r)
            print(r, flush=True)

        row("random", None, Binarizer.fit(train, "random", bits, seed=a.seed))
        if bits <= train.shape[1]:
            row("pca", None, Binarizer.fit(train, "pca", bits, seed=a.seed))
        with tempfile.TemporaryDirectory() as ckpt:
            for epoch in range(1, a.epochs + 1):
                ae = Binarizer.fit(train, a.method, bits, seed=a.seed, progress=False, **{"threads": 1, **hyper},
                                   select="last", epochs=epoch, checkpoint_dir=ckpt, resume=epoch > 1)
                row(a.method, epoch, ae)
    print(f"wrote {write_result('binarize_epochs', {'student': info, 'held_out': a.held_out, 'rows': rows}, meta)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
