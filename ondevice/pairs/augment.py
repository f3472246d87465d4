"""DSE augmentation: extra unlabeled pairs made from the training sentences, to be scored by the teacher.

Two kinds, both seeded and deduplicated (unordered) against the training pairs and each other:
- random pairings of two distinct training sentences (mostly unrelated: teaches the low end of the scale);
- nearest-neighbour pairings: every training sentence with its nearest other sentence by Hamming distance of
  the SRA student's binary codes (`HammingIndex`, random-projection codes), i.e. the hard near-duplicates a
  search would return, which is exactly what the head later reranks;
- optionally, extra unlabeled sentences (other tasks' train-split text, `--augment-tasks`): each paired with its
  nearest sentence among the training and extra ones, so the teacher labels hard pairs beyond the task's own
  few thousand sentences (DiPair's transfer set is retrieved neighbours, paper 002 Sec. 4.3).
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
    extra_max: int = 50000  # extra sentences drawn (seeded) when the caller passes more


def _codes(vectors: np.ndarray, config: AugmentConfig) -> np.ndarray:
    from ondevice.binarize import Binarizer

    return Binarizer.fit(vectors, method="random", bits=config.bits, seed=config.seed).transform(vectors)


def training_sentences(train: PairData) -> list[str]:
    """Distinct sentences of the training pairs, in first-seen order."""
    return list(dict.fromkeys([*train.a, *train.b]))


def _key(x: str, y: str) -> tuple[str, str]:
    return (x, y) if x <= y else (y, x)


def augmentation_pairs(train: PairData, encode: Callable[[list[str]], np.ndarray] | None,
                       config: AugmentConfig, extra: list[str] | None = None) -> PairData:
    """Random and Hamming-nearest-neighbour pairs of training sentences, then each of up to `config.extra_max`
    `extra` sentences with its nearest training-or-extra sentence (gold = NaN: no label)."""
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
        from ondevice.index import HammingIndex

        vectors = np.asarray(encode(sentences), np.float32)
        codes = _codes(vectors, config)
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
    if extra:
        if encode is None:
            raise ValueError("extra sentences are paired by their neighbours: pass the student's encode")
        from ondevice.index import HammingIndex

        own = set(sentences)
        pool = [x for x in dict.fromkeys(extra) if x not in own]
        keep = np.sort(np.random.default_rng(config.seed).permutation(len(pool))[: config.extra_max])
        pool = [pool[i] for i in keep]
        both = sentences + pool
        codes = _codes(np.asarray(encode(both), np.float32), config)
        index = HammingIndex(bits=config.bits)
        index.add(codes)
        _, ids = index.search(codes[len(sentences):], min(len(both), 2))
        for x, row in zip(pool, ids):
            near = [int(j) for j in row if j >= 0 and both[int(j)] != x]
            if near:
                add(x, both[near[0]])
    return PairData(train.task, "augment", a, b, np.full(len(a), np.nan))


def extra_task_sentences(tasks: str, data_dir: str, split_seed: int) -> list[str] | None:
    """Train-split text of the comma-separated `tasks` for `--augment-tasks` (dev, test and evaluation text held
    out by `unlabeled_train_sentences`); None when no task is named."""
    from ondevice.pairs.data import task_list, unlabeled_train_sentences

    names = task_list(tasks)
    return unlabeled_train_sentences(data_dir, names, split_seed) if names else None


def extra_task_checks(tasks: str, most: int) -> list[tuple[bool, str]]:
    """Validation rows of `--augment-tasks` ("" = none) / `--augment-tasks-max` for `first_failure`."""
    from ondevice.pairs.data import task_list, unlabeled_tasks_problem

    names = task_list(tasks)
    problem = unlabeled_tasks_problem(names, "--augment-tasks") if names else ""
    return [(not problem, problem), (most >= 1, "--augment-tasks-max must be >= 1")]
