"""DiPair training: stage 1 leaves the encoder unchanged, loss falls, resume is exact, SRA cosine reported."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.dipair_train import DiPairConfig, DiPairStudent, soft_label_loss, train_dipair


def _cfg(pair_env, tiny_teacher, **kw):
    base = {"task": "stsb", "data": str(pair_env.data), "student": str(pair_env.student), "teacher": str(pair_env.teacher()),
            "sra_teacher": str(tiny_teacher), "n": 4, "m": 4, "d": 8, "ffn": 16, "stage1_epochs": 2, "stage2_epochs": 1,
            "batch_size": 16, "lr1": 3e-3, "lr2": 1e-3, "augment_random": 30, "layers": 2, "pooled_slot": False}
    base.update(kw)
    return DiPairConfig(**base)


def _weights(folder):
    from ondevice.student import Student

    return {k: v.numpy().copy() for k, v in Student.load(folder).model.state_dict().items()}


def test_stage1_freezes_encoder_and_loss_falls(pair_env, tiny_teacher, tmp_path):
    run = tmp_path / "s1"
    train_dipair(_cfg(pair_env, tiny_teacher, stage2_epochs=0, stage1_epochs=3), run, progress=False)
    before, after = _weights(pair_env.student), _weights(run / "student")
    assert all(np.array_equal(before[k], after[k]) for k in before)  # encoder untouched in stage 1
    log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    assert [e["stage"] for e in log] == [1, 1, 1] and log[-1]["train_loss"] < log[0]["train_loss"]
    cos = json.loads((run / "sra_cosine.json").read_text())
    assert cos["before"] == pytest.approx(cos["after"], abs=1e-6)


def test_dropout_changes_training_and_is_recorded(pair_env, tiny_teacher, tmp_path):
    plain, dropped = tmp_path / "plain", tmp_path / "drop"
    train_dipair(_cfg(pair_env, tiny_teacher, stage2_epochs=0, stage1_epochs=1), plain, progress=False)
    train_dipair(_cfg(pair_env, tiny_teacher, stage2_epochs=0, stage1_epochs=1, dropout=0.3), dropped, progress=False)
    a, b = (DiPairStudent.load(r) for r in (plain, dropped))
    assert any(not np.array_equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
    assert json.loads((dropped / "dipair_config.json").read_text())["dropout"] == 0.3


def test_mse_loss_trains_otherwise_and_is_recorded(pair_env, tiny_teacher, tmp_path):
    plain, mse = tmp_path / "plain", tmp_path / "mse"
    qqp = {"task": "qqp", "teacher": f"bi-encoder:{tiny_teacher}", "stage2_epochs": 0, "stage1_epochs": 1}
    train_dipair(_cfg(pair_env, tiny_teacher, **qqp), plain, progress=False)
    train_dipair(_cfg(pair_env, tiny_teacher, **qqp, loss="mse"), mse, progress=False)
    a, b = (DiPairStudent.load(r) for r in (plain, mse))
    assert any(not np.array_equal(x, y) for x, y in zip(a.head.state_dict().values(), b.head.state_dict().values()))
    assert json.loads((mse / "dipair_config.json").read_text())["loss"] == "mse"
    with pytest.raises(OndeviceError, match="different settings"):  # the loss cannot be switched on resume
        train_dipair(_cfg(pair_env, tiny_teacher, **qqp), mse, resume=True,
                     progress=False)


def test_two_stages_resume_is_exact_and_published_is_dev_best(pair_env, tiny_teacher, tmp_path):
    from ondevice.eval.pair_tasks import load_pairs

    cfg = _cfg(pair_env, tiny_teacher, seed=1)
    train_dipair(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="--resume"):
        train_dipair(cfg, tmp_path / "full", progress=False)
    log = [json.loads(x) for x in (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()]
    assert [e["stage"] for e in log] == [1, 1, 2]
    assert log[2]["sra_dev_cosine"] is not None
    # an interrupted run: 1 epoch, then its config edited back to the full schedule, then resumed
    part = _cfg(pair_env, tiny_teacher, seed=1, stage1_epochs=1, stage2_epochs=0)
    train_dipair(part, tmp_path / "part", progress=False)
    text = (tmp_path / "part" / "dipair_config.json").read_text()
    text = text.replace('"stage1_epochs": 1', '"stage1_epochs": 2').replace('"stage2_epochs": 0', '"stage2_epochs": 1')
    (tmp_path / "part" / "dipair_config.json").write_text(text)
    with pytest.raises(OndeviceError, match="different settings"):
        train_dipair(_cfg(pair_env, tiny_teacher, seed=1, lr1=1e-2), tmp_path / "part", resume=True, progress=False)
    train_dipair(cfg, tmp_path / "part", resume=True, progress=False)
    a = (tmp_path / "full" / "checkpoint" / "model.safetensors").read_bytes()
    b = (tmp_path / "part" / "checkpoint" / "model.safetensors").read_bytes()
    assert a == b
    dev = json.loads((tmp_path / "full" / "dev.json").read_text())
    assert dev["epoch"] == max(log, key=lambda e: e["dev"]["spearman"])["epoch"]
    ds = DiPairStudent.load(tmp_path / "full")
    assert abs(ds.evaluate(load_pairs("stsb", "dev", pair_env.data))["spearman"] - dev["spearman"]) < 0.01
    with pytest.raises(OndeviceError, match="nothing to resume"):
        train_dipair(cfg, tmp_path / "none", resume=True, progress=False)
    linked = tmp_path / "linked"  # a resumed run reads only its own plain files
    shutil.copytree(tmp_path / "full", linked)
    (linked / "checkpoint" / "model.safetensors").rename(tmp_path / "outside.safetensors")
    (linked / "checkpoint" / "model.safetensors").symlink_to(tmp_path / "outside.safetensors")
    with pytest.raises(OndeviceError, match="checkpoint/model.safetensors is a symbolic link"):
        train_dipair(_cfg(pair_env, tiny_teacher, seed=1, stage2_epochs=2), linked, resume=True, progress=False)
    # a finished run trained on: --resume with more stage-2 epochs equals a run configured that long from the start
    longer = _cfg(pair_env, tiny_teacher, seed=1, stage2_epochs=2)
    train_dipair(longer, tmp_path / "long", progress=False)
    with pytest.raises(OndeviceError, match="different settings"):  # fewer epochs, or another stage-1 count, is refused
        train_dipair(_cfg(pair_env, tiny_teacher, seed=1, stage2_epochs=0), tmp_path / "part", resume=True, progress=False)
    train_dipair(longer, tmp_path / "part", resume=True, progress=False)
    assert (tmp_path / "long" / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "part" / "checkpoint" / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "part" / "dipair_config.json").read_text())["stage2_epochs"] == 2


def test_pooled_slot_run_trains_resumes_exactly_and_reloads(pair_env, tiny_teacher, tmp_path):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.dipair import head_forward_numpy, load_head_weights

    cfg = _cfg(pair_env, tiny_teacher, seed=2, pooled_slot=True, stage1_epochs=1, stage2_epochs=1)
    train_dipair(cfg, tmp_path / "full", progress=False)
    part = _cfg(pair_env, tiny_teacher, seed=2, pooled_slot=True, stage1_epochs=1, stage2_epochs=0)
    train_dipair(part, tmp_path / "part", progress=False)
    train_dipair(cfg, tmp_path / "part", resume=True, progress=False)  # a finished run trained on into stage 2
    assert (tmp_path / "full" / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "part" / "checkpoint" / "model.safetensors").read_bytes()
    hcfg, w = load_head_weights(tmp_path / "full")
    assert hcfg.pooled and hcfg.vec_dim == 16 and {"vproj.weight", "compare.weight"} <= set(w)
    ds = DiPairStudent.load(tmp_path / "full")
    dev = load_pairs("stsb", "dev", pair_env.data)
    sa, sb = ds.states(dev.a[:12], "a"), ds.states(dev.b[:12], "b")
    assert sa.shape == (12, 4, 8) and (np.abs(sa[:, 0]).sum(-1) > 0).all()
    np.testing.assert_allclose(ds.logits(dev.a[:12], dev.b[:12]), head_forward_numpy(hcfg, w, sa, sb), atol=1e-4)
    published = json.loads((tmp_path / "full" / "dev.json").read_text())
    assert abs(ds.evaluate(dev)["spearman"] - published["spearman"]) < 0.01
    with pytest.raises(OndeviceError, match="different settings"):  # the pooled slot cannot be switched on resume
        train_dipair(_cfg(pair_env, tiny_teacher, seed=2, stage1_epochs=1, stage2_epochs=1), tmp_path / "part",
                     resume=True, progress=False)


def test_bad_settings_are_one_line_errors(pair_env, tiny_teacher, tmp_path):
    for kw, msg in (({"n": 0}, "^n must be"), ({"stage1_epochs": 0, "stage2_epochs": 0}, "stage"),
                    ({"teacher": ""}, "^teacher is required"), ({"select": "mid"}, "^select must be"),
                    ({"temperature": 0}, "^temperature must be"), ({"dropout": 1.0}, "^dropout must be"),
                    ({"loss": "l1"}, "^loss must be one of bce, mse")):
        with pytest.raises(OndeviceError, match=msg):
            train_dipair(_cfg(pair_env, tiny_teacher, **kw), tmp_path / "bad", progress=False)
    with pytest.raises(OndeviceError, match="trained for stsb"):
        train_dipair(_cfg(pair_env, tiny_teacher, task="mrpc"), tmp_path / "bad2", progress=False)
    with pytest.raises(OndeviceError, match="--sra-teacher"):
        train_dipair(_cfg(pair_env, tiny_teacher, sra_teacher=""), tmp_path / "bad3", progress=False)


def test_soft_label_losses():
    import torch

    t = torch.tensor([[2.0], [-1.0]])
    s = torch.tensor([[2.0], [-1.0]])
    # binary: minimised at the teacher's logit (T = 1), and the gradient there is 0
    s.requires_grad_(True)
    soft_label_loss(s, t, "binary", 1.0).backward()
    assert torch.allclose(s.grad, torch.zeros_like(s), atol=1e-7)
    assert float(soft_label_loss(torch.tensor([[0.3]]), torch.tensor([[0.5]]), "regression", 1.0)) == pytest.approx(0.04)
    c = torch.tensor([[1.0, 2.0, 0.0]])
    assert float(soft_label_loss(c, c, "classes", 1.0)) < float(soft_label_loss(c.flip(-1), c, "classes", 1.0))
    # mse: the squared error to the teacher's logits for every kind (binary: not BCE's saturating target)
    assert float(soft_label_loss(torch.tensor([[1.0], [0.0]]), t, "binary", 1.0, "mse")) == pytest.approx((1 + 1) / 2)
    assert float(soft_label_loss(c, c.flip(-1), "classes", 1.0, "mse")) == pytest.approx(1 + 0 + 1)
    far = torch.tensor([[6.0]])  # BCE barely tells a confident teacher's 6 from 12; mse does
    assert float(soft_label_loss(far, far * 2, "binary", 1.0)) < 0.01 < float(soft_label_loss(far, far * 2, "binary", 1.0, "mse"))


def test_a_dipair_run_after_dse_with_the_same_augmentation_asks_the_teacher_nothing(pair_env, tiny_teacher, tmp_path,
                                                                                    monkeypatch):
    from ondevice.pairs.crossencoder import CrossEncoderTeacher
    from ondevice.pairs.train import train_dse

    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path / "cache"))
    train_dse(pair_env.dse_config(epochs=1, augment_random=30, seed=3), tmp_path / "dse", progress=False)
    folders = sorted(p.name for p in (tmp_path / "cache" / "pair_logits").iterdir())
    assert len(folders) == 2  # training pairs, augmentation pairs
    scored: list[int] = []
    real = CrossEncoderTeacher.logits
    monkeypatch.setattr(CrossEncoderTeacher, "logits", lambda self, a, b, *k, **kw: scored.append(len(a)) or real(self, a, b, *k, **kw))
    train_dipair(_cfg(pair_env, tiny_teacher, stage1_epochs=1, stage2_epochs=0, seed=3), tmp_path / "dipair", progress=False)
    # the same two lists, so the same two cache folders: nothing scored again
    assert scored == [] and sorted(p.name for p in (tmp_path / "cache" / "pair_logits").iterdir()) == folders
