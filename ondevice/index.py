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
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.bits import BIT_ORDER, code_bytes
from ondevice.errors import OndeviceError
from ondevice.io import atomic_path, check_out_index_file

VERSION = 2
READABLE_VERSIONS = (1, 2)
HEADER_BYTES = 256  # version 2; version 1 files have a 128-byte header
_HEADER_BYTES = {1: 128, 2: 256}
_BIT_ORDERS = {0: "little"}
_FLAG_ASCENDING = 1
_KNOWN_FLAGS = _FLAG_ASCENDING
# magic, version, bits, code_bytes, bit order, flags, count, codes offset, ids offset, file size, sha256
_HEAD = struct.Struct("<8sIIIBB2xQQQQ32s")
# version 2 adds: encoder sha256, binarizer sha256, precision code, 3 reserved zero bytes
_IDENT = struct.Struct("<32s32sB3x")
_CRC = struct.Struct("<I")
_PRECISIONS = {0: "", 1: "fp32", 2: "int8", 3: "float"}  # "float": a torch student, "": unknown
_MAX_RESULT_ENTRIES = 1 << 27  # k beyond the index size pads with -1; refuse padding beyond ~1.6 GB of output
MAX_BITS = 1 << 16  # 8 KB codes; far above any binarizer's width, and it bounds what a header can make us allocate
_CHUNK = 16 << 20  # bytes per write/hash step, so saving never makes a second copy of the codes


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


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
    def nbytes(self) -> int:
        """Bytes held by codes and ids."""
        return int(self._codes.nbytes + self._ids.nbytes)

    def __repr__(self) -> str:
        return f"HammingIndex(bits={self.bits}, n={len(self)})"

    def warmup(self, queries: np.ndarray | int = 1) -> None:
        """Load (or compile) the search kernels now, for `queries` (the array to search, or how many), not in the search."""
        from ondevice.kernels.hamming import knn

        if isinstance(queries, (int, np.integer)):
            queries = np.zeros((int(queries), self._nbytes), np.uint8)
        queries = self._check_codes(queries, "queries")  # same dtype, layout and flags as the search will see
        if len(self) and len(queries):
            n = min(len(self), 64)
            knn(self._codes[:n], queries, 1, ids=self._ids[:n], ids_ascending=self._ascending, threads=1)

    # -- input checks ---------------------------------------------------------------------------------
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
    def add(self, codes: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """Append codes; ids default to consecutive integers after the largest id so far. Returns the ids."""
        codes = self._check_codes(codes, "codes")
        n = len(codes)
        if ids is None:
            new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            new_ids = np.asarray(ids)
            if new_ids.shape != (n,) or not np.issubdtype(new_ids.dtype, np.integer):
                raise OndeviceError(f"ids must be integers of shape ({n},), got {new_ids.dtype} {new_ids.shape}")
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
        return removed

    # -- search ---------------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, threads: int | None = None,
               path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """k nearest codes per query: (int32 distances, int64 ids), each (nq, k), by (distance, id), -1 padded.

        threads=None picks the thread count from the work size; `path` forces a kernel path (see kernels.hamming).
        """
        from ondevice.kernels.hamming import knn

        queries = self._check_codes(queries, "queries")
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise OndeviceError(f"k must be a positive integer, got {k!r}")
        if k > len(self) and len(queries) * int(k) > _MAX_RESULT_ENTRIES:
            raise OndeviceError(f"k={k} asks for more results than the index holds ({len(self)} codes) and would "
                                f"allocate {len(queries) * int(k) * 12 / 1e9:.0f} GB of -1 padding; use k <= {len(self)}")
        if len(self) == 0:
            return np.full((len(queries), int(k)), -1, np.int32), np.full((len(queries), int(k)), -1, np.int64)
        return knn(self._codes, queries, int(k), ids=self._ids, ids_ascending=self._ascending,
                   threads=self._threads(threads), path=path)

    def range_search(self, queries: np.ndarray, radius: int, threads: int | None = None,
                     path: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Codes at distance < radius (FAISS semantics): (lims (nq+1,), distances, ids); query i owns lims[i]:lims[i+1]."""
        from ondevice.kernels.hamming import range_search

        queries = self._check_codes(queries, "queries")
        if not isinstance(radius, (int, np.integer)) or radius < 0:
            raise OndeviceError(f"radius must be a non-negative integer, got {radius!r}")
        if len(self) == 0:
            return np.zeros(len(queries) + 1, np.int64), np.empty(0, np.int32), np.empty(0, np.int64)
        radius = min(int(radius), self._bits + 1)  # every code is within bits + 1; keeps radius inside int64
        return range_search(self._codes, queries, radius, ids=self._ids, threads=self._threads(threads), path=path)

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index to `path` atomically (format version 2, see the module docstring); an existing file there
        is replaced only when it is an index file."""
        path = check_out_index_file(path)
        n = len(self)
        codes_off = HEADER_BYTES
        ids_off = _align(codes_off + n * self._nbytes)
        size = ids_off + 8 * n
        digest = hashlib.sha256()
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fh.write(b"\0" * HEADER_BYTES)
            for arr, offset in ((self._codes, codes_off), (self._ids.astype("<i8", copy=False), ids_off)):
                fh.write(b"\0" * (offset - fh.tell()))
                flat = _byte_view(arr)
                for start in range(0, len(flat), _CHUNK):
                    chunk = flat[start : start + _CHUNK]
                    fh.write(chunk)
                    digest.update(chunk)
            flags = _FLAG_ASCENDING if self._ascending else 0
            enc = self.encoder or EncoderId()
            precision = {v: k for k, v in _PRECISIONS.items()}.get(enc.precision, 0)
            head = _HEAD.pack(layouts.INDEX_MAGIC, VERSION, self._bits, self._nbytes, 0, flags, n, codes_off, ids_off, size,
                              digest.digest()) + _IDENT.pack(_raw(enc.encoder_sha256), _raw(enc.binarizer_sha256), precision)
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
        if mmap and n:
            codes = np.memmap(path, np.uint8, "r", offset=head["codes_offset"], shape=(n, nb))
            ids = np.memmap(path, "<i8", "r", offset=head["ids_offset"], shape=(n,))
        else:
            codes = np.empty((n, nb), np.uint8)
            ids = np.empty(n, "<i8")
            with open(path, "rb") as fh:  # readinto fills the arrays directly: no second copy
                for arr, offset in ((codes, head["codes_offset"]), (ids, head["ids_offset"])):
                    fh.seek(offset)
                    if arr.nbytes and fh.readinto(_byte_view(arr)) != arr.nbytes:
                        raise OndeviceError(f"{path} is truncated; rebuild the index")
        if verify:
            digest = hashlib.sha256()
            for arr in (codes, ids):
                flat = _byte_view(arr)
                for start in range(0, len(flat), _CHUNK):
                    digest.update(flat[start : start + _CHUNK])
            if digest.digest() != head["sha256"]:
                raise OndeviceError(f"{path} is corrupt (data checksum mismatch); rebuild the index")
        ids = ids.astype(np.int64, copy=False)
        _check_ids(path, ids, head["ascending"])
        # Plain ndarray views of the maps (no copy): the kernels' single-query fast path takes exact ndarrays only.
        index._codes = codes.view(np.ndarray)
        index._ids = ids.view(np.ndarray)
        index._ascending = head["ascending"]
        index._next_id = int(ids.max()) + 1 if n else 0
        index.encoder = head["encoder"]
        index.verified = bool(verify) or n == 0
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
    crc_at = _HEAD.size + (_IDENT.size if version >= 2 else 0)
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
    if _BIT_ORDERS.get(order) != BIT_ORDER:
        raise OndeviceError(f"{path} uses bit order #{order}; this ondevice reads only {BIT_ORDER!r}")
    # A valid crc only proves the header is what some writer wrote: check every offset against what the count implies.
    expect_ids = _align(header_bytes + count * nb) if bits else 0
    if not 1 <= bits <= MAX_BITS or nb != code_bytes(bits) or flags & ~_KNOWN_FLAGS or count > actual or \
            codes_off != header_bytes or ids_off != expect_ids or size != ids_off + 8 * count:
        raise OndeviceError(f"{path} has an inconsistent header (bits {bits}, {count} codes, offsets {codes_off}/"
                            f"{ids_off}, size {size}); rebuild the index")
    if actual != size:
        raise OndeviceError(f"{path} is truncated or padded: the header says {count} codes ({size} bytes) but the "
                            f"file has {actual} bytes; rebuild the index")
    return {"bits": bits, "code_bytes": nb, "count": count, "codes_offset": codes_off, "ids_offset": ids_off,
            "size": size, "sha256": sha, "ascending": bool(flags & _FLAG_ASCENDING), "version": version,
            "encoder": encoder}
