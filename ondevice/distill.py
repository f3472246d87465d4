"""`ondevice distill`: teach a BiLSTM student to reproduce a teacher's sentence vectors (SRA, Wu et al.)."""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.corpus import read_corpus
from ondevice.errors import OndeviceError
from ondevice.io import (
    artifact_file,
    check_out_kind,
    dataclass_from_dict,
    read_json,
    sha256_text,
    write_json,
    write_text,
)
from ondevice.static_vectors import SPECS, TEACHER, random_word_vectors, teacher_word_vectors
from ondevice.student import POOLINGS, Student, StudentConfig, cosine_loss, similarity_matching_loss
from ondevice.teacher import BACKENDS
from ondevice.tokenizer import Tokenizer, build_vocab, count_tokens, pad_ids


@dataclass
class DistillConfig:
    """Every setting of a distillation run; saved as distill_config.json in the student dir."""

    corpus: str | list[str]  # one file or several, read in order
    max_sentences: int | None = None
    exclude_eval: bool = True  # drop any sentence of the shared data's evaluation material from the corpus
    # train-split sentences (text only, no scores) put in front of the corpus: True = STS-B's; or "stsb,sick,mrpc,qqp"
    train_splits: bool | str = False
    # in-domain upweighting: the train-split sentences appear this many times per epoch (Wikipedia once)
    train_split_repeats: int = 1
    teacher: str = "all-MiniLM-L6-v2"
    teacher_pooling: str = "mean"
    teacher_normalize: bool = True
    teacher_batch_size: int = 64
    teacher_backend: str = "torch"  # torch | onnx (same vectors, faster) | onnx-int8 (another, faster teacher)
    backend: str = "local"  # where teacher vectors are computed: local | ray (same cache; ondevice.scale.ray_label)
    ray_address: str = ""  # --backend ray: join this cluster (empty: start a local Ray)
    ray_workers: int = 0  # --backend ray: teacher actors (0: as many as the CPUs allow)
    # Defaults are the measured recipe of the shipped student (README "Recipe ablation"); the paper's GloVe 6B 50d
    # stays one flag away (--word-vectors glove-6b-50d --student-pooling mean).
    word_vectors: str = "teacher"  # "teacher" (teacher-derived), packaged "glove-6b-50d", a file, or "random"
    allow_pickle: bool = False  # gensim's pickled formats (.kv/.model/.wv) run code when loaded; see README
    # for "teacher"/"random" word vectors (0 = 100: +0.046 held-out cosine over 50 at full scale); files give their own
    embedding_dim: int = 0
    vocab_size: int = 40000  # with 100-d vectors the int8 bundle stays under 10 MB (9.4 MB)
    max_tokens: int = 128
    hidden_size: int = 256  # paper: 512; 256 trains 3x faster on 2 cores (see README)
    pooling: str = "max"
    freeze_embeddings: bool = False
    epochs: int = 4
    batch_size: int = 128  # paper: 1024 on a GPU; more, smaller steps learn faster on a CPU budget
    lr: float = 1e-3
    lr_schedule: str = "constant"  # constant | cosine (decay to 0 over the run; lost to constant at 20k x 2 epochs)
    warmup_steps: int = 0  # linear warmup from 0 over this many steps
    clip_grad_norm: float = 0.0
    sim_loss_weight: float = 0.0  # + this x in-batch similarity-matching loss (student vs teacher cosine matrices)
    # continue from this student dir: its vocabulary, architecture and weights (the run's own fields are set from it)
    init_from: str = ""
    init_sha256: str = ""  # filled in by `distill`: the weights it started from
    val_fraction: float = 0.02
    seed: int = 0
    threads: int = 0
    # where the torch teacher and the student train: cpu | cuda | cuda:N | auto; the run saves and resumes on any device
    device: str = "cpu"
    checkpoint_minutes: float = 5.0
    corpus_sha256: str = ""  # filled in by `distill`: what was read, wherever the file lives

    def validate(self) -> None:
        """Reject impossible values (NaN, inf, <= 0, absurd sizes) with a one-line error naming the flag."""
        from ondevice.checks import check_float, check_int
        from ondevice.devices import device_check
        from ondevice.eval.pair_tasks import check_unlabeled_tasks

        if self.train_splits is not False:
            check_unlabeled_tasks(train_split_tasks(self.train_splits))
        check_int(self.epochs, "--epochs", 1, 100_000)
        check_int(self.batch_size, "--batch-size", 1, 1 << 20)
        check_int(self.teacher_batch_size, "--teacher-batch-size", 1, 65_536)
        check_float(self.lr, "--lr", 0.0, 100.0, lo_open=True)
        check_int(self.hidden_size, "--hidden", 1, 8192)
        check_int(self.vocab_size, "--vocab-size", 1, 10_000_000)
        check_int(self.max_tokens, "--max-tokens", 1, 100_000)
        check_float(self.clip_grad_norm, "--clip-grad-norm", 0.0, 1e9)
        check_float(self.sim_loss_weight, "--sim-loss-weight", 0.0, 1e6)
        check_int(self.train_split_repeats, "--train-split-repeats", 1, 1000)
        check_float(self.checkpoint_minutes, "--checkpoint-minutes", 0.0, 1e6)
        check_int(self.threads, "--threads", 0, 4096)
        check_int(self.seed, "--seed", 0, 2**32 - 1)
        check_int(self.warmup_steps, "--warmup-steps", 0, 1 << 40)
        check_int(self.embedding_dim, "--embedding-dim", 0, 4096)
        check_int(self.ray_workers, "--ray-workers", 0, 100_000)
        if self.max_sentences is not None:
            check_int(self.max_sentences, "--max-sentences", 2, 1 << 40)
        checks = [
            (isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 0.5,
             "--val-fraction must be in (0, 0.5)"),
            (self.pooling in POOLINGS, f"--pooling must be one of {', '.join(POOLINGS)}"),
            (self.lr_schedule in LR_SCHEDULES, f"--lr-schedule must be one of {', '.join(LR_SCHEDULES)}"),
            (self.embedding_dim == 0 or self.word_vectors in SPECS,
             "--embedding-dim applies to --word-vectors teacher|random only (a file gives its own dimension)"),
            (self.teacher_backend in BACKENDS, f"--teacher-backend must be one of {', '.join(BACKENDS)}"),
            (self.backend in ("local", "ray"), "--backend must be local or ray"),
            (self.train_split_repeats == 1 or self.train_splits is not False,
             "--train-split-repeats needs --train-splits (it repeats their sentences)"),
            device_check(self.device),
            (not str(self.device).startswith("cuda") or self.teacher_backend == "torch",
             (f"--teacher-backend {self.teacher_backend} runs on the CPU (ONNX Runtime); use --teacher-backend torch "
              f"with --device {self.device}")),
        ]
        for ok, msg in checks:
            if not ok:
                raise OndeviceError(msg)


