"""Bundle benchmark: bundle size (fp32 / int8, and what dominates it), 1-thread single-sentence latency and batch
throughput of the int8 and fp32 bundles, the student in torch, and the teacher exported to ONNX as a reference.

    nice .venv/bin/python benchmarks/bundle.py            # trained student if present, else a random one

Student: --student DIR, else ~/.cache/ondevice/bench/student-100k when it exists, else a randomly initialized
student of the default architecture (vocab 50k, embedding 50, hidden 256, output 384): sizes and latency do not
depend on training, only quality does (the int8-vs-fp32 numbers below are then for random weights).
Throughput sentences: STS-B test sentences from ../shared/data when present (read, never copied), else generated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# the same tables the docs render from the results file
from tables import int8_products_table, latency_table, size_table

from ondevice.corpus import default_data_dir
from ondevice.io import cache_dir
from ondevice.results import start_run, write_result

ROOT = Path(__file__).resolve().parents[1]
TRAINED = cache_dir() / "bench" / "student-100k"
STSB = default_data_dir() / "stsb" / "sts-test.csv"


def _student(path: str | None):
    """(Student, description): the given/trained student, or a random one of the default architecture."""
    import torch

    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    chosen = Path(path) if path else (TRAINED if (TRAINED / "model.safetensors").is_file() else None)
    if chosen:
        return Student.load(chosen), f"trained student {chosen}"
    vocab = [PAD, UNK] + [f"w{i}" for i in range(50_000 - 2)]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=50, hidden_size=256, output_dim=384, max_tokens=128)
    torch.manual_seed(0)
    emb = np.random.default_rng(0).normal(0, 0.4, (len(vocab), 50)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, 128), emb, seed=0), "random student (default architecture)"


def _stsb_texts(n: int) -> list[str]:
    """The first n STS-B test sentences (read, never copied); [] without the data."""
    if not STSB.is_file():
        return []
    rows = [line.split("\t") for line in STSB.read_text(encoding="utf-8").splitlines()]
    return [t for r in rows if len(r) >= 7 for t in (r[5], r[6])][:n]


def _sentences(student, n: int) -> tuple[list[str], str]:
    if texts := _stsb_texts(n):
        if student.config.vocab_size == 50_000 and student.tokenizer.vocab[2] == "w0":  # random student: its own words
            return _word_soup(student, [len(student.tokenizer.ids(t)) for t in texts]), "STS-B test lengths"
        return texts, "STS-B test sentences"
    rng = np.random.default_rng(0)
    return _word_soup(student, list(rng.integers(5, 30, size=n))), "generated"


def _word_soup(student, lengths: list[int]) -> list[str]:
    rng = np.random.default_rng(1)
    words = student.tokenizer.vocab[2:5000]
    return [" ".join(rng.choice(words, size=int(k))) for k in lengths]


def _n_tokens(student, n: int) -> str:
    """A sentence of exactly `n` student (or bundle) tokens, made of distinct frequent vocabulary words."""
    from ondevice.tokenizer import tokenize

    words = [w for w in student.tokenizer.vocab[2:2000] if tokenize(w) == [w] and w.isalnum()][:n]
    text = " ".join(words)
    if len(student.tokenizer.ids(text)) != n:
        raise SystemExit(f"could not build a {n}-token sentence from the vocabulary")
    return text


def _precision_ab(path: Path, texts: list[str], runs: int) -> dict[str, float]:
    """The int8 bundle at `path` as ondevice runs it (exact int8 products, ondevice.ort_session) against onnxruntime's
    default session: p50 of a 20-token sentence, the two timed in alternating 50-call windows on one thread, and how
    far the default's vectors and code bits are from the exact ones. On x86 without VNNI the default saturates 16-bit
    sums (the reason for the setting); elsewhere the two are the same computation and the ratio is ~1."""
    from ondevice import layouts
    from ondevice.bits import unpack
    from ondevice.ort_session import cpu_session, session_options
    from ondevice.runtime import Bundle

    exact = Bundle.load(path, threads=1)
    plain = Bundle(exact.path, exact.manifest, exact.tokenizer,
                   cpu_session(str(exact.path / layouts.ENCODER_ONNX),
                               session_options(1, inter_op=1, quiet=True, exact_int8=False)), 1)
    sentence = _n_tokens(exact, 20)
    times: dict[str, list[float]] = {"exact": [], "default": []}
    for b in (exact, plain):
        for _ in range(20):
            b.embed([sentence])
    for w in range(max(2, runs // 50)):
        for name, b in ((("exact", exact), ("default", plain)) if w % 2 == 0 else (("default", plain), ("exact", exact))):
            for _ in range(50):
                c = time.thread_time()
                b.embed([sentence])
                times[name].append((time.thread_time() - c) * 1e3)
    e1, c1 = exact.embed(texts)
    e2, c2 = plain.embed(texts)
    cos = (e1 * e2).sum(1) / (np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1))
    p50 = {k: statistics.median(v) for k, v in times.items()}
    return {"exact_p50_ms": p50["exact"], "default_p50_ms": p50["default"], "ratio": p50["exact"] / p50["default"],
            "calls": len(times["exact"]), "default_vs_exact_cosine": float(cos.mean()),
            "default_vs_exact_bits": float((unpack(c1, exact.bits) == unpack(c2, exact.bits)).mean())}


# Every encoder runs on the calling thread (1 intra-op thread), so the thread's CPU time is its cost even when
# other jobs share the cores; wall-clock time is reported beside it.
def _latency(fn, runs: int, warmup: int = 20) -> dict[str, float]:
    """p50 / p99 in milliseconds, of thread CPU time and of wall time."""
    for _ in range(warmup):
        fn()
    cpu, wall = [], []
    for _ in range(runs):
        c, w = time.thread_time(), time.perf_counter()
        fn()
        cpu.append((time.thread_time() - c) * 1e3)
        wall.append((time.perf_counter() - w) * 1e3)
    pick = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]
    # Medians of consecutive 50-call windows: on a shared VM the core's throughput can halve for seconds at a
    # time (another tenant on the same physical core), which CPU time does not filter out; the spread of window
    # medians shows whether a run straddled such periods.
    windows = [statistics.median(cpu[i : i + 50]) for i in range(0, len(cpu) - 49, 50)] or [statistics.median(cpu)]
    return {"p50_ms": statistics.median(cpu), "p99_ms": pick(cpu, 0.99),
            "wall_p50_ms": statistics.median(wall), "wall_p99_ms": pick(wall, 0.99),
            "window_p50_min_ms": min(windows), "window_p50_max_ms": max(windows)}


def _throughput(fn, texts: list[str], batch: int, min_seconds: float = 3.0) -> dict[str, float]:
    """Sentences per CPU second and per wall second over passes of `texts` in batches of `batch`."""
    fn(texts[:batch])
    done, c, w = 0, time.thread_time(), time.perf_counter()
    while time.thread_time() - c < min_seconds:
        for s in range(0, len(texts), batch):
            fn(texts[s : s + batch])
        done += len(texts)
    return {"sentences_per_s": done / (time.thread_time() - c), "wall_sentences_per_s": done / (time.perf_counter() - w)}


def _onnx_breakdown(path: Path) -> dict[str, int]:
    """Bytes of the graph's weights grouped by layer."""
    import onnx

    groups: dict[str, int] = {}
    for init in onnx.load(str(path)).graph.initializer:
        layer = next((g for g in ("embedding", "lstm", "proj", "binarizer") if init.name.startswith(g)), "other")
        groups[layer] = groups.get(layer, 0) + len(onnx.numpy_helper.to_array(init).tobytes())
    return groups


