import itertools
import json
import shutil

import numpy as np
import pytest

import ondevice.distill as distill_mod
from ondevice.cli import main
from ondevice.distill import DistillConfig, distill
from ondevice.errors import OndeviceError

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.numpy")


def _config(corpus, teacher, wv, **kw):
    base = {"corpus": str(corpus), "teacher": str(teacher), "word_vectors": str(wv), "hidden_size": 8, "epochs": 3,
                "batch_size": 16, "lr": 5e-3, "val_fraction": 0.1, "seed": 3, "checkpoint_minutes": 0, "threads": 1}
    base.update(kw)
    return DistillConfig(**base)


def _weights(path):
    return st.load_file(str(path / "model.safetensors"))


def test_distill_learns_and_writes_a_self_describing_dir(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    out = tmp_path / "student"
    student = distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=4), out, progress=False)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in log] == [1, 2, 3, 4]
    assert log[-1]["train_loss"] < log[0]["train_loss"]
    assert log[-1]["held_out_cosine"] > log[0]["held_out_cosine"]
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "distill_config.json"):
        assert (out / name).is_file()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["output_dim"] == 16 and cfg["teacher"]["model_type"] == "bert"
    assert student.encode(["the cat sat"]).shape == (1, 16)
    assert not list(out.rglob("*.pt")) and not list(out.rglob("*.pkl"))


def test_same_seed_same_weights(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    cfg = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1)
    distill(cfg, tmp_path / "a", progress=False)
    distill(cfg, tmp_path / "b", progress=False)
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_resume_after_epoch_equals_uninterrupted(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2), tmp_path / "full", progress=False)
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1), tmp_path / "part", progress=False)
    moved = tmp_path / "moved.txt"  # the corpus is recognized by content, not path
    moved.write_bytes(tiny_corpus.read_bytes())
    distill(_config(moved, tiny_teacher, tiny_word_vectors, epochs=2), tmp_path / "part", resume=True, progress=False)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "part")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_ctrl_c_mid_epoch_leaves_a_resumable_checkpoint(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, monkeypatch):
    cfg = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2)
    distill(cfg, tmp_path / "full", progress=False)

    real, calls = distill_mod.cosine_loss, []

    def interrupt_on_call_20(*args):
        calls.append(1)
        if len(calls) == 20:  # inside the second epoch (14 batches per epoch)
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(distill_mod, "cosine_loss", interrupt_on_call_20)
    with pytest.raises(OndeviceError, match="--resume"):
        distill(cfg, tmp_path / "cut", progress=False)
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert (state["epoch"], state["step"]) == (1, 5)
    monkeypatch.setattr(distill_mod, "cosine_loss", real)
    distill(cfg, tmp_path / "cut", resume=True, progress=False)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "cut")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_existing_checkpoint_is_never_overwritten(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    cfg = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1)
    distill(cfg, tmp_path / "s", progress=False)
    with pytest.raises(OndeviceError, match="--resume"):
        distill(cfg, tmp_path / "s", progress=False)
    with pytest.raises(OndeviceError, match="different settings"):
        distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, hidden_size=12), tmp_path / "s", resume=True, progress=False)
    other = tmp_path / "other.txt"
    other.write_text(tiny_corpus.read_text().replace("cat", "dog"))
    with pytest.raises(OndeviceError, match="corpus_sha256"):
        distill(_config(other, tiny_teacher, tiny_word_vectors), tmp_path / "s", resume=True, progress=False)


