"""`ondevice export`: ONNX / TorchScript parity with eager torch, int8 quality, golden files, manifest, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import WORDS as CORPUS_WORDS
from conftest import make_sentences
from ondevice.export.golden import hamming_topk

from ondevice.bits import hamming_reference, unpack
from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.ort_session import cpu_session
from ondevice.runtime import Bundle

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

POOLINGS = ["mean", "max", "last", "meanmax"]


def _student(pooling: str, embedding_dim: int = 8, hidden: int = 6, output: int = 16, seed: int = 0):
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *CORPUS_WORDS, ".", "!", "?"]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=embedding_dim, hidden_size=hidden, pooling=pooling,
                        output_dim=output, max_tokens=20)
    emb = np.random.default_rng(seed).normal(0, 0.7, (len(vocab), embedding_dim)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=20), emb, seed=seed)


def _binarizer(student, bits: int, texts=None):
    from ondevice.binarize import Binarizer

    return Binarizer.fit(student.encode(texts or make_sentences(300, seed=1)), "random", bits, seed=3)


def _state(student):
    return {k: v.detach().numpy() for k, v in student.model.state_dict().items()}


def _session(model):
    return cpu_session(model.SerializeToString())


TEXTS = make_sentences(40, seed=5) + ["", "?!", " ".join(["the cat"] * 30), "İstanbul ΣΟΦΟΣ 😀 3.14"]


@pytest.mark.parametrize("pooling", POOLINGS)
def test_onnx_fp32_matches_eager_torch_with_dynamic_axes(pooling):
    from ondevice.export.onnx_graph import OPSET, build_graph

    student = _student(pooling)
    binarizer = _binarizer(student, bits=21)
    model = build_graph(student.config, _state(student), *binarizer.affine())
    assert model.opset_import[0].version == OPSET <= 17
    session = _session(model)
    # batches of different sizes and widths run through the same graph (dynamic batch and token axes)
    for texts in (TEXTS, TEXTS[:1], TEXTS[3:10], TEXTS[-4:]):
        ids, lengths = student.tokenizer.batch(texts)
        emb, code = session.run(["embedding", "code"], {"ids": ids, "lengths": lengths})
        with torch.inference_mode():
            ref = student.model(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
        assert emb.dtype == np.float32 and code.dtype == np.uint8 and code.shape == (len(texts), 3)
        assert np.abs(emb - ref).max() < 1e-4
        A, c = binarizer.affine()
        margin = np.abs(ref @ A + c)
        same = unpack(code, 21) == unpack(binarizer.transform(ref), 21)
        assert np.all(same | (margin < 1e-5))  # only float rounding at the threshold may flip a bit
        assert np.all(code[:, -1] >> 5 == 0)  # padding bits 21..23 never set


@pytest.mark.parametrize("pooling", POOLINGS)
def test_torchscript_is_identical_to_eager(pooling, tmp_path):
    from ondevice.export.torchscript import save_torchscript, scriptable_encoder

    student = _student(pooling)
    binarizer = _binarizer(student, bits=16)
    save_torchscript(scriptable_encoder(student.model, *binarizer.affine()), tmp_path / "encoder.pt")
    scripted = torch.jit.load(str(tmp_path / "encoder.pt"))
    for texts in (TEXTS, TEXTS[2:5]):
        ids, lengths = (torch.from_numpy(x) for x in student.tokenizer.batch(texts))
        with torch.inference_mode():
            emb, code = scripted(ids, lengths)
            ref = student.model(ids, lengths)
        np.testing.assert_array_equal(emb.numpy(), ref.numpy())
        np.testing.assert_array_equal(code.numpy(), binarizer.transform(ref.numpy()))


def _overlap(ref_codes: np.ndarray, test_codes: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """Mean top-k overlap; a row tied with the reference k-th distance counts as a reference hit."""
    d_ref = hamming_reference(ref_codes[queries], ref_codes)
    kth = np.sort(d_ref, axis=1)[:, k - 1 : k]
    _, got = hamming_topk(test_codes[queries], test_codes, k)
    return float(np.mean(np.take_along_axis(d_ref, got, axis=1) <= kth))


def test_int8_quality_against_fp32(tmp_path):
    from ondevice.export.bundle import ExportConfig, export

    student = _student("mean", embedding_dim=32, hidden=48, output=64, seed=2)
    catalog = make_sentences(600, seed=11)
    binarizer = _binarizer(student, bits=128, texts=catalog)
    out = export(student, binarizer, tmp_path / "b", ExportConfig(precision="both"))
    fp32, int8 = (Bundle.load(p) for p in out)
    e32, c32 = fp32.embed(catalog)
    e8, c8 = int8.embed(catalog)
    cosine = (e32 * e8).sum(1) / (np.linalg.norm(e32, axis=1) * np.linalg.norm(e8, axis=1))
    agreement = (unpack(c32, 128) == unpack(c8, 128)).mean()
    overlap = _overlap(c32, c8, np.arange(0, 600, 3))
    print(f"int8 vs fp32: mean cosine {cosine.mean():.5f}, bit agreement {agreement:.4f}, top-10 overlap {overlap:.3f}")
    assert cosine.mean() >= 0.99 and agreement >= 0.99 and overlap >= 0.9
    assert (tmp_path / "b" / "int8" / "encoder.onnx").stat().st_size < (tmp_path / "b" / "fp32" / "encoder.onnx").stat().st_size
    checks = int8.manifest["checks"]
    assert checks["mean_cosine_vs_torch"] >= 0.99 and checks["bit_agreement_vs_torch"] >= 0.99
    # the int8 TorchScript is close to eager too
    ids, lengths = (torch.from_numpy(x) for x in student.tokenizer.batch(catalog[:50]))
    emb, _ = torch.jit.load(str(tmp_path / "b" / "int8" / "encoder.pt"))(ids, lengths)
    ref = student.encode(catalog[:50])
    assert float(torch.nn.functional.cosine_similarity(emb, torch.from_numpy(ref)).mean()) >= 0.99


@pytest.mark.parametrize("bits", [7, 8])
def test_int8_weight_bits(bits, tmp_path):
    """int8 LSTM weights are 7-bit by default (|q| <= 64: u8 x s8 pair sums cannot saturate int16, so onnxruntime's
    default and exact sessions agree bit for bit on any CPU); --int8-weight-bits 8 uses the full range."""
    import onnx
    from ondevice.export.bundle import ExportConfig, export
    from ondevice.export.quantize import int8_weight_peak

    from ondevice.ort_session import session_options

    student = _student("max", embedding_dim=32, hidden=48, output=64, seed=4)
    out = export(student, _binarizer(student, bits=64), tmp_path / "b", ExportConfig(precision="int8", int8_weight_bits=bits))[0]
    graph = (out / "encoder.onnx").read_bytes()
    peak = int8_weight_peak(onnx.load_model_from_string(graph))
    assert (peak <= 64) if bits == 7 else (peak == 127)
    assert Bundle.load(out).manifest["onnx"]["int8_weight_bits"] == bits
    if bits == 7:
        ids, lengths = student.tokenizer.batch(make_sentences(200, seed=9))
        exact, default = (cpu_session(graph, session_options(threads=1, exact_int8=e)) for e in (True, False))
        for name in ("embedding", "code"):
            assert np.array_equal(*(s.run([name], {"ids": ids, "lengths": lengths})[0] for s in (exact, default)))


def test_int8_weight_bits_flag_is_checked():
    from ondevice.export.bundle import ExportConfig

    with pytest.raises(OndeviceError, match="--int8-weight-bits must be 7 or 8"):
        ExportConfig(precision="int8", int8_weight_bits=6).validate()


@pytest.fixture(scope="module")
def golden_bundle(tmp_path_factory):
    from ondevice.export.bundle import ExportConfig, export

    student = _student("meanmax")
    binarizer = _binarizer(student, bits=29)
    out = tmp_path_factory.mktemp("golden") / "bundle"
    export(student, binarizer, out, ExportConfig(precision="int8", golden=True, with_weights=True,
                                                golden_extra=("my own sentence",)))
    return student, binarizer, out


def test_golden_files(golden_bundle):
    student, binarizer, out = golden_bundle
    g = out / "golden"
    lines = (g / "sentences.jsonl").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    sentences = [json.loads(x) for x in lines[:-1]]
    n = len(sentences)
    assert n >= 1000 and "my own sentence" in sentences
    for must in ("", " ", "\u0130", "Σ", "😀", "東京", "\u0301", "3.14", "!!!"):
        assert any(must in s if must.strip() else s == must for s in sentences), must
    assert max(len(student.tokenizer.ids(s)) for s in sentences) == student.config.max_tokens
    assert any(len(s.split()) > student.config.max_tokens for s in sentences)  # truncated ones

    ids = [[int(t) for t in row.split(" ")] for row in (g / "token_ids.txt").read_text().splitlines()]
    assert ids == [student.tokenizer.ids(s) for s in sentences]

    arrays = {p.stem: np.load(p, allow_pickle=False) for p in g.glob("*.npy")}
    assert arrays["embeddings"].dtype == np.float32 and arrays["embeddings"].shape == (n, 16)
    assert arrays["codes"].dtype == np.uint8 and arrays["codes"].shape == (n, 4)
    assert arrays["catalog_codes"].dtype == np.uint8 and arrays["catalog_codes"].shape[1] == 4
    q = arrays["queries"]
    assert q.dtype == np.int64 and arrays["topk_ids"].dtype == np.int64 and arrays["topk_dist"].dtype == np.int32
    assert arrays["topk_ids"].shape == arrays["topk_dist"].shape == (len(q), 10)
    with open(g / "embeddings.npy", "rb") as fh:
        assert np.lib.format.read_magic(fh) == (1, 0)

    # golden values are the fp32 model's, and the top-10 is by Hamming distance with ties by smaller row
    ref = student.encode(sentences)
    assert np.abs(arrays["embeddings"] - ref).max() < 1e-4
    assert (unpack(arrays["codes"], 29) == unpack(binarizer.transform(ref), 29)).mean() > 0.999
    d = hamming_reference(arrays["codes"][q], arrays["catalog_codes"])
    order = np.lexsort((np.broadcast_to(np.arange(d.shape[1]), d.shape), d), axis=1)[:, :10]
    np.testing.assert_array_equal(arrays["topk_ids"], order)
    np.testing.assert_array_equal(arrays["topk_dist"], np.take_along_axis(d, order, axis=1))


def test_manifest_and_model_card(golden_bundle):
    from safetensors.numpy import load_file

    student, binarizer, out = golden_bundle
    m = json.loads((out / "manifest.json").read_text())
    assert (m["format"], m["format_version"], m["precision"], m["bit_order"]) == ("ondevice-bundle", 1, "int8", "little")
    assert (m["dim"], m["bits"], m["code_bytes"]) == (16, 29, 4)
    assert m["inputs"] == {"ids": "int64 [batch, tokens]", "lengths": "int64 [batch]"}
    assert m["outputs"] == {"embedding": "float32 [batch, 16]", "code": "uint8 [batch, 4]"}
    assert m["tokenizer"]["version"] == 1 and m["student"]["pooling"] == "meanmax"
    assert m["binarizer"]["method"] == "random" and m["binarizer"]["bits"] == 29
    for key in ("teacher", "training", "versions", "checks", "golden"):
        assert key in m
    assert m["versions"]["onnxruntime"] == ort.__version__
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert sorted(m["files"]) == on_disk
    expected = {"encoder.onnx", "encoder.pt", "vocab.txt", "tokenizer.json", "binarizer.json",
                "binarizer.safetensors", "student.safetensors", "README.md", "golden/sentences.jsonl"}
    assert expected <= set(on_disk)
    card = (out / "README.md").read_text()
    assert "int8" in card and m["files"]["encoder.onnx"]["sha256"] in card and "29-bit" in card
    # weights for zero-dependency runtimes: fp32, the student's own keys; binarizer: projection + offset only
    weights = load_file(str(out / "student.safetensors"))
    assert set(weights) == set(student.model.state_dict()) and weights["embedding.weight"].dtype == np.float32
    params = load_file(str(out / "binarizer.safetensors"))
    assert set(params) == {"projection", "offset"}
    # an int8 bundle stores the projection as float16, and its graph uses exactly those rounded weights
    assert params["projection"].dtype == np.float16
    np.testing.assert_array_equal(params["projection"], binarizer.affine()[0].astype(np.float16))
    assert m["projection_dtype"] == "float16" and m["checks"]["bit_agreement_float16_projection"] > 0.99
    for path in out.rglob("*"):  # no Python pickle anywhere (encoder.pt is a zip archive, not a pickle)
        if path.is_file():
            assert not path.read_bytes().startswith(b"\x80")  # every pickle protocol >= 2 starts with PROTO


def test_export_refuses_mismatched_binarizer_and_foreign_folder(tmp_path):
    from ondevice.export.bundle import ExportConfig, export

    student = _student("mean")
    other = _binarizer(_student("mean", output=12), bits=8)
    with pytest.raises(OndeviceError, match="binarizer expects 12-d vectors"):
        export(student, other, tmp_path / "x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(OndeviceError, match="not a bundle"):
        export(student, _binarizer(student, bits=8), tmp_path / "foreign")
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"
    with pytest.raises(OndeviceError, match="--precision"):
        export(student, _binarizer(student, bits=8), tmp_path / "y", ExportConfig(precision="fp16"))
    assert not list(tmp_path.glob(".*tmp"))  # nothing half-written left behind


def test_export_replaces_an_earlier_export_and_nothing_else(tmp_path):
    """A file named manifest.json does not make a folder a bundle, and a bundle folder with a user's file in it is
    not replaced: only a folder holding a valid bundle and nothing else is (the hostile read found both deleted)."""
    from ondevice.export.bundle import ExportConfig, export

    student = _student("mean")
    binarizer = _binarizer(student, bits=8)
    web = tmp_path / "myapp"  # a web app: its own manifest.json
    (web / "src").mkdir(parents=True)
    (web / "manifest.json").write_text('{"name": "my app"}')
    (web / "src" / "app.js").write_text("app")
    both = tmp_path / "proj"  # the --precision both layout, but not a bundle inside
    (both / "int8").mkdir(parents=True)
    (both / "int8" / "manifest.json").write_text("{}")
    (both / "notes").mkdir()
    (both / "notes" / "thesis.txt").write_text("mine")
    for folder in (web, both):
        before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
        with pytest.raises(OndeviceError, match="not a bundle"):
            export(student, binarizer, folder)
        assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    out = tmp_path / "bundle"
    export(student, binarizer, out, ExportConfig(precision="both"))
    user_old = tmp_path / ".bundle.old"  # the name the replaced folder once had: a user's folder is left alone
    user_old.mkdir()
    (user_old / "keep.txt").write_text("mine")
    export(student, binarizer, out, ExportConfig(precision="both"))  # an earlier export is replaced
    assert (user_old / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["fp32", "int8"]
    (out / "int8" / "catalog.odx").write_text("the user's index")
    with pytest.raises(OndeviceError, match=r"files that are not part of the bundle \(int8/catalog.odx\)"):
        export(student, binarizer, out, ExportConfig(precision="both"))
    (out / "int8" / "catalog.odx").unlink()
    link = tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    with pytest.raises(OndeviceError, match="symbolic link"):
        export(student, binarizer, link, ExportConfig(precision="both"))
    assert not list(tmp_path.glob(".*tmp"))


def test_cli_export_and_reexport(tmp_path, capsys):
    student = _student("max")
    binarizer = _binarizer(student, bits=24)
    student.save(tmp_path / "student")
    binarizer.save(tmp_path / "binarizer")
    (tmp_path / "eval.json").write_text(json.dumps({"stsb_spearman": 0.5}))
    args = ["export", "--student", str(tmp_path / "student"), "--binarizer", str(tmp_path / "binarizer"),
            "--out", str(tmp_path / "bundle")]
    assert main([*args, "--eval", str(tmp_path / "eval.json")]) == 0
    assert "bundle written to" in capsys.readouterr().out
    bundle = Bundle.load(tmp_path / "bundle")
    assert bundle.precision == "fp32" and bundle.manifest["eval"] == {"stsb_spearman": 0.5}
    np.testing.assert_array_equal(bundle.codes(TEXTS), binarizer.transform(student.encode(TEXTS)))
    assert main([*args, "--precision", "int8"]) == 0  # replaces the earlier bundle
    assert Bundle.load(tmp_path / "bundle").precision == "int8"

    assert main([*args[:-1], str(tmp_path / "b2"), "--golden-sentences", str(tmp_path / "none.txt")]) == 2
    assert main(["export", "--student", str(tmp_path / "nope"), "--binarizer", str(tmp_path / "binarizer"),
                 "--out", str(tmp_path / "b3")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 1 and "not a student dir" in err


def test_training_summary_names_a_continued_run_without_its_path(tmp_path):
    from ondevice.export.bundle import training_summary

    student = _student("max")
    (tmp_path / "distill_config.json").write_text(json.dumps(
        {"corpus": "wiki.txt.gz", "epochs": 1, "train_splits": "stsb,sick", "train_split_repeats": 3,
         "init_from": "/mnt/elsewhere/runs/v4-d100", "init_sha256": "ab" * 32}))
    (tmp_path / "train_log.jsonl").write_text(json.dumps({"epoch": 1, "held_out_cosine": 0.8, "held_out_n": 5}) + "\n")
    s = training_summary(tmp_path, student)
    assert s["init_from"] == "v4-d100" and s["init_sha256"] == "ab" * 32 and "/home" not in json.dumps(s)
    assert s["train_split_repeats"] == 3 and s["train_splits"] == "stsb,sick" and s["epochs_done"] == 1
    assert "init_from" not in training_summary(tmp_path / "missing", student)


def test_cli_golden_sentences_are_read_like_a_corpus_and_checked_first(tmp_path, capsys):
    """--golden-sentences without --golden, not UTF-8, empty, or corrupt gzip: one line, before the student is loaded
    (the student and binarizer named here do not even exist)."""
    import gzip

    from ondevice.export.bundle import ExportConfig

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin1"))
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "bad.txt.gz").write_bytes(gzip.compress(b"a\n" * 500)[:10] + b"\xff" * 40)
    (tmp_path / "ok.txt").write_text("mine\n")
    base = ["export", "--student", str(tmp_path / "s"), "--binarizer", str(tmp_path / "z"), "--out", str(tmp_path / "b")]
    for extra, expected in ((["--golden-sentences", str(tmp_path / "ok.txt")], "add --golden"),
                            (["--golden", "--golden-sentences", str(latin1)], "is not UTF-8 text"),
                            (["--golden", "--golden-sentences", str(tmp_path / "empty.txt")], "has no sentences"),
                            (["--golden", "--golden-sentences", str(tmp_path / "bad.txt.gz")], "cannot read --golden-sentences")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err and "Traceback" not in err, err
    with pytest.raises(OndeviceError, match="add --golden"):
        ExportConfig(golden_extra=("mine",)).validate()
