"""TorchScript of the student + binarizer for PyTorch Mobile: forward(ids, lengths) -> (embedding, code).

`ScriptableEncoder` runs the student's own (scriptable) forward and adds the binarizer and bit packing, so the
scripted module gives bit-identical embeddings.
The int8 variant uses torch's dynamic quantization: int8 LSTM and projection, per-row 8-bit embedding. Unlike the
int8 ONNX graph it also quantizes the projection (-0.6 MB), which keeps a 50k-vocabulary int8 bundle under 10 MB.
"""

# No `from __future__ import annotations`: TorchScript reads the annotations of forward() as real types.
import io
import warnings
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.bits import code_bytes
from ondevice.io import atomic_path


def scriptable_encoder(student_model, projection: np.ndarray, offset: np.ndarray):
    """A torch module running `student_model` that also binarizes and packs (bit order "little")."""
    torch = require("torch", "train")
    nn = torch.nn
    bits = int(projection.shape[1])
    nbytes = code_bytes(bits)
    pad = nbytes * 8 - bits

    class ScriptableEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.student = student_model
            self.nbytes = nbytes
            # zero columns with offset -1: padding bits are never set
            A = np.pad(np.asarray(projection, np.float32), ((0, 0), (0, pad)))
            c = np.concatenate([np.asarray(offset, np.float32), -np.ones(pad, np.float32)])
            self.register_buffer("binarizer_projection", torch.from_numpy(A))
            self.register_buffer("binarizer_offset", torch.from_numpy(c))
            self.register_buffer("bit_values", torch.tensor([1 << j for j in range(8)], dtype=torch.int32))

        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            embedding = self.student(ids, lengths)
            bits = (embedding @ self.binarizer_projection + self.binarizer_offset) > 0
            grouped = bits.to(torch.int32).reshape(bits.shape[0], self.nbytes, 8)
            code = (grouped * self.bit_values).sum(-1).to(torch.uint8)
            return embedding, code

    return ScriptableEncoder().eval()


def quantize_encoder(module):
    """Dynamic int8 quantization of the LSTM and projection, per-row 8-bit embedding; the binarizer stays float."""
    torch = require("torch", "train")
    q = torch.ao.quantization
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao, still shipped in 2.x
        warnings.simplefilter("ignore")
        return q.quantize_dynamic(
            module, {torch.nn.LSTM: q.default_dynamic_qconfig, torch.nn.Linear: q.default_dynamic_qconfig,
                     torch.nn.Embedding: q.float_qparams_weight_only_qconfig},
            dtype=torch.qint8,
        )


def save_torchscript(module, path: str | Path) -> None:
    """Script `module` and write it to `path` atomically."""
    torch = require("torch", "train")
    with warnings.catch_warnings():  # torch.jit is deprecated for torch.export, yet PyTorch Mobile loads only it
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module)
        buffer = io.BytesIO()  # serialized in memory: torch's C++ writer aborts the process (SIGABRT) on a full disk,
        torch.jit.save(scripted, buffer)  # Python's write raises an OSError that is one line
        with atomic_path(path) as tmp:
            tmp.write_bytes(buffer.getvalue())
