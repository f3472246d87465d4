"""ondevice distill: teacher vectors -> BiLSTM student."""

from __future__ import annotations

import argparse

from ondevice.checks import finite_float
from ondevice.configs import flags_for_fields
from ondevice.distill import DistillConfig, distill
from ondevice.distill import DistillConfig as C

# Settings whose flag is not --<field-name> (ondevice.configs.flag_of): validation names fields, the CLI these flags.
FLAGS = {"hidden_size": "--hidden", "pooling": "--student-pooling", "teacher_pooling": "--pooling",
         "teacher_normalize": "--no-normalize", "exclude_eval": "--keep-eval-text"}

HELP = ("distill a Hugging Face teacher into a BiLSTM student (word vectors made from the teacher, or GloVe as in "
        "the paper; SRA cosine loss)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = C(corpus="")
    p.add_argument("--corpus", required=True, nargs="+", help="sentences, one per line (.gz allowed); several files are read in order")
    p.add_argument("--out", required=True, help="student directory to write")
    p.add_argument("--max-sentences", type=int, default=None, help="use only the first N sentences")
    p.add_argument("--train-splits", nargs="?", const=True, default=False, metavar="TASKS",
                   help="put train-split sentences (text only) from the shared data in front of the corpus: STS-B "
                        "alone, or TASKS from stsb,sick,mrpc,qqp (their carved dev/test text is never used)")
    p.add_argument("--train-split-repeats", type=int, default=d.train_split_repeats, metavar="R",
                   help="with --train-splits: each train-split sentence is seen R times per epoch (in-domain upweighting)")
    p.add_argument("--init-from", default=d.init_from, metavar="STUDENT",
                   help="continue from this student dir (vocabulary, architecture, weights): e.g. adapt a trained student "
                        "to your own corpus; --hidden/--word-vectors/--vocab-size/... then come from it")
    p.add_argument("--keep-eval-text", action="store_true",
                   help="do not drop sentences found in the shared data's dev/test/evaluation sets (dropped by default)")
    p.add_argument("--teacher", default=d.teacher, help="local Hugging Face model dir, or the packaged default")
    p.add_argument("--pooling", default=d.teacher_pooling, choices=["mean", "cls", "max"], help="teacher pooling")
    p.add_argument("--no-normalize", action="store_true", help="do not L2-normalize teacher vectors")
    p.add_argument("--teacher-batch-size", type=int, default=d.teacher_batch_size)
    p.add_argument("--teacher-backend", default=d.teacher_backend, choices=["torch", "onnx", "onnx-int8"],
                   help="torch; onnx: ONNX Runtime fp32 (same vectors to 1e-4, same cache); onnx-int8: faster, another teacher")
    p.add_argument("--backend", default=d.backend, choices=["local", "ray"],
                   help="where teacher vectors are computed: this process, or a Ray actor pool (same cache); "
                        "needs ondevice[scale]")
    p.add_argument("--ray-address", default=d.ray_address, help="--backend ray: join this Ray cluster (default: a local Ray)")
    p.add_argument("--ray-workers", type=int, default=d.ray_workers, help="--backend ray: teacher actors (0 = fill the CPUs)")
    p.add_argument("--word-vectors", default=d.word_vectors,
                   help="'teacher' (made from the teacher: the measured default), 'glove-6b-50d' (packaged, the paper's), "
                        "a word-vectors file (word2vec/GloVe text or binary, .vec) or 'random'")
    p.add_argument("--allow-pickle", action="store_true",
                   help="accept gensim pickles (.kv/.model/.wv) as --word-vectors: loading one RUNS ANY CODE it holds; "
                        "only for files you made yourself")
    p.add_argument("--embedding-dim", type=int, default=d.embedding_dim,
                   help="dimension of 'teacher'/'random' word vectors (0 = 100)")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help="most frequent corpus words kept")
    p.add_argument("--max-tokens", type=int, default=d.max_tokens)
    p.add_argument("--hidden", type=int, default=d.hidden_size, help="LSTM units per direction (paper: 512)")
    p.add_argument("--student-pooling", default=d.pooling, choices=["mean", "max", "last", "meanmax"])
    p.add_argument("--freeze-embeddings", action="store_true")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="paper: 1024")
    p.add_argument("--lr", type=finite_float, default=d.lr)
    p.add_argument("--lr-schedule", default=d.lr_schedule, choices=["constant", "cosine"])
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="linear LR warmup steps")
    p.add_argument("--clip-grad-norm", type=finite_float, default=d.clip_grad_norm, help="0 = off")
    p.add_argument("--sim-loss-weight", type=finite_float, default=d.sim_loss_weight,
                   help="add this x the in-batch similarity-matching loss (0 = SRA loss only)")
    p.add_argument("--val-fraction", type=finite_float, default=d.val_fraction, help="held out for the cosine report")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (0 = torch default)")
    p.add_argument("--device", default=d.device,
                   help="where the torch teacher and the student run: cpu, cuda, cuda:N or auto (CUDA when available); "
                        "the student is saved for the CPU either way")
    p.add_argument("--checkpoint-minutes", type=finite_float, default=d.checkpoint_minutes)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")


def config_from_args(a: argparse.Namespace):
    """The DistillConfig that the parsed flags describe."""
    return DistillConfig(
        corpus=a.corpus[0] if len(a.corpus) == 1 else list(a.corpus), max_sentences=a.max_sentences,
        exclude_eval=not a.keep_eval_text, train_splits=True if a.train_splits in (True, "stsb") else a.train_splits,
        train_split_repeats=a.train_split_repeats, init_from=a.init_from, teacher=a.teacher, teacher_pooling=a.pooling,
        teacher_normalize=not a.no_normalize, teacher_batch_size=a.teacher_batch_size,
        teacher_backend=a.teacher_backend, backend=a.backend, ray_address=a.ray_address, ray_workers=a.ray_workers,
        word_vectors=a.word_vectors, embedding_dim=a.embedding_dim,
        allow_pickle=a.allow_pickle,
        vocab_size=a.vocab_size, max_tokens=a.max_tokens, hidden_size=a.hidden, pooling=a.student_pooling,
        freeze_embeddings=a.freeze_embeddings, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr,
        lr_schedule=a.lr_schedule, warmup_steps=a.warmup_steps,
        clip_grad_norm=a.clip_grad_norm, sim_loss_weight=a.sim_loss_weight, val_fraction=a.val_fraction, seed=a.seed, threads=a.threads,
        device=a.device, checkpoint_minutes=a.checkpoint_minutes,
    )


def run(a: argparse.Namespace) -> int:
    with flags_for_fields(FLAGS):
        student = distill(config_from_args(a), a.out, resume=a.resume)
    print(f"student saved to {a.out} ({student.num_parameters():,} parameters, "
          f"{student.num_parameters(embeddings=False):,} without embeddings)")
    return 0
