"""`ondevice demo` end to end on a tiny slice of the real corpus, with the packaged teacher (slow)."""

from __future__ import annotations

import json

import pytest

from ondevice.cli import main


@pytest.mark.slow
def test_demo_runs_the_whole_pipeline_and_reruns_from_its_outputs(shared_data, slow_cache, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    argv = ["demo", "--data", str(shared_data), "--sentences", "300", "--epochs", "1", "--bits", "64",
            "--catalog", "200", "--out", str(tmp_path / "demo"), "--results-dir", str(tmp_path / "results"),
            "--query", "a football club", "--query", "the river", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for expected in ("held-out mean cosine", "exported the int8 bundle", "indexed 200 Wikipedia sentences",
                     "query: a football club", "bits apart:", "STS-B test Spearman x100: teacher 82.03"):
        assert expected in out
    from ondevice import pretrained

    shipped = pretrained.DEFAULT in pretrained.names()  # the shipped bundle answers the same queries first
    assert ("the pretrained bundle shipped in the package" in out) == shipped
    if shipped:  # its pair head answers too: the paraphrase is a duplicate, the other question is not
        assert "duplicate: How do I reset my phone? | How can I factory-reset my phone?" in out
        assert "different: How do I reset my phone? | Which phone has the best camera?" in out
    assert out.count("bits apart:") == 2 * 3 * (2 if shipped else 1)  # k = 3 neighbours per query
    for name in ("student/model.safetensors", "binarizer-ae-sp-64/binarizer.json", "bundle-int8/manifest.json"):
        assert (tmp_path / "demo" / name).is_file()
    (saved,) = (tmp_path / "results").glob("demo-*.json")
    blob = json.loads(saved.read_text())
    assert blob["meta"]["commit"] and all(line in out for line in blob["results"]["lines"])
    assert abs(blob["results"]["scores"]["teacher"] - 82.03) < 0.1 and 0 < blob["results"]["scores"]["student"] < 82
    assert main(argv) == 0  # a rerun reuses the student, binarizer and bundle
    assert "STS-B test Spearman" in capsys.readouterr().out


def test_demo_without_data_is_one_line(tmp_path, capsys):
    assert main(["demo", "--data", str(tmp_path), "--corpus", str(tmp_path / "none.txt")]) == 2
    err = capsys.readouterr().err
    assert "demo corpus not found" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, expected", [
    (["--catalog", "0"], "--catalog"), (["--catalog", "-1"], "--catalog"), (["--sentences", "0"], "--sentences"),
    (["--epochs", "0"], "--epochs"), (["--bits", "0"], "--bits"), (["--bits", "0", "--teacher-backend", "torch"], "--bits"),
    (["--method", "foo"], "--method"), (["--out", "FILE"], "is a file, not a directory"),
    (["--results-dir", "FILE"], "--results-dir"),
])
def test_demo_settings_are_checked_before_any_work(tmp_path, capsys, monkeypatch, extra, expected):
    """Bad numbers and an --out or --results-dir that is a file: one line, before the pretrained model, the teacher
    or any training starts (the demo's steps would fail on first use; here none may run)."""
    import ondevice.demo as demo_mod

    def no_work(*args, **kwargs):
        raise AssertionError("the demo started work before checking its settings")

    monkeypatch.setattr(demo_mod, "_pretrained_first", no_work)
    (tmp_path / "FILE").write_text("mine")
    argv = ["demo", "--data", str(tmp_path), "--corpus", str(tmp_path / "FILE"), "--out", str(tmp_path / "out"),
            *[str(tmp_path / x) if x == "FILE" else x for x in extra]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err and "Traceback" not in err, err
    assert (tmp_path / "FILE").read_text() == "mine" and not (tmp_path / "out").exists()


def test_demo_corpus_without_catalog_sentences_is_one_line(tmp_path, capsys):
    (tmp_path / "stsb").mkdir()
    (tmp_path / "corpus.txt").write_text("one sentence\nanother one\n")
    assert main(["demo", "--data", str(tmp_path), "--corpus", str(tmp_path / "corpus.txt"), "--sentences", "2",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no sentences after the first 2" in err
    assert not (tmp_path / "out").exists()