def _int8_quality(fp32, int8, texts: list[str]) -> dict[str, float]:
    """int8 vs fp32 bundle on `texts` as a catalog: mean cosine, bit agreement, top-10 overlap (every 4th row a query).

    `top10_overlap` compares id lists (ties by smaller row); `top10_overlap_ties` counts an int8 hit as correct
    when its fp32 distance is within the fp32 10th distance, which is what a tie-free comparison measures.
    """
    from ondevice.export.golden import hamming_topk

    from ondevice.bits import hamming_reference, unpack

    e32, c32 = fp32.embed(texts)
    e8, c8 = int8.embed(texts)
    cos = (e32 * e8).sum(1) / (np.linalg.norm(e32, axis=1) * np.linalg.norm(e8, axis=1))
    q = np.arange(0, len(texts), 4)
    _, top32 = hamming_topk(c32[q], c32, 10)
    _, top8 = hamming_topk(c8[q], c8, 10)
    d32 = hamming_reference(c32[q], c32)
    kth = np.sort(d32, axis=1)[:, 9:10]
    return {"mean_cosine": float(cos.mean()), "bit_agreement": float((unpack(c32, fp32.bits) == unpack(c8, fp32.bits)).mean()),
            "top10_overlap": float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top32, top8)])),
            "top10_overlap_ties": float(np.mean(np.take_along_axis(d32, top8, axis=1) <= kth))}