LR_SCHEDULES = ("constant", "cosine")
# Fields that must match for --resume to continue a run (architecture, data, targets, step sizes).
_RESUME_KEYS = ("max_sentences", "exclude_eval", "train_splits", "teacher", "teacher_pooling", "teacher_normalize", "teacher_backend",
                "word_vectors", "embedding_dim", "vocab_size", "max_tokens", "hidden_size", "pooling", "batch_size",
                "seed", "val_fraction", "lr_schedule", "warmup_steps", "sim_loss_weight", "train_split_repeats",
                "init_from")
# Fields an --init-from student decides (apply_init), copied from the saved config on --resume.
_INIT_FIELDS = ("init_from", "init_sha256", "hidden_size", "pooling", "max_tokens", "vocab_size", "word_vectors", "embedding_dim")


def lr_at(config: DistillConfig, step: int, total: int) -> float:
    """Learning rate at global `step` of `total`: linear warmup, then constant or cosine decay to 0."""
    scale = min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0
    if config.lr_schedule == "cosine":
        after = max(0, step - config.warmup_steps) / max(1, total - config.warmup_steps)
        scale *= 0.5 * (1.0 + math.cos(math.pi * min(1.0, after)))
    return config.lr * scale


def train_split_tasks(value: bool | str) -> tuple[str, ...]:
    """The tasks of a `train_splits` setting: True is STS-B alone (what the flag always meant), else a comma list."""
    from ondevice.eval.pair_tasks import task_list

    return ("stsb",) if value is True else task_list(str(value))


