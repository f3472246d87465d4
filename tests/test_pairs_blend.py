"""The head + similarity blend: weight chosen on dev, the head exactly at weight 0, manifest checks, Hamming distances."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import task_spec
from ondevice.pairs.blend import WEIGHTS, Blend, fit_blend, hamming_distances, minus_hamming
from ondevice.pairs.metrics import evaluate_scores, spearman


def _dev(n=300, seed=0):
    rng = np.random.default_rng(seed)
    gold = rng.uniform(0, 5, n)
    head = gold + rng.normal(0, 1.5, n)  # two noisy views of the gold score: together better than either
    sim = 0.1 * gold + rng.normal(0, 0.15, n)
    return head, sim, gold


def test_fit_picks_the_dev_best_weight_and_reports_dev():
    spec = task_spec("stsb")
    head, sim, gold = _dev()
    blend, dev = fit_blend(spec, head, sim, gold, "cosine")
    scores = [spearman(Blend("cosine", float(w), head.mean(), head.std(), sim.mean(), sim.std()).keys(head, sim), gold)
              for w in WEIGHTS]
    assert blend.weight == float(WEIGHTS[int(np.argmax(scores))]) > 0
    assert dev["spearman"] == round(100 * max(scores), 2) > dev["head_alone"] == round(100 * spearman(head, gold), 2)
    assert dev["similarity_alone"] == round(100 * spearman(sim, gold), 2) and blend.threshold is None
    np.testing.assert_allclose(blend.keys(head, sim), (head - head.mean()) / head.std()
                               + blend.weight * (sim - sim.mean()) / sim.std())


def test_a_similarity_against_the_signal_gets_weight_zero_which_is_the_head():
    spec = task_spec("stsb")
    head, sim, gold = _dev(seed=1)
    blend, dev = fit_blend(spec, head, -sim, gold, "minus_hamming")
    assert blend.weight == 0 and dev["spearman"] == dev["head_alone"]
    assert spearman(blend.keys(head, -sim), head) == pytest.approx(1.0)


def test_binary_threshold_is_chosen_on_the_blended_dev_keys():
    spec = task_spec("qqp")
    head, sim, gold = _dev(seed=2)
    label = (gold > 2.5).astype(int)
    blend, dev = fit_blend(spec, head, sim, label, "minus_hamming")
    keys = blend.keys(head, sim)
    assert blend.threshold is not None
    assert dev["accuracy"] == evaluate_scores(spec, keys, label, blend.threshold)["accuracy"] >= dev["head_alone"]
    with pytest.raises(OndeviceError, match="classes"):
        fit_blend(task_spec("sick-e"), head, sim, label, "cosine")
    with pytest.raises(OndeviceError, match="similarity"):
        fit_blend(spec, head, sim, label, "dot")


def test_from_dict_round_trips_and_refuses_bad_values():
    b = Blend("minus_hamming", 1.25, 0.1, 0.5, -30.0, 4.0, threshold=0.3)
    assert Blend.from_dict(b.to_dict(), "x") == b
    assert Blend.from_dict({**b.to_dict(), "threshold": None}, "x").threshold is None
    for key, value in (("weight", "1"), ("weight", True), ("head_std", 0.0), ("sim_std", -1.0), ("sim_mean", float("nan")),
                       ("weight", -0.5), ("similarity", "dot"), ("threshold", float("inf"))):
        with pytest.raises(OndeviceError, match="re-export"):
            Blend.from_dict({**b.to_dict(), key: value}, "x")
    with pytest.raises(OndeviceError, match="similarity"):
        Blend.from_dict(["not", "a", "dict"], "x")


@pytest.mark.parametrize("nbytes", [1, 8, 33])
def test_hamming_distances_against_bit_counts(nbytes):
    rng = np.random.default_rng(nbytes)
    a = rng.integers(0, 256, (20, nbytes), dtype=np.uint8)
    b = rng.integers(0, 256, (20, nbytes), dtype=np.uint8)
    want = np.array([sum(int(x ^ y).bit_count() for x, y in zip(ra, rb)) for ra, rb in zip(a, b)])
    np.testing.assert_array_equal(hamming_distances(a, b), want)
    np.testing.assert_array_equal(hamming_distances(a[0], b), [sum(int(x ^ y).bit_count() for x, y in zip(a[0], rb)) for rb in b])
    assert minus_hamming(a, b).dtype == np.float64 and (minus_hamming(a, b) == -want).all()
    assert (minus_hamming(a, a) == 0).all()
