"""The whole pipeline on built-in defaults: distill, binarize, export an int8 bundle, index a catalog, answer
queries, score STS-B. Every step reuses what an earlier run of the same settings left in `out`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import ondevice
from ondevice import layouts, pretrained
from ondevice.binarize import METHODS, Binarizer
from ondevice.bits import MAX_BITS
from ondevice.checks import check_int
from ondevice.corpus import read_corpus
from ondevice.distill import DistillConfig, distill, read_sentences
from ondevice.errors import OndeviceError
from ondevice.eval import sts_spearman
from ondevice.export.bundle import ExportConfig, export
from ondevice.io import check_replace_dir, write_json
from ondevice.runtime import Bundle
from ondevice.teacher import BACKENDS, cached_vectors

QUERIES = (
    "The river flows into the sea near the old harbour town.",
    "She won a gold medal at the Olympic Games.",
    "The band released their first album in 1995.",
    "A new railway station was opened in the city centre.",
)


@dataclass
class DemoConfig:
    """Settings of `ondevice demo` (saved as demo_config.json beside its outputs)."""

    corpus: str
    data: str
    out: str
    sentences: int = 20000  # first N corpus sentences to distill on (and to fit the binarizer on)
    epochs: int = 4
    bits: int = 2048
    method: str = "ae-sp"
    catalog: int = 20000  # corpus sentences after the training ones, indexed and searched
    queries: tuple[str, ...] = QUERIES
    k: int = 3
    seed: int = 0
    # The int8 ONNX teacher labels ~3x faster than torch (vectors at cosine 0.993 to fp32), which is what keeps the
    # demo inside its time budget on 2 cores; the shipped student was distilled from it too.
    teacher_backend: str = "onnx-int8"

    def validate(self) -> None:
        """Reject impossible settings with a one-line error naming the flag, before any teacher or training work."""
        check_int(self.sentences, "--sentences", 2, 100_000_000)
        check_int(self.epochs, "--epochs", 1, 10_000)
        check_int(self.catalog, "--catalog", 1, 100_000_000)
        check_int(self.k, "k", 1, 10_000)
        check_int(self.bits, "--bits", 1, MAX_BITS)  # whether the method can give that many is known once distilled
        if self.method not in METHODS:
            raise OndeviceError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.teacher_backend not in BACKENDS:
            raise OndeviceError(f"--teacher-backend must be one of {', '.join(BACKENDS)}, got {self.teacher_backend!r}")


@dataclass
class DemoResult:
    """What the demo measured; `lines` is what it printed."""

    scores: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # wall clock per step
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # CPU time of this process (all threads) per step
    lines: list[str] = field(default_factory=list)


def run_demo(config: DemoConfig, say: Callable[[str], None] = print, progress: bool = True) -> DemoResult:
    """Run every step of the pipeline and report scores, timings and search results."""
    # looked up on each call, so a patched attribute is seen
    from ondevice.teacher import Teacher

    config.validate()
    # new, empty or an earlier demo's folder (rerunning continues it): never an artifact or someone else's files
    out = check_replace_dir(config.out, "--out", ("demo_config.json", "student", "bundle-int8"),
                            ours=lambda p: (p / "demo_config.json").is_file(), what="part of an earlier demo")
    data = Path(config.data)
    if not Path(config.corpus).is_file():
        raise OndeviceError(f"demo corpus not found at {config.corpus}; pass --corpus FILE (one sentence per line) "
                            "or --data DIR holding wiki/wiki_en_sentences_1m.txt.gz")
    if not (data / "stsb").is_dir():
        raise OndeviceError(f"STS-B not found in {data}/stsb; pass --data DIR (the folder holding stsb/)")
    result = DemoResult()

    def show(line: str = "") -> None:
        result.lines.append(line)
        say(line)

    cpu = {"t": time.process_time()}

    def step(name: str, start: float) -> None:
        result.seconds[name] = round(time.monotonic() - start, 1)
        now = time.process_time()
        result.cpu_seconds[name] = round(now - cpu["t"], 1)
        cpu["t"] = now

    total, total_cpu = time.monotonic(), time.process_time()
    catalog = list(dict.fromkeys(read_corpus(config.corpus, config.sentences + config.catalog)[config.sentences:]))
    if not catalog:
        raise OndeviceError(f"demo corpus {config.corpus} has no sentences after the first {config.sentences:,} (the "
                            "training ones) to index; lower --sentences or give a longer --corpus")
    write_json(out / "demo_config.json", asdict(config))
    _pretrained_first(config, catalog, show)
    step("setup", total)

    t0 = time.monotonic()
    dcfg = DistillConfig(corpus=config.corpus, max_sentences=config.sentences, epochs=config.epochs, seed=config.seed,
                         teacher_backend=config.teacher_backend)
    student_dir = out / "student"
    # Rerunning the demo continues (or reuses) the same run instead of refusing to touch it.
    student = distill(dcfg, student_dir, resume=(student_dir / layouts.CHECKPOINT).exists(), progress=progress)
    step("distill", t0)
    log = (student_dir / "train_log.jsonl").read_text().strip().splitlines()
    held = json.loads(log[-1])["held_out_cosine"] if log else float("nan")

    t0 = time.monotonic()
    binarizer_dir = out / f"binarizer-{config.method}-{config.bits}"
    if (binarizer_dir / "binarizer.json").is_file():
        binarizer = Binarizer.load(binarizer_dir)
    else:
        train_vectors = student.encode(read_sentences(dcfg))
        binarizer = Binarizer.fit(train_vectors, config.method, config.bits, seed=config.seed, progress=progress)
        binarizer.save(binarizer_dir)
    step("binarize", t0)

    t0 = time.monotonic()
    bundle_dir = out / "bundle-int8"
    if not (bundle_dir / "manifest.json").is_file():
        export(student, binarizer, bundle_dir, ExportConfig(precision="int8"), student_dir=student_dir)
    bundle = Bundle.load(bundle_dir, threads=1)
    size = sum(f.stat().st_size for f in bundle_dir.rglob("*") if f.is_file())
    step("export", t0)

    t0 = time.monotonic()
    bundle.index_texts(catalog)
    step("index", t0)

    show()
    show(f"distilled {dcfg.teacher} into a BiLSTM student on {config.sentences:,} sentences, {config.epochs} epochs "
         f"({result.seconds['distill'] / 60:.1f} min this run)")
    show(f"  student parameters: {student.num_parameters():,} ({student.num_parameters(embeddings=False):,} "
         "without embeddings)")
    show(f"  held-out mean cosine student-to-teacher: {held:.4f}")
    show(f"binarized the student's vectors: {config.method}, {config.bits} bits = {binarizer.code_bytes} bytes per "
         f"sentence ({result.seconds['binarize']:.0f} s)")
    show(f"exported the int8 bundle: {size / 1e6:.2f} MB ({result.seconds['export']:.0f} s)")
    show(f"indexed {len(catalog):,} Wikipedia sentences (not used in training) in {result.seconds['index']:.1f} s")
    show()
    _answer(bundle, config, catalog, show)

    t0 = time.monotonic()
    teacher = Teacher(dcfg.teacher, pooling=dcfg.teacher_pooling)
    result.scores = {"teacher": sts_spearman(_CachedTeacher(teacher), data), "student": sts_spearman(student, data),
                     "bundle_codes": sts_spearman(_Codes(bundle), data)}
    step("sts", t0)
    s = result.scores
    show(f"STS-B test Spearman x100: teacher {s['teacher']:.2f} | student {s['student']:.2f} "
         f"({s['student'] / s['teacher']:.1%} of the teacher) | int8 bundle, {config.bits}-bit codes (Hamming) "
         f"{s['bundle_codes']:.2f}")
    result.seconds["total"] = round(time.monotonic() - total, 1)
    result.cpu_seconds["total"] = round(time.process_time() - total_cpu, 1)
    show(f"demo steps took {result.seconds['total'] / 60:.1f} min wall clock, {result.cpu_seconds['total'] / 60:.1f} min "
         f"of CPU time (all threads; outputs in {out}, a rerun reuses them)")
    return result


def _answer(bundle, config: DemoConfig, catalog: list[str], show: Callable[[str], None]) -> None:
    """Each query's nearest catalog sentences, with the encode and search time of that query."""
    # The first call compiles (or loads from Numba's disk cache) the kernel for this code width; time it apart
    # so the per-query timings below are the search itself.
    if not config.queries:
        return
    w0 = time.perf_counter()
    bundle.index.search(bundle.codes(config.queries[:1]), config.k)
    bundle.codes(config.queries[:1])
    show(f"(first search, kernel compile or cache load included: {1e3 * (time.perf_counter() - w0):.1f} ms)")
    for query in config.queries:
        c0 = time.perf_counter()
        codes = bundle.codes([query])
        c1 = time.perf_counter()
        dist, ids = bundle.index.search(codes, config.k)
        c2 = time.perf_counter()
        show(f"query: {query}   (encode {1e3 * (c1 - c0):.2f} ms, search {1e3 * (c2 - c1):.2f} ms, 1 thread)")
        for d, i in zip(dist[0], ids[0]):
            show(f"  {int(d):5d} bits apart: {catalog[int(i)]}")
    show()