def test_a_damaged_run_folder_is_refused_on_resume(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    import shutil

    cfg = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1)
    distill(cfg, tmp_path / "s", progress=False)
    more = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2)
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    damage = {
        "huge vocabulary": ("config.json", json.dumps({**config, "vocab_size": 9_000_000, "embedding_dim": 4096}),
                            "vocab_size x embedding_dim"),
        "other vocabulary": ("config.json", json.dumps({**config, "vocab_size": config["vocab_size"] - 1}),
                             "vocabulary of"),
        "bad weights": ("checkpoint/model.safetensors", "not safetensors", "cannot be loaded"),
        "bad optimizer": ("checkpoint/optimizer.safetensors", "not safetensors", "cannot be loaded"),
    }
    for case, (name, text, message) in damage.items():
        run = tmp_path / case.replace(" ", "-")
        shutil.copytree(tmp_path / "s", run)
        (run / name).write_text(text)
        with pytest.raises(OndeviceError, match=message):
            distill(more, run, resume=True, progress=False)
    for name in ("model.safetensors", "optimizer.safetensors", "state.json"):  # a resumed run reads only its own files
        run = tmp_path / f"linked-{name}"
        shutil.copytree(tmp_path / "s", run)
        (tmp_path / f"outside-{name}").write_bytes((run / "checkpoint" / name).read_bytes())
        (run / "checkpoint" / name).unlink()
        (run / "checkpoint" / name).symlink_to(tmp_path / f"outside-{name}")
        with pytest.raises(OndeviceError, match=f"checkpoint/{name} is a symbolic link"):
            distill(more, run, resume=True, progress=False)


def _cli(args, capsys):
    code = main(["distill", *map(str, args)])
    err = capsys.readouterr().err.strip()
    return code, err


def test_cli_end_to_end(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, capsys):
    code = main(["distill", "--corpus", str(tiny_corpus), "--teacher", str(tiny_teacher), "--word-vectors",
                 str(tiny_word_vectors), "--out", str(tmp_path / "s"), "--hidden", "4", "--epochs", "1", "--seed", "1"])
    assert code == 0
    assert "student saved to" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "empty", "not-a-model", "no-known-words", "bad-epochs", "bad-pooling",
                                  "nothing-to-resume", "bad-word-vectors", "bad-train-splits"])
def test_cli_errors_are_one_line(case, tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, capsys):
    corpus, teacher, wv = tiny_corpus, tiny_teacher, tiny_word_vectors
    extra = []
    if case == "missing":
        corpus = tmp_path / "nope.txt"
    elif case == "empty":
        corpus = tmp_path / "empty.txt"
        corpus.write_text("\n  \n")
    elif case == "not-a-model":
        teacher = tmp_path
    elif case == "no-known-words":
        corpus = tmp_path / "other.txt"
        corpus.write_text("zzz qqq\nxxyy ww\n")
    elif case == "bad-epochs":
        extra = ["--epochs", "0"]
    elif case == "bad-pooling":
        extra = ["--student-pooling", "avg"]
    elif case == "nothing-to-resume":
        extra = ["--resume"]
    elif case == "bad-train-splits":
        extra = ["--train-splits", "stsb,snli"]  # SNLI is the retrieval catalog: never corpus text
    elif case == "bad-word-vectors":
        wv = tmp_path / "wv.bin"
        wv.write_bytes(b"\x00\x01garbage")
    code, err = _cli(["--corpus", corpus, "--teacher", teacher, "--word-vectors", wv, "--out", tmp_path / "out", *extra], capsys)
    assert code == 2
    last = err.splitlines()[-1]  # earlier lines are progress bars
    assert "error" in last and "Traceback" not in err
    if case == "bad-train-splits":
        assert "--train-splits takes tasks from stsb,sick,mrpc,qqp" in last


@pytest.mark.parametrize("spec", ["teacher", "random"])
def test_distill_without_a_word_vectors_file(tiny_corpus, tiny_teacher, spec, tmp_path):
    cfg = _config(tiny_corpus, tiny_teacher, spec, embedding_dim=6, epochs=2)
    student = distill(cfg, tmp_path / spec, progress=False)
    assert student.config.embedding_dim == 6 and student.config.word_vectors == spec
    emb = _weights(tmp_path / spec)["embedding.weight"]
    assert np.isfinite(emb).all() and np.abs(emb[0]).max() == 0  # [PAD] stays zero


