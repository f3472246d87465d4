"""`ondevice distill`: teach a BiLSTM student to reproduce a teacher's sentence vectors (SRA, Wu et al.)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ondevice import checkpoints, configs, layouts
from ondevice._deps import require
from ondevice.configs import (
    Architecture,
    Check,
    Checkpointing,
    Composed,
    Compute,
    Optimization,
    Schedule,
    choice_check,
    composed,
    first_problem,
    float_check,
    int_check,
    literal,
    seed_check,
)
from ondevice.corpus import default_data_dir, read_corpus
from ondevice.devices import on_device, resolve_device
from ondevice.errors import OndeviceError
from ondevice.eval import data as eval_data
from ondevice.eval.pair_tasks import task_list, unlabeled_tasks_problem
from ondevice.io import check_out_kind, dataclass_from_dict, read_json, sha256_file, sha256_text
from ondevice.static_vectors import SPECS, TEACHER, random_word_vectors, teacher_word_vectors
from ondevice.student import Student, StudentConfig, cosine_loss, similarity_matching_loss, unpack_hint
from ondevice.teacher import BACKENDS
from ondevice.tokenizer import Tokenizer, build_vocab, count_tokens, pad_ids
from ondevice.trainloop import (
    Every,
    Position,
    check_loss,
    check_start,
    check_weights,
    refuse_changes,
    run_epochs,
    start_or_resume,
    write_log,
)


@dataclass
class Corpus:
    """The text a distillation reads: files, what is left out or put in front, and what is held out."""

    corpus: str | list[str] = ""  # one file or several, read in order
    max_sentences: int | None = None
    exclude_eval: bool = True  # drop any sentence of the shared data's evaluation material from the corpus
    # train-split sentences (text only, no scores) put in front of the corpus: True = STS-B's; or "stsb,sick,mrpc,qqp"
    train_splits: bool | str = False
    # in-domain upweighting: the train-split sentences appear this many times per epoch (Wikipedia once)
    train_split_repeats: int = 1
    val_fraction: float = 0.02
    corpus_sha256: str = ""  # filled in by `distill`: what was read, wherever the file lives

    def checks(self) -> list[Check]:
        """Known train-split tasks, counts in range, a held-out fraction in (0, 0.5)."""
        problem = unlabeled_tasks_problem(train_split_tasks(self.train_splits), "{train_splits}") \
            if self.train_splits is not False else ""
        return [(not problem, problem), int_check(self.train_split_repeats, "train_split_repeats", 1, 1000),
                int_check(self.max_sentences, "max_sentences", 2, 1 << 40) if self.max_sentences is not None else (True, ""),
                (isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 0.5,
                 "{val_fraction} must be in (0, 0.5)"),
                (self.train_split_repeats == 1 or self.train_splits is not False,
                 "{train_split_repeats} needs {train_splits} (it repeats their sentences)")]


@dataclass
class TeacherSettings:
    """The teacher whose sentence vectors the student learns, and where those vectors are computed."""

    FLAT_NAMES: ClassVar[dict[str, str]] = {
        "name": "teacher", "pooling": "teacher_pooling", "normalize": "teacher_normalize",
        "batch_size": "teacher_batch_size", "runtime": "teacher_backend", "backend": "backend",
        "ray_address": "ray_address", "ray_workers": "ray_workers"}

    name: str = "all-MiniLM-L6-v2"
    pooling: str = "mean"
    normalize: bool = True
    batch_size: int = 64
    runtime: str = "torch"  # torch | onnx (same vectors, faster) | onnx-int8 (another, faster teacher)
    backend: str = "local"  # where teacher vectors are computed: local | ray (same cache; ondevice.scale.ray_label)
    ray_address: str = ""  # backend ray: join this cluster (empty: start a local Ray)
    ray_workers: int = 0  # backend ray: teacher actors (0: as many as the CPUs allow)

    def checks(self) -> list[Check]:
        """Batch size and worker count in range, a known runtime and backend."""
        return [int_check(self.batch_size, "teacher_batch_size", 1, 65_536),
                int_check(self.ray_workers, "ray_workers", 0, 100_000),
                choice_check(self.runtime, "teacher_backend", BACKENDS),
                (self.backend in ("local", "ray"), "{backend} must be local or ray")]


@dataclass
class WordVectors:
    """Where a new student's word embeddings start, and how many words it keeps."""

    # Defaults are the measured recipe of the shipped student (README "Recipe ablation"); the paper's GloVe 6B 50d
    # stays one setting away (word_vectors "glove-6b-50d", pooling "mean").
    word_vectors: str = "teacher"  # "teacher" (teacher-derived), packaged "glove-6b-50d", a file, or "random"
    allow_pickle: bool = False  # gensim's pickled formats (.kv/.model/.wv) run code when loaded; see README
    # for "teacher"/"random" word vectors (0 = 100: +0.046 held-out cosine over 50 at full scale); files give their own
    embedding_dim: int = 0
    vocab_size: int = 40000  # with 100-d vectors the int8 bundle stays under 10 MB (9.4 MB)
    freeze_embeddings: bool = False

    def checks(self) -> list[Check]:
        """Sizes in range; a dimension only where the vectors are made here."""
        return [int_check(self.vocab_size, "vocab_size", 1, 10_000_000),
                int_check(self.embedding_dim, "embedding_dim", 0, 4096),
                (self.embedding_dim == 0 or self.word_vectors in SPECS,
                 "{embedding_dim} applies to {word_vectors} teacher|random only (a file gives its own dimension)")]


