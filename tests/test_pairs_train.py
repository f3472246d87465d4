"""DSE students: loss falls, the dev-best epoch is published, resume is exact, alpha is picked on dev."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs
from ondevice.pairs.train import PairStudent, chosen_run, train_dse, train_dse_alphas


def test_train_publishes_dev_best_and_loss_falls(pair_env):
    run = pair_env.run()
    log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and log[-1]["train_loss"] < log[0]["train_loss"]
    best = max(log, key=lambda e: e["dev"]["spearman"])
    dev = json.loads((run / "dev.json").read_text())
    assert dev["epoch"] == best["epoch"]
    data = json.loads((run / "data.json").read_text())
    assert data["augment_pairs"] > 0 and data["teacher"]["kind"] == "cross-encoder"
    ps = PairStudent.load(run)
    d = load_pairs("stsb", "dev", pair_env.data)
    assert abs(ps.evaluate(d)["spearman"] - dev["spearman"]) < 0.01  # published weights are the dev-best ones
    logits = ps.logits(d.a[:4], d.b[:4])
    swapped_vec = ps.logits_from_vectors(ps.vectors(d.a[:4]), ps.vectors(d.b[:4]))
    np.testing.assert_allclose(logits, swapped_vec, atol=1e-5)


def test_resume_is_exact(pair_env, tmp_path):
    cfg = pair_env.dse_config(epochs=2, augment_random=10, seed=1)
    train_dse(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="--resume"):
        train_dse(cfg, tmp_path / "full", progress=False)
    one = pair_env.dse_config(epochs=1, augment_random=10, seed=1)
    train_dse(one, tmp_path / "part", progress=False)
    cfg_text = (tmp_path / "part" / "dse_config.json").read_text().replace('"epochs": 1', '"epochs": 2')
    (tmp_path / "part" / "dse_config.json").write_text(cfg_text)  # an interrupted 2-epoch run after epoch 1
    with pytest.raises(OndeviceError, match="different settings"):
        train_dse(pair_env.dse_config(epochs=2, augment_random=10, seed=1, lr=1e-2), tmp_path / "part", resume=True,
                  progress=False)
    train_dse(cfg, tmp_path / "part", resume=True, progress=False)
    a = (tmp_path / "full" / "checkpoint" / "model.safetensors").read_bytes()
    b = (tmp_path / "part" / "checkpoint" / "model.safetensors").read_bytes()
    assert a == b
    with pytest.raises(OndeviceError, match="nothing to resume"):
        train_dse(cfg, tmp_path / "none", resume=True, progress=False)


def test_alpha_selection_and_task_mismatch(pair_env, tmp_path):
    sel = train_dse_alphas(pair_env.dse_config(epochs=1, augment_random=10), tmp_path / "sweep", alphas=(0.0, 1.0),
                           progress=False)
    assert set(sel["dev"]) == {"0", "1"}
    best = max(sel["dev"], key=lambda k: sel["dev"][k]["spearman"])
    assert sel["chosen_dir"] == f"alpha-{best}"
    assert json.loads((tmp_path / "sweep" / "alpha-0" / "data.json").read_text())["augment_pairs"] == 0
    again = train_dse_alphas(pair_env.dse_config(epochs=1, augment_random=10), tmp_path / "sweep", alphas=(0.0, 1.0),
                             progress=False)  # finished alphas are not retrained
    assert again == sel
    with pytest.raises(OndeviceError, match="finished run with other settings \\(augment_random\\)"):
        train_dse_alphas(pair_env.dse_config(epochs=1, augment_random=11), tmp_path / "sweep", alphas=(1.0,),
                         progress=False)  # nor taken for a run with other settings
    sweep = tmp_path / "sweep"
    assert chosen_run(sweep) == sweep / sel["chosen_dir"] and chosen_run(sweep / "alpha-0") == sweep / "alpha-0"
    for chosen in ("/etc", "../elsewhere", "alpha-1/../../x", 7, None):  # a selection.json that points out of its run
        (sweep / "selection.json").write_text(json.dumps({**sel, "chosen_dir": chosen}))
        with pytest.raises(OndeviceError, match="not an alpha-<a> folder"):
            chosen_run(sweep)
    with pytest.raises(OndeviceError, match="trained for stsb"):
        train_dse(pair_env.dse_config(task="mrpc"), tmp_path / "bad", progress=False)
    shutil.rmtree(tmp_path / "sweep")


def test_frozen_encoder_and_alpha_zero_without_teacher(pair_env, tmp_path):
    from ondevice.student import Student

    cfg = pair_env.dse_config(alpha=0.0, teacher="", freeze_encoder=True, epochs=2, lr=1e-2)
    train_dse(cfg, tmp_path / "frozen", progress=False)
    before = Student.load(pair_env.student).model.state_dict()
    after = Student.load(tmp_path / "frozen" / "student").model.state_dict()
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)  # encoder untouched
    log = [json.loads(x) for x in (tmp_path / "frozen" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["train_loss"] < log[0]["train_loss"]
    assert json.loads((tmp_path / "frozen" / "data.json").read_text())["teacher"] is None
    with pytest.raises(OndeviceError, match="pass teacher DIR"):
        train_dse(pair_env.dse_config(alpha=0.5, teacher=""), tmp_path / "no", progress=False)


def test_teacher_scores_on_the_runs_device(pair_env, tmp_path, monkeypatch):
    """The cross-encoder that scores the augmentation pairs runs on the run's --device, not always the CPU
    (a GPU run that scored them on one CPU thread spent its whole time there)."""
    from ondevice.pairs import crossencoder
    from ondevice.pairs import train as train_mod

    seen = []
    real = crossencoder.CrossEncoderTeacher.load.__func__

    def spy(cls, directory, device="cpu"):
        seen.append(device)
        return real(cls, directory, "cpu")

    monkeypatch.setattr(crossencoder.CrossEncoderTeacher, "load", classmethod(spy))
    monkeypatch.setattr(train_mod, "resolve_device", lambda spec: "cpu:0")  # a device name no default produces
    train_dse(pair_env.dse_config(epochs=1, augment_random=4), tmp_path / "run", progress=False)
    assert seen == ["cpu:0"]


def test_augment_text_adds_pairs_and_a_changed_file_refuses_resume(pair_env, tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("".join(f"a cat and a dog number {i}\n" for i in range(25)))
    plain = pair_env.dse_config(epochs=1, augment_random=10, seed=2)
    cfg = pair_env.dse_config(epochs=1, augment_random=10, seed=2, augment_text=str(text), augment_text_max=20)
    train_dse(plain, tmp_path / "plain", progress=False)
    train_dse(cfg, tmp_path / "run", progress=False)
    n_plain = json.loads((tmp_path / "plain" / "data.json").read_text())["augment_pairs"]
    n_text = json.loads((tmp_path / "run" / "data.json").read_text())["augment_pairs"]
    assert n_plain < n_text <= n_plain + 20
    saved = json.loads((tmp_path / "run" / "dse_config.json").read_text())
    assert saved["augment_text_sha256"] == cfg.augment_text_sha256 != ""
    text.write_text("".join(f"a cat and a dog number {i}\n" for i in range(24)))
    with pytest.raises(OndeviceError, match="augment_text_sha256"):
        train_dse(pair_env.dse_config(epochs=1, augment_random=10, seed=2, augment_text=str(text), augment_text_max=20),
                  tmp_path / "run", resume=True, progress=False)


def test_augment_edits_add_teacher_scored_pairs(pair_env, tmp_path):
    cfg = pair_env.dse_config(epochs=1, augment_random=10, seed=2, augment_edits=2)
    train_dse(pair_env.dse_config(epochs=1, augment_random=10, seed=2), tmp_path / "plain", progress=False)
    train_dse(cfg, tmp_path / "run", progress=False)
    n_plain = json.loads((tmp_path / "plain" / "data.json").read_text())["augment_pairs"]
    n_edits = json.loads((tmp_path / "run" / "data.json").read_text())["augment_pairs"]
    assert n_plain < n_edits
    assert json.loads((tmp_path / "run" / "dse_config.json").read_text())["augment_edits"] == 2
    with pytest.raises(OndeviceError, match="augment_edits"):  # a resume must use the same edits
        train_dse(pair_env.dse_config(epochs=1, augment_random=10, seed=2), tmp_path / "run", resume=True, progress=False)


@pytest.mark.parametrize("name", ["alpha-0/pair_head.safetensors", "alpha-0/dse_config.json",
                                  "alpha-0/student/model.safetensors", "alpha-0/student"])
def test_a_linked_file_in_a_run_is_refused(tmp_path, name):
    """A pair-model run someone sends must not make ondevice read other files of this machine through a link
    (`ondevice pairs export --run R` loads R's chosen alpha with PairStudent.load first)."""
    pytest.importorskip("torch")
    from pairs_fixtures import make_student

    from ondevice.pairs.export import export_pair_bundle
    from ondevice.pairs.model import PairHeadConfig, build_head, save_head

    root = tmp_path / "R"
    run = root / "alpha-0"
    make_student(run)
    cfg = PairHeadConfig(dim=16, hidden=4, outputs=3, kind="classes", labels=["a", "b", "c"])
    save_head(run, build_head(cfg), cfg)
    (run / "dse_config.json").write_text("{}")
    (root / "selection.json").write_text(json.dumps({"chosen_dir": "alpha-0"}))
    assert PairStudent.load(chosen_run(root)).head_cfg == cfg  # the plain run loads
    (tmp_path / "elsewhere").mkdir()
    outside = tmp_path / "elsewhere" / "copy"
    shutil.move(root / name, outside)  # same bytes, so only the link is wrong
    (root / name).symlink_to(outside)
    file = name.split("/", 2)[-1] if name.startswith("alpha-0/student/") else name.split("/", 1)[1]
    with pytest.raises(OndeviceError, match=rf"{file} is a symbolic link; artifacts are read only from plain files"):
        PairStudent.load(chosen_run(root))
    with pytest.raises(OndeviceError, match=rf"{file} is a symbolic link"):
        export_pair_bundle(root / "alpha-0", tmp_path / "out", bits=8)
    assert not (tmp_path / "out").exists()


def test_every_alpha_resume_and_augment_text_are_checked_before_the_first_alpha_trains(pair_env, tmp_path):
    """No teacher with alphas 0,0.5 trained alpha 0 for nothing; --resume of a new folder started from scratch; a corrupt
    --augment-text passed with --alphas 0. All three are one line now, before any training (no folder is made)."""
    import dataclasses

    from ondevice.pairs.train import DSEConfig

    base = DSEConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teacher="", epochs=1,
                     head_hidden=4, augment_random=0, augment_neighbors=0)
    with pytest.raises(OndeviceError, match="alpha 0.5 distills teacher logits; pass teacher DIR"):
        train_dse_alphas(base, tmp_path / "o", [0.0, 0.5], progress=False)
    with pytest.raises(OndeviceError, match=r"nothing to resume in .*o \(no checkpoint/ in its alpha-<a> folders\)"):
        train_dse_alphas(base, tmp_path / "o", [0.0], resume=True, progress=False)
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 60)
    with pytest.raises(OndeviceError, match="cannot read --augment-text"):
        train_dse_alphas(dataclasses.replace(base, augment_text=str(bad)), tmp_path / "o", [0.0], progress=False)
    assert not (tmp_path / "o").exists()
