"""`ondevice pairs`: bad input is one line and exit code 2; the steps run end to end from the command line."""

from __future__ import annotations

import json

from ondevice.cli import main


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    return err


def test_bad_input_is_one_line(capsys, tmp_path, pair_env):
    assert "not found" in _one_line_error(capsys, ["pairs", "data", "--task", "stsb", "--data", str(tmp_path / "nope")])
    assert "invalid choice" in _one_line_error(capsys, ["pairs", "data", "--task", "nli"])
    assert "--alphas" in _one_line_error(capsys, ["pairs", "train", "--task", "stsb", "--data", str(pair_env.data),
                                                  "--student", "s", "--teacher", "t", "--out", "o", "--alphas", "0,2"])
    assert "not a cross-encoder teacher" in _one_line_error(
        capsys, ["pairs", "train", "--task", "stsb", "--data", str(pair_env.data), "--student", str(pair_env.student),
                 "--teacher", str(tmp_path), "--out", str(tmp_path / "o")])
    assert "not a DSE run" in _one_line_error(capsys, ["pairs", "export", "--run", str(tmp_path), "--out", str(tmp_path / "b")])
    assert "nothing to evaluate" in _one_line_error(capsys, ["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data)])
    assert "--epochs" in _one_line_error(capsys, ["pairs", "teacher", "--task", "stsb", "--data", str(pair_env.data),
                                                  "--out", str(tmp_path / "t"), "--epochs", "0"])
    # a base that is not fetched (the suite's cache is empty) is named before anything is written
    assert "teachers fetch mpnet" in _one_line_error(capsys, ["pairs", "teacher", "--task", "stsb", "--data",
                                                             str(pair_env.data), "--base", "mpnet",
                                                             "--out", str(tmp_path / "t")])
    assert not (tmp_path / "t").exists()


def test_data_eval_train_export_from_the_command_line(capsys, tmp_path, pair_env):
    assert main(["pairs", "data", "--task", "qqp", "--data", str(pair_env.data)]) == 0
    out = capsys.readouterr().out
    assert json.JSONDecoder().raw_decode(out)[0]["splits"]["train"]["pairs"] > 0
    assert main(["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data), "--teacher", str(pair_env.teacher()),
                 "--run", str(pair_env.run())]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "spearman" in res["teacher"] and "spearman" in res["student"]
    # the run's own encoder by cosine, beside its head: the same number as scoring the pairs directly
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.metrics import pair_cosines, spearman
    from ondevice.pairs.train import PairStudent

    test = load_pairs("stsb", "test", str(pair_env.data))
    cos = pair_cosines(PairStudent.load(pair_env.run()).vectors, test.a, test.b)
    assert res["student_encoder_cosine"]["spearman"] == round(100 * spearman(cos, test.gold), 2)
    assert main(["pairs", "train", "--task", "stsb", "--data", str(pair_env.data), "--student", str(pair_env.student),
                 "--teacher", str(pair_env.teacher()), "--out", str(tmp_path / "sweep"), "--alphas", "0.5", "--epochs", "1",
                 "--head-hidden", "4", "--augment-random", "5", "--quiet"]) == 0
    sel = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sel["chosen_alpha"] == 0.5
    assert main(["pairs", "export", "--run", str(tmp_path / "sweep"), "--out", str(tmp_path / "b"), "--bits", "32",
                 "--precision", "int8"]) == 0
    from ondevice.runtime import Bundle

    assert Bundle.load(tmp_path / "b").pair_scores("a cat", "a dog").shape == (1,)
    # the exported bundle through the runtime: its head scores as the run's head did, up to int8
    assert main(["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data), "--bundle", str(tmp_path / "b")]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = res["bundle"]
    assert got["head_kind"] == "pairs" and got["precision"] == "int8" and got["blend"]["similarity"] == "cosine"
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())["pairs"]
    assert got["blend"]["weight"] == manifest["blend"]["weight"] and "spearman" in got["head"]
    assert "pass --task stsb" in _one_line_error(capsys, ["pairs", "eval", "--task", "mrpc", "--data", str(pair_env.data),
                                                          "--bundle", str(tmp_path / "b")])
    # scoring pairs with the bundle: one JSON line per pair, the blended key by default; bad input is one line
    assert main(["pairs", "score", "--bundle", str(tmp_path / "b"), "--a", "a cat sat", "--b", "a cat sits"]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    scores, keys = Bundle.load(tmp_path / "b").pair_head().score_pairs(["a cat sat"], ["a cat sits"])
    assert row["score"] == float(scores[0]) and row["key"] == round(float(keys[0]), 6) and "decision" not in row
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\ttwo\nno tab here\n")
    assert "line 2: expected first<TAB>second" in _one_line_error(capsys, ["pairs", "score", "--bundle", str(tmp_path / "b"),
                                                                           "--pairs", str(bad)])
    assert "--pairs FILE" in _one_line_error(capsys, ["pairs", "score", "--bundle", str(tmp_path / "b"), "--a", "x"])
    assert "cannot read" in _one_line_error(capsys, ["pairs", "score", "--bundle", str(tmp_path / "b"), "--pairs",
                                                     str(tmp_path / "missing.tsv")])
    # the sweep's chosen alpha, souped into a new folder, exports like any run
    assert main(["pairs", "soup", "--run", str(tmp_path / "sweep"), "--out", str(tmp_path / "soup"), "--threads", "1"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["run"] == str(tmp_path / "sweep" / "alpha-0.5") and isinstance(record["kept"], bool)
    assert main(["pairs", "export", "--run", str(tmp_path / "soup"), "--out", str(tmp_path / "b2"), "--bits", "32",
                 "--precision", "int8"]) == 0
    assert "not empty" in _one_line_error(capsys, ["pairs", "soup", "--run", str(tmp_path / "sweep"), "--out",
                                                   str(tmp_path / "b2")])


def test_dipair_bad_input_and_run_from_the_command_line(capsys, tmp_path, pair_env, tiny_teacher):
    base = ["pairs", "dipair", "--task", "stsb", "--data", str(pair_env.data), "--student", str(pair_env.student),
            "--teacher", str(pair_env.teacher()), "--quiet"]
    capsys.readouterr()  # building the session's teacher (when this test is the first to need it) prints progress
    assert "--n" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--n", "0"])
    assert "divisible" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--d", "6", "--heads", "4"])
    assert "--augment-tasks takes tasks from" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"),
                                                                         "--augment-tasks", "sick,snli"])
    assert "--augment-tasks-max" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--augment-tasks", "sick",
                                                             "--augment-tasks-max", "0"])
    assert "--augment-text" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--augment-text",
                                                        str(tmp_path / "missing.txt")])
    assert "--augment-edits must be >= 0" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"),
                                                                      "--augment-edits", "-1"])
    assert "not a folder" in _one_line_error(capsys, ["pairs", "dipair", "--task", "stsb", "--data", str(pair_env.data),
                                                      "--student", str(tmp_path / "nope"), "--teacher", "t", "--out", "o"])
    assert "--sra-teacher" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o2")])  # tiny student names none
    assert "invalid choice" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--select", "middle"])
    assert "invalid choice" in _one_line_error(capsys, [*base, "--out", str(tmp_path / "o"), "--loss", "l1"])
    assert "not a DiPair run" in _one_line_error(capsys, ["pairs", "dipair-export", "--run", str(tmp_path), "--out",
                                                          str(tmp_path / "b")])
    mine = tmp_path / "mine.txt"
    mine.write_text("".join(f"a red cat sleeps {i}\n" for i in range(12)))
    assert main([*base, "--out", str(tmp_path / "run"), "--sra-teacher", str(tiny_teacher), "--n", "3", "--m", "3",
                 "--d", "8", "--ffn", "8", "--stage1-epochs", "1", "--stage2-epochs", "1", "--augment-random", "10",
                 "--augment-text", str(mine), "--loss", "mse", "--seed", "3"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "spearman" in res["dev"] and res["sra_cosine"]["before"] is not None
    assert json.loads((tmp_path / "run" / "dipair_config.json").read_text())["augment_text_sha256"]
    assert json.loads((tmp_path / "run" / "dipair_config.json").read_text())["loss"] == "mse"
    assert json.loads((tmp_path / "run" / "data.json").read_text())["augment_pairs"] > 10  # random + the file's pairs
    assert main(["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data), "--run", str(tmp_path / "run"),
                 "--split", "dev"]) == 0  # a DiPair run evaluates too: its head, and its encoder's cosine
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(res) == {"task", "split", "student", "student_encoder_cosine"} and "spearman" in res["student_encoder_cosine"]
    assert res["student"]["spearman"] == json.loads((tmp_path / "run" / "dev.json").read_text())["spearman"]
    assert "pass --data DIR, or --no-blend" in _one_line_error(capsys, [
        "pairs", "dipair-export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "nodata"), "--bits", "64",
        "--precision", "int8", "--data", str(tmp_path / "nope")])
    assert not (tmp_path / "nodata").exists()  # refused before anything was written
    assert main(["pairs", "dipair-export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "bundle"), "--bits", "64",
                 "--precision", "int8"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    block = json.loads((tmp_path / "bundle" / "manifest.json").read_text())["dipair"]
    assert block["head"]["n"] == 3 and printed["blend"]["bundle"] == block["blend"]["dev"]
    # the bundle as an app runs it: the head, and the head + Hamming blend it ranks by (fitted on dev: never below there)
    assert main(["pairs", "eval", "--task", "stsb", "--data", str(pair_env.data), "--bundle", str(tmp_path / "bundle"),
                 "--split", "dev"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bundle"]
    assert res["head_kind"] == "dipair" and res["blend"]["spearman"] == block["blend"]["dev"]["spearman"]
    assert res["head"]["spearman"] == block["blend"]["dev"]["head_alone"] <= res["blend"]["spearman"]
    assert main(["pairs", "dipair-export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "bundle2"), "--bits", "64",
                 "--precision", "fp32", "--no-blend", "--data", str(tmp_path / "nope")]) == 0
    assert "blend" not in json.loads((tmp_path / "bundle2" / "manifest.json").read_text())["dipair"]


def test_a_head_for_an_existing_bundle_from_the_command_line(capsys, tmp_path, pair_env):
    """Freeze the encoder of a bundle, train a head on it, add the head to a copy of that bundle."""
    from ondevice.runtime import Bundle

    plain = pair_env.plain_bundle()
    assert main(["pairs", "train", "--task", "stsb", "--data", str(pair_env.data), "--student", str(pair_env.student),
                 "--teacher", str(pair_env.teacher()), "--out", str(tmp_path / "head"), "--alphas", "0.5", "--epochs", "1",
                 "--head-hidden", "4", "--augment-random", "5", "--freeze-encoder", "--quiet"]) == 0
    capsys.readouterr()
    assert "leave them out" in _one_line_error(capsys, ["pairs", "export", "--run", str(tmp_path / "head"), "--bundle",
                                                        str(plain), "--out", str(tmp_path / "b"), "--golden"])
    assert main(["pairs", "export", "--run", str(tmp_path / "head"), "--bundle", str(plain), "--out", str(tmp_path / "b")]) == 0
    assert json.loads(capsys.readouterr().out.strip())["bundles"] == [str(tmp_path / "b")]
    bundle = Bundle.load(tmp_path / "b")
    assert bundle.manifest["pairs"]["encoder"]["frozen"] and bundle.pair_scores("a cat", "a dog").shape == (1,)
    assert (tmp_path / "b" / "encoder.onnx").read_bytes() == (plain / "encoder.onnx").read_bytes()
    assert "fine-tuned its encoder" in _one_line_error(capsys, ["pairs", "export", "--run", str(pair_env.run()), "--bundle",
                                                                str(plain), "--out", str(tmp_path / "c")])
    # DiPair heads read token states the shipped encoder graph does not give: dipair-export has no --bundle
    assert "unrecognized arguments: --bundle" in _one_line_error(
        capsys, ["pairs", "dipair-export", "--run", str(tmp_path / "head"), "--out", str(tmp_path / "d"), "--bundle", str(plain)])


def test_bad_outs_threads_and_training_flags_fail_before_any_training(capsys, tmp_path, pair_env):
    """An --out that is a file, a negative --threads, --resume with nothing to resume, an alpha that needs a teacher
    and bad augmentation flags (even with --alphas 0, where nothing augments): one line, and no run folder made."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("mine\n")
    data = ["--data", str(pair_env.data)]
    student = ["--student", str(pair_env.student)]
    for argv in (["pairs", "teacher", "--task", "stsb", *data, "--out", str(corpus)],
                 ["pairs", "train", "--task", "stsb", *data, *student, "--alphas", "0", "--out", str(corpus)],
                 ["pairs", "sentence", *data, *student, "--out", str(corpus)]):
        assert "is a file, not a directory" in _one_line_error(capsys, argv)
    assert corpus.read_text() == "mine\n"
    for argv in (["pairs", "sentence", *data, *student, "--out", str(tmp_path / "o"), "--threads", "-1"],
                 ["pairs", "soup", "--run", str(tmp_path / "r"), "--out", str(tmp_path / "o"), "--threads", "-1"],
                 ["pairs", "score", "--bundle", "pretrained", "--a", "x", "--b", "y", "--threads", "-1"]):
        assert "--threads must be between 0 and" in _one_line_error(capsys, argv)
    train = ["pairs", "train", "--task", "stsb", *data, *student, "--out", str(tmp_path / "o")]
    assert "nothing to resume in" in _one_line_error(capsys, [*train, "--alphas", "0", "--resume"])
    assert "alpha 0.5 distills teacher logits" in _one_line_error(capsys, train)  # the default --alphas 0,0.5,1
    assert "--augment-bits must be in 1.." in _one_line_error(capsys, [*train, "--alphas", "0", "--augment-bits", "0"])
    bad_gz = tmp_path / "bad.txt.gz"
    bad_gz.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 60)
    assert "cannot read --augment-text" in _one_line_error(capsys, [*train, "--alphas", "0", "--augment-text", str(bad_gz)])
    assert not (tmp_path / "o").exists()
    # a precision the bundle lacks names the flag
    assert "leave out --precision" in _one_line_error(capsys, ["pairs", "score", "--bundle", "pretrained", "--precision",
                                                               "fp32", "--a", "x", "--b", "y"])


def test_pair_runs_and_teachers_are_never_written_into_another_artifact(capsys, pair_env):
    """--out holding a student (or a bundle) is refused before any training, and nothing is added to it."""
    data = ["--data", str(pair_env.data)]
    student = ["--student", str(pair_env.student)]
    before = sorted(p.name for p in pair_env.student.iterdir())
    for argv in (["pairs", "teacher", "--task", "stsb", *data, "--out", str(pair_env.student)],
                 ["pairs", "train", "--task", "stsb", *data, *student, "--alphas", "0", "--out", str(pair_env.student)],
                 ["pairs", "dvbert", "--task", "stsb", *data, *student, "--teachers", str(pair_env.student),
                  "--out", str(pair_env.student)]):
        assert "holds a student encoder" in _one_line_error(capsys, argv)
    assert sorted(p.name for p in pair_env.student.iterdir()) == before
