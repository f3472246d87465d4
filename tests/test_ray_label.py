"""Teacher labelling on a local Ray: same cache key and vectors as a local run, resumable after a kill."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_sentences

from ondevice.errors import OndeviceError
from ondevice.teacher import Teacher, VectorCache, cache_folder, cached_vectors

pytest.importorskip("ray", reason="ray is not installed: the Ray tests need `pip install 'ondevice[scale]'`")
pytest.importorskip("torch")

from ondevice.scale.ray_label import ray_cached_vectors


class Stop(Exception):
    pass


def test_ray_equals_local_and_caches_interchange(ray_local, tiny_teacher, tmp_path):
    teacher = Teacher(tiny_teacher)
    sentences = make_sentences(70, seed=3)
    local = np.array(cached_vectors(teacher, sentences, chunk=16, root=tmp_path / "local", progress=False))
    got = np.array(ray_cached_vectors(teacher, sentences, chunk=16, root=tmp_path / "ray", progress=False, workers=1))
    folder_local, _ = cache_folder(teacher, sentences, tmp_path / "local")
    folder_ray, _ = cache_folder(teacher, sentences, tmp_path / "ray")
    assert folder_local.name == folder_ray.name  # same key
    assert json.loads((folder_ray / "key.json").read_text()) == json.loads((folder_local / "key.json").read_text())
    np.testing.assert_allclose(got, local, atol=1e-6, rtol=0)
    # The local reader takes the Ray-written cache as finished: nothing to compute, the same vectors.
    cache = VectorCache(folder_ray, len(sentences), teacher.dim, 16, {})
    assert cache.pending() == []
    np.testing.assert_array_equal(np.array(cached_vectors(teacher, sentences, chunk=16, root=tmp_path / "ray",
                                                          progress=False)), got)


def test_ray_killed_after_k_chunks_resumes_only_missing(ray_local, tiny_teacher, tmp_path):
    teacher = Teacher(tiny_teacher)
    sentences = make_sentences(90, seed=4)
    reference = np.array(cached_vectors(teacher, sentences, chunk=10, root=tmp_path / "ref", progress=False))
    seen: list[int] = []

    def stop_after_3(c: int) -> None:
        seen.append(c)
        if len(seen) == 3:
            raise Stop

    with pytest.raises(Stop):
        ray_cached_vectors(teacher, sentences, chunk=10, root=tmp_path, progress=False, workers=1, on_chunk=stop_after_3)
    folder, _ = cache_folder(teacher, sentences, tmp_path)
    state = json.loads((folder / "state.json").read_text())
    assert sorted(state["chunks"]) == sorted(seen)
    resumed: list[int] = []
    got = np.array(ray_cached_vectors(teacher, sentences, chunk=10, root=tmp_path, progress=False, workers=1,
                                      on_chunk=resumed.append))
    assert sorted(resumed) == sorted(set(range(9)) - set(seen))  # only the missing chunks were computed
    np.testing.assert_allclose(got, reference, atol=1e-6, rtol=0)


def test_light_tokenizer_matches_the_teacher_call(tiny_teacher):
    from ondevice.scale.ray_label import light_tokenizer, tokenizer_spec

    teacher = Teacher(tiny_teacher, backend="onnx", threads=1)
    texts = make_sentences(20, seed=5) + ["the cat " * 60, "", "zebra unknownword ."]  # truncated, empty, [UNK]
    want = teacher.tokenizer(texts, padding=True, truncation=True, max_length=teacher.info.max_length,
                             return_tensors="np")
    got = light_tokenizer(tokenizer_spec(teacher)).encode_batch(texts)
    assert max(len(e.ids) for e in got) == teacher.info.max_length  # the long text was cut like the teacher cuts it
    np.testing.assert_array_equal(np.array([e.ids for e in got]), want["input_ids"])
    np.testing.assert_array_equal(np.array([e.attention_mask for e in got]), want["attention_mask"])
    np.testing.assert_array_equal(np.array([e.type_ids for e in got]), want["token_type_ids"])


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_ray_onnx_backends_use_light_actors_and_equal_local(ray_local, tiny_teacher, tmp_path, backend):
    teacher = Teacher(tiny_teacher, backend=backend, threads=1)
    sentences = make_sentences(50, seed=6) + ["the cat " * 60]
    local = np.array(cached_vectors(teacher, sentences, chunk=16, root=tmp_path / "local", progress=False))
    timings: dict = {}
    got = np.array(ray_cached_vectors(teacher, sentences, chunk=16, root=tmp_path / "ray", progress=False, workers=1,
                                      timings=timings))
    assert cache_folder(teacher, sentences, tmp_path / "ray")[0].name == cache_folder(teacher, sentences,
                                                                                     tmp_path / "local")[0].name
    np.testing.assert_allclose(got, local, atol=1e-6, rtol=0)
    assert timings["actor_kind"] == "onnx-light" and len(timings["chunks_s"]) == 4
    (actor,) = timings["actors"].values()
    assert 0 <= actor["start_s"] <= actor["ready_s"] <= timings["chunks_s"][0]


def test_torch_backend_keeps_full_actors_and_reports_timings(ray_local, tiny_teacher, tmp_path):
    timings: dict = {}
    ray_cached_vectors(Teacher(tiny_teacher), make_sentences(20, seed=7), chunk=8, root=tmp_path, progress=False,
                       workers=1, timings=timings)
    assert timings["actor_kind"] == "torch" and len(timings["chunks_s"]) == 3
    assert timings["planned_s"] <= timings["ray_up_s"] <= timings["dataset_s"] <= timings["chunks_s"][0]


def test_ray_too_many_workers_is_one_line_error(ray_local, tiny_teacher, tmp_path):
    with pytest.raises(OndeviceError, match="leave no CPU free"):
        ray_cached_vectors(Teacher(tiny_teacher), make_sentences(5), root=tmp_path, progress=False, workers=4)


def test_small_dev_shm_is_a_one_line_error(monkeypatch):
    from ondevice.scale import ray_env

    monkeypatch.setattr(ray_env, "_shm_free_mb", lambda: 64)  # Docker's default /dev/shm
    with pytest.raises(OndeviceError, match="shm-size"):
        ray_env.object_store_mb()
    monkeypatch.setattr(ray_env, "_shm_free_mb", lambda: 10_000)
    assert ray_env.object_store_mb() == 2048 and ray_env.object_store_mb(500) == 500


def test_cli_flags_reach_the_config():
    from ondevice.cli import build_parser
    from ondevice.cli.distill import config_from_args

    a = build_parser().parse_args(["distill", "--corpus", "c.txt", "--out", "o", "--backend", "ray",
                                   "--ray-address", "head:6379", "--ray-workers", "3"])
    config = config_from_args(a)
    assert (config.backend, config.ray_address, config.ray_workers) == ("ray", "head:6379", 3)
    b = build_parser().parse_args(["binarize", "--teacher", "--corpus", "c.txt", "--bits", "8", "--out", "o",
                                   "--backend", "ray"])
    assert b.backend == "ray" and b.ray_address == ""


def test_distill_cli_with_ray_backend_fills_the_local_cache(ray_local, tiny_corpus, tiny_teacher, tiny_word_vectors,
                                                            tmp_path, capsys):
    from ondevice.cli import main
    from ondevice.distill import DistillConfig, read_sentences

    code = main(["distill", "--corpus", str(tiny_corpus), "--teacher", str(tiny_teacher), "--word-vectors",
                 str(tiny_word_vectors), "--out", str(tmp_path / "s"), "--hidden", "4", "--epochs", "1",
                 "--backend", "ray", "--ray-workers", "1"])
    assert code == 0 and "student saved to" in capsys.readouterr().out
    # The default cache now holds every chunk: a local run finds nothing left to compute.
    teacher = Teacher(tiny_teacher)
    sentences = read_sentences(DistillConfig(corpus=str(tiny_corpus)))
    folder, _ = cache_folder(teacher, sentences)
    assert VectorCache(folder, len(sentences), teacher.dim, 2048, {}).pending() == []
