"""A pair head's logit blended with its encoder's own similarity: `z(logit) + w * z(similarity)`, w chosen on dev.

On STS-B the DiPair head and the cosine (or minus the Hamming distance) of the same encoder's vectors rank pairs
differently enough that a blend beats either (docs/results/pairs.md). A Hamming
shortlist already has each candidate's distance, so a bundle can blend at no extra cache cost: `fit_blend` on dev
pairs gives the constants a bundle stores (`dipair-export`), `Blend.keys` is what the runtimes compute.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from ondevice.errors import OndeviceError

if TYPE_CHECKING:
    from ondevice.eval.pair_tasks import TaskSpec

WEIGHTS = np.round(np.arange(0, 3.0001, 0.05), 2)  # weight of the similarity's z-score next to the head's
SIMILARITIES = ("cosine", "minus_hamming")


@dataclass
class Blend:
    """key = (logit - head_mean) / head_std + weight * (similarity - sim_mean) / sim_std; binary tasks decide
    `key > threshold`. `similarity` is "cosine" (of the float vectors) or "minus_hamming" (minus the codes' distance)."""

    similarity: str
    weight: float
    head_mean: float
    head_std: float
    sim_mean: float
    sim_std: float
    threshold: float | None = None

    def keys(self, logits: np.ndarray, similarity: np.ndarray) -> np.ndarray:
        """Blended keys (float64) of first logits and similarities of the same pairs."""
        h = np.asarray(logits, np.float64)
        s = np.asarray(similarity, np.float64)
        return (h - self.head_mean) / self.head_std + self.weight * (s - self.sim_mean) / self.sim_std

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object, where: str) -> Blend:
        """A Blend from a manifest block; anything missing, non-finite or out of range is a one-line error."""
        def number(key: str, positive: bool = False) -> float:
            v = d.get(key) if isinstance(d, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or (positive and v <= 0):
                raise OndeviceError(f"{where}: blend {key} is {v!r}, not a {'positive ' if positive else ''}finite number; "
                                    "re-export the bundle")
            return float(v)

        sim = d.get("similarity") if isinstance(d, dict) else None
        if sim not in SIMILARITIES:
            raise OndeviceError(f"{where}: blend similarity is {sim!r}, expected one of {SIMILARITIES}; re-export the bundle")
        threshold = None if d.get("threshold") is None else number("threshold")
        weight = number("weight")
        if weight < 0:
            raise OndeviceError(f"{where}: blend weight {weight} is negative; re-export the bundle")
        return cls(sim, weight, number("head_mean"), number("head_std", True), number("sim_mean"), number("sim_std", True),
                   threshold)


def fit_blend(spec: TaskSpec, logits: np.ndarray, similarity: np.ndarray, gold: np.ndarray, kind: str) -> tuple[Blend, dict]:
    """The blend of dev pairs' first logits and similarities that scores dev best (ties keep the smaller weight; w = 0
    is the head alone), and its dev metrics: head alone, similarity alone, blended."""
    # imported here: metrics pulls in ondevice.eval, which the runtime (it only computes keys) does not need
    from ondevice.pairs.metrics import best_threshold, evaluate_scores

    if spec.kind == "classes":
        raise OndeviceError(f"task {spec.name} has classes; a blend needs a single score (regression or binary)")
    if kind not in SIMILARITIES:
        raise OndeviceError(f"similarity must be one of {SIMILARITIES}, got {kind!r}")
    h = np.asarray(logits, np.float64)
    s = np.asarray(similarity, np.float64)
    base = Blend(kind, 0.0, float(h.mean()), max(float(h.std()), 1e-12), float(s.mean()), max(float(s.std()), 1e-12))

    def score(keys: np.ndarray) -> tuple[float, float | None]:
        t = best_threshold(keys, gold) if spec.kind == "binary" else None
        return evaluate_scores(spec, keys, gold, t)[spec.metric], t

    tried = [score(Blend(**{**base.to_dict(), "weight": float(w)}).keys(h, s)) for w in WEIGHTS]
    best = int(np.argmax([m for m, _ in tried]))
    blend = Blend(**{**base.to_dict(), "weight": float(WEIGHTS[best]), "threshold": tried[best][1]})
    dev = {spec.metric: tried[best][0], "head_alone": tried[0][0], "similarity_alone": score(s)[0], "n": len(h),
           "weights_tried": [float(WEIGHTS[0]), float(WEIGHTS[-1]), 0.05]}
    return blend, dev


def hamming_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distance (int64) of row-paired packed codes; one row of `a` is compared with every row of `b`."""
    return np.unpackbits(np.asarray(a, np.uint8) ^ np.asarray(b, np.uint8), axis=-1).sum(-1, dtype=np.int64)


def minus_hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minus the Hamming distance of row-paired packed codes, float64 (the similarity a blend takes)."""
    return -hamming_distances(a, b).astype(np.float64)
