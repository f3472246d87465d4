"""Hostile inputs, second pass: generated cases per class of finding. Each refusal is one line on stderr (an
OndeviceError from the API), exit code 2, no traceback, within a time bound, and no file changed that the command
was not asked to write.

Classes: 1 writers that would replace what they did not write; 2 unbounded reads and answers; 3 untrusted graphs;
4 manifests that name one file twice; 5 numbers out of range; 6 damaged caches and environments; 7 formats."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_inputs import _rehash

from ondevice.cli import build_parser, main
from ondevice.errors import OndeviceError

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "big", "red", "house", "tree", "bird"]
TIME_BOUND_S = 30.0  # every refusal comes before any real work: far under this on any machine


# ------------------------------------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _time_bound(seconds: float = TIME_BOUND_S):
    """Fail (never hang) when the block runs longer than `seconds`: SIGALRM interrupts a blocked read too."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file and link under `roots`: what it is and the hash of its bytes (a FIFO or device is not read)."""
    out = {}
    for root in roots:
        entries = [root] if not root.is_dir() or root.is_symlink() else [root, *root.rglob("*")]
        for p in entries:
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            elif p.is_dir():
                out[str(p)] = ("dir",)
            elif p.exists():
                out[str(p)] = ("special",)
    return out


def _refused(argv: list, capsys, *watch: Path, expect: str | None = None, progress: bool = False) -> str:
    """Run the CLI in-process: exit 2, one stderr line without a traceback, within the time bound, and nothing under
    `watch` changed (with `progress`, progress lines of a command without --quiet may come first; the error is one
    line, the last). Returns the line."""
    before = _snapshot(*watch)
    with _time_bound():
        code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    if progress:
        assert "Traceback" not in err and sum(": error:" in line for line in err.splitlines()) == 1, err
        err = err.splitlines()[-1]
    assert err and "\n" not in err and "Traceback" not in err, err
    if expect is not None:
        assert expect in err, err
    assert _snapshot(*watch) == before, "a file changed that the command was not asked to write"
    return err


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg and "Traceback" not in msg, msg
    return msg


def _tiny_student(seed: int = 0, pooling: str = "mean"):
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *WORDS]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=6, hidden_size=4, output_dim=8, max_tokens=16,
                        pooling=pooling)
    emb = np.random.default_rng(seed).normal(0, 0.7, (len(vocab), 6)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=16), emb, seed=seed)


def _texts(n: int = 64) -> list[str]:
    return [" ".join(np.random.default_rng(i).choice(WORDS, 5)) for i in range(n)]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Path]:
    """One of every artifact a command might be pointed at, made by its real writer (built once per module)."""
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer
    from ondevice.index import HammingIndex

    root = tmp_path_factory.mktemp("zoo")
    student = _tiny_student()
    student.save(root / "student")
    vectors = student.encode(_texts())
    np.save(root / "embeddings.npy", vectors.astype(np.float32))
    binarizer = Binarizer.fit(vectors, "random", 16, seed=0)
    binarizer.save(root / "binarizer")
    export(student, binarizer, root / "bundle", ExportConfig(golden=True, torchscript=False))
    codes = binarizer.transform(vectors)
    np.save(root / "codes.npy", codes)
    index = HammingIndex(16)
    index.add(codes)
    index.save(root / "catalog.odx")
    (root / "notes.txt").write_text("someone's notes\n")
    (root / "report").mkdir()
    (root / "report" / "report.json").write_text(json.dumps({"mine": "not an eval report"}))
    (root / "folder").mkdir()
    (root / "folder" / "keep.txt").write_text("keep\n")
    (root / "corpus.txt").write_text("\n".join(_texts(40)) + "\n")
    return {"root": root, "student": root / "student", "binarizer": root / "binarizer", "bundle": root / "bundle",
            "embeddings": root / "embeddings.npy", "codes": root / "codes.npy", "index": root / "catalog.odx",
            "notes": root / "notes.txt", "report": root / "report", "folder": root / "folder",
            "corpus": root / "corpus.txt"}


def _zoo_files(zoo: dict[str, Path]) -> list[Path]:
    """Every existing file of the zoo that no --codes-out may replace (the codes file itself may be: it is codes)."""
    skip = {zoo["codes"]}
    return sorted(p for p in zoo["root"].rglob("*") if p.is_file() and p not in skip)


# ------------------------------------------------------------------------- 1. writers that replace other files


_CODES_TARGETS = ["bundle/manifest.json", "bundle/encoder.onnx", "bundle/vocab.txt", "bundle/tokenizer.json",
                  "bundle/binarizer.safetensors", "bundle/binarizer.json", "student/model.safetensors",
                  "student/config.json", "student/vocab.txt", "binarizer/binarizer.json",
                  "binarizer/binarizer.safetensors", "embeddings.npy", "catalog.odx", "notes.txt", "corpus.txt",
                  "report/report.json", "folder/keep.txt", "folder", "bundle", "student"]


@pytest.mark.parametrize("target", _CODES_TARGETS)
def test_codes_out_never_replaces_what_binarize_did_not_write(target, zoo, tmp_path, capsys):
    out = tmp_path / "b"
    _refused(["binarize", "--embeddings", zoo["embeddings"], "--method", "random", "--bits", "16", "--out", out,
              "--codes-out", zoo["root"] / target, "--quiet"], capsys, zoo["root"])
    assert not out.exists()  # refused before any fitting


@pytest.mark.parametrize("target", [p for p in _CODES_TARGETS if not p.startswith(("folder", "bundle", "student"))
                                    or "/" in p])
def test_codes_out_into_a_copy_is_refused_through_a_link(target, zoo, tmp_path, capsys):
    """A link to someone's file is refused too (replacing the link would hide what it pointed at)."""
    link = tmp_path / "link.npy"
    link.symlink_to(zoo["root"] / target)
    _refused(["binarize", "--embeddings", zoo["embeddings"], "--method", "random", "--bits", "16",
              "--out", tmp_path / "b", "--codes-out", link, "--quiet"], capsys, zoo["root"], link)


@pytest.mark.parametrize("name", ["codes.npy", "old.npy"])
def test_codes_out_replaces_its_own_earlier_codes(name, zoo, tmp_path, capsys):
    target = tmp_path / name
    np.save(target, np.zeros((3, 2), np.uint8))  # an earlier --codes-out: codes
    args = ["binarize", "--embeddings", zoo["embeddings"], "--method", "random", "--bits", "16", "--quiet"]
    assert main([*map(str, args), "--out", str(tmp_path / "b"), "--codes-out", str(target)]) == 0
    assert np.load(target).shape == (64, 2)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # written atomically: no temp left


@pytest.mark.parametrize("what", ["notes", "embeddings"])
def test_codes_out_force_replaces_atomically(what, zoo, tmp_path, capsys):
    """--force replaces even an input of the run; the input is read before, and the replacement is atomic."""
    src = tmp_path / zoo[what].name
    shutil.copy(zoo[what], src)
    emb = src if what == "embeddings" else zoo["embeddings"]
    assert main(["binarize", "--embeddings", str(emb), "--method", "random", "--bits", "16", "--quiet",
                 "--out", str(tmp_path / "b"), "--codes-out", str(src), "--force"]) == 0
    assert np.load(src).dtype == np.uint8


_DIR_TARGETS = ["bundle", "student", "binarizer", "report", "notes.txt", "catalog.odx"]  # a folder of other files
# is written into (nothing there is replaced); one holding a report.json that is not an eval report is refused


@pytest.mark.parametrize("target", _DIR_TARGETS)
def test_eval_out_never_writes_over_other_files(target, zoo, tmp_path, capsys):
    report = tmp_path / "in" / "report.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"tasks": [], "views": {}, "results": {}, "skipped": {}}))
    _refused(["eval", "--merge", report, "--out", zoo["root"] / target, "--no-plots"], capsys, zoo["root"])


