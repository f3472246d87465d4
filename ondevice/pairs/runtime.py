"""Pair scoring on device (numpy + onnxruntime, no torch): the bundle's optional `pair_head.onnx`.

    bundle = Bundle.load("bundle")                      # a bundle exported by `ondevice pairs export`
    bundle.pair_scores(["how do I reset it?"], ["how to reset my phone"])   # task scores, (n,) or (n, classes)
    scores, rows = bundle.rerank("reset phone", candidates, k=10)         # texts or precomputed vectors
    scores, ids = bundle.search_rerank("reset phone", catalog_vectors, k=10, shortlist=1000)  # Hamming, then head

A bundle exported with a blend (on by default) ranks by `z(logit) + w * z(similarity)`, fitted on the task's dev
pairs (`ondevice.pairs.blend`): the cosine of the two embeddings for a DSE head, minus the Hamming distance of the two
codes for a DiPair head; `blend=False` ranks by the head alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError, ort_error_line
from ondevice.onnxproto import allocation_problem, external_tensors, foreign_operators
from ondevice.ort_session import cpu_session, session_options
from ondevice.pairs.blend import Blend
from ondevice.tokenizer import as_texts


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def head_block(bundle, key: str, head: str, command: str) -> tuple[dict, bytes]:
    """The manifest block `key` of a bundle and the bytes of the graph it names, checked against the file table."""
    block = bundle.manifest.get(key)
    if not isinstance(block, dict):
        raise OndeviceError(f"bundle {bundle.path} has no {head}; export one with `{command}`")
    name = block.get("file")
    entry = bundle.manifest["files"].get(name) if isinstance(name, str) else None
    if entry is None:
        raise OndeviceError(f"bundle {bundle.path}: the {key} block names {name!r}, which the file table does not list; "
                            "re-export the bundle")
    # every name in the files table was checked to stay inside the folder (no symlinks) when the bundle was loaded
    try:
        data = bundle.path.joinpath(*PurePosixPath(name).parts).read_bytes()
    except OSError as exc:
        raise OndeviceError(f"bundle {bundle.path}: cannot read {name} ({exc.strerror or type(exc).__name__}); "
                            "copy the bundle again") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise OndeviceError(f"bundle {bundle.path}: {name} fails its sha256 check (modified or corrupted); copy the bundle again")
    return block, data


def check_head(bundle, block: dict, session, inputs: dict[str, list[int]]) -> None:
    """Refuse a head block or graph that does not fit: outputs and transform of the task, and the graph's input
    names and shapes and its `logits` width against the block (a wrong width would broadcast into wrong scores)."""
    where = f"bundle {bundle.path}: {block.get('file')!r}"
    head, transform, kind = block.get("head"), block.get("output_transform"), block.get("task_type")
    outputs = head.get("outputs") if isinstance(head, dict) else None
    ok = isinstance(outputs, int) and not isinstance(outputs, bool) and 1 <= outputs <= 1024
    if ok and kind == "regression":
        ok = outputs == 1 and isinstance(transform, dict) and all(
            isinstance(transform.get(f), (int, float)) and not isinstance(transform.get(f), bool)
            and np.isfinite(transform[f]) for f in ("scale", "offset"))
    elif ok:
        ok = kind == "classes" or (kind == "binary" and outputs == 1)
    if not ok:
        raise OndeviceError(f"{where}: the manifest gives the head {outputs!r} outputs for a {kind!r} task with "
                            f"transform {transform!r}, which do not fit; re-export the bundle")
    got_in = {i.name: list(i.shape[1:]) for i in session.get_inputs()}
    got_out = {o.name: list(o.shape[1:]) for o in session.get_outputs()}
    if got_in != inputs or got_out.get("logits") != [outputs]:
        raise OndeviceError(f"{where} takes {got_in} and gives {got_out}, the manifest says inputs {inputs} and "
                            f"logits of width {outputs}; re-export the bundle")
    threshold = block.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not np.isfinite(threshold)):
        raise OndeviceError(f"{where}: the manifest's decision threshold {threshold!r} is not a finite number; "
                            "re-export the bundle")
    probe = {name: np.full((2, *shape), 0.1, np.float32) for name, shape in inputs.items()}
    try:  # a head whose weights are not finite scores every pair NaN: refused once, here, not pair by pair
        logits = session.run(["logits"], probe)[0]
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
        raise OndeviceError(f"{where} failed to run ({ort_error_line(exc)}); re-export the bundle") from None
    if not np.isfinite(logits).all():
        raise OndeviceError(f"{where} gives non-finite logits (NaN or inf weights); re-export the bundle")


def head_session(bundle, block: dict, data: bytes, threads: int):
    """An onnxruntime CPU session over a head graph's checked bytes; a graph it cannot load is a one-line error."""
    try:
        external = external_tensors(data)
        foreign = foreign_operators(data)  # control flow (a Loop of 10^12 trips) or anything else no exporter writes
        too_big = None if foreign else allocation_problem(data)
    except OndeviceError as exc:
        raise OndeviceError(f"bundle {bundle.path}: {block['file']} is not a valid ONNX model ({exc}); re-export it") from None
    if foreign:
        raise OndeviceError(f"bundle {bundle.path}: {block['file']} uses operators ondevice never exports "
                            f"({', '.join(foreign[:5])}); re-export the bundle")
    if too_big:
        raise OndeviceError(f"bundle {bundle.path}: {block['file']} is not a head ondevice exports: {too_big}; re-export the bundle")
    if external:  # onnxruntime would read such a tensor from a file no checksum covers, wherever the app runs
        raise OndeviceError(f"bundle {bundle.path}: {block['file']} keeps tensor {external[0]!r} in an external data "
                            "file; re-export the bundle (weights inside the graph)")
    try:
        return cpu_session(data, session_options(threads, quiet=True, capped=True))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
        raise OndeviceError(f"bundle {bundle.path}: {block['file']} cannot be loaded by onnxruntime "
                            f"({ort_error_line(exc)})") from None


