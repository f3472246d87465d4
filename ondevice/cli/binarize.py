"""ondevice binarize: float sentence embeddings -> a fitted binarizer (+ optionally the packed codes of the corpus)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ondevice.binarize import METHODS, Binarizer, as_embeddings, check_bits
from ondevice.binarize_ae import (
    DECODER_INPUTS,
    INITS,
    INPUTS,
    RELAXATIONS,
    SAMPLINGS,
    SELECTS,
    SP_STARTS,
    AEConfig,
    JudgePairs,
)
from ondevice.checks import check_int, finite_float
from ondevice.configs import flags_for_fields
from ondevice.corpus import default_data_dir, read_corpus
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs
from ondevice.io import atomic_path, check_out_kind, check_replace, is_npy_codes, read_npy
from ondevice.student import Student

JUDGE_TASKS = ("stsb", "sick-r", "mrpc", "qqp")  # pair tasks with a train split and a score or a yes/no label

HELP = "fit a binarizer (threshold, random, orthogonal, pca, itq, ae, ae-sp) that turns embeddings into packed binary codes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = AEConfig()
    src = p.add_argument_group("input (one of)")
    src.add_argument("--embeddings", help="float matrix (n, dim) as .npy")
    src.add_argument("--student", help="student dir: encode --corpus with it")
    src.add_argument("--teacher", nargs="?", const="all-MiniLM-L6-v2", default=None,
                     help="encode --corpus with a teacher (default: the packaged all-MiniLM-L6-v2, cached on disk)")
    src.add_argument("--corpus", help="sentences, one per line (.gz allowed), for --student/--teacher")
    src.add_argument("--backend", default="local", choices=["local", "ray"],
                     help="--teacher: compute vectors here or on a Ray actor pool (same cache; needs ondevice[scale])")
    src.add_argument("--ray-address", default="", help="--backend ray: join this Ray cluster (default: a local Ray)")
    src.add_argument("--max-sentences", type=int, default=None, help="use only the first N sentences")
    p.add_argument("--method", choices=METHODS, default="ae-sp")
    p.add_argument("--bits", type=int, required=True, help="code length; threshold needs bits = dim, pca bits <= dim")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="binarizer directory to write")
    p.add_argument("--codes-out", help="also write the packed uint8 codes of the input as this .npy (an existing file "
                                       "is replaced only when it holds codes, never an input or an artifact's file)")
    p.add_argument("--force", action="store_true",
                   help="let --codes-out replace an existing file of any kind, even an input of this run (atomically; "
                        "a folder is never replaced)")
    p.add_argument("--threshold", type=finite_float, default=None, help="threshold method: the cut s (default 0)")
    ae = p.add_argument_group("autoencoder (ae, ae-sp)")
    ae.add_argument("--epochs", type=int, default=d.epochs)
    ae.add_argument("--batch-size", type=int, default=d.batch_size)
    ae.add_argument("--lr", type=finite_float, default=d.lr)
    ae.add_argument("--decoder-input", choices=DECODER_INPUTS, default=d.decoder_input,
                    help="decoder reads a bit as -1/+1 (pm1) or 0/1 (01)")
    ae.add_argument("--init", choices=INITS, default=d.init,
                    help="encoder start; auto = random or pca, whichever keeps held-out vectors' similarity order better")
    ae.add_argument("--select", choices=SELECTS, default=d.select,
                    help="export the last epoch, or the epoch (0 = the start) that keeps the held-out order best "
                         "(holdout) or ranks --judge-task's labelled train pairs best (pairs)")
    ae.add_argument("--judge-task", choices=JUDGE_TASKS, default=None,
                    help="--select pairs: judge the epochs by this task's train split (Spearman of -Hamming against "
                         "its gold; never its dev or test pairs), encoded by the same --student/--teacher")
    ae.add_argument("--data", default=None, help="shared data folder for --judge-task ($ONDEVICE_DATA or ../shared/data)")
    ae.add_argument("--holdout", type=finite_float, default=d.holdout,
                    help="fraction of the vectors held out for --init auto / --select holdout")
    ae.add_argument("--input", choices=INPUTS, default=d.input,
                    help="what the encoder reads: standardize = the centered vectors (their cosine is the similarity), "
                         "whiten = the top principal components at unit variance (the whitened cosine is)")
    ae.add_argument("--whiten-variance", type=finite_float, default=d.whiten_variance,
                    help="--input whiten keeps the top components holding this fraction of the variance")
    ae.add_argument("--sp-lambda", type=finite_float, default=d.sp_lambda, help="weight of the semantic-preserving loss")
    ae.add_argument("--sp-relax", choices=RELAXATIONS, default=d.sp_relax, help="differentiable Hamming distance")
    ae.add_argument("--sp-triplets", type=int, default=d.sp_triplets, help="triplets sampled per batch")
    ae.add_argument("--sp-sampling", choices=SAMPLINGS, default=d.sp_sampling,
                    help="triplets: uniform, gap (weighted by the cosine gap), neighbor (a = the pivot's nearest)")
    ae.add_argument("--sp-start", choices=SP_STARTS, default=d.sp_start,
                    help="ae-sp: the SP term from the first step (start, the paper's joint training), or as a "
                         "fine-tune of what ae would export (ae: ae's epochs first, then --sp-epochs with the SP term)")
    ae.add_argument("--sp-epochs", type=int, default=d.sp_epochs, help="--sp-start ae: fine-tune epochs (0 = --epochs)")
    ae.add_argument("--threads", type=int, default=d.threads, help="torch threads (0 = torch default)")
    ae.add_argument("--resume", action="store_true", help="continue the autoencoder checkpoint in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def load_input(a: argparse.Namespace):
    """The float matrix that the flags name, and a function that encodes more texts the same way (None for
    --embeddings)."""
    if a.max_sentences is not None and a.max_sentences < 1:
        raise OndeviceError(f"--max-sentences must be >= 1, got {a.max_sentences}")
    given = [name for name in ("embeddings", "student", "teacher") if getattr(a, name)]
    if len(given) != 1:
        raise OndeviceError("give exactly one input: --embeddings X.npy, --student DIR --corpus FILE, or --teacher --corpus FILE")
    if a.embeddings:
        x = read_npy(a.embeddings, "--embeddings")  # an empty, truncated, non-.npy or pickled file: one line
        return (x[: a.max_sentences] if a.max_sentences else x), None
    if not a.corpus:
        raise OndeviceError(f"--{given[0]} needs --corpus FILE (one sentence per line)")

    sentences = read_corpus(a.corpus, a.max_sentences)
    started = time.perf_counter()
    if a.student:
        encode = Student.load(a.student).encode  # a bad --student is the only line, before any progress line
        _stage(a, f"encoding {len(sentences):,} sentences with the student {a.student} ...")
        x = encode(sentences)
    else:
        # looked up on each call, so a patched attribute is seen
        from ondevice.teacher import Teacher, cached_vectors

        teacher = Teacher(a.teacher)
        _stage(a, f"encoding {len(sentences):,} sentences with the teacher {a.teacher} (cached on disk) ...")

        def encode(texts: list[str]):
            return cached_vectors(teacher, texts, progress=False)

        if a.backend == "ray":
            # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
            from ondevice.scale.ray_label import ray_cached_vectors

            x = ray_cached_vectors(teacher, sentences, progress=not a.quiet, address=a.ray_address or None)
        else:
            x = cached_vectors(teacher, sentences, progress=not a.quiet)
    _stage(a, f"encoded {len(sentences):,} sentences in {time.perf_counter() - started:.1f} s")
    return x, encode


def judge_pairs(a: argparse.Namespace, encode):
    """The labelled train pairs of --judge-task, encoded like the training vectors (select "pairs")."""
    if encode is None:
        raise OndeviceError("--select pairs encodes --judge-task's pairs with the model that made the vectors: give "
                            "--student DIR or --teacher with --corpus instead of --embeddings")
    pairs = load_pairs(a.judge_task, "train", a.data or default_data_dir())
    _stage(a, f"encoding {len(pairs):,} {a.judge_task} train pairs for --select pairs ...")
    return JudgePairs(encode(pairs.a), encode(pairs.b), pairs.gold, name=f"{a.judge_task} train")


def _stage(a: argparse.Namespace, line: str) -> None:
    """One progress line per stage on stderr, flushed: visible in logs and pipes, where progress bars are not."""
    if not a.quiet:
        print(line, file=sys.stderr, flush=True)


def run(a: argparse.Namespace) -> int:

    check_out_kind(a.out, "binarizer")  # fail before any encoding or training work
    check_bits(a.method, a.bits, a.bits)  # the range of --bits; the input's dim is checked once it is read
    check_int(a.threads, "--threads", 0, 4096)  # every method: the autoencoders use it, the others never ignore a bad one
    if a.codes_out:  # never a file this run reads, nor one it did not write (a manifest, weights, embeddings)
        check_replace(a.codes_out, "--codes-out", force=a.force, ours=is_npy_codes, what="a .npy of packed codes",
                      inputs=(a.embeddings, a.student, a.corpus,
                              a.teacher if a.teacher and "/" in a.teacher else None))
    ae_hyper: dict = {}
    if a.method in ("ae", "ae-sp"):
        ae_hyper = {name: getattr(a, name) for name in AEConfig.flat_names()}  # one flag per setting
        with flags_for_fields():  # the setting's message, with its flag
            AEConfig(**ae_hyper).validate()
        if (a.select == "pairs") != bool(a.judge_task):
            raise OndeviceError("--select pairs and --judge-task go together: e.g. --select pairs --judge-task stsb")
    elif a.judge_task:
        raise OndeviceError(f"--judge-task is for the autoencoders (--method ae / ae-sp), not {a.method}")
    x, encode = load_input(a)
    if np.ndim(x) != 2 or 0 in np.shape(x) or np.asarray(x[:0]).dtype.kind not in "fiu":
        # not a non-empty numeric (n, dim) matrix: its one-line error, before any progress line
        as_embeddings(x, what=f"--embeddings {a.embeddings}" if a.embeddings else "embeddings")
    check_bits(a.method, a.bits, x.shape[1])  # fail before any training
    hyper: dict = {"progress": not a.quiet}
    if a.method == "threshold" and a.threshold is not None:
        hyper["threshold"] = a.threshold
    if a.method in ("ae", "ae-sp"):
        hyper.update(ae_hyper, checkpoint_dir=a.out, resume=a.resume)
        if a.judge_task:
            hyper["judge_pairs"] = judge_pairs(a, encode)
    started = time.perf_counter()
    _stage(a, f"fitting a {a.bits}-bit {a.method} binarizer on {len(x):,} vectors ...")
    binarizer = Binarizer.fit(x, a.method, a.bits, seed=a.seed, **hyper)
    _stage(a, f"fitted in {time.perf_counter() - started:.1f} s")
    binarizer.save(a.out)
    print(f"binarizer saved to {a.out}: {binarizer.method}, {binarizer.dim}-d -> {binarizer.bits} bits "
          f"({binarizer.code_bytes} bytes per sentence), bit order {binarizer.config.bit_order}")
    if a.codes_out:
        codes = binarizer.transform(as_embeddings(x, binarizer.dim))
        with atomic_path(a.codes_out) as tmp, open(tmp, "wb") as fh:
            np.save(fh, codes, allow_pickle=False)
        print(f"codes of {codes.shape[0]:,} rows written to {a.codes_out} (uint8 {codes.shape})")
    return 0
