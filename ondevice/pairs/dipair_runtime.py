"""DiPair scoring on device (numpy + onnxruntime, no torch): token states from the bundle's encoder, the head graph.

    dp = Bundle.load("bundle").dipair()                     # a bundle from `ondevice pairs dipair-export`
    cache, codes = dp.states_and_codes(catalog_texts, role="b", int8=True)   # (n, M, D) int8 + Hamming codes, one pass
    dp.pair_scores(["how do I reset it?"], ["how to reset my phone"])     # task scores
    keys, rows = dp.rerank("reset phone", cache, k=10, codes=codes)   # texts, or cached states (+ codes)
    keys, ids = dp.search_rerank("reset phone", cache, k=10, shortlist=100)   # Hamming shortlist, then the head

A bundle exported with a blend (`dipair-export`, on by default) ranks by `z(logit) + w * z(-Hamming distance)`, the
constants fitted on the task's dev pairs (`ondevice.pairs.blend`); `blend=False` ranks by the head alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.pairs.blend import hamming_distances
from ondevice.pairs.dipair import dequantize_states
from ondevice.pairs.runtime import HeadScorer, check_head, head_block, head_session
from ondevice.tokenizer import as_texts


class DiPairScorer(HeadScorer):
    """The DiPair head of one bundle: token states of texts, head logits of cached states, scores, reranking."""

    similarity = "minus_hamming"

    def __init__(self, bundle, block: dict, session):
        super().__init__(bundle, block, session)
        head = block["head"]
        self.n, self.m, self.d = int(head["n"]), int(head["m"]), int(head["d"])
        # what the encoder graph really outputs, not what the manifest claims
        self.int8_outputs = {"token_states_a_int8", "token_states_b_int8"} <= {o.name for o in bundle.session.get_outputs()}

    @classmethod
    def from_bundle(cls, bundle, threads: int = 0) -> DiPairScorer:
        """Load and verify the bundle's DiPair head (manifest `dipair` block, checksummed graph, encoder outputs)."""
        block, data = head_block(bundle, "dipair", "DiPair head", "ondevice pairs dipair-export")
        try:
            head = block["head"]
            shapes = {o.name: o.shape for o in bundle.session.get_outputs()}
            if shapes.get("token_states_b", [None])[1:] != [int(head["m"]), int(head["d"])] or \
                    shapes.get("token_states_a", [None])[1:] != [int(head["n"]), int(head["d"])] or \
                    block["task_type"] not in ("regression", "binary", "classes"):
                raise KeyError("head")
        except (KeyError, TypeError, ValueError):
            raise OndeviceError(f"bundle {bundle.path}: the manifest's dipair block does not match encoder.onnx's token-state "
                                "outputs; re-export the bundle") from None
        session = head_session(bundle, block, data, threads)
        n, m, d = int(head["n"]), int(head["m"]), int(head["d"])
        check_head(bundle, block, session, {"states_a": [n, d], "states_b": [m, d]})
        return cls(bundle, block, session)

    def states(self, texts: str | Sequence[str], role: str = "b", int8: bool = False, batch_size: int = 256) -> np.ndarray:
        """Token states of texts as side 'a' (N slots) or 'b' (M slots): float32, or int8 (q = round(127 x)) to cache."""
        return self._encode(texts, role, int8, batch_size, codes=False)[0]

    def states_and_codes(self, texts: str | Sequence[str], role: str = "b", int8: bool = False,
                         batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """`states` and the texts' packed Hamming codes (uint8 (n, bits/8)) from one encoder pass: what a catalog caches
        for a blended rerank."""
        return self._encode(texts, role, int8, batch_size, codes=True)

    def _encode(self, texts: str | Sequence[str], role: str, int8: bool, batch_size: int,
                codes: bool) -> tuple[np.ndarray, np.ndarray | None]:
        if role not in ("a", "b"):
            raise OndeviceError(f"role must be 'a' or 'b', got {role!r}")
        if int8 and not self.int8_outputs:
            raise OndeviceError("this bundle's encoder has no int8 state outputs; quantize with dipair.quantize_states "
                                "or re-export with int8 states")
        texts = as_texts(texts)
        slots = self.n if role == "a" else self.m
        out = np.zeros((len(texts), slots, self.d), np.int8 if int8 else np.float32)
        code = np.zeros((len(texts), self.bundle.code_bytes), np.uint8) if codes else None
        names = [f"token_states_{role}" + ("_int8" if int8 else "")] + (["code"] if codes else [])
        for s in range(0, len(texts), batch_size):
            ids, lengths = self.bundle.tokenizer.batch(texts[s : s + batch_size])
            got = self.bundle.session.run(names, {"ids": ids, "lengths": lengths})
            out[s : s + batch_size] = got[0]
            if codes:
                code[s : s + batch_size] = got[1]
        return out, code

    def _states(self, x: Any, slots: int, what: str) -> np.ndarray:
        arr = np.asarray(x)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3 or arr.shape[1:] != (slots, self.d):
            raise OndeviceError(f"{what} must be token states of shape (n, {slots}, {self.d}), got {arr.shape}")
        if arr.dtype == np.int8:
            return dequantize_states(arr)
        if arr.dtype.kind != "f":
            raise OndeviceError(f"{what} must be float32 or int8 states, got {arr.dtype}")
        return np.ascontiguousarray(arr, np.float32)

    def logits(self, sa: np.ndarray, sb: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """Head logits (n, outputs) of state pairs (sa[i], sb[i]), float32 or int8; a single sa row is broadcast."""
        sa, sb = self._states(sa, self.n, "states_a"), self._states(sb, self.m, "states_b")
        if len(sa) == 1 and len(sb) > 1:
            sa = np.broadcast_to(sa, (len(sb), self.n, self.d))
        if len(sa) != len(sb):
            raise OndeviceError(f"got {len(sa)} and {len(sb)} states; pairs need equal counts (or one states_a row)")
        return self._run(("states_a", "states_b"), sa, sb, batch_size)

    def pair_scores(self, a: str | Sequence[str], b: str | Sequence[str]) -> np.ndarray:
        """Task scores of the text pairs (a[i], b[i])."""
        a, b = as_texts(a), as_texts(b)
        if len(a) != len(b):
            raise OndeviceError(f"got {len(a)} first and {len(b)} second texts; pairs need equal counts")
        return self.transform(self.logits(self.states(a, "a"), self.states(b, "b")))

    def blend_keys(self, logits: np.ndarray, distances: np.ndarray) -> np.ndarray:
        """The bundle's blended rank keys (float64) of head logits (n, 1) and the same pairs' Hamming distances (n,)."""
        return self._blend_keys(logits, -np.asarray(distances, np.float64))

    def logits_and_similarity(self, a: list[str], b: list[str], similarity: bool) -> tuple[np.ndarray, np.ndarray | None]:
        (sa, ca), (sb, cb) = self._encode(a, "a", False, 256, similarity), self._encode(b, "b", False, 256, similarity)
        return self.logits(sa, sb), (-hamming_distances(ca, cb).astype(np.float64) if similarity else None)

    def rerank(self, query: str, candidates: Sequence[str] | np.ndarray, k: int = 10, codes: np.ndarray | None = None,
               blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates (texts, or cached side-b states with their packed `codes` for the blend) for `query`:
        (keys (k,), rows (k,)), ties by row; ranked by the blend when the bundle has one, unless blend=False."""
        if not isinstance(query, str):
            raise OndeviceError(f"query must be a str, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise OndeviceError(f"k must be a positive integer, got {k!r}")
        on = self._blend_on(blend)
        if isinstance(candidates, np.ndarray):
            cand = self._states(candidates, self.m, "candidate states")
            if on:
                if codes is None:
                    raise OndeviceError("this bundle ranks by head + Hamming blend: pass codes= (the candidates' packed "
                                        "codes, bundle.codes) with cached states, or blend=False")
                codes = np.asarray(codes)
                if codes.dtype != np.uint8 or codes.shape != (len(cand), self.bundle.code_bytes):
                    raise OndeviceError(f"codes must be uint8 of shape ({len(cand)}, {self.bundle.code_bytes}), "
                                        f"got {codes.dtype} {codes.shape}")
        else:
            texts = list(candidates)
            if not texts:
                return np.zeros(0, np.float32), np.zeros(0, np.int64)
            cand, codes = self._encode(texts, "b", False, 256, on)
        if not len(cand):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        qs, qc = self._encode([query], "a", False, 1, on)
        logits = self.logits(qs, cand)
        if not on:
            return self._top(self.rank_key(logits), k)
        return self._top(self.blend_keys(logits, hamming_distances(qc[0], codes)), k)

    def search_rerank(self, query: str, cache: np.ndarray, k: int = 10, shortlist: int = 1000,
                      blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Hamming top-`shortlist` from the attached index, reranked by the blend of the head and those distances (the
        head alone with blend=False): (keys (k,), catalog ids (k,)); `cache[id]` is catalog item id's side-b states."""
        if not isinstance(query, str):
            raise OndeviceError(f"query must be a str, got {type(query).__name__}")
        qs, qc = self._encode([query], "a", False, 1, codes=True)  # one encoder pass: the query's states and its code
        dist, ids = self.bundle.search_codes(qc, k=shortlist)
        keep = ids[0] >= 0
        order = np.argsort(ids[0][keep], kind="stable")  # equal keys go to the smaller catalog id, as in `rerank`
        ids, dist = ids[0][keep][order], dist[0][keep][order]
        if not len(ids):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        cache = np.asarray(cache)
        if ids.max() >= len(cache):
            raise OndeviceError(f"the index returned catalog id {int(ids.max())} but the cache holds {len(cache):,} rows; "
                                "give the states of the whole catalog the index was built from (row i = id i)")
        logits = self.logits(qs, cache[ids])
        key = self.blend_keys(logits, dist) if self._blend_on(blend) else self.rank_key(logits)
        keys, rows = self._top(key, k)
        return keys, ids[rows]