@composed
class DistillConfig(Composed):
    """Every setting of a distillation run, in pieces; saved (flat) as distill_config.json in the student dir."""

    REQUIRED = ("corpus",)

    text: Corpus = field(default_factory=Corpus)
    teaching: TeacherSettings = field(default_factory=TeacherSettings)
    words: WordVectors = field(default_factory=WordVectors)
    arch: Architecture = field(default_factory=lambda: Architecture(pooling="max"))
    # paper: batch 1024 on a GPU; more, smaller steps learn faster on a CPU budget
    optim: Optimization = field(default_factory=lambda: Optimization(epochs=4, batch_size=128, lr=1e-3))
    schedule: Schedule = field(default_factory=Schedule)
    sim_loss_weight: float = 0.0  # + this x in-batch similarity-matching loss (student vs teacher cosine matrices)
    # continue from this student dir: its vocabulary, architecture and weights (the run's own fields are set from it)
    init_from: str = ""
    init_sha256: str = ""  # filled in by `distill`: the weights it started from
    seed: int = 0
    # where the torch teacher and the student train: cpu | cuda | cuda:N | auto; the run saves and resumes on any device
    compute: Compute = field(default_factory=Compute)
    checkpoint: Checkpointing = field(default_factory=Checkpointing)

    def validate(self) -> None:
        """Reject impossible values (NaN, inf, <= 0, absurd sizes) with a one-line ConfigError naming the field."""
        first_problem([
            *self.text.checks(), *self.optim.checks(), *self.teaching.checks(), *self.arch.checks(),
            *self.words.checks(), *self.schedule.checks(), *self.checkpoint.checks(), *self.compute.checks(),
            float_check(self.sim_loss_weight, "sim_loss_weight", 0.0, 1e6), seed_check(self.seed),
            (not str(self.compute.device).startswith("cuda") or self.teaching.runtime == "torch",
             (f"{{teacher_backend}} {literal(self.teaching.runtime)} runs on the CPU (ONNX Runtime); use "
              f"{{teacher_backend}} torch with {{device}} {literal(self.compute.device)}")),
        ])


LR_SCHEDULES = configs.LR_SCHEDULES
# Fields that must match for --resume to continue a run (architecture, data, targets, step sizes).
_RESUME_KEYS = ("max_sentences", "exclude_eval", "train_splits", "teacher", "teacher_pooling", "teacher_normalize", "teacher_backend",
                "word_vectors", "embedding_dim", "vocab_size", "max_tokens", "hidden_size", "pooling", "batch_size",
                "seed", "val_fraction", "lr_schedule", "warmup_steps", "sim_loss_weight", "train_split_repeats",
                "init_from")
# Fields an --init-from student decides (apply_init), copied from the saved config on --resume.
_INIT_FIELDS = ("init_from", "init_sha256", "hidden_size", "pooling", "max_tokens", "vocab_size", "word_vectors", "embedding_dim")


def lr_at(config: DistillConfig, step: int, total: int) -> float:
    """Learning rate at global `step` of `total`: linear warmup, then constant or cosine decay to 0."""
    schedule = config.schedule
    scale = min(1.0, (step + 1) / schedule.warmup_steps) if schedule.warmup_steps else 1.0
    if schedule.lr_schedule == "cosine":
        after = max(0, step - schedule.warmup_steps) / max(1, total - schedule.warmup_steps)
        scale *= 0.5 * (1.0 + math.cos(math.pi * min(1.0, after)))
    return config.optim.lr * scale


def train_split_tasks(value: bool | str) -> tuple[str, ...]:
    """The tasks of a `train_splits` setting: True is STS-B alone (what the flag always meant), else a comma list."""
    return ("stsb",) if value is True else task_list(str(value))


