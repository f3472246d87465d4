"""DvBERT students: annealing schedule, multi-teacher targets and loss against brute force, training, resume,
bad input, and the exported head scoring like the torch head (bundle runtime, golden pairs, Java core)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.pairs.dvbert import (
    DvBERTConfig,
    anneal_lambda,
    annealed_targets,
    dvbert_loss,
    gold_targets,
    linear_as_mlp,
    teacher_predictions,
    train_dvbert,
)
from ondevice.pairs.model import head_forward_numpy

torch = pytest.importorskip("torch")


class Teachers:
    """Tiny MRPC teachers: seed 0, seed 1 and a --swap (b, a) teacher, trained once per module."""

    def __init__(self, env, root: Path):
        from ondevice.pairs.crossencoder import CrossEncoderConfig, fine_tune

        self.env = env
        self.dirs = {}
        for name, kw in (("s0", {"seed": 0}), ("s1", {"seed": 1}), ("swap", {"seed": 0, "swap": True})):
            cfg = CrossEncoderConfig(task="mrpc", data=str(env.data), base=str(env.base), epochs=2, batch_size=16,
                                     lr=2e-3, logging_steps=5, **kw)
            fine_tune(cfg, root / name, progress=False)
            self.dirs[name] = str(root / name)

    def config(self, **kw) -> DvBERTConfig:
        base = {"task": "mrpc", "data": str(self.env.data), "student": str(self.env.student),
                "teachers": [self.dirs["s0"], self.dirs["s1"], self.dirs["swap"], self.dirs["s0"] + ":ba"],
                "epochs": 3, "batch_size": 16, "lr": 3e-3, "seed": 0, "augment_random": 0, "augment_neighbors": 0}
        base.update(kw)
        return DvBERTConfig(**base)


@pytest.fixture(scope="module")
def teachers(pair_env, tmp_path_factory):
    return Teachers(pair_env, tmp_path_factory.mktemp("dvbert-teachers"))


@pytest.fixture(scope="module")
def run(teachers, tmp_path_factory):
    out = tmp_path_factory.mktemp("dvbert") / "run"
    train_dvbert(teachers.config(), out, progress=False)
    return out


def test_anneal_schedule():
    assert anneal_lambda("linear", 0, 101) == 0.0
    assert anneal_lambda("linear", 50, 101) == pytest.approx(0.5)
    assert anneal_lambda("linear", 100, 101) == 1.0
    assert anneal_lambda("linear", 25, 101) == pytest.approx(0.25)
    assert anneal_lambda("linear", 0, 1) == 1.0  # a one-step run ends on gold, as a schedule reaching 1 must
    assert [anneal_lambda("none", s, 10) for s in (0, 5, 9)] == [0.0, 0.0, 0.0]
    assert [anneal_lambda("constant:0.3", s, 10) for s in (0, 5, 9)] == [0.3, 0.3, 0.3]
    for bad in ("cosine", "constant:1.5", "constant:x", ""):
        with pytest.raises(OndeviceError, match="^anneal must be"):
            anneal_lambda(bad, 0, 10)


def _brute_loss(logits, teacher_logits, gold, lam, kind):
    """Per pair, per teacher, in plain Python floats: target = lam * gold + (1 - lam) * teacher prediction."""
    total = 0.0
    k, n = len(teacher_logits), len(logits)
    for t in teacher_logits:
        for i in range(n):
            f = [float(x) for x in logits[i]]
            if kind == "regression":
                target = lam * float(gold[i]) + (1 - lam) * float(t[i][0])
                total += (f[0] - target) ** 2
            elif kind == "binary":
                q = 1 / (1 + np.exp(-float(t[i][0])))
                target = lam * float(gold[i]) + (1 - lam) * q
                p = 1 / (1 + np.exp(-f[0]))
                total += -(target * np.log(p) + (1 - target) * np.log(1 - p))
            else:
                e = np.exp(np.array(t[i], np.float64) - max(t[i]))
                q = e / e.sum()
                target = lam * np.eye(len(f))[int(gold[i])] + (1 - lam) * q
                logp = np.array(f) - max(f) - np.log(np.exp(np.array(f) - max(f)).sum())
                total += -(target * logp).sum()
    return total / (k * n)


@pytest.mark.parametrize("kind,outputs", [("regression", 1), ("binary", 1), ("classes", 3)])
def test_multi_teacher_target_and_loss_match_brute_force(kind, outputs):
    rng = np.random.default_rng(3)
    k, n = 3, 7
    logits = rng.normal(size=(n, outputs)).astype(np.float32)
    tl = rng.normal(size=(k, n, outputs)).astype(np.float32)
    gold = rng.random(n).astype(np.float32) if kind == "regression" else rng.integers(0, max(2, outputs), n)
    if kind == "binary":
        gold = gold.astype(np.float32)
    probs = np.stack([teacher_predictions(t, kind) for t in tl])
    g = gold_targets(gold, kind, outputs)
    for lam in (0.0, 0.37, 1.0):
        targets = annealed_targets(probs, g, lam)
        for j in range(k):
            for i in range(n):
                np.testing.assert_allclose(targets[j, i], lam * g[i] + (1 - lam) * probs[j, i], rtol=1e-6)
        got = dvbert_loss(torch.from_numpy(logits), torch.from_numpy(probs), torch.from_numpy(g), lam, kind).item()
        assert got == pytest.approx(_brute_loss(logits, tl, gold, lam, kind), rel=1e-5, abs=1e-6)
    if kind != "regression":  # cross-entropy is linear in the target: mean of losses == loss of the mean teacher
        mean = dvbert_loss(torch.from_numpy(logits), torch.from_numpy(probs.mean(0, keepdims=True)),
                           torch.from_numpy(g), 0.37, kind).item()
        got = dvbert_loss(torch.from_numpy(logits), torch.from_numpy(probs), torch.from_numpy(g), 0.37, kind).item()
        assert got == pytest.approx(mean, rel=1e-5)


def test_linear_head_in_the_dse_format_is_exact():
    rng = np.random.default_rng(0)
    d, o = 12, 3
    w, b = rng.normal(0, 0.5, (o, 3 * d)).astype(np.float32), rng.normal(size=o).astype(np.float32)
    u, v = np.tanh(rng.normal(size=(50, d))).astype(np.float32), np.tanh(rng.normal(size=(50, d))).astype(np.float32)
    ref = np.concatenate([u, v, np.abs(u - v)], 1).astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(head_forward_numpy(linear_as_mlp(w, b), u, v), ref, atol=1e-5)
    weights = linear_as_mlp(w, b)
    assert weights["hidden.weight"].shape == (2 * o, 4 * d) and not weights["hidden.weight"][:, 2 * d : 3 * d].any()


def test_train_publishes_dev_best_and_loss_falls(run, teachers, pair_env):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.train import PairStudent

    log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 3 and log[-1]["train_loss"] < log[0]["train_loss"] and log[-1]["lambda_end"] == 1.0
    data = json.loads((run / "data.json").read_text())
    assert data["head"] == "linear" and [t["order"] for t in data["teachers"]] == ["ab", "ab", "ab", "ba"]
    ids = [t["identity"] for t in data["teachers"]]
    assert ids[2]["input_order"] == "ba" and "input_order" not in ids[0] and ids[0] != ids[1]
    dev = json.loads((run / "dev.json").read_text())
    assert dev["epoch"] == max(log, key=lambda e: (e["dev"]["accuracy"], -e["epoch"]))["epoch"]
    ps = PairStudent.load(run)
    assert ps.head_cfg.hidden == 2 and ps.head_cfg.threshold is not None
    d = load_pairs("mrpc", "dev", pair_env.data)
    assert abs(ps.evaluate(d)["accuracy"] - dev["accuracy"]) < 1e-6


def test_gold_only_annealing_ignores_the_teachers(teachers, tmp_path):
    """lambda = 1 throughout: the teachers drop out of the target, so two different teachers train identical students;
    with the linear schedule they do not."""
    def head(name: str, views: list[str], anneal: str) -> bytes:
        train_dvbert(teachers.config(teachers=views, anneal=anneal, epochs=1, max_train_pairs=32), tmp_path / name,
                     progress=False)
        return (tmp_path / name / "checkpoint" / "model.safetensors").read_bytes()

    t = teachers.dirs
    assert head("g0", [t["s0"]], "constant:1") == head("g1", [t["s1"]], "constant:1")
    assert head("l0", [t["s0"]], "linear") != head("l1", [t["s1"]], "linear")


def test_resume_after_interrupt_equals_uninterrupted(teachers, tmp_path):
    cfg = teachers.config(epochs=2, max_train_pairs=64, seed=2)
    train_dvbert(cfg, tmp_path / "full", progress=False)

    def stop(step):
        if step == 5:  # mid-epoch 2 (4 batches per epoch): lambda depends on the global step
            raise KeyboardInterrupt

    with pytest.raises(OndeviceError, match="--resume"):
        train_dvbert(cfg, tmp_path / "part", progress=False, on_step=stop)
    with pytest.raises(OndeviceError, match="different settings"):
        train_dvbert(teachers.config(epochs=2, max_train_pairs=64, seed=2, anneal="none"), tmp_path / "part",
                     resume=True, progress=False)
    train_dvbert(cfg, tmp_path / "part", resume=True, progress=False)
    for name in ("checkpoint/model.safetensors", "pair_head.safetensors"):
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "part" / name).read_bytes()
    with pytest.raises(OndeviceError, match="--resume"):
        train_dvbert(cfg, tmp_path / "full", progress=False)
    with pytest.raises(OndeviceError, match="nothing to resume"):
        train_dvbert(cfg, tmp_path / "none", resume=True, progress=False)


def test_regression_uses_the_dse_head(pair_env, teachers, tmp_path):
    from ondevice.pairs.crossencoder import CrossEncoderConfig, fine_tune

    fine_tune(CrossEncoderConfig(task="stsb", data=str(pair_env.data), base=str(pair_env.base), epochs=1,
                                 batch_size=16, lr=2e-3, swap=True, max_train_pairs=48), tmp_path / "swap", progress=False)
    cfg = DvBERTConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), epochs=1, head_hidden=8,
                       teachers=[str(pair_env.teacher()), str(tmp_path / "swap")], max_train_pairs=48,
                       augment_random=20, augment_neighbors=1)
    ps = train_dvbert(cfg, tmp_path / "run", progress=False)
    data = json.loads((tmp_path / "run" / "data.json").read_text())
    assert ps.head_cfg.hidden == 8 and data["head"] == "mlp" and data["augment_pairs"] > 20


def test_augmentation_pairs_keep_the_teachers_target():
    """Unlabeled rows: lambda 0 whatever the schedule says, and their placeholder gold (NaN here) never reaches the
    loss; labeled rows anneal as before."""
    rng = np.random.default_rng(5)
    k, n = 2, 6
    logits = rng.normal(size=(n, 1)).astype(np.float32)
    tl = rng.normal(size=(k, n, 1)).astype(np.float32)
    gold = rng.random(n).astype(np.float32)
    labeled = np.array([True, False, True, True, False, False])
    probs = np.stack([teacher_predictions(t, "binary") for t in tl])
    g = gold_targets(np.where(labeled, gold, np.nan), "binary", 1)
    got = dvbert_loss(torch.from_numpy(logits), torch.from_numpy(probs), torch.from_numpy(g), 0.6, "binary",
                      torch.from_numpy(labeled)).item()
    lab, unl = np.flatnonzero(labeled), np.flatnonzero(~labeled)
    want = (_brute_loss(logits[lab], tl[:, lab], gold[lab], 0.6, "binary") * len(lab)
            + _brute_loss(logits[unl], tl[:, unl], gold[unl], 0.0, "binary") * len(unl)) / n
    assert np.isfinite(got) and got == pytest.approx(want, rel=1e-5)
    every = dvbert_loss(torch.from_numpy(logits), torch.from_numpy(probs), torch.from_numpy(np.nan_to_num(g)), 0.6,
                        "binary", torch.ones(n, dtype=torch.bool)).item()
    assert every == pytest.approx(_brute_loss(logits, tl, gold * labeled, 0.6, "binary"), rel=1e-5)


def test_augmentation_is_dses_transfer_set_scored_by_every_view(teachers, pair_env, tmp_path):
    """The same flags draw the same pairs as a DSE run; every view scores them (its own cache entry), and with
    them the teachers still shape a gold-only (lambda 1) run."""
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.augment import AugmentConfig, augmentation_pairs
    from ondevice.student import Student

    t = teachers.dirs
    flags = {"augment_random": 24, "augment_neighbors": 1, "augment_edits": 1, "max_train_pairs": 32, "epochs": 1}
    train_dvbert(teachers.config(teachers=[t["s0"], t["s1"] + ":ba"], **flags), tmp_path / "aug", progress=False)
    data = json.loads((tmp_path / "aug" / "data.json").read_text())
    train = load_pairs("mrpc", "train", pair_env.data)
    train = train.subset(np.random.default_rng(0).permutation(len(train))[:32])
    aug = augmentation_pairs(train, Student.load(pair_env.student).encode, AugmentConfig(24, 1, 256, 0, 1))
    assert data["augment_pairs"] == len(aug) > 24 + 32  # random + neighbours + edited copies
    saved = json.loads((tmp_path / "aug" / "dvbert_config.json").read_text())
    assert saved["augment_random"] == 24 and saved["augment_edits"] == 1

    def head(name: str, view: str) -> bytes:
        train_dvbert(teachers.config(teachers=[view], anneal="constant:1", **flags), tmp_path / name, progress=False)
        return (tmp_path / name / "checkpoint" / "model.safetensors").read_bytes()

    assert head("g0", t["s0"]) != head("g1", t["s1"])  # without augmentation these are equal (test above)


def test_resuming_a_run_saved_before_augmentation(teachers, tmp_path):
    cfg = teachers.config(epochs=2, max_train_pairs=32)

    def stop(step):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(OndeviceError, match="--resume"):
        train_dvbert(cfg, tmp_path / "old", progress=False, on_step=stop)
    saved = json.loads((tmp_path / "old" / "dvbert_config.json").read_text())
    for k in [k for k in saved if k.startswith("augment_")]:  # as an earlier version wrote it
        del saved[k]
    (tmp_path / "old" / "dvbert_config.json").write_text(json.dumps(saved))
    with pytest.raises(OndeviceError, match="without augmentation pairs"):
        train_dvbert(teachers.config(epochs=2, max_train_pairs=32, augment_random=8), tmp_path / "old", resume=True,
                     progress=False)
    train_dvbert(cfg, tmp_path / "old", resume=True, progress=False)
    assert len((tmp_path / "old" / "train_log.jsonl").read_text().splitlines()) == 2


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    return err


def test_bad_input_is_one_line(capsys, teachers, pair_env, tmp_path):
    base = ["pairs", "dvbert", "--task", "mrpc", "--data", str(pair_env.data), "--student", str(pair_env.student),
            "--out", str(tmp_path / "o"), "--quiet"]
    assert "at least one" in _one_line_error(capsys, [*base, "--teachers", ","])
    assert "not found" in _one_line_error(capsys, [*base, "--teachers", f"{teachers.dirs['s0']},{tmp_path / 'nope'}"])
    assert "trained for stsb" in _one_line_error(capsys, [*base, "--teachers", f"{teachers.dirs['s0']},{pair_env.teacher()}"])
    assert "twice" in _one_line_error(capsys, [*base, "--teachers", f"{teachers.dirs['s0']},{teachers.dirs['s0']}"])
    assert "--anneal" in _one_line_error(capsys, [*base, "--teachers", teachers.dirs["s0"], "--anneal", "cosine"])
    assert "not a cross-encoder teacher" in _one_line_error(capsys, [*base, "--teachers", str(tmp_path)])
    assert "--augment-edits" in _one_line_error(capsys, [*base, "--teachers", teachers.dirs["s0"], "--augment-edits", "-1"])
    assert "--augment-tasks" in _one_line_error(capsys, [*base, "--teachers", teachers.dirs["s0"], "--augment-tasks", "nope"])
    assert not (tmp_path / "o").exists()  # nothing written before the input is checked


def test_cli_trains_evaluates_and_exports(capsys, teachers, pair_env, tmp_path):
    t = teachers.dirs
    assert main(["pairs", "dvbert", "--task", "mrpc", "--data", str(pair_env.data), "--student", str(pair_env.student),
                 "--teachers", f"{t['s0']},{t['s1']}", "--both-orders", "--out", str(tmp_path / "r"), "--epochs", "1",
                 "--max-train-pairs", "32", "--augment-random", "16", "--augment-neighbors", "0", "--quiet",
                 "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["teachers"] == [t["s0"], t["s1"], t["s0"] + ":ba", t["s1"] + ":ba"]
    assert json.loads((tmp_path / "r" / "data.json").read_text())["augment_pairs"] == 16
    assert main(["pairs", "eval", "--task", "mrpc", "--data", str(pair_env.data), "--run", str(tmp_path / "r")]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["student"]


@pytest.fixture(scope="module")
def bundle(run, tmp_path_factory):
    from ondevice.pairs.export import export_pair_bundle

    out = tmp_path_factory.mktemp("dvbert-bundle") / "b"
    export_pair_bundle(run, out, bits=64, precision="both", golden=True, with_weights=True)
    return out


def test_export_and_runtime_scores_match_the_torch_head(run, bundle):
    from ondevice.pairs.train import PairStudent
    from ondevice.runtime import Bundle
    from ondevice.student import Student

    a, b = ["the cat sat on the mat.", "a big red car", ""], ["the cat sat on a mat.", "a small blue car", "moon"]
    # the trained linear head in torch, straight from the checkpoint's published weights (not the MLP form)
    ps = PairStudent.load(run)
    vec_a, vec_b = ps.vectors(a), ps.vectors(b)
    head = json.loads((run / "pair_head.json").read_text())
    assert head["hidden"] == 2
    from safetensors.numpy import load_file

    w = load_file(str(run / "pair_head.safetensors"))
    lin_w = w["hidden.weight"][:1][:, np.r_[0 : 2 * ps.head_cfg.dim, 3 * ps.head_cfg.dim : 4 * ps.head_cfg.dim]]
    ref = np.concatenate([vec_a, vec_b, np.abs(vec_a - vec_b)], 1) @ lin_w.T + w["hidden.bias"][:1]
    np.testing.assert_allclose(ps.logits(a, b), ref, atol=1e-5)
    assert np.allclose(Student.load(run / "student").encode(a), vec_a, atol=1e-6)
    probs = 1 / (1 + np.exp(-ref[:, 0]))
    for precision, tol in (("fp32", 1e-5), ("int8", 0.1)):
        bd = Bundle.load(bundle, precision=precision)
        block = bd.manifest["pairs"]
        assert block["method"] == "dvbert" and "W [u, v, |u-v|]" in block["dvbert_head"]
        assert len(block["run"]["teachers"]) == 4 and block["run"]["config"]["anneal"] == "linear"
        if precision == "fp32":
            np.testing.assert_allclose(bd.pair_scores(a, b), probs, atol=tol)
        else:  # int8 encoder and head: close, not equal
            assert np.abs(bd.pair_scores(a, b) - probs).max() < tol
    g = bundle / "fp32" / "golden"
    emb = np.load(g / "embeddings.npy")
    _, weights = __import__("ondevice.pairs.model", fromlist=["x"]).load_head_weights(run)
    ia, ib = np.load(g / "pair_a.npy"), np.load(g / "pair_b.npy")
    np.testing.assert_allclose(np.load(g / "pair_logits.npy"), head_forward_numpy(weights, emb[ia], emb[ib]), atol=1e-5)


JAVAC, JAVA = shutil.which("javac"), shutil.which("java")


@pytest.mark.skipif(not (JAVAC and JAVA), reason="javac/java not on PATH")
def test_java_scores_the_dvbert_head_like_the_golden_pairs(bundle, tmp_path):
    core = Path(__file__).resolve().parents[1] / "android_demo" / "core"
    sources = [str(p) for p in (core / "src").rglob("*.java")]
    res = subprocess.run(check=False, args=[JAVAC, "-J-XX:TieredStopAtLevel=1", "--release", "8", "-encoding", "UTF-8",
                                            "-d", str(tmp_path / "c"), *sources], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = subprocess.run(check=False, args=[JAVA, "-XX:TieredStopAtLevel=1", "-cp", str(tmp_path / "c"),
                                            "ai.ondevice.core.PairParityCheck", str(bundle / "fp32"), "--max-abs-diff", "1e-5"],
                         capture_output=True, text=True, timeout=300)
    values = dict(re.findall(r"^(\w+)=(\S+)", out.stdout, flags=re.MULTILINE))
    assert out.returncode == 0, out.stdout + out.stderr
    assert values["pairs"] == "500" and values["decisions_identical"] == "500/500" and float(values["max_abs_diff"]) <= 1e-5


def test_teachers_load_on_the_runs_device(teachers, monkeypatch):
    from ondevice.pairs import crossencoder
    from ondevice.pairs.dvbert import load_config_views

    seen = []
    real = crossencoder.CrossEncoderTeacher.load.__func__
    monkeypatch.setattr(crossencoder.CrossEncoderTeacher, "load",
                        classmethod(lambda cls, d, device="cpu": seen.append(device) or real(cls, d, device)))
    load_config_views(teachers.config(device="auto"))
    assert seen == ["auto"] * 3  # three distinct teacher folders, each on the run's device


def test_binary_bundle_decides_by_its_blend_and_scores_from_the_command_line(bundle, capsys, tmp_path):
    # an MRPC bundle: the blend's dev threshold decides on the blended key; --no-blend / blend=False on the head logit
    from ondevice.cli import main
    from ondevice.pairs.metrics import cosines
    from ondevice.runtime import Bundle

    ps = Bundle.load(bundle, precision="int8").pair_head()
    a = ["the cat sat on the mat.", "a big red car", "he said no", "the market fell"]
    b = ["the cat sat on a mat.", "a small blue car", "she said yes", "stocks dropped today"]
    assert ps.kind == "binary" and ps.blend is not None and ps.blend.threshold is not None
    scores, keys = ps.score_pairs(a, b)
    u, v = ps.bundle.encode(a), ps.bundle.encode(b)
    logits = ps.logits(u, v)
    np.testing.assert_allclose(keys, ps.blend.keys(logits[:, 0], cosines(u, v)), atol=1e-9)
    np.testing.assert_allclose(scores, ps.pair_scores(a, b), atol=1e-6)
    np.testing.assert_array_equal(ps.pair_decisions(a, b), keys > ps.blend.threshold)
    np.testing.assert_array_equal(ps.pair_decisions(a, b, blend=False), logits[:, 0] > ps.block["threshold"])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{x}\t{y}\n" for x, y in zip(a, b)) + "\n")
    for flags, want in (([], ps.pair_decisions(a, b)), (["--no-blend"], ps.pair_decisions(a, b, blend=False))):
        assert main(["pairs", "score", "--bundle", str(bundle), "--pairs", str(pairs), *flags]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
        assert [r["a"] for r in rows] == a and [r["decision"] for r in rows] == want.tolist()
        np.testing.assert_allclose([r["score"] for r in rows], scores, atol=1e-6)
