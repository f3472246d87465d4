"""Task metrics of an exported pair bundle, through the on-device runtime (onnxruntime graphs, not the torch run).

What an app gets: the head's scores (DSE `pairs` block or DiPair `dipair` block), and for a bundle with a blend the
blend it ranks by (head + embedding cosine for DSE, head + Hamming distance for DiPair); binary decisions use the thresholds the manifest stores (chosen on dev at export).
"""

from __future__ import annotations

from pathlib import Path

from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import PairData, task_spec
from ondevice.pairs.metrics import evaluate_scores
from ondevice.runtime import Bundle


def evaluate_pair_bundle(path: str | Path, data: PairData, precision: str | None = None, threads: int = 0) -> dict:
    """Metrics of the bundle's head on `data` (and of its blend, when it has one), with the manifest's thresholds."""
    bundle = Bundle.load(path, precision=precision, threads=threads)
    key = "dipair" if "dipair" in bundle.manifest else "pairs" if "pairs" in bundle.manifest else None
    if key is None:
        raise OndeviceError(f"bundle {bundle.path} has no pair head; export one with `ondevice pairs export` or "
                            "`ondevice pairs dipair-export`")
    block = bundle.manifest[key]
    if block.get("task") != data.task:
        raise OndeviceError(f"bundle {bundle.path} scores {block.get('task')!r} pairs, not {data.task!r}; pass --task {block.get('task')}")
    spec = task_spec(data.task)
    out: dict = {"bundle": str(bundle.path), "precision": bundle.manifest["precision"], "head_kind": key, "bits": bundle.bits}
    scorer = bundle.pair_scorer(threads)
    logits, sim = scorer.logits_and_similarity(data.a, data.b, similarity=scorer.blend is not None)
    out["head"] = evaluate_scores(spec, logits, data.gold, block.get("threshold"))
    if scorer.blend is not None:
        keys = scorer.blend.keys(logits[:, 0], sim)
        out["blend"] = {**evaluate_scores(spec, keys, data.gold, scorer.blend.threshold), "weight": scorer.blend.weight,
                        "similarity": scorer.blend.similarity}
    return out