def read_sentences(config: DistillConfig) -> list[str]:
    """The corpus of `config`: train-split sentences if asked, then its files in order, without evaluation
    text when `exclude_eval`, capped at `max_sentences`."""
    return _read_corpus(config)[0]


def _read_corpus(config: DistillConfig) -> tuple[list[str], int]:
    """(sentences, how many of them at the front are train-split text)."""
    # looked up on each call, so a patched attribute is seen
    from ondevice.eval.pair_tasks import unlabeled_train_sentences

    text = config.text
    data = default_data_dir()
    exclude = eval_data.held_out_texts(data) if text.exclude_eval and data.is_dir() else set()
    files = [text.corpus] if isinstance(text.corpus, str) else list(text.corpus)
    if not text.train_splits:
        return read_corpus(files, text.max_sentences, exclude=exclude), 0
    first = unlabeled_train_sentences(eval_data.check_data_dir(data), train_split_tasks(text.train_splits))
    first = first[: text.max_sentences]
    rest = text.max_sentences - len(first) if text.max_sentences is not None else None
    return first + (read_corpus(files, rest, exclude=exclude) if rest != 0 else []), len(first)


def upweighted(train_idx: np.ndarray, n_front: int, repeats: int) -> np.ndarray:
    """Training indices with every index below `n_front` (train-split text) present `repeats` times."""
    if repeats <= 1 or n_front == 0:
        return train_idx
    front = train_idx[train_idx < n_front]
    return np.concatenate([train_idx] + [front] * (repeats - 1))


def apply_init(config: DistillConfig) -> Student:
    """Load `config.init_from` and set the config's architecture fields from it, so distill_config.json is true."""
    if not config.init_from or not Path(config.init_from).is_dir():
        raise OndeviceError(f"--init-from {config.init_from!r} is not a folder; {unpack_hint(config.init_from)}")
    init = Student.load(config.init_from)
    c, words = init.config, config.words
    config.arch = Architecture(hidden_size=c.hidden_size, pooling=c.pooling, max_tokens=c.max_tokens)
    words.vocab_size = c.vocab_size - 2  # [PAD] and [UNK] besides the corpus words
    words.word_vectors = c.word_vectors or words.word_vectors
    words.embedding_dim = c.embedding_dim if words.word_vectors in SPECS else 0
    config.init_sha256 = sha256_file(Path(config.init_from) / layouts.STUDENT_WEIGHTS)
    return init


def initial_embeddings(config: DistillConfig, counts: dict[str, int], teacher, progress: bool):
    """(vocabulary, embedding matrix) for a new student from `config.words`."""
    words = config.words
    if words.word_vectors in SPECS:
        dim = words.embedding_dim or 100
        vocab = build_vocab(counts, lambda t: True, words.vocab_size)
        if words.word_vectors == TEACHER:
            rows = teacher_word_vectors(teacher, vocab[2:], dim, progress=progress)
        else:
            rows = random_word_vectors(len(vocab) - 2, dim, config.seed)
        matrix = np.zeros((len(vocab), dim), dtype=np.float32)
        matrix[2:] = rows
        matrix[1] = rows.mean(axis=0)  # [UNK] starts as the mean word, like GloVe init
        return vocab, matrix
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.wordvectors import embedding_matrix, load_word_vectors

    kv = load_word_vectors(words.word_vectors, allow_pickle=words.allow_pickle)
    vocab = build_vocab(counts, lambda t: t in kv.key_to_index, words.vocab_size)
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


def _held_out_cosine(student: Student, ids: list[np.ndarray], targets: np.ndarray, batch_size: int = 512) -> float:
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


def _check_word_vectors(config: DistillConfig, resume: bool) -> None:
    """A word-vectors file is checked before minutes of teacher work (a resumed or continued run takes its words
    elsewhere, so the file need not exist then)."""
    from ondevice.wordvectors import DEFAULT, refuse_pickle

    words = config.words
    if str(words.word_vectors) in (DEFAULT, *SPECS):
        return
    vectors = Path(words.word_vectors)
    if vectors.is_file():
        refuse_pickle(vectors, words.allow_pickle)
    elif not (resume or config.init_from):
        problem = f"{vectors} is a folder" if vectors.is_dir() else f"not found: {vectors}"
        raise OndeviceError(f"word vectors {problem}; pass --word-vectors FILE (word2vec/GloVe text or binary, .vec), "
                            f"or one of {', '.join(SPECS)}, {DEFAULT}")