PAIR_QUERY = "How do I reset my phone?"
PAIR_CANDIDATES = ("How can I factory-reset my phone?", "Which phone has the best camera?")


def _pretrained_first(config: DemoConfig, catalog: list[str], show: Callable[[str], None]) -> None:
    """When the package ships a pretrained bundle, show it answering before anything is trained."""
    if pretrained.DEFAULT not in pretrained.names():
        return
    t0 = time.monotonic()
    bundle = ondevice.load(threads=1).index_texts(catalog)
    show(f"the pretrained bundle shipped in the package (ondevice.load()), {len(catalog):,} Wikipedia sentences "
         f"indexed in {time.monotonic() - t0:.1f} s:")
    _answer(bundle, config, catalog, show)
    if bundle.manifest.get("pairs", {}).get("task") == "qqp":
        a, b = [PAIR_QUERY] * len(PAIR_CANDIDATES), list(PAIR_CANDIDATES)
        probs, duplicate = bundle.pair_scores(a, b), bundle.pair_head().pair_decisions(a, b)
        show("its duplicate-question head (bundle.pair_scores, bundle.pair_head().pair_decisions):")
        for text, p, dup in zip(b, probs, duplicate):
            show(f"  {p:.2f} {'duplicate' if dup else 'different'}: {PAIR_QUERY} | {text}")
        show()
    show("now the same pipeline from scratch:")


class _CachedTeacher:
    """The teacher through its vector cache, so a rerun (or another tool) does not encode STS-B again."""

    def __init__(self, teacher):
        self.teacher = teacher

    def encode(self, texts):
        return cached_vectors(self.teacher, list(texts), progress=False)


class _Codes:
    """A bundle seen as an encoder of packed codes, so STS-B is scored by Hamming distance."""

    def __init__(self, bundle):
        self.bundle = bundle

    def encode(self, texts):
        return self.bundle.codes(texts)
