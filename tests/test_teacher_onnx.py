import numpy as np
import pytest

from ondevice.teacher import Teacher, cache_folder, cached_vectors

pytest.importorskip("torch")
pytest.importorskip("onnx")

TEXTS = ["the cat sat on the mat", "a dog ran fast", "the sun", "big red house near the river ."]


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_onnx_fp32_matches_torch(tiny_teacher, pooling):
    ref = Teacher(tiny_teacher, pooling=pooling).encode(TEXTS, batch_size=2)
    got = Teacher(tiny_teacher, pooling=pooling, backend="onnx", threads=1).encode(TEXTS, batch_size=3)
    assert _cos(ref, got).min() > 1 - 1e-4
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_fp32_backends_share_a_cache_key_and_int8_has_its_own(tiny_teacher, tmp_path):
    torch_t = Teacher(tiny_teacher)
    onnx_t = Teacher(tiny_teacher, backend="onnx", threads=1)
    int8_t = Teacher(tiny_teacher, backend="onnx-int8", threads=1)
    assert cache_folder(torch_t, TEXTS)[0] == cache_folder(onnx_t, TEXTS)[0]
    assert cache_folder(int8_t, TEXTS)[0] != cache_folder(torch_t, TEXTS)[0]
    assert int8_t.info.precision == "int8"
    vec = int8_t.encode(TEXTS)
    assert np.isfinite(vec).all() and _cos(vec, torch_t.encode(TEXTS)).min() > 0.9
    first = cached_vectors(onnx_t, TEXTS, root=tmp_path, progress=False)
    torch_t.encode = None  # a cache hit never calls the teacher
    assert np.array_equal(cached_vectors(torch_t, TEXTS, root=tmp_path, progress=False), first)


def test_graph_is_exported_once(tiny_teacher, monkeypatch):
    import ondevice.teacher_onnx as tox

    Teacher(tiny_teacher, backend="onnx", threads=1).encode(TEXTS[:1])
    monkeypatch.setattr(tox, "export_fp32", lambda *a: pytest.fail("exported again"))
    Teacher(tiny_teacher, backend="onnx", threads=1).encode(TEXTS[:1])


def test_export_that_disagrees_with_torch_is_refused(tiny_teacher, monkeypatch):
    import ondevice.teacher_onnx as tox
    from ondevice.errors import OndeviceError

    monkeypatch.setattr(tox, "_agreement", lambda teacher, session: 0.5)
    with pytest.raises(OndeviceError, match="disagrees with torch"):
        Teacher(tiny_teacher, backend="onnx", threads=1).encode(TEXTS[:1])
    assert not (tox.graph_dir(Teacher(tiny_teacher)) / "teacher.onnx").exists()
