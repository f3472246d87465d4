"""The torch-free runtime: Bundle.load verification, encode/codes/search, threads, bad bundles."""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from ondevice.export.golden import hamming_topk

from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.runtime import Bundle

pytest.importorskip("torch")
pytest.importorskip("onnx")

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "big", "small", "red", "house", "tree", "car", "city", "river", "sees", "likes", "old", "new", "bird"]
TEXTS = ["the cat sat on the mat", "A dog ran!", "", "   ", "big red car, old house", "İstanbul ΣΟΦΟΣ 東京 😀",
         " ".join(WORDS * 3), "the bird sees the tree", "new city river"]


def make_student(pooling: str = "meanmax", seed: int = 0):
    """A tiny random student over WORDS (vocab 24, embedding 8, hidden 6, output 16)."""
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *WORDS]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=8, hidden_size=6, pooling=pooling, output_dim=16,
                        max_tokens=24)
    emb = np.random.default_rng(seed).normal(0, 0.7, (len(vocab), 8)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=24), emb, seed=seed)


def make_binarizer(student, bits: int = 29, seed: int = 0):
    """A random-projection binarizer fitted on the student's vectors (29 bits: exercises zero padding)."""
    from ondevice.binarize import Binarizer

    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(200)]
    return Binarizer.fit(student.encode(texts), "random", bits, seed=seed)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(student, binarizer, folder with fp32/ and int8/ bundles, golden files and weights)."""
    from ondevice.export.bundle import ExportConfig, export

    student = make_student()
    binarizer = make_binarizer(student)
    out = tmp_path_factory.mktemp("bundles") / "both"
    export(student, binarizer, out, ExportConfig(precision="both", golden=True, with_weights=True))
    return student, binarizer, out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _rehash(bundle: Path, name: str) -> None:
    """Make the manifest agree with a replaced file (what a careful attacker would do)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    data = (bundle / name).read_bytes()
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_load_resolves_precision_and_reports_shape(exported):
    out = exported[2]
    assert Bundle.load(out).precision == "int8"  # a two-precision export loads what apps ship
    b = Bundle.load(out, precision="fp32")
    assert (b.precision, b.dim, b.bits, b.code_bytes) == ("fp32", 16, 29, 4)
    with pytest.raises(OndeviceError, match="holds only the fp32 precision, not int8; leave out --precision"):
        Bundle.load(out / "fp32", precision="int8")
    with pytest.raises(OndeviceError, match="unknown precision"):
        Bundle.load(out, precision="fp16")


def test_encode_codes_match_student_and_binarizer(exported):
    student, binarizer, out = exported
    b = Bundle.load(out, precision="fp32")
    emb, codes = b.embed(TEXTS)
    ref = student.encode(TEXTS)
    assert emb.dtype == np.float32 and emb.shape == (len(TEXTS), 16)
    assert np.abs(emb - ref).max() < 1e-4
    np.testing.assert_array_equal(codes, binarizer.transform(ref))
    np.testing.assert_array_equal(b.encode(TEXTS), emb)
    np.testing.assert_array_equal(b.codes(TEXTS), codes)
    # single sentence == its row of a batch; batch size and order do not matter
    np.testing.assert_allclose(b.encode(TEXTS[4]), emb[4:5], atol=1e-6)
    np.testing.assert_allclose(b.encode(TEXTS[::-1], batch_size=2)[::-1], emb, atol=1e-6)
    assert b.encode([]).shape == (0, 16) and b.codes([]).shape == (0, 4)
    assert np.all(codes[:, -1] >> 5 == 0)  # bits 29..31 are padding: never set


def test_bad_texts_are_one_line_errors(exported):
    b = Bundle.load(exported[2], precision="fp32")
    for bad in (b"bytes", 42, ["ok", None]):
        with pytest.raises(OndeviceError, match="texts must"):
            b.encode(bad)