class HeadScorer:
    """What the DSE and DiPair scorers share once their inputs are checked: the head graph run in batches, task
    scores and rank keys from logits, the blend, the top-k order, and reranking a Hamming shortlist."""

    similarity = ""  # what the head's blend takes: "cosine" (DSE) or "minus_hamming" (DiPair)

    def __init__(self, bundle, block: dict, session):
        self.bundle, self.block, self.session = bundle, block, session
        self.kind = block["task_type"]
        self.outputs = int(block["head"]["outputs"])
        self.blend: Blend | None = None
        if block.get("blend") is not None:
            where = f"bundle {bundle.path}: manifest.json {block.get('method', 'pairs')} block"
            self.blend = Blend.from_dict(block["blend"], where)
            fits = block["blend"].get("bits") == bundle.bits if self.similarity == "minus_hamming" else \
                block["blend"].get("dim") == bundle.dim
            if self.blend.similarity != self.similarity or not fits or self.kind == "classes":
                what = f"{bundle.bits}-bit Hamming distances" if self.similarity == "minus_hamming" else \
                    f"{bundle.dim}-d embedding cosine"
                raise OndeviceError(f"{where}: the blend is not over this bundle's {what} for a single-score head; "
                                    "re-export the bundle")

    def _blend_on(self, blend: bool | None) -> bool:
        """None: the bundle's blend when it has one; True: it must have one; False: the head alone."""
        if blend is None:
            return self.blend is not None
        if blend and self.blend is None:
            raise OndeviceError(f"bundle {self.bundle.path} has no blend; re-export it (`ondevice pairs export` or "
                                "`dipair-export` fit one by default) or pass blend=False")
        return bool(blend)

    def _blend_keys(self, logits: np.ndarray, similarity: np.ndarray) -> np.ndarray:
        if self.blend is None:
            raise OndeviceError(f"bundle {self.bundle.path} has no blend; re-export it")
        return self.blend.keys(np.asarray(logits)[:, 0], similarity)

    def logits_and_similarity(self, a: list[str], b: list[str], similarity: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Head logits (n, outputs) of the text pairs and, with `similarity`, what this head's blend takes (the
        embeddings' cosine for DSE, minus the codes' Hamming distance for DiPair; float64 (n,)), from one encoder pass."""
        raise NotImplementedError

    def score_pairs(self, a: str | Sequence[str], b: str | Sequence[str],
                    blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(task scores as `pair_scores`, rank keys as `pair_keys`) of the text pairs (a[i], b[i]) from one encoder pass."""
        a, b = as_texts(a), as_texts(b)
        if len(a) != len(b):
            raise OndeviceError(f"got {len(a)} first and {len(b)} second texts; pairs need equal counts")
        on = self._blend_on(blend)
        logits, sim = self.logits_and_similarity(a, b, on)
        keys = self._blend_keys(logits, sim) if on else self.rank_key(logits).astype(np.float64)
        return self.transform(logits), keys

    def pair_keys(self, a: str | Sequence[str], b: str | Sequence[str], blend: bool | None = None) -> np.ndarray:
        """Rank keys (float64) of the text pairs (a[i], b[i]): the blend (default when the bundle has one) or the head's."""
        return self.score_pairs(a, b, blend)[1]

    def pair_decisions(self, a: str | Sequence[str], b: str | Sequence[str], blend: bool | None = None) -> np.ndarray:
        """Binary tasks: whether each pair is positive (`key > threshold`, both chosen on dev), blended by default."""
        return self.pair_keys(a, b, blend=blend) > self.decision_threshold(blend)

    def decision_threshold(self, blend: bool | None = None) -> float:
        """Binary tasks: the dev-chosen threshold on the rank key (the blend's, or with blend=False the head logit's)."""
        if self.kind != "binary":
            raise OndeviceError(f"decisions are for binary tasks; this head is {self.kind!r} (use pair_scores)")
        threshold = self.blend.threshold if self._blend_on(blend) else self.block.get("threshold")
        if threshold is None:
            raise OndeviceError(f"bundle {self.bundle.path}: the manifest has no dev threshold; re-export the bundle")
        return float(threshold)

    def _run(self, names: tuple[str, str], first: np.ndarray, second: np.ndarray, batch_size: int) -> np.ndarray:
        """Head logits (n, outputs) of input pairs (first[i], second[i]), `batch_size` rows per graph call."""
        out = np.empty((len(second), self.outputs), np.float32)
        for s in range(0, len(second), batch_size):
            try:
                out[s : s + batch_size] = self.session.run(["logits"], {
                    names[0]: np.ascontiguousarray(first[s : s + batch_size]), names[1]: second[s : s + batch_size]})[0]
            except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
                raise OndeviceError(f"bundle {self.bundle.path}: {self.block['file']} failed to run "
                                    f"({ort_error_line(exc)}); re-export the bundle") from None
        if not np.isfinite(out).all():
            raise OndeviceError(f"bundle {self.bundle.path}: {self.block['file']} gave non-finite logits for "
                                f"{int((~np.isfinite(out)).any(axis=1).sum())} of {len(out)} pairs; re-export the bundle")
        return out

    def transform(self, logits: np.ndarray) -> np.ndarray:
        """Task scores: regression -> the gold scale, binary -> probability, classes -> probabilities (n, classes)."""
        t = self.block["output_transform"]
        if self.kind == "regression":
            return logits[:, 0] * float(t["scale"]) + float(t["offset"])
        if self.kind == "binary":
            return 1.0 / (1.0 + np.exp(-logits[:, 0]))
        return _softmax(logits)

    def rank_key(self, logits: np.ndarray) -> np.ndarray:
        """What `rerank` sorts by: the score, or for classes the probability of the second label."""
        if self.kind == "classes":
            return _softmax(logits)[:, 1 if self.outputs > 1 else 0]
        return logits[:, 0]

    @staticmethod
    def _top(key: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys (k,), rows (k,)) of the k largest keys, best first, equal keys by smaller row."""
        order = np.lexsort((np.arange(len(key)), -key))[: int(k)]
        return key[order].astype(np.float32), order.astype(np.int64)

    def search_rerank(self, query: str, cache: np.ndarray, k: int = 10, shortlist: int = 1000,
                      blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Hamming top-`shortlist` from the attached index, reranked by the head (blended when the bundle has a blend,
        unless blend=False): (keys (k,), catalog ids (k,)). `cache[id]` is catalog item id's float vector.

        Equal keys go to the smaller id, so a shortlist covering the catalog gives the exhaustive order.
        """
        _, ids = self.bundle.search(query, k=int(shortlist))
        ids = np.sort(ids[0][ids[0] >= 0])  # ties in the head's score go to the smaller catalog id, as in `rerank`
        cache = np.asarray(cache)
        if len(ids) and ids[-1] >= len(cache):
            raise OndeviceError(f"the index returned catalog id {int(ids[-1])} but the cache holds {len(cache):,} rows; "
                                "give the cache of the whole catalog the index was built from (row i = id i)")
        keys, rows = self.rerank(query, cache[ids], k, blend=blend)
        return keys, ids[rows]


