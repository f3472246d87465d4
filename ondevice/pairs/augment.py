"""DSE augmentation: extra unlabeled pairs made from the training sentences, to be scored by the teacher.

Two kinds, both seeded and deduplicated (unordered) against the training pairs and each other:
- random pairings of two distinct training sentences (mostly unrelated: teaches the low end of the scale);
- nearest-neighbour pairings: every training sentence with its nearest other sentence by Hamming distance of
  the SRA student's binary codes (`HammingIndex`, random-projection codes), i.e. the hard near-duplicates a
  search would return, which is exactly what the head later reranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ondevice.pairs.data import PairData


@dataclass
class AugmentConfig:
    """How many augmentation pairs of each kind; saved with the student."""

    random_pairs: int = 5000
    neighbors: int = 1  # nearest-neighbour pairings per training sentence
    bits: int = 256
    seed: int = 0


def training_sentences(train: PairData) -> list[str]:
    """Distinct sentences of the training pairs, in first-seen order."""
    return list(dict.fromkeys([*train.a, *train.b]))


def _key(x: str, y: str) -> tuple[str, str]:
    return (x, y) if x <= y else (y, x)


def augmentation_pairs(train: PairData, encode: Callable[[list[str]], np.ndarray] | None,
                       config: AugmentConfig) -> PairData:
    """Random and Hamming-nearest-neighbour pairs of training sentences (gold = NaN: no label)."""
    sentences = training_sentences(train)
    seen = {_key(x, y) for x, y in zip(train.a, train.b)}
    a: list[str] = []
    b: list[str] = []

    def add(x: str, y: str) -> None:
        k = _key(x, y)
        if x != y and k not in seen:
            seen.add(k)
            a.append(x)
            b.append(y)

    if config.neighbors > 0 and encode is not None and len(sentences) > 1:
        from ondevice.binarize import Binarizer
        from ondevice.index import HammingIndex

        vectors = np.asarray(encode(sentences), np.float32)
        codes = Binarizer.fit(vectors, method="random", bits=config.bits, seed=config.seed).transform(vectors)
        index = HammingIndex(bits=config.bits)
        index.add(codes)
        k = min(len(sentences), config.neighbors + 1)
        _, ids = index.search(codes, k)
        for i, row in enumerate(ids):
            for j in [int(j) for j in row if j >= 0 and j != i][: config.neighbors]:
                add(sentences[i], sentences[j])
    rng = np.random.default_rng(config.seed)
    target = len(a) + config.random_pairs
    tries = 0
    while len(a) < target and len(sentences) > 1 and tries < 20 * max(1, config.random_pairs):
        i, j = rng.integers(0, len(sentences), 2)
        tries += 1
        add(sentences[int(i)], sentences[int(j)])
    return PairData(train.task, "augment", a, b, np.full(len(a), np.nan))
