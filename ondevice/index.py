"""A persistent, exact Hamming index over packed binary codes, FAISS-like: add, remove, search, range_search, save, load.

    index = HammingIndex(bits=256)
    index.add(codes)                                   # uint8 (n, 32), bit order "little" (ondevice.bits)
    distances, ids = index.search(queries, k=10)       # int32 / int64 (nq, 10), -1 padded
    index.save("catalog.odx")
    index = HammingIndex.load("catalog.odx")           # memory-mapped: the codes are not read up front

Memory: n * code_bytes for the codes plus 8 bytes per id, nothing else is kept; searches read the codes in place.

File format (version 2, little-endian): a 256-byte header, then the codes (n rows of code_bytes, at offset 256),
then the int64 ids (at the next 64-byte aligned offset). The header holds magic b"ONDVIDX\\0", version, bits,
code_bytes, bit order (0 = "little", the only one), flags (bit 0: ids strictly ascending), count, both offsets, the
file size, the sha256 of the codes and ids bytes, the identity of the encoder that made the codes (encoder sha256,
binarizer sha256, precision; zeros when unknown) and a crc32 of the header itself. Version 1 files (128-byte header,
no encoder identity) are still read. Files are written to a temporary name and renamed, so a reader sees the old
file or the new one, never a mix.

What loading checks, always: the magic, version, header crc, that the offsets and the file size are exactly the
ones the count implies, and that the ids are valid (>= 0, no duplicates, strictly ascending when the header says
so); a truncated, foreign or inconsistent file is a one-line OndeviceError. The sha256 over the codes and ids is
checked only when `verify` is true: the default for `mmap=False` (the bytes are read anyway) but NOT for the default
memory-mapped load, because checking it means reading every code. A memory-mapped index is therefore searched
without its codes being checksummed (`index.verified` says which); `HammingIndex.load(path, verify=True)` or
`ondevice index info --verify` checks it in full (the CLI's `search` does so itself for files up to 64 MB).

Optional sections (format version 3): an index may keep, per row, an int8 vector with a float32 scale (symmetric
per-row quantization, vector ~= int8 * scale) for rescoring, and attributes (a uint64 tag mask and an int32 category)
for filtered search:

    index.add(codes, vectors=floats, tags=masks, categories=cats)
    scores, ids, distances = index.search(q_codes, 10, rescore=4, query_vectors=q_floats)  # top 40 by Hamming, rescored
    distances, ids = index.search(q_codes, 10, filter=Filter(tags_all=0b10, categories=[3, 7]))

A file with sections is version 3: the version 2 header plus (before the crc) the section flags (bit 0: int8
vectors, bit 1: attributes), the vector dim, the offsets of the int8 vectors (n * dim), the float32 scales (n * 4),
the uint64 tags (n * 8) and the int32 categories (n * 4), each at the next 64-byte aligned offset after the previous
section (0 when absent), and the sha256 of the section bytes; the file ends after the last section. Loading checks
those offsets, the dim (1 to MAX_VECTOR_DIM) and the flags like the rest of the header, and that every scale is
finite and >= 0; the sections' sha256 is checked with the data's. An index without sections still writes version 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ondevice import layouts
from ondevice.bits import BIT_ORDER, code_bytes
from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, check_out_file, check_out_index_file

VERSION = 2  # what a plain index (codes and ids only) writes; one with sections writes SECTIONS_VERSION
SECTIONS_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
HEADER_BYTES = 256  # versions 2 and 3; version 1 files have a 128-byte header
_HEADER_BYTES = {1: 128, 2: 256, 3: 256}
_BIT_ORDERS = {0: "little"}
_FLAG_ASCENDING = 1
_KNOWN_FLAGS = _FLAG_ASCENDING
# magic, version, bits, code_bytes, bit order, flags, count, codes offset, ids offset, file size, sha256
_HEAD = struct.Struct("<8sIIIBB2xQQQQ32s")
# version 2 adds: encoder sha256, binarizer sha256, precision code, 3 reserved zero bytes
_IDENT = struct.Struct("<32s32sB3x")
# version 3 adds: section flags, int8 vector dim, offsets of int8 vectors, float32 scales, uint64 tags, int32
# categories (0 when absent), sha256 of the section bytes
_SECTIONS = struct.Struct("<IIQQQQ32s")
_SEC_VECTORS = 1
_SEC_ATTRIBUTES = 2
_KNOWN_SECTIONS = _SEC_VECTORS | _SEC_ATTRIBUTES
MAX_VECTOR_DIM = 1 << 14  # bounds what a header can make a reader map per row
_CRC = struct.Struct("<I")
_PRECISIONS = {0: "", 1: "fp32", 2: "int8", 3: "float"}  # "float": a torch student, "": unknown
_MAX_ID = 2**63 - 1  # ids are int64
_MAX_RESULT_ENTRIES = 1 << 27  # k beyond the index size pads with -1; refuse padding beyond ~1.6 GB of output
MAX_BITS = 1 << 16  # 8 KB codes; far above any binarizer's width, and it bounds what a header can make us allocate
_CHUNK = 16 << 20  # bytes per write/hash step, so saving never makes a second copy of the codes


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


_U64_MAX = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Filter:
    """Which rows a search may return: every bit of `tags_all`, any bit of `tags_any` (0: no condition), a category
    in `categories` (None: any). Applied inside the scan, so a search returns k rows whenever k rows are allowed."""

    tags_all: int = 0
    tags_any: int = 0
    categories: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tags_all", "tags_any"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) <= _U64_MAX:
                raise OndeviceError(f"Filter.{name} must be an integer bit mask in 0..2**64-1, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.categories is not None:
            cats = self.categories
            if isinstance(cats, (int, np.integer)):
                cats = (cats,)
            try:
                values = tuple(int(c) for c in cats if not isinstance(c, bool) and float(c) == int(c))
            except (TypeError, ValueError):
                values = ()
            if len(values) != len(tuple(cats)) or any(not -(1 << 31) <= c < (1 << 31) for c in values):
                raise OndeviceError(f"Filter.categories must be int32 integers, got {self.categories!r}")
            object.__setattr__(self, "categories", values)

    def allows(self, tags: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """Boolean mask of the rows this filter allows (the reference the kernel is tested against)."""
        tags = np.asarray(tags, np.uint64)
        ok = (tags & np.uint64(self.tags_all)) == np.uint64(self.tags_all)
        if self.tags_any:
            ok &= (tags & np.uint64(self.tags_any)) != 0
        if self.categories is not None:
            ok &= np.isin(np.asarray(categories, np.int32), np.array(self.categories, np.int32))
        return ok


def quantize_int8(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8 quantization: (int8 (n, dim), float32 scales (n,)) with vectors ~= int8 * scale."""
    v = np.asarray(vectors, np.float32)
    if v.ndim != 2 or not np.all(np.isfinite(v)):
        raise OndeviceError(f"vectors must be a finite float array of shape (n, dim), got {v.dtype} {v.shape}")
    scales = (np.abs(v).max(axis=1) / 127.0).astype(np.float32) if v.shape[1] else np.zeros(len(v), np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)  # an all-zero row stays zero with scale 0
    q = np.clip(np.rint(v / safe[:, None]), -127, 127).astype(np.int8)
    return q, scales


