"""Every on-disk layout ondevice writes, in one place: each artifact kind's file names, and `identify(path)`.

Writers and readers take their file names from here, so a folder's kind can be told from its files alone (what
`ondevice info` prints, and what a command says when it is handed the wrong kind of folder). A leaf module: the
standard library only, so anything may import it.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path

# A student (ondevice distill, ondevice unpack): its config, weights and tokenizer vocabulary.
STUDENT_CONFIG = "config.json"
STUDENT_WEIGHTS = "model.safetensors"
VOCAB = "vocab.txt"
TOKENIZER_JSON = "tokenizer.json"  # the same vocabulary and settings for the Hugging Face tokenizers (Java, JS)
DISTILL_CONFIG = "distill_config.json"  # beside a distilled student: every setting of the run
UNPACKED = "unpacked.json"  # beside an unpacked student: the bundle it came from
STUDENT_FILES = (STUDENT_CONFIG, STUDENT_WEIGHTS, VOCAB, TOKENIZER_JSON)  # what Student.save writes

# Written by every trainer beside its output.
TRAIN_LOG = "train_log.jsonl"
CHECKPOINT = "checkpoint"  # folder: the latest epoch, so --resume continues
CKPT_WEIGHTS = "model.safetensors"  # in a checkpoint folder: the model,
CKPT_OPTIMIZER = "optimizer.safetensors"  # the optimizer state,
CKPT_STATE = "state.json"  # and the epoch, generator states and log

# A binarizer (ondevice binarize).
BINARIZER_CONFIG = "binarizer.json"
BINARIZER_WEIGHTS = "binarizer.safetensors"
BINARIZER_FILES = (BINARIZER_CONFIG, BINARIZER_WEIGHTS)  # what Binarizer.save writes
AE_CHECKPOINT = "ae_checkpoint.safetensors"  # an autoencoder fit in progress

# A bundle (ondevice export): manifest (with every file's sha256), encoder graphs, golden outputs, model card.
MANIFEST = "manifest.json"
BUNDLE_FORMAT = "ondevice-bundle"
ENCODER_ONNX = "encoder.onnx"
ENCODER_TORCHSCRIPT = "encoder.pt"
GOLDEN = "golden"  # folder of .npy reference outputs the runtimes are tested against
MODEL_CARD = "README.md"
PRECISIONS = ("fp32", "int8")  # `--precision both` writes one bundle per precision in these sub-folders

# An index file (HammingIndex.save): one file, recognized by its first bytes.
INDEX_MAGIC = b"ONDVIDX\0"
# A sharded index (ondevice index build --shards): a manifest beside the shard files.
SHARDS_FORMAT = "ondevice-sharded-index"

# Pair models (ondevice pairs): a cross-encoder teacher folder, and student runs.
TEACHER_INFO = "teacher.json"
TEACHER_CONFIG = "config.json"
TEACHER_MODEL = "model"  # folder: the fine-tuned transformer
TEACHER_CHECKPOINTS = "checkpoints"
RUN_STUDENT = "student"  # folder: a pair run's fine-tuned encoder, a student folder
DSE_CONFIG = "dse_config.json"
DVBERT_CONFIG = "dvbert_config.json"
DIPAIR_CONFIG = "dipair_config.json"
PAIR_HEAD_CONFIG = "pair_head.json"
PAIR_HEAD_WEIGHTS = "pair_head.safetensors"
PAIR_HEAD_ONNX = "pair_head.onnx"
DIPAIR_HEAD_CONFIG = "dipair_head.json"
DIPAIR_HEAD_WEIGHTS = "dipair_head.safetensors"
DIPAIR_HEAD_ONNX = "dipair_head.onnx"
RUN_DATA = "data.json"  # what a pair run trained on
RUN_DEV = "dev.json"  # the published epoch's dev metrics
SRA_COSINE = "sra_cosine.json"  # DiPair: the encoder's held-out cosine to the SRA teacher, before and after
# Everything in a pair-model run that its loaders, `pairs export` and `pairs soup` read: each must be a plain file
# (or folder) inside the run, never a symbolic link (ondevice.io.artifact_file)
RUN_FILES = (RUN_STUDENT, DSE_CONFIG, DVBERT_CONFIG, DIPAIR_CONFIG, PAIR_HEAD_CONFIG, PAIR_HEAD_WEIGHTS, DIPAIR_HEAD_CONFIG,
             DIPAIR_HEAD_WEIGHTS, RUN_DATA, RUN_DEV, SRA_COSINE, TRAIN_LOG, f"{CHECKPOINT}/{CKPT_STATE}",
             f"{CHECKPOINT}/{CKPT_WEIGHTS}")

MAX_SETTINGS_BYTES = 16 << 20  # a settings file is a few KB; a larger one is not ours and is never read whole


@dataclass(frozen=True)
class Kind:
    """One artifact kind: its name, what it is, and the command(s) that make one (in backticks)."""

    name: str
    what: str
    made_by: str


KINDS = {k.name: k for k in (
    Kind("index", "a Hamming index file", "`ondevice index build`"),
    Kind("sharded-index", "a sharded Hamming index (a manifest and its shard files)", "`ondevice index build --shards N`"),
    Kind("bundle", "an exported bundle (encoder graphs, binarizer, tokenizer, checksums)", "`ondevice export`"),
    Kind("bundles", "a folder of exported bundles, one per precision (fp32/, int8/)", "`ondevice export --precision both`"),
    Kind("dipair-run", "a DiPair pair-model run (encoder + token-state head)", "`ondevice pairs dipair`"),
    Kind("dvbert-run", "a DvBERT pair-model run (encoder + pair head)", "`ondevice pairs dvbert`"),
    Kind("dse-run", "a DSE pair-model run (encoder + pair head)", "`ondevice pairs train`"),
    Kind("cross-encoder", "a cross-encoder teacher", "`ondevice pairs teacher`"),
    Kind("student", "a student encoder", "`ondevice distill` or `ondevice unpack`"),
    Kind("binarizer", "a binarizer", "`ondevice binarize`"),
    Kind("hf-model", "a Hugging Face transformer (a teacher for `ondevice distill --teacher`)",
         "Hugging Face transformers"),
)}


def _json_object(path: Path) -> dict | None:
    """A small JSON object file's contents, or None when it is missing, large, not a JSON object, or not a plain file
    (a link is not followed: naming a folder's kind must not read a file outside it)."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SETTINGS_BYTES:
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) else None


