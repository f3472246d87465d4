"""Paper-004 single-sentence head: trains end to end on (fake) SST-2, keeps the dev-best epoch, resumes exactly."""

from __future__ import annotations

import json

import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.single import SentenceHeadConfig, evaluate_sentence_head, train_sentence_head


def test_sentence_head_learns_and_resumes(pair_env, tmp_path):
    cfg = SentenceHeadConfig(data=str(pair_env.data), student=str(pair_env.student), hidden=8, epochs=3, batch_size=16,
                             lr=5e-3, seed=0)
    dev = train_sentence_head(cfg, tmp_path / "full", progress=False)
    log = [json.loads(x) for x in (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["train_loss"] < log[0]["train_loss"]
    assert dev["accuracy"] == max(e["dev_accuracy"] for e in log) and dev["accuracy"] > 60  # words decide the label
    assert evaluate_sentence_head(tmp_path / "full", pair_env.data)["n"] == 120
    two = SentenceHeadConfig(**{**cfg.__dict__, "epochs": 1})
    train_sentence_head(two, tmp_path / "part", progress=False)
    (tmp_path / "part" / "sentence_config.json").write_text(
        (tmp_path / "part" / "sentence_config.json").read_text().replace('"epochs": 1', '"epochs": 3'))
    train_sentence_head(cfg, tmp_path / "part", resume=True, progress=False)
    assert (tmp_path / "part" / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "full" / "checkpoint" / "model.safetensors").read_bytes()
    with pytest.raises(OndeviceError, match="--resume"):
        train_sentence_head(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="--task"):
        SentenceHeadConfig(data="", student="", task="mr").validate()


def test_a_negative_thread_count_is_refused_up_front():
    """`pairs sentence --threads -1` ended in torch's RuntimeError; now the config says so, naming the flag."""
    with pytest.raises(OndeviceError, match="--threads must be >= 0"):
        SentenceHeadConfig(data="", student="", threads=-1).validate()