def test_eval_out_replaces_an_earlier_report_and_refuses_its_own_input(tmp_path, capsys):
    report = tmp_path / "in" / "report.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"tasks": [], "views": {}, "results": {}, "skipped": {}}))
    assert main(["eval", "--merge", str(report), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert main(["eval", "--merge", str(report), "--out", str(tmp_path / "out"), "--no-plots"]) == 0  # its own
    capsys.readouterr()
    _refused(["eval", "--merge", report, "--out", report.parent, "--no-plots"], capsys, report.parent)
    assert main(["eval", "--merge", str(report), "--out", str(report.parent), "--no-plots", "--force"]) == 0


@pytest.mark.parametrize("target", ["student", "binarizer", "folder", "report", "catalog.odx", "notes.txt"])
def test_export_out_never_replaces_other_folders(target, zoo, tmp_path, capsys):
    _refused(["export", "--student", zoo["student"], "--binarizer", zoo["binarizer"], "--out", zoo["root"] / target,
              "--no-torchscript"], capsys, zoo["root"])


@pytest.mark.parametrize("target", ["bundle", "student", "catalog.odx", "notes.txt", "binarizer/binarizer.json"])
def test_binarize_out_never_replaces_other_folders(target, zoo, capsys):
    _refused(["binarize", "--embeddings", zoo["embeddings"], "--method", "random", "--bits", "16", "--quiet",
              "--out", zoo["root"] / target], capsys, zoo["root"])


@pytest.mark.parametrize("target", ["bundle", "binarizer", "catalog.odx", "notes.txt"])
def test_unpack_out_never_replaces_other_folders(target, zoo, capsys):
    _refused(["unpack", "--bundle", zoo["bundle"], "--out", zoo["root"] / target], capsys, zoo["root"])


_PAIR_WRITERS = [["pairs", "teacher", "--task", "stsb"], ["pairs", "train", "--task", "stsb", "--student", "s", "--teacher", "t"],
                 ["pairs", "dvbert", "--task", "stsb", "--student", "s", "--teachers", "t"]]


@pytest.mark.parametrize("target", ["bundle", "student", "binarizer", "catalog.odx", "notes.txt"])
@pytest.mark.parametrize("argv", _PAIR_WRITERS, ids=lambda a: a[1])
def test_pair_writers_never_replace_other_artifacts(argv, target, zoo, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused([*argv, "--out", zoo["root"] / target], capsys, zoo["root"])


@pytest.mark.parametrize("target", ["bundle", "binarizer", "catalog.odx", "notes.txt"])
def test_distill_out_never_replaces_other_artifacts(target, zoo, tiny_teacher, tiny_word_vectors, capsys):
    _refused(["distill", "--corpus", zoo["corpus"], "--teacher", tiny_teacher, "--word-vectors", tiny_word_vectors,
              "--out", zoo["root"] / target], capsys, zoo["root"])


def test_requantize_out_is_never_its_own_source(zoo, tmp_path, capsys):
    src = tmp_path / "bundle"
    shutil.copytree(zoo["bundle"], src)
    _refused(["requantize", "--bundle", src, "--out", src], capsys, src, expect="--bundle")
    _refused(["requantize", "--bundle", src, "--out", src / "inner"], capsys, src, expect="--bundle")


@pytest.mark.parametrize("target", ["bundle", "binarizer", "student"])
def test_demo_out_never_writes_into_an_artifact(target, zoo, tmp_path, capsys):
    _refused(["demo", "--data", tmp_path, "--corpus", zoo["corpus"], "--out", zoo["root"] / target], capsys,
             zoo["root"])


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EIO])
def test_a_full_or_read_only_disk_is_one_line_and_keeps_the_old_file(err, zoo, tmp_path, capsys, monkeypatch):
    import ondevice.io as io_mod

    target = tmp_path / "codes.npy"
    np.save(target, np.zeros((3, 2), np.uint8))

    def no_space(src, dst):
        raise OSError(err, os.strerror(err), str(dst))

    monkeypatch.setattr(io_mod.os, "replace", no_space)
    _refused(["binarize", "--embeddings", zoo["embeddings"], "--method", "random", "--bits", "16", "--quiet",
              "--out", tmp_path / "b", "--codes-out", target], capsys, target)
    assert not [p for p in tmp_path.rglob("*.tmp")]  # the half-written temp file is gone


@pytest.mark.parametrize("err, earlier, torchscript", [  # TorchScript cases are slow (it scripts the model): two
    (e, earlier, False) for e in (errno.ENOSPC, errno.EROFS, errno.EDQUOT) for earlier in (False, True)
] + [(errno.ENOSPC, False, True), (errno.ENOSPC, True, True)])
def test_export_onto_a_full_disk_is_one_line_and_keeps_the_earlier_bundle(err, earlier, torchscript, zoo, tmp_path,
                                                                          capsys, monkeypatch):
    import ondevice.io as io_mod

    out = tmp_path / "bundle"
    if earlier:
        shutil.copytree(zoo["bundle"], out)

    def no_space(self, data):
        raise OSError(err, os.strerror(err), str(self))

    write_bytes = Path.write_bytes

    def full_at_torchscript(self, data):
        return (no_space if ".encoder.pt." in self.name else write_bytes)(self, data)

    if torchscript:  # the TorchScript file: serialized in memory, so a full disk is Python's OSError, not SIGABRT
        monkeypatch.setattr(Path, "write_bytes", full_at_torchscript)
    else:
        monkeypatch.setattr(io_mod.os, "replace", lambda src, dst: no_space(Path(dst), b""))
    argv = ["export", "--student", zoo["student"], "--binarizer", zoo["binarizer"], "--out", out]
    _refused(argv if torchscript else [*argv, "--no-torchscript"], capsys, tmp_path, zoo["root"])
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the staging folder is gone


# -------------------------------------------------------------------------------- 5. numbers out of range


def _numeric_flags() -> list[tuple[list[str], str, object]]:
    """(command words, option, action type) of every int or float option of every command."""
    from ondevice.checks import finite_float

    found = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*words, name])
            elif action.type in (int, float, finite_float) and action.option_strings:
                found.append((words, max(action.option_strings, key=len), action.type))

    for command in ("binarize", "distill", "eval", "export", "index", "pairs", "demo", "info", "unpack",
                    "requantize", "teachers"):
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        walk(sub.choices[command], [command])
    return found


def _minimal_argv(words: list[str]) -> list[str]:
    """The command's words and a dummy value for each required argument (nothing runs: the range check is first)."""
    parser = build_parser(words[0])
    for w in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[w]
    argv = list(words)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.dest in ("help",):
            continue
        if action.required or (not action.option_strings and action.nargs not in ("?", "*")):
            value = str(action.choices[0]) if action.choices else ("1" if action.type in (int, float) else "x")
            argv += [*action.option_strings[:1], value]
    return argv


_BAD = ["nan", "inf", "-inf", "1e308", "-1e308"]
_BAD_INT = ["-99999999999999999999999", "99999999999999999999999"]


def _bad_cases():
    cases = []
    for words, option, kind in _numeric_flags():
        for value in (_BAD if kind is not int else _BAD_INT):
            cases.append(pytest.param(words, option, value, id=f"{'-'.join(words)}{option}={value}"))
    return cases


@pytest.mark.parametrize("words, option, value", _bad_cases())
def test_every_numeric_flag_refuses_non_finite_and_absurd_values(words, option, value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [*_minimal_argv(words), option, value]
    before = sorted(tmp_path.iterdir())
    with _time_bound():
        code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err and "\n" not in err and "Traceback" not in err, (argv, err)
    assert option in err or "argument" in err, err
    assert sorted(tmp_path.iterdir()) == before


def test_every_default_is_inside_its_flags_range():
    """The range table never refuses what a command does by default (a table entry too tight for its flag)."""
    from ondevice.checks import check_flag

    checked = 0
    for words, option, _ in _numeric_flags():
        parser = build_parser(words[0])
        for w in words:
            parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[w]
        action = next(a for a in parser._actions if option in a.option_strings)
        if action.default is not None:
            check_flag(option, action.default)
            checked += 1
    assert checked > 50


_NAMED = [(["binarize", "--embeddings", "x", "--bits", "8", "--out", "o"], "--seed", "-1"),
          (["binarize", "--embeddings", "x", "--bits", "8", "--out", "o"], "--seed", str(2**32)),
          (["binarize", "--embeddings", "x", "--bits", "8", "--out", "o"], "--holdout", "2"),
          (["binarize", "--embeddings", "x", "--bits", "8", "--out", "o"], "--sp-lambda", "-1"),
          (["binarize", "--embeddings", "x", "--bits", "8", "--out", "o"], "--bits", "100000000"),
          (["pairs", "teacher", "--task", "stsb", "--out", "o"], "--lr", "1e308"),
          (["pairs", "teacher", "--task", "stsb", "--out", "o"], "--lr", "0"),
          (["pairs", "teacher", "--task", "stsb", "--out", "o"], "--warmup-ratio", "1.5"),
          (["pairs", "dipair", "--task", "stsb", "--student", "s", "--teacher", "t", "--out", "o"], "--dropout", "1.5"),
          (["pairs", "dipair", "--task", "stsb", "--student", "s", "--teacher", "t", "--out", "o"], "--temperature", "0"),
          (["index", "calibrate"], "--max-mb", "1e300"), (["index", "calibrate"], "--repeats", "1000000000"),
          (["index", "calibrate"], "--seed", "-1"), (["index", "serve", "x"], "--cpus-per-shard", "0"),
          (["index", "serve", "x"], "--port", "70000"), (["index", "serve", "x"], "--replicas", "0"),
          (["index", "build", "--codes", "c", "--out", "o"], "--shards", "100000"),
          (["eval"], "--queries", "100000000000"), (["distill", "--corpus", "c", "--out", "o"], "--lr", "11"),
          (["distill", "--corpus", "c", "--out", "o"], "--seed", "-5"),
          (["demo"], "--sentences", "10000000000000")]


@pytest.mark.parametrize("argv, option, value", _NAMED)
def test_named_numbers_from_the_audit_are_one_line(argv, option, value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused([*argv, option, value], capsys, tmp_path)
    assert option in err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("inf")])
@pytest.mark.parametrize("shape", ["top", "nested", "list", "array", "dataclass"])
def test_write_json_never_saves_non_finite_numbers(value, shape, tmp_path):
    from dataclasses import dataclass

    from ondevice.io import write_json

    @dataclass
    class Holder:
        x: float

    obj = {"top": {"a": value}, "nested": {"a": {"b": [1, {"c": value}]}}, "list": [0.5, value],
           "array": {"a": np.array([1.0, value])}, "dataclass": Holder(value)}[shape]
    target = tmp_path / "out.json"
    target.write_text("{}")
    with pytest.raises(OndeviceError) as e:
        write_json(target, obj)
    assert "NaN or infinity" in _one_line(e.value)
    assert target.read_text() == "{}"  # the earlier file is kept


