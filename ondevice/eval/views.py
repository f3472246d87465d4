"""Views: what one row of the results measures, an encoder's float vectors or its binary codes from one binarizer.

A view's `features(texts)` returns float32 vectors or packed uint8 codes (bit order of `ondevice.bits`), read
from the encoding cache when possible. Float encodings are cached; codes from a binarizer are recomputed from
the cached floats (a matrix product), codes from a bundle are cached too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import layouts
from ondevice.errors import OndeviceError
from ondevice.eval.cache import EncodingCache
from ondevice.eval.encoders import files_bytes, files_identity


@dataclass
class ViewInfo:
    """Static facts about a view, reported beside its numbers."""

    name: str
    encoder: str
    method: str  # "float", a binarization method, or "bundle"
    binary: bool
    dim: int  # float dims, or code bits
    bytes_per_sentence: int
    model_bytes: int
    identity: dict


class FloatView:
    """An encoder's continuous vectors."""

    def __init__(self, name: str, encoder: Any, cache: EncodingCache):
        self.name, self.encoder, self.cache = name, encoder, cache
        self._dim: int | None = None
        self._binary = False

    def features(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, dim); packed uint8 codes only when a user-supplied encoder object returns codes."""
        out = self.cache.get(self.encoder.identity(), "float", texts, self.encoder.encode)
        self._binary = out.dtype == np.uint8
        self._dim = int(out.shape[1]) * (8 if self._binary else 1)
        return out if self._binary else np.asarray(out, dtype=np.float32)

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        """Straight through the model (for speed measurements)."""
        return self.encoder.encode(list(texts))

    def info(self) -> ViewInfo:
        dim = self._dim or 0
        per_sentence = dim // 8 if self._binary else 4 * dim
        return ViewInfo(self.name, self.name, "codes" if self._binary else "float", self._binary, dim, per_sentence,
                        int(self.encoder.model_bytes), self.encoder.identity())


class CodeView:
    """Packed codes: a binarizer applied to a float view."""

    def __init__(self, name: str, base: FloatView, binarizer: Any, binarizer_identity: dict, binarizer_bytes: int):
        self.name, self.base, self.binarizer = name, base, binarizer
        self._bid, self._bbytes = binarizer_identity, binarizer_bytes

    def features(self, texts: Sequence[str]) -> np.ndarray:
        """uint8 (n, ceil(bits / 8))."""
        return self.binarizer.transform(self.base.features(texts))

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        return self.binarizer.transform(self.base.encode_uncached(texts))

    def info(self) -> ViewInfo:
        bits = int(self.binarizer.bits)
        return ViewInfo(self.name, self.base.name, str(self.binarizer.method), True, bits, (bits + 7) // 8,
                        int(self.base.encoder.model_bytes) + self._bbytes,
                        {"base": self.base.encoder.identity(), "binarizer": self._bid})


class BundleCodeView:
    """Packed codes straight from an exported bundle's runtime."""

    def __init__(self, name: str, base: FloatView):
        self.name, self.base = name, base

    def features(self, texts: Sequence[str]) -> np.ndarray:
        enc = self.base.encoder
        return np.asarray(self.base.cache.get(enc.identity(), "codes", texts, enc.codes), dtype=np.uint8)

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        # not the codes kept from the float view's pass over the same texts: timing those measured a list compare
        return self.base.encoder.codes(list(texts), reuse=False)

    def info(self) -> ViewInfo:
        bits = int(self.base.encoder.bits)
        enc = self.base.encoder
        return ViewInfo(self.name, self.base.name, "bundle", True, bits, (bits + 7) // 8, int(enc.model_bytes),
                        enc.identity())


View = FloatView | CodeView | BundleCodeView


# ---------------------------------------------------------------------------------------------------------
# Encoder specs on the command line


@dataclass
class EncoderSpec:
    """A parsed `--encoder NAME=SPEC`: the base encoder and the binarizers to apply to it."""

    name: str
    kind: str  # teacher | student | glove | bundle
    arg: str = ""  # path / model spec
    pooling: str = "mean"  # teacher pooling
    precision: str | None = None  # bundle precision (fp32 / int8) in a two-precision export
    binarizer_dirs: tuple[str, ...] = ()
    fit: tuple[tuple[str, int], ...] = ()  # (method, bits) fitted on the fly
    allow_pickle: bool = False  # glove:FILE may be a gensim pickle (runs code when loaded); see README


SPEC_HELP = (
    "NAME=SPEC, repeatable. SPEC is one of: teacher (the packaged all-MiniLM-L6-v2), teacher:HF_DIR[:mean|cls|max], "
    "glove (GloVe 6B 50d average), glove:VECTORS_FILE, student:DIR, bundle:DIR[:fp32|int8] (its floats and codes); "
    "then optionally "
    "+binarizer:DIR (a saved binarizer) and/or +METHOD:BITS (fit one now, e.g. +random:2048), repeatable. "
    "NAME= may be left out (the kind is used)."
)


