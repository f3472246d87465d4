"""A bi-encoder as a pair teacher view: calibration against brute force, symmetry, caching identity, DvBERT with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.biencoder import BiEncoderTeacher, least_squares_fit, logistic_fit

pytest.importorskip("torch")


def test_fits_match_the_textbook():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 20000)
    assert least_squares_fit(x, 0.3 + 2.0 * x) == pytest.approx((2.0, 0.3))
    y = (rng.random(x.size) < 1 / (1 + np.exp(-(4.0 * x - 1.0)))).astype(float)
    scale, offset = logistic_fit(x, y)
    assert scale == pytest.approx(4.0, abs=0.25) and offset == pytest.approx(-1.0, abs=0.1)
    assert np.isfinite(logistic_fit(x, (x > 0).astype(float))).all()  # separable: the penalty keeps it finite


@pytest.fixture(scope="module")
def view(pair_env, tiny_teacher):
    return BiEncoderTeacher(f"bi-encoder:{tiny_teacher}", "stsb", pair_env.data)


def test_calibrated_cosine_regression(view, pair_env, tiny_teacher):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.teacher import Teacher

    train = load_pairs("stsb", "train", pair_env.data)
    enc = Teacher(str(tiny_teacher))
    u, v = enc.encode(list(train.a)), enc.encode(list(train.b))
    cos = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    scale, offset = np.polyfit(cos, train.gold / 5.0, 1)  # STS-B scores 0-5 in training units [0, 1]
    assert (view.scale, view.offset) == pytest.approx((scale, offset), rel=1e-4, abs=1e-5)
    logits = view.logits(train.a[:10], train.b[:10])
    assert logits.shape == (10, 1) and logits.dtype == np.float32
    assert np.allclose(logits[:, 0], offset + scale * cos[:10], atol=1e-5)
    assert np.array_equal(logits, view.logits(train.b[:10], train.a[:10]))  # symmetric
    assert view.info["dev"]["n"] > 0 and view.identity["calibration"] == [round(view.scale, 12), round(view.offset, 12)]


def test_binary_tasks_get_a_logistic_fit_and_class_tasks_are_refused(pair_env, tiny_teacher):
    mrpc = BiEncoderTeacher(f"bi-encoder:{tiny_teacher}", "mrpc", pair_env.data)
    assert mrpc.info["threshold"] is not None and "accuracy" in mrpc.info["dev"]
    with pytest.raises(OndeviceError, match="sick-e has 3 classes"):
        BiEncoderTeacher(f"bi-encoder:{tiny_teacher}", "sick-e", pair_env.data)


def test_dvbert_refuses_a_swapped_bi_encoder_view(pair_env):
    from ondevice.pairs.dvbert import DvBERTConfig

    cfg = DvBERTConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teachers=["bi-encoder:ba"])
    with pytest.raises(OndeviceError, match="^teachers: a bi-encoder view is symmetric"):
        cfg.validate()


def test_dvbert_with_a_cross_encoder_and_a_bi_encoder(pair_env, tiny_teacher, tmp_path):
    from ondevice.pairs.dvbert import DvBERTConfig, train_dvbert
    from ondevice.pairs.train import PairStudent

    views = [str(pair_env.teacher()), f"bi-encoder:{tiny_teacher}"]
    cfg = DvBERTConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teachers=views, epochs=1,
                       head_hidden=8, max_train_pairs=48, augment_random=20, augment_neighbors=0)
    train_dvbert(cfg, tmp_path / "run", progress=False)
    data = json.loads((tmp_path / "run" / "data.json").read_text())
    assert [t["identity"]["kind"] for t in data["teachers"]] == ["cross-encoder", "bi-encoder"]
    assert data["teachers"][1]["dev"]["n"] > 0 and data["augment_pairs"] > 0  # the bi view scored the transfer set too
    from ondevice.eval.pair_tasks import load_pairs

    assert np.isfinite(PairStudent.load(tmp_path / "run").evaluate(load_pairs("stsb", "test", pair_env.data))["spearman"])
