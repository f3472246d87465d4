"""Metric, probe and retrieval functions against scipy / scikit-learn / brute-force references."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.bits import hamming_reference, pack
from ondevice.eval import metrics as M
from ondevice.eval.probe import kfold_accuracy, probe_features, split_accuracy
from ondevice.eval.retrieval import sample_queries, topk

stats = pytest.importorskip("scipy.stats")
skm = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_pearson_match_scipy_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, size=200).astype(float)  # many ties, like gold scores and Hamming distances
    y = x + rng.normal(size=200)
    y[::7] = y[0]
    assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)


def test_constant_input_gives_nan() -> None:
    assert np.isnan(M.spearman(np.ones(5), np.arange(5)))


def test_accuracy_f1_match_sklearn() -> None:
    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    assert M.accuracy(t, p) == pytest.approx(skm.accuracy_score(t, p))
    assert M.f1_binary(t, p) == pytest.approx(skm.f1_score(t, p))
    assert M.f1_binary(np.zeros(4), np.zeros(4)) == 0.0


def test_cosine_and_hamming_pairs() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(20, 8)), rng.normal(size=(20, 8))
    ref = np.array([np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v) for u, v in zip(a, b)])
    np.testing.assert_allclose(M.cosine_pairs(a, b), ref)
    assert M.cosine_pairs(np.zeros((1, 3)), np.ones((1, 3)))[0] == 0.0
    ca, cb = pack(rng.integers(0, 2, (20, 70))), pack(rng.integers(0, 2, (20, 70)))
    np.testing.assert_array_equal(M.hamming_pairs(ca, cb), np.diag(hamming_reference(ca, cb)))
    np.testing.assert_array_equal(M.pair_scores(ca, cb), -np.diag(hamming_reference(ca, cb)))


def test_above_mean_rule() -> None:
    assert M.above_mean(np.array([0.1, 0.5, 0.9, 0.2])).tolist() == [0, 1, 1, 0]


def test_recall_at_k() -> None:
    found = np.array([[1, 2, 3], [4, 5, 6]])
    ref = np.array([[3, 2, 9], [7, 8, 9]])
    assert M.recall_at_k(found, ref) == pytest.approx((2 / 3 + 0) / 2)


def test_topk_cosine_matches_bruteforce() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    q = sample_queries(300, 40, seed=1)
    got = topk(x, q, k=5)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    for row, qi in zip(got, q):
        s = xn @ xn[qi]
        s[qi] = -np.inf
        np.testing.assert_array_equal(row, np.argsort(-s, kind="stable")[:5])


def test_topk_hamming_ties_by_index_and_query_excluded() -> None:
    rng = np.random.default_rng(0)
    codes = pack(rng.integers(0, 2, (500, 24)))  # 24 bits: many tied distances
    q = np.array([0, 7, 499])
    got = topk(codes, q, k=10, bits=24)
    d = hamming_reference(codes[q], codes).astype(float)
    for row, qi, dist in zip(got, q, d):
        dist[qi] = np.inf
        expect = np.lexsort((np.arange(len(dist)), dist))[:10]
        np.testing.assert_array_equal(row, expect)
        assert qi not in row


def test_sample_queries_seeded() -> None:
    a, b = sample_queries(1000, 50, 3), sample_queries(1000, 50, 3)
    np.testing.assert_array_equal(a, b)
    assert len(set(a.tolist())) == 50
    assert len(sample_queries(10, 50, 0)) == 10


def test_probe_features_unpack_codes() -> None:
    bits = np.array([[1, 0, 1, 1, 0, 0, 0, 0, 1, 1]])
    feats = probe_features(pack(bits), 10)
    np.testing.assert_array_equal(feats, bits * 2.0 - 1.0)
    assert probe_features(np.ones((2, 3), np.float64)).dtype == np.float32


def test_probes_learn_separable_data() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 10)).astype(np.float32)
    y = (x[:, 0] + 0.1 * rng.normal(size=400) > 0).astype(int)
    r = kfold_accuracy(x, y, seed=0)
    assert r["acc"] > 90 and r["C"] in (0.01, 0.1, 1.0)
    s = split_accuracy(x[:300], y[:300], x[300:], y[300:], seed=0)
    assert s["acc"] > 90 and s["n_test"] == 100
    y3 = np.digitize(x[:, 1], [-0.5, 0.5])  # 3 classes, like TREC's multinomial probe
    assert split_accuracy(x[:300], y3[:300], x[300:], y3[300:], x[250:300], y3[250:300])["acc"] > 80