class TeacherOnnx:
    """The teacher (HF encoder + mean pooling + L2 normalization) exported to ONNX, run like the bundle."""

    def __init__(self, workdir: Path, threads: int, quantize: bool):
        import torch
        import transformers

        from ondevice.ort_session import cpu_session, session_options
        from ondevice.teacher import default_teacher_path

        path = default_teacher_path()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
        fp32 = workdir / "teacher.onnx"
        if not fp32.is_file():
            model = transformers.AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()

            class Pooled(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = model

                def forward(self, input_ids, attention_mask):
                    # explicit zero token types: this transformers version leaves its default buffer uninitialized
                    h = self.m(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
                    mask = attention_mask.unsqueeze(-1).to(h.dtype)
                    v = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                    return torch.nn.functional.normalize(v, dim=-1)

            enc = self.tokenizer(["a sample sentence", "two"], padding=True, return_tensors="pt")
            b, t = torch.export.Dim("batch"), torch.export.Dim("tokens", max=512)
            # the dynamo exporter: the legacy tracer bakes this transformers version's mask code into wrong constants
            prog = torch.onnx.export(Pooled(), (enc["input_ids"], enc["attention_mask"]),
                                     input_names=["input_ids", "attention_mask"], output_names=["sentence_vector"],
                                     dynamic_shapes=({0: b, 1: t}, {0: b, 1: t}), opset_version=18, dynamo=True)
            prog.save(str(fp32))
        self.path = fp32
        if quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            self.path = workdir / "teacher-int8.onnx"
            if not self.path.is_file():
                quantize_dynamic(fp32, self.path, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
        self.session = cpu_session(str(self.path), session_options(threads, inter_op=1))

    def encode(self, texts: list[str]) -> np.ndarray:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=256, return_tensors="np")
        return self.session.run(None, {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", default=None, help="student dir (default: the trained bench student, else random)")
    p.add_argument("--binarizer", default=None, help="binarizer dir (default: 256-bit random projection fitted here)")
    p.add_argument("--bits", type=int, default=256)
    p.add_argument("--workdir", default=None, help="where bundles and the teacher ONNX go (default: a temp dir)")
    p.add_argument("--runs", type=int, default=2000, help="single-sentence latency runs (teacher: runs / 10)")
    p.add_argument("--sentences", type=int, default=1024, help="sentences per throughput pass")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--no-teacher", action="store_true")
    p.add_argument("--lengths", nargs="+", type=int, default=[5, 10, 20, 40, 80, 120],
                   help="sentence lengths (student tokens) for the latency-vs-length curve")
    p.add_argument("--length-runs", type=int, default=300, help="calls per length on that curve (teacher: / 10)")
    p.add_argument("--results-dir", default=None, help="results JSON folder (default: benchmarks/results)")
    a = p.parse_args(argv)
    meta = start_run(threads=1)

    import torch
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer
    from ondevice.runtime import Bundle

    torch.set_num_threads(1)
    student, which = _student(a.student)
    texts, text_source = _sentences(student, a.sentences)
    binarizer = Binarizer.load(a.binarizer) if a.binarizer else \
        Binarizer.fit(student.encode(texts), "random", a.bits, seed=0)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="ondevice-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    export(student, binarizer, work / "bundle", ExportConfig(precision="both"))
    export_s = time.perf_counter() - t0
    sentence = _n_tokens(student, 20)
    results: dict = {"student": which, "vocab": student.config.vocab_size, "bits": binarizer.bits,
                     "throughput_sentences": text_source, "export_seconds": round(export_s, 1),
                     "cpu": os.cpu_count(), "load_average": os.getloadavg()[0], "sizes": {}, "rows": []}

    for prec in ("fp32", "int8"):
        folder = work / "bundle" / prec
        files = {q.relative_to(folder).as_posix(): q.stat().st_size for q in folder.rglob("*") if q.is_file()}
        results["sizes"][prec] = {"total": sum(files.values()), "files": files,
                                  "encoder.onnx weights": _onnx_breakdown(folder / "encoder.onnx")}

    def row(name: str, single, batch, runs: int) -> None:
        x = {"name": name, **_latency(lambda: single([sentence]), runs), **_throughput(batch, texts, a.batch)}
        results["rows"].append(x)
        print(f"  {name}: p50 {x['p50_ms']:.3f} ms (50-call windows {x['window_p50_min_ms']:.3f}-"
              f"{x['window_p50_max_ms']:.3f}), p99 {x['p99_ms']:.3f} ms, {x['sentences_per_s']:,.0f} sentences/s "
              f"(wall: {x['wall_p50_ms']:.3f} / {x['wall_p99_ms']:.3f} ms, {x['wall_sentences_per_s']:,.0f}/s)", flush=True)

    results["int8_quality"] = _int8_quality(Bundle.load(work / "bundle", precision="fp32"),
                                            Bundle.load(work / "bundle", precision="int8"), texts)
    print(f"measuring ({which}; throughput on {len(texts)} {text_source}, batch {a.batch}, 1 thread)", flush=True)
    for prec in ("int8", "fp32"):
        bundle = Bundle.load(work / "bundle", precision=prec, threads=1)
        row(f"bundle {prec} (onnxruntime)", bundle.embed, bundle.embed, a.runs)
    row("student fp32 (torch eager)", student.encode, student.encode, a.runs)
    if not a.no_teacher:
        for quantize in (False, True):
            teacher = TeacherOnnx(work, threads=1, quantize=quantize)
            name = f"teacher {'int8' if quantize else 'fp32'} (onnxruntime)"
            row(name, teacher.encode, teacher.encode, max(50, a.runs // 10))
            results["sizes"][name] = teacher.path.stat().st_size
    results["by_length"] = _by_length(student, work, a)
    from ondevice.pretrained import pretrained_path

    # the same student with 8-bit LSTM weights (--int8-weight-bits 8): what 7-bit weights buy and cost
    export(student, binarizer, work / "bundle8", ExportConfig(precision="int8", int8_weight_bits=8))
    results["int8_quality_8bit_weights"] = _int8_quality(Bundle.load(work / "bundle", precision="fp32"),
                                                         Bundle.load(work / "bundle8"), texts)
    shipped_bits = Bundle.load(pretrained_path()).manifest.get("onnx", {}).get("int8_weight_bits", 8)
    results["int8_products"] = {}
    for name, path, catalog in (("this run's int8 bundle (7-bit weights)", work / "bundle" / "int8", texts),
                                ("the same student, 8-bit weights", work / "bundle8", texts),
                                (f"the shipped bundle ({shipped_bits}-bit weights)", pretrained_path(),
                                 _stsb_texts(len(texts)) or texts)):
        ab = results["int8_products"][name] = _precision_ab(path, catalog, a.runs)
        print(f"  {name}, exact int8 products vs onnxruntime's default: p50 {ab['exact_p50_ms']:.3f} vs "
              f"{ab['default_p50_ms']:.3f} ms ({ab['ratio']:.2f}x); default vs exact: cosine "
              f"{ab['default_vs_exact_cosine']:.5f}, bits {ab['default_vs_exact_bits']:.4f}", flush=True)
    print(report(results))
    print(f"wrote {write_result('bundle', results, meta, root=a.results_dir)}")
    return 0


def _by_length(student, work: Path, a: argparse.Namespace) -> list[dict]:
    """p50 latency (thread CPU ms) of one sentence per length, for the bundles and the fp32 teacher."""
    from ondevice.runtime import Bundle

    encoders = [(f"bundle {prec}", Bundle.load(work / "bundle", precision=prec, threads=1).embed, a.length_runs)
                for prec in ("int8", "fp32")]
    if not a.no_teacher:
        encoders.append(("teacher fp32", TeacherOnnx(work, threads=1, quantize=False).encode, max(20, a.length_runs // 10)))
    rows = []
    for n in a.lengths:
        text = _n_tokens(student, n)
        for name, fn, runs in encoders:
            lat = _latency(lambda fn=fn, text=text: fn([text]), runs, warmup=10)
            rows.append({"name": name, "tokens": n, "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"],
                         "window_p50_min_ms": lat["window_p50_min_ms"], "window_p50_max_ms": lat["window_p50_max_ms"]})
            print(f"  {name}, {n} tokens: p50 {lat['p50_ms']:.3f} ms", flush=True)
    return rows


def report(r: dict) -> str:
    """The markdown tables of this run (docs/results/bundle.md renders them from the results file)."""
    lines = [(f"Student: {r['student']} (vocab {r['vocab']:,}), binarizer {r['bits']} bits; {r['cpu']} CPU cores, "
              f"load average {r['load_average']:.1f} at start; export of both bundles took {r['export_seconds']} s."), "",
             size_table(r)]
    qual = r["int8_quality"]
    lines += ["", (f"int8 vs fp32 bundle, the throughput sentences as a catalog: mean cosine "
                   f"{qual['mean_cosine']:.5f}, bit agreement {qual['bit_agreement']:.4f}, top-10 overlap "
                   f"{qual['top10_overlap']:.3f} ({qual['top10_overlap_ties']:.3f} counting ties at the 10th distance).")]
    lines += ["", "CPU time of the calling thread (1 intra-op thread); wall-clock time on this shared machine in brackets.",
              "", latency_table(r)]
    if "int8_products" in r:
        lines += ["", int8_products_table(r)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
