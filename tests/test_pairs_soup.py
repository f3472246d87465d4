"""Weight soup of a finished pair run: the exact mean of the dev-best and final weights, kept only on a higher dev
score, written to a new folder with the source run untouched; unfinished runs and used folders are one-line errors."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from ondevice.errors import OndeviceError
from ondevice.pairs import soup as soup_mod
from ondevice.pairs.soup import average_states, soup_run


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _published(run: Path, head_file: str) -> dict[str, np.ndarray]:
    """The run folder's published weights under their checkpoint names (encoder.*, head.* / proj.* ...)."""
    w = {f"encoder.{k}": v for k, v in load_file(str(run / "student" / "model.safetensors")).items()}
    for k, v in load_file(str(run / head_file)).items():
        w[k if k.split(".")[0] in ("proj", "vproj") else f"head.{k}"] = v
    return w


def _check_weights(run: Path, out: Path, head_file: str, kept: bool) -> None:
    src, final, got = _published(run, head_file), load_file(str(run / "checkpoint" / "model.safetensors")), _published(out, head_file)
    assert got.keys() == src.keys() <= final.keys()
    for k in src:
        want = (src[k] + final[k]) / 2 if kept else src[k]
        np.testing.assert_allclose(got[k], want, rtol=0, atol=1e-7, err_msg=k)


def test_average_states_is_the_elementwise_mean():
    import torch

    a = {"w": torch.randn(3, 4), "n": torch.tensor([1, 2])}
    b = {"w": torch.randn(3, 4), "n": torch.tensor([5, 6])}
    got = average_states(a, b)
    np.testing.assert_allclose(got["w"].numpy(), (a["w"].numpy() + b["w"].numpy()) / 2, atol=1e-7)
    assert got["n"].tolist() == [1, 2]  # integer buffers are not averaged
    with pytest.raises(OndeviceError, match="do not match"):
        average_states(a, {"w": torch.randn(3, 5), "n": b["n"]})


@pytest.mark.parametrize("force", [False, True])
def test_dse_soup_is_written_beside_the_run(pair_env, tmp_path, monkeypatch, force):
    from ondevice.pairs.train import PairStudent

    run = tmp_path / "run"
    shutil.copytree(pair_env.run(), run)
    if force:  # a dev-best epoch before the last, and a soup dev scores higher: the kept branch, whatever tiny data says
        dev = json.loads((run / "dev.json").read_text())
        (run / "dev.json").write_text(json.dumps({**dev, "epoch": 1}))
        real = soup_mod._dev_metrics

        def better(model, spec, data):
            metrics, threshold = real(model, spec, data)
            return {**metrics, "spearman": 101.0}, threshold

        monkeypatch.setattr(soup_mod, "_dev_metrics", better)
    before = _digest(run)
    record = soup_run(run, tmp_path / "soup")
    assert _digest(run) == before  # the source run is left as it was
    published = json.loads((run / "dev.json").read_text())
    assert record["kept"] == (record["best_epoch"] != record["final_epoch"] and record["dev_soup"] > record["dev_best"])
    if force:
        assert record["kept"]
    _check_weights(run, tmp_path / "soup", "pair_head.safetensors", record["kept"])
    out_dev = json.loads((tmp_path / "soup" / "dev.json").read_text())
    assert out_dev["spearman"] == (record["dev_soup"] if record["kept"] else published["spearman"])
    assert json.loads((tmp_path / "soup" / "soup.json").read_text()) == record
    assert not (tmp_path / "soup" / "checkpoint").exists()
    PairStudent.load(tmp_path / "soup")  # a loadable run (and exportable like any other)


def test_dipair_soup_reports_the_encoder_cosine(pair_env, tiny_teacher, tmp_path, monkeypatch):
    from ondevice.pairs.dipair_train import DiPairConfig, DiPairStudent, train_dipair

    cfg = DiPairConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teacher=str(pair_env.teacher()),
                       sra_teacher=str(tiny_teacher), n=4, m=4, d=8, ffn=16, stage1_epochs=1, stage2_epochs=2,
                       batch_size=16, lr1=3e-3, lr2=1e-3, augment_random=30, layers=1)
    train_dipair(cfg, tmp_path / "run", progress=False)
    dev = json.loads((tmp_path / "run" / "dev.json").read_text())
    (tmp_path / "run" / "dev.json").write_text(json.dumps({**dev, "epoch": 1}))
    real = soup_mod._dev_metrics
    monkeypatch.setattr(soup_mod, "_dev_metrics", lambda *a: ({**real(*a)[0], "spearman": 101.0}, None))
    record = soup_run(tmp_path / "run", tmp_path / "soup")
    assert record["kept"]
    _check_weights(tmp_path / "run", tmp_path / "soup", "dipair_head.safetensors", True)
    cos = json.loads((tmp_path / "soup" / "sra_cosine.json").read_text())
    soup = DiPairStudent.load(tmp_path / "soup")
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.dipair_train import _cosine, _sra_teacher
    from ondevice.teacher import cached_vectors

    d = load_pairs("stsb", "dev", pair_env.data)
    texts = list(dict.fromkeys([*d.a, *d.b]))
    want = _cosine(soup.vectors(texts), cached_vectors(_sra_teacher(cfg, soup.student), texts, progress=False))
    assert cos["after"] == pytest.approx(want, abs=1e-5) and cos["before"] is not None


def test_unfinished_runs_and_used_folders_are_refused(pair_env, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pair_env.run(), run)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    with pytest.raises(OndeviceError, match="not empty"):
        soup_run(run, tmp_path / "used")
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    (run / "checkpoint" / "state.json").write_text(json.dumps({**state, "epoch": 1}))
    with pytest.raises(OndeviceError, match="has not finished"):
        soup_run(run, tmp_path / "soup")
    with pytest.raises(OndeviceError, match="not a finished DSE or DiPair run"):
        soup_run(tmp_path / "used", tmp_path / "soup")


def test_a_linked_checkpoint_is_refused(pair_env, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pair_env.run(), run)
    weights = run / "checkpoint" / "model.safetensors"
    (tmp_path / "outside.safetensors").write_bytes(weights.read_bytes())
    weights.unlink()
    weights.symlink_to(tmp_path / "outside.safetensors")
    with pytest.raises(OndeviceError, match="checkpoint/model.safetensors is a symbolic link"):
        soup_run(run, tmp_path / "soup")