class Rescored(NamedTuple):
    """A rescored search: float32 scores (int8 dot product with the query), int64 ids and the rows' Hamming distances."""

    scores: np.ndarray
    ids: np.ndarray
    distances: np.ndarray


@dataclasses.dataclass(frozen=True)
class EncoderId:
    """Which encoder made an index's codes: its sha256, its binarizer's sha256 and precision ('' when unknown).

    A bundle's is `Bundle.encoder_id` (sha256 of its manifest, which covers every file, or the `encoder_identity` a
    copy with the same encoder files inherited from its source; `affine_sha256` of its
    binarizer; fp32/int8); a torch student + binarizer gives the sha256 of model.safetensors, `affine_sha256` of the
    binarizer and precision "float", so a bundle exported from them shares the binarizer identity. Codes of another binarizer are meaningless to compare; another
    precision or export of the same binarizer gives nearly the same bits (int8 vs fp32: ~99% bit agreement).
    """

    encoder_sha256: str = ""
    binarizer_sha256: str = ""
    precision: str = ""

    def describe(self) -> str:
        """A short human-readable form for messages."""
        enc = self.encoder_sha256[:12] or "unknown"
        return f"encoder {enc}{f' ({self.precision})' if self.precision else ''}, binarizer {self.binarizer_sha256[:12] or 'unknown'}"

    def mismatch(self, other: EncoderId) -> str | None:
        """None if `other` makes codes comparable with this one's; 'binarizer' (incompatible) or 'encoder' (close)."""
        if self.binarizer_sha256 and other.binarizer_sha256 and self.binarizer_sha256 != other.binarizer_sha256:
            return "binarizer"
        if (self.encoder_sha256 and other.encoder_sha256 and self.encoder_sha256 != other.encoder_sha256) or \
                (self.precision and other.precision and self.precision != other.precision):
            return "encoder"
        return None


def affine_sha256(projection: np.ndarray, offset: np.ndarray) -> str:
    """A binarizer's identity: sha256 of its affine map (code = pack(h @ A + c > 0)) as little-endian float32."""
    a = np.ascontiguousarray(projection, "<f4")
    c = np.ascontiguousarray(offset, "<f4")
    h = hashlib.sha256(b"ondevice-affine-v1")
    h.update(np.array(a.shape + c.shape, "<i8").tobytes())
    h.update(a.tobytes())
    h.update(c.tobytes())
    return h.hexdigest()


def check_encoder(index_id: EncoderId | None, query_id: EncoderId | None, where: str) -> str | None:
    """Compare an index's encoder with the one making queries: raise on another binarizer, return a warning or None."""
    if index_id is None or query_id is None:
        return None
    kind = index_id.mismatch(query_id)
    if kind == "binarizer":
        raise OndeviceError(f"{where} was built with codes of another binarizer ({index_id.describe()}) than the "
                            f"queries ({query_id.describe()}); their distances mean nothing: rebuild the index with "
                            "this encoder or search with the one it was built with")
    if kind == "encoder":
        return (f"{where} was built with {index_id.describe()}, the queries come from {query_id.describe()}: "
                "same binarizer, so results are close but not identical to searching with the same encoder")
    return None


def _hex(raw: bytes) -> str:
    return raw.hex() if any(raw) else ""


def _raw(hexdigest: str) -> bytes:
    return bytes.fromhex(hexdigest) if hexdigest else b"\0" * 32


