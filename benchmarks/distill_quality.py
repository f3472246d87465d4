"""Distillation quality and speed, one run: student vs teacher vs GloVe average on STS-B, and encode throughput.

    .venv/bin/python benchmarks/distill_quality.py --sentences 100000 --epochs 6

Distills (or resumes) a student on the first N Wikipedia sentences, then reports held-out mean cosine
student-to-teacher, STS-B test Spearman x100 (cosine) for teacher, student and the GloVe-50 average baseline,
student parameters with and without embeddings, and sentences/s of the teacher, the student in torch and the
student as an app runs it (int8 bundle, torch-free runtime) on the same sentences
and threads (interleaved repeats, median). Targets: student >= 0.90 x teacher Spearman, >= 20x teacher speed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from ondevice.corpus import WIKI_RELPATH, default_data_dir
from ondevice.distill import CHECKPOINT, DistillConfig, distill
from ondevice.eval import glove_average_encoder, sts_spearman
from ondevice.eval.data import read_stsb
from ondevice.io import cache_dir, write_json
from ondevice.teacher import Teacher


def throughput(encode, texts: list[str], repeats: int) -> list[float]:
    """Sentences per second of `encode(texts)` for each repeat."""
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        encode(texts)
        out.append(len(texts) / (time.perf_counter() - start))
    return out


def exported_int8(student, student_dir: Path, threads: int):
    """The student exported as an int8 bundle (threshold codes: no fitting needed), loaded by the runtime."""
    import numpy as np
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer
    from ondevice.runtime import Bundle

    folder = student_dir.parent / f"{student_dir.name}-bundle-int8"
    if not (folder / "manifest.json").is_file():
        binarizer = Binarizer.fit(np.zeros((2, student.dim), dtype=np.float32), method="threshold", bits=student.dim)
        export(student, binarizer, folder, ExportConfig(precision="int8"), student_dir=student_dir)
    return Bundle.load(folder, threads=threads)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100000)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--hidden", type=int, default=DistillConfig(corpus="").hidden_size)
    p.add_argument("--pooling", default=DistillConfig(corpus="").pooling)
    p.add_argument("--batch-size", type=int, default=DistillConfig(corpus="").batch_size)
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--out", type=Path, default=None, help="student dir (default: <cache>/bench/student-<N>)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--speed-sentences", type=int, default=2000, help="STS-B sentences timed for throughput")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    out = a.out or cache_dir() / "bench" / f"student-{a.sentences // 1000}k"
    cfg = DistillConfig(corpus=str(a.data / WIKI_RELPATH), max_sentences=a.sentences, epochs=a.epochs,
                        hidden_size=a.hidden, pooling=a.pooling, batch_size=a.batch_size, seed=a.seed, threads=a.threads)
    t0 = time.monotonic()
    student = distill(cfg, out, resume=(out / CHECKPOINT).exists())
    train_min = (time.monotonic() - t0) / 60
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]

    teacher = Teacher(cfg.teacher, pooling=cfg.teacher_pooling)
    glove = glove_average_encoder()
    scores = {name: sts_spearman(enc, a.data, "stsb", "test") for name, enc in
              (("teacher", teacher), ("student", student), ("glove-50 average", glove))}

    pairs = read_stsb(a.data, "test")
    texts = list(dict.fromkeys(pairs.a + pairs.b))[: a.speed_sentences]
    # The student as an app runs it: the exported int8 bundle through the torch-free runtime.
    bundle = exported_int8(student, out, a.threads)
    student.encode(texts[:64]), teacher.encode(texts[:64]), bundle.encode(texts[:64])  # warm-up
    t_speed, s_speed, b_speed = [], [], []
    for _ in range(a.repeats):  # interleaved, so machine noise hits all alike
        t_speed += throughput(lambda x: teacher.encode(x, batch_size=64), texts, 1)
        s_speed += throughput(lambda x: student.encode(x, batch_size=256), texts, 1)
        b_speed += throughput(lambda x: bundle.encode(x, batch_size=64), texts, 1)
    t_med, s_med, b_med = (statistics.median(x) for x in (t_speed, s_speed, b_speed))

    result = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": a.threads},
        "config": cfg, "student_dir": str(out), "train_minutes_this_run": round(train_min, 2), "train_log": log,
        "held_out_cosine": log[-1]["held_out_cosine"],
        "stsb_test_spearman_x100": {k: round(v, 2) for k, v in scores.items()},
        "student_over_teacher_spearman": round(scores["student"] / scores["teacher"], 4),
        "student_parameters": student.num_parameters(),
        "student_parameters_without_embeddings": student.num_parameters(embeddings=False),
        "sentences_per_second": {"teacher": round(t_med, 1), "student": round(s_med, 1),
                                 "student int8 bundle": round(b_med, 1)},
        "student_over_teacher_speed": round(s_med / t_med, 2),
        "student_int8_bundle_over_teacher_speed": round(b_med / t_med, 2),
        "speed_sentences": len(texts),
    }
    if a.json:
        write_json(a.json, result)
    sp = result["stsb_test_spearman_x100"]
    print("\n| measure | value |\n|---|---|")
    print(f"| corpus | first {a.sentences:,} wiki sentences, {a.epochs} epochs, hidden {a.hidden}, pooling {a.pooling} |")
    print(f"| held-out mean cosine student-to-teacher | {result['held_out_cosine']:.4f} |")
    print(f"| STS-B test Spearman x100: teacher / student / GloVe-50 avg | {sp['teacher']:.2f} / {sp['student']:.2f} / {sp['glove-50 average']:.2f} |")
    print(f"| student / teacher Spearman (target >= 0.90) | {result['student_over_teacher_spearman']:.3f} |")
    print(f"| student parameters (without embeddings) | {result['student_parameters']:,} ({result['student_parameters_without_embeddings']:,}) |")
    print(f"| sentences/s on {a.threads} threads: teacher (torch) / student (torch) / student (int8 bundle) "
          f"| {t_med:,.0f} / {s_med:,.0f} / {b_med:,.0f} |")
    print(f"| student / teacher throughput, torch / int8 bundle (target >= 20x) "
          f"| {result['student_over_teacher_speed']:.1f}x / {result['student_int8_bundle_over_teacher_speed']:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
