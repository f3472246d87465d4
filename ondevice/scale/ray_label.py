"""Teacher labelling on Ray: pending cache chunks go through a Ray Data `map_batches` actor pool.

The driver owns the cache (the same `VectorCache` folder, key and format as `ondevice.teacher.cached_vectors`,
so either reads what the other wrote): it fills rows that other caches already know (`Donors`), hands the
missing rows of each pending chunk to Ray as one block, and writes every chunk by its index as soon as all its
rows are back (Ray does not keep order). With the torch backend each actor loads the teacher once and checks
that it computes the same thing as the driver's (content hash), so a worker with other weights fails loudly
instead of mixing vectors. With the ONNX backends ('onnx', 'onnx-int8') the driver ships its checked graph and
its tokenizer (as the `tokenizers` JSON) through the object store: actors import neither torch nor transformers,
load nothing from disk and start in a fraction of the time; workers then need no teacher files at all.

    from ondevice.scale.ray_label import ray_cached_vectors
    vectors = ray_cached_vectors(Teacher("all-MiniLM-L6-v2"), sentences, address="ray://head:10001")
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import atomic_path
from ondevice.scale.ray_env import error_line, init_ray, ray_module
from ondevice.teacher import (
    DEFAULT,
    Donors,
    Teacher,
    VectorCache,
    cache_folder,
    default_teacher_path,
    row_hashes,
)
from ondevice.teacher_onnx import OnnxSession, graph_path
from ondevice.vector_cache import check_vectors, fill_lock


def teacher_spec(teacher: Teacher) -> dict:
    """Arguments that rebuild `teacher` on another machine (the packaged default by name, not by local path)."""
    path = teacher.info.path
    try:
        if Path(path).resolve() == default_teacher_path().resolve():
            path = DEFAULT
    except OndeviceError:  # the packaged teacher is not installed here: a model dir it is
        pass
    return {"spec": path, "pooling": teacher.info.pooling, "normalize": teacher.info.normalize,
            "max_length": teacher.info.max_length, "backend": teacher.backend}


class _Labeller:
    """Ray Data actor: loads the teacher once, then encodes one block (the missing rows of one chunk) per call."""

    def __init__(self, spec: dict, info: dict, threads: int, batch_size: int):
        started = time.time()
        try:  # torch is optional here: an ONNX teacher runs without it
            import torch

            torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS from num_cpus; make torch agree explicitly
        except ImportError:
            pass
        self.teacher = Teacher(**spec, threads=threads)
        mine = {k: v for k, v in asdict(self.teacher.info).items() if k != "path"}
        want = {k: v for k, v in info.items() if k != "path"}
        if mine != want:
            diff = sorted(k for k in want if mine.get(k) != want[k])
            raise OndeviceError(f"the teacher on Ray worker {os.uname().nodename} differs from the driver's in {diff}; "
                                "install the same teacher files on every node")
        self.batch_size = batch_size
        self.stamps = (started, time.time())

    def __call__(self, batch: dict) -> dict:
        texts = [str(t) for t in batch["text"]]
        vectors = self.teacher.encode(texts, batch_size=self.batch_size)
        return _stamped({"chunk": batch["chunk"], "pos": batch["pos"], "vector": vectors}, self.stamps)


class _OnnxLabeller:
    """Ray Data actor for the ONNX backends: the driver's graph and tokenizer, no torch, no transformers."""

    def __init__(self, graph, tokenizer: dict, input_names: tuple[str, ...], dim: int, threads: int, batch_size: int):
        started = time.time()

        ray = ray_module()
        self.tokenizer = light_tokenizer(tokenizer)
        self.session = OnnxSession(ray.get(graph), tuple(input_names), threads)
        self.input_names, self.dim, self.batch_size = tuple(input_names), dim, batch_size
        self.stamps = (started, time.time())

    def __call__(self, batch: dict) -> dict:
        texts = [str(t) for t in batch["text"]]
        vectors = encode_light(self.tokenizer, self.session, self.input_names, self.dim, texts, self.batch_size)
        return _stamped({"chunk": batch["chunk"], "pos": batch["pos"], "vector": vectors}, self.stamps)


def tokenizer_spec(teacher: Teacher) -> dict | None:
    """The teacher's fast tokenizer as `tokenizers` JSON plus the truncation and padding `Teacher` asks for.

    None when the tokenizer has no fast (Rust) backend; such a teacher is labelled by full torch actors.
    """
    tok = teacher.tokenizer
    backend = getattr(tok, "backend_tokenizer", None) if getattr(tok, "is_fast", False) else None
    if backend is None:
        return None
    return {"json": backend.to_str(), "max_length": teacher.info.max_length, "pad_id": tok.pad_token_id,
            "pad_token": tok.pad_token, "pad_type_id": tok.pad_token_type_id, "padding_side": tok.padding_side,
            "truncation_side": tok.truncation_side}