def test_search_with_brute_force_and_attached_index(exported):
    _, _, out = exported
    b = Bundle.load(out, precision="fp32")
    with pytest.raises(OndeviceError, match="no index attached"):
        b.search("cat", 3)
    catalog = TEXTS + TEXTS[:3]  # duplicates: equal distances, smaller id first
    b.index_texts(catalog)
    assert b.index.threads is None  # threads=0: the search picks its thread count from the work size
    assert Bundle.load(out, precision="fp32", threads=1).index_texts(catalog).index.threads == 1  # as asked
    dist, ids = b.search(TEXTS[0], k=5)
    assert dist.shape == ids.shape == (1, 5) and ids[0, 0] == 0 and dist[0, 0] == 0
    assert list(ids[0, :2]) == [0, 9]
    dist, ids = b.search(TEXTS[:2], k=len(catalog) + 2)
    assert list(ids[0, -2:]) == [-1, -1] and list(dist[0, -2:]) == [-1, -1]
    with pytest.raises(OndeviceError, match="k must be"):
        b.search("cat", 0)

    class Recorder(HammingIndex):
        calls = 0

        def search(self, queries, k, threads=None):
            Recorder.calls += 1
            return super().search(queries, k, threads)

    index = Recorder(bits=29)
    index.add(b.codes(catalog), ids=np.arange(100, 100 + len(catalog)))
    _, ids = b.attach_index(index).search(TEXTS[:2], 4)
    assert Recorder.calls == 1 and ids[0, 0] == 100
    np.testing.assert_array_equal(ids - 100, hamming_topk(b.codes(TEXTS[:2]), b.codes(catalog), 4)[1])
    with pytest.raises(OndeviceError, match="no search"):
        b.attach_index(object())
    with pytest.raises(OndeviceError, match="holds 8-bit codes"):
        b.attach_index(HammingIndex(bits=8))


def test_hamming_topk_breaks_ties_by_row_id():
    catalog = np.array([[0b1111], [0b0001], [0b0001], [0b0000], [0b0011]], dtype=np.uint8)
    dist, ids = hamming_topk(np.array([[0b0000]], dtype=np.uint8), catalog, 4)
    assert ids.tolist() == [[3, 1, 2, 4]] and dist.tolist() == [[0, 1, 1, 2]]
    assert dist.dtype == np.int32 and ids.dtype == np.int64


def test_concurrent_encode_from_threads_gives_same_results(exported):
    b = Bundle.load(exported[2], precision="int8")
    texts = [f"{w} {v} sat on the {u}" for w in WORDS for v in WORDS[:4] for u in WORDS[:2]]
    expected = [b.embed(texts[i::4], batch_size=7) for i in range(4)]
    barrier = threading.Barrier(4)

    def work(i: int):
        barrier.wait()
        chunk = texts[i::4]
        return [b.embed(chunk, batch_size=7) for _ in range(3)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for i, runs in enumerate(results):
        for emb, codes in runs:
            np.testing.assert_array_equal(emb, expected[i][0])
            np.testing.assert_array_equal(codes, expected[i][1])


def test_runtime_never_imports_torch(exported):
    script = (
        "import sys\n"
        "from ondevice.runtime import Bundle\n"
        f"b = Bundle.load({str(exported[2])!r}, precision='int8')\n"
        "b.index_texts(['the cat', 'a dog'])\n"
        "assert b.encode(['the cat sat']).shape == (1, 16)\n"
        "assert b.search('the cat', 2)[1].tolist() == [[0, 1]]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx', 'transformers'))\n"
        "print('HEAVY', heavy)\n"
        "assert not heavy, heavy\n"
    )
    res = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "HEAVY []" in res.stdout


# --- bad bundles: each is one line, an OndeviceError, never a traceback or code execution ------------------

def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and msg.startswith("bundle ")
    return msg


@pytest.mark.parametrize("name", ["encoder.onnx", "vocab.txt", "tokenizer.json", "binarizer.safetensors",
                                  "encoder.pt", "README.md", "golden/codes.npy"])
def test_missing_truncated_or_tampered_file(exported, tmp_path, name):
    src = exported[2] / "fp32"
    b = _copy(src, tmp_path / "missing")
    (b / name).unlink()
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert f"{name} is missing" in _one_line(e)

    b = _copy(src, tmp_path / "truncated")
    data = (b / name).read_bytes()
    (b / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert f"{name} is truncated" in _one_line(e)

    b = _copy(src, tmp_path / "tampered")
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    (b / name).write_bytes(bytes(flipped))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert f"{name} fails its sha256 check" in _one_line(e)


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(format_version=2), "format version 2 is not supported"),
    (lambda m: m.update(format_version="1"), "format version '1' is not supported"),
    (lambda m: m.pop("format_version"), "format version None is not supported"),
    (lambda m: m.update(format="something-else"), "not an ondevice-bundle manifest"),
    (lambda m: m.update(files=[]), "no 'files' table"),
    (lambda m: m["files"].pop("encoder.onnx"), "does not list encoder.onnx"),
    (lambda m: m["files"].update({"../../etc/passwd": m["files"]["vocab.txt"]}), "unsafe file name"),
    (lambda m: m["files"].update({"/etc/passwd": m["files"]["vocab.txt"]}), "unsafe file name"),
    (lambda m: m["files"]["vocab.txt"].update(sha256="abc"), "needs a sha256"),
    (lambda m: m["files"]["vocab.txt"].update(bytes="12"), "needs a sha256"),
    (lambda m: m.update(bit_order="big"), "cannot read"),
    (lambda m: m.update(code_bytes=3), "cannot read"),
    (lambda m: m.update(dim=0), "no valid 'dim'"),
    (lambda m: m.update(precision="fp16"), "unknown precision"),
    (lambda m: m.update(dim=17), "as the manifest's dim and bits say"),  # the binarizer is checked before the graph
    (lambda m: m["files"].update({"C:secret": m["files"]["vocab.txt"]}), "unsafe file name"),  # a drive on Windows
])
def test_bad_manifest(exported, tmp_path, edit, match):
    b = _copy(exported[2] / "fp32", tmp_path / "b")
    manifest = json.loads((b / "manifest.json").read_text())
    edit(manifest)
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert match in _one_line(e)


