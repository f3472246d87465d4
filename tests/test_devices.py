"""Training devices (ondevice.devices): the --device checks of every trainer, here on any machine; and, marked `gpu`
(`make test-gpu` on a machine with a CUDA GPU; `make test` leaves them out), every trainer on the GPU writing a run
that loads on the CPU and scores there as it scored on the GPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.cli import main
from ondevice.devices import device_check, resolve_device
from ondevice.errors import OndeviceError

torch = pytest.importorskip("torch")
gpu = pytest.mark.gpu
HAS_CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("spec", ["gpu", "cuda0", "cuda:", "cuda:-1", "CPU", ""])
def test_bad_device_is_one_line(spec):
    assert not device_check(spec)[0]
    with pytest.raises(OndeviceError, match="--device must be cpu, cuda, cuda:N or auto"):
        resolve_device(spec)


def test_cuda_is_resolved_or_refused_in_one_line():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    if HAS_CUDA:
        assert resolve_device("cuda") == "cuda"
    else:
        with pytest.raises(OndeviceError, match="sees no CUDA GPU; use --device cpu or auto"):
            resolve_device("cuda")
    with pytest.raises(OndeviceError, match="CUDA device|sees no CUDA GPU"):  # no machine has 10,000 GPUs
        resolve_device("cuda:9999")


def test_distill_device_flags(tiny_corpus, tiny_teacher, tmp_path, capsys):
    from ondevice.distill import DistillConfig

    with pytest.raises(OndeviceError, match="^device must be"):
        DistillConfig(corpus="x", device="gpu").validate()
    with pytest.raises(OndeviceError, match="^teacher_backend onnx runs on the CPU"):
        DistillConfig(corpus="x", device="cuda", teacher_backend="onnx").validate()
    DistillConfig(corpus="x", device="auto", teacher_backend="onnx").validate()  # auto: the ONNX teacher stays on the CPU
    code = main(["distill", "--corpus", str(tiny_corpus), "--teacher", str(tiny_teacher), "--word-vectors", "random",
                 "--embedding-dim", "4", "--out", str(tmp_path / "s"), "--hidden", "4", "--epochs", "1",
                 "--device", "cuda:9999"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "--device cuda:9999" in err.splitlines()[-1]
    assert not (tmp_path / "s").exists()  # refused before any work


def test_teacher_backend_and_device(tiny_teacher):
    from ondevice.teacher import Teacher

    with pytest.raises(OndeviceError, match="runs on the CPU"):
        Teacher(tiny_teacher, backend="onnx", device="cuda")
    assert Teacher(tiny_teacher, device="cpu").device == "cpu"


def test_dipair_device_flag():
    from ondevice.pairs.dipair_train import DiPairConfig

    cfg = DiPairConfig(task="stsb", data="data", student="student", teacher="teacher", device="tpu")
    with pytest.raises(OndeviceError, match="^device must be"):
        cfg.validate()


# ------------------------------------------------------------------------------------------- on a CUDA GPU


def _distill_config(corpus, teacher, wv, **kw):
    from ondevice.distill import DistillConfig

    base = {"corpus": str(corpus), "teacher": str(teacher), "word_vectors": str(wv), "hidden_size": 8, "epochs": 3,
            "batch_size": 16, "lr": 5e-3, "val_fraction": 0.1, "seed": 3, "checkpoint_minutes": 0, "threads": 1}
    base.update(kw)
    return DistillConfig(**base)


@gpu
def test_teacher_vectors_on_the_gpu_equal_the_cpu_ones(tiny_teacher, tiny_corpus):
    from ondevice.teacher import Teacher

    texts = tiny_corpus.read_text().splitlines()[:200]
    cpu = Teacher(tiny_teacher).encode(texts, batch_size=32)
    cuda = Teacher(tiny_teacher, device="cuda").encode(texts, batch_size=32)
    cos = (cpu * cuda).sum(1) / np.linalg.norm(cpu, axis=1) / np.linalg.norm(cuda, axis=1)
    assert cos.min() > 1 - 1e-5 and np.abs(cpu - cuda).max() < 1e-4  # one cache key for both is sound


@gpu
def test_distill_on_the_gpu_learns_saves_for_the_cpu_and_resumes_there(tiny_corpus, tiny_teacher, tmp_path):
    from ondevice.distill import distill
    from ondevice.student import Student

    out = tmp_path / "gpu"
    wv = "random"  # the word-vector file loader (gensim) is not what this test is about
    student = distill(_distill_config(tiny_corpus, tiny_teacher, wv, embedding_dim=6, device="cuda"), out, progress=False)
    assert next(student.model.parameters()).device.type == "cpu"  # returned ready for the CPU
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["train_loss"] < log[0]["train_loss"] and log[-1]["held_out_cosine"] > log[0]["held_out_cosine"]
    loaded = Student.load(out)
    assert np.allclose(loaded.encode(["the cat sat on the mat"]), student.encode(["the cat sat on the mat"]), atol=1e-6)
    assert json.loads((out / "distill_config.json").read_text())["device"] == "cuda"
    cpu = distill(_distill_config(tiny_corpus, tiny_teacher, wv, embedding_dim=6), tmp_path / "cpu", progress=False)
    assert cpu is not None
    cpu_log = [json.loads(line) for line in (tmp_path / "cpu" / "train_log.jsonl").read_text().splitlines()]
    assert abs(cpu_log[-1]["held_out_cosine"] - log[-1]["held_out_cosine"]) < 0.05  # same recipe, same outcome
    # a GPU run continues on the CPU: its checkpoint and optimizer state are CPU tensors
    distill(_distill_config(tiny_corpus, tiny_teacher, wv, embedding_dim=6, epochs=4), out, resume=True, progress=False)
    assert len((out / "train_log.jsonl").read_text().splitlines()) == 4


@gpu
def test_pair_trainers_on_the_gpu_score_the_same_on_the_cpu(pair_env, tiny_teacher, tmp_path):
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.crossencoder import CrossEncoderConfig, CrossEncoderTeacher, fine_tune
    from ondevice.pairs.dipair_train import DiPairConfig, DiPairStudent, train_dipair
    from ondevice.pairs.dvbert import DvBERTConfig, train_dvbert
    from ondevice.pairs.train import PairStudent, train_dse

    dev = load_pairs("stsb", "dev", pair_env.data)
    fine_tune(CrossEncoderConfig(task="stsb", data=str(pair_env.data), base=str(pair_env.base), epochs=2, batch_size=8,
                                 lr=2e-3, logging_steps=3, device="cuda"), tmp_path / "teacher", progress=False)
    teacher = CrossEncoderTeacher.load(tmp_path / "teacher")  # on the CPU
    assert np.isfinite(teacher.logits(dev.a[:20], dev.b[:20])).all()

    train_dse(pair_env.dse_config(teacher=str(tmp_path / "teacher"), device="cuda"), tmp_path / "dse", progress=False)
    train_dvbert(DvBERTConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student),
                              teachers=[str(tmp_path / "teacher"), str(pair_env.teacher())], epochs=2, batch_size=16,
                              lr=3e-3, augment_random=20, device="cuda"), tmp_path / "dvbert", progress=False)
    for run in ("dse", "dvbert"):
        on_gpu = json.loads((tmp_path / run / "dev.json").read_text())["spearman"]
        # the same model up to float rounding (a near-tie of two dev pairs may swap: +-0.5 on the x100 scale)
        assert PairStudent.load(tmp_path / run).evaluate(dev)["spearman"] == pytest.approx(on_gpu, abs=0.5), run

    train_dipair(DiPairConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student),
                              teacher=str(tmp_path / "teacher"), sra_teacher=str(tiny_teacher), n=4, m=4, d=8, ffn=16,
                              stage1_epochs=1, stage2_epochs=1, batch_size=16, augment_random=30, device="cuda"),
                 tmp_path / "dipair", progress=False)
    on_gpu = json.loads((tmp_path / "dipair" / "dev.json").read_text())["spearman"]
    assert DiPairStudent.load(tmp_path / "dipair").evaluate(dev)["spearman"] == pytest.approx(on_gpu, abs=0.5)
    log = [json.loads(x) for x in (tmp_path / "dipair" / "train_log.jsonl").read_text().splitlines()]
    assert [e["stage"] for e in log] == [1, 2] and log[-1]["sra_dev_cosine"] is not None