@pytest.mark.parametrize("text", ['{"stsb": NaN}', '{"a": {"b": Infinity}}', '{"a": [1, -Infinity]}'])
def test_export_refuses_a_non_finite_eval_summary_before_any_work(text, zoo, tmp_path, capsys):
    summary = tmp_path / "eval.json"
    summary.write_text(text)
    _refused(["export", "--student", zoo["student"], "--binarizer", zoo["binarizer"], "--out", tmp_path / "b",
              "--eval", summary], capsys, tmp_path, zoo["root"], expect="NaN or infinity")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), 1e308, 0.0, -1e-3, 11.0, True, "0.1"])
def test_training_checks_refuse_steps_that_break_training(lr):
    from ondevice.checks import first_failure, training_checks

    with pytest.raises(OndeviceError) as e:
        first_failure(training_checks(1, 1, lr))
    assert "--lr" in _one_line(e.value)


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70, 1.5, "3", None, True])
def test_binarizer_fit_seed_in_range(seed):
    from ondevice.binarize import Binarizer

    x = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    with pytest.raises(OndeviceError) as e:
        Binarizer.fit(x, "random", 8, seed=seed)
    assert "seed" in _one_line(e.value)


# ---------------------------------------------------------------------- 6. damaged caches and environments


def _encoder(calls: list):
    """A normalized fake encoder: unit rows from each text's hash, with a record of the texts it was asked for."""
    def fn(texts: list[str]) -> np.ndarray:
        calls.extend(texts)
        rows = np.stack([np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).normal(size=8)
                         for t in texts]).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return fn


def _fill(root: Path, texts: list[str], calls: list | None = None, dim: int | None = 8):
    from ondevice.vector_cache import cached_rows, check_vectors

    return cached_rows(root, "teacher", {"name": "fake"}, texts, _encoder(calls if calls is not None else []),
                       chunk=16, check=lambda rows, what: check_vectors(rows, True, what), dim=dim)


_DAMAGE = ["zero-row", "zero-chunk", "random-row", "scaled-row", "nan-row", "flip-byte", "truncate", "truncate-header",
           "wider", "narrower", "empty-file", "garbage-state", "state-more-chunks", "not-npy"]


