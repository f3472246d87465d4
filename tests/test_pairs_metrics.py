"""Metrics: the dev threshold is accuracy-optimal (brute force), scores match scipy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ondevice.eval.pair_tasks import TASKS
from ondevice.pairs.metrics import accuracy_f1, best_threshold, evaluate_scores, spearman


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1)), min_size=1, max_size=40))
def test_best_threshold_is_accuracy_optimal(rows):
    s = np.array([r[0] for r in rows], float)
    g = np.array([r[1] for r in rows])
    t = best_threshold(s, g)
    brute = max(((s > c) == g).mean() for c in np.concatenate([[s.min() - 1], s]))
    assert ((s > t) == g).mean() == brute


def test_accuracy_f1_and_task_metrics():
    acc, f1 = accuracy_f1(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 1]))
    assert acc == 0.5 and f1 == 0.5
    x = np.arange(10.0)
    assert spearman(x, x ** 3) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)
    m = evaluate_scores(TASKS["mrpc"], np.array([[2.0], [-1.0]]), np.array([1, 1]), threshold=0.0)
    assert m["accuracy"] == 50.0 and m["threshold"] == 0.0
    m = evaluate_scores(TASKS["sick-e"], np.array([[0, 2, 1], [3, 0, 0]]), np.array([1, 2]))
    assert m["accuracy"] == 50.0


def test_pair_cosines_and_cosine_metrics_against_a_direct_computation():
    from types import SimpleNamespace

    from ondevice.eval.pair_tasks import task_spec
    from ondevice.pairs.metrics import best_threshold, cosine_metrics, evaluate_scores, pair_cosines

    rng = np.random.default_rng(1)
    words = [f"s{i}" for i in range(30)]
    table = {w: rng.normal(size=5) for w in words}
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.stack([table[t] for t in texts])

    a, b = list(rng.choice(words, 40)), list(rng.choice(words, 40))
    got = pair_cosines(encode, a, b)
    want = [table[x] @ table[y] / np.linalg.norm(table[x]) / np.linalg.norm(table[y]) for x, y in zip(a, b)]
    assert np.allclose(got, want) and len(calls) == 1 and len(calls[0]) == len(set(a) | set(b))  # each sentence once
    gold = (np.asarray(want) > 0).astype(int)
    dev = test = SimpleNamespace(a=a, b=b, gold=gold)
    out = cosine_metrics(task_spec("mrpc"), encode, dev, test)
    assert out == evaluate_scores(task_spec("mrpc"), got, gold, best_threshold(got, gold)) and out["accuracy"] == 100.0
    reg = SimpleNamespace(a=a, b=b, gold=np.asarray(want) * 2 + 2.5)
    assert cosine_metrics(task_spec("stsb"), encode, reg, reg)["spearman"] == 100.0
    assert "note" in cosine_metrics(task_spec("sick-e"), encode, dev, test)
