"""Pair task splits: seeded, disjoint, documented; QQP keeps every question in one split; test never carved."""

from __future__ import annotations

import numpy as np
import pytest
from pairs_fixtures import make_pair_data

from ondevice.errors import OndeviceError
from ondevice.eval.data import read_mrpc
from ondevice.eval.pair_tasks import (
    SPLITS,
    TASKS,
    describe_splits,
    load_pairs,
    load_sst2,
    qqp_components,
    summary,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_pair_data(tmp_path_factory.mktemp("pairdata"), n=200)


def _keys(d):
    return {(x, y) for x, y in zip(d.a, d.b)}


@pytest.mark.parametrize("task", list(TASKS))
def test_splits_are_disjoint_seeded_and_complete(data, task):
    parts = {s: load_pairs(task, s, data, seed=3) for s in SPLITS}
    again = load_pairs(task, "dev", data, seed=3)
    assert again.a == parts["dev"].a and np.array_equal(again.gold, parts["dev"].gold)
    if task != "stsb":  # STS-B's files are the official splits
        assert load_pairs(task, "dev", data, seed=4).a != parts["dev"].a
    rows = [(i, x, y) for s in ("train", "dev") for i, (x, y) in enumerate(zip(parts[s].a, parts[s].b))]
    assert all(len(parts[s]) > 0 for s in SPLITS)
    if task in ("sick-r", "sick-e", "mrpc"):
        assert len(parts["train"]) + len(parts["dev"]) == 200  # dev carved from train, nothing lost
        assert len(rows) == 200
    assert parts["test"].spec.name == task


def test_mrpc_dev_is_stratified_and_test_is_the_official_file(data):
    full = read_mrpc(data, "train")
    dev = load_pairs("mrpc", "dev", data)
    assert abs(dev.gold.mean() - full.gold.mean()) < 0.05
    assert load_pairs("mrpc", "test", data).a == read_mrpc(data, "test").a


def test_qqp_has_no_question_on_two_sides(data):
    parts = [load_pairs("qqp", s, data, seed=1) for s in SPLITS]
    qs = [set(p.a) | set(p.b) for p in parts]
    assert not (qs[0] & qs[1]) and not (qs[0] & qs[2]) and not (qs[1] & qs[2])
    assert sum(len(p) for p in parts) == 600


def test_qqp_components_against_brute_force():
    rng = np.random.default_rng(0)
    a = [f"q{int(i)}" for i in rng.integers(0, 30, 40)]
    b = [f"q{int(i)}" for i in rng.integers(0, 30, 40)]
    comp = qqp_components(a, b)
    for i in range(40):  # brute force: pairs sharing a question (transitively) share a component
        for j in range(40):
            if {a[i], b[i]} & {a[j], b[j]}:
                assert comp[i] == comp[j]


def test_sick_test_is_trial_and_labels(data):
    test = load_pairs("sick-e", "test", data)
    assert set(np.unique(test.gold)) <= {0, 1, 2} and len(test) == 200
    r = load_pairs("sick-r", "train", data)
    assert r.gold.min() >= 1 and r.gold.max() <= 5
    assert np.allclose(r.spec.normalize(np.array([1.0, 5.0])), [0, 1])


def test_bad_task_split_and_missing_data(data, tmp_path):
    with pytest.raises(OndeviceError, match="unknown pair task"):
        load_pairs("mnli", "train", data)
    with pytest.raises(OndeviceError, match="unknown split"):
        load_pairs("stsb", "validation", data)
    with pytest.raises(OndeviceError, match="not found"):
        load_pairs("qqp", "train", tmp_path)


def test_summary_sst2_and_description(data):
    s = summary("mrpc", data)
    assert set(s["splits"]) == set(SPLITS) and "paraphrase" in s["splits"]["test"]["label_counts"]
    assert len(load_sst2("train", data).texts) == 200
    assert "QQP" in describe_splits().upper() and "trial" in describe_splits()


def test_unlabeled_train_sentences_hold_out_every_dev_and_test_text(data):
    from ondevice.eval.data import train_split_sentences
    from ondevice.eval.pair_tasks import unlabeled_train_sentences

    assert unlabeled_train_sentences(data) == train_split_sentences(data)  # the old --train-splits, same order
    got = unlabeled_train_sentences(data, ("stsb", "sick", "mrpc", "qqp"))
    assert got[: len(train_split_sentences(data))] == train_split_sentences(data) and len(set(got)) == len(got)
    held = set()
    for task in TASKS:
        for split in ("dev", "test"):
            part = load_pairs(task, split, data)
            held |= {x.strip() for x in part.a + part.b}
    assert not held & set(got)
    for task in ("sick-r", "mrpc", "qqp"):  # each task's train split contributes text nobody holds out
        train = load_pairs(task, "train", data)
        assert {x.strip() for x in train.a + train.b} - held <= set(got)
        assert {x.strip() for x in train.a + train.b} & set(got)
    with pytest.raises(OndeviceError, match="unknown task 'snli'"):
        unlabeled_train_sentences(data, ("stsb", "snli"))