def test_embedding_dim_needs_a_generated_init(tiny_corpus, tiny_teacher, tiny_word_vectors):
    with pytest.raises(OndeviceError, match="embedding_dim applies to word_vectors teacher"):
        _config(tiny_corpus, tiny_teacher, tiny_word_vectors, embedding_dim=6).validate()


def test_lr_schedule_warms_up_then_decays():
    cfg = DistillConfig(corpus="x", lr=1.0, lr_schedule="cosine", warmup_steps=10)
    lrs = [distill_mod.lr_at(cfg, s, 110) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:])) and lrs[-1] < 0.001
    flat = DistillConfig(corpus="x", lr=0.5, lr_schedule="constant", warmup_steps=0)
    assert {distill_mod.lr_at(flat, s, 50) for s in range(50)} == {0.5}


def test_several_corpus_files_and_evaluation_text_is_dropped(tiny_teacher, tmp_path, monkeypatch):
    from ondevice.eval import data

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the cat sat\nthe dog ran\n")
    b.write_text("a test sentence\nthe sun\n")
    monkeypatch.setattr(data, "held_out_texts", lambda d: {"a test sentence"})
    monkeypatch.setenv("ONDEVICE_DATA", str(tmp_path))  # any existing folder: the test must not depend on ../shared
    cfg = DistillConfig(corpus=[str(a), str(b)])
    assert distill_mod.read_sentences(cfg) == ["the cat sat", "the dog ran", "the sun"]
    cfg.exclude_eval = False
    assert len(distill_mod.read_sentences(cfg)) == 4
    cfg.max_sentences = 3
    assert distill_mod.read_sentences(cfg) == ["the cat sat", "the dog ran", "a test sentence"]


def test_similarity_matching_term_trains_and_is_checked(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    out = tmp_path / "sim"
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2, sim_loss_weight=1.0), out, progress=False)
    plain = tmp_path / "plain"
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2), plain, progress=False)
    a, b = _weights(out), _weights(plain)
    assert any(not np.array_equal(a[k], b[k]) for k in a)  # the term changes the training
    assert json.loads((out / "distill_config.json").read_text())["sim_loss_weight"] == 1.0
    with pytest.raises(OndeviceError, match="sim_loss_weight must be >= 0"):
        DistillConfig(corpus="x", sim_loss_weight=-1).validate()


def test_init_from_continues_a_student(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    from ondevice.io import sha256_file

    first = tmp_path / "first"
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1), first, progress=False)
    # Architecture flags of the new run are ignored: the vocabulary, sizes and weights come from the init student.
    cont = tmp_path / "cont"
    distill(_config(tiny_corpus, tiny_teacher, "random", epochs=1, lr=1e-12, hidden_size=12, init_from=str(first)),
            cont, progress=False)
    a, b = _weights(first), _weights(cont)
    assert a.keys() == b.keys() and all(np.allclose(a[k], b[k], atol=1e-6) for k in a)  # started from first's weights
    assert (cont / "vocab.txt").read_text() == (first / "vocab.txt").read_text()
    saved = json.loads((cont / "distill_config.json").read_text())
    assert saved["hidden_size"] == 8 and saved["word_vectors"] == str(tiny_word_vectors)
    assert saved["init_sha256"] == sha256_file(first / "model.safetensors")
    # A real learning rate moves the weights on from there, and the held-out cosine keeps improving.
    more = tmp_path / "more"
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1, init_from=str(first)), more, progress=False)
    log_first = json.loads((first / "train_log.jsonl").read_text().splitlines()[-1])
    log_more = json.loads((more / "train_log.jsonl").read_text().splitlines()[-1])
    assert log_more["held_out_cosine"] > log_first["held_out_cosine"]


