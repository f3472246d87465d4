"""`ondevice distill --device cuda` against the CPU of the same machine: teacher labelling and student training speed.

For each device, through the code paths `ondevice distill` runs: the teacher's vectors for the corpus (the vector
cache, filled from empty) and one student epoch (`distill`, word vectors "random" so that no other teacher work
is timed; the epoch's seconds from its train_log.jsonl, the whole call's beside them). The CPU gets fewer sentences (it is slower; speeds are per sentence). It also checks that the GPU's
teacher vectors equal the CPU's (the cache keeps one key for both). One results JSON per run.

    python benchmarks/devices.py --corpus wiki.txt.gz --sentences 100000 --cpu-sentences 5000

`--random-like DIR` builds a teacher with DIR's architecture and tokenizer and random weights (a machine that gets
no weights file: the same shapes and word pieces cost the same time; its vectors mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from ondevice.io import write_record
from ondevice.results import results_path, run_metadata

SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def random_like(src: Path, dst: Path, seed: int) -> Path:
    """A model folder with `src`'s config and tokenizer files and freshly initialised weights."""
    import torch
    import transformers

    dst.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    for pooling in src.glob("*_Pooling"):  # sentence-transformers' pooling module (mean for MiniLM)
        shutil.copytree(pooling, dst / pooling.name)
    torch.manual_seed(seed)
    config = transformers.AutoConfig.from_pretrained(str(src), local_files_only=True)
    transformers.AutoModel.from_config(config).save_pretrained(str(dst))
    return dst


def measure(device: str, teacher_dir: Path, sentences: list[str], work: Path, a) -> dict:
    """Teacher labelling and one student epoch on `device`, each from an empty cache."""
    import torch

    from ondevice.distill import DistillConfig, distill
    from ondevice.teacher import Teacher, cached_vectors

    os.environ["ONDEVICE_CACHE"] = str(work / f"cache-{device}")  # each device fills its own cache
    corpus = work / f"corpus-{device}.txt"
    corpus.write_text("\n".join(sentences) + "\n")
    teacher = Teacher(teacher_dir, device=device)
    teacher.encode(sentences[: a.teacher_batch_size], batch_size=a.teacher_batch_size)  # warm-up (CUDA context, kernels)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    sync()
    start = time.perf_counter()
    cached_vectors(teacher, sentences, batch_size=a.teacher_batch_size, progress=False)
    sync()
    label_s = time.perf_counter() - start
    del teacher
    cfg = DistillConfig(corpus=str(corpus), exclude_eval=False, teacher=str(teacher_dir), word_vectors="random",
                        vocab_size=a.vocab_size, hidden_size=a.hidden, batch_size=a.batch_size, epochs=1, seed=a.seed,
                        device=device, checkpoint_minutes=0, val_fraction=0.02)
    start = time.perf_counter()
    distill(cfg, work / f"student-{device}", progress=False)  # vectors come from the cache filled above
    distill_s = time.perf_counter() - start
    log = json.loads((work / f"student-{device}" / "train_log.jsonl").read_text().splitlines()[0])
    train_n = len(sentences) - log["held_out_n"]
    return {"device": device, "sentences": len(sentences), "teacher_seconds": round(label_s, 3),
            "teacher_sentences_per_s": round(len(sentences) / label_s, 1), "student_epoch_seconds": log["seconds"],
            "student_sentences_per_s": round(train_n / log["seconds"], 1), "distill_call_seconds": round(distill_s, 3),
            "held_out_cosine": log["held_out_cosine"], "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="sentences, one per line (.gz allowed)")
    p.add_argument("--sentences", type=int, default=100_000, help="sentences on the GPU")
    p.add_argument("--cpu-sentences", type=int, default=5_000, help="sentences on the CPU (a prefix of the same)")
    p.add_argument("--teacher", default="all-MiniLM-L6-v2", help="teacher folder or the packaged default")
    p.add_argument("--random-like", action="store_true", help="time a random-weight copy of --teacher (see above)")
    p.add_argument("--teacher-batch-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=128, help="student batch (the distill default)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab-size", type=int, default=40_000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    import torch

    from ondevice.corpus import read_corpus
    from ondevice.devices import resolve_device
    from ondevice.errors import OndeviceError
    from ondevice.teacher import Teacher, resolve_teacher

    meta = run_metadata(torch.get_num_threads())
    try:
        gpu = resolve_device("cuda")
    except OndeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sentences = read_corpus(a.corpus, limit=a.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        teacher_dir = resolve_teacher(a.teacher)
        if a.random_like:
            teacher_dir = random_like(teacher_dir, work / "teacher", a.seed)
        rows = [measure(gpu, teacher_dir, sentences, work, a),
                measure("cpu", teacher_dir, sentences[: a.cpu_sentences], work, a)]
        probe = sentences[: min(2000, a.cpu_sentences)]
        on_gpu = Teacher(teacher_dir, device=gpu).encode(probe, batch_size=a.teacher_batch_size)
        on_cpu = Teacher(teacher_dir).encode(probe, batch_size=a.teacher_batch_size)
    cos = (on_gpu * on_cpu).sum(1) / np.linalg.norm(on_gpu, axis=1) / np.linalg.norm(on_cpu, axis=1)
    gpu_row, cpu_row = rows
    result = {**meta, "corpus": Path(a.corpus).name, "teacher": str(a.teacher), "random_weights": a.random_like,
              "settings": {k: getattr(a, k) for k in ("teacher_batch_size", "batch_size", "hidden", "vocab_size", "seed")},
              "rows": rows,
              "gpu_over_cpu": {"teacher": round(gpu_row["teacher_sentences_per_s"] / cpu_row["teacher_sentences_per_s"], 2),
                               "student": round(gpu_row["student_sentences_per_s"] / cpu_row["student_sentences_per_s"], 2)},
              "teacher_gpu_vs_cpu": {"sentences": len(probe), "min_cosine": float(cos.min()),
                                     "max_abs_diff": float(np.abs(on_gpu - on_cpu).max())}}
    path = results_path("devices")
    write_record(path, result)
    for r in rows:
        print(f"{r['device']}: teacher {r['teacher_sentences_per_s']:,.0f} sentences/s, student epoch "
              f"{r['student_sentences_per_s']:,.0f} sentences/s ({r['sentences']:,} sentences, {r['torch_threads']} threads)")
    print(f"GPU / CPU: teacher {result['gpu_over_cpu']['teacher']}x, student {result['gpu_over_cpu']['student']}x; "
          f"teacher vectors GPU vs CPU: min cosine {cos.min():.7f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
