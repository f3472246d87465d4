"""Hostile and careless inputs. Each class of finding is reproduced here and must now give one
OndeviceError line (exit code 2 from the CLI), never a traceback, code execution, a file read from outside an
artifact, or silently wrong vectors. Hypothesis drives the parsers and validators with arbitrary values."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ondevice.distill as distill_mod
from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.io import clean_stale_temps, dataclass_from_dict, write_bytes

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

# Fixed examples in `make test` (never flaky for whoever runs it); ONDEVICE_FUZZ_EXAMPLES=N explores N random ones.
_EXPLORE = int(os.environ.get("ONDEVICE_FUZZ_EXAMPLES", "0"))
FAST = settings(max_examples=_EXPLORE or 40, derandomize=not _EXPLORE, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "big", "red", "house", "tree", "bird"]
# Values a JSON file or a flag can hold: every type, NaN/inf, huge and negative numbers.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
NUMBERS = st.one_of(st.integers(-(2**66), 2**66), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.none(), st.text(max_size=4))


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg and "Traceback" not in msg
    return msg


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    return code, err


def _tiny_student(seed: int = 0):
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *WORDS]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=6, hidden_size=4, output_dim=8, max_tokens=16)
    emb = np.random.default_rng(seed).normal(0, 0.7, (len(vocab), 6)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=16), emb, seed=seed)


def _rehash(bundle: Path, name: str) -> None:
    """Make the manifest agree with a changed file: the consistent forgery a hostile bundle would be."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    data = (bundle / name).read_bytes()
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (bundle / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("student") / "s"
    _tiny_student().save(path)
    return path


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory) -> Path:
    from ondevice.export.bundle import export

    from ondevice.binarize import Binarizer

    student = _tiny_student()
    texts = [" ".join(np.random.default_rng(i).choice(WORDS, 5)) for i in range(64)]
    binarizer = Binarizer.fit(student.encode(texts), "random", 16, seed=0)
    out = tmp_path_factory.mktemp("bundle") / "b"
    export(student, binarizer, out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------------------------------- 1. code execution


class _Payload:
    """Unpickling this creates the file `marker`: stands for any code a crafted pickle would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("suffix", [".kv", ".model", ".wv", ".txt", ".bin"])
def test_pickled_word_vectors_are_refused_and_never_run(suffix, tmp_path):
    from ondevice.wordvectors import load_word_vectors

    marker = tmp_path / "pwned"
    evil = tmp_path / f"vectors{suffix}"
    evil.write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    with pytest.raises(OndeviceError) as e:
        load_word_vectors(evil)
    assert "--allow-pickle" in _one_line(e.value) or "cannot read" in str(e.value)
    assert not marker.exists()


def test_allow_pickle_means_what_it_says(tmp_path):
    """The opt-in really runs the file's code: the flag's help says so, and this is why it is off by default."""
    from ondevice.wordvectors import load_word_vectors

    marker = tmp_path / "pwned"
    evil = tmp_path / "vectors.kv"
    evil.write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    with pytest.raises(OndeviceError):  # not KeyedVectors afterwards, but the code already ran
        load_word_vectors(evil, allow_pickle=True)
    assert marker.exists()


def test_own_pickled_vectors_load_with_the_flag(tmp_path, tiny_word_vectors):
    from ondevice.wordvectors import load_word_vectors

    kv = load_word_vectors(tiny_word_vectors)
    kv.save(str(tmp_path / "mine.kv"))
    assert load_word_vectors(tmp_path / "mine.kv", allow_pickle=True).vector_size == kv.vector_size


def test_distill_and_eval_refuse_pickles_before_any_work(tmp_path, tiny_corpus, capsys):
    from ondevice.eval.encoders import GloveAverageEncoder

    marker = tmp_path / "pwned"
    evil = tmp_path / "vectors.kv"
    evil.write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    code, err = _cli(["distill", "--corpus", tiny_corpus, "--teacher", tmp_path / "no-teacher", "--word-vectors", evil,
                      "--out", tmp_path / "s"], capsys)
    assert code == 2 and "--allow-pickle" in err and err.count("\n") == 0
    with pytest.raises(OndeviceError, match="allow-pickle"):
        GloveAverageEncoder(str(evil))  # `ondevice eval --encoder glove:FILE`, refused before anything is cached
    assert not marker.exists()


# ------------------------------------------------------------------------------ 2./3. files outside a bundle


@pytest.mark.parametrize("name", ["vocab.txt", "encoder.onnx", "tokenizer.json", "binarizer.safetensors"])
def test_symlinked_bundle_files_are_refused(name, bundle_dir, tmp_path):
    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    outside = tmp_path / f"outside-{name}"
    shutil.move(b / name, outside)
    (b / name).symlink_to(outside)  # same bytes, so every checksum still agrees
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "symbolic link" in _one_line(e.value)


def test_symlinked_folder_inside_a_bundle_is_refused(tmp_path, bundle_dir):
    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.txt").write_text("outside")
    (b / "extra").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["files"]["extra/x.txt"] = {"sha256": hashlib.sha256(b"outside").hexdigest(), "bytes": 7}
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError, match="symbolic link"):
        Bundle.load(b)


def test_onnx_external_data_is_refused(bundle_dir, tmp_path, monkeypatch):
    import onnx

    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    model = onnx.load(str(b / "encoder.onnx"))
    work = tmp_path / "cwd"
    work.mkdir()
    # the big weights go to a file in the working directory that no manifest entry covers (small constants stay
    # inline, so onnxruntime itself loads the graph and its vectors would come from that outside file)
    onnx.save_model(model, str(work / "encoder.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=256)
    shutil.copy(work / "encoder.onnx", b / "encoder.onnx")
    _rehash(b, "encoder.onnx")
    monkeypatch.chdir(work)
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "external data" in _one_line(e.value)


def test_external_data_finder_sees_nested_and_attribute_tensors():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ondevice.onnxproto import external_tensors

    def ext(name):
        t = numpy_helper.from_array(np.ones(3, np.float32), name)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="../../etc/passwd")
        return t

    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    inner = helper.make_graph([helper.make_node("Constant", [], ["y"], value=ext("deep"))], "inner", [], [out])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    outer = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)],
                              "outer", [cond], [out])
    model = helper.make_model(outer).SerializeToString()
    assert external_tensors(model) == ["deep", "deep"]
    clean = helper.make_model(helper.make_graph([helper.make_node("Constant", [], ["y"],
                                                 value=numpy_helper.from_array(np.ones(3, np.float32)))],
                                                "g", [], [out]))
    assert external_tensors(clean.SerializeToString()) == []
    assert onnx.load_from_string(model).graph.node[0].op_type == "If"
    # a function's attribute default and a training-info graph are tensors onnx can hold too
    func = helper.make_function("local", "f", [], ["y"], [helper.make_node("Constant", [], ["y"], value_float=1.0)],
                                [helper.make_opsetid("", 17)], attributes=[])
    func.attribute_proto.add().CopyFrom(helper.make_attribute("w", ext("in_function")))
    training = onnx.TrainingInfoProto(initialization=helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=ext("in_training"))], "init", [], [out]))
    both = helper.make_model(clean.graph, functions=[func])
    both.training_info.add().CopyFrom(training)
    assert sorted(external_tensors(both.SerializeToString())) == ["in_function", "in_training"]


@FAST
@given(data=st.binary(max_size=200))
def test_external_data_finder_never_crashes_on_garbage(data):
    from ondevice.onnxproto import external_tensors

    try:
        assert isinstance(external_tensors(data), list)
    except OndeviceError as exc:
        _one_line(exc)


def test_tokenizer_is_parsed_from_the_bytes_that_were_hashed(bundle_dir, tmp_path, monkeypatch):
    from ondevice import runtime

    b = _copy(bundle_dir, tmp_path / "b")
    original = (b / "vocab.txt").read_text().splitlines()
    real = runtime.verify_files

    def swap_after_check(path, manifest):  # a writer racing the loader: changes vocab.txt right after hashing
        kept = real(path, manifest)
        (b / "vocab.txt").write_text("[PAD]\n[UNK]\nevil\n")
        return kept

    monkeypatch.setattr(runtime, "verify_files", swap_after_check)
    assert runtime.Bundle.load(b).tokenizer.vocab == original


def test_very_long_file_name_in_a_manifest(bundle_dir, tmp_path):
    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["files"]["x" * 5000] = {"sha256": "0" * 64, "bytes": 1}
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "5,000 characters" in _one_line(e.value)


@FAST
@given(names=st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=3),
       extra=st.dictionaries(st.sampled_from(["dim", "bits", "code_bytes", "precision", "bit_order"]), JSON_VALUES))
def test_arbitrary_manifests_give_one_line(names, extra, bundle_dir, tmp_path_factory):
    from ondevice.runtime import Bundle

    b = tmp_path_factory.mktemp("m") / "b"
    _copy(bundle_dir, b)
    manifest = json.loads((b / "manifest.json").read_text())
    for name in names:
        manifest["files"][name] = {"sha256": "0" * 64, "bytes": 0}
    manifest.update(extra)
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    _one_line(e.value)


# ------------------------------------------------------------------------------------- 4. numeric flags


@pytest.mark.parametrize("flags", [
    ["--teacher-batch-size", "-1"], ["--teacher-batch-size", "0"], ["--clip-grad-norm", "nan"],
    ["--checkpoint-minutes", "nan"], ["--lr", "inf"], ["--lr", "nan"], ["--lr", "0"], ["--val-fraction", "nan"],
    ["--hidden", "0"], ["--max-sentences", "0"], ["--seed", "-1"], ["--batch-size", "99999999999"],
])
def test_distill_rejects_impossible_flags(flags, tmp_path, tiny_corpus, tiny_teacher, tiny_word_vectors, capsys):
    code, err = _cli(["distill", "--corpus", tiny_corpus, "--teacher", tiny_teacher, "--word-vectors",
                      tiny_word_vectors, "--out", tmp_path / "s", *flags], capsys)
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert flags[0] in err or "argument" in err
    assert not (tmp_path / "s").exists()  # nothing was started, nothing cached as done


@pytest.mark.parametrize("flags", [["--sp-lambda", "nan"], ["--lr", "inf"], ["--bits", "100000000"],
                                   ["--bits", "0"], ["--epochs", "0"], ["--batch-size", "1"], ["--max-sentences", "-5"],
                                   ["--threshold", "nan"], ["--sp-epochs", "-1"], ["--sp-start", "never"]])
def test_binarize_rejects_impossible_flags(flags, tmp_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32))
    base = {"--bits": "8", "--method": "threshold" if flags[0] == "--threshold" else "ae-sp"}
    base.update(dict([flags]))
    args = [v for kv in base.items() for v in kv]
    code, err = _cli(["binarize", "--embeddings", x, "--out", tmp_path / "b", "--quiet", *args], capsys)
    assert code == 2 and err.count("\n") == 0
    assert not (tmp_path / "b").exists()


@FAST
@given(field=st.sampled_from(["epochs", "batch_size", "teacher_batch_size", "lr", "hidden_size", "vocab_size",
                              "max_tokens", "clip_grad_norm", "checkpoint_minutes", "threads", "seed", "val_fraction",
                              "max_sentences"]), value=NUMBERS)
def test_distill_config_validate_accepts_only_sane_values(field, value):
    from ondevice.distill import DistillConfig

    cfg = DistillConfig(corpus="c", **{field: value})
    try:
        cfg.validate()
    except OndeviceError as exc:
        _one_line(exc)
        return
    if field != "max_sentences" or value is not None:
        assert not isinstance(value, (bool, str)) and value is not None
        assert np.isfinite(float(value)) and float(value) >= 0


@FAST
@given(field=st.sampled_from(["epochs", "batch_size", "lr", "sp_lambda", "sp_triplets", "sp_epochs", "threads"]),
       value=NUMBERS)
def test_ae_config_validate_accepts_only_sane_values(field, value):
    from ondevice.binarize_ae import AEConfig

    try:
        AEConfig(**{field: value}).validate()
    except OndeviceError as exc:
        _one_line(exc)
        return
    assert not isinstance(value, (bool, str)) and value is not None and np.isfinite(float(value))


@FAST
@given(bits=NUMBERS, dim=st.integers(-3, 5000))
def test_check_bits_bounds(bits, dim):
    from ondevice.binarize import check_bits

    try:
        check_bits("random", bits, dim)
    except OndeviceError as exc:
        _one_line(exc)
        return
    assert isinstance(bits, int) and 1 <= bits <= 65536 and dim >= 1


# --------------------------------------------------------------------------------- 6. non-finite weights


def _nan_after(calls_before_nan: int):
    real, calls = distill_mod.cosine_loss, []

    def loss(*args):
        calls.append(1)
        value = real(*args)
        return value * float("nan") if len(calls) > calls_before_nan else value

    return loss


def _distill_config(corpus, teacher, wv, **kw):
    from ondevice.distill import DistillConfig

    base = {"corpus": str(corpus), "teacher": str(teacher), "word_vectors": str(wv), "hidden_size": 8, "epochs": 2,
            "batch_size": 16, "lr": 5e-3, "val_fraction": 0.1, "seed": 3, "checkpoint_minutes": 0, "threads": 1}
    base.update(kw)
    return DistillConfig(**base)


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tiny_corpus, tiny_teacher, tiny_word_vectors,
                                                                      tmp_path, monkeypatch):
    from ondevice.student import Student

    out = tmp_path / "s"
    cfg = _distill_config(tiny_corpus, tiny_teacher, tiny_word_vectors)
    monkeypatch.setattr(distill_mod, "cosine_loss", _nan_after(20))  # inside epoch 2 (14 batches per epoch)
    with pytest.raises(OndeviceError) as e:
        distill_mod.distill(cfg, out, progress=False)
    assert "diverged at epoch 2" in _one_line(e.value) and "--resume" in str(e.value)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert (state["epoch"], state["step"]) == (1, 0)  # epoch 1's checkpoint, untouched
    student = Student.load(out)  # the student of epoch 1: finite
    assert np.isfinite(student.encode(["the cat sat"])).all()


def test_nan_weights_never_reach_a_checkpoint(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, monkeypatch):
    out = tmp_path / "s"
    cfg = _distill_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1)
    real_step, steps = torch.optim.Adam.step, []

    def poisoned_step(self, *a, **k):  # what --lr inf did: finite losses, then NaN weights after the last step
        result = real_step(self, *a, **k)
        steps.append(1)
        if len(steps) == 14:  # the epoch's last batch: no later loss would notice
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("nan"))
        return result

    monkeypatch.setattr(torch.optim.Adam, "step", poisoned_step)
    with pytest.raises(OndeviceError, match="diverged at epoch 2, batch 0: NaN or inf weights"):
        distill_mod.distill(cfg, out, progress=False)
    assert len(steps) == 14 and not (out / "checkpoint").exists()


def test_nan_word_vectors_are_refused(tmp_path):
    from ondevice.wordvectors import load_word_vectors

    path = tmp_path / "wv.txt"
    path.write_text("the 0.1 0.2\ncat nan 0.3\n")
    with pytest.raises(OndeviceError, match="NaN or inf for 1 words"):
        load_word_vectors(path)


@pytest.mark.parametrize("content", [b"", b"\n", b"2 3\n", b"\x00\x01\x02\xff" * 10, b"the 1 2\ncat 1\n"])
def test_broken_word_vector_files_are_one_line(content, tmp_path):
    from ondevice.wordvectors import load_word_vectors

    path = tmp_path / "wv.txt"
    path.write_bytes(content)
    with pytest.raises(OndeviceError) as e:
        load_word_vectors(path)
    _one_line(e.value)


def _poison(student_dir: Path, tmp_path: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    d = _copy(student_dir, tmp_path / "nan")
    w = load_file(str(d / "model.safetensors"))
    w["proj.weight"][0, 0] = np.nan
    save_file(w, str(d / "model.safetensors"))
    return d


def test_student_load_and_export_refuse_nan_weights(student_dir, tmp_path):
    from ondevice.export.bundle import export

    from ondevice.binarize import Binarizer
    from ondevice.student import Student

    with pytest.raises(OndeviceError, match="NaN or inf"):
        Student.load(_poison(student_dir, tmp_path))
    student = _tiny_student()
    binarizer = Binarizer.fit(np.random.default_rng(0).normal(size=(20, 8)), "random", 8)
    with torch.no_grad():
        student.model.proj.weight[0, 0] = float("inf")
    with pytest.raises(OndeviceError, match="NaN or inf"):
        export(student, binarizer, tmp_path / "b")
    assert not (tmp_path / "b").exists()


# ---------------------------------------------------------------------- 8. tracebacks instead of one line


@FAST
@given(spec=JSON_VALUES, vocab=st.binary(max_size=64))
def test_arbitrary_tokenizer_files_give_one_line(spec, vocab):
    from ondevice.tokenizer import Tokenizer

    try:
        tok = Tokenizer.from_bytes(b"[PAD]\n[UNK]\n" + vocab, json.dumps(spec).encode())
    except OndeviceError as exc:
        _one_line(exc)
        return
    assert tok.ids("anything") and 1 <= tok.max_tokens


@pytest.mark.parametrize("spec", [{"version": 1}, {"version": 1, "max_tokens": "12"}, {"version": 1, "max_tokens": 0},
                                  [1, 2], None, {"version": 1, "max_tokens": 8, "normalization": "NFC"}])
def test_bad_tokenizer_json_in_a_student_dir(spec, student_dir, tmp_path):
    from ondevice.student import Student

    d = _copy(student_dir, tmp_path / "s")
    (d / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(OndeviceError) as e:
        Student.load(d)
    _one_line(e.value)


def test_non_utf8_vocab(student_dir, tmp_path):
    from ondevice.student import Student

    d = _copy(student_dir, tmp_path / "s")
    (d / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\n")
    with pytest.raises(OndeviceError, match="not UTF-8"):
        Student.load(d)


@FAST
@given(config=JSON_VALUES, field=st.sampled_from(["vocab_size", "embedding_dim", "hidden_size", "output_dim",
                                                   "max_tokens", "pooling", "teacher", "format_version"]))
def test_arbitrary_student_configs_give_one_line(config, field, student_dir, tmp_path_factory):
    from ondevice.student import Student

    d = tmp_path_factory.mktemp("cfg") / "s"
    _copy(student_dir, d)
    good = json.loads((d / "config.json").read_text())
    for bad in (config, {**good, field: config}):
        (d / "config.json").write_text(json.dumps(bad))
        try:
            Student.load(d)
        except OndeviceError as exc:
            _one_line(exc)


@pytest.mark.parametrize("change", [{"hidden_size": 0}, {"hidden_size": 6.0}, {"embedding_dim": 10**9},
                                    {"vocab_size": 10**6, "embedding_dim": 1000}, {"hidden_size": 5}])
def test_absurd_student_config_fails_before_allocating(change, student_dir, tmp_path):
    from ondevice.student import Student

    d = _copy(student_dir, tmp_path / "s")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(change)
    (d / "config.json").write_text(json.dumps(cfg))
    if "vocab_size" in change:  # a consistent vocab, so only the weights file can disagree
        (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]"] + [f"w{i}" for i in range(10**6 - 2)]) + "\n")
    with pytest.raises(OndeviceError) as e:
        Student.load(d)
    _one_line(e.value)


def test_dataclass_from_dict_rejects_non_objects_and_missing_keys():
    from ondevice.student import StudentConfig

    for data in ([1], None, "x", {"vocab_size": 3}):
        with pytest.raises(OndeviceError):
            dataclass_from_dict(StudentConfig, data, "student config")


@pytest.mark.parametrize("texts", [None, b"bytes", 3, [b"x"], ["ok", None], {"a": 1}])
def test_encode_rejects_non_text(texts, student_dir, bundle_dir):
    from ondevice.runtime import Bundle
    from ondevice.student import Student

    for model in (Student.load(student_dir), Bundle.load(bundle_dir)):
        with pytest.raises(OndeviceError, match="texts must"):
            model.encode(texts)


def test_bundle_vocab_larger_than_the_graph_table_fails_at_load(bundle_dir, tmp_path):
    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    with open(b / "vocab.txt", "a") as fh:
        fh.write("newword\n")
    _rehash(b, "vocab.txt")
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "embedding table" in _one_line(e.value)


def test_onnxruntime_errors_at_encode_time_are_one_line(bundle_dir):
    from ondevice.runtime import Bundle

    bundle = Bundle.load(bundle_dir)

    class Broken:
        def run(self, *a, **k):
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Status Message: out of memory\nmore")

    bundle.session = Broken()
    with pytest.raises(OndeviceError) as e:
        bundle.encode(["the cat"])
    assert "out of memory" in _one_line(e.value)


def test_bundle_search_caps_k(bundle_dir):
    from ondevice.runtime import Bundle

    bundle = Bundle.load(bundle_dir).index_texts(["the cat", "a dog"])
    with pytest.raises(OndeviceError, match="k must be"):
        bundle.search("cat", k=10**12)
    assert bundle.search("cat", k=5)[1].shape == (1, 5)


def test_out_pointing_at_a_file_or_a_directory(tmp_path, student_dir, capsys, tiny_corpus):
    from ondevice.binarize import Binarizer
    from ondevice.index import HammingIndex

    a_file = tmp_path / "file"
    a_file.write_text("keep me")
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32))
    bz = Binarizer.fit(np.load(x), "random", 8).save(tmp_path / "bz")
    for args in (["binarize", "--embeddings", x, "--method", "random", "--bits", "8", "--out", a_file],
                 ["binarize", "--embeddings", x, "--method", "random", "--bits", "8", "--out", tmp_path / "b",
                  "--codes-out", tmp_path],
                 ["distill", "--corpus", tiny_corpus, "--out", a_file],
                 ["export", "--student", student_dir, "--binarizer", bz, "--out", a_file / "sub"],
                 ["export", "--student", student_dir, "--binarizer", bz, "--out", a_file],
                 ["eval", "--out", a_file, "--merge", a_file]):
        code, err = _cli(args, capsys)
        assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, (args, err)
    assert a_file.read_text() == "keep me"
    with pytest.raises(OndeviceError, match="is a directory"):
        HammingIndex(8).save(tmp_path)  # `index build --out <dir>`


def test_long_and_binary_corpus_lines(tmp_path):
    from ondevice.corpus import MAX_LINE_CHARS, read_corpus

    long = tmp_path / "long.txt"
    long.write_text("first\n" + "word " * 200_000 + "\nlast\n")
    lines = read_corpus(long)
    assert lines[0] == "first" and lines[2] == "last" and len(lines[1]) <= MAX_LINE_CHARS
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 100)
    with pytest.raises(OndeviceError, match="binary file"):
        read_corpus(binary)
    with pytest.raises(OndeviceError, match=">= 1"):
        read_corpus(long, limit=-1)


def test_corrupt_gzip_and_golden_text_are_one_line(tmp_path):
    """A gzip header over corrupt deflate data is a one-line error like a truncated file, never zlib.error; errors name
    the flag that gave the file; golden sentences are read exactly, and text that is not UTF-8 is refused there."""
    import gzip

    from ondevice.corpus import read_corpus, read_exact_lines

    data = gzip.compress(("the cat sat on the mat\n" * 2000).encode())
    corrupt = tmp_path / "corrupt.txt.gz"
    corrupt.write_bytes(data[:10] + b"\xff" * 50 + data[60:])
    with pytest.raises(OndeviceError, match="cannot read corpus .*corrupt.txt.gz: .*; check the file is complete") as e:
        read_corpus(corrupt)
    assert "\n" not in str(e.value)
    with pytest.raises(OndeviceError, match="cannot read --augment-text"):
        read_corpus(corrupt, flag="--augment-text")
    with pytest.raises(OndeviceError, match="--golden-sentences .* is a folder; pass --golden-sentences FILE"):
        read_exact_lines(tmp_path, "--golden-sentences")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin1"))
    assert read_corpus(latin1) == ["caf\ufffd au lait"]  # a corpus is read with replacement characters, as before
    with pytest.raises(OndeviceError, match="is not UTF-8 text .*convert it to UTF-8"):
        read_exact_lines(latin1, "--golden-sentences")
    with pytest.raises(OndeviceError, match="cannot read --golden-sentences"):
        read_exact_lines(corrupt, "--golden-sentences")
    hard = " two  spaces \t\nnul\0inside\n\n  \n"  # golden text keeps every character; blank lines are skipped
    (tmp_path / "hard.txt.gz").write_bytes(gzip.compress(hard.encode()))
    assert read_exact_lines(tmp_path / "hard.txt.gz", "--golden-sentences") == [" two  spaces \t", "nul\0inside"]


# --------------------------------------------------------------------- 9./10. leftovers after a kill


def _kill_between_renames(out: Path, keep_tmp: bool) -> None:
    """The state a kill leaves between `checkpoint -> .checkpoint.old` and `.checkpoint.tmp -> checkpoint`."""
    (out / "checkpoint").rename(out / ".checkpoint.old")
    if keep_tmp:
        shutil.copytree(out / ".checkpoint.old", out / ".checkpoint.tmp")
        state = json.loads((out / ".checkpoint.tmp" / "state.json").read_text())
        state["marker"] = "newest"
        (out / ".checkpoint.tmp" / "state.json").write_text(json.dumps(state))
    else:  # the new one was still being written
        (out / ".checkpoint.tmp").mkdir()
        (out / ".checkpoint.tmp" / "model.safetensors").write_bytes(b"partial")


@pytest.mark.parametrize("keep_tmp", [True, False])
def test_checkpoint_swap_interrupted_by_a_kill_is_recovered(keep_tmp, tiny_corpus, tiny_teacher, tiny_word_vectors,
                                                            tmp_path):
    out = tmp_path / "s"
    cfg = _distill_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1)
    distill_mod.distill(cfg, out, progress=False)
    _kill_between_renames(out, keep_tmp)
    with pytest.raises(OndeviceError, match="--resume"):  # a plain rerun refuses and deletes nothing
        distill_mod.distill(cfg, out, progress=False)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert (state.get("marker") == "newest") == keep_tmp
    cfg2 = _distill_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2)
    distill_mod.distill(cfg2, out, resume=True, progress=False)
    assert json.loads((out / "checkpoint" / "state.json").read_text())["epoch"] == 2
    assert not (out / ".checkpoint.old").exists() and not (out / ".checkpoint.tmp").exists()


def test_stale_temp_files_of_ours_are_cleaned_on_the_next_write(tmp_path):
    dead_pid = 2**22 + 12345  # above the default pid_max: never a live process
    stale = tmp_path / f".data.npy.{dead_pid}-0123abcd.tmp"
    live = tmp_path / f".data.npy.{os.getpid()}-0123abcd.tmp"
    old_legacy, new_legacy = tmp_path / ".data.npy.abcd_123.tmp", tmp_path / ".data.npy.zz99yy88.tmp"  # mkstemp's
    unrelated = tmp_path / ".other.npy.abcd1234.tmp"
    for p in (stale, live, old_legacy, new_legacy, unrelated):
        p.write_bytes(b"x" * 100)
    past = time.time() - 7200
    os.utime(old_legacy, (past, past))
    os.utime(unrelated, (past, past))
    write_bytes(tmp_path / "data.npy", b"new")
    assert (tmp_path / "data.npy").read_bytes() == b"new"
    assert not stale.exists() and not old_legacy.exists()
    assert live.exists() and new_legacy.exists() and unrelated.exists()  # a live writer, a recent one, not ours
    assert clean_stale_temps(tmp_path, "data.npy") == []


def test_killed_export_staging_folder_is_removed_by_the_next_export(tmp_path):
    from ondevice.export.bundle import export

    from ondevice.binarize import Binarizer

    stale = tmp_path / f".b.{2**22 + 7}-00ff00ff.tmp"
    stale.mkdir()
    (stale / "encoder.onnx").write_bytes(b"half an export")
    student = _tiny_student()
    binarizer = Binarizer.fit(np.random.default_rng(0).normal(size=(20, 8)), "random", 8)
    export(student, binarizer, tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


@FAST
@given(value=JSON_VALUES, field=st.sampled_from(["method", "bits", "dim", "bit_order", "seed", "hyper", "version"]))
def test_arbitrary_binarizer_configs_give_one_line(value, field, tmp_path_factory):
    from ondevice.binarize import Binarizer

    d = tmp_path_factory.mktemp("bz") / "b"
    Binarizer.fit(np.random.default_rng(0).normal(size=(20, 8)), "random", 8).save(d)
    config = json.loads((d / "binarizer.json").read_text())
    for bad in (value, {**config, field: value}):
        (d / "binarizer.json").write_text(json.dumps(bad))
        try:
            Binarizer.load(d)
        except OndeviceError as exc:
            _one_line(exc)


@pytest.mark.parametrize("name", ["\n", "a\nb.txt", "x\u2028y", "\x1b[31mred", "\udcff"])
def test_file_names_with_control_characters_are_refused(name, bundle_dir, tmp_path):
    """Found by hypothesis: a manifest entry named "\\n" printed a two-line error."""
    from ondevice.runtime import Bundle

    b = _copy(bundle_dir, tmp_path / "b")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": "0" * 64, "bytes": 0}
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "invalid file name" in _one_line(e.value)


def test_index_cli_bounds_k_radius_and_bits(tmp_path, capsys):
    """A huge -k is clamped to the index (no allocation for it); an absurd --radius or --bits is one line."""
    codes = np.random.default_rng(0).integers(0, 256, size=(50, 8), dtype=np.uint8)
    np.save(tmp_path / "c.npy", codes)
    index, queries = tmp_path / "i.odx", tmp_path / "c.npy"
    assert _cli(["index", "build", "--codes", queries, "--out", index], capsys)[0] == 0
    assert _cli(["index", "search", index, "--queries", queries, "-k", 10**12], capsys)[0] == 0
    for args in (["--radius", "1e20"], ["--radius", 10**9]):
        code, err = _cli(["index", "search", index, "--queries", queries, *args], capsys)
        assert code == 2 and err.count("\n") == 0 and "radius" in err, err
    code, err = _cli(["index", "build", "--codes", queries, "--bits", 10**8, "--out", tmp_path / "j.odx"], capsys)
    assert code == 2 and err.count("\n") == 0 and "--bits" in err, err


def test_listed_files_are_hashed_in_blocks_and_capped(bundle_dir, tmp_path, monkeypatch):
    """A file the runtime only checks is hashed in blocks and not kept; a listed file over its cap is refused unread."""
    # the bundle format's owner holds the caps and the hashing
    from ondevice.bundle import manifest as runtime
    from ondevice.runtime import Bundle

    bad = _copy(bundle_dir, tmp_path / "b")
    (bad / "big.bin").write_bytes(b"\0" * 3_000_000)
    _rehash(bad, "big.bin")
    Bundle.load(bad)  # checked, and fine
    monkeypatch.setattr(runtime, "MAX_FILE_BYTES", 1_000_000)
    with pytest.raises(OndeviceError, match="big.bin is 3,000,000 bytes, over the 1,000,000 bytes a bundle file may have"):
        Bundle.load(bad)
    monkeypatch.setattr(runtime, "MAX_PARSED_BYTES", 1000)
    monkeypatch.setattr(runtime, "MAX_FILE_BYTES", 1 << 32)
    with pytest.raises(OndeviceError, match="encoder.onnx is .* bytes, over the 1,000 bytes a bundle file the runtime parses"):
        Bundle.load(bad)
    data, digest = runtime._read_hashed(bad / "big.bin", 3_000_000, keep=False)
    assert data == b"" and digest == hashlib.sha256(b"\0" * 3_000_000).hexdigest()
    assert runtime._read_hashed(bad / "big.bin", 2_999_999, keep=True)[1] is None  # longer than listed: no digest


@pytest.mark.parametrize("dtype", ["BF16", "F8_E4M3"])
def test_binarizer_in_a_dtype_numpy_lacks_is_one_line(dtype, bundle_dir, tmp_path):
    from ondevice.runtime import Bundle

    bad = _copy(bundle_dir, tmp_path / "b")
    data = (bad / "binarizer.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    for name, entry in header.items():
        if name != "__metadata__" and entry["dtype"] == "F32":
            entry["dtype"] = dtype  # same byte count for BF16 (shape doubled) is not needed: the parse fails first
    text = json.dumps(header).encode()
    (bad / "binarizer.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size :])
    _rehash(bad, "binarizer.safetensors")
    with pytest.raises(OndeviceError, match="binarizer.safetensors cannot be parsed"):
        Bundle.load(bad)


@FAST
@given(value=JSON_VALUES, which=st.sampled_from(["student", "bundle"]),
       field=st.sampled_from(["vocab_size", "hidden_size", "pooling", "student", "binarizer", "training", "teacher",
                              "dim", "bits", "precision"]))
def test_ondevice_info_on_arbitrary_settings_is_one_line(value, which, field, student_dir, bundle_dir,
                                                         tmp_path_factory):
    """`ondevice info` summarises settings it did not write: any value in any field reads or is one line."""
    from ondevice.describe import describe

    d = _copy(student_dir if which == "student" else bundle_dir, tmp_path_factory.mktemp("info") / "a")
    name = "config.json" if which == "student" else "manifest.json"
    settings = json.loads((d / name).read_text())
    for bad in (value, {**settings, field: value}):
        (d / name).write_text(json.dumps(bad))
        try:
            describe(d)
        except OndeviceError as exc:
            _one_line(exc)
