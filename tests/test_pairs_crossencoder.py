"""Cross-encoder teacher: a tiny BERT fine-tunes (loss falls), resumes, refuses to overwrite, gives logits."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs
from ondevice.pairs.crossencoder import CrossEncoderConfig, CrossEncoderTeacher, evaluate_teacher, fine_tune


def test_fine_tune_loss_falls_and_logits(pair_env):
    teacher = CrossEncoderTeacher.load(pair_env.teacher())
    losses = [e["loss"] for e in teacher.info["losses"]]
    assert len(losses) >= 4 and np.mean(losses[-2:]) < np.mean(losses[:2])
    dev = load_pairs("stsb", "dev", pair_env.data)
    out = teacher.logits(dev.a[:5], dev.b[:5])
    assert out.shape == (5, 1) and out.dtype == np.float32
    assert np.allclose(out, teacher.logits(dev.a[:5], dev.b[:5], batch_size=2), atol=1e-5)  # batching-invariant
    assert "spearman" in evaluate_teacher(teacher, dev) and teacher.identity["weights_sha256"]
    assert json.loads((pair_env.teacher() / "teacher.json").read_text())["config"]["task"] == "stsb"


def test_binary_teacher_resume_and_refusals(pair_env, tmp_path):
    cfg = CrossEncoderConfig(task="mrpc", data=str(pair_env.data), base=str(pair_env.base), epochs=2, batch_size=16,
                             lr=1e-3, max_train_pairs=48, logging_steps=1)
    full = fine_tune(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="--resume"):
        fine_tune(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="nothing to resume"):
        fine_tune(cfg, tmp_path / "empty", resume=True, progress=False)
    # a run stopped after epoch 1: the same folder without the epoch-2 checkpoint and the final model
    part = tmp_path / "part"
    shutil.copytree(tmp_path / "full", part)
    ckpts = sorted((part / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    assert len(ckpts) == 2
    shutil.rmtree(ckpts[-1])
    shutil.rmtree(part / "model")
    (part / "teacher.json").unlink()
    with pytest.raises(OndeviceError, match="different settings"):
        fine_tune(CrossEncoderConfig(**{**cfg.__dict__, "lr": 5e-4}), part, resume=True, progress=False)
    resumed = fine_tune(cfg, part, resume=True, progress=False)
    probe = (["a cat sat", "the dog ran fast"], ["a cat sat on the mat", "big red car"])
    np.testing.assert_allclose(resumed.logits(*probe), full.logits(*probe), atol=1e-5)
    assert full.info["threshold"] is not None
    shutil.rmtree(tmp_path / "full" / "model")
    with pytest.raises(OndeviceError, match="not a cross-encoder teacher"):
        CrossEncoderTeacher.load(tmp_path / "full")


def test_three_class_teacher(pair_env, tmp_path):
    cfg = CrossEncoderConfig(task="sick-e", data=str(pair_env.data), base=str(pair_env.base), epochs=1, batch_size=16,
                             lr=1e-3, max_train_pairs=32, logging_steps=1)
    t = fine_tune(cfg, tmp_path / "a", progress=False)
    assert t.logits(["a cat"], ["a dog"]).shape == (1, 3) and "accuracy" in t.info["dev"]


def test_bad_config():
    with pytest.raises(OndeviceError, match="^epochs must be"):
        CrossEncoderConfig(task="stsb", data="", epochs=0).validate()
    with pytest.raises(OndeviceError, match="unknown pair task"):
        CrossEncoderConfig(task="nli", data="").validate()


def test_swapped_teacher_scores_b_a_under_its_own_identity(pair_env):
    plain = CrossEncoderTeacher.load(pair_env.teacher())
    info = json.loads(json.dumps(plain.info))
    info["config"]["swap"] = True  # as `ondevice pairs teacher --swap` records it
    swapped = CrossEncoderTeacher(plain.directory, info)
    a, b = ["a cat sat on the mat", "the dog ran"], ["a big red car", "the dog ran fast"]
    np.testing.assert_allclose(swapped.logits(a, b), plain.logits(b, a), atol=1e-6)
    assert swapped.identity == {**plain.identity, "input_order": "ba"} and "input_order" not in plain.identity


def test_both_orders_teacher_means_the_two_orders_under_its_own_identity(pair_env, tmp_path):
    plain = CrossEncoderTeacher.load(pair_env.teacher())
    info = json.loads(json.dumps(plain.info))
    info["config"]["both_orders"] = True
    sym = CrossEncoderTeacher(plain.directory, info)
    a, b = ["a cat sat on the mat", "the dog ran"], ["a big red car", "the dog ran fast"]
    np.testing.assert_allclose(sym.logits(a, b), (plain.logits(a, b) + plain.logits(b, a)) / 2, atol=1e-6)
    np.testing.assert_allclose(sym.logits(a, b), sym.logits(b, a), atol=1e-6)
    assert sym.identity["input_order"] == "mean(ab,ba)"
    cfg = CrossEncoderConfig(task="mrpc", data=str(pair_env.data), base=str(pair_env.base), epochs=1, batch_size=8,
                             lr=1e-3, max_train_pairs=16, both_orders=True)
    t = fine_tune(cfg, tmp_path / "sym", progress=False)
    assert t.info["train_pairs"] == 16  # the pairs, not the doubled rows
    np.testing.assert_allclose(t.logits(a, b), t.logits(b, a), atol=1e-5)
    with pytest.raises(OndeviceError, match="swap and both_orders exclude each other"):
        CrossEncoderConfig(task="mrpc", data="", swap=True, both_orders=True).validate()


def test_teacher_without_weights_serves_cached_logits_only(pair_env, tmp_path):
    import shutil

    from ondevice.pairs.logits import teacher_logits

    src = CrossEncoderTeacher.load(pair_env.teacher())
    a, b = ["a cat sat on the mat"], ["a big red car"]
    want = teacher_logits(src, a, b, progress=False, root=tmp_path / "cache")
    bare = tmp_path / "bare"
    shutil.copytree(src.directory, bare)
    (bare / "model" / "model.safetensors").unlink()
    t = CrossEncoderTeacher.load(bare)  # opening needs no weights
    np.testing.assert_array_equal(teacher_logits(t, a, b, progress=False, root=tmp_path / "cache"), want)
    with pytest.raises(OndeviceError, match="holds no weights"):
        teacher_logits(t, ["another pair"], ["not cached"], progress=False, root=tmp_path / "cache")


def test_device_flag_checks():
    from ondevice.devices import resolve_device

    assert resolve_device("cpu") == "cpu" and resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(OndeviceError, match="^device must be"):
        CrossEncoderConfig(task="stsb", data="", device="gpu").validate()
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(OndeviceError, match="sees no CUDA GPU"):
            resolve_device("cuda")


@pytest.mark.parametrize("name", ["teacher.json", "model/model.safetensors", "model/tokenizer.json", "model"])
def test_a_linked_file_in_a_teacher_folder_is_refused(tmp_path, name):
    """A teacher folder someone sends must not make ondevice (or transformers) read other files of this machine
    through a symbolic link; checked when the folder is opened, before any file of it is read."""
    t = tmp_path / "T"
    (t / "model").mkdir(parents=True)
    (t / "teacher.json").write_text(json.dumps({"config": {"task": "stsb", "max_length": 128}, "weights_sha256": "0"}))
    for file in ("config.json", "model.safetensors", "tokenizer.json"):
        (t / "model" / file).write_text("{}")
    assert CrossEncoderTeacher.load(t).spec.name == "stsb"  # the plain folder opens
    shutil.move(t / name, tmp_path / "copy")  # same bytes, so only the link is wrong
    (t / name).symlink_to(tmp_path / "copy")
    with pytest.raises(OndeviceError, match=rf"^cross-encoder teacher {t}: {name} is a symbolic link; "):
        CrossEncoderTeacher.load(t)
