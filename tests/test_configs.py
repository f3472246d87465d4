"""Run configs made of shared pieces: flat keywords and attributes, files of the previous release, the nested
layout, field-named validation and the CLI's flags; the shared training loop's start, Ctrl-C and NaN stops."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from ondevice.binarize_ae import AEConfig
from ondevice.cli import main
from ondevice.configs import (
    Composed,
    ConfigError,
    Optimization,
    composed,
    first_problem,
    flags_for_fields,
    float_check,
    int_check,
)
from ondevice.distill import DistillConfig
from ondevice.errors import OndeviceError
from ondevice.pairs.augment import AUGMENT_KEYS, AugmentConfig
from ondevice.pairs.crossencoder import CrossEncoderConfig
from ondevice.pairs.dipair_train import DiPairConfig
from ondevice.pairs.dvbert import DvBERTConfig
from ondevice.pairs.train import DSEConfig
from ondevice.trainloop import Position, check_start, run_epochs

# distill_config.json exactly as the previous release wrote it (one flat key per setting)
LEGACY_DISTILL = {
    "allow_pickle": False, "backend": "local", "batch_size": 64, "checkpoint_minutes": 0, "clip_grad_norm": 1.0,
    "corpus": "wiki.txt", "corpus_sha256": "ab" * 32, "device": "cpu", "embedding_dim": 0, "epochs": 3,
    "exclude_eval": True, "freeze_embeddings": False, "hidden_size": 128, "init_from": "", "init_sha256": "",
    "lr": 0.002, "lr_schedule": "cosine", "max_sentences": 1000, "max_tokens": 64, "pooling": "meanmax",
    "ray_address": "", "ray_workers": 0, "seed": 7, "sim_loss_weight": 0.5, "teacher": "all-MiniLM-L6-v2",
    "teacher_backend": "onnx", "teacher_batch_size": 32, "teacher_normalize": True, "teacher_pooling": "mean",
    "threads": 2, "train_split_repeats": 1, "train_splits": False, "val_fraction": 0.05, "vocab_size": 5000,
    "warmup_steps": 10, "word_vectors": "teacher"}
# dse_config.json of the previous release
LEGACY_DSE = {
    "alpha": 0.5, "augment_bits": 128, "augment_edits": 1, "augment_neighbors": 1, "augment_random": 40,
    "augment_tasks": "", "augment_tasks_max": 50000, "augment_text": "", "augment_text_max": 50000,
    "augment_text_sha256": "", "batch_size": 16, "data": "data", "device": "cpu", "epochs": 2, "freeze_encoder": False,
    "head_hidden": 8, "lr": 0.003, "max_train_pairs": None, "seed": 1, "split_seed": 0, "student": "student",
    "task": "stsb", "teacher": "teacher", "threads": 0}


def test_a_previous_release_file_loads_into_the_pieces_and_is_written_back_the_same():
    cfg = DistillConfig.from_dict(LEGACY_DISTILL, "distill config")
    assert (cfg.optim.epochs, cfg.optim.batch_size, cfg.arch.hidden_size, cfg.arch.pooling) == (3, 64, 128, "meanmax")
    assert (cfg.teaching.runtime, cfg.teaching.batch_size, cfg.schedule.lr_schedule) == ("onnx", 32, "cosine")
    assert (cfg.text.max_sentences, cfg.words.vocab_size, cfg.checkpoint.checkpoint_minutes) == (1000, 5000, 0)
    assert cfg.to_dict() == LEGACY_DISTILL  # the file layout is the flat one every release reads
    dse = DSEConfig.from_dict(LEGACY_DSE, "DSE config")
    assert (dse.augment.random_pairs, dse.augment.bits, dse.augment.edits, dse.pairs.task) == (40, 128, 1, "stsb")
    assert dse.to_dict() == LEGACY_DSE and set(AUGMENT_KEYS) <= set(dse.to_dict())


def test_the_nested_layout_loads_too():
    cfg = DistillConfig.from_dict(LEGACY_DISTILL, "distill config")
    nested = json.loads(json.dumps(dataclasses.asdict(cfg)))
    assert "optim" in nested and "epochs" not in nested
    assert DistillConfig.from_dict(nested, "distill config") == cfg
    dse = DSEConfig.from_dict(LEGACY_DSE, "DSE config")
    assert DSEConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(dse))), "DSE config") == dse
    with pytest.raises(OndeviceError, match=r"unknown keys \['optim.momentum'\]"):
        DistillConfig.from_dict({**nested, "optim": {**nested["optim"], "momentum": 0.9}}, "distill config")


@pytest.mark.parametrize("data, problem", [([1], "must be a JSON object"), ({"epochs": 2}, r"lacks \['corpus'\]"),
                                           ({**LEGACY_DISTILL, "bogus": 1}, r"unknown keys \['bogus'\]")])
def test_bad_files_are_one_line_errors(data, problem):
    with pytest.raises(OndeviceError, match=problem):
        DistillConfig.from_dict(data, "distill config")


def test_flat_keywords_and_attributes_reach_the_pieces():
    cfg = DistillConfig(corpus="c", epochs=2, hidden_size=12, teacher="t", teacher_backend="onnx")
    assert (cfg.optim.epochs, cfg.arch.hidden_size, cfg.teaching.name, cfg.teaching.runtime) == (2, 12, "t", "onnx")
    assert (cfg.epochs, cfg.teacher, cfg.teacher_backend) == (2, "t", "onnx")
    cfg.lr = 0.5
    assert cfg.optim.lr == 0.5
    other = dataclasses.replace(cfg, epochs=9)  # a copy: the pieces are never shared
    assert (other.epochs, cfg.epochs, other.lr) == (9, 2, 0.5)
    whole = DistillConfig(corpus="c", optim=Optimization(epochs=5, batch_size=8, lr=0.1), lr=0.2)
    assert (whole.epochs, whole.batch_size, whole.lr) == (5, 8, 0.2)
    dse = DSEConfig("stsb", "data", "student", augment_random=3)  # the required settings by position, as before
    again = DSEConfig(**{**dse.__dict__, "lr": 0.1})
    assert (again.task, again.augment_random, again.lr, dse.lr) == ("stsb", 3, 0.1, 5e-4)
    with pytest.raises(TypeError, match="missing required"):
        DSEConfig(task="stsb", data="data")
    with pytest.raises(TypeError, match="unexpected"):
        DistillConfig(corpus="c", epoch=2)
    assert AEConfig(epochs=3).optim.epochs == 3 and AEConfig.flat_names()[:3] == ["epochs", "batch_size", "lr"]
    assert DiPairConfig.flat_defaults()["augment_random"] == 30000 and DvBERTConfig.flat_defaults()["teachers"] == []
    assert AugmentConfig(24, 1, 256, 0, 1).edits == 1  # positional order kept


@pytest.mark.parametrize("config, message", [
    (lambda: DistillConfig(corpus="c", epochs=0), "epochs must be between 1 and 100,000, got 0"),
    (lambda: DistillConfig(corpus="c", hidden_size=0), "hidden_size must be between 1 and 8,192, got 0"),
    (lambda: DistillConfig(corpus="c", device="cuda", teacher_backend="onnx"), "teacher_backend onnx runs on the CPU"),
    (lambda: AEConfig(batch_size=1), "batch_size must be >= 2"),
    (lambda: DSEConfig(task="stsb", data="d", student="s", alpha=2.0), "alpha must be in [0, 1]"),
    (lambda: DSEConfig(task="stsb", data="d", student="s", teacher="t", augment_random=-1), "augment_random must be >= 0"),
    (lambda: DvBERTConfig(task="stsb", data="d", student="s", teachers=["t"], anneal="x"), "anneal must be linear"),
    (lambda: DiPairConfig(task="stsb", data="d", student="s", teacher="t", stage1_epochs=0, stage2_epochs=0),
     "stage1_epochs + stage2_epochs must be >= 1"),
    (lambda: CrossEncoderConfig(task="stsb", data="d", max_train_pairs=1), "max_train_pairs must be >= 2"),
])
def test_validation_names_fields_and_a_cli_names_flags(config, message):
    with pytest.raises(ConfigError) as caught:
        config().validate()
    assert str(caught.value).startswith(message) and "--" not in str(caught.value)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(OndeviceError) as flagged, flags_for_fields({"hidden_size": "--hidden"}):
        config().validate()
    shown = str(flagged.value)
    assert shown.startswith("--") and ("--hidden" in shown) == ("hidden_size" in message)


def test_the_cli_reports_a_setting_by_its_flag(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\nc d\n")
    code = main(["distill", "--corpus", str(corpus), "--out", str(tmp_path / "s"), "--hidden", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--hidden must be between 1 and 8,192" in err
    code = main(["distill", "--corpus", str(corpus), "--out", str(tmp_path / "s"), "--train-split-repeats", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--train-split-repeats needs --train-splits" in err and not (tmp_path / "s").exists()


def test_loop_start_and_interrupts(tmp_path):
    check_start(tmp_path, False, False, "checkpoint/")
    with pytest.raises(OndeviceError, match="holds a checkpoint of an earlier run; pass --resume"):
        check_start(tmp_path, False, True, "checkpoint/")
    with pytest.raises(OndeviceError, match=r"nothing to resume in .* \(no checkpoint/\)"):
        check_start(tmp_path, True, False, "checkpoint/")
    saved: list[tuple[int, int]] = []

    def epoch(pos: Position) -> dict:
        pos.step += 2
        if pos.epoch == 1:
            raise KeyboardInterrupt
        return {"epoch": pos.epoch + 1}

    log: list[dict] = []
    with pytest.raises(OndeviceError, match="interrupted at epoch 2, batch 2; checkpoint saved"):
        run_epochs(Position(0, 0), 3, epoch, lambda p: saved.append((p.epoch, p.step)), log)
    assert saved == [(1, 0), (1, 2)] and log == [{"epoch": 1}]  # each epoch's end, then where Ctrl-C stopped
    with pytest.raises(OndeviceError, match="interrupted in epoch 2; the checkpoint of the epochs before is kept"):
        run_epochs(Position(0, 0), 3, epoch, lambda p: saved.append((p.epoch, p.step)), [], steps_resume=False)
    with pytest.raises(KeyboardInterrupt):  # a run without checkpoints has nothing to say about resuming
        run_epochs(Position(1, 0), 3, epoch, None, [])


def test_constructor_argument_errors_name_the_class_and_the_arguments():
    with pytest.raises(TypeError, match=r"^DSEConfig takes at most 3 positional arguments$"):
        DSEConfig("stsb", "data", "student", "extra")
    with pytest.raises(TypeError, match=r"^DSEConfig got 'data' twice$"):
        DSEConfig("stsb", "data", data="other", student="s")
    with pytest.raises(TypeError, match=r"^DiPairConfig missing required arguments \['student', 'teacher'\]$"):
        DiPairConfig("stsb", "data")
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['bogus', 'epoch'\]"):
        DSEConfig("stsb", "data", "student", epoch=1, bogus=2)
    assert DSEConfig("stsb", "data", "student").student == "student"  # exactly the required ones by position


def test_unknown_attributes_raise_attribute_error_and_getattr_defaults_work():
    cfg = DSEConfig("stsb", "d", "s")
    with pytest.raises(AttributeError, match="'DSEConfig' object has no attribute 'no_such_setting'"):
        cfg.no_such_setting  # noqa: B018
    assert getattr(cfg, "no_such_setting", "fallback") == "fallback"
    assert not hasattr(cfg, "__wrapped__")  # dunder look-ups never reach the flat names
    assert cfg.augment_random == cfg.augment.random_pairs


def test_flat_fields_give_each_setting_its_declared_type_and_default():
    fields = DistillConfig.flat_fields()
    assert list(fields) == DistillConfig.flat_names() and set(fields) == set(LEGACY_DISTILL)
    assert (fields["epochs"].name, fields["epochs"].type, fields["epochs"].default) == ("epochs", "int", 4)
    assert (fields["lr"].type, fields["pooling"].default) == ("float", "mean")
    assert (fields["corpus"].name, fields["corpus"].type) == ("corpus", "str | list[str]")
    dse = DSEConfig.flat_fields()
    assert dse["augment_random"].name == "random_pairs"  # a renamed flat name: the piece's own field behind it
    defaults = DSEConfig.flat_defaults()
    assert all(dse[n].default == v for n, v in defaults.items() if dse[n].default is not dataclasses.MISSING)


def test_a_flat_name_that_is_also_a_field_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match=r"Clash: flat names \['epochs'\] are also fields"):
        @composed
        class Clash(Composed):
            epochs: int = 1
            optim: Optimization = dataclasses.field(default_factory=Optimization)


def test_non_finite_numbers_and_wrong_types_are_named():
    with pytest.raises(ConfigError) as caught:
        first_problem([float_check(math.inf, "lr", 0.0, 10.0)])
    assert str(caught.value) == "lr must be a finite number, got inf" and caught.value.fields == ["lr"]
    assert float_check(float("nan"), "lr", 0.0, 1.0) == (False, "{lr} must be a finite number, got nan")
    assert float_check(True, "lr", 0.0, 1.0)[0] is False and int_check(1.0, "epochs", 0, 2)[0] is False
    assert float_check(0.0, "lr", 0.0, 1.0, lo_open=True)[0] is False and float_check(0.0, "lr", 0.0, 1.0)[0]
    with pytest.raises(ConfigError) as caught:
        DistillConfig(corpus="c", lr=math.nan).validate()
    assert caught.value.fields == ["lr"] and caught.value.render(lambda f: f"<{f}>").startswith("<lr> must be")
