"""`evaluate`, `sts_spearman`, the encodings cache and `ondevice eval` end to end on a tiny data folder made here."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from ondevice.bits import pack
from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.eval import DEFAULT_TASKS, evaluate, sts_spearman, write_report
from ondevice.eval.cache import EncodingCache
from ondevice.eval.views import parse_encoder_spec

POS = ["good", "great", "fine", "happy", "love"]
NEG = ["bad", "awful", "poor", "sad", "hate"]
FILL = ["the", "a", "movie", "phone", "story", "it", "was", "is", "very", "quite"]


class HashEncoder:
    """Deterministic fake model: a sentence is the mean of per-word hash-seeded 32-d vectors."""

    def __init__(self, dim: int = 32):
        self.dim = dim
        self.calls = 0

    def _word(self, w: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(w.lower().encode()).digest()[:8], "little")
        return np.random.default_rng(seed).normal(size=self.dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.split()
            if words:
                out[i] = np.mean([self._word(w) for w in words], axis=0)
        return out


class CodeEncoder(HashEncoder):
    """Fake encoder that returns packed codes (sign bits of the hash vectors)."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return pack(super().encode(texts) > 0)


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(FILL) if rng.random() < 0.5 else rng.choice(words) for _ in range(rng.randint(3, 7)))


