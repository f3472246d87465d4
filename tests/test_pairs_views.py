"""Teacher views: parsing and checks, several views as one mean teacher (against each view's own logits), and DSE,
DiPair and `pairs eval` taught or scored by such a mean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.views import (
    MeanTeacher,
    load_views,
    open_teacher,
    parse_teachers,
    parse_view,
    view_checks,
    view_logits,
)

pytest.importorskip("torch")


def test_views_parse():
    assert parse_view("runs/t") == ("runs/t", "ab") and parse_view("runs/t:ba") == ("runs/t", "ba")
    assert parse_view("runs/t:ab") == ("runs/t", "ab") and parse_view("odd:name") == ("odd:name", "ab")
    assert parse_view("bi-encoder") == ("bi-encoder", "ab")
    assert parse_view("bi-encoder:/models/x") == ("bi-encoder:/models/x", "ab")
    assert parse_teachers("a, b,,a:ba", both_orders=True) == ["a", "b", "a:ba", "b:ba"]
    assert parse_teachers("T,bi-encoder", both_orders=True) == ["T", "bi-encoder", "T:ba"]
    with pytest.raises(OndeviceError, match="empty entry"):
        parse_view("  ")


@pytest.mark.parametrize(("views", "message"), [([], "at least one teacher view"),
                                                (["bi-encoder:ba"], "symmetric"),
                                                (["T", "T:ab"], "same teacher view twice")])
def test_view_checks_name_the_flag(views, message):
    failed = [msg for ok, msg in view_checks(views, "--teacher") if not ok]
    assert len(failed) == 1 and message in failed[0] and failed[0].startswith("--teacher")


def test_a_missing_teacher_dir_is_found_before_the_bi_encoder_encodes_anything(pair_env, tmp_path, monkeypatch):
    from ondevice.pairs import biencoder

    def never(*args, **kwargs):
        raise AssertionError("the bi-encoder view was opened before every teacher dir was checked")

    monkeypatch.setattr(biencoder.BiEncoderTeacher, "__init__", never)
    with pytest.raises(OndeviceError, match="teacher dir .*missing not found"):
        load_views(["bi-encoder", str(tmp_path / "missing")], "stsb", pair_env.data)


def test_a_lone_view_is_the_teacher_itself(pair_env):
    from ondevice.pairs.crossencoder import CrossEncoderTeacher

    teacher = open_teacher(str(pair_env.teacher()), "stsb", pair_env.data)
    # the same object kind and identity as before views existed: its cached logits stay valid
    assert isinstance(teacher, CrossEncoderTeacher)
    assert teacher.identity == CrossEncoderTeacher.load(pair_env.teacher()).identity


def test_mean_teacher_is_the_mean_of_its_views(pair_env, tiny_teacher):
    from ondevice.eval.pair_tasks import load_pairs

    ce, bi = str(pair_env.teacher()), f"bi-encoder:{tiny_teacher}"
    mean = open_teacher(f"{ce},{ce}:ba,{bi}", "stsb", pair_env.data)
    assert isinstance(mean, MeanTeacher)
    test = load_pairs("stsb", "test", pair_env.data)
    parts = [view_logits(t, o, test.a, test.b) for _, o, t in load_views([ce, f"{ce}:ba", bi], "stsb", pair_env.data)]
    assert not np.allclose(parts[0], parts[2], atol=1e-3)  # the bi-encoder view is not the (tiny) cross-encoder's
    np.testing.assert_allclose(mean.logits(test.a, test.b), (parts[0] + parts[1] + parts[2]) / 3, rtol=0, atol=1e-6)
    ident = mean.identity
    assert ident["kind"] == "mean" and [v["order"] for v in ident["views"]] == ["ab", "ba", "ab"]
    assert ident != open_teacher(f"{ce},{bi}", "stsb", pair_env.data).identity  # another mean, another cache entry
    assert mean.info["dev"]["n"] > 0 and mean.spec.name == "stsb"


def test_views_of_another_task_are_refused(pair_env, tiny_teacher):
    with pytest.raises(OndeviceError, match="trained for stsb, not mrpc"):
        open_teacher(f"{pair_env.teacher()},bi-encoder:{tiny_teacher}", "mrpc", pair_env.data)


def test_dse_learns_from_the_mean_of_two_views(pair_env, tiny_teacher, tmp_path):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.logits import teacher_logits
    from ondevice.pairs.train import train_dse

    views = f"{pair_env.teacher()},bi-encoder:{tiny_teacher}"
    cfg = pair_env.dse_config(teacher=views, epochs=1, max_train_pairs=48, augment_random=20)
    train_dse(cfg, tmp_path / "dse", progress=False)
    data = json.loads((tmp_path / "dse" / "data.json").read_text())
    mean = open_teacher(views, "stsb", pair_env.data)
    assert data["teacher"] == json.loads(json.dumps(mean.identity)) and len(data["teacher"]["views"]) == 2
    # what the run distilled is cached under the mean's identity, equal to the views' mean computed afresh
    train = load_pairs("stsb", "train", pair_env.data)
    np.testing.assert_array_equal(teacher_logits(mean, train.a, train.b, progress=False), mean.logits(train.a, train.b))


def test_dipair_and_eval_take_several_views(pair_env, tiny_teacher, tmp_path, capsys):
    from ondevice.cli import main
    from ondevice.pairs.dipair_train import DiPairConfig, train_dipair

    views = f"{pair_env.teacher()},bi-encoder:{tiny_teacher}"
    cfg = DiPairConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teacher=views,
                       sra_teacher=str(tiny_teacher), n=4, m=4, d=8, ffn=16, stage1_epochs=1, stage2_epochs=0,
                       batch_size=16, layers=1, max_train_pairs=48, augment_random=20)
    train_dipair(cfg, tmp_path / "dipair", progress=False)
    assert json.loads((tmp_path / "dipair" / "dipair_config.json").read_text())["teacher"] == views
    assert main(["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data), "--teacher", views,
                 "--run", str(tmp_path / "dipair")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert np.isfinite(out["teacher"]["spearman"]) and np.isfinite(out["student"]["spearman"])
    bad = DiPairConfig(**{**cfg.__dict__, "teacher": "bi-encoder:ba"})
    with pytest.raises(OndeviceError, match="^teacher: a bi-encoder view is symmetric"):
        bad.validate()
