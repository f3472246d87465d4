"""Student recipe ablation: each variant distills its own student on the same sentences, epochs and seed.

    .venv/bin/python benchmarks/distill_ablation.py --sentences 20000 --epochs 2 --train-splits \
        --teacher-backend onnx-int8 --variants word_vectors=glove-6b-50d word_vectors=teacher \
        word_vectors=teacher,pooling=max word_vectors=random word_vectors=teacher,embedding_dim=100

A variant is comma-separated `field=value` overrides of `DistillConfig` (an empty variant is the base config).
Teacher vectors are shared through the teacher cache. Each finished row is written at once to this run's results
file, `benchmarks/results/distill_ablation-<UTC time>.json` (never overwritten): held-out cosine to the training
teacher, STS-B dev and test and SICK-R test Spearman x100, training minutes and parameters. Choose on dev.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ondevice import layouts
from ondevice.corpus import WIKI_RELPATH, default_data_dir
from ondevice.distill import DistillConfig, distill
from ondevice.eval import sts_spearman
from ondevice.io import cache_dir, sha256_text, write_record
from ondevice.results import results_path, run_metadata


def parse_variant(text: str) -> dict:
    """'a=1,b=x' -> {'a': 1, 'b': 'x'}, typed by the DistillConfig field."""
    types = {name: f.type for name, f in DistillConfig.flat_fields().items()}
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"unknown DistillConfig field {key!r} in variant {text!r}")
        kind = str(types[key])
        out[key] = (int(value) if kind.startswith("int") else float(value) if kind.startswith("float")
                    else value.lower() in ("1", "true", "yes") if kind.startswith("bool") else value)
    return out


def snli(student, data: Path, queries: int, seed: int) -> dict:
    """{"snli_top10_vs_teacher": %} as distill_quality.py measures it (the teacher's vectors come from the cache)."""
    if not queries:
        return {}
    from distill_quality import CachedTeacher, retrieval_overlap

    from ondevice.teacher import Teacher

    enc = {"teacher": CachedTeacher(Teacher("all-MiniLM-L6-v2")), "student": student}
    return {"snli_top10_vs_teacher": retrieval_overlap(enc, data, "teacher", queries, 10, seed)["student"],
            "snli_queries": queries}


def evaluate(student, data: Path) -> dict:
    """Spearman x100 of cosine on STS-B dev/test and SICK-R test (the trial split)."""
    return {"stsb_dev": round(sts_spearman(student, data, "stsb", "dev"), 2),
            "stsb_test": round(sts_spearman(student, data, "stsb", "test"), 2),
            "sickr_test": round(sts_spearman(student, data, "sick", "trial"), 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-splits", action="store_true", help="STS-B train sentences in front of the corpus")
    p.add_argument("--teacher-backend", default="onnx-int8")
    p.add_argument("--variants", nargs="+", default=["", "word_vectors=teacher"])
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--snli-queries", type=int, default=0,
                   help="also the SNLI retrieval row of distill_quality.py: %% of the fp32 teacher's cosine top-10 each "
                        "student's cosine top-10 recovers, over this many seeded queries (0 = off)")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    out_path = results_path("distill_ablation")
    result = {**run_metadata(a.threads), "rows": []}
    for variant in a.variants:
        cfg = DistillConfig(corpus=str(a.data / WIKI_RELPATH), max_sentences=a.sentences, epochs=a.epochs,
                            train_splits=a.train_splits, teacher_backend=a.teacher_backend, seed=a.seed,
                            threads=a.threads, **parse_variant(variant))
        tag = sha256_text([json.dumps(cfg.to_dict(), sort_keys=True)])[:12]  # the flat layout: tags of earlier runs hold
        out = cache_dir() / "ablation" / f"{a.sentences // 1000}k-{tag}"
        start = time.monotonic()
        student = distill(cfg, out, resume=(out / layouts.CHECKPOINT).exists(), progress=False)
        log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
        row = {"variant": variant or "(base)", "config": cfg, "student_dir": str(out),
               "held_out_cosine": log[-1]["held_out_cosine"], "held_out_cosine_per_epoch": [e["held_out_cosine"] for e in log],
               **evaluate(student, a.data), **snli(student, a.data, a.snli_queries, a.seed), "train_minutes_this_run": round((time.monotonic() - start) / 60, 2),
               "params_without_embeddings": student.num_parameters(embeddings=False),
               "params": student.num_parameters()}
        result["rows"].append(row)
        write_record(out_path, result)  # each finished row lands at once
        print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
    print(f"\nresults: {out_path}\n")
    print(markdown({**result, "path": out_path}))
    return 0


def markdown(result: dict) -> str:
    """The README table of one ablation run (the renderer of benchmarks/tables.py)."""
    from tables import distill_ablation

    return distill_ablation(str(result["path"]))


if __name__ == "__main__":
    sys.exit(main())