def read_sentences(config: DistillConfig) -> list[str]:
    """The corpus of `config`: train-split sentences if asked, then its files in order, without evaluation
    text when `exclude_eval`, capped at `max_sentences`."""
    return _read_corpus(config)[0]


def _read_corpus(config: DistillConfig) -> tuple[list[str], int]:
    """(sentences, how many of them at the front are train-split text)."""
    from ondevice.corpus import default_data_dir
    from ondevice.eval import data as eval_data
    from ondevice.eval.pair_tasks import unlabeled_train_sentences

    data = default_data_dir()
    exclude = eval_data.held_out_texts(data) if config.exclude_eval and data.is_dir() else set()
    files = [config.corpus] if isinstance(config.corpus, str) else list(config.corpus)
    if not config.train_splits:
        return read_corpus(files, config.max_sentences, exclude=exclude), 0
    first = unlabeled_train_sentences(eval_data.check_data_dir(data), train_split_tasks(config.train_splits))
    first = first[: config.max_sentences]
    rest = config.max_sentences - len(first) if config.max_sentences is not None else None
    return first + (read_corpus(files, rest, exclude=exclude) if rest != 0 else []), len(first)


def upweighted(train_idx: np.ndarray, n_front: int, repeats: int) -> np.ndarray:
    """Training indices with every index below `n_front` (train-split text) present `repeats` times."""
    if repeats <= 1 or n_front == 0:
        return train_idx
    front = train_idx[train_idx < n_front]
    return np.concatenate([train_idx] + [front] * (repeats - 1))


def apply_init(config: DistillConfig) -> Student:
    """Load `config.init_from` and set the config's architecture fields from it, so distill_config.json is true."""
    from ondevice.io import sha256_file

    if not config.init_from or not Path(config.init_from).is_dir():
        from ondevice.student import unpack_hint

        raise OndeviceError(f"--init-from {config.init_from!r} is not a folder; {unpack_hint(config.init_from)}")
    init = Student.load(config.init_from)
    c = init.config
    config.hidden_size, config.pooling, config.max_tokens = c.hidden_size, c.pooling, c.max_tokens
    config.vocab_size = c.vocab_size - 2  # [PAD] and [UNK] besides the corpus words
    config.word_vectors = c.word_vectors or config.word_vectors
    config.embedding_dim = c.embedding_dim if config.word_vectors in SPECS else 0
    config.init_sha256 = sha256_file(Path(config.init_from) / layouts.STUDENT_WEIGHTS)
    return init


