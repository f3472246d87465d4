"""DSE augmentation pairs: neighbours are the true Hamming nearest ones, edits follow their rule, no training pair
repeats, seeded."""

from __future__ import annotations

import numpy as np

from ondevice.binarize import Binarizer
from ondevice.bits import hamming_reference
from ondevice.eval.pair_tasks import PairData
from ondevice.pairs.augment import (
    AugmentConfig,
    ExtraText,
    augmentation_pairs,
    edit_sentence,
    edited_pairs,
    training_sentences,
)


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
    cfg = AugmentConfig(random_pairs=5, neighbors=1, bits=64, seed=3)
    base = augmentation_pairs(train, _encode, cfg)
    aug = augmentation_pairs(train, _encode, cfg, [ExtraText(extra, 30)])
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


def test_sources_are_drawn_in_order_without_repeats():
    train = _train()
    own = training_sentences(train)
    first = [f"sun moon {i}" for i in range(200, 220)]
    second = first[:5] + [own[1]] + [f"red blue {i}" for i in range(300, 330)]
    cfg = AugmentConfig(random_pairs=0, neighbors=0, bits=64, seed=5)
    one = augmentation_pairs(train, _encode, cfg, [ExtraText(first, 8)])
    two = augmentation_pairs(train, _encode, cfg, [ExtraText(first, 8), ExtraText(second, 12)])
    draw_first = {first[i] for i in np.random.default_rng(5).permutation(20)[:8]}
    rest = [x for x in second if x not in draw_first and x != own[1]]  # training text and earlier draws are out
    draw_second = {rest[i] for i in np.random.default_rng(5).permutation(len(rest))[:12]}
    assert set(one.a) <= draw_first and len(set(one.a)) >= 4  # mutual nearest pairs count once
    assert set(two.a) <= draw_first | draw_second  # each drawn sentence is a pair's first side, nothing else is
    assert len(set(two.a) & draw_second) >= 6 and len(set(two.a) & draw_first) >= 4
    assert len(two) == len({frozenset(p) for p in zip(two.a, two.b)})


def test_augment_text_leaves_out_evaluation_text_and_is_checksummed(pair_env, tmp_path):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.augment import extra_checks, extra_texts

    dev, test = load_pairs("stsb", "dev", pair_env.data), load_pairs("mrpc", "test", pair_env.data)
    mine = [f"my own query number {i}" for i in range(30)]
    path = tmp_path / "mine.txt"
    path.write_text("\n".join(mine[:15] + [dev.a[0], test.b[0], ""] + mine[15:]) + "\n")
    cfg = pair_env.dse_config(augment_text=str(path), augment_text_max=20)
    assert all(ok for ok, _ in extra_checks(cfg))
    (source,) = extra_texts(cfg)
    assert source.sentences == mine and source.most == 20  # dev/test text (carved splits too) and blank lines out
    sha = cfg.augment_text_sha256
    path.write_text("\n".join(mine[:29]) + "\n")
    again = pair_env.dse_config(augment_text=str(path), augment_text_max=20)
    extra_texts(again)
    assert sha and again.augment_text_sha256 != sha
    failed = [m for ok, m in extra_checks(pair_env.dse_config(augment_text=str(tmp_path / "nope.txt"))) if not ok]
    assert len(failed) == 1 and failed[0].startswith("augment_text ") and "no such file" in failed[0]
    failed = [m for ok, m in extra_checks(pair_env.dse_config(augment_text=str(path), augment_text_max=0)) if not ok]
    assert failed == ["augment_text_max must be >= 1"]


def test_edit_sentence_drops_or_replaces_each_word_at_its_rate():
    vocab = ["zz"]  # a replacement is visible: no sentence word is "zz"
    words = [f"w{i}" for i in range(20)]
    sentence = " ".join(words)
    rng = np.random.default_rng(0)
    assert edit_sentence(sentence, rng, vocab, 0.0) == sentence
    dropped = replaced = 0
    for _ in range(500):
        out = edit_sentence(sentence, rng, vocab, 0.1).split()
        kept = [w for w in out if w != "zz"]
        assert kept == [w for w in words if w in kept]  # the words left keep their order, none is new
        replaced += len(out) - len(kept)
        dropped += len(words) - len(out)
    assert abs(dropped / 10000 - 0.1) < 0.015 and abs(replaced / 10000 - 0.1) < 0.015
    assert edit_sentence("one", np.random.default_rng(1), vocab, 0.5) in ("one", "zz")  # never empty


def test_edited_pairs_are_seeded_and_use_training_words_only():
    train = _train()
    vocab = {w for s in training_sentences(train) for w in s.split()}
    one = edited_pairs(train, 3, 0.2, seed=4)
    assert one == edited_pairs(train, 3, 0.2, seed=4) and one != edited_pairs(train, 3, 0.2, seed=5)
    originals = list(zip(train.a, train.b))
    assert 0 < len(one) <= 3 * len(originals) and not set(one) & set(originals)
    for x, y in one:
        assert set(x.split()) <= vocab and set(y.split()) <= vocab


def test_edits_come_after_the_other_pairs_and_only_add():
    train = _train()
    cfg = AugmentConfig(random_pairs=10, neighbors=1, bits=64, seed=3)
    base = augmentation_pairs(train, _encode, cfg)
    cfg.edits = 2
    aug = augmentation_pairs(train, _encode, cfg)
    assert aug.a[: len(base)] == base.a and aug.b[: len(base)] == base.b
    new = list(zip(aug.a[len(base):], aug.b[len(base):]))
    earlier = {frozenset(p) for p in zip(train.a + base.a, train.b + base.b)}
    expected = []
    for x, y in edited_pairs(train, 2, cfg.edit_prob, 3):  # what add() keeps: new, not a sentence with itself
        if x != y and frozenset((x, y)) not in earlier:
            earlier.add(frozenset((x, y)))
            expected.append((x, y))
    assert new == expected and len(new) > len(train)


def test_augment_bits_out_of_range_is_refused_even_when_nothing_augments():
    """--augment-bits 0 with --alphas 0 was silently ignored; it is checked like every other augmentation flag."""
    from ondevice.pairs.augment import extra_checks
    from ondevice.pairs.train import DSEConfig

    for bits in (0, -1, 1 << 20):
        cfg = DSEConfig(task="stsb", data="", student="", teacher="", alpha=0.0, augment_bits=bits)
        assert [m for ok, m in extra_checks(cfg) if not ok] == [f"augment_bits must be in 1..65536, got {bits}"]