class PairScorer(HeadScorer):
    """The pair head of one bundle: logits of precomputed vectors, task scores, and reranking."""

    similarity = "cosine"

    def __init__(self, bundle, block: dict, session):
        super().__init__(bundle, block, session)
        self.dim = int(block["head"]["dim"])

    @classmethod
    def from_bundle(cls, bundle, threads: int = 0) -> PairScorer:
        """Load and verify the bundle's pair head (its manifest `pairs` block and checksummed graph)."""
        block, data = head_block(bundle, "pairs", "pair head", "ondevice pairs export")
        try:
            head = block["head"]
            if int(head["dim"]) != bundle.dim or block["task_type"] not in ("regression", "binary", "classes"):
                raise KeyError("head")
        except (KeyError, TypeError, ValueError):
            raise OndeviceError(f"bundle {bundle.path}: the manifest's pairs block is incomplete or does not match "
                                "the encoder; re-export the bundle") from None
        session = head_session(bundle, block, data, threads)
        check_head(bundle, block, session, {"u": [bundle.dim], "v": [bundle.dim]})
        return cls(bundle, block, session)

    def _vectors(self, x: Any, what: str) -> np.ndarray:
        arr = np.asarray(x, dtype=np.float32)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise OndeviceError(f"{what} must be float vectors of shape (n, {self.dim}), got {arr.shape}")
        return np.ascontiguousarray(arr)

    def logits(self, u: np.ndarray, v: np.ndarray, batch_size: int = 65536) -> np.ndarray:
        """Head logits float32 (n, outputs) of vector pairs (u[i], v[i]); a single u row is broadcast."""
        u, v = self._vectors(u, "u"), self._vectors(v, "v")
        if len(u) == 1 and len(v) > 1:
            u = np.broadcast_to(u, v.shape)
        if len(u) != len(v):
            raise OndeviceError(f"got {len(u)} and {len(v)} vectors; pairs need equal counts (or one u row)")
        return self._run(("u", "v"), u, v, batch_size)

    def pair_scores(self, a: str | Sequence[str], b: str | Sequence[str]) -> np.ndarray:
        """Task scores of the text pairs (a[i], b[i])."""
        a, b = as_texts(a), as_texts(b)
        if len(a) != len(b):
            raise OndeviceError(f"got {len(a)} first and {len(b)} second texts; pairs need equal counts")
        return self.transform(self.logits(*self._pair_vectors(a, b)))

    def _pair_vectors(self, a: list[str], b: list[str]) -> tuple[np.ndarray, np.ndarray]:
        uniq = list(dict.fromkeys([*a, *b]))
        pos = {t: i for i, t in enumerate(uniq)}
        vec = self.bundle.encode(uniq)
        return vec[[pos[t] for t in a]], vec[[pos[t] for t in b]]

    def blend_keys(self, logits: np.ndarray, cosines: np.ndarray) -> np.ndarray:
        """The bundle's blended rank keys (float64) of head logits (n, 1) and the same pairs' embedding cosines (n,)."""
        return self._blend_keys(logits, cosines)

    def logits_and_similarity(self, a: list[str], b: list[str], similarity: bool) -> tuple[np.ndarray, np.ndarray | None]:
        # loaded on use: pair metrics pull in the evaluation package, which scoring does not need
        from ondevice.pairs.metrics import cosines

        u, v = self._pair_vectors(a, b)
        return self.logits(u, v), (cosines(u, v) if similarity else None)

    def rerank(self, query: str, candidates: Sequence[str] | np.ndarray, k: int = 10,
               blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates for `query`: (rank keys (k,), candidate rows (k,)), best first, ties by row; by the blend of
        head and embedding cosine when the bundle has one, unless blend=False."""
        if not isinstance(query, str):
            raise OndeviceError(f"query must be a str, got {type(query).__name__}")
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise OndeviceError(f"k must be a positive integer, got {k!r}")
        if isinstance(candidates, np.ndarray):
            vec = self._vectors(candidates, "candidate vectors")
        else:
            vec = self.bundle.encode(as_texts(candidates)) if len(candidates) else np.zeros((0, self.dim), np.float32)
        if not len(vec):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        from ondevice.pairs.metrics import cosines

        q = self.bundle.encode([query])
        logits = self.logits(q, vec)
        if self._blend_on(blend):
            return self._top(self.blend_keys(logits, cosines(np.broadcast_to(q, vec.shape), vec)), k)
        return self._top(self.rank_key(logits), k)