def test_init_from_resumes_without_repeating_the_flag(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    first = tmp_path / "first"
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1), first, progress=False)
    kw = {"init_from": str(first), "hidden_size": 5}
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2, **kw), tmp_path / "full", progress=False)
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1, **kw), tmp_path / "part", progress=False)
    shutil.rmtree(first)  # the checkpoint holds the weights now
    distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=2), tmp_path / "part", resume=True, progress=False)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "part")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_init_from_bad_input(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path):
    with pytest.raises(OndeviceError, match="--init-from .* is not a folder"):
        distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, init_from=str(tmp_path / "nope")), tmp_path / "s",
                progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(OndeviceError, match="not a student dir"):
        distill(_config(tiny_corpus, tiny_teacher, tiny_word_vectors, init_from=str(tmp_path / "empty")), tmp_path / "s",
                progress=False)


def test_train_split_repeats_upweight_the_front(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, monkeypatch):
    from ondevice.eval import data
    from ondevice.eval import pair_tasks as pair_data

    front = ["the cat ran", "a dog sat", "the sun sat", "a cat ran"]
    monkeypatch.setattr(pair_data, "unlabeled_train_sentences", lambda d, tasks: list(front))
    monkeypatch.setattr(data, "check_data_dir", lambda d: d)
    seen = []
    real = distill_mod._batches
    monkeypatch.setattr(distill_mod, "_batches", lambda lengths, *a: seen.append(len(lengths)) or real(lengths, *a))
    sizes = {}
    for r in (1, 3):
        seen.clear()
        cfg = _config(tiny_corpus, tiny_teacher, tiny_word_vectors, epochs=1, train_splits=True, train_split_repeats=r)
        distill(cfg, tmp_path / f"r{r}", progress=False)
        sizes[r] = seen[0]
    _, val = distill_mod._split(len(distill_mod.read_sentences(cfg)), cfg.val_fraction, cfg.seed)
    front_train = len(front) - int((val < len(front)).sum())
    assert sizes[3] - sizes[1] == 2 * front_train > 0
    idx = distill_mod.upweighted(np.array([0, 2, 5, 7]), 3, 2)
    assert sorted(idx.tolist()) == [0, 0, 2, 2, 5, 7]
    with pytest.raises(OndeviceError, match="train_split_repeats needs train_splits"):
        DistillConfig(corpus="x", train_split_repeats=2).validate()


def test_distill_never_trains_over_a_student(tiny_corpus, tiny_teacher, tiny_word_vectors, tmp_path, capsys):
    """A folder holding a student without a checkpoint (unpacked, or copied) is refused before any teacher work;
    so is a folder holding another kind of artifact."""
    assert main(["unpack", "--bundle", "pretrained", "--out", str(tmp_path / "s")]) == 0
    before = (tmp_path / "s" / "model.safetensors").read_bytes()
    capsys.readouterr()
    args = ["--corpus", tiny_corpus, "--teacher", tiny_teacher, "--word-vectors", tiny_word_vectors, "--hidden", "4",
            "--epochs", "1"]
    code, err = _cli([*args, "--out", tmp_path / "s"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "already holds a student; choose another --out" in err
    assert (tmp_path / "s" / "model.safetensors").read_bytes() == before
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "binarizer.json").write_text("{}")
    code, err = _cli([*args, "--out", tmp_path / "b"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "holds a binarizer" in err


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_a_word_vectors_file_that_is_not_there_fails_before_the_teacher(where, tiny_corpus, tiny_teacher, tmp_path,
                                                                          capsys, monkeypatch):
    """`--word-vectors /nope.vec` failed only after the teacher had labelled the whole corpus; now at once, one line."""
    import ondevice.teacher as teacher_mod

    def no_teacher(*args, **kwargs):
        raise AssertionError("the teacher ran before --word-vectors was checked")

    monkeypatch.setattr(teacher_mod, "Teacher", no_teacher)
    wv = tmp_path / "nope.vec"
    if where == "folder":
        wv.mkdir()
    code, err = _cli(["--corpus", tiny_corpus, "--teacher", tiny_teacher, "--word-vectors", wv, "--out", tmp_path / "s"],
                     capsys)
    assert code == 2 and err.count("\n") == 0 and "word vectors" in err and str(wv) in err, err
    assert not (tmp_path / "s").exists()
