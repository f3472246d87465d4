"""Binarize float sentence embeddings into packed binary codes whose Hamming distance tracks cosine similarity.

Five methods of Shen et al. 2019 ("Learning Compressed Sentence Representations for On-Device Text Processing", §3),
and ITQ:

- ``threshold``: bit i = 1 if h_i > s (s = 0 unless ``threshold=`` is given); exactly ``dim`` bits.
- ``random``: W in R^{bits x dim}, W_ij ~ U(-1/sqrt(bits), 1/sqrt(bits)) from ``seed``; center by the training
  mean, project, threshold at 0. Any number of bits.
- ``orthogonal``: ``random`` with the rows of W made orthogonal in blocks of ``dim`` (Super-Bit LSH, Ji et al.
  2012; ``projections.orthogonal_rows``), each keeping its norm. Orthogonal hyperplanes estimate an angle with less
  variance: on the shipped student, over 15 seeds, better than ``random`` on STS-B and on held-out neighbours at
  every width (README, "Orthogonal rows"). Any number of bits.
- ``pca``: center, project on the top ``bits`` principal components, threshold at 0. ``bits <= dim``.
- ``itq``: ``pca`` followed by the orthogonal rotation that best fits the signs (iterative quantization, Gong &
  Lazebnik 2011; ``projections.itq_rotation``). ``bits <= dim``; numpy only, about a minute for 50k vectors. It
  spreads the variance of the top components over all bits, where PCA's later bits carry little: on the shipped
  student its codes keep more of a vector's nearest neighbours than a random projection's at 64-256 bits and than
  PCA's at 256 (README, "ITQ"), while on STS-B test it trails both by up to 3.5 points.
- ``ae``: linear encoder + sigmoid + threshold 0.5, trained with a straight-through gradient through a linear
  decoder on the MSE reconstruction (``ondevice.binarize_ae``; needs torch). Any number of bits.
- ``ae-sp``: ``ae`` plus the semantic-preserving triplet hinge loss (Eq. 6), weight ``sp_lambda`` (2, see binarize_ae).

Every method is an affine map followed by "> 0", which is what makes the binarizer portable:

    codes = ondevice.bits.pack((h.astype(float32) @ A + c) > 0)        with (A, c) = binarizer.affine()

A is float32 (dim, bits), c float32 (bits,). threshold: A = I, c = -s. random, orthogonal: A = W^T, c = -mean @ W^T.
pca: A = top components (as columns), c = -mean @ A. itq: A = components @ R. ae/ae-sp: A = W^T, c = k (sigmoid(x) > 0.5 iff x > 0;
the input standardization used in training is folded into A and c). ``transform`` computes exactly that
expression in float32, so an ONNX graph (MatMul, Add, Greater) or a Java loop reproduces the bits.

Codes use the one permanent bit order of ``ondevice.bits`` ("little": bit j is bit j % 8 of byte j // 8);
widths that are not a multiple of 8 are zero-padded and the padding never counts in a Hamming distance.

A saved binarizer is a directory: ``binarizer.json`` (method, bits, dim, bit order, seed, sha256 of the training
matrix, hyper-parameters, library version) and ``binarizer.safetensors`` (``projection`` = A, ``offset`` = c,
and for the autoencoders the decoder). Loading and transforming need only numpy + safetensors, never torch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from ondevice import __version__, layouts
from ondevice.bits import BIT_ORDER, MAX_BITS, code_bytes, pack
from ondevice.checks import MAX_SEED, check_int
from ondevice.errors import OndeviceError
from ondevice.io import (
    artifact_file,
    atomic_path,
    canonical_safetensors,
    check_out_kind,
    dataclass_from_dict,
    read_json,
    write_json,
)
from ondevice.projections import column_mean, itq_rotation, orthogonal_rows, pca_components, random_projection

METHODS = ("threshold", "random", "orthogonal", "pca", "itq", "ae", "ae-sp")
ITQ_ITERATIONS = 50  # the paper's setting; the loss has flattened well before
ITQ_MAX_ROWS = 100_000  # rows the rotation is fitted on (a seeded sample of larger inputs); the PCA uses every row
_CHUNK = 32768  # rows per transform step: bounds the float32 (rows, bits) temporary to ~256 MiB at 2048 bits


@dataclass
class BinarizerConfig:
    """What a binarizer is and how it was made; saved as binarizer.json."""

    method: str
    bits: int
    dim: int
    bit_order: str = BIT_ORDER
    seed: int = 0
    train_rows: int = 0
    train_sha256: str = ""
    hyper: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    version: str = __version__


def methods_for(bits: int, dim: int) -> list[str]:
    """The methods that can turn `dim`-d vectors into `bits` bits."""
    out = []
    for m in METHODS:
        if m == "threshold" and bits != dim:
            continue
        if m in ("pca", "itq") and bits > dim:
            continue
        out.append(m)
    return out


def check_bits(method: str, bits: int, dim: int) -> None:
    """Fail with one line naming the methods that can give `bits` bits from `dim`-d input."""
    if method not in METHODS:
        raise OndeviceError(f"unknown binarization method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool) or bits < 1:
        raise OndeviceError(f"bits must be a positive integer, got {bits!r}")
    if bits > MAX_BITS:
        raise OndeviceError(f"bits must be at most {MAX_BITS:,} ({MAX_BITS // 8:,} bytes per code), got {bits:,}")
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 1:
        raise OndeviceError(f"embedding dim must be a positive integer, got {dim!r}")
    if method not in methods_for(int(bits), dim):
        why = f"gives exactly {dim} bits (the input dim)" if method == "threshold" else f"gives at most {dim} bits"
        raise OndeviceError(
            f"method {method!r} {why} for {dim}-d embeddings, not {bits}; "
            f"for {bits} bits use {', '.join(methods_for(int(bits), dim))}"
        )


def as_embeddings(x: Any, dim: int | None = None, what: str = "embeddings") -> np.ndarray:
    """Validate a float matrix (n, dim): 2-d, non-empty, finite; returns it as float32."""
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise OndeviceError(f"{what} must be a non-empty 2-d (n, dim) float matrix, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise OndeviceError(f"{what} must be numeric floats, got dtype {arr.dtype}")
    if dim is not None and arr.shape[1] != dim:
        raise OndeviceError(f"{what} have dim {arr.shape[1]} but the binarizer was fitted on {dim}-d vectors")
    arr = arr.astype(np.float32, copy=False)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise OndeviceError(f"{what} contain NaN or inf in {int(bad.sum())} rows (first: row {int(np.argmax(bad))}); clean them first")
    return arr


def matrix_sha256(x: np.ndarray) -> str:
    """Hex sha256 of a float32 matrix's shape and C-order bytes: identifies the training data."""
    h = hashlib.sha256(f"{x.shape[0]}x{x.shape[1]}:float32:".encode())
    for start in range(0, x.shape[0], _CHUNK):
        h.update(np.ascontiguousarray(x[start : start + _CHUNK], dtype=np.float32).tobytes())
    return h.hexdigest()


