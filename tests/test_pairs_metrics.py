"""Metrics: the dev threshold is accuracy-optimal (brute force), scores match scipy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ondevice.pairs.data import TASKS
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
