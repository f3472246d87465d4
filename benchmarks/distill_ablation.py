"""Student design choices side by side: pooling and hidden size, same data, same epochs, same seed.

    .venv/bin/python benchmarks/distill_ablation.py --sentences 100000 --epochs 1 \
        --variants mean:256 max:256 last:256 meanmax:256 mean:512

Each variant distills its own student (teacher vectors are shared through the cache) and reports held-out
mean cosine to the teacher, STS-B test Spearman x100, training sentences/s and encode sentences/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ondevice.corpus import WIKI_RELPATH, default_data_dir
from ondevice.distill import CHECKPOINT, DistillConfig, distill
from ondevice.eval import sts_spearman
from ondevice.eval.data import read_stsb
from ondevice.io import cache_dir, write_json


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--variants", nargs="+", default=["mean:256", "max:256", "last:256", "meanmax:256"],
                   help="POOLING:HIDDEN")
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    pairs = read_stsb(a.data, "test")
    texts = list(dict.fromkeys(pairs.a + pairs.b))
    rows = []
    for variant in a.variants:
        pooling, hidden = variant.split(":")
        cfg = DistillConfig(corpus=str(a.data / WIKI_RELPATH), max_sentences=a.sentences, epochs=a.epochs,
                            pooling=pooling, hidden_size=int(hidden), seed=a.seed, threads=a.threads)
        out = cache_dir() / "ablation" / f"{a.sentences // 1000}k-{pooling}-{hidden}-seed{a.seed}"
        start = time.monotonic()
        student = distill(cfg, out, resume=(out / CHECKPOINT).exists(), progress=False)
        minutes = (time.monotonic() - start) / 60
        log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
        t = time.perf_counter()
        student.encode(texts)
        enc = len(texts) / (time.perf_counter() - t)
        rows.append({"pooling": pooling, "hidden": int(hidden), "epochs": a.epochs,
                     "held_out_cosine": log[-1]["held_out_cosine"],
                     "stsb_test": round(sts_spearman(student, a.data, "stsb", "test"), 2),
                     "train_minutes_this_run": round(minutes, 2), "encode_sent_per_s": round(enc, 1),
                     "params_without_embeddings": student.num_parameters(embeddings=False)})
        print(json.dumps(rows[-1]), flush=True)
    if a.json:
        write_json(a.json, rows)
    print("\n| pooling | hidden | epochs | held-out cosine | STS-B test x100 | encode sent/s | params w/o emb |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pooling']} | {r['hidden']} | {r['epochs']} | {r['held_out_cosine']:.4f} | {r['stsb_test']:.2f} "
              f"| {r['encode_sent_per_s']:,.0f} | {r['params_without_embeddings']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