class Binarizer:
    """A fitted binarizer: an affine map (A, c) whose sign pattern, packed, is the code."""

    def __init__(self, config: BinarizerConfig, projection: np.ndarray, offset: np.ndarray,
                 extras: dict[str, np.ndarray] | None = None):
        projection = np.ascontiguousarray(projection, dtype=np.float32)
        offset = np.ascontiguousarray(offset, dtype=np.float32).reshape(-1)
        if projection.shape != (config.dim, config.bits) or offset.shape != (config.bits,):
            raise OndeviceError(
                f"binarizer parameters have shapes {projection.shape} and {offset.shape}, "
                f"expected {(config.dim, config.bits)} and {(config.bits,)}; the binarizer dir is inconsistent"
            )
        if not (np.isfinite(projection).all() and np.isfinite(offset).all()):
            raise OndeviceError("binarizer parameters contain NaN or inf; refit it (lower the learning rate)")
        self.config = config
        self._A = projection
        self._c = offset
        self.extras = dict(extras or {})

    # --- identity -------------------------------------------------------------------------------------
    @property
    def method(self) -> str:
        return self.config.method

    @property
    def bits(self) -> int:
        return self.config.bits

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def code_bytes(self) -> int:
        """Bytes per packed code."""
        return code_bytes(self.bits)

    def __repr__(self) -> str:
        return f"Binarizer(method={self.method!r}, dim={self.dim}, bits={self.bits}, seed={self.config.seed})"

    # --- fitting --------------------------------------------------------------------------------------
    @classmethod
    def fit(cls, embeddings: np.ndarray, method: str, bits: int, seed: int = 0, **hyper: Any) -> Binarizer:
        """Fit `method` to produce `bits`-bit codes for vectors like `embeddings` (n, dim)."""
        x = np.asarray(embeddings)
        if x.ndim != 2:
            raise OndeviceError(f"embeddings must be a non-empty 2-d (n, dim) float matrix, got shape {x.shape}")
        check_bits(method, bits, x.shape[1])

        seed = check_int(seed, "seed", 0, MAX_SEED)  # what every generator takes; -1 or 1.5 is one line, not a traceback
        bits, dim = int(bits), int(x.shape[1])
        x = as_embeddings(x)
        progress = bool(hyper.pop("progress", True))
        config = BinarizerConfig(method=method, bits=bits, dim=dim, seed=int(seed), train_rows=int(x.shape[0]),
                                 train_sha256=matrix_sha256(x))
        extras: dict[str, np.ndarray] = {}
        if method == "threshold":
            s = float(hyper.pop("threshold", 0.0))
            _no_more(method, hyper)
            config.hyper = {"threshold": s}
            A, c = np.eye(dim, dtype=np.float32), np.full(dim, -s, dtype=np.float32)
        elif method in ("random", "orthogonal"):
            _no_more(method, hyper)
            mean = column_mean(x).astype(np.float32)
            w = random_projection(dim, bits, seed)
            A = (orthogonal_rows(w) if method == "orthogonal" else w).T
            c = -(mean @ A)
            extras["mean"] = mean
        elif method == "pca":
            _no_more(method, hyper)
            if x.shape[0] < 2:
                raise OndeviceError("pca needs at least 2 training vectors")
            mean, comps = pca_components(x, bits)
            A = comps.astype(np.float32)
            c = -(mean.astype(np.float32) @ A)
            extras["mean"] = mean.astype(np.float32)
        elif method == "itq":
            iterations = int(hyper.pop("iterations", ITQ_ITERATIONS))
            max_rows = int(hyper.pop("max_rows", ITQ_MAX_ROWS))
            _no_more(method, hyper)
            if x.shape[0] < 2 or iterations < 0 or max_rows < 2:
                raise OndeviceError("itq needs at least 2 training vectors, iterations >= 0 and max_rows >= 2")
            mean, comps = pca_components(x, bits)
            rows = np.sort(np.random.default_rng([seed, 19]).permutation(x.shape[0])[:max_rows])
            rotation, losses = itq_rotation((x[rows] - mean) @ comps, seed, iterations)
            A = (comps @ rotation).astype(np.float32)
            c = -(mean.astype(np.float32) @ A)
            extras["mean"] = mean.astype(np.float32)
            config.hyper = {"iterations": iterations, "max_rows": max_rows}
            config.metrics = {"quantization_loss": {"start": round(losses[0], 6), "end": round(losses[-1], 6)},
                              "rotation_rows": len(rows)}
        else:
            # loaded on use: the autoencoder's trainer pulls in training and evaluation modules that applying
            # a binarizer never needs
            from ondevice.binarize_ae import AEConfig, train_autoencoder

            checkpoint_dir = hyper.pop("checkpoint_dir", None)
            resume = bool(hyper.pop("resume", False))
            judge_pairs = hyper.pop("judge_pairs", None)  # a binarize_ae.JudgePairs for select "pairs"
            unknown = sorted(set(hyper) - set(AEConfig.flat_names()))
            if unknown:
                raise OndeviceError(f"unknown hyper-parameters for {method}: {unknown}; see AEConfig in ondevice.binarize_ae")
            ae_cfg = AEConfig(**hyper)
            if method == "ae":
                ae_cfg.sp_lambda = 0.0
            result = train_autoencoder(x, bits, seed, ae_cfg, sp=(method == "ae-sp"), checkpoint_dir=checkpoint_dir,
                                       resume=resume, progress=progress, train_sha256=config.train_sha256,
                                       judge_pairs=judge_pairs)
            config.hyper = ae_cfg.to_dict()
            config.metrics = result.metrics
            A, c, extras = result.projection, result.offset, result.extras
        return cls(config, A, c, extras)

    # --- inference ------------------------------------------------------------------------------------
    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """(A float32 (dim, bits), c float32 (bits,)): the code is pack((h @ A + c) > 0)."""
        return self._A.copy(), self._c.copy()

    def bits_of(self, embeddings: np.ndarray) -> np.ndarray:
        """Unpacked (n, bits) boolean codes."""
        x = as_embeddings(embeddings, self.dim)
        out = np.empty((x.shape[0], self.bits), dtype=bool)
        for start in range(0, x.shape[0], _CHUNK):
            out[start : start + _CHUNK] = (x[start : start + _CHUNK] @ self._A + self._c) > 0
        return out

    def transform(self, embeddings: np.ndarray) -> np.ndarray:
        """Packed uint8 codes (n, ceil(bits/8)) = pack((h.astype(float32) @ A + c) > 0), bit order "little"."""
        x = as_embeddings(embeddings, self.dim)
        out = np.empty((x.shape[0], self.code_bytes), dtype=np.uint8)
        for start in range(0, x.shape[0], _CHUNK):
            out[start : start + _CHUNK] = pack((x[start : start + _CHUNK] @ self._A + self._c) > 0)
        return out

    # --- persistence ----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write binarizer.json + binarizer.safetensors (no pickle) into `directory`."""
        directory = check_out_kind(directory, "binarizer")
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {"projection": self._A, "offset": self._c}
        tensors.update({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in self.extras.items()})
        with atomic_path(directory / layouts.BINARIZER_WEIGHTS) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "ondevice-binarizer", "bit_order": BIT_ORDER})
            canonical_safetensors(tmp)
        write_json(directory / layouts.BINARIZER_CONFIG, self.config)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> Binarizer:
        """Load a directory written by `save` (numpy + safetensors only)."""
        directory = Path(directory)
        for name in layouts.BINARIZER_FILES:
            artifact_file(directory, name, "binarizer")
        if not (directory / layouts.BINARIZER_CONFIG).is_file() or not (directory / layouts.BINARIZER_WEIGHTS).is_file():
            raise OndeviceError(f"{directory} is not a binarizer dir (needs {layouts.BINARIZER_CONFIG} and {layouts.BINARIZER_WEIGHTS}); "
                                f"{layouts.what_it_is(directory, 'binarizer')}; run `ondevice binarize` first")
        raw = read_json(directory / layouts.BINARIZER_CONFIG, "binarizer config")
        if not isinstance(raw, dict):
            raise OndeviceError(f"{directory / layouts.BINARIZER_CONFIG} is not a binarizer config; re-create the binarizer")
        try:
            config = dataclass_from_dict(BinarizerConfig, raw, "binarizer config")
        except TypeError as exc:
            raise OndeviceError(f"{directory / layouts.BINARIZER_CONFIG} is incomplete ({exc}); re-create the binarizer") from None
        if config.bit_order != BIT_ORDER:
            raise OndeviceError(f"{directory} uses bit order {config.bit_order!r}; this ondevice reads only {BIT_ORDER!r}")
        check_bits(config.method, config.bits, config.dim)
        try:
            tensors = load_file(str(directory / layouts.BINARIZER_WEIGHTS))
        except Exception as exc:  # noqa: BLE001 -- safetensors raises its own error types for truncated/corrupt headers
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise OndeviceError(f"cannot read {directory / layouts.BINARIZER_WEIGHTS}: {first}; the file is corrupt, re-create it") from None
        if "projection" not in tensors or "offset" not in tensors:
            raise OndeviceError(f"{directory / layouts.BINARIZER_WEIGHTS} lacks 'projection'/'offset'; it is not a binarizer")
        A, c = tensors.pop("projection"), tensors.pop("offset")
        return cls(config, A, c, tensors)


def _no_more(method: str, hyper: dict[str, Any]) -> None:
    if hyper:
        raise OndeviceError(f"method {method!r} takes no hyper-parameters {sorted(hyper)}")