def light_tokenizer(spec: dict):
    """A `tokenizers.Tokenizer` that pads and truncates exactly like `Teacher`'s call to its tokenizer."""
    tokenizers = require("tokenizers", "train")
    tok = tokenizers.Tokenizer.from_str(spec["json"])
    tok.enable_truncation(spec["max_length"], stride=0, strategy="longest_first", direction=spec["truncation_side"])
    tok.enable_padding(direction=spec["padding_side"], pad_id=spec["pad_id"], pad_type_id=spec["pad_type_id"],
                       pad_token=spec["pad_token"])
    return tok


def encode_light(tokenizer, session, input_names: tuple[str, ...], dim: int, texts: Sequence[str],
                 batch_size: int) -> np.ndarray:
    """`Teacher.encode` for the ONNX backends without transformers: the same length-sorted batches and graph."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    fields = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        encs = tokenizer.encode_batch([texts[i] for i in idx])
        feed = {n: np.array([getattr(e, fields[n]) for e in encs], dtype=np.int64) for n in input_names}
        out[idx] = session.run(feed)
    return out


def _stamped(out: dict, stamps: tuple[float, float]) -> dict:
    """Add the actor's pid and its start and ready times (wall clock) to a batch, for the driver's timings."""
    n = len(out["chunk"])
    return out | {"actor_pid": np.full(n, os.getpid(), np.int64), "actor_start": np.full(n, stamps[0]),
                  "actor_ready": np.full(n, stamps[1])}


def _plan_workers(resources: dict, workers: int, cpus_per_worker: int) -> int:
    """Actor pool size; one logical CPU stays free for Ray Data's own tasks (an all-CPU pool can hang)."""
    cpus = int(resources.get("CPU", 0))
    if workers < 0 or cpus_per_worker < 1:
        raise OndeviceError(f"--ray-workers must be >= 0 and CPUs per worker >= 1, got {workers} and {cpus_per_worker}")
    if workers == 0:
        workers = max(1, (cpus - 1) // cpus_per_worker)
    if workers * cpus_per_worker > max(cpus - 1, 0):
        raise OndeviceError(f"{workers} Ray workers x {cpus_per_worker} CPUs leave no CPU free in a cluster of {cpus} "
                            "CPUs (Ray Data then stalls); use fewer --ray-workers or add nodes")
    return workers


def ray_cached_vectors(teacher: Teacher, sentences: Sequence[str], batch_size: int = 64, chunk: int = 2048,
                       root: Path | None = None, progress: bool = True, address: str | None = None,
                       workers: int = 0, cpus_per_worker: int = 1,
                       on_chunk: Callable[[int], None] | None = None, timings: dict | None = None) -> np.ndarray:
    """Like `ondevice.teacher.cached_vectors`, computed by a pool of Ray actors (local Ray unless `address`).

    `workers` actors (0: as many as the CPUs allow) each use `cpus_per_worker` threads. `on_chunk(c)` is called
    after chunk c is written (progress hooks, tests). A `timings` dict receives where the time went: seconds
    from the call to Ray being up, the blocks planned, each actor starting and being ready, each chunk written.
    """
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    t0 = time.time()
    timings = {} if timings is None else timings

    if batch_size < 1:
        raise OndeviceError(f"--teacher-batch-size must be >= 1, got {batch_size}")
    folder, key_src = cache_folder(teacher, sentences, root)
    with fill_lock(folder):  # one process fills a cache folder at a time (ondevice.vector_cache)
        normalized = teacher.info.normalize  # chunks of an older cache without checksums get the fill's own check
        cache = VectorCache(folder, len(sentences), teacher.dim, chunk, key_src,
                            check=lambda rows, what: check_vectors(rows, normalized, what))
        pending = cache.pending()
        if not pending:
            return cache.result()
        hashes = row_hashes(sentences)
        if not (folder / "rows.npy").is_file():
            with atomic_path(folder / "rows.npy") as tmp, open(tmp, "wb") as fh:
                np.save(fh, hashes)
        donors = Donors(folder.parent, "teacher", key_src["teacher"], skip=folder)
        done_rows = len(sentences) - sum(cache.bounds(c)[1] - cache.bounds(c)[0] for c in pending)
        bar = tqdm(total=len(sentences), initial=done_rows, desc="teacher vectors (ray)", unit="sent", disable=not progress)
        partial: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # chunk -> (rows, mask of rows still missing)
        blocks = []
        pa = require("pyarrow", "scale")  # Ray Data brings it

        with bar:
            for c in pending:
                lo, hi = cache.bounds(c)
                rows = np.zeros((hi - lo, teacher.dim), dtype=np.float32)
                missing = donors.fill(hashes[lo:hi], rows)
                if not missing.any():  # every row known elsewhere: no need to ask Ray
                    cache.write(c, rows, teacher.info.normalize)
                    bar.update(hi - lo)
                    if on_chunk:
                        on_chunk(c)
                    continue
                partial[c] = (rows, missing)
                pos = np.flatnonzero(missing)
                blocks.append(pa.table({"chunk": np.full(len(pos), c, np.int64), "pos": pos.astype(np.int64),
                                        "text": [sentences[lo + i] for i in pos]}))
            timings["planned_s"] = time.time() - t0
            if blocks:
                _run(teacher, blocks, partial, cache, bar, batch_size, address, workers, cpus_per_worker, on_chunk,
                     timings, t0)
        return cache.result()


def _actor_class(teacher: Teacher, ray, batch_size: int, threads: int) -> tuple[type, dict, str]:
    """The actor class, its constructor arguments and its kind: light ONNX actors where possible, else torch."""
    spec = tokenizer_spec(teacher) if teacher.backend != "torch" else None
    if spec is None:
        return _Labeller, {"spec": teacher_spec(teacher), "info": asdict(teacher.info), "threads": threads,
                           "batch_size": batch_size}, "torch"

    graph = graph_path(teacher, teacher.info.precision)  # exported and checked against torch here, once
    return _OnnxLabeller, {"graph": ray.put(graph.read_bytes()), "tokenizer": spec, "input_names": teacher.input_names,
                           "dim": teacher.dim, "threads": threads, "batch_size": batch_size}, "onnx-light"


def _run(teacher, blocks, partial, cache, bar, batch_size, address, workers, cpus_per_worker, on_chunk,
         timings, t0) -> None:
    ray = ray_module()
    # A Ray we start gets one logical CPU more than the pool may use: an actor pool holding every CPU can stall
    # a Dataset (ray-project/ray#44687). Logical CPUs only gate scheduling; threads are set per actor.
    cpus = max(os.cpu_count() or 1, (workers or 1) * cpus_per_worker) + 1
    resources = init_ray(address, num_cpus=cpus)
    timings["ray_up_s"] = time.time() - t0
    workers = _plan_workers(resources, workers, cpus_per_worker)
    data = require("ray.data", "scale")

    actor, kwargs, kind = _actor_class(teacher, ray, batch_size, cpus_per_worker)
    timings.update(actor_kind=kind, workers=workers, actors={}, chunks_s=[])
    ds = data.from_arrow(blocks)  # one block per chunk: an actor call encodes exactly what a local run would
    out = ds.map_batches(actor, batch_size=None, batch_format="numpy", num_cpus=cpus_per_worker,
                         compute=data.ActorPoolStrategy(size=workers), fn_constructor_kwargs=kwargs)
    timings["dataset_s"] = time.time() - t0
    batches = iter(out.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0))
    try:
        for batch in batches:
            for pid, start, ready in zip(*np.unique(np.stack([batch["actor_pid"], batch["actor_start"],
                                                              batch["actor_ready"]], 1), axis=0).T):
                timings["actors"][str(int(pid))] = {"start_s": start - t0, "ready_s": ready - t0}
            for c in np.unique(batch["chunk"]):
                sel = batch["chunk"] == c
                rows, missing = partial[int(c)]
                rows[batch["pos"][sel]] = batch["vector"][sel]
                missing[batch["pos"][sel]] = False
                if not missing.any():
                    cache.write(int(c), rows, teacher.info.normalize)
                    del partial[int(c)]
                    lo, hi = cache.bounds(int(c))
                    bar.update(hi - lo)
                    timings["chunks_s"].append(time.time() - t0)
                    if on_chunk:
                        on_chunk(int(c))
    except ray.exceptions.RayError as exc:  # worker failures (teacher load, dead actors past retries) come wrapped
        raise OndeviceError(f"Ray labelling failed: {error_line(exc)}; finished chunks are kept, run again to "
                            "resume") from None
    finally:
        close = getattr(batches, "close", None)
        if close:  # an interrupted run stops the Dataset now, so its actors free their CPUs for the next one
            close()