def _damage(folder: Path, how: str, rng: np.random.Generator) -> None:
    vec = folder / "vectors.npy"
    if how in ("zero-row", "zero-chunk", "random-row", "scaled-row", "nan-row", "flip-byte"):
        arr = np.load(vec, mmap_mode="r+")
        row = int(rng.integers(0, len(arr)))
        if how == "zero-row":
            arr[row] = 0
        elif how == "zero-chunk":
            arr[16:32] = 0
        elif how == "random-row":
            arr[row] = rng.normal(size=arr.shape[1])
        elif how == "scaled-row":
            arr[row] *= 1.0001  # still almost unit length: only the checksum sees it
        elif how == "nan-row":
            arr[row] = np.nan
        else:
            flat = arr.reshape(-1).view(np.uint8)
            flat[int(rng.integers(0, flat.size))] ^= 0x10
        arr.flush()
        del arr
    elif how in ("truncate", "truncate-header", "empty-file"):
        data = vec.read_bytes()
        vec.write_bytes(data[: {"truncate": len(data) // 2, "truncate-header": 40, "empty-file": 0}[how]])
    elif how in ("wider", "narrower"):
        n = len(np.load(vec, mmap_mode="r"))
        np.save(vec, np.ones((n, 9 if how == "wider" else 7), np.float32))
    elif how == "garbage-state":
        (folder / "state.json").write_text("{not json")
    elif how == "state-more-chunks":
        state = json.loads((folder / "state.json").read_text())
        state["chunks"] = list(range(50))
        (folder / "state.json").write_text(json.dumps(state))
    elif how == "not-npy":
        vec.write_bytes(b"\0" * 4096)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("how", _DAMAGE)
def test_damaged_vector_caches_are_recomputed_never_trained_on(how, seed, tmp_path, capsys):
    texts = [f"sentence {i} {WORDS[i % len(WORDS)]}" for i in range(70)]
    clean, _ = _fill(tmp_path / "fresh", texts)
    clean = np.array(clean)
    root = tmp_path / "cache"
    _fill(root, texts)
    folder = next(p for p in root.iterdir() if (p / "vectors.npy").is_file())
    _damage(folder, how, np.random.default_rng(seed))
    calls: list[str] = []
    with _time_bound():
        if how in ("garbage-state", "state-more-chunks"):  # an edited state.json: refused, look before deleting
            with pytest.raises(OndeviceError) as e:
                _fill(root, texts, calls)
            assert "state" in _one_line(e.value)
            return
        again, _ = _fill(root, texts, calls)
    np.testing.assert_array_equal(np.array(again), clean)  # the damaged rows were computed again, not used
    assert calls, "nothing was recomputed"
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["zero-row", "random-row", "flip-byte"])
def test_a_damaged_donor_cache_lends_none_of_its_damaged_rows(how, tmp_path):
    texts = [f"line {i}" for i in range(64)]
    clean = np.array(_fill(tmp_path / "fresh", texts)[0])
    root = tmp_path / "cache"
    _fill(root, texts)
    donor = next(p for p in root.iterdir() if (p / "vectors.npy").is_file())
    _damage(donor, how, np.random.default_rng(1))
    other = texts[::-1]  # another text list of the same encoder: its rows come from the donor where they can
    got = np.array(_fill(root, other)[0])
    np.testing.assert_array_equal(got, clean[::-1])


@pytest.mark.parametrize("setting", ["", " ", "FILE", "FILE/sub", "FILE/a/b"])
def test_ondevice_cache_that_is_empty_or_a_file_is_one_line(setting, tmp_path, capsys, monkeypatch):
    from ondevice.io import cache_dir

    (tmp_path / "FILE").write_text("not a folder")
    value = setting.replace("FILE", str(tmp_path / "FILE"))
    monkeypatch.setenv("ONDEVICE_CACHE", value)
    with pytest.raises(OndeviceError) as e:
        cache_dir()
    assert "ONDEVICE_CACHE" in _one_line(e.value)
    monkeypatch.chdir(tmp_path)
    _refused(["demo", "--data", tmp_path, "--corpus", tmp_path / "FILE"], capsys, tmp_path, expect="ONDEVICE_CACHE")


@pytest.mark.parametrize("kind", ["dir", "link", "fifo"])
def test_something_else_where_the_lock_file_goes_is_one_line(kind, tmp_path):
    from ondevice.vector_cache import LOCK_NAME, cache_key

    texts = ["a b", "c d"]
    name, _ = cache_key("teacher", {"name": "fake"}, texts)
    folder = tmp_path / name
    folder.mkdir()
    lock = folder / LOCK_NAME
    if kind == "dir":
        lock.mkdir()
    elif kind == "link":
        lock.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(lock)
    with _time_bound(), pytest.raises(OndeviceError) as e:
        _fill(tmp_path, texts)
    assert LOCK_NAME in _one_line(e.value) or "cache" in str(e.value)


# ------------------------------------------------------------------------------------ 3. untrusted graphs


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """A tiny fp32 and int8 bundle (mean pooling) to forge graphs from."""
    from ondevice.export.bundle import ExportConfig, export

    from ondevice.binarize import Binarizer

    root = tmp_path_factory.mktemp("graphs")
    student = _tiny_student()
    binarizer = Binarizer.fit(student.encode(_texts()), "random", 12, seed=0)  # 12 bits: 4 padding bits per code
    export(student, binarizer, root / "b", ExportConfig(precision="both", torchscript=False))
    return {"fp32": root / "b" / "fp32", "int8": root / "b" / "int8"}


def _forge(src: Path, dst: Path, edit) -> Path:
    """A copy of bundle `src` whose encoder.onnx `edit(model)` changed, manifest rehashed."""
    shutil.copytree(src, dst)
    model = onnx.load(str(dst / "encoder.onnx"))
    edit(model)
    (dst / "encoder.onnx").write_bytes(model.SerializeToString())
    _rehash(dst, "encoder.onnx")
    return dst


def _rename_output(model, name: str, new: str) -> None:
    """Rename the tensor `name` in the main graph's nodes (producer, consumers) to `new`: the graph output keeps the
    name, for a node the caller adds to produce it."""
    for node in model.graph.node:
        node.output[:] = [new if o == name else o for o in node.output]
        node.input[:] = [new if i == name else i for i in node.input]


def _loop_graph(trips: int):
    """A graph that outputs embedding and code after a Loop of `trips` iterations (never allowed to run)."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["x_in"], ["x_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("x_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None)])
    return [helper.make_node("Constant", [], ["trips"], value=helper.make_tensor("t", TensorProto.INT64, [], [trips])),
            helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
            helper.make_node("Loop", ["trips", "cond", "embedding_raw"], ["embedding"], body=body)]


def _foreign_op(op: str, domain: str = ""):
    def edit(model):
        from onnx import helper

        _rename_output(model, "embedding", "embedding_raw")
        if op == "Loop":
            model.graph.node.extend(_loop_graph(10**12))
        else:
            model.graph.node.append(helper.make_node(op, ["embedding_raw"], ["embedding"], domain=domain))
            if domain and all(o.domain != domain for o in model.opset_import):
                model.opset_import.append(helper.make_opsetid(domain, 1))
    return edit


_FOREIGN = [("Loop", ""), ("Scan", ""), ("If", ""), ("RandomNormalLike", ""), ("Upsample", ""), ("Hardmax", ""),
            ("Einsum", ""), ("StringNormalizer", ""), ("SequenceConstruct", ""), ("Evil", "com.example"),
            ("Gelu", "com.microsoft"), ("ArrayFeatureExtractor", "ai.onnx.ml")]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("op, domain", _FOREIGN)
def test_graphs_with_operators_no_exporter_writes_are_refused_before_they_run(op, domain, precision, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = _forge(bundles[precision], tmp_path / "b", _foreign_op(op, domain))
    with _time_bound(), pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "operators" in _one_line(e.value) and op in str(e.value)


def test_a_huge_loop_is_refused_by_info_verify_too(bundles, tmp_path, capsys):
    b = _forge(bundles["fp32"], tmp_path / "b", _foreign_op("Loop"))
    _refused(["info", b, "--verify"], capsys, b, expect="Loop")


def _nan_for_word(word_id: int, value: float = float("nan")):
    """The embedding becomes `value` in every column for sentences holding token `word_id`, finite otherwise."""
    def edit(model):
        from onnx import TensorProto, helper

        _rename_output(model, "embedding", "embedding_raw")
        model.graph.initializer.extend([
            helper.make_tensor("word", TensorProto.INT64, [], [word_id]),
            helper.make_tensor("bad", TensorProto.FLOAT, [], [value]),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
        ])
        model.graph.node.extend([
            helper.make_node("Equal", ["ids", "word"], ["hit"]),
            helper.make_node("Cast", ["hit"], ["hitf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMax", ["hitf"], ["anyf"], axes=[1], keepdims=1),
            helper.make_node("Greater", ["anyf", "half"], ["any"]),
            helper.make_node("Where", ["any", "bad", "zero"], ["poison"]),
            helper.make_node("Add", ["embedding_raw", "poison"], ["embedding"]),
        ])
    return edit


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("word", ["cat", "dog", "mat", "tree"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_vectors_for_one_word_are_caught_at_every_encode(word, value, precision, bundles, tmp_path):
    from ondevice.runtime import Bundle

    vocab = (bundles[precision] / "vocab.txt").read_text().split("\n")
    b = _forge(bundles[precision], tmp_path / "b", _nan_for_word(vocab.index(word), value))
    bundle = Bundle.load(b)  # the load probe does not hold the word
    assert np.isfinite(bundle.encode(["the big house"])).all()
    for texts in ([f"the {word} sat"], ["a red bird", f"{word}"], [f"{word} " * 3] * 5):
        with pytest.raises(OndeviceError) as e:
            bundle.codes(texts)
        assert "NaN or infinite" in _one_line(e.value)


def test_an_index_is_never_written_from_non_finite_vectors(bundles, tmp_path, capsys):
    vocab = (bundles["fp32"] / "vocab.txt").read_text().split("\n")
    b = _forge(bundles["fp32"], tmp_path / "b", _nan_for_word(vocab.index("cat")))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the dog sat\nthe cat sat\n")
    _refused(["index", "build", "--bundle", b, "--corpus", corpus, "--out", tmp_path / "i.odx"], capsys, tmp_path,
             expect="NaN", progress=True)
    assert not (tmp_path / "i.odx").exists()


def _extra_columns(n: int):
    """Outputs `n` more (or, negative, fewer) embedding columns than declared."""
    def edit(model):
        from onnx import TensorProto, helper

        _rename_output(model, "embedding", "embedding_raw")
        if n > 0:
            model.graph.initializer.append(helper.make_tensor("pad", TensorProto.INT64, [4], [0, 0, 0, n]))
            model.graph.node.append(helper.make_node("Pad", ["embedding_raw", "pad"], ["embedding"]))
        else:
            model.graph.initializer.extend([helper.make_tensor("s0", TensorProto.INT64, [1], [0]),
                                            helper.make_tensor("s1", TensorProto.INT64, [1], [8 + n]),
                                            helper.make_tensor("ax", TensorProto.INT64, [1], [1])])
            model.graph.node.append(helper.make_node("Slice", ["embedding_raw", "s0", "s1", "ax"], ["embedding"]))
    return edit


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("n", [1, 2, 7, -1, -4])
def test_outputs_of_another_shape_than_declared_are_one_line(n, precision, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = _forge(bundles[precision], tmp_path / "b", _extra_columns(n))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b).encode(["the cat sat", "a dog"])
    assert "re-export" in _one_line(e.value)


def _retype(output: str, elem: int):
    """Declare (and make) output `output` of another element type."""
    def edit(model):
        from onnx import helper

        _rename_output(model, output, f"{output}_raw")
        model.graph.node.append(helper.make_node("Cast", [f"{output}_raw"], [output], to=elem))
        for out in model.graph.output:
            if out.name == output:
                out.type.tensor_type.elem_type = elem
    return edit


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("output, elem", [("code", 1), ("code", 6), ("code", 7), ("code", 3), ("embedding", 11),
                                          ("embedding", 10), ("embedding", 6)])
def test_outputs_of_another_type_are_refused_at_load(output, elem, precision, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = _forge(bundles[precision], tmp_path / "b", _retype(output, elem))
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert output in _one_line(e.value)


def _set_padding_bits(model):
    """A graph whose codes set the padding bits past the code length (12 bits: the top 4 of the second byte)."""
    from onnx import TensorProto, helper

    _rename_output(model, "code", "code_raw")
    model.graph.initializer.append(helper.make_tensor("high", TensorProto.UINT8, [2], [0, 0xF0]))
    model.graph.node.append(helper.make_node("BitwiseOr", ["code_raw", "high"], ["code"]))


def test_codes_with_padding_bits_set_are_refused(bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = _forge(bundles["fp32"], tmp_path / "b", _set_padding_bits)
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "operators" in _one_line(e.value) or "past the" in str(e.value)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("change", ["other-weights", "other-offset", "negated", "other-seed"])
def test_a_binarizer_file_that_does_not_match_its_graph_is_refused(change, precision, bundles, tmp_path):
    from safetensors.numpy import load, save

    from ondevice.runtime import Bundle

    b = tmp_path / "b"
    shutil.copytree(bundles[precision], b)
    weights = load((b / "binarizer.safetensors").read_bytes())
    a, c = weights["projection"], weights["offset"]
    rng = np.random.default_rng(3)
    if change == "other-weights":
        a = rng.normal(size=a.shape).astype(a.dtype)
    elif change == "other-offset":
        c = (c + rng.normal(size=c.shape) * 10).astype(c.dtype)
    elif change == "negated":
        a, c = -a, -c
    else:
        a = np.ascontiguousarray(a[:, ::-1])
    (b / "binarizer.safetensors").write_bytes(save({"projection": a, "offset": c}))
    _rehash(b, "binarizer.safetensors")
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "binarizer.safetensors" in _one_line(e.value)


# -------------------------------------------------------------------- 4. manifests that name one file twice


_SPELLINGS = ["golden//x.npy", "golden/./x.npy", "golden/", "a/../vocab.txt"] + [
    form.format(name) for name in ("vocab.txt", "encoder.onnx", "tokenizer.json", "binarizer.json", "binarizer.safetensors")
    for form in ("./{}", "{}/", "././{}", ".//{}", "{}/.", "{}//", "./././{}")] + [
    "VOCAB.txt", "Vocab.Txt", "ENCODER.onnx", "Tokenizer.JSON", "BINARIZER.json", "vocab.TXT"]


@pytest.mark.parametrize("name", _SPELLINGS)
def test_manifests_list_each_file_once_in_canonical_form(name, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = tmp_path / "b"
    shutil.copytree(bundles["fp32"], b)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["files"][name] = manifest["files"]["vocab.txt"]
    (b / "manifest.json").write_text(json.dumps(manifest))
    with _time_bound(), pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    _one_line(e.value)


@pytest.mark.parametrize("key", ["vocab.txt", "format", "dim"])
def test_a_manifest_naming_a_key_twice_is_refused(key, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = tmp_path / "b"
    shutil.copytree(bundles["fp32"], b)
    text = (b / "manifest.json").read_text()
    manifest = json.loads(text)
    if key == "vocab.txt":
        entry = json.dumps(manifest["files"]["vocab.txt"])
        text = text.replace('"files": {', f'"files": {{"vocab.txt": {entry}, ', 1)
    else:
        text = text.replace("{", f'{{"{key}": {json.dumps(manifest[key])}, ', 1)
    (b / "manifest.json").write_text(text)
    with pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "twice" in _one_line(e.value)


@pytest.mark.parametrize("count", [5000, 100_000])
def test_absurd_file_counts_are_refused_unread(count, bundles, tmp_path):
    from ondevice.runtime import Bundle

    b = tmp_path / "b"
    shutil.copytree(bundles["fp32"], b)
    manifest = json.loads((b / "manifest.json").read_text())
    entry = manifest["files"]["vocab.txt"]
    manifest["files"].update({f"f{i}.txt": entry for i in range(count)})
    (b / "manifest.json").write_text(json.dumps(manifest))
    with _time_bound(10), pytest.raises(OndeviceError) as e:
        Bundle.load(b)
    assert "files" in _one_line(e.value)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    from ondevice.scale.shards import build_shards

    root = tmp_path_factory.mktemp("shards") / "idx"
    build_shards(np.random.default_rng(0).integers(0, 256, (40, 4), dtype=np.uint8), root, shards=4)
    return root


@pytest.mark.parametrize("change", ["twice", "case", "many", "huge-list", "dot-slash", "trailing-slash", "sub-folder",
                                    "parent", "empty", "absolute"])
def test_sharded_manifests_list_each_shard_once(change, sharded, tmp_path, capsys):
    from ondevice.scale.shards import read_manifest

    idx = tmp_path / "idx"
    shutil.copytree(sharded, idx)
    manifest = json.loads((idx / "manifest.json").read_text())
    first = manifest["shards"][0]
    if change == "twice":
        manifest["shards"].append(dict(first))
    elif change == "case":
        manifest["shards"].append({**first, "file": first["file"].upper()})
    elif change in ("dot-slash", "trailing-slash", "sub-folder", "parent", "empty", "absolute"):
        spelled = {"dot-slash": "./{}", "trailing-slash": "{}/", "sub-folder": "x/{}", "parent": "../idx/{}",
                   "empty": "", "absolute": str(idx) + "/{}"}[change]
        manifest["shards"].append({**first, "file": spelled.format(first["file"])})
    else:
        n = 5000 if change == "many" else 100_000
        manifest["shards"] = [{**first, "file": f"s{i}.odx"} for i in range(n)]
    manifest["count"] = sum(s["count"] for s in manifest["shards"])
    (idx / "manifest.json").write_text(json.dumps(manifest))
    with _time_bound(10), pytest.raises(OndeviceError) as e:
        read_manifest(idx)
    _one_line(e.value)
    _refused(["index", "info", idx], capsys, idx)


# -------------------------------------------------------------------------- 2. unbounded reads and streams


def _special(kind: str, tmp_path: Path) -> Path:
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
        return path
    return Path({"zero": "/dev/zero", "urandom": "/dev/urandom", "null": "/dev/null"}[kind])


_STREAM_READERS = [
    (["pairs", "score", "--bundle", "BUNDLE", "--pairs", "SRC"], "--pairs"),
    (["binarize", "--student", "STUDENT", "--corpus", "SRC", "--bits", "8", "--out", "OUT", "--quiet"], "corpus"),
    (["index", "build", "--bundle", "BUNDLE", "--corpus", "SRC", "--out", "OUT"], "corpus"),
    (["export", "--student", "STUDENT", "--binarizer", "BINARIZER", "--out", "OUT", "--eval", "SRC"], "--eval"),
    (["export", "--student", "STUDENT", "--binarizer", "BINARIZER", "--out", "OUT", "--golden",
      "--golden-sentences", "SRC"], "--golden-sentences"),
    (["binarize", "--embeddings", "SRC", "--bits", "8", "--out", "OUT", "--quiet"], "--embeddings"),
    (["eval", "--merge", "SRC", "--out", "OUT"], "report"),
    (["distill", "--corpus", "CORPUS", "--word-vectors", "SRC", "--out", "OUT", "--teacher", "TEACHER"], "word vectors"),
]


@pytest.mark.parametrize("argv, what, kind", [(argv, what, kind) for argv, what in _STREAM_READERS
                                              for kind in ("zero", "urandom", "fifo", "null")])
def test_streams_and_devices_are_refused_not_read(argv, what, kind, zoo, tmp_path, capsys):
    src = _special(kind, tmp_path)
    subs = {"SRC": src, "BUNDLE": zoo["bundle"], "STUDENT": zoo["student"], "BINARIZER": zoo["binarizer"],
            "OUT": tmp_path / "out", "CORPUS": zoo["corpus"], "TEACHER": tmp_path / "no-teacher"}
    err = _refused([subs.get(a, a) for a in argv], capsys, zoo["root"])
    assert str(src) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line", [b"\n", b"a\n", b" \n", b"\t\n"])
@pytest.mark.parametrize("flag", ["corpus", "golden"])
def test_gzip_bombs_stop_at_the_inflation_bound(line, flag, tmp_path, monkeypatch):
    import ondevice.corpus as corpus_mod

    monkeypatch.setattr(corpus_mod, "GZIP_SLACK", 1 << 16)  # the bound that counts for a small file: 64 kB + 100x
    bomb = tmp_path / "bomb.txt.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        for _ in range(64):
            fh.write(line * (1 << 14))  # 1 MB or more inflated from a few kB
    with _time_bound(), pytest.raises(OndeviceError) as e:
        if flag == "corpus":
            corpus_mod.read_corpus(bomb, limit=10**9)
        else:
            corpus_mod.read_exact_lines(bomb, "--golden-sentences")
    assert "inflates" in _one_line(e.value) or "no sentences" in str(e.value)


def test_an_ordinary_gzip_corpus_still_reads(tmp_path):
    from ondevice.corpus import read_corpus

    path = tmp_path / "c.txt.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(_texts(500)))
    assert len(read_corpus(path)) == 500


@pytest.mark.parametrize("header", [b"1000000000 1000000\n", b"3 100000000\n", b"99999999999999999999 300\n"])
@pytest.mark.parametrize("suffix", [".txt", ".bin"])
def test_word_vector_headers_claiming_more_than_the_file_holds(header, suffix, tmp_path):
    from ondevice.wordvectors import load_word_vectors

    pytest.importorskip("gensim")
    path = tmp_path / f"v{suffix}"
    path.write_bytes(header + b"the 0.1 0.2\n")
    with _time_bound(), pytest.raises(OndeviceError) as e:
        load_word_vectors(path)
    _one_line(e.value)


# ----------------------------------------------------------------------------------------------- 7. formats


@pytest.mark.parametrize("text", ["\udcff\udcfe query", "caf\udce9", "\x1b[31mred\udc80", "ok"])
@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1"])
def test_error_lines_print_on_any_terminal(text, encoding, monkeypatch):
    """An error naming text of invalid UTF-8 (a query, a file name) prints escaped, never a UnicodeEncodeError."""
    from ondevice import cli

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors="strict")
    monkeypatch.setattr(sys, "stderr", stream)
    cli._say_error("index", f"no match for {text}")
    stream.flush()
    line = raw.getvalue().decode(encoding)
    assert line.startswith("ondevice index: error:") and line.count("\n") == 1


def test_invalid_utf8_file_names_in_errors_are_one_line(tmp_path, capsys):
    name = os.fsdecode(b"corpus-\xff\xfe.txt")
    _refused(["binarize", "--student", tmp_path, "--corpus", tmp_path / name, "--bits", "8", "--out",
              tmp_path / "o", "--quiet"], capsys, tmp_path)


@pytest.mark.parametrize("raw", [b"\xff\xfe\n", b"caf\xe9\n", b"\xed\xa0\x80\n"])
def test_invalid_utf8_golden_sentences_are_one_line(raw, zoo, tmp_path, capsys):
    path = tmp_path / "golden.txt"
    path.write_bytes(raw)
    _refused(["export", "--student", zoo["student"], "--binarizer", zoo["binarizer"], "--out", tmp_path / "b",
              "--golden", "--golden-sentences", path], capsys, zoo["root"], expect="UTF-8")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_diverged_cross_encoder_is_never_called_checked(value, pair_env, tmp_path, capsys):
    from safetensors.numpy import load, save

    teacher = tmp_path / "teacher"
    shutil.copytree(pair_env.teacher(), teacher)
    weights = teacher / "model" / "model.safetensors"
    tensors = load(weights.read_bytes())
    name = min(k for k, v in tensors.items() if v.dtype.kind == "f")
    tensors[name] = np.full_like(tensors[name], value)
    weights.write_bytes(save(tensors))
    capsys.readouterr()  # building the session's teacher (when this test is the first to need it) prints progress
    _refused(["info", teacher, "--verify"], capsys, teacher, expect="NaN or inf")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), np.float32("nan")])
def test_measurement_records_write_undefined_metrics_as_null(value, tmp_path):
    from ondevice.io import write_record

    write_record(tmp_path / "r.json", {"spearman": value, "rows": [1.0, value], "ok": 2.5})
    assert json.loads((tmp_path / "r.json").read_text()) == {"spearman": None, "rows": [1.0, None], "ok": 2.5}


@pytest.fixture(scope="module")
def pretrained_index(tmp_path_factory) -> tuple[Path, Path]:
    """An index of a small corpus built with the shipped bundle: (index file, corpus)."""
    root = tmp_path_factory.mktemp("pretrained-index")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(_texts(30)) + "\ncaf\u00e9 au lait\n")
    assert main(["index", "build", "--bundle", "pretrained", "--corpus", str(corpus), "--out", str(root / "i.odx")]) == 0
    return root / "i.odx", corpus


@pytest.mark.parametrize("query", [b"\xff\xfe", b"caf\xe9", b"\xed\xa0\x80 cat", b"ok \x80\x81"])
@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_invalid_utf8_queries_print_safely_on_a_strict_terminal(query, encoding, pretrained_index, capsys):
    import subprocess

    index, corpus = pretrained_index
    capsys.readouterr()
    env = {**os.environ, "PYTHONIOENCODING": f"{encoding}:strict", "LC_ALL": "C"}
    args = [os.fsencode(sys.executable), b"-m", b"ondevice", b"index", b"search", os.fsencode(index), b"--bundle",
            b"pretrained", b"--corpus", os.fsencode(corpus), b"-k", b"3", b"--query", query]
    res = subprocess.run(args, check=False, capture_output=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in res.stderr and b"UnicodeEncodeError" not in res.stderr


# ------------------------------------------------------------------------------ index files: writers and formats


_INDEX_TARGETS = ["bundle/manifest.json", "bundle/vocab.txt", "student/config.json", "student/model.safetensors",
                  "binarizer/binarizer.json", "embeddings.npy", "notes.txt", "corpus.txt", "folder", "bundle"]


@pytest.mark.parametrize("target", _INDEX_TARGETS)
def test_index_build_never_replaces_what_it_did_not_write(target, zoo, capsys):
    _refused(["index", "build", "--codes", zoo["codes"], "--out", zoo["root"] / target], capsys, zoo["root"])


def test_index_build_never_replaces_its_own_input_or_a_link(zoo, tmp_path, capsys):
    index = tmp_path / "old.odx"
    shutil.copy(zoo["index"], index)
    codes = tmp_path / "codes.npy"
    shutil.copy(zoo["codes"], codes)
    link = tmp_path / "link.odx"
    link.symlink_to(index)
    _refused(["index", "build", "--codes", codes, "--out", codes], capsys, tmp_path)
    _refused(["index", "build", "--codes", codes, "--out", link], capsys, tmp_path, expect="symbolic link")
    assert main(["index", "build", "--codes", str(codes), "--out", str(index)]) == 0  # an earlier index: replaced
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    capsys.readouterr()
    _refused(["index", "build", "--codes", codes, "--out", notes], capsys, tmp_path)
    assert main(["index", "build", "--codes", str(codes), "--out", str(notes), "--force"]) == 0


@pytest.mark.parametrize("ids", [[2**63], [2**63 + 5, 1], [2**64 - 1], [2**64], [2**70], [-1], [-(2**63)]])
@pytest.mark.parametrize("as_array", [True, False])
def test_ids_beyond_int64_are_one_line(ids, as_array):
    from ondevice.index import HammingIndex

    index = HammingIndex(16)
    codes = np.zeros((len(ids), 2), np.uint8)
    given = np.array(ids, dtype=np.uint64 if min(ids) >= 0 and max(ids) < 2**64 else object) if as_array else ids
    with pytest.raises(OndeviceError) as e:
        index.add(codes, given)
    _one_line(e.value)
    assert len(index) == 0


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_consecutive_ids_past_the_largest_are_one_line(n):
    from ondevice.index import HammingIndex

    index = HammingIndex(16)
    index.add(np.zeros((1, 2), np.uint8), np.array([2**63 - 1]))
    with pytest.raises(OndeviceError) as e:
        index.add(np.zeros((n, 2), np.uint8))
    assert "2^63" in _one_line(e.value)
    assert len(index) == 1


@pytest.mark.parametrize("bits", [1, 4, 7, 9, 12, 60, 252, 255])
@pytest.mark.parametrize("row", [0, -1])
def test_codes_with_padding_bits_set_fail_verify(bits, row, tmp_path, capsys):
    from ondevice.index import HammingIndex

    nbytes = -(-bits // 8)
    index = HammingIndex(bits)
    index.add(np.zeros((5, nbytes), np.uint8))
    forged = index._codes.copy()
    forged[row, -1] |= np.uint8(0xFF ^ ((1 << (bits % 8)) - 1))  # every padding bit of that row
    index._codes = forged
    path = tmp_path / "forged.odx"
    index.save(path)  # a consistent file: header and checksums agree with the padded codes
    with pytest.raises(OndeviceError) as e:
        HammingIndex.load(path, verify=True)
    assert "padding" in _one_line(e.value)
    _refused(["index", "info", path, "--verify"], capsys, tmp_path, expect="padding")


@pytest.mark.parametrize("max_mb", ["300", "1024", "65536"])
def test_calibrate_is_bounded_by_the_machines_memory(max_mb, tmp_path, capsys, monkeypatch):
    import ondevice.cli.index as cli_index

    monkeypatch.setattr(cli_index, "_physical_memory", lambda: 1 << 30)  # a 1 GB machine
    _refused(["index", "calibrate", "--max-mb", max_mb, "--repeats", "2"], capsys, tmp_path, expect="--max-mb")


@pytest.mark.parametrize("nq, k, count", [(10_000, 10_000, 200), (10_000, 10_000, 10**9), (1_000, 2_000, 10**6),
                                          (101, 10_000, 10**6), (10_000, 101, 10**6)])
def test_serve_answers_are_bounded(nq, k, count):
    from ondevice.scale import serve

    body = {"queries": ["00" * 4] * nq, "k": k}
    try:
        queries, kk, _ = serve.parse_request(body, 4, count)
    except serve.TooLarge as exc:
        assert "results one answer" in _one_line(exc)
        assert nq * min(k, count) > serve.MAX_ANSWER
        return
    assert kk == min(k, count) and len(queries) * kk <= serve.MAX_ANSWER


class _Remote:
    """A Ray handle method stand-in: `.remote(...)` returns an awaitable of the call's result."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        async def run():
            return self.fn(*args)
        return run()


class _Shard:
    def __init__(self, index):
        self.search = _Remote(index.search)


class _Request:
    def __init__(self, body: bytes, length: str | None = "auto"):
        self.headers = {} if length is None else {"content-length": str(len(body)) if length == "auto" else length}
        self._body = body

    async def body(self) -> bytes:
        return self._body

    async def json(self):
        return json.loads(self._body)


def _ingress(n: int = 200):
    from ondevice.index import HammingIndex
    from ondevice.scale.serve import SearchIngress

    index = HammingIndex(32)
    index.add(np.random.default_rng(0).integers(0, 256, (n, 4), dtype=np.uint8))
    return SearchIngress(32, ["shard-0.odx"], _Shard(index), count=n)


def _call(ingress, request) -> tuple[int, dict]:
    import asyncio

    response = asyncio.run(ingress(request))
    return response.status_code, json.loads(response.body)


@pytest.mark.parametrize("body, length, status", [
    (b"x" * 100, str(17 << 20), 413), (b"x" * 100, "-5", 413), (b"x" * 100, "lots", 413),
    (b" " * (17 << 20), None, 413), (b"{not json", "auto", 400), (b"[" * 100_000, "auto", 400),
    (json.dumps({"queries": ["00" * 4] * 10_000, "k": 10_000}).encode(), "auto", 413),
    (json.dumps({"queries": ["00" * 4] * 6000, "k": 10_000}).encode(), "auto", 413),  # 6,000 x 200 (clamped)
    (json.dumps({"queries": ["zz" * 4], "k": 5}).encode(), "auto", 400),
    (json.dumps({"queries": ["00" * 4], "k": 10**12}).encode(), "auto", 400),
])
def test_serve_requests_and_answers_are_bounded_over_http(body, length, status):
    code, answer = _call(_ingress(), _Request(body, length))
    assert code == status and "\n" not in answer["error"]


@pytest.mark.parametrize("k", [200, 201, 5000, 10_000])
def test_serve_k_is_clamped_to_the_catalog(k):
    code, answer = _call(_ingress(200), _Request(json.dumps({"queries": ["00" * 4] * 3, "k": k}).encode()))
    assert code == 200 and np.array(answer["ids"]).shape == (3, 200) and min(map(min, answer["ids"])) >= 0


@pytest.mark.parametrize("argv", [
    ["pairs", "score", "--bundle", "pretrained", "--pairs", "FIFO"],
    ["binarize", "--student", "STUDENT", "--corpus", "FIFO", "--bits", "8", "--out", "OUT", "--quiet"],
])  # two (a process start costs seconds); the in-process cases above cover every reader
def test_streams_in_a_real_process_end_with_one_line(argv, zoo, tmp_path):
    """The same refusals in a separate process, killed if it outlives the bound: a FIFO nobody writes never blocks."""
    import subprocess

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    subs = {"FIFO": str(fifo), "STUDENT": str(zoo["student"]), "BINARIZER": str(zoo["binarizer"]),
            "OUT": str(tmp_path / "out")}
    res = subprocess.run([sys.executable, "-m", "ondevice", *[subs.get(a, a) for a in argv]], check=False,
                         capture_output=True, text=True, timeout=120)
    err = res.stderr.strip()
    assert res.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------- 3. graphs of allowed operators that allocate out of proportion


def _sized_graph(op: str, source: str, n: int):
    """An edit that makes `embedding` depend on a tensor that `op` (ConstantOfShape, Expand, Range, Pad) sizes from
    `source`: a constant n, the batch or token count times n, the batch squared times n, or the largest token id
    times n (a tensor value, known only when the graph runs). The tensor is summed, multiplied by 0 and added."""
    from onnx import TensorProto, helper, numpy_helper

    def edit(model):
        g = model.graph
        _rename_output(model, "embedding", "emb_0")
        i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
        g.initializer.extend([i64("z_n", [n]), i64("z_0", [0]), i64("z_1", [1]), i64("z_ax", [0]),
                              numpy_helper.from_array(np.array([1.0], np.float32), "z_one"),
                              numpy_helper.from_array(np.array(0.0, np.float32), "z_zero")])
        nodes = [helper.make_node("Shape", ["ids"], ["z_shape"])]
        if source == "const":
            nodes.append(helper.make_node("Identity", ["z_n"], ["z_count"]))
        elif source in ("batch", "tokens"):
            nodes += [helper.make_node("Gather", ["z_shape", "z_0" if source == "batch" else "z_1"], ["z_dim"]),
                      helper.make_node("Mul", ["z_dim", "z_n"], ["z_count"])]
        elif source == "square":
            nodes += [helper.make_node("Gather", ["z_shape", "z_0"], ["z_dim"]),
                      helper.make_node("Mul", ["z_dim", "z_dim"], ["z_sq"]),
                      helper.make_node("Mul", ["z_sq", "z_n"], ["z_count"])]
        else:  # "value": the largest token id of the batch
            nodes += [helper.make_node("ReduceMax", ["ids"], ["z_max"], keepdims=0),
                      helper.make_node("Unsqueeze", ["z_max", "z_ax"], ["z_max1"]),
                      helper.make_node("Mul", ["z_max1", "z_n"], ["z_count"])]
        if op == "ConstantOfShape":
            nodes.append(helper.make_node("ConstantOfShape", ["z_count"], ["z_big"],
                                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
        elif op == "Expand":
            nodes.append(helper.make_node("Expand", ["z_one", "z_count"], ["z_big"]))
        elif op == "Range":
            nodes += [helper.make_node("Squeeze", ["z_count", "z_ax"], ["z_limit"]),
                      helper.make_node("Squeeze", ["z_0", "z_ax"], ["z_start"]),
                      helper.make_node("Squeeze", ["z_1", "z_ax"], ["z_delta"]),
                      helper.make_node("Range", ["z_start", "z_limit", "z_delta"], ["z_range"]),
                      helper.make_node("Cast", ["z_range"], ["z_big"], to=TensorProto.FLOAT)]
        else:  # Pad
            nodes += [helper.make_node("Concat", ["z_0", "z_count"], ["z_pads"], axis=0),
                      helper.make_node("Pad", ["z_one", "z_pads"], ["z_big"])]
        nodes += [helper.make_node("ReduceSum", ["z_big"], ["z_sum"], keepdims=0),
                  helper.make_node("Mul", ["z_sum", "z_zero"], ["z_nothing"]),
                  helper.make_node("Add", ["emb_0", "z_nothing"], ["embedding"])]
        g.node.extend(nodes)
    return edit


_SIZED_OPS = ["ConstantOfShape", "Expand", "Range", "Pad"]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("n", [10**8, 10**12, 2**62])
@pytest.mark.parametrize("source", ["const", "batch", "tokens"])
@pytest.mark.parametrize("op", _SIZED_OPS)
def test_allowed_operators_that_allocate_without_bound_are_refused_before_they_run(op, source, n, precision, bundles,
                                                                                   tmp_path):
    """A 10 KB graph of allowed operators whose ConstantOfShape, Expand, Range or Pad sizes itself from a constant or
    from the input's shape times n: refused by the static size check, before onnxruntime sees the graph."""
    from ondevice.runtime import Bundle

    bundle = _forge(bundles[precision], tmp_path / "b", _sized_graph(op, source, n))
    before = _snapshot(bundle)
    with _time_bound(), pytest.raises(OndeviceError) as e:
        Bundle.load(bundle)
    assert f"its {op} operator allocates" in _one_line(e.value)
    assert _snapshot(bundle) == before


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("op", _SIZED_OPS)
def test_allocations_growing_faster_than_the_input_are_refused(op, precision, bundles, tmp_path):
    from ondevice.runtime import Bundle

    bundle = _forge(bundles[precision], tmp_path / "b", _sized_graph(op, "square", 64))
    with _time_bound(), pytest.raises(OndeviceError) as e:
        Bundle.load(bundle)
    assert "growing faster than its inputs" in _one_line(e.value)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand"])
@pytest.mark.parametrize("n", [10**9, 10**11])
def test_sizes_from_tensor_values_meet_the_memory_cap(op, n, precision, bundles, tmp_path, capsys):
    """A size that follows from a tensor's values (the largest token id times n) is not known before the run: the
    capped memory arena refuses it at the load probe, one line, without taking the memory."""
    bundle = _forge(bundles[precision], tmp_path / "b", _sized_graph(op, "value", n))
    err = _refused(["info", bundle, "--verify"], capsys, bundle)
    assert "GB of memory" in err


@pytest.mark.parametrize("op", _SIZED_OPS)
@pytest.mark.parametrize("source", ["const", "batch", "tokens", "value"])
def test_small_allocations_of_the_same_operators_still_load(op, source, bundles, tmp_path):
    from ondevice.runtime import Bundle

    bundle = _forge(bundles["fp32"], tmp_path / "b", _sized_graph(op, source, 3))
    assert Bundle.load(bundle).encode(["the cat sat"]).shape == (1, 8)


def test_the_shipped_bundle_passes_the_size_check():
    from ondevice.onnxproto import allocation_problem
    from ondevice.pretrained import pretrained_path

    for name in ("encoder.onnx", "pair_head.onnx"):
        assert allocation_problem((pretrained_path() / name).read_bytes()) is None


@pytest.mark.parametrize("cmd", ["info", "index"])
@pytest.mark.parametrize("op", _SIZED_OPS)
def test_sized_graphs_are_one_line_from_the_command_line(op, cmd, bundles, zoo, tmp_path, capsys):
    bundle = _forge(bundles["fp32"], tmp_path / "b", _sized_graph(op, "batch", 10**10))
    argv = (["info", bundle, "--verify"] if cmd == "info" else
            ["index", "build", "--bundle", bundle, "--corpus", zoo["corpus"], "--out", tmp_path / "x.odx"])
    assert "allocates" in _refused(argv, capsys, bundle, zoo["root"])
    assert not (tmp_path / "x.odx").exists()


def test_a_slow_load_probe_is_stopped(bundles, tmp_path, monkeypatch):
    """The load probe runs under a time limit: a graph that takes longer (here: any, with the limit at 0 s) is one line."""
    from ondevice import runtime

    monkeypatch.setattr(runtime, "PROBE_SECONDS", 0.0)
    with _time_bound(), pytest.raises(OndeviceError) as e:
        runtime.Bundle.load(bundles["fp32"])
    assert "ran over" in _one_line(e.value) or "failed to run" in str(e.value)


# ------------------------------------------------------ 6. caches of older versions: no checksums, a done prefix


_OLD_DAMAGE = ["zero-row", "zero-chunk", "nan-row", "inf-row", "scaled-row", "all-zero"]


def _old_damage(vectors: np.ndarray, how: str, rng: np.random.Generator) -> None:
    row = int(rng.integers(len(vectors)))
    if how == "zero-row":
        vectors[row] = 0
    elif how == "zero-chunk":
        vectors[16:32] = 0
    elif how == "nan-row":
        vectors[row, 0] = np.nan
    elif how == "inf-row":
        vectors[row, -1] = np.inf
    elif how == "scaled-row":
        vectors[row] *= 3.0
    else:
        vectors[:] = 0


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("how", _OLD_DAMAGE)
@pytest.mark.parametrize("layout", ["done-prefix", "no-sums"])
def test_older_caches_without_checksums_are_checked_before_use(layout, how, seed, tmp_path, capsys):
    """A cache of an earlier version (state.json with a finished prefix `done`, or chunks without checksums) whose
    rows were damaged: the damaged chunks are computed again, never returned."""
    texts = _texts(40)
    _fill(tmp_path, texts)
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    vectors = np.load(folder / "vectors.npy", mmap_mode="r+")
    _old_damage(vectors, how, np.random.default_rng(seed))
    vectors.flush()
    del vectors
    state = json.loads((folder / "state.json").read_text())
    state = {"chunk": 16, "done": 40, "n": 40} if layout == "done-prefix" else {k: v for k, v in state.items() if k != "sums"}
    (folder / "state.json").write_text(json.dumps(state))
    calls: list[str] = []
    with _time_bound():
        got, _ = _fill(tmp_path, texts, calls)
    assert calls, "damaged rows of an older cache were used without recomputing them"
    norms = np.linalg.norm(np.asarray(got), axis=1)
    assert np.isfinite(np.asarray(got)).all() and np.allclose(norms, 1, atol=1e-3)


@pytest.mark.parametrize("how", _OLD_DAMAGE[:4])
def test_a_cache_opened_without_a_check_still_refuses_unchecked_zero_rows(how, tmp_path):
    """The Ray labeller's cache (and any caller that names no check): an older chunk without a checksum holding zero
    or non-finite rows is pending again, not done."""
    from ondevice.vector_cache import VectorCache

    _fill(tmp_path, _texts(40))
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    vectors = np.load(folder / "vectors.npy", mmap_mode="r+")
    _old_damage(vectors, how, np.random.default_rng(0))
    vectors.flush()
    del vectors
    state = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "sums"}))
    assert VectorCache(folder, 40, 8, 16, {}).pending()


# -------------------------------------------------------------- 7. eval reports checked whole before merging


def _report() -> dict:
    view = {"method": "float", "dim": 8, "binary": False, "bytes_per_sentence": 32, "model_bytes": 100,
            "encoder": "a", "sentences_per_second": None}
    return {"tasks": ["stsb-dev", "mrpc", "retrieval", "trec"], "skipped": {}, "total_seconds": 1.0, "created": "x",
            "views": {"a": view, "a/itq-8": {**view, "method": "itq", "binary": True, "bytes_per_sentence": 1}},
            "results": {"a": {"stsb-dev": {"spearman": 50.0}, "mrpc": {"acc": 60.0, "f1": 70.0},
                              "retrieval": {"k": 10, "recall_vs_float": None}, "trec": {"acc": 40.0}},
                        "a/itq-8": {"stsb-dev": {"spearman": 40.0}}}}


def _set(path: str, value):
    def edit(report: dict) -> None:
        *parents, last = path.split(".")
        node = report
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


_BAD_REPORTS = {
    "task-list": _set("tasks", [["stsb-dev"]]), "task-unknown": _set("tasks", ["stsb-dev", "nosuch"]),
    "task-number": _set("tasks", [5]), "total-text": _set("total_seconds", "abc"), "total-bool": _set("total_seconds", True),
    "versions-list": _set("versions", [1, 2]), "protocol-text": _set("protocol", "x"), "created-number": _set("created", 5),
    "commit-list": _set("commit", ["x"]), "skipped-list": _set("skipped", {"stsb-dev": ["a"]}),
    "dim-text": _set("views.a.dim", "eight"), "dim-negative": _set("views.a.dim", -1), "dim-bool": _set("views.a.dim", True),
    "bytes-null": _set("views.a.bytes_per_sentence", None), "size-text": _set("views.a.model_bytes", "1 MB"),
    "method-number": _set("views.a.method", 5), "binary-text": _set("views.a.binary", "yes"),
    "speed-text": _set("views.a.sentences_per_second", "fast"), "encoder-number": _set("views.a/itq-8.encoder", 5),
    "result-number": _set("results.a.stsb-dev", 5), "spearman-text": _set("results.a.stsb-dev.spearman", "high"),
    "spearman-missing": _set("results.a.stsb-dev", {"pearson": 1.0}), "f1-list": _set("results.a.mrpc.f1", [1]),
    "acc-bool": _set("results.a.trec.acc", True), "k-text": _set("results.a.retrieval.k", "ten"),
    "recall-text": _set("results.a.retrieval.recall_vs_float", "x"), "reference-number": _set("results.a.retrieval.reference", 3),
    "results-list": _set("results.a", [1]),
}


@pytest.mark.parametrize("case", sorted(_BAD_REPORTS))
def test_merge_refuses_a_report_of_wrong_types_before_writing_anything(case, tmp_path, capsys):
    report = _report()
    _BAD_REPORTS[case](report)
    src = tmp_path / "in.json"
    src.write_text(json.dumps(report))
    err = _refused(["eval", "--merge", src, "--out", tmp_path / "out"], capsys, tmp_path)
    assert "is not a report.json of `ondevice eval`" in err
    assert not (tmp_path / "out").exists()


def test_a_sound_report_still_merges_with_plots(tmp_path, capsys):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(_report()))
    assert main(["eval", "--merge", str(src), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.md").is_file()


# ------------------------------------------------------------- 7. text that is valid JSON but not valid Unicode


_SURROGATE_JSON = ['{"a": "\\udcff"}', '{"\\udcff": 1}', '{"a": {"b": ["ok", "x\\ud800y"]}}', '{"a": "\\udfff\\udfff"}',
                   '{"eval": {"note": "caf\\udce9"}}']


@pytest.mark.parametrize("text", _SURROGATE_JSON)
def test_an_eval_summary_with_lone_surrogates_is_refused_before_any_work(text, zoo, tmp_path, capsys):
    src = tmp_path / "eval.json"
    src.write_text(text)
    err = _refused(["export", "--student", zoo["student"], "--binarizer", zoo["binarizer"], "--out", tmp_path / "out",
                    "--eval", src], capsys, zoo["root"])
    assert "not valid Unicode" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["view", "reason", "task-result"])
def test_a_report_with_lone_surrogates_is_refused_by_merge(where, tmp_path, capsys):
    report = _report()
    if where == "view":
        report["views"]["a\udcff"] = report["views"].pop("a")
        report["results"]["a\udcff"] = report["results"].pop("a")
    elif where == "reason":
        report["skipped"] = {"trec": "no data \udcff"}
    else:
        report["results"]["a"]["retrieval"]["reference"] = "t\udcff"
    src = tmp_path / "in.json"
    src.write_text(json.dumps(report))  # ensure_ascii escapes the surrogate: valid JSON
    assert "not valid Unicode" in _refused(["eval", "--merge", src, "--out", tmp_path / "out"], capsys, tmp_path)


@pytest.mark.parametrize("text", ["\udcff", "a\ud800b", "ok \udc80\udc81"])
def test_write_text_refuses_text_that_is_not_unicode_and_writes_nothing(text, tmp_path):
    from ondevice.io import write_json, write_text

    (tmp_path / "old.txt").write_text("old\n")
    for write, value in ((write_text, text), (write_json, {"k": text})):
        with pytest.raises(OndeviceError) as e:
            write(tmp_path / "old.txt", value)
        assert "not valid Unicode" in _one_line(e.value)
    assert (tmp_path / "old.txt").read_text() == "old\n" and len(list(tmp_path.iterdir())) == 1


# ------------------------------------------------------------------- 7. SQLite catalogs checked field by field


_CATALOG_DAMAGE = {
    "encoder-keys": "UPDATE ondevice_catalog SET value = '{\"x\": 1}' WHERE key = 'encoder'",
    "encoder-list": "UPDATE ondevice_catalog SET value = '[1]' WHERE key = 'encoder'",
    "encoder-number-field": "UPDATE ondevice_catalog SET value = '{\"precision\": 5}' WHERE key = 'encoder'",
    "encoder-text": "UPDATE ondevice_catalog SET value = '\"abc\"' WHERE key = 'encoder'",
    "rev-text": "UPDATE ondevice_catalog SET value = 'abc' WHERE key = 'rev'",
    "code-integer": "UPDATE items SET code = 5 WHERE id = 1",
    "code-text": "UPDATE items SET code = 'ab' WHERE id = 1",
    "code-real": "UPDATE items SET code = 1.5 WHERE id = 1",
    "code-short": "UPDATE items SET code = x'00' WHERE id = 1",
    "tags-text": "UPDATE items SET tags = 'abc' WHERE id = 1",
    "tags-real": "UPDATE items SET tags = 1.5 WHERE id = 1",
    "category-blob": "UPDATE items SET category = x'00' WHERE id = 1",
    "category-huge": "UPDATE items SET category = 99999999999 WHERE id = 1",
    "id-negative": "UPDATE items SET id = -5 WHERE id = 1",
}


@pytest.mark.parametrize("case", sorted(_CATALOG_DAMAGE))
def test_a_damaged_sqlite_catalog_is_one_line(case, tmp_path):
    import sqlite3

    from ondevice.sqlite_catalog import Catalog

    path = tmp_path / "c.db"
    with Catalog.create(path, bits=16) as catalog:
        catalog.add(np.zeros((3, 2), np.uint8), np.arange(3))
    db = sqlite3.connect(path)
    db.execute(_CATALOG_DAMAGE[case])
    db.commit()
    db.close()
    with _time_bound(), pytest.raises(OndeviceError) as e, Catalog.open(path) as catalog:
        catalog.to_index()
    _one_line(e.value)


# ------------------------------------------------- 7. padding bits of a memory-mapped index, at the first search


@pytest.mark.parametrize("search", ["knn", "range", "filtered"])
@pytest.mark.parametrize("bits", [1, 4, 7, 9, 12, 60, 252, 255])
@pytest.mark.parametrize("row", [0, -1])
def test_padding_bits_of_a_mapped_index_are_found_at_the_first_search(bits, row, search, tmp_path):
    from ondevice.index import Filter, HammingIndex

    nbytes = -(-bits // 8)
    index = HammingIndex(bits)
    index.add(np.zeros((5, nbytes), np.uint8), tags=np.zeros(5, np.uint64))
    forged = index._codes.copy()
    forged[row, -1] |= np.uint8(0xFF ^ ((1 << (bits % 8)) - 1))
    index._codes = forged
    index.save(tmp_path / "forged.odx")
    loaded = HammingIndex.load(tmp_path / "forged.odx")  # memory-mapped: nothing read yet
    query = np.zeros((1, nbytes), np.uint8)
    with _time_bound(), pytest.raises(OndeviceError) as e:
        if search == "range":
            loaded.range_search(query, 1)
        else:
            loaded.search(query, 3, filter=Filter(tags_any=0) if search == "filtered" else None)
    assert "padding" in _one_line(e.value)


# ----------------------------------------------------- 5. flags a method ignores are still range-checked


_IGNORED = [("--epochs", "-5"), ("--epochs", "0"), ("--batch-size", "0"), ("--batch-size", "-1"), ("--sp-triplets", "0"),
            ("--holdout", "-1"), ("--holdout", "0"), ("--holdout", "0.9"), ("--sp-epochs", "-1"),
            ("--whiten-variance", "0"), ("--whiten-variance", "-1"), ("--whiten-variance", "1.5")]


@pytest.mark.parametrize("method", ["random", "pca", "itq"])
@pytest.mark.parametrize("option, value", _IGNORED)
def test_flags_the_method_ignores_are_range_checked_too(option, value, method, zoo, tmp_path, capsys):
    err = _refused(["binarize", "--embeddings", zoo["embeddings"], "--method", method, "--bits", "8", option, value,
                    "--out", tmp_path / "o", "--quiet"], capsys, zoo["root"])
    assert option in err and not (tmp_path / "o").exists()


# ------------------------------------------------------ 2. .npy inputs that are pipes or devices name what they are


@pytest.mark.parametrize("kind", ["zero", "urandom", "fifo", "null"])
@pytest.mark.parametrize("argv", [["index", "build", "--codes", "SRC", "--out", "OUT"],
                                  ["index", "build", "--codes", "CODES", "--ids", "SRC", "--out", "OUT"],
                                  ["index", "search", "INDEX", "--queries", "SRC"]], ids=["codes", "ids", "queries"])
def test_npy_inputs_that_are_streams_say_so(argv, kind, zoo, tmp_path, capsys):
    src = _special(kind, tmp_path)
    subs = {"SRC": src, "OUT": tmp_path / "out.odx", "CODES": zoo["codes"], "INDEX": zoo["index"]}
    err = _refused([subs.get(a, a) for a in argv], capsys, zoo["root"])
    assert "not a regular file" in err and not (tmp_path / "out.odx").exists()
