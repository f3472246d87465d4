"""The student: word embeddings -> BiLSTM -> pooling -> linear (no bias) -> tanh, as in Wu et al. (SRA)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.io import dataclass_from_dict, read_json, write_json
from ondevice.tokenizer import PAD_ID, Tokenizer

POOLINGS = ("mean", "max", "last", "meanmax")
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


@dataclass
class StudentConfig:
    """Architecture of a student; saved as config.json beside the weights."""

    vocab_size: int
    embedding_dim: int
    hidden_size: int = 256
    pooling: str = "mean"
    output_dim: int = 384
    max_tokens: int = 128
    teacher: dict = field(default_factory=dict)
    word_vectors: str = ""
    format_version: int = 1

    @property
    def pooled_dim(self) -> int:
        return (4 if self.pooling == "meanmax" else 2) * self.hidden_size


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

    def encode(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """Sentence vectors, float32 (len(texts), output_dim), in input order."""
        torch = _torch()
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        self.model.eval()
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                ids, lengths = self.tokenizer.batch([texts[i] for i in idx])
                out[idx] = self.model(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
        return out

    def num_parameters(self, embeddings: bool = True) -> int:
        """Parameter count, with or without the embedding table."""
        return sum(p.numel() for n, p in self.model.named_parameters() if embeddings or not n.startswith("embedding."))

    def save(self, directory: str | Path) -> None:
        """Write config.json, model.safetensors, vocab.txt and tokenizer.json (no pickle)."""
        st = require("safetensors.torch", "train")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        from ondevice.io import atomic_path

        with atomic_path(directory / WEIGHTS) as tmp:
            st.save_file({k: v.detach().contiguous() for k, v in self.model.state_dict().items()}, str(tmp))
        self.tokenizer.save(directory)
        write_json(directory / CONFIG, self.config)

    @classmethod
    def load(cls, directory: str | Path) -> Student:
        """Load a student directory written by `save` (or by `ondevice distill`)."""
        st = require("safetensors.torch", "train")
        directory = Path(directory)
        if not (directory / CONFIG).is_file() or not (directory / WEIGHTS).is_file():
            raise OndeviceError(f"{directory} is not a student dir (needs {CONFIG} and {WEIGHTS}); run `ondevice distill` first")
        config = dataclass_from_dict(StudentConfig, read_json(directory / CONFIG, "student config"), "student config")
        tokenizer = Tokenizer.load(directory)
        if len(tokenizer) != config.vocab_size:
            raise OndeviceError(f"vocab.txt has {len(tokenizer)} tokens but config says {config.vocab_size}; the student dir is inconsistent")
        model = build_model(config)
        try:
            model.load_state_dict(st.load_file(str(directory / WEIGHTS)))
        except (require("safetensors", "train").SafetensorError, RuntimeError, OSError, ValueError) as exc:  # bad header, shapes
            raise OndeviceError(f"cannot load {directory / WEIGHTS}: {str(exc).splitlines()[0]}; the file is corrupt or from another config") from None
        return cls(config, tokenizer, model)