def parse_encoder_spec(text: str) -> EncoderSpec:
    """Parse one `--encoder` value (grammar in SPEC_HELP)."""
    # imported on use: at the top it would close an import cycle through the ondevice.eval package
    from ondevice.binarize import METHODS

    name, sep, spec = text.partition("=")
    if not sep:
        name, spec = "", text
    parts = spec.split("+")
    head, extras = parts[0].strip(), [p.strip() for p in parts[1:]]
    kind, _, arg = head.partition(":")
    pooling, precision = "mean", None
    if kind == "teacher":
        if arg and arg.rsplit(":", 1)[-1] in ("mean", "cls", "max"):
            arg, _, pooling = arg.rpartition(":")
        arg = arg or "all-MiniLM-L6-v2"
    elif kind == "glove":
        arg = arg or "glove-6b-50d"
    elif kind == "bundle" and arg.rsplit(":", 1)[-1] in ("fp32", "int8"):
        arg, _, precision = arg.rpartition(":")
    elif kind == "bundle" and ":" in arg:  # bundle:DIR:int4 is a typo of a precision, not a path named "DIR:int4"
        base, _, last = arg.rpartition(":")
        if not Path(arg).exists() and (Path(base).is_dir() or base.startswith("pretrained:")):
            raise OndeviceError(f"--encoder {text!r}: unknown precision {last!r}; use bundle:DIR (int8 if the folder "
                                "has both), bundle:DIR:fp32 or bundle:DIR:int8")
    if kind in ("student", "bundle") and not arg:
        raise OndeviceError(f"--encoder {text!r}: {kind} needs a path, e.g. {kind}:DIR")
    if kind not in ("teacher", "glove", "student", "bundle"):
        raise OndeviceError(f"--encoder {text!r}: unknown encoder kind {kind!r}; use teacher, glove, student or bundle")
    dirs, fit = [], []
    for extra in extras:
        what, _, value = extra.partition(":")
        if what == "binarizer" and value:
            dirs.append(value)
        elif what in METHODS and value.isdigit() and int(value) > 0:
            fit.append((what, int(value)))
        else:
            raise OndeviceError(
                f"--encoder {text!r}: cannot read {'+' + extra!r}; use +binarizer:DIR or +METHOD:BITS "
                f"with METHOD one of {', '.join(METHODS)}"
            )
    return EncoderSpec(name=name.strip() or kind, kind=kind, arg=arg, pooling=pooling, precision=precision,
                       binarizer_dirs=tuple(dirs), fit=tuple(fit))


def build_encoder(spec: EncoderSpec) -> Any:
    """The encoder object a spec names."""
    from ondevice.eval.encoders import BundleEncoder, GloveAverageEncoder, StudentEncoder, TeacherEncoder

    if spec.kind == "teacher":
        return TeacherEncoder(spec.arg, pooling=spec.pooling)
    if spec.kind == "glove":
        return GloveAverageEncoder(spec.arg, allow_pickle=spec.allow_pickle)
    if spec.kind == "student":
        return StudentEncoder(spec.arg)
    return BundleEncoder(spec.arg, precision=spec.precision)


def load_binarizer(directory: str | Path) -> tuple[Any, dict, int]:
    """(binarizer, identity, bytes) of a saved binarizer dir."""
    from ondevice.binarize import Binarizer

    directory = Path(directory)
    b = Binarizer.load(directory)
    names = layouts.BINARIZER_FILES  # the files load checked; nothing else there is read
    return b, {"path": str(directory), "files": files_identity(directory, names)}, files_bytes(directory, names)


def fit_binarizer(view: FloatView, method: str, bits: int, fit_texts: Sequence[str], seed: int) -> tuple[Any, dict, int]:
    """(binarizer, identity, bytes) of a binarizer fitted now on `view`'s vectors of `fit_texts`."""
    from ondevice.binarize import Binarizer

    vectors = view.features(fit_texts)
    b = Binarizer.fit(vectors, method=method, bits=bits, seed=seed, progress=False) if method in ("ae", "ae-sp") \
        else Binarizer.fit(vectors, method=method, bits=bits, seed=seed)
    A, c = b.affine()
    return b, {"method": method, "bits": bits, "seed": seed, "fit_texts": len(fit_texts),
               "train_sha256": b.config.train_sha256}, int(A.nbytes + c.nbytes)


def build_views(specs: Sequence[EncoderSpec], cache: EncodingCache, seed: int = 0,
                fit_texts: Callable[[], list[str]] | None = None, log: Callable[[str], None] = print) -> list[View]:
    """Every view the specs ask for: each encoder's floats, then its codes (bundle codes, saved and fitted binarizers)."""
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise OndeviceError(f"encoder names must differ; {', '.join(dup)} used twice (write NAME=SPEC)")
    views: list[View] = []
    for spec in specs:
        base = FloatView(spec.name, build_encoder(spec), cache)
        views.append(base)
        if spec.kind == "bundle":
            views.append(BundleCodeView(f"{spec.name}/codes-{base.encoder.bits}", base))
        for d in spec.binarizer_dirs:
            b, bid, nbytes = load_binarizer(d)
            views.append(CodeView(f"{spec.name}/{b.method}-{b.bits}", base, b, bid, nbytes))
        for method, bits in spec.fit:
            if fit_texts is None:
                raise OndeviceError("fitting a binarizer needs fit sentences (the wiki corpus in --data)")
            texts = fit_texts()
            t0 = time.perf_counter()
            b, bid, nbytes = fit_binarizer(base, method, bits, texts, seed)
            log(f"fitted {method}-{bits} on {len(texts)} {spec.name} vectors in {time.perf_counter() - t0:.1f}s")
            views.append(CodeView(f"{spec.name}/{method}-{bits}", base, b, bid, nbytes))
    return views
