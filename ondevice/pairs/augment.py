"""DSE augmentation: extra unlabeled pairs made from the training sentences, to be scored by the teacher.

Every kind seeded and deduplicated (unordered) against the training pairs and each other:
- random pairings of two distinct training sentences (mostly unrelated: teaches the low end of the scale);
- nearest-neighbour pairings: every training sentence with its nearest other sentence by Hamming distance of
  the SRA student's binary codes (`HammingIndex`, random-projection codes), i.e. the hard near-duplicates a
  search would return, which is exactly what the head later reranks;
- optionally, extra unlabeled sentences (other tasks' train-split text, `--augment-tasks`, and a text file of the
  user's own, `--augment-text`): each paired with its nearest sentence among the training and extra ones, so the
  teacher labels hard pairs beyond the task's own few thousand sentences (DiPair's transfer set is retrieved
  neighbours from unlabeled text, DiPair, Chen et al., 2020, Sec. 4.3);
- optionally, edited copies of the training pairs (`--augment-edits N`): both sentences of a pair with words
  dropped or replaced, the text augmentation of Tang et al. (2019) that DiPair names for small pair tasks. The
  edited pair keeps the original's range of similarity, and the teacher scores what the edits changed: the
  word-level detail that a head reading token states can use and a pair of sentence vectors mostly cannot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ondevice.binarize import Binarizer
from ondevice.bits import MAX_BITS
from ondevice.configs import Check, ConfigError, literal
from ondevice.corpus import read_corpus
from ondevice.eval.pair_tasks import PairData, task_list, unlabeled_tasks_problem
from ondevice.io import sha256_text


@dataclass
class AugmentConfig:
    """How many augmentation pairs of each kind, and the extra sentences they may come from.

    The `augment` piece of every DSE, DvBERT and DiPair config, whose files name its fields as FLAT_NAMES does; a
    run draws with its own seed and the default edit probability (`transfer_set`), so those two are not saved.
    """

    FLAT_NAMES: ClassVar[dict[str, str]] = {
        "random_pairs": "augment_random", "neighbors": "augment_neighbors", "bits": "augment_bits",
        "tasks": "augment_tasks", "tasks_max": "augment_tasks_max", "text": "augment_text",
        "text_max": "augment_text_max", "text_sha256": "augment_text_sha256", "edits": "augment_edits"}

    random_pairs: int = 5000
    neighbors: int = 1  # nearest-neighbour pairings per training sentence
    bits: int = 256
    seed: int = 0
    edits: int = 0  # edited copies per training pair (words dropped / replaced), scored by the teacher
    edit_prob: float = 0.1  # per word: dropped with this probability, else replaced with it (Tang et al.'s 0.1)
    tasks: str = ""  # other tasks' train text as extra neighbour pairs (e.g. "sick,mrpc,qqp"); "" = none
    tasks_max: int = 50000
    text: str = ""  # a text file of the user's own sentences (one per line, .gz allowed) as extra neighbour pairs
    text_max: int = 50000
    text_sha256: str = ""  # filled in by the trainer: the sentences read from `text`

    def checks(self) -> list[Check]:
        """Counts, code bits and extra sources, named by their flat names (checked whether or not the run augments:
        a bad setting is never ignored)."""
        names = task_list(self.tasks)
        problem = unlabeled_tasks_problem(names, "{augment_tasks}") if names else ""
        return [(self.random_pairs >= 0, "{augment_random} must be >= 0"),
                (self.neighbors >= 0, "{augment_neighbors} must be >= 0"),
                (not problem, problem), (self.tasks_max >= 1, "{augment_tasks_max} must be >= 1"),
                (not self.text or Path(self.text).is_file(),
                 (f"{{augment_text}} {literal(self.text)}: no such file; give a text file with one sentence per "
                  "line (.gz allowed)")),
                (self.text_max >= 1, "{augment_text_max} must be >= 1"),
                (1 <= self.bits <= MAX_BITS, f"{{augment_bits}} must be in 1..{MAX_BITS}, got {self.bits}"),
                (self.edits >= 0, "{augment_edits} must be >= 0")]

    def any(self) -> bool:
        """Whether these settings make any augmentation pairs."""
        return bool(self.random_pairs or self.neighbors or self.tasks or self.text or self.edits)


# the flat names of the augmentation settings every DSE, DvBERT and DiPair config has; a resume must match them
AUGMENT_KEYS = tuple(AugmentConfig.FLAT_NAMES.values())


@dataclass
class ExtraText:
    """One source of extra unlabeled sentences and how many of them a run draws (seeded) at most."""

    sentences: list[str]
    most: int


def _nearest_ids(texts: list[str], encode: Callable[[list[str]], np.ndarray], config: AugmentConfig, first: int,
                 k: int) -> np.ndarray:
    """Ids of the `k` Hamming-nearest of `texts` for each of `texts[first:]`, by random-projection codes of the
    student's vectors fitted on all of `texts` (-1 where fewer exist)."""
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.index import HammingIndex

    vectors = np.asarray(encode(texts), np.float32)
    codes = Binarizer.fit(vectors, method="random", bits=config.bits, seed=config.seed).transform(vectors)
    index = HammingIndex(bits=config.bits)
    index.add(codes)
    return index.search(codes[first:], k)[1]