def _readonly(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def _byte_view(arr: np.ndarray) -> memoryview:
    """The bytes of a contiguous array, without a copy (also for empty arrays, which memoryview.cast rejects)."""
    return memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


class HammingIndex:
    """Exact k-NN and range search by Hamming distance over packed codes, with int64 ids and a file format."""

    def __init__(self, bits: int, threads: int | None = None, encoder: EncoderId | None = None):
        if not isinstance(bits, (int, np.integer)) or not 1 <= bits <= MAX_BITS:
            raise OndeviceError(f"bits must be an integer from 1 to {MAX_BITS}, got {bits!r}")
        if encoder is not None and not isinstance(encoder, EncoderId):
            raise OndeviceError(f"encoder must be an ondevice.index.EncoderId, got {type(encoder).__name__}")
        self.encoder = encoder  # saved in the file (format v2) and checked by Bundle.attach_index and the CLI
        self.verified = True  # False after a memory-mapped load that did not checksum the data
        self._bits = int(bits)
        self._nbytes = code_bytes(self._bits)
        self.threads = threads
        self._codes = np.empty((0, self._nbytes), np.uint8)
        self._ids = np.empty(0, np.int64)
        self._ascending = True  # ids strictly increasing with the row: lets kernels skip tie checks
        self._next_id = 0
        self._vectors: np.ndarray | None = None  # int8 (n, dim), optional: rescoring
        self._scales: np.ndarray | None = None  # float32 (n,)
        self._tags: np.ndarray | None = None  # uint64 (n,), optional: filters
        self._cats: np.ndarray | None = None  # int32 (n,)
        self._order: np.ndarray | None = None  # argsort of the ids, for id -> row when ids are not ascending
        self._unchecked_padding: Path | None = None  # the file of a mapped load whose padding bits are checked at
        # the first search (a search reads every code anyway; a load that maps the file reads none)

    # -- properties ---------------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Bits per code."""
        return self._bits

    @property
    def code_bytes(self) -> int:
        """Bytes per packed code."""
        return self._nbytes

    @property
    def codes(self) -> np.ndarray:
        """The stored codes (n, code_bytes), read-only (a view of the file's memmap after `load(mmap=True)`)."""
        view = self._codes.view()
        view.flags.writeable = False
        return view

    @property
    def ids(self) -> np.ndarray:
        """The id of each stored code, int64 (n,), read-only."""
        view = self._ids.view()
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return int(self._codes.shape[0])

    @property
    def vector_dim(self) -> int:
        """Dimension of the stored int8 vectors; 0 when the index keeps none."""
        return 0 if self._vectors is None else int(self._vectors.shape[1])

    @property
    def vectors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(int8 vectors (n, dim), float32 scales (n,)), read-only, or None when the index keeps none."""
        if self._vectors is None:
            return None
        return _readonly(self._vectors), _readonly(self._scales)

    @property
    def has_attributes(self) -> bool:
        """Whether rows carry tags and categories (filters need them)."""
        return self._tags is not None

    @property
    def tags(self) -> np.ndarray:
        """uint64 tag mask per row (zeros when the index keeps no attributes), read-only."""
        return _readonly(self._tags) if self._tags is not None else np.zeros(len(self), np.uint64)

    @property
    def categories(self) -> np.ndarray:
        """int32 category per row (zeros when the index keeps no attributes), read-only."""
        return _readonly(self._cats) if self._cats is not None else np.zeros(len(self), np.int32)

    @property
    def nbytes(self) -> int:
        """Bytes held by codes, ids and the optional sections."""
        extra = sum(a.nbytes for a in (self._vectors, self._scales, self._tags, self._cats) if a is not None)
        return int(self._codes.nbytes + self._ids.nbytes + extra)

    def __repr__(self) -> str:
        return f"HammingIndex(bits={self.bits}, n={len(self)})"

    def warmup(self, queries: np.ndarray | int = 1) -> None:
        """Load (or compile) the search kernels now, for `queries` (the array to search, or how many), not in the search."""
        # looked up on each call, so a patched attribute is seen
        from ondevice.kernels.hamming import knn

        if isinstance(queries, (int, np.integer)):
            queries = np.zeros((int(queries), self._nbytes), np.uint8)
        queries = self._check_codes(queries, "queries")  # same dtype, layout and flags as the search will see
        if len(self) and len(queries):
            n = min(len(self), 64)
            knn(self._codes[:n], queries, 1, ids=self._ids[:n], ids_ascending=self._ascending, threads=1)

    # -- input checks ---------------------------------------------------------------------------------
    def _check_padding(self) -> None:
        """Once, before the first search of a memory-mapped load: no stored code may set a padding bit past the bit
        count (a distance would count bits no code has: a row 3 away from itself)."""
        path = self._unchecked_padding
        if path is None:
            return
        pad = self._nbytes * 8 - self._bits
        last = self._codes[:, -1]
        step = 1 << 22  # slices: a full-length temporary would double the memory of a large mapped file
        for start in range(0, len(last), step):
            if bool(np.any(last[start : start + step] >> (8 - pad))):
                raise OndeviceError(f"{path} stores codes with bits set past bit {self._bits} (the padding of its "
                                    f"{self._nbytes}-byte codes); rebuild the index")
        self._unchecked_padding = None

    def _check_codes(self, codes, what: str) -> np.ndarray:
        arr = np.asarray(codes)
        if arr.ndim == 1 and what == "queries":
            arr = arr[None, :]
        if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != self._nbytes:
            raise OndeviceError(f"{what} must be uint8 of shape (n, {self._nbytes}) for {self.bits}-bit codes "
                                f"(pack them with ondevice.bits.pack), got {arr.dtype} {arr.shape}")
        pad = self._nbytes * 8 - self._bits
        if pad and len(arr) and np.any(arr[:, -1] >> (8 - pad)):
            raise OndeviceError(f"{what} have non-zero padding bits beyond bit {self.bits}; "
                                f"pack {self.bits}-bit codes with ondevice.bits.pack")
        return np.ascontiguousarray(arr)

    def _threads(self, threads: int | None) -> int | None:
        threads = self.threads if threads is None else threads
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise OndeviceError(f"threads must be a positive integer, got {threads!r}")
        return threads

    # -- mutation -------------------------------------------------------------------------------------
    def add(self, codes: np.ndarray, ids: np.ndarray | None = None, *, vectors: np.ndarray | None = None,
            scales: np.ndarray | None = None, tags: np.ndarray | None = None,
            categories: np.ndarray | None = None) -> np.ndarray:
        """Append codes; ids default to consecutive integers after the largest id so far. Returns the ids.

        `vectors`: float rows to keep as int8 for rescoring (or int8 rows with their float32 `scales`); once an index
        keeps vectors every add must bring them. `tags` (uint64) and `categories` (int32): attributes for filters;
        rows added without them get 0 and 0.
        """
        codes = self._check_codes(codes, "codes")
        n = len(codes)
        q8, sc = self._check_vectors(vectors, scales, n)
        tg, ct = self._check_attributes(tags, categories, n)
        if ids is None:
            if self._next_id + n - 1 > _MAX_ID:  # np.arange would overflow int64 (or raise OverflowError)
                raise OndeviceError(f"the next {n:,} ids would pass {_MAX_ID:,} (2^63 - 1, the largest id); pass ids")
            new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            new_ids = np.asarray(ids)
            if new_ids.shape != (n,) or not np.issubdtype(new_ids.dtype, np.integer):
                raise OndeviceError(f"ids must be integers of shape ({n},) below 2^63, got {new_ids.dtype} {new_ids.shape}")
            if n and new_ids.dtype.kind == "u" and int(new_ids.max()) > _MAX_ID:  # would wrap to a negative int64
                raise OndeviceError(f"ids must be at most {_MAX_ID:,} (2^63 - 1), got {int(new_ids.max()):,}")
            new_ids = new_ids.astype(np.int64)
            if n and new_ids.min() < 0:
                raise OndeviceError("ids must be >= 0 (-1 marks a missing result)")
        if n == 0:
            return new_ids
        new_ascending = bool(np.all(new_ids[1:] > new_ids[:-1]))
        after_all = len(self) == 0 or (self._ascending and new_ids[0] > self._ids[-1])
        if not (new_ascending and after_all):  # the cheap case above cannot hold duplicates
            if len(np.unique(new_ids)) != n:
                raise OndeviceError("ids contain duplicates; every code needs its own id")
            clash = np.isin(new_ids, self._ids)
            if clash.any():
                raise OndeviceError(f"{int(clash.sum())} ids are already in the index (e.g. {int(new_ids[clash][0])}); "
                                    "remove them first")
        before = len(self)
        if q8 is not None:
            self._vectors = np.concatenate([self._vectors, q8]) if before else q8.copy()
            self._scales = np.concatenate([self._scales, sc]) if before else sc.copy()
        if tg is not None or self._tags is not None:
            old_t = self._tags if self._tags is not None else np.zeros(before, np.uint64)
            old_c = self._cats if self._cats is not None else np.zeros(before, np.int32)
            self._tags = np.concatenate([old_t, tg if tg is not None else np.zeros(n, np.uint64)])
            self._cats = np.concatenate([old_c, ct if ct is not None else np.zeros(n, np.int32)])
        self._order = None
        self._codes = np.concatenate([self._codes, codes]) if len(self) else codes.copy()
        self._ids = np.concatenate([self._ids, new_ids])
        self._ascending = new_ascending and after_all
        self._next_id = max(self._next_id, int(new_ids.max()) + 1)
        return new_ids

    def remove(self, ids: np.ndarray) -> int:
        """Remove the codes with these ids (unknown ids are ignored); returns how many were removed."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise OndeviceError(f"ids must be integers, got {ids.dtype}")
        drop = np.isin(self._ids, ids.astype(np.int64))
        removed = int(drop.sum())
        if removed:
            keep = ~drop
            self._codes = np.ascontiguousarray(self._codes[keep])
            self._ids = np.ascontiguousarray(self._ids[keep])
            for name in ("_vectors", "_scales", "_tags", "_cats"):
                arr = getattr(self, name)
                if arr is not None:
                    setattr(self, name, np.ascontiguousarray(arr[keep]))
            self._order = None
        return removed

    def set_attributes(self, ids: np.ndarray, tags: np.ndarray | None = None,
                       categories: np.ndarray | None = None) -> None:
        """Change the tags and/or categories of existing rows by id (every id must be in the index)."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise OndeviceError(f"ids must be integers, got {ids.dtype}")
        rows = self.rows_of(ids.astype(np.int64))
        if np.any(rows < 0):
            raise OndeviceError(f"id {int(ids[np.argmax(rows < 0)])} is not in the index")
        tg, ct = self._check_attributes(tags, categories, len(ids))
        if self._tags is None:
            self._tags, self._cats = np.zeros(len(self), np.uint64), np.zeros(len(self), np.int32)
        self._tags, self._cats = np.array(self._tags), np.array(self._cats)  # writable copies (maps are read-only)
        if tags is not None:
            self._tags[rows] = tg
        if categories is not None:
            self._cats[rows] = ct

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Row position of each id (-1 for ids not in the index), int64."""
        ids = np.asarray(ids, np.int64)
        if self._ascending:
            order = None
            sorted_ids = self._ids
        else:
            if self._order is None:
                self._order = np.argsort(self._ids, kind="stable")
            order = self._order
            sorted_ids = self._ids[order]
        pos = np.searchsorted(sorted_ids, ids)
        pos_c = np.minimum(pos, max(len(sorted_ids) - 1, 0))
        found = (pos < len(sorted_ids)) & (sorted_ids[pos_c] == ids) if len(sorted_ids) else np.zeros(ids.shape, bool)
        rows = pos_c if order is None else order[pos_c]
        return np.where(found, rows, -1).astype(np.int64)

    def _check_vectors(self, vectors, scales, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        if vectors is None:
            if scales is not None:
                raise OndeviceError("scales come with int8 vectors; pass vectors= too")
            if self._vectors is not None and n:
                raise OndeviceError(f"this index keeps int8 vectors ({self.vector_dim} dims) for rescoring: "
                                    "pass vectors= with every add")
            return None, None
        v = np.asarray(vectors)
        if v.ndim != 2 or v.shape[0] != n or not 1 <= v.shape[1] <= MAX_VECTOR_DIM:
            raise OndeviceError(f"vectors must have shape ({n}, dim) with 1 <= dim <= {MAX_VECTOR_DIM}, got {v.shape}")
        if self._vectors is None and len(self):
            raise OndeviceError("this index holds rows without vectors; vectors must come with the first add")
        if self._vectors is not None and v.shape[1] != self.vector_dim:
            raise OndeviceError(f"vectors have {v.shape[1]} dims, the index keeps {self.vector_dim}")
        if v.dtype == np.int8:
            sc = np.asarray(scales, np.float32).reshape(-1) if scales is not None else None
            if sc is None or sc.shape != (n,) or not np.all(np.isfinite(sc)) or np.any(sc < 0):
                raise OndeviceError(f"int8 vectors need float32 scales of shape ({n},), finite and >= 0")
            return np.ascontiguousarray(v), np.ascontiguousarray(sc)
        if scales is not None:
            raise OndeviceError("scales are only given with int8 vectors; float vectors are quantized here")
        if not np.issubdtype(v.dtype, np.floating):
            raise OndeviceError(f"vectors must be float (quantized here) or int8 with scales, got {v.dtype}")
        return quantize_int8(v)

    def _check_attributes(self, tags, categories, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        if tags is None and categories is None:
            return None, None
        tg = np.zeros(n, np.uint64)
        ct = np.zeros(n, np.int32)
        if tags is not None:
            t = np.asarray(tags)
            if t.shape != (n,) or not np.issubdtype(t.dtype, np.integer) or (t.dtype.kind == "i" and n and t.min() < 0):
                raise OndeviceError(f"tags must be non-negative integers (uint64 bit masks) of shape ({n},), "
                                    f"got {t.dtype} {t.shape}")
            tg = t.astype(np.uint64)
        if categories is not None:
            c = np.asarray(categories)
            if c.shape != (n,) or not np.issubdtype(c.dtype, np.integer) or \
                    (n and (int(c.min()) < -(1 << 31) or int(c.max()) >= 1 << 31)):
                raise OndeviceError(f"categories must be int32 integers of shape ({n},), got {c.dtype} {c.shape}")
            ct = c.astype(np.int32)
        return tg, ct

    # -- search ---------------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, threads: int | None = None, path: str | None = None, *,
               filter: Filter | None = None, rescore: int | None = None,
               query_vectors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | Rescored:
        """k nearest codes per query: (int32 distances, int64 ids), each (nq, k), by (distance, id), -1 padded.

        threads=None picks the thread count from the work size; `path` forces a kernel path (see kernels.hamming).
        `filter`: only rows it allows (skipped inside the scan: k rows whenever k are allowed). `rescore=m` with the
        float `query_vectors`: the Hamming top m*k re-ranked by the int8 dot product, returned as Rescored(scores,
        ids, distances), scores descending (ties by smaller id), padded with -inf / -1 / -1.
        """
        from ondevice.kernels.hamming import knn

        queries = self._check_codes(queries, "queries")
        self._check_padding()
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise OndeviceError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        if filter is not None and not isinstance(filter, Filter):
            raise OndeviceError(f"filter must be an ondevice.index.Filter, got {type(filter).__name__}")
        qv = self._check_rescore(rescore, query_vectors, len(queries))
        shortlist = k if rescore is None else k * int(rescore)
        if shortlist > len(self) and len(queries) * shortlist > _MAX_RESULT_ENTRIES:
            raise OndeviceError(f"k={k} asks for more results than the index holds ({len(self)} codes) and would "
                                f"allocate {len(queries) * shortlist * 12 / 1e9:.0f} GB of -1 padding; use k <= {len(self)}")
        nq = len(queries)
        if len(self) == 0 or nq == 0:
            d, i = np.full((nq, k), -1, np.int32), np.full((nq, k), -1, np.int64)
            return (d, i) if qv is None else Rescored(np.full((nq, k), -np.inf, np.float32), i, d)
        if filter is None:
            d, i = knn(self._codes, queries, min(shortlist, len(self)) if qv is not None else k, ids=self._ids,
                       ids_ascending=self._ascending, threads=self._threads(threads), path=path)
            if qv is None:
                return d, i
            rows = np.where(i >= 0, self.rows_of(np.maximum(i, 0)), -1)
        else:
            d, i, rows = self._filtered(queries, shortlist if qv is not None else k, filter, threads)
            if qv is None:
                return d, i
        return self._rescore(d, i, rows, qv, k)

    def _filtered(self, queries: np.ndarray, k: int, flt: Filter, threads: int | None):
        # numba: loaded on first use (importing it costs about a second)
        from ondevice.kernels.filtered import filtered_knn
        from ondevice.kernels.hamming import plan_threads

        kk = min(k, len(self))
        nthreads = plan_threads(len(self), self._nbytes, len(queries), self._threads(threads))
        d, i, rows = filtered_knn(self._codes, queries, kk, self._ids, self._tags, self._cats, flt.tags_all,
                                  flt.tags_any, None if flt.categories is None else np.array(flt.categories, np.int32),
                                  threads=nthreads)
        if kk < k:
            pad = ((0, 0), (0, k - kk))
            d, i, rows = np.pad(d, pad, constant_values=-1), np.pad(i, pad, constant_values=-1), \
                np.pad(rows, pad, constant_values=-1)
        return d, i, rows

    def _check_rescore(self, rescore, query_vectors, nq: int) -> np.ndarray | None:
        if rescore is None:
            if query_vectors is not None:
                raise OndeviceError("query_vectors are only used with rescore=m")
            return None
        if isinstance(rescore, bool) or not isinstance(rescore, (int, np.integer)) or not 1 <= rescore <= 1000:
            raise OndeviceError(f"rescore must be an integer multiplier in 1..1000, got {rescore!r}")
        if self._vectors is None:
            raise OndeviceError("this index keeps no int8 vectors to rescore with; build it with vectors "
                                "(index.add(codes, vectors=...), `ondevice index build --int8-vectors`)")
        if query_vectors is None:
            raise OndeviceError("rescore=m needs the queries' float vectors (query_vectors=)")
        qv = np.asarray(query_vectors, np.float32)
        if qv.ndim == 1:
            qv = qv[None, :]
        if qv.shape != (nq, self.vector_dim) or not np.all(np.isfinite(qv)):
            raise OndeviceError(f"query_vectors must be finite floats of shape ({nq}, {self.vector_dim}), got {qv.shape}")
        return qv

    def _rescore(self, d: np.ndarray, i: np.ndarray, rows: np.ndarray, qv: np.ndarray, k: int) -> Rescored:
        nq = len(qv)
        out_s = np.full((nq, k), -np.inf, np.float32)
        out_i = np.full((nq, k), -1, np.int64)
        out_d = np.full((nq, k), -1, np.int32)
        vecs, scales = self._vectors, self._scales
        for q in range(nq):
            valid = rows[q] >= 0
            r = rows[q, valid]
            if not len(r):
                continue
            # int8 rows times the float query, then the per-row scale: the dot product with the dequantized row
            s = (vecs[r].astype(np.float32) @ qv[q]) * scales[r]
            order = np.lexsort((i[q, valid], -s))[:k]
            m = len(order)
            out_s[q, :m], out_i[q, :m], out_d[q, :m] = s[order], i[q, valid][order], d[q, valid][order]
        return Rescored(out_s, out_i, out_d)

    def range_search(self, queries: np.ndarray, radius: int, threads: int | None = None,
                     path: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Codes at distance < radius (FAISS semantics): (lims (nq+1,), distances, ids); query i owns lims[i]:lims[i+1]."""
        # loaded on use: keeps `import ondevice.index` light (the kernels load on the first search)
        from ondevice.kernels.hamming import range_search

        queries = self._check_codes(queries, "queries")
        self._check_padding()
        if not isinstance(radius, (int, np.integer)) or radius < 0:
            raise OndeviceError(f"radius must be a non-negative integer, got {radius!r}")
        if len(self) == 0:
            return np.zeros(len(queries) + 1, np.int64), np.empty(0, np.int32), np.empty(0, np.int64)
        radius = min(int(radius), self._bits + 1)  # every code is within bits + 1; keeps radius inside int64
        return range_search(self._codes, queries, radius, ids=self._ids, threads=self._threads(threads), path=path)

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the index to `path` atomically (format version 2, see the module docstring); an existing file there
        is replaced only when it is an index file, or with `force` (a caller that checked what it replaces)."""
        path = check_out_file(path) if force else check_out_index_file(path)
        n = len(self)
        codes_off = HEADER_BYTES
        ids_off = _align(codes_off + n * self._nbytes)
        sections = (_SEC_VECTORS if self._vectors is not None else 0) | (_SEC_ATTRIBUTES if self._tags is not None else 0)
        layout = _section_layout(ids_off + 8 * n, n, sections, self.vector_dim)
        size = layout["size"]
        digest, sec_digest = hashlib.sha256(), hashlib.sha256()
        parts = [(self._codes, codes_off, digest), (self._ids.astype("<i8", copy=False), ids_off, digest)]
        if sections & _SEC_VECTORS:
            parts += [(self._vectors, layout["vectors"], sec_digest),
                      (self._scales.astype("<f4", copy=False), layout["scales"], sec_digest)]
        if sections & _SEC_ATTRIBUTES:
            parts += [(self._tags.astype("<u8", copy=False), layout["tags"], sec_digest),
                      (self._cats.astype("<i4", copy=False), layout["categories"], sec_digest)]
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fh.write(b"\0" * HEADER_BYTES)
            for arr, offset, hasher in parts:
                fh.write(b"\0" * (offset - fh.tell()))
                flat = _byte_view(arr)
                for start in range(0, len(flat), _CHUNK):
                    chunk = flat[start : start + _CHUNK]
                    fh.write(chunk)
                    hasher.update(chunk)
            flags = _FLAG_ASCENDING if self._ascending else 0
            enc = self.encoder or EncoderId()
            precision = {v: k for k, v in _PRECISIONS.items()}.get(enc.precision, 0)
            version = SECTIONS_VERSION if sections else VERSION
            head = _HEAD.pack(layouts.INDEX_MAGIC, version, self._bits, self._nbytes, 0, flags, n, codes_off, ids_off, size,
                              digest.digest()) + _IDENT.pack(_raw(enc.encoder_sha256), _raw(enc.binarizer_sha256), precision)
            if sections:
                head += _SECTIONS.pack(sections, self.vector_dim, layout["vectors"], layout["scales"], layout["tags"],
                                       layout["categories"], sec_digest.digest())
            fh.seek(0)
            fh.write(head + _CRC.pack(zlib.crc32(head)))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, verify: bool | None = None,
             threads: int | None = None) -> HammingIndex:
        """Open an index file; `mmap=True` maps the codes and ids instead of reading them (see module docstring)."""
        path = Path(path)
        head = read_header(path)
        verify = (not mmap) if verify is None else verify
        index = cls(head["bits"], threads=threads)
        n, nb = head["count"], head["code_bytes"]
        dim, sections = head["vector_dim"], head["sections"]
        specs = [("codes", np.uint8, (n, nb), head["codes_offset"]), ("ids", "<i8", (n,), head["ids_offset"])]
        if sections & _SEC_VECTORS:
            specs += [("vectors", np.int8, (n, dim), head["vectors_offset"]), ("scales", "<f4", (n,), head["scales_offset"])]
        if sections & _SEC_ATTRIBUTES:
            specs += [("tags", "<u8", (n,), head["tags_offset"]), ("categories", "<i4", (n,), head["categories_offset"])]
        arrays: dict[str, np.ndarray] = {}
        if mmap and n:
            for name, dtype, shape, offset in specs:
                arrays[name] = np.memmap(path, dtype, "r", offset=offset, shape=shape)
        else:
            with open(path, "rb") as fh:  # readinto fills the arrays directly: no second copy
                for name, dtype, shape, offset in specs:
                    arr = arrays[name] = np.empty(shape, dtype)
                    fh.seek(offset)
                    if arr.nbytes and fh.readinto(_byte_view(arr)) != arr.nbytes:
                        raise OndeviceError(f"{path} is truncated; rebuild the index")
        codes, ids = arrays["codes"], arrays["ids"]
        if verify:
            for names, expect in ((("codes", "ids"), head["sha256"]), (tuple(a[0] for a in specs[2:]), head["sections_sha256"])):
                if not names:
                    continue
                digest = hashlib.sha256()
                for name in names:
                    flat = _byte_view(arrays[name])
                    for start in range(0, len(flat), _CHUNK):
                        digest.update(flat[start : start + _CHUNK])
                if digest.digest() != expect:
                    raise OndeviceError(f"{path} is corrupt (data checksum mismatch); rebuild the index")
            pad = nb * 8 - head["bits"]
            if pad and n and bool(np.any(codes[:, -1] >> (8 - pad))):  # a distance would count bits no code has
                raise OndeviceError(f"{path} stores codes with bits set past bit {head['bits']} (the padding of its "
                                    f"{nb}-byte codes); rebuild the index")
        if "scales" in arrays and n:
            scales = arrays["scales"]
            if not (np.all(np.isfinite(scales)) and float(scales.min()) >= 0):
                raise OndeviceError(f"{path} stores an invalid int8 vector scale (negative or not finite); rebuild the index")
        ids = ids.astype(np.int64, copy=False)
        _check_ids(path, ids, head["ascending"])
        # Plain ndarray views of the maps (no copy): the kernels' single-query fast path takes exact ndarrays only.
        index._codes = codes.view(np.ndarray)
        index._ids = ids.view(np.ndarray)
        index._ascending = head["ascending"]
        index._next_id = int(ids.max()) + 1 if n else 0
        if sections & _SEC_VECTORS:
            index._vectors = arrays["vectors"].view(np.ndarray)
            index._scales = arrays["scales"].astype(np.float32, copy=False).view(np.ndarray)
        if sections & _SEC_ATTRIBUTES:
            index._tags = arrays["tags"].astype(np.uint64, copy=False).view(np.ndarray)
            index._cats = arrays["categories"].astype(np.int32, copy=False).view(np.ndarray)
        index.encoder = head["encoder"]
        index.verified = bool(verify) or n == 0
        if not verify and n and nb * 8 != head["bits"]:
            index._unchecked_padding = path
        return index


def _check_ids(path: Path, ids: np.ndarray, ascending: bool) -> None:
    """Ids must be >= 0 (-1 marks "no result"), unique, and strictly ascending when the header says so."""
    n = len(ids)
    if n == 0:
        return
    if int(ids.min()) < 0:
        raise OndeviceError(f"{path} stores a negative id ({int(ids.min())}); -1 means 'no result' in searches, so "
                            "the file is corrupt or was not written by ondevice: rebuild the index")
    step = 1 << 22  # compare in slices: a full-length boolean temporary would double the memory of a large mapped file
    for start in range(0, n - 1, step):
        part = ids[start : start + step + 1]
        if ascending and not bool(np.all(part[1:] > part[:-1])):
            raise OndeviceError(f"{path} says its ids are ascending but they are not (duplicate or out of order); "
                                "the file is corrupt: rebuild the index")
    if not ascending and len(np.unique(ids)) != n:
        raise OndeviceError(f"{path} stores duplicate ids; the file is corrupt: rebuild the index")


def read_header(path: str | os.PathLike) -> dict:
    """Parse and check an index file's header and size; a foreign, truncated or newer file is a one-line error."""
    path = Path(path)
    if path.is_dir():
        raise OndeviceError(f"{path} is a folder without {layouts.MANIFEST}: give an index file (`ondevice index build "
                            "--out FILE.odx`) or a sharded index folder (`ondevice index build --shards N --out DIR`)")
    if not path.is_file():
        raise OndeviceError(f"index file not found: {path}")
    with open(path, "rb") as fh:
        raw = fh.read(HEADER_BYTES)
    actual = path.stat().st_size
    if len(raw) < 8 or raw[:8] != layouts.INDEX_MAGIC:
        raise OndeviceError(f"{path} is not an ondevice index file (bad magic); build one with `ondevice index build`")
    if len(raw) < 12:
        raise OndeviceError(f"{path} is truncated ({actual} bytes, shorter than the header); rebuild the index")
    version = struct.unpack_from("<I", raw, 8)[0]
    if version not in READABLE_VERSIONS:
        raise OndeviceError(f"{path} is index format version {version}; this ondevice reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}: upgrade ondevice or rebuild the index")
    header_bytes = _HEADER_BYTES[version]
    if len(raw) < header_bytes:
        raise OndeviceError(f"{path} is truncated ({actual} bytes, shorter than the header); rebuild the index")
    crc_at = _HEAD.size + (_IDENT.size if version >= 2 else 0) + (_SECTIONS.size if version >= 3 else 0)
    (crc,) = _CRC.unpack_from(raw, crc_at)
    if zlib.crc32(raw[:crc_at]) != crc:
        raise OndeviceError(f"{path} has a corrupt header (checksum mismatch); rebuild the index")
    _, _, bits, nb, order, flags, count, codes_off, ids_off, size, sha = _HEAD.unpack_from(raw)
    encoder = None
    if version >= 2:
        enc, binz, prec = _IDENT.unpack_from(raw, _HEAD.size)
        if prec not in _PRECISIONS:
            raise OndeviceError(f"{path} has an unknown precision code {prec}; upgrade ondevice or rebuild the index")
        if any(enc) or any(binz) or prec:
            encoder = EncoderId(_hex(enc), _hex(binz), _PRECISIONS[prec])
    sections, dim, vec_off, sc_off, tag_off, cat_off, sec_sha = 0, 0, 0, 0, 0, 0, b""
    if version >= 3:
        sections, dim, vec_off, sc_off, tag_off, cat_off, sec_sha = _SECTIONS.unpack_from(raw, _HEAD.size + _IDENT.size)
    if _BIT_ORDERS.get(order) != BIT_ORDER:
        raise OndeviceError(f"{path} uses bit order #{order}; this ondevice reads only {BIT_ORDER!r}")
    # A valid crc only proves the header is what some writer wrote: check every offset against what the count implies.
    expect_ids = _align(header_bytes + count * nb) if bits else 0
    bad_sections = sections & ~_KNOWN_SECTIONS or (version >= 3 and not sections) or \
        (not 1 <= dim <= MAX_VECTOR_DIM if sections & _SEC_VECTORS else dim != 0)
    layout = _section_layout(ids_off + 8 * count, count, 0 if bad_sections else sections, dim)
    if not 1 <= bits <= MAX_BITS or nb != code_bytes(bits) or flags & ~_KNOWN_FLAGS or count > actual or \
            codes_off != header_bytes or ids_off != expect_ids or bad_sections or size != layout["size"] or \
            (vec_off, sc_off, tag_off, cat_off) != (layout["vectors"], layout["scales"], layout["tags"],
                                                    layout["categories"]):
        raise OndeviceError(f"{path} has an inconsistent header (bits {bits}, {count} codes, offsets {codes_off}/"
                            f"{ids_off}, size {size}); rebuild the index")
    if actual != size:
        raise OndeviceError(f"{path} is truncated or padded: the header says {count} codes ({size} bytes) but the "
                            f"file has {actual} bytes; rebuild the index")
    return {"bits": bits, "code_bytes": nb, "count": count, "codes_offset": codes_off, "ids_offset": ids_off,
            "size": size, "sha256": sha, "ascending": bool(flags & _FLAG_ASCENDING), "version": version,
            "encoder": encoder, "sections": sections, "vector_dim": dim, "vectors_offset": vec_off,
            "scales_offset": sc_off, "tags_offset": tag_off, "categories_offset": cat_off, "sections_sha256": sec_sha}


def _section_layout(end: int, n: int, sections: int, dim: int) -> dict:
    """Offsets of the optional sections after the ids (which end at `end`), 0 when absent, and the file size."""
    out = {"vectors": 0, "scales": 0, "tags": 0, "categories": 0, "size": end}
    if sections & _SEC_VECTORS:
        out["vectors"] = _align(end)
        out["scales"] = _align(out["vectors"] + n * dim)
        end = out["size"] = out["scales"] + 4 * n
    if sections & _SEC_ATTRIBUTES:
        out["tags"] = _align(end)
        out["categories"] = _align(out["tags"] + 8 * n)
        out["size"] = out["categories"] + 4 * n
    return out
