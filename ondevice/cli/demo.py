"""ondevice demo: the main job on built-in defaults, end to end, with the result printed."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

HELP = "distill the packaged teacher on the first N Wikipedia sentences and print STS-B Spearman of teacher and student"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default=None, help="sentences, one per line (default: <data>/wiki/wiki_en_sentences_1m.txt.gz)")
    p.add_argument("--data", default=None, help="data folder with stsb/ (default: $ONDEVICE_DATA or ../shared/data)")
    p.add_argument("--sentences", type=int, default=20000, help="first N corpus sentences to distill on")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--out", default=None, help="student dir (default: <cache>/demo/student-N)")
    p.add_argument("--seed", type=int, default=0)


def run(a: argparse.Namespace) -> int:
    from ondevice.corpus import WIKI_RELPATH, default_data_dir
    from ondevice.distill import CHECKPOINT, DistillConfig, distill
    from ondevice.errors import OndeviceError
    from ondevice.eval import sts_spearman
    from ondevice.io import cache_dir
    from ondevice.teacher import Teacher

    data = Path(a.data) if a.data else default_data_dir()
    corpus = Path(a.corpus) if a.corpus else data / WIKI_RELPATH
    if not corpus.is_file():
        raise OndeviceError(f"demo corpus not found at {corpus}; pass --corpus FILE (one sentence per line) "
                            "or --data DIR holding wiki/wiki_en_sentences_1m.txt.gz")
    if not (data / "stsb").is_dir():
        raise OndeviceError(f"STS-B not found in {data}/stsb; pass --data DIR (the folder holding stsb/)")
    out = Path(a.out) if a.out else cache_dir() / "demo" / f"student-{a.sentences}-seed{a.seed}"
    config = DistillConfig(corpus=str(corpus), max_sentences=a.sentences, epochs=a.epochs, seed=a.seed)
    start = time.monotonic()
    # Rerunning the demo continues (or reuses) the same run instead of refusing to touch it.
    student = distill(config, out, resume=(out / CHECKPOINT).exists())
    minutes = (time.monotonic() - start) / 60
    teacher = Teacher(config.teacher, pooling=config.teacher_pooling)
    t_score = sts_spearman(teacher, data, "stsb", "test")
    s_score = sts_spearman(student, data, "stsb", "test")
    log = (out / "train_log.jsonl").read_text().strip().splitlines()
    held = json.loads(log[-1])["held_out_cosine"] if log else float("nan")
    print()
    print(f"distilled {config.teacher} into a BiLSTM student on {a.sentences:,} sentences -> {out} "
          f"({minutes:.1f} min this run; reruns reuse cached teacher vectors and finished epochs)")
    print(f"  student parameters: {student.num_parameters():,} ({student.num_parameters(embeddings=False):,} without embeddings)")
    print(f"  held-out mean cosine student-to-teacher: {held:.4f}")
    print(f"  STS-B test Spearman x100: teacher {t_score:.2f} | student {s_score:.2f} "
          f"({s_score / t_score:.1%} of the teacher)")
    return 0