def _start(config: DistillConfig, out_dir: str | Path, resume: bool) -> Path:
    """The run folder, checked: a checkpoint only with --resume (an interrupted swap finished first), never over a
    trained student."""
    out = check_out_kind(out_dir, "student")
    if out.is_dir():
        checkpoints.recover(out)
    check_start(out, resume, (out / layouts.CHECKPOINT).exists(), f"{layouts.CHECKPOINT}/")
    if not resume and layouts.identify(out) == "student":  # a trained (or unpacked) student is never trained over
        raise OndeviceError(f"{out} already holds a student; choose another --out (or delete that folder to train "
                            "again)")
    return out


def _same_run(config: DistillConfig, out: Path) -> None:
    """--resume continues the saved run: its --init-from fields are taken over, the rest must match."""
    saved = DistillConfig.from_dict(read_json(out / layouts.DISTILL_CONFIG, "distill config"), "distill config")
    if saved.init_from:  # the checkpoint holds the weights: --init-from need not be repeated (nor still exist)
        for k in _INIT_FIELDS:
            setattr(config, k, getattr(saved, k))
    refuse_changes(saved, config, (*_RESUME_KEYS, "corpus_sha256"))  # the corpus by content: a moved file resumes


def _targets(config: DistillConfig, sentences: list[str], device: str, progress: bool):
    """(teacher, its vectors of `sentences`), computed here or on Ray, cached on disk."""
    from ondevice.teacher import Teacher, cached_vectors

    t = config.teaching
    teacher = Teacher(t.name, pooling=t.pooling, normalize=t.normalize, backend=t.runtime, threads=config.threads,
                      device=device if t.backend == "local" and t.runtime == "torch" else "cpu")
    if t.backend == "ray":
        from ondevice.scale.ray_label import ray_cached_vectors

        return teacher, ray_cached_vectors(teacher, sentences, batch_size=t.batch_size, progress=progress,
                                           address=t.ray_address or None, workers=t.ray_workers,
                                           cpus_per_worker=max(1, config.threads))
    return teacher, cached_vectors(teacher, sentences, batch_size=t.batch_size, progress=progress)


def _resumed_student(out: Path, teacher) -> Student:
    """The student of the run folder being resumed (its weights come from the checkpoint)."""
    tokenizer = Tokenizer.load(out)
    student_cfg = dataclass_from_dict(StudentConfig, read_json(out / layouts.STUDENT_CONFIG, "student config"), "student config")
    student_cfg.validate(f"{out / 'config.json'}")  # before anything is allocated from its sizes
    if student_cfg.vocab_size != len(tokenizer):
        raise OndeviceError(f"{out / 'config.json'} says vocab_size {student_cfg.vocab_size} but {out} holds a "
                            f"vocabulary of {len(tokenizer)} words; the run folder is damaged, use a new --out")
    if student_cfg.output_dim != teacher.dim:
        raise OndeviceError(f"checkpoint outputs {student_cfg.output_dim}-d vectors but the teacher gives {teacher.dim}-d; use the original teacher")
    return Student(student_cfg, tokenizer)


def _new_student(config: DistillConfig, sentences: list[str], train_idx: np.ndarray, teacher, progress: bool) -> Student:
    """A fresh student: vocabulary from the training sentences, embeddings from `config.words`, the rest seeded."""
    counts = count_tokens((sentences[i] for i in train_idx), config.arch.max_tokens)
    vocab, matrix = initial_embeddings(config, counts, teacher, progress)
    tokenizer = Tokenizer(vocab, max_tokens=config.arch.max_tokens)
    student_cfg = StudentConfig(
        vocab_size=len(vocab), embedding_dim=int(matrix.shape[1]), **asdict(config.arch), output_dim=teacher.dim,
        teacher=asdict(teacher.info), word_vectors=str(config.words.word_vectors),
    )
    return Student.from_embeddings(student_cfg, tokenizer, matrix, seed=config.seed)


def _kept(out: Path) -> str:
    """What a diverged run leaves and how to continue."""
    kept = ("the last good checkpoint is kept: continue with --resume and a lower --lr (or --clip-grad-norm)"
            if (out / layouts.CHECKPOINT).exists() else "no checkpoint was written yet: rerun with a lower --lr")
    return f"{kept}; check the word vectors and teacher vectors are finite"