def training_sentences(train: PairData) -> list[str]:
    """Distinct sentences of the training pairs, in first-seen order."""
    return list(dict.fromkeys([*train.a, *train.b]))


def _key(x: str, y: str) -> tuple[str, str]:
    return (x, y) if x <= y else (y, x)


def augmentation_pairs(train: PairData, encode: Callable[[list[str]], np.ndarray] | None,
                       config: AugmentConfig, extra: Sequence[ExtraText] = ()) -> PairData:
    """Random and Hamming-nearest-neighbour pairs of training sentences, then each sentence drawn from the `extra`
    sources (source by source, up to its `most`) with its nearest training-or-extra sentence (gold = NaN: no label)."""
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
        ids = _nearest_ids(sentences, encode, config, 0, min(len(sentences), config.neighbors + 1))
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
    pool = _draw(sentences, extra, config.seed)
    if pool:
        if encode is None:
            raise ValueError("extra sentences are paired by their neighbours: pass the student's encode")
        both = sentences + pool
        for x, row in zip(pool, _nearest_ids(both, encode, config, len(sentences), min(len(both), 2))):
            near = [int(j) for j in row if j >= 0 and both[int(j)] != x]
            if near:
                add(x, both[near[0]])
    if config.edits > 0:  # last, so the pairs above are the same with or without edits
        for x, y in edited_pairs(train, config.edits, config.edit_prob, config.seed):
            add(x, y)
    return PairData(train.task, "augment", a, b, np.full(len(a), np.nan))


def transfer_set(train: PairData, encode: Callable[[list[str]], np.ndarray], config,
                 extra: Sequence[ExtraText] = ()) -> PairData:
    """The augmentation pairs a DSE, DvBERT or DiPair config asks for (its `augment` piece, drawn with the run's
    seed); `encode` is the SRA student's, used only where neighbours are searched."""
    draw = dataclasses.replace(config.augment, seed=config.seed, edit_prob=AugmentConfig.edit_prob)
    return augmentation_pairs(train, encode if draw.neighbors or extra else None, draw, extra)


def edit_sentence(sentence: str, rng: np.random.Generator, vocabulary: Sequence[str], prob: float) -> str:
    """`sentence` with each word dropped with probability `prob`, else replaced by a random `vocabulary` word
    with probability `prob` (words are whitespace-separated); never empty. Unchanged only when every draw kept."""
    words = sentence.split()
    out = []
    for w, u, pick in zip(words, rng.random(len(words)), rng.integers(0, len(vocabulary), len(words))):
        if u < prob:
            continue
        out.append(vocabulary[int(pick)] if u < 2 * prob else w)
    return " ".join(out) if out else sentence


def edited_pairs(train: PairData, copies: int, prob: float, seed: int) -> list[tuple[str, str]]:
    """`copies` edited versions of every training pair (both sides edited independently, seeded; the words come
    from the training sentences only), in pair order; a copy equal to its pair or to an earlier copy is left out."""
    vocabulary = sorted({w for s in training_sentences(train) for w in s.split()})
    rng = np.random.default_rng([seed, 7])  # its own stream: the random pairings above do not move
    out: list[tuple[str, str]] = []
    for x, y in zip(train.a, train.b):
        made = {(x, y)}
        for _ in range(copies):
            pair = (edit_sentence(x, rng, vocabulary, prob), edit_sentence(y, rng, vocabulary, prob))
            if pair not in made:
                made.add(pair)
                out.append(pair)
    return out


def _draw(own: list[str], extra: Sequence[ExtraText], seed: int) -> list[str]:
    """The extra sentences a run pairs: from each source in order, a seeded draw of at most `most` of its distinct
    sentences that are neither training sentences nor drawn from an earlier source, kept in source order."""
    taken = set(own)
    out: list[str] = []
    for source in extra:
        pool = [x for x in dict.fromkeys(source.sentences) if x not in taken]
        keep = np.sort(np.random.default_rng(seed).permutation(len(pool))[: source.most])
        pool = [pool[i] for i in keep]
        taken.update(pool)
        out += pool
    return out


def extra_texts(config) -> list[ExtraText]:
    """The extra sources a DSE, DvBERT or DiPair config names: `augment.tasks` train-split text, then the
    `augment.text` file (evaluation text and carved dev/test splits held out); fills in `augment.text_sha256`."""
    # looked up on each call, so a patched attribute is seen
    from ondevice.eval.pair_tasks import pair_held_out_texts, task_list, unlabeled_train_sentences

    aug, pairs = config.augment, config.pairs
    out = []
    names = task_list(aug.tasks)
    if names:
        out.append(ExtraText(unlabeled_train_sentences(pairs.data, names, pairs.split_seed), aug.tasks_max))
    if aug.text:
        text = read_corpus(aug.text, exclude=pair_held_out_texts(pairs.data, pairs.split_seed), flag="--augment-text")
        aug.text_sha256 = sha256_text(text)
        out.append(ExtraText(text, aug.text_max))
    return out


def extra_checks(config) -> list[Check]:
    """The (ok, message) checks of a run config's augmentation settings, the messages naming its fields."""
    return [(ok, ConfigError(message).render()) for ok, message in config.augment.checks()]