def initial_embeddings(config: DistillConfig, counts: dict[str, int], teacher, progress: bool):
    """(vocabulary, embedding matrix, dimension label) for a new student from `config.word_vectors`."""
    if config.word_vectors in SPECS:
        dim = config.embedding_dim or 100
        vocab = build_vocab(counts, lambda t: True, config.vocab_size)
        if config.word_vectors == TEACHER:
            rows = teacher_word_vectors(teacher, vocab[2:], dim, progress=progress)
        else:
            rows = random_word_vectors(len(vocab) - 2, dim, config.seed)
        matrix = np.zeros((len(vocab), dim), dtype=np.float32)
        matrix[2:] = rows
        matrix[1] = rows.mean(axis=0)  # [UNK] starts as the mean word, like GloVe init
        return vocab, matrix
    from ondevice.wordvectors import embedding_matrix, load_word_vectors

    kv = load_word_vectors(config.word_vectors, allow_pickle=config.allow_pickle)
    vocab = build_vocab(counts, lambda t: t in kv.key_to_index, config.vocab_size)
    return vocab, embedding_matrix(kv, vocab)


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic train / held-out indices."""
    perm = np.random.default_rng(seed).permutation(n)
    n_val = int(min(5000, max(1, round(n * fraction))))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _batches(lengths: np.ndarray, batch_size: int, epoch_seed: int) -> list[np.ndarray]:
    """Shuffled batches of similar-length sentences (less padding), fixed by `epoch_seed`."""
    torch = require("torch", "train")
    gen = torch.Generator().manual_seed(epoch_seed)
    perm = torch.randperm(len(lengths), generator=gen).numpy()
    pool = batch_size * 50
    batches = []
    for s in range(0, len(perm), pool):
        chunk = perm[s : s + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=gen).numpy()
    return [batches[i] for i in order]


def _save_checkpoint(out: Path, student: Student, opt, state: dict) -> None:
    """Model, optimizer and position, written to a temp dir and swapped in whole."""
    torch = require("torch", "train")
    st = require("safetensors.torch", "train")
    tmp, final, old = out / f".{layouts.CHECKPOINT}.tmp", out / layouts.CHECKPOINT, out / f".{layouts.CHECKPOINT}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    st.save_file({k: v.detach().cpu().contiguous() for k, v in student.model.state_dict().items()}, str(tmp / layouts.CKPT_WEIGHTS))
    osd = opt.state_dict()
    tensors = {f"{i}.{k}": (v.detach().cpu() if torch.is_tensor(v) else torch.tensor(v)).contiguous()
               for i, s in osd["state"].items() for k, v in s.items()}
    st.save_file(tensors, str(tmp / layouts.CKPT_OPTIMIZER))
    write_json(tmp / layouts.CKPT_STATE, {**state, "param_groups": osd["param_groups"]})
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def _complete(folder: Path) -> bool:
    """Whether a checkpoint folder was fully written (state.json is written last)."""
    return all((folder / n).is_file() for n in (layouts.CKPT_WEIGHTS, layouts.CKPT_OPTIMIZER, layouts.CKPT_STATE))


def recover_checkpoint(out: Path) -> bool:
    """Finish a checkpoint swap that a kill interrupted; True when `out` then holds a checkpoint.

    A save writes .checkpoint.tmp, renames checkpoint -> .checkpoint.old, .checkpoint.tmp -> checkpoint, then deletes
    .checkpoint.old. Killed between the renames, the complete .tmp is the newest state and .old the one before.
    """
    tmp, final, old = out / f".{layouts.CHECKPOINT}.tmp", out / layouts.CHECKPOINT, out / f".{layouts.CHECKPOINT}.old"
    if not final.exists():
        for candidate in (tmp, old):
            if candidate.is_dir() and _complete(candidate):
                candidate.rename(final)
                break
    if final.exists():
        if old.exists():  # the new checkpoint is in place; the previous one is no longer needed
            shutil.rmtree(old, ignore_errors=True)
        return True
    return False


def _diverged(out: Path, what: str) -> OndeviceError:
    kept = ("the last good checkpoint is kept: continue with --resume and a lower --lr (or --clip-grad-norm)"
            if (out / layouts.CHECKPOINT).exists() else "no checkpoint was written yet: rerun with a lower --lr")
    return OndeviceError(f"training diverged {what}; {kept}; check the word vectors and teacher vectors are finite")


def _check_finite(model, out: Path, where: str) -> None:
    torch = require("torch", "train")
    bad = [n for n, p in model.state_dict().items() if not bool(torch.isfinite(p).all())]
    if bad:
        raise _diverged(out, f"{where}: NaN or inf weights in {bad[0]}")


@contextmanager
def checkpoint_errors(folder: Path, fix: str = "run without --resume, or with a new --out") -> Iterator[None]:
    """Turn a damaged or foreign checkpoint (bad safetensors, missing keys, shapes of another model) into one line."""
    from safetensors import SafetensorError

    try:
        yield
    except OndeviceError:
        raise
    except (SafetensorError, OSError, KeyError, ValueError, TypeError, IndexError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise OndeviceError(f"checkpoint {folder} cannot be loaded ({type(exc).__name__}: {first}); it is damaged or "
                            f"from another run: {fix}") from None


def load_optimizer(opt, flat: dict, param_groups: Any) -> None:
    """Restore an optimizer from its flat `<param index>.<name>` tensors and its saved param groups."""
    opt_state: dict = {}
    for key, value in flat.items():
        i, name = key.split(".", 1)
        opt_state.setdefault(int(i), {})[name] = value
    opt.load_state_dict({"state": opt_state, "param_groups": param_groups})


def checkpoint_file(out: Path, name: str) -> Path:
    """`out`/checkpoint/`name`, refused when it (or the checkpoint folder) is a link, pipe or device: a resumed run
    reads only its own plain files."""
    return artifact_file(out, f"{layouts.CHECKPOINT}/{name}", "run")


def _load_checkpoint(out: Path, student: Student, opt) -> dict:
    st = require("safetensors.torch", "train")
    folder = out / layouts.CHECKPOINT
    state = read_json(checkpoint_file(out, layouts.CKPT_STATE), "checkpoint state")
    with checkpoint_errors(folder):
        if not isinstance(state, dict):
            raise TypeError("state.json is not an object")
        student.model.load_state_dict(st.load_file(str(checkpoint_file(out, layouts.CKPT_WEIGHTS))))
        load_optimizer(opt, st.load_file(str(checkpoint_file(out, layouts.CKPT_OPTIMIZER))), state["param_groups"])
    return state


def _held_out_cosine(student: Student, ids: list[np.ndarray], targets: np.ndarray, batch_size: int = 512) -> float:
    from ondevice.devices import on_device

    torch = require("torch", "train")
    student.model.eval()
    device = next(student.model.parameters()).device
    total = 0.0
    with torch.inference_mode():
        for s in range(0, len(ids), batch_size):
            x, lengths = pad_ids(ids[s : s + batch_size])
            pred = student.model(on_device(x, device), on_device(lengths, device))
            t = on_device(np.ascontiguousarray(targets[s : s + batch_size]), device)
            total += float(torch.nn.functional.cosine_similarity(pred, t, dim=-1).sum())
    return total / max(1, len(ids))


def distill(config: DistillConfig, out_dir: str | Path, resume: bool = False, progress: bool = True) -> Student:
    """Run (or resume) a distillation and return the trained student, also saved in `out_dir`."""
    from tqdm.auto import tqdm

    torch = require("torch", "train")
    from ondevice.devices import on_device, resolve_device
    from ondevice.teacher import Teacher, cached_vectors
    from ondevice.wordvectors import DEFAULT, refuse_pickle

    config.validate()
    device = resolve_device(config.device)  # before any work: --device cuda on a machine without one is one line
    if str(config.word_vectors) not in (DEFAULT, *SPECS):  # a file: checked before minutes of teacher work
        vectors = Path(config.word_vectors)
        if vectors.is_file():
            refuse_pickle(vectors, config.allow_pickle)
        elif not (resume or config.init_from):  # read by this run (a resumed or continued one takes its words elsewhere)
            problem = f"{vectors} is a folder" if vectors.is_dir() else f"not found: {vectors}"
            raise OndeviceError(f"word vectors {problem}; pass --word-vectors FILE (word2vec/GloVe text or binary, .vec), "
                                f"or one of {', '.join(SPECS)}, {DEFAULT}")
    out = check_out_kind(out_dir, "student")
    ckpt = out / layouts.CHECKPOINT
    if out.is_dir():
        recover_checkpoint(out)
    if ckpt.exists() and not resume:
        raise OndeviceError(f"{out} holds a checkpoint of an earlier run; pass --resume to continue it, or choose another --out")
    if resume and not ckpt.exists():
        raise OndeviceError(f"nothing to resume in {out} (no {layouts.CHECKPOINT}/); run without --resume")
    if not resume and layouts.identify(out) == "student":  # a trained (or unpacked) student is never trained over
        raise OndeviceError(f"{out} already holds a student; choose another --out (or delete that folder to train "
                            "again)")
    if config.threads:
        torch.set_num_threads(config.threads)

    init = apply_init(config) if config.init_from and not resume else None
    sentences, n_front = _read_corpus(config)
    config.corpus_sha256 = sha256_text(sentences)
    if resume:
        saved = dataclass_from_dict(DistillConfig, read_json(out / layouts.DISTILL_CONFIG, "distill config"), "distill config")
        if saved.init_from:  # the checkpoint holds the weights: --init-from need not be repeated (nor still exist)
            for k in _INIT_FIELDS:
                setattr(config, k, getattr(saved, k))
        # The corpus is compared by content, so a moved or renamed file still resumes.
        diff = [k for k in (*_RESUME_KEYS, "corpus_sha256") if getattr(saved, k) != getattr(config, k)]
        if diff:
            detail = ", ".join(f"{k}: {getattr(saved, k)!r} -> {getattr(config, k)!r}" for k in diff)
            raise OndeviceError(f"--resume with different settings ({detail}); use the original flags or a new --out")
    if len(sentences) < 2:
        raise OndeviceError("corpus needs at least 2 sentences (one to train on, one held out)")
    train_idx, val_idx = _split(len(sentences), config.val_fraction, config.seed)

    teacher = Teacher(config.teacher, pooling=config.teacher_pooling, normalize=config.teacher_normalize,
                      backend=config.teacher_backend, threads=config.threads,
                      device=device if config.backend == "local" and config.teacher_backend == "torch" else "cpu")
    if config.backend == "ray":
        from ondevice.scale.ray_label import ray_cached_vectors

        targets = ray_cached_vectors(teacher, sentences, batch_size=config.teacher_batch_size, progress=progress,
                                     address=config.ray_address or None, workers=config.ray_workers,
                                     cpus_per_worker=max(1, config.threads))
    else:
        targets = cached_vectors(teacher, sentences, batch_size=config.teacher_batch_size, progress=progress)

    if resume:
        tokenizer = Tokenizer.load(out)
        student_cfg = dataclass_from_dict(StudentConfig, read_json(out / layouts.STUDENT_CONFIG, "student config"), "student config")
        student_cfg.validate(f"{out / 'config.json'}")  # before anything is allocated from its sizes
        if student_cfg.vocab_size != len(tokenizer):
            raise OndeviceError(f"{out / 'config.json'} says vocab_size {student_cfg.vocab_size} but {out} holds a "
                                f"vocabulary of {len(tokenizer)} words; the run folder is damaged, use a new --out")
        if student_cfg.output_dim != teacher.dim:
            raise OndeviceError(f"checkpoint outputs {student_cfg.output_dim}-d vectors but the teacher gives {teacher.dim}-d; use the original teacher")
        student = Student(student_cfg, tokenizer)
    elif init is not None:
        if init.config.output_dim != teacher.dim:
            raise OndeviceError(f"--init-from {config.init_from} outputs {init.config.output_dim}-d vectors but the teacher "
                                f"gives {teacher.dim}-d; start from a student of this teacher")
        init.config.teacher = asdict(teacher.info)  # what this run's targets came from
        student, tokenizer = init, init.tokenizer
    else:
        counts = count_tokens((sentences[i] for i in train_idx), config.max_tokens)
        vocab, matrix = initial_embeddings(config, counts, teacher, progress)
        tokenizer = Tokenizer(vocab, max_tokens=config.max_tokens)
        student_cfg = StudentConfig(
            vocab_size=len(vocab), embedding_dim=int(matrix.shape[1]), hidden_size=config.hidden_size,
            pooling=config.pooling, output_dim=teacher.dim, max_tokens=config.max_tokens,
            teacher=asdict(teacher.info), word_vectors=str(config.word_vectors),
        )
        student = Student.from_embeddings(student_cfg, tokenizer, matrix, seed=config.seed)

    model = student.model.to(device)
    model.embedding.weight.requires_grad_(not config.freeze_embeddings)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    state = {"epoch": 0, "step": 0, "log": []}
    if resume:
        state = _load_checkpoint(out, student, opt)
        state.pop("param_groups", None)
        write_json(out / layouts.DISTILL_CONFIG, config)  # settings that may change on resume (threads, ...)
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / layouts.DISTILL_CONFIG, config)
        student.save(out)

    ids = [np.asarray(tokenizer.ids(s), dtype=np.int64) for s in sentences]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    train_idx = upweighted(train_idx, n_front, config.train_split_repeats)
    train_ids, val_ids = [ids[i] for i in train_idx], [ids[i] for i in val_idx]
    train_t, val_t = np.asarray(targets[train_idx]), np.asarray(targets[val_idx])
    train_len = lengths[train_idx]

    def checkpoint(epoch: int, step: int) -> None:
        _check_finite(model, out, f"at epoch {epoch + 1}, batch {step}")  # never replace a good checkpoint with NaN
        _save_checkpoint(out, student, opt, {"epoch": epoch, "step": step, "log": state["log"]})

    last_ckpt = time.monotonic()
    epoch, step = state["epoch"], state["step"]
    try:
        while epoch < config.epochs:
            batches = _batches(train_len, config.batch_size, config.seed * 1000003 + epoch)
            total_steps = config.epochs * len(batches)
            model.train()
            losses: list[float] = []
            epoch_start = time.monotonic()
            bar = tqdm(batches[step:], desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch", disable=not progress)
            for b in bar:
                x, lens = pad_ids([train_ids[i] for i in b])
                pred = model(on_device(x, device), on_device(lens, device))
                target = on_device(train_t[b], device)
                loss = cosine_loss(pred, target)
                if config.sim_loss_weight > 0:
                    loss = loss + config.sim_loss_weight * similarity_matching_loss(pred, target.to(pred.dtype))
                if not bool(torch.isfinite(loss)):  # stop before NaN reaches the weights, checkpoint or student
                    raise _diverged(out, f"at epoch {epoch + 1}, batch {step + 1}: the loss is {loss.item()}")
                for group in opt.param_groups:
                    group["lr"] = lr_at(config, epoch * len(batches) + step, total_steps)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if config.clip_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
                opt.step()
                step += 1
                losses.append(loss.item())
                if len(losses) % 20 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
                if config.checkpoint_minutes > 0 and time.monotonic() - last_ckpt > config.checkpoint_minutes * 60:
                    checkpoint(epoch, step)
                    last_ckpt = time.monotonic()
            bar.close()
            val = _held_out_cosine(student, val_ids, val_t)
            entry = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None,
                     "held_out_cosine": round(val, 6), "held_out_n": len(val_ids), "time": time.time(),
                     "seconds": round(time.monotonic() - epoch_start, 3)}  # this process's share of the epoch
            state["log"].append(entry)
            if progress:
                print(f"epoch {epoch + 1}: train loss {entry['train_loss']:.4f}, held-out cosine to teacher {val:.4f}", flush=True)
            epoch, step = epoch + 1, 0
            checkpoint(epoch, step)  # checks the weights are finite before the student is saved too
            last_ckpt = time.monotonic()
            student.save(out)
            write_text(out / layouts.TRAIN_LOG, "".join(json.dumps(e) + "\n" for e in state["log"]))
    except KeyboardInterrupt:
        checkpoint(epoch, step)
        raise OndeviceError(f"interrupted at epoch {epoch + 1}, batch {step}; checkpoint saved, continue with --resume") from None
    model.eval().cpu()  # the returned student encodes like a loaded one, on the CPU
    return student