@pytest.mark.parametrize("content", [b"", b"{not json", b"\xff\xfe", b"[1, 2]", b"[" * 100000,
                                     b'{"format_version": ' + b"1" * 5000 + b"}"])  # int beyond Python's digit limit
def test_corrupt_or_missing_manifest(exported, tmp_path, content):
    b = _copy(exported[2] / "fp32", tmp_path / "b")
    (b / "manifest.json").write_bytes(content)
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    _one_line(e)
    (b / "manifest.json").unlink()
    with pytest.raises(OndeviceError, match="manifest.json is missing"):
        Bundle.load(b)
    with pytest.raises(OndeviceError, match="not found"):
        Bundle.load(tmp_path / "nowhere")


def test_consistent_forgery_cannot_execute_code(exported, tmp_path):
    """A pickle payload with a matching manifest entry is hashed, never unpickled; a bad graph is one line."""
    b = _copy(exported[2] / "fp32", tmp_path / "b")
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (b / "encoder.pt").write_bytes(pickle.dumps(Payload()))
    _rehash(b, "encoder.pt")
    Bundle.load(b)  # the checksum agrees, and the runtime never reads that file's contents as code
    assert not marker.exists()
    (b / "binarizer.safetensors").write_bytes(pickle.dumps(Payload()))
    _rehash(b, "binarizer.safetensors")
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "binarizer.safetensors cannot be parsed" in _one_line(e)  # parsed as safetensors only, never unpickled
    assert not marker.exists()
    _copy(exported[2] / "fp32", tmp_path / "fresh")
    (b / "binarizer.safetensors").write_bytes((tmp_path / "fresh" / "binarizer.safetensors").read_bytes())
    _rehash(b, "binarizer.safetensors")

    (b / "encoder.onnx").write_bytes(pickle.dumps(Payload()))
    _rehash(b, "encoder.onnx")
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "not a valid ONNX model" in _one_line(e)  # refused before onnxruntime parses it
    assert not marker.exists()


def test_wrong_tokenizer_version_is_one_line(exported, tmp_path):
    b = _copy(exported[2] / "fp32", tmp_path / "b")
    spec = json.loads((b / "tokenizer.json").read_text())
    spec["version"] = 99
    (b / "tokenizer.json").write_text(json.dumps(spec))
    _rehash(b, "tokenizer.json")
    with pytest.raises(OndeviceError, match="tokenizer spec version 99"):
        Bundle.load(b)


