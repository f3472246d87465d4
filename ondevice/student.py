"""The student: word embeddings -> BiLSTM -> pooling -> linear (no bias) -> tanh, as in Wu et al. (SRA)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.checks import check_int
from ondevice.configs import POOLINGS, Architecture
from ondevice.devices import on_device
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, atomic_path, check_out_kind, dataclass_from_dict, read_json, write_json
from ondevice.pretrained import PREFIX
from ondevice.tokenizer import MAX_TOKENS, PAD_ID, Tokenizer, as_texts

MAX_EMBEDDING_VALUES = 1 << 30  # 4 GiB of float32: a bigger table is a corrupt config, not a student
# Every file of a student folder that is read (Student.load; export and `ondevice info` read the records after it):
# none may be a symbolic link, which could make a student someone else sends read any file of this machine.
FILES = (*layouts.STUDENT_FILES, layouts.DISTILL_CONFIG, layouts.UNPACKED, layouts.TRAIN_LOG)


@dataclass
class StudentConfig(Architecture):
    """A student's architecture (hidden_size, pooling and max_tokens: the `Architecture` a distillation chose) with
    its sizes and provenance; saved as config.json beside the weights."""

    vocab_size: int
    embedding_dim: int
    output_dim: int = 384
    teacher: dict = field(default_factory=dict)
    word_vectors: str = ""
    format_version: int = 1

    @property
    def pooled_dim(self) -> int:
        return (4 if self.pooling == "meanmax" else 2) * self.hidden_size

    def validate(self, where: str = "student config") -> None:
        """Reject impossible fields (wrong types, 0, absurd sizes) before anything is allocated."""
        try:
            check_int(self.vocab_size, "vocab_size", 2, 10_000_000)
            check_int(self.embedding_dim, "embedding_dim", 1, 4096)
            check_int(self.hidden_size, "hidden_size", 1, 8192)
            check_int(self.output_dim, "output_dim", 1, 65_536)
            check_int(self.max_tokens, "max_tokens", 1, MAX_TOKENS)
            check_int(self.format_version, "format_version", 1, 1)
            if self.vocab_size * self.embedding_dim > MAX_EMBEDDING_VALUES:
                raise OndeviceError(f"vocab_size x embedding_dim is {self.vocab_size * self.embedding_dim:,}, "
                                    f"more than {MAX_EMBEDDING_VALUES:,}")
        except OndeviceError as exc:
            raise OndeviceError(f"{where}: {exc}; the file is corrupt or from another version") from None
        if self.pooling not in POOLINGS:
            raise OndeviceError(f"{where}: unknown pooling {self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        if not isinstance(self.teacher, dict) or not isinstance(self.word_vectors, str):
            raise OndeviceError(f"{where}: 'teacher' must be an object and 'word_vectors' a string")


def _torch():
    return require("torch", "train")


def build_model(cfg: StudentConfig):
    """The torch module for `cfg` (random init; see `Student.from_embeddings` for GloVe init)."""
    torch = _torch()
    nn = torch.nn

    class StudentModel(nn.Module):
        """ids (B, T) int64 + lengths (B,) int64 -> sentence vectors (B, output_dim) in (-1, 1)."""

        def __init__(self):
            super().__init__()
            self.pooling = cfg.pooling
            self.embedding = nn.Embedding(cfg.vocab_size, cfg.embedding_dim, padding_idx=PAD_ID)
            self.lstm = nn.LSTM(cfg.embedding_dim, cfg.hidden_size, batch_first=True, bidirectional=True)
            self.proj = nn.Linear(cfg.pooled_dim, cfg.output_dim, bias=False)

        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            # Written for TorchScript too: export/torchscript.py scripts this module as it is.
            emb = self.embedding(ids)
            packed = nn.utils.rnn.pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, hc = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
            mask = (torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]).unsqueeze(-1)
            if self.pooling == "last":
                pooled = torch.cat([hc[0][0], hc[0][1]], dim=-1)
            else:
                mean = (out * mask).sum(1) / lengths[:, None].to(out.dtype)
                mx = out.masked_fill(~mask, float("-inf")).max(1).values
                if self.pooling == "mean":
                    pooled = mean
                elif self.pooling == "max":
                    pooled = mx
                else:
                    pooled = torch.cat([mean, mx], dim=-1)
            return torch.tanh(self.proj(pooled))

    if cfg.pooling not in POOLINGS:
        raise OndeviceError(f"unknown student pooling {cfg.pooling!r}; choose one of {', '.join(POOLINGS)}")
    return StudentModel()


def cosine_loss(student, teacher):
    """SRA loss (1 - cos(T_x, S_x)) / 2, averaged over the batch."""
    torch = _torch()
    return ((1.0 - torch.nn.functional.cosine_similarity(student, teacher, dim=-1, eps=1e-8)) / 2.0).mean()


def similarity_matching_loss(student, teacher):
    """Mean squared difference between the in-batch cosine-similarity matrices of student and teacher (off-diagonal):
    it trains the neighbour structure that retrieval depends on, which the per-sentence SRA loss reaches only
    indirectly. Zero when the batch holds fewer than two rows."""
    torch = _torch()
    n = student.shape[0]
    if n < 2:
        return student.new_zeros(())
    s = torch.nn.functional.normalize(student, dim=-1, eps=1e-8)
    t = torch.nn.functional.normalize(teacher, dim=-1, eps=1e-8)
    off = ~torch.eye(n, dtype=torch.bool, device=student.device)
    return ((s @ s.T - t @ t.T)[off] ** 2).mean()


class Student:
    """A trained student: tokenizer + torch model. `Student.load(dir).encode(texts)` gives float32 vectors."""

    def __init__(self, config: StudentConfig, tokenizer: Tokenizer, model=None):
        self.config = config
        self.tokenizer = tokenizer
        self.model = model if model is not None else build_model(config)
        self.model.eval()

    @classmethod
    def from_embeddings(cls, config: StudentConfig, tokenizer: Tokenizer, embeddings: np.ndarray, seed: int) -> Student:
        """A fresh student whose embedding layer starts from `embeddings`; other weights from `seed`."""
        torch = _torch()
        if embeddings.shape != (config.vocab_size, config.embedding_dim):
            raise OndeviceError(f"embedding matrix {embeddings.shape} does not match vocab x dim {(config.vocab_size, config.embedding_dim)}")
        torch.manual_seed(seed)
        model = build_model(config)
        with torch.no_grad():
            model.embedding.weight.copy_(torch.from_numpy(embeddings))
        return cls(config, tokenizer, model)

    @property
    def dim(self) -> int:
        return self.config.output_dim

    def encode(self, texts: str | Sequence[str], batch_size: int = 256) -> np.ndarray:
        """Sentence vectors, float32 (len(texts), output_dim), in input order (a str is one text)."""
        torch = _torch()
        texts = as_texts(texts)
        batch_size = check_int(batch_size, "batch_size", 1, 1 << 20)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        self.model.eval()
        device = next(self.model.parameters()).device  # a student in training may sit on a GPU
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                ids, lengths = self.tokenizer.batch([texts[i] for i in idx])
                out[idx] = self.model(on_device(ids, device), on_device(lengths, device)).cpu().numpy()
        return out

    def num_parameters(self, embeddings: bool = True) -> int:
        """Parameter count, with or without the embedding table."""
        return sum(p.numel() for n, p in self.model.named_parameters() if embeddings or not n.startswith("embedding."))

    def save(self, directory: str | Path) -> None:
        """Write config.json, model.safetensors, vocab.txt and tokenizer.json (no pickle)."""
        st = require("safetensors.torch", "train")
        check_finite(self.model.state_dict(), "the student")
        directory = check_out_kind(directory, "student")
        directory.mkdir(parents=True, exist_ok=True)

        with atomic_path(directory / layouts.STUDENT_WEIGHTS) as tmp:
            st.save_file({k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}, str(tmp))
        self.tokenizer.save(directory)
        write_json(directory / layouts.STUDENT_CONFIG, self.config)

    @classmethod
    def load(cls, directory: str | Path) -> Student:
        """Load a student directory written by `save` (or by `ondevice distill`)."""
        st = require("safetensors.torch", "train")
        directory = Path(directory)
        for name in FILES:
            artifact_file(directory, name, "student")
        if not (directory / layouts.STUDENT_CONFIG).is_file() or not (directory / layouts.STUDENT_WEIGHTS).is_file():
            raise OndeviceError(f"{directory} is not a student dir (needs {layouts.STUDENT_CONFIG} and {layouts.STUDENT_WEIGHTS}); "
                                + unpack_hint(directory))
        config = dataclass_from_dict(StudentConfig, read_json(directory / layouts.STUDENT_CONFIG, "student config"), "student config")
        config.validate(f"{directory / layouts.STUDENT_CONFIG}")
        tokenizer = Tokenizer.load(directory)
        if len(tokenizer) != config.vocab_size:
            raise OndeviceError(f"vocab.txt has {len(tokenizer)} tokens but config says {config.vocab_size}; the student dir is inconsistent")
        weights = directory / layouts.STUDENT_WEIGHTS
        _check_shapes(config, weights)  # before the model is allocated: a corrupt config must not cost gigabytes
        model = build_model(config)
        try:
            model.load_state_dict(st.load_file(str(weights)))
        except (require("safetensors", "train").SafetensorError, RuntimeError, OSError, ValueError) as exc:  # bad header, shapes
            raise OndeviceError(f"cannot load {weights}: {str(exc).splitlines()[0]}; the file is corrupt or from another config") from None
        check_finite(model.state_dict(), str(weights))
        return cls(config, tokenizer, model)


def unpack_hint(path: str | Path) -> str:
    """What to run when a student folder was expected at `path`: a bundle (or 'pretrained') is unpacked, else distilled."""
    kind = layouts.identify(path)
    if str(path) == PREFIX or str(path).startswith(PREFIX + ":") or kind in ("bundle", "bundles"):
        return f"it is a bundle: `ondevice unpack --bundle {path} --out DIR` writes its student folder"
    if kind in ("dse-run", "dvbert-run", "dipair-run"):
        return f"it is a pair-model run: its fine-tuned encoder is {Path(path) / layouts.RUN_STUDENT}"
    first = "run `ondevice distill` first (or `ondevice unpack --bundle pretrained --out DIR` for the shipped student)"
    return f"{layouts.what_it_is(path)}; {first}" if kind else first


def check_finite(state: dict, what: str) -> None:
    """Refuse weights with NaN or inf: they would give NaN vectors with no error anywhere downstream."""
    torch = _torch()
    bad = [name for name, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise OndeviceError(f"{what} has NaN or inf weights (in {bad[0]}); use an earlier checkpoint or retrain")


def _check_shapes(config: StudentConfig, weights: Path) -> None:
    """The tensor names and shapes in the safetensors header must be exactly those `config` describes."""
    torch = _torch()
    safetensors = require("safetensors", "train")
    with torch.device("meta"):  # shapes without memory
        expected = {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}
    try:
        with safetensors.safe_open(str(weights), framework="pt") as fh:
            found = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}  # noqa: SIM118 - a safetensors handle, not a dict
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for corrupt headers
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise OndeviceError(f"cannot read {weights}: {first}; the file is corrupt, re-create it") from None
    if found != expected:
        diff = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
        raise OndeviceError(f"{weights} does not match {layouts.STUDENT_CONFIG} (first difference: {diff[0]} is "
                            f"{found.get(diff[0])}, config implies {expected.get(diff[0])}); the student dir is inconsistent")
