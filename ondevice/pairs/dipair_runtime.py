"""DiPair scoring on device (numpy + onnxruntime, no torch): token states from the bundle's encoder, the head graph.

    dp = Bundle.load("bundle").dipair()                     # a bundle from `ondevice pairs dipair-export`
    cache = dp.states(catalog_texts, role="b", int8=True)    # (n, M, D) int8: M x D bytes per catalog item
    dp.pair_scores(["how do I reset it?"], ["how to reset my phone"])     # task scores
    keys, rows = dp.rerank("reset phone", cache, k=10)                   # texts or cached states
    keys, ids = dp.search_rerank("reset phone", cache, k=10, shortlist=100)   # Hamming shortlist, then the head
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.pairs.dipair import dequantize_states
from ondevice.pairs.runtime import HeadScorer, check_head, head_block, head_session


class DiPairScorer(HeadScorer):
    """The DiPair head of one bundle: token states of texts, head logits of cached states, scores, reranking."""

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
        from ondevice.tokenizer import as_texts

        if role not in ("a", "b"):
            raise OndeviceError(f"role must be 'a' or 'b', got {role!r}")
        if int8 and not self.int8_outputs:
            raise OndeviceError("this bundle's encoder has no int8 state outputs; quantize with dipair.quantize_states "
                                "or re-export with int8 states")
        texts = as_texts(texts)
        slots = self.n if role == "a" else self.m
        out = np.zeros((len(texts), slots, self.d), np.int8 if int8 else np.float32)
        name = f"token_states_{role}" + ("_int8" if int8 else "")
        for s in range(0, len(texts), batch_size):
            ids, lengths = self.bundle.tokenizer.batch(texts[s : s + batch_size])
            out[s : s + batch_size] = self.bundle.session.run([name], {"ids": ids, "lengths": lengths})[0]
        return out

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
        from ondevice.tokenizer import as_texts

        a, b = as_texts(a), as_texts(b)
        if len(a) != len(b):
            raise OndeviceError(f"got {len(a)} first and {len(b)} second texts; pairs need equal counts")
        return self.transform(self.logits(self.states(a, "a"), self.states(b, "b")))

    def rerank(self, query: str, candidates: Sequence[str] | np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates (texts or cached side-b states) for `query` by the head: (keys (k,), rows (k,)), ties by row."""
        if not isinstance(query, str):
            raise OndeviceError(f"query must be a str, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise OndeviceError(f"k must be a positive integer, got {k!r}")
        if isinstance(candidates, np.ndarray):
            cand = self._states(candidates, self.m, "candidate states")
        else:
            cand = self.states(list(candidates), "b") if len(candidates) else np.zeros((0, self.m, self.d), np.float32)
        if not len(cand):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        return self._top(self.rank_key(self.logits(self.states([query], "a"), cand)), k)