def make_data(root: Path, n: int = 40) -> Path:
    """A miniature copy of every data set, in each set's real format (quirks included)."""
    rng = random.Random(0)
    w = lambda rel, text, enc="utf-8": (root / rel).parent.mkdir(parents=True, exist_ok=True) or (root / rel).write_bytes(text.encode(enc))

    def pairs(k: int) -> list[tuple[str, str, float]]:
        out = []
        for _ in range(k):
            a = _sentence(rng, POS + NEG)
            keep = rng.random()
            b = " ".join(x if rng.random() < keep else rng.choice(FILL) for x in a.split())
            out.append((a, b, round(5 * keep, 2)))
        return out

    for split in ("dev", "test"):
        rows = [f"main-captions\tMSRvid\t2012\t{i:04d}\t{s:.3f}\t{a}\t{b}" + ("\tx\ty" if i % 5 == 0 else "")
                for i, (a, b, s) in enumerate(pairs(n))]
        w(f"stsb/sts-{split}.csv", "\n".join(rows) + "\n")
    w("sick/SICK_trial.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
      + "".join(f"{i}\t{a}\t{b}\t{1 + 0.8 * s:.1f}\tNEUTRAL\n" for i, (a, b, s) in enumerate(pairs(n))))
    w("mrpc/msr_paraphrase_test.txt", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
      + "".join(f"{int(s > 2.5)}\t{i}\t{i + 1}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(pairs(n))))
    w("qqp/qqp_glue_train_subset_23k.tsv", "".join(f"{i}\t{i}\t{i + 1}\t{a}\t{b}\t{int(s > 2.5)}\n" for i, (a, b, s) in enumerate(pairs(n))))
    for task, (p, q) in {"MR": ("rt-polarity.pos", "rt-polarity.neg"), "CR": ("custrev.pos", "custrev.neg"),
                         "SUBJ": ("subj.subjective", "subj.objective"), "MPQA": ("mpqa.pos", "mpqa.neg")}.items():
        w(f"senteval_classification/{task}/{p}", "\n".join(_sentence(rng, POS) for _ in range(n)) + "\n\n")
        w(f"senteval_classification/{task}/{q}", "\n".join(_sentence(rng, NEG) for _ in range(n)) + "\n")
    for split, k in (("train", 3 * n), ("dev", n), ("test", n)):
        lab = [rng.randint(0, 1) for _ in range(k)]
        w(f"senteval_classification/SST/binary/sentiment-{split}",
          "".join(f"{_sentence(rng, POS if y else NEG)} \t{y}\n" for y in lab))
        w(f"senteval_classification/SST/fine/sentiment-{split}",
          "".join(f"{4 * y} {_sentence(rng, POS if y else NEG)}\n" for y in lab))
    classes = ["ABBR:exp", "DESC:def", "ENTY:animal", "HUM:ind", "LOC:city", "NUM:date"]
    cue = {c: c.split(":")[1] for c in classes}
    for split, name, k, enc in (("train", "train_5500.label", 4 * n, "latin-1"), ("test", "TREC_10.label", n, "ascii")):
        lines = [f"{c} What {cue[c]} is {rng.choice(FILL)} ?" for c in (classes * k)[:k]]
        if split == "train":
            lines[0] = lines[0].replace("What", "Qu\xe9")  # a Latin-1 byte, as in the real train_5500.label
        w(f"senteval_classification/TREC/{name}", "\n".join(lines) + "\n", enc)
    for split in ("dev", "test"):
        s1 = [_sentence(rng, POS + NEG) for _ in range(n)]
        w(f"snli/s1.{split}", "".join(f"{s} \n" for s in s1))
        w(f"snli/s2.{split}", "".join(f"{_sentence(rng, POS + NEG)} \n" for _ in s1))
        w(f"snli/labels.{split}", "neutral\n" * n)
    (root / "wiki").mkdir(parents=True, exist_ok=True)
    with gzip.open(root / "wiki" / "wiki_en_sentences_1m.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(_sentence(rng, POS + NEG + FILL) for _ in range(200)) + "\n")
    return root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"))


def test_sts_spearman_matches_manual(data_dir: Path) -> None:
    from scipy.stats import spearmanr

    from ondevice.eval.data import read_stsb

    enc = HashEncoder()
    pairs = read_stsb(data_dir, "test")
    a, b = enc.encode(pairs.a).astype(np.float64), enc.encode(pairs.b).astype(np.float64)
    cos = np.round((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), 12)  # ties stay ties
    assert sts_spearman(enc, data_dir) == pytest.approx(100 * spearmanr(cos, pairs.gold).statistic, abs=1e-6)
    codes = CodeEncoder()
    ca, cb = codes.encode(pairs.a), codes.encode(pairs.b)
    ham = np.bitwise_count(ca ^ cb).sum(1).astype(np.int64)
    assert sts_spearman(codes, data_dir) == pytest.approx(100 * spearmanr(-ham, pairs.gold).statistic, abs=1e-6)
    assert np.isfinite(sts_spearman(enc, data_dir, task="sick", split="trial"))
    with pytest.raises(OndeviceError, match="unknown STS task"):
        sts_spearman(enc, data_dir, task="sts12")


def test_evaluate_all_tasks_with_report(data_dir: Path, tmp_path: Path) -> None:
    report = evaluate({"hash": HashEncoder()}, tasks=list(DEFAULT_TASKS) + ["qqp", "sst5"],
                      data_dir=data_dir, queries=20, measure_speed=True, log=lambda m: None)
    codes = evaluate({"bits": CodeEncoder()}, tasks=["stsb-test", "mrpc", "mr", "trec", "retrieval"],
                     data_dir=data_dir, queries=20, measure_speed=False, log=lambda m: None)
    assert report["skipped"] == {} and codes["skipped"] == {}
    res = report["results"]
    assert set(res["hash"]) == set(DEFAULT_TASKS) | {"qqp", "sst5"}
    assert codes["results"]["bits"]["mr"]["acc"] > 70
    assert res["hash"]["stsb-test"]["spearman"] > 30  # word overlap drives the fake gold
    assert res["hash"]["mr"]["acc"] > 70 and res["hash"]["sst2"]["acc"] > 70
    assert codes["views"]["bits"]["binary"] and codes["views"]["bits"]["dim"] == 32
    assert report["views"]["hash"]["bytes_per_sentence"] == 128
    assert report["views"]["hash"]["sentences_per_second"] > 0
    assert set(report["data_files_sha256"]["stsb-test"]) == {"stsb/sts-test.csv"}
    assert "numpy" in report["versions"]
    assert len(report["commit"].split("+")[0]) == 40 and report["cpu_model"]  # the run says what code and machine
    paths = write_report(report, tmp_path / "out", command="ondevice eval --fake", plots=False)
    assert {p.name for p in paths} == {"report.json", "report.md"}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| hash | float32 × 32 |" in md and "ondevice eval --fake" in md and f"at commit {report['commit']}" in md
    assert json.loads((tmp_path / "out" / "report.json").read_text())["results"]["hash"]["mrpc"]["n"] == 40


def test_missing_set_is_skipped(data_dir: Path, tmp_path: Path) -> None:
    import shutil

    partial = tmp_path / "partial"
    shutil.copytree(data_dir, partial)
    shutil.rmtree(partial / "mrpc")
    messages: list[str] = []
    report = evaluate({"hash": HashEncoder()}, tasks=["stsb-test", "mrpc"], data_dir=partial,
                      measure_speed=False, log=messages.append)
    assert "mrpc" in report["skipped"] and "not found" in report["skipped"]["mrpc"]
    assert any("skipping mrpc" in m for m in messages)
    assert "stsb-test" in report["results"]["hash"]


def test_encoding_cache_hits(tmp_path: Path) -> None:
    cache = EncodingCache(tmp_path)
    enc = HashEncoder()
    texts = ["a b", "c d", "a b"]
    first = cache.get({"kind": "fake"}, "float", texts, enc.encode)
    again = cache.get({"kind": "fake"}, "float", texts, enc.encode)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first[0], first[2])
    assert enc.calls == 1 and cache.hits == 1
    assert list(tmp_path.rglob("*.npy")) and not list(tmp_path.rglob("*.pkl"))
    cache.get({"kind": "other"}, "float", texts, enc.encode)
    assert enc.calls == 2


def test_encoding_cache_never_keeps_nan_rows(tmp_path: Path) -> None:
    cache = EncodingCache(tmp_path)
    texts = ["a b", "c d"]
    with pytest.raises(OndeviceError, match="NaN or inf"):
        cache.get({"kind": "broken"}, "float", texts, lambda t: np.full((len(t), 3), np.nan, np.float32))
    good = cache.get({"kind": "broken"}, "float", texts, lambda t: np.ones((len(t), 3), np.float32))
    np.testing.assert_array_equal(good, np.ones((2, 3), np.float32))  # recomputed, not read back as NaN
    codes = cache.get({"kind": "codes"}, "codes", texts, lambda t: np.full((len(t), 2), 255, np.uint8))
    assert codes.dtype == np.uint8


def test_parse_encoder_spec() -> None:
    s = parse_encoder_spec("t=teacher:/models/x:cls+random:256+binarizer:/b")
    assert (s.name, s.kind, s.arg, s.pooling, s.fit, s.binarizer_dirs) == ("t", "teacher", "/models/x", "cls", (("random", 256),), ("/b",))
    assert parse_encoder_spec("teacher").arg == "all-MiniLM-L6-v2"
    assert parse_encoder_spec("glove").name == "glove"
    for bad, msg in (("wat:1", "unknown encoder kind"), ("student", "needs a path"), ("glove+random:x", "cannot read")):
        with pytest.raises(OndeviceError, match=msg):
            parse_encoder_spec(bad)


def test_cli_end_to_end_glove_file_with_fitted_codes(data_dir: Path, tmp_path: Path, tiny_word_vectors: Path,
                                                      capsys) -> None:
    pytest.importorskip("gensim")
    out = tmp_path / "report"
    vec = tmp_path / "vectors.txt"  # the conftest words plus the fixture's words
    rng = np.random.default_rng(1)
    extra = [w + " " + " ".join(f"{x:.4f}" for x in rng.normal(size=8)) for w in POS + NEG + FILL]
    vec.write_text(tiny_word_vectors.read_text() + "\n".join(extra) + "\n")
    argv = ["eval", "--data", str(data_dir), "--encoder", f"wv=glove:{vec}+random:64+pca:4",
            "--tasks", "stsb-test,mrpc,retrieval", "--queries", "10", "--out", str(out), "--fit-sentences", "100"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["results"]) == {"wv", "wv/random-64", "wv/pca-4"}
    assert report["results"]["wv/random-64"]["retrieval"]["recall_vs_float"] is not None
    for png in ("quality_vs_bits.png", "quality_vs_speed.png", "quality_vs_size.png"):
        assert (out / png).stat().st_size > 1000
    assert "| wv/random-64 | random 64 bits | 8 |" in capsys.readouterr().out
    assert main(argv + ["--no-plots", "--no-speed"]) == 0  # second run: every float encoding comes from the cache
    assert json.loads((out / "report.json").read_text())["cache"]["misses"] == 0


@pytest.mark.parametrize("argv, message", [
    (["--data", "/nonexistent/data"], "data folder not found"),
    (["--tasks", "stsb-test,nope"], "unknown task"),
    (["--encoder", "wat=unknown"], "unknown encoder kind"),
    (["--encoder", "student:/nonexistent/student"], "not a student dir"),
    (["--encoder", "a=glove:/nonexistent.txt"], "word vectors not found"),
    (["--queries", "0"], "--queries must be >= 1"),
])
def test_cli_errors(argv: list[str], message: str, data_dir: Path, tmp_path: Path, capsys) -> None:
    full = ["eval", "--out", str(tmp_path / "o")] + (argv if "--data" in argv else ["--data", str(data_dir)] + argv)
    assert main(full) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_bad_data_dir_without_sets(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["eval", "--data", str(tmp_path / "empty"), "--encoder", "glove"]) == 2
    assert "holds none of the benchmark folders" in capsys.readouterr().err


def test_encoding_cache_resumes_long_lists_by_chunk(tmp_path: Path) -> None:
    enc = HashEncoder()
    texts = [f"w{i} x" for i in range(25)]
    calls: list[int] = []

    def flaky(batch: list[str]) -> np.ndarray:
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt  # interrupted in the third piece
        return enc.encode(batch)

    cache = EncodingCache(tmp_path, chunk=10)
    with pytest.raises(KeyboardInterrupt):
        cache.get({"kind": "fake"}, "float", texts, flaky)
    fresh = HashEncoder()
    out = cache.get({"kind": "fake"}, "float", texts, fresh.encode)  # the first two pieces come from disk
    np.testing.assert_array_equal(out, HashEncoder().encode(texts))
    assert fresh.calls == 1  # only the unfinished third chunk is encoded again


def test_student_binarizer_and_bundle_views_agree(data_dir: Path, tmp_path: Path) -> None:
    """A student + saved binarizer and the bundle exported from them give the same numbers."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from ondevice.export.bundle import export

    from ondevice.binarize import Binarizer
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    vocab = [PAD, UNK, *sorted(set(POS + NEG + FILL))]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=8, hidden_size=6, pooling="mean", output_dim=16, max_tokens=24)
    emb = np.random.default_rng(0).normal(0, 0.7, (len(vocab), 8)).astype(np.float32)
    student = Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=24), emb, seed=0)
    student.save(tmp_path / "student")
    binarizer = Binarizer.fit(student.encode(POS + NEG + FILL), "random", 24, seed=0)
    binarizer.save(tmp_path / "bin")
    export(student, binarizer, tmp_path / "bundle")
    (tmp_path / "elsewhere.bin").write_bytes(b"not the artifact's")
    for folder in ("bundle", "bin"):  # a link beside the artifact's files is neither read nor part of its identity
        (tmp_path / folder / "extra.bin").symlink_to(tmp_path / "elsewhere.bin")
    report = evaluate({"s": f"student:{tmp_path / 'student'}+binarizer:{tmp_path / 'bin'}", "b": f"bundle:{tmp_path / 'bundle'}"},
                      tasks=["stsb-test", "retrieval"], data_dir=data_dir, queries=20, measure_speed=False,
                      cache_root=tmp_path / "cache", log=lambda m: None)
    res = report["results"]
    assert set(res) == {"s", "s/random-24", "b", "b/codes-24"}
    assert res["b"]["stsb-test"]["spearman"] == pytest.approx(res["s"]["stsb-test"]["spearman"], abs=0.5)
    assert res["b/codes-24"]["stsb-test"]["spearman"] == pytest.approx(res["s/random-24"]["stsb-test"]["spearman"], abs=2)
    assert report["views"]["b/codes-24"]["bytes_per_sentence"] == 3
    assert report["views"]["s/random-24"]["identity"]["binarizer"]["files"]["binarizer.json"]
    assert "extra.bin" not in report["views"]["s/random-24"]["identity"]["binarizer"]["files"]
    bundle_files = report["views"]["b"]["identity"]["files"]
    assert "encoder.onnx" in bundle_files and "extra.bin" not in bundle_files


def test_merge_reports(data_dir: Path, tmp_path: Path) -> None:
    a = evaluate({"hash": HashEncoder()}, tasks=["stsb-test"], data_dir=data_dir, measure_speed=False, log=lambda m: None)
    b = evaluate({"bits": CodeEncoder(), "hash": HashEncoder()}, tasks=["sick-r", "mrpc"], data_dir=data_dir,
                 measure_speed=False, log=lambda m: None)
    for name, rep in (("a", a), ("b", b)):
        write_report(rep, tmp_path / name, plots=False)
    out = tmp_path / "merged"
    assert main(["eval", "--merge", str(tmp_path / "a" / "report.json"), str(tmp_path / "b" / "report.json"),
                 "--out", str(out), "--no-plots"]) == 0
    merged = json.loads((out / "report.json").read_text())
    assert set(merged["views"]) == {"hash", "bits"} and merged["tasks"] == ["stsb-test", "sick-r", "mrpc"]
    assert set(merged["results"]["hash"]) == {"stsb-test", "sick-r", "mrpc"}  # per-task union for one view
    assert "stsb-test" not in merged["results"]["bits"] and "| hash |" in (out / "report.md").read_text()


class _SlowBundle:
    """A bundle runtime that costs 0.2 ms per sentence for floats+codes (one pass) and for codes alone."""

    bits = 16

    def __init__(self) -> None:
        self.code_rows = 0

    def embed(self, texts):
        import time

        time.sleep(2e-4 * len(texts))
        return np.zeros((len(texts), 4), np.float32), np.zeros((len(texts), 2), np.uint8)

    def codes(self, texts):
        self.code_rows += len(texts)
        return self.embed(texts)[1]


def test_bundle_codes_view_speed_times_the_graph(tmp_path: Path) -> None:
    """The codes view's sentences/s runs the bundle again: codes kept from the float pass made it ~1e8/s."""
    from ondevice.eval.encoders import BundleEncoder
    from ondevice.eval.runner import _measure_speed
    from ondevice.eval.views import BundleCodeView, FloatView

    enc = object.__new__(BundleEncoder)  # a real BundleEncoder around a timed stand-in for the runtime
    enc._bundle, enc._last, enc.bits = _SlowBundle(), None, 16
    floats = FloatView("b", enc, EncodingCache(tmp_path / "cache"))
    sample = [f"sentence {i}" for i in range(200)]
    speed = _measure_speed([floats, BundleCodeView("b/codes-16", floats)], sample, log=lambda m: None)
    assert enc._bundle.code_rows == 16 + 200  # warm-up and the timed pass both ran the graph
    assert 0 < speed["b/codes-16"] < 3 * speed["b"]  # both ~5,000/s: one pass of the same graph each
    assert enc.codes(sample) is enc._last[1]  # outside speed runs the codes of the float pass are still reused


def test_merge_of_a_file_that_is_not_a_report_is_one_line(tmp_path: Path, capsys) -> None:
    """`eval --merge` of valid JSON that is no report (a binarizer.json, a list): the file and what it lacks."""
    from ondevice.eval.report import merge_reports

    (tmp_path / "binarizer.json").write_text('{"method": "random", "bits": 8}')
    (tmp_path / "list.json").write_text("[1]")
    for name, expected in (("binarizer.json", "no 'tasks' list"), ("list.json", "JSON list, not an object")):
        assert main(["eval", "--merge", str(tmp_path / name), "--out", str(tmp_path / "r"), "--no-plots"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{name} is not a report.json" in err and expected in err, err
    with pytest.raises(OndeviceError, match="report 1 is not a report.json .*lacks"):
        merge_reports([{"tasks": [], "views": {"x": {}}, "results": {}, "skipped": {}}])


def test_an_unknown_bundle_precision_is_named(tmp_path: Path) -> None:
    """bundle:DIR:int4 is a typo of the precision, not a folder called "DIR:int4" that does not exist."""
    (tmp_path / "b").mkdir()
    with pytest.raises(OndeviceError, match="unknown precision 'int4'; use bundle:DIR"):
        parse_encoder_spec(f"bundle:{tmp_path / 'b'}:int4")
    assert parse_encoder_spec(f"bundle:{tmp_path / 'b'}:fp32").precision == "fp32"
    assert parse_encoder_spec("bundle:pretrained:default").arg == "pretrained:default"  # a name, not a precision