def distill(config: DistillConfig, out_dir: str | Path, resume: bool = False, progress: bool = True) -> Student:
    """Run (or resume) a distillation and return the trained student, also saved in `out_dir`."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    torch = require("torch", "train")

    config.validate()
    device = resolve_device(config.device)  # before any work: --device cuda on a machine without one is one line
    _check_word_vectors(config, resume)
    out = _start(config, out_dir, resume)
    if config.threads:
        torch.set_num_threads(config.threads)

    init = apply_init(config) if config.init_from and not resume else None
    sentences, n_front = _read_corpus(config)
    config.corpus_sha256 = sha256_text(sentences)
    if resume:
        _same_run(config, out)
    if len(sentences) < 2:
        raise OndeviceError("corpus needs at least 2 sentences (one to train on, one held out)")
    train_idx, val_idx = _split(len(sentences), config.text.val_fraction, config.seed)
    teacher, targets = _targets(config, sentences, device, progress)

    if resume:
        student = _resumed_student(out, teacher)
    elif init is not None:
        if init.config.output_dim != teacher.dim:
            raise OndeviceError(f"--init-from {config.init_from} outputs {init.config.output_dim}-d vectors but the teacher "
                                f"gives {teacher.dim}-d; start from a student of this teacher")
        init.config.teacher = asdict(teacher.info)  # what this run's targets came from
        student = init
    else:
        student = _new_student(config, sentences, train_idx, teacher, progress)
    tokenizer = student.tokenizer

    model = student.model.to(device)
    model.embedding.weight.requires_grad_(not config.words.freeze_embeddings)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.optim.lr)
    state = start_or_resume(out, model, opt, config, layouts.DISTILL_CONFIG, resume, {"epoch": 0, "step": 0, "log": []})
    if not resume:
        student.save(out)

    ids = [np.asarray(tokenizer.ids(s), dtype=np.int64) for s in sentences]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    train_idx = upweighted(train_idx, n_front, config.text.train_split_repeats)
    train_ids, val_ids = [ids[i] for i in train_idx], [ids[i] for i in val_idx]
    train_t, val_t = np.asarray(targets[train_idx]), np.asarray(targets[val_idx])
    train_len = lengths[train_idx]
    optim, log, timer = config.optim, state["log"], Every(config.checkpoint.checkpoint_minutes)

    def save(pos: Position) -> None:
        check_weights(model, f"at epoch {pos.epoch + 1}, batch {pos.step}", lambda: _kept(out))  # never NaN over a good one
        checkpoints.save(out, model, opt, {"epoch": pos.epoch, "step": pos.step, "log": log})
        timer.reset()

    def train_epoch(pos: Position) -> dict:
        batches = _batches(train_len, optim.batch_size, config.seed * 1000003 + pos.epoch)
        total_steps = optim.epochs * len(batches)
        model.train()
        losses: list[float] = []
        epoch_start = time.monotonic()
        bar = tqdm(batches[pos.step:], desc=f"epoch {pos.epoch + 1}/{optim.epochs}", unit="batch", disable=not progress)
        for b in bar:
            x, lens = pad_ids([train_ids[i] for i in b])
            pred = model(on_device(x, device), on_device(lens, device))
            target = on_device(train_t[b], device)
            loss = cosine_loss(pred, target)
            if config.sim_loss_weight > 0:
                loss = loss + config.sim_loss_weight * similarity_matching_loss(pred, target.to(pred.dtype))
            check_loss(loss, f"at epoch {pos.epoch + 1}, batch {pos.step + 1}", lambda: _kept(out))
            for group in opt.param_groups:
                group["lr"] = lr_at(config, pos.epoch * len(batches) + pos.step, total_steps)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.schedule.clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.schedule.clip_grad_norm)
            opt.step()
            pos.step += 1
            losses.append(loss.item())
            if len(losses) % 20 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
            if timer.due():
                save(pos)
        bar.close()
        val = _held_out_cosine(student, val_ids, val_t)
        entry = {"epoch": pos.epoch + 1, "train_loss": float(np.mean(losses)) if losses else None,
                 "held_out_cosine": round(val, 6), "held_out_n": len(val_ids), "time": time.time(),
                 "seconds": round(time.monotonic() - epoch_start, 3)}  # this process's share of the epoch
        if progress:
            print(f"epoch {pos.epoch + 1}: train loss {entry['train_loss']:.4f}, held-out cosine to teacher {val:.4f}", flush=True)
        return entry

    def publish() -> None:  # the checkpoint is known finite: the student of this epoch may replace the last one
        student.save(out)
        write_log(out / layouts.TRAIN_LOG, log)

    run_epochs(Position(state["epoch"], state["step"]), optim.epochs, train_epoch, save, log, publish)
    model.eval().cpu()  # the returned student encodes like a loaded one, on the CPU
    return student
