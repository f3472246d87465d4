"""Student quality and speed in one run, against the teacher and the peer a user would pick instead (model2vec).

    .venv/bin/python benchmarks/distill_quality.py --student ondevice/pretrained/default   # the shipped model
    .venv/bin/python benchmarks/distill_quality.py --sentences 100000 --epochs 6            # distill, then measure

Rows: the fp32 teacher; the student (torch, and the int8 bundle beside it when there is one); model2vec distilled
from the same teacher (`model2vec.distill.distill(model_name=<teacher dir>, pca_dims=256)`, cached); the GloVe-50
average. Columns: STS-B dev/test and SICK-R test Spearman x100 (cosine) and SNLI retrieval: the share of the
teacher's cosine top-10 that each encoder's cosine top-10 recovers (1000 seeded queries, as `ondevice eval`).
Speed on the same STS-B sentences and threads, interleaved repeats, medians: the teacher in torch, ONNX Runtime
fp32 and int8 (with the int8 teacher's cosine to fp32), the student in torch and as the int8 bundle, model2vec.
Targets: student >= 0.90 x teacher on STS-B test and SICK-R, >= model2vec + 5 points on both, retrieval >= 50%.

Teachers side by side (e.g. all-MiniLM-L6-v2 against all-mpnet-base-v2): `--compare-teacher mpnet` adds that
teacher, model2vec distilled from it and its ONNX speeds; `--compare-student NAME=DIR` adds other students (e.g. one
distilled from it). SNLI retrieval is then also scored against each compared teacher's top 10.
The results file is `benchmarks/results/distill_quality-<UTC time>.json` (one per run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.corpus import WIKI_RELPATH, default_data_dir
from ondevice.distill import DistillConfig, distill
from ondevice.eval import glove_average_encoder, sts_spearman
from ondevice.eval.data import read_snli_sentences, read_stsb
from ondevice.eval.metrics import recall_at_k
from ondevice.eval.retrieval import sample_queries, topk
from ondevice.io import cache_dir, write_record
from ondevice.results import results_path, run_metadata
from ondevice.student import Student
from ondevice.teacher import Teacher, cached_vectors


class CachedTeacher:
    """The fp32 teacher whose vectors come from the one teacher cache (the STS and retrieval texts repeat)."""

    def __init__(self, teacher: Teacher):
        self.teacher = teacher

    def encode(self, texts):
        return np.asarray(cached_vectors(self.teacher, list(texts), progress=False))


def model2vec_model(teacher_path: str, dims: int):
    """model2vec distilled from the teacher dir (what a new user gets with pca_dims=256), cached on disk."""
    from model2vec import StaticModel

    folder = cache_dir() / "bench" / f"model2vec-{Path(teacher_path).name}-{dims}"
    if not (folder / "config.json").is_file():
        from model2vec.distill import distill as m2v_distill

        m2v_distill(model_name=teacher_path, pca_dims=dims).save_pretrained(str(folder))
    return StaticModel.from_pretrained(str(folder))


class Model2Vec:
    def __init__(self, model):
        self.model = model

    def encode(self, texts):
        return np.asarray(self.model.encode(list(texts)), dtype=np.float32)


def throughput(encode, texts: list[str]) -> float:
    start = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - start)


def retrieval_overlap(encoders: dict, data: Path, reference: str, queries: int, k: int, seed: int) -> dict:
    """Per encoder: % of the reference's cosine top-k that its own cosine top-k recovers on the SNLI catalog."""
    catalog = read_snli_sentences(data)
    q = sample_queries(len(catalog), queries, seed)
    tops = {name: topk(enc.encode(catalog), q, k) for name, enc in encoders.items()}
    return {name: round(100 * recall_at_k(t, tops[reference]), 2) for name, t in tops.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, default=None, help="measure this student dir instead of distilling one")
    p.add_argument("--bundle", type=Path, default=None, help="the student's int8 bundle (default: <student>/../bundle)")
    p.add_argument("--sentences", type=int, default=100000, help="when distilling: corpus size")
    p.add_argument("--epochs", type=int, default=6, help="when distilling")
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--speed-sentences", type=int, default=1000, help="STS-B sentences timed for throughput")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--m2v-dims", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare-teacher", action="append", default=[], metavar="SPEC",
                   help="another teacher (name or model dir) as rows of its own, with model2vec distilled from it")
    p.add_argument("--compare-student", action="append", default=[], metavar="NAME=DIR",
                   help="another student dir as a row named NAME")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(a.threads)
    meta = run_metadata(a.threads)
    if a.student is None:
        out = cache_dir() / "bench" / f"student-{a.sentences // 1000}k"
        cfg = DistillConfig(corpus=str(a.data / WIKI_RELPATH), max_sentences=a.sentences, epochs=a.epochs, seed=a.seed,
                            threads=a.threads)
        student = distill(cfg, out, resume=(out / layouts.CHECKPOINT).exists())
        a.student = out
    student = Student.load(a.student)
    teacher_info = student.config.teacher
    teacher = Teacher(teacher_info.get("path", "all-MiniLM-L6-v2"), pooling=teacher_info.get("pooling", "mean"))
    if teacher.info.weights_sha256 != teacher_info.get("weights_sha256", teacher.info.weights_sha256):
        print("note: the installed teacher's content differs from the one the student learned from", flush=True)

    encoders: dict = {"teacher": CachedTeacher(teacher), "student": student}
    if teacher_info.get("precision") == "int8":
        # the labels the student learned: how close they are to the fp32 teacher bounds what the student can reach
        encoders["teacher onnx-int8 (the student's labels)"] = CachedTeacher(
            Teacher(teacher.info.path, pooling=teacher_info.get("pooling", "mean"), backend="onnx-int8", threads=a.threads))
    bundle_dir = a.bundle or a.student.parent / "bundle"
    if (bundle_dir / "manifest.json").is_file():
        from ondevice.runtime import Bundle

        bundle = Bundle.load(bundle_dir, threads=a.threads)
        encoders["student int8 bundle"] = bundle
    encoders["model2vec"] = Model2Vec(model2vec_model(teacher.path, a.m2v_dims))
    encoders["glove-50 average"] = glove_average_encoder()
    compared = {}
    for spec in a.compare_teacher:
        other = Teacher(spec, threads=a.threads)
        name = other.info.name or Path(spec).name
        compared[name] = other
        encoders[f"teacher {name}"] = CachedTeacher(other)
        encoders[f"model2vec from {name}"] = Model2Vec(model2vec_model(other.path, a.m2v_dims))
    for item in a.compare_student:
        name, _, folder = item.partition("=")
        encoders[f"student {name}"] = Student.load(Path(folder))

    scores = {}
    for name, enc in encoders.items():
        scores[name] = {"stsb_dev": round(sts_spearman(enc, a.data, "stsb", "dev"), 2),
                        "stsb_test": round(sts_spearman(enc, a.data, "stsb", "test"), 2),
                        "sickr_test": round(sts_spearman(enc, a.data, "sick", "trial"), 2)}
        print(name, scores[name], flush=True)
    overlap = retrieval_overlap(encoders, a.data, "teacher", a.queries, 10, a.seed)
    for name, row in scores.items():
        row["retrieval_top10_vs_teacher"] = overlap[name]
    print("retrieval", overlap, flush=True)
    for other in compared:
        vs = retrieval_overlap(encoders, a.data, f"teacher {other}", a.queries, 10, a.seed)
        for name, row in scores.items():
            row[f"retrieval_top10_vs_{other}"] = vs[name]
        print(f"retrieval vs {other}", vs, flush=True)

    # Speed: the same sentences, threads and batch sizes for all, interleaved repeats.
    pairs = read_stsb(a.data, "test")
    texts = list(dict.fromkeys(pairs.a + pairs.b))[: a.speed_sentences]
    timed = {"teacher torch": lambda x: teacher.encode_torch(x, batch_size=32)}
    int8_cosines = {}
    for label, base in [("teacher", teacher), *((f"teacher {n}", t) for n, t in compared.items())]:
        if base is not teacher:
            timed[f"{label} torch"] = lambda x, b=base: b.encode_torch(x, batch_size=32)
        for backend in ("onnx", "onnx-int8"):
            t = Teacher(base.info.path, pooling=base.info.pooling, backend=backend, threads=a.threads)
            timed[f"{label} {backend}"] = lambda x, t=t: t.encode(x, batch_size=32)
            if backend == "onnx-int8":
                v8, v32 = t.encode(texts), base.encode_torch(texts)
                cos = (v8 * v32).sum(1) / np.linalg.norm(v8, axis=1) / np.linalg.norm(v32, axis=1)
                int8_cosines[label] = {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}
    timed["student torch"] = lambda x: student.encode(x, batch_size=256)
    if "student int8 bundle" in encoders:
        timed["student int8 bundle"] = lambda x: bundle.encode(x, batch_size=64)
    timed["model2vec"] = encoders["model2vec"].encode
    for fn in timed.values():
        fn(texts[:64])  # warm-up
    speeds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(a.repeats):
        for name, fn in timed.items():
            speeds[name].append(throughput(fn, texts))
    sps = {name: round(statistics.median(v), 1) for name, v in speeds.items()}
    print("sentences/s", sps, flush=True)

    t, s = scores["teacher"], scores["student"]
    m = scores["model2vec"]
    result = {
        **meta, "student_dir": str(a.student), "bundle_dir": str(bundle_dir) if "student int8 bundle" in encoders else None,
        "student_config": json.loads((a.student / "config.json").read_text()),
        "distill_config": json.loads((a.student / "distill_config.json").read_text()) if (a.student / "distill_config.json").is_file() else None,
        "train_log": [json.loads(x) for x in (a.student / "train_log.jsonl").read_text().splitlines()] if (a.student / "train_log.jsonl").is_file() else None,
        "scores_x100": scores,
        "student_over_teacher": {k: round(s[k] / t[k], 4) for k in ("stsb_test", "sickr_test")},
        "student_minus_model2vec": {k: round(s[k] - m[k], 2) for k in ("stsb_test", "sickr_test")},
        "sentences_per_second": sps, "speed_sentences": len(texts),
        "speed_ratio_vs_teacher_torch": {k: round(v / sps["teacher torch"], 2) for k, v in sps.items()},
        "int8_teacher_cosine_to_fp32": int8_cosines["teacher"],
        "int8_cosine_to_fp32": int8_cosines,
        "compared_teachers": {n: asdict(t.info) for n, t in compared.items()},
        "compared_students": dict(item.partition("=")[::2] for item in a.compare_student),
        # each compared student's own training log (held-out cosine to its teacher per epoch), where it has one
        "compared_train_logs": {name: [json.loads(x) for x in (Path(d) / "train_log.jsonl").read_text().splitlines()]
                                for name, d in (item.partition("=")[::2] for item in a.compare_student)
                                if (Path(d) / "train_log.jsonl").is_file()},
        "student_parameters": student.num_parameters(), "student_parameters_without_embeddings": student.num_parameters(embeddings=False),
        "retrieval": {"catalog": "unique SNLI dev+test sentences", "queries": a.queries, "k": 10, "seed": a.seed},
    }
    path = results_path("distill_quality")
    write_record(path, result)
    print(f"\nresults: {path}\n")
    print(markdown(result))
    return 0


def markdown(result: dict) -> str:
    """The README table of one run."""
    others = [k.removeprefix("retrieval_top10_vs_") for k in next(iter(result["scores_x100"].values()))
              if k.startswith("retrieval_top10_vs_") and k != "retrieval_top10_vs_teacher"]
    lines = ["| encoder | STS-B dev | STS-B test | SICK-R test | SNLI top-10 vs teacher (%) |"
             + "".join(f" vs {o} (%) |" for o in others), "|---|---|---|---|---|" + "---|" * len(others)]
    for name, s in result["scores_x100"].items():
        lines.append(f"| {name} | {s['stsb_dev']:.2f} | {s['stsb_test']:.2f} | {s['sickr_test']:.2f} | "
                     f"{s['retrieval_top10_vs_teacher']:.2f} |" + "".join(f" {s[f'retrieval_top10_vs_{o}']:.2f} |" for o in others))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
