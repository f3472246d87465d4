"""DSE augmentation pairs: neighbours are the true Hamming nearest ones, no training pair repeats, seeded."""

from __future__ import annotations

import numpy as np

from ondevice.binarize import Binarizer
from ondevice.bits import hamming_reference
from ondevice.pairs.augment import AugmentConfig, augmentation_pairs, training_sentences
from ondevice.pairs.data import PairData


def _train(n=60, seed=0):
    rng = np.random.default_rng(seed)
    words = ["cat", "dog", "sun", "moon", "red", "blue", "big", "small", "runs", "sleeps"]
    sents = [" ".join(rng.choice(words, 4)) + f" {i}" for i in range(n)]
    return PairData("stsb", "train", sents[: n // 2], sents[n // 2 :], np.zeros(n // 2))


def _encode(texts):
    return np.stack([np.random.default_rng(abs(hash(t.split()[-1])) % 1000).normal(size=16) for t in texts]).astype(np.float32)


def test_neighbour_pairs_are_hamming_nearest_and_new():
    train = _train()
    cfg = AugmentConfig(random_pairs=0, neighbors=1, bits=64, seed=3)
    aug = augmentation_pairs(train, _encode, cfg)
    sents = training_sentences(train)
    vec = _encode(sents)
    codes = Binarizer.fit(vec, method="random", bits=64, seed=3).transform(vec)
    d = hamming_reference(codes, codes).astype(float)
    np.fill_diagonal(d, np.inf)
    pos = {s: i for i, s in enumerate(sents)}
    train_keys = {frozenset(p) for p in zip(train.a, train.b)}
    keys = [frozenset(p) for p in zip(aug.a, aug.b)]
    assert len(keys) == len(set(keys)) and not set(keys) & train_keys
    for x, y in zip(aug.a, aug.b):  # each pair is (sentence, one of its nearest by Hamming distance)
        i, j = pos[x], pos[y]
        assert d[i, j] == d[i].min() or d[j, i] == d[j].min()
    assert np.isnan(aug.gold).all()


def test_random_pairs_are_seeded_and_counted():
    train = _train()
    a = augmentation_pairs(train, None, AugmentConfig(random_pairs=25, neighbors=0, seed=1))
    b = augmentation_pairs(train, None, AugmentConfig(random_pairs=25, neighbors=0, seed=1))
    c = augmentation_pairs(train, None, AugmentConfig(random_pairs=25, neighbors=0, seed=2))
    assert len(a) == 25 and a.a == b.a and a.b == b.b and a.a != c.a
    assert all(x != y for x, y in zip(a.a, a.b))


def test_extra_sentences_pair_with_their_nearest_training_or_extra_sentence():
    train = _train()
    own = training_sentences(train)
    extra = [f"moon sun red dog {i}" for i in range(100, 140)] + [own[0]]  # a training sentence is not extra
    cfg = AugmentConfig(random_pairs=5, neighbors=1, bits=64, seed=3, extra_max=30)
    base = augmentation_pairs(train, _encode, cfg)
    aug = augmentation_pairs(train, _encode, cfg, extra)
    assert aug.a[: len(base)] == base.a and aug.b[: len(base)] == base.b  # extras come after, nothing else moves
    pool = extra[:40]
    drawn = [pool[i] for i in np.sort(np.random.default_rng(3).permutation(40)[:30])]  # the seeded draw of 30
    both = own + drawn
    vec = _encode(both)
    codes = Binarizer.fit(vec, method="random", bits=64, seed=3).transform(vec)
    d = hamming_reference(codes, codes).astype(float)
    np.fill_diagonal(d, np.inf)
    pos = {s: i for i, s in enumerate(both)}
    new = list(zip(aug.a[len(base):], aug.b[len(base):]))
    assert 0 < len(new) <= 30 and {x for x, _ in new} <= set(drawn)
    for x, y in new:  # each drawn extra sentence with its Hamming nearest among training + drawn extra sentences
        assert d[pos[x], pos[y]] == d[pos[x]].min()
    keys = [frozenset(p) for p in zip(aug.a, aug.b)]
    for x in drawn:  # every drawn sentence got a pair with a nearest one (or its mutual nearest took it first)
        assert any(x in k and d[pos[x], pos[next(iter(k - {x}))]] == d[pos[x]].min() for k in keys if x in k)
    assert len(keys) == len(set(keys)) and not set(keys) & {frozenset(p) for p in zip(train.a, train.b)}