def _one_per_call(bundle: Bundle, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    single = [bundle.run_ids(*bundle.tokenizer.batch([t])) for t in texts]
    return np.concatenate([e for e, _ in single]), np.concatenate([c for _, c in single])


def test_int8_range_anchors_make_rows_independent(exported, tmp_path):
    """One onnxruntime call on many rows gives each row exactly what a call on that row alone gives, because of
    the graph's range anchors; the same int8 graph without them does not (activations quantized per call)."""
    from ondevice.export.bundle import _state
    from ondevice.export.quantize import build_int8_graph

    from ondevice.ort_session import cpu_session

    student, binarizer, out = exported
    texts = [" ".join(np.random.default_rng(i).choice(WORDS, size=1 + i % 9)) for i in range(60)] + TEXTS
    b = Bundle.load(out, precision="int8", threads=1)
    assert b.rows_independent and b.manifest["projection_dtype"] == "float16"
    emb1, codes1 = _one_per_call(b, texts)
    ids, lengths = b.tokenizer.batch(texts)
    emb, codes = b.run_ids(ids, lengths)
    np.testing.assert_array_equal(emb, emb1)
    np.testing.assert_array_equal(codes, codes1)
    A, c = binarizer.affine()
    plain = build_int8_graph(student.config, _state(student), A, c, range_anchors=False)
    session = cpu_session(plain.SerializeToString())
    single = np.concatenate([session.run(["embedding"], {"ids": ids[i : i + 1, : lengths[i]], "lengths": lengths[i : i + 1]})[0]
                             for i in range(len(texts))])
    assert not np.array_equal(session.run(["embedding"], {"ids": ids, "lengths": lengths})[0], single)
    # an int8 bundle without the manifest's promise (older exports) runs one sentence per call, same results
    old = _copy(out / "int8", tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["int8_rows_independent"]
    manifest["int8_rows_per_run"] = 1
    (old / "manifest.json").write_text(json.dumps(manifest))
    legacy = Bundle.load(old, threads=1)
    assert not legacy.rows_independent
    np.testing.assert_array_equal(legacy.codes(texts, batch_size=64), codes1)


def test_int8_codes_do_not_depend_on_batch_or_threads(exported):
    """An int8 code is a function of its sentence alone (batch size, order, threads)."""
    out = exported[2]
    texts = [" ".join(np.random.default_rng(i).choice(WORDS, size=1 + i % 9)) for i in range(60)] + TEXTS
    emb1, codes1 = _one_per_call(Bundle.load(out, precision="int8", threads=1), texts)
    for threads in (0, 1, 2):
        b = Bundle.load(out, precision="int8", threads=threads)
        for batch_size in (1, 7, 64):
            emb, codes = b.embed(texts, batch_size=batch_size)
            np.testing.assert_array_equal(codes, codes1)
            np.testing.assert_array_equal(emb, emb1)
        np.testing.assert_array_equal(b.codes(texts[::-1])[::-1], codes1)
        np.testing.assert_array_equal(b.codes(texts[5]), codes1[5:6])


def test_attach_index_checks_the_encoder(exported, tmp_path):
    """An index knows its encoder; another binarizer is refused, another precision warned about."""
    from ondevice.index import EncoderId

    out = exported[2]
    int8, fp32 = Bundle.load(out, precision="int8"), Bundle.load(out, precision="fp32")
    assert int8.encoder_id.binarizer_sha256 == fp32.encoder_id.binarizer_sha256
    assert (int8.encoder_id.precision, fp32.encoder_id.precision) == ("int8", "fp32")
    int8.index_texts(TEXTS)
    path = int8.index.save(tmp_path / "c.odx")
    index = HammingIndex.load(path)
    assert index.encoder == int8.encoder_id
    Bundle.load(out, precision="int8").attach_index(index)  # same encoder: silent
    with pytest.warns(UserWarning, match="same binarizer"):
        fp32.attach_index(index)
    with pytest.raises(OndeviceError, match="same binarizer"):
        fp32.attach_index(index, strict=True)
    other = HammingIndex(29, encoder=EncoderId("00" * 32, "11" * 32, "int8"))
    with pytest.raises(OndeviceError, match="another binarizer"):
        fp32.attach_index(other)
    fp32.attach_index(HammingIndex(29))  # no identity recorded (built from codes): nothing to check


def test_cli_index_precision_and_encoder_checks(exported, tmp_path, capsys):
    """The CLI says which half of a two-precision bundle it uses and checks the encoder."""
    from ondevice.cli import main

    out = exported[2]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(t for t in TEXTS if t.strip()) + "\n", encoding="utf-8")
    index = str(tmp_path / "c.odx")
    assert main(["index", "build", "--corpus", str(corpus), "--bundle", str(out), "--out", index]) == 0
    assert "(int8)" in capsys.readouterr().err
    assert main(["index", "search", index, "--bundle", str(out), "--query", "the cat", "-k", "2"]) == 0
    err = capsys.readouterr().err
    assert "(int8)" in err and "warning" not in err
    assert main(["index", "search", index, "--bundle", str(out), "--precision", "fp32", "--query", "the cat"]) == 0
    err = capsys.readouterr().err
    assert "(fp32)" in err and "warning:" in err and "int8" in err
    assert main(["index", "build", "--corpus", str(corpus), "--bundle", str(out), "--precision", "fp32",
                 "--out", index]) == 0
    assert "(fp32)" in capsys.readouterr().err
    assert main(["index", "search", index, "--precision", "fp32", "--query", "x"]) == 2
    assert "needs --bundle" in capsys.readouterr().err


def test_with_weights_ships_weights_once(exported):
    """A two-precision export keeps the fp32 weights in fp32/ only and says so."""
    out = exported[2]
    assert (out / "fp32" / "student.safetensors").is_file()
    assert not (out / "int8" / "student.safetensors").exists()
    int8 = json.loads((out / "int8" / "manifest.json").read_text())
    assert "../fp32/student.safetensors" in int8["weights"] and int8["int8_rows_independent"] is True
    assert "../fp32/student.safetensors" in (out / "int8" / "README.md").read_text()


@pytest.mark.parametrize("weights", [b"not safetensors at all", "missing offset", "wrong shape", "nan"])
def test_a_broken_binarizer_fails_at_load_not_at_indexing(exported, tmp_path, weights):
    from safetensors.numpy import load, save

    b = _copy(exported[2] / "fp32", tmp_path / "b")
    good = load((b / "binarizer.safetensors").read_bytes())
    a, c = good["projection"], good["offset"]
    data = weights if isinstance(weights, bytes) else save(
        {"missing offset": {"projection": a}, "wrong shape": {"projection": a[:, :-1], "offset": c[:-1]},
         "nan": {"projection": np.full_like(a, np.nan), "offset": c}}[weights])
    (b / "binarizer.safetensors").write_bytes(data)
    _rehash(b, "binarizer.safetensors")
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "binarizer.safetensors" in _one_line(e)


def test_a_precision_folder_that_is_a_link_is_refused(exported, tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    _copy(exported[2] / "int8", tmp_path / "elsewhere")
    (outer / "int8").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OndeviceError, match="symbolic link"):
        Bundle.load(outer)


def test_a_linked_or_huge_manifest_is_refused_before_it_is_read(exported, tmp_path):
    from ondevice import runtime

    b = _copy(exported[2] / "fp32", tmp_path / "b")
    real = (b / "manifest.json").read_bytes()
    (tmp_path / "elsewhere.json").write_bytes(real)
    (b / "manifest.json").unlink()
    (b / "manifest.json").symlink_to(tmp_path / "elsewhere.json")  # could be any file, however large
    with pytest.raises(OndeviceError, match="symbolic link"):
        Bundle.load(b)
    (b / "manifest.json").unlink()
    (b / "manifest.json").write_bytes(b" " * (runtime.MAX_MANIFEST_BYTES + 1))
    with pytest.raises(OndeviceError, match="far more than any manifest"):
        Bundle.load(b)


def test_a_two_precision_folder_without_the_asked_one_names_what_it_holds(exported, tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    _copy(exported[2] / "int8", outer / "int8")
    with pytest.raises(OndeviceError, match="holds no fp32 bundle, only int8; pick that with --precision"):
        Bundle.load(outer, precision="fp32")
    assert Bundle.load(outer).precision == "int8"