def identify(path: str | Path) -> str | None:
    """The kind (a key of KINDS) of the artifact at `path`, told from its files; None when it is none of them.

    Only names, a manifest's "format" and whether a config.json names a model_type are read: whether the artifact
    is complete and intact is for its loader to check."""
    path = Path(path)
    if path.is_file():
        try:
            with path.open("rb") as f:
                return "index" if f.read(len(INDEX_MAGIC)) == INDEX_MAGIC else None
        except OSError:
            return None
    if not path.is_dir():
        return None
    if (path / MANIFEST).is_file():
        fmt = (_json_object(path / MANIFEST) or {}).get("format")
        if fmt == SHARDS_FORMAT:
            return "sharded-index"
        if fmt == BUNDLE_FORMAT or (path / ENCODER_ONNX).is_file():
            return "bundle"
    if any((path / p / MANIFEST).is_file() for p in PRECISIONS):
        return "bundles"
    for name, marker in (("dipair-run", DIPAIR_CONFIG), ("dvbert-run", DVBERT_CONFIG), ("dse-run", DSE_CONFIG),
                         ("cross-encoder", TEACHER_INFO), ("binarizer", BINARIZER_CONFIG)):
        if (path / marker).is_file():
            return name
    if (path / STUDENT_CONFIG).is_file():
        # A Hugging Face model folder holds a config.json and model.safetensors too; its config names a model_type
        if "model_type" in (_json_object(path / STUDENT_CONFIG) or {}):
            return "hf-model"
        if (path / STUDENT_WEIGHTS).is_file():
            return "student"
    return None


def what_it_is(path: str | Path, expected: str | None = None) -> str:
    """"it is <what the artifact is> (made by <command>)", for the message of a command handed the wrong folder;
    when it is of the `expected` kind after all, that some of its files are missing."""
    kind = identify(path)
    if kind is None:
        return "it is nothing ondevice writes" if Path(path).exists() else "it does not exist"
    k = KINDS[kind]
    if kind == expected:
        return f"it is {k.what} with files missing (an interrupted copy?)"
    return f"it is {k.what} (made by {k.made_by})"
