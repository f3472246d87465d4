"""Run an exported bundle with numpy + onnxruntime only (no torch): texts -> embeddings, binary codes, search.

    bundle = Bundle.load("my-bundle")             # verifies every checksum and the format version
    vectors = bundle.encode(["a sentence"])       # float32 (n, dim)
    codes = bundle.codes(["a sentence"])          # uint8 (n, code_bytes), bit order "little"
    bundle.index_texts(catalog)                   # or bundle.attach_index(HammingIndex.load("catalog.odx"))
    distances, ids = bundle.search("a query", k=10)

A bundle is a folder whose manifest.json lists the sha256 and size of every other file; loading checks them all
before it parses anything, so a missing, truncated or modified file is a one-line OndeviceError. The files it
parses are parsed from the bytes that were hashed; symbolic links and ONNX external data (files no checksum
covers) are refused; one probe run checks the vocabulary fits the graph. Nothing in a bundle is unpickled. An InferenceSession's run() is thread-safe and the tokenizer is pure, so one Bundle may be
shared by many threads.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as load_safetensors

from ondevice import addons, layouts
from ondevice.bits import unpack

# The bundle format (manifest, checksums, limits) is owned by ondevice.bundle; these names stay importable here.
from ondevice.bundle.manifest import (  # noqa: F401
    _SHA256,
    FORMAT_VERSION,
    MAX_DIM,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_K,
    MAX_MANIFEST_BYTES,
    MAX_NAME,
    MAX_PARSED_BYTES,
    PARSED,
    REQUIRED,
    _bundle_error,
    _safe_name,
    check_precision,
    read_manifest,
    resolve_bundle,
    verify_files,
)
from ondevice.errors import OndeviceError, ort_error_line
from ondevice.onnxproto import allocation_problem, foreign_operators
from ondevice.tokenizer import Tokenizer, as_texts

if TYPE_CHECKING:  # the index module loads only when an index is used
    from ondevice.index import Filter


def _binarizer_weights(path: Path, data: bytes, manifest: dict) -> tuple[np.ndarray, np.ndarray]:
    """(projection (dim, bits), offset (bits,)) from the bytes of binarizer.safetensors, checked against the manifest."""
    try:
        weights = load_safetensors(data)
    except (SafetensorError, ValueError, TypeError, KeyError) as exc:  # KeyError: a dtype numpy has not (BF16, F8_*)
        raise _bundle_error(path, f"binarizer.safetensors cannot be parsed ({type(exc).__name__}: {str(exc)[:120]}); "
                                  "re-export the bundle") from None
    a, c = weights.get("projection"), weights.get("offset")
    dim, bits = manifest["dim"], manifest["bits"]
    if a is None or c is None or a.shape != (dim, bits) or c.shape != (bits,) or a.dtype.kind != "f" \
            or c.dtype.kind != "f" or not (np.isfinite(a).all() and np.isfinite(c).all()):
        raise _bundle_error(path, f"binarizer.safetensors needs a finite projection ({dim}, {bits}) and offset ({bits},) "
                                  "as the manifest's dim and bits say; re-export the bundle")
    return a, c


def _safetensors_metadata(data: bytes) -> dict:
    """The `__metadata__` of safetensors bytes that safetensors itself already parsed ({} when absent)."""
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else {}


PROBE_SECONDS = 10.0  # the load probe encodes 2 sentences of at most 2 tokens: milliseconds for any real encoder


class CodeIndex(Protocol):
    """What `Bundle.search` needs from an index: FAISS-style search over packed codes."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


def _session(path: Path, model: bytes, threads: int):
    # loaded on use: keeps `import ondevice.runtime` light
    from ondevice.ort_session import cpu_session, session_options

    foreign = foreign_operators(model)  # before onnxruntime sees the graph: nothing of it runs until it is ours
    if foreign:
        raise _bundle_error(path, f"{layouts.ENCODER_ONNX} uses operators ondevice never exports ({', '.join(foreign[:5])}); "
                                  "it was not written by `ondevice export`: re-export the bundle")
    too_big = allocation_problem(model)  # a size it computes from constants or input shapes, checked before any run
    if too_big:
        raise _bundle_error(path, f"{layouts.ENCODER_ONNX} is not an encoder ondevice exports: {too_big}; re-export the bundle")
    try:  # sizes that follow from tensor values meet the session's capped memory arena instead
        return cpu_session(model, session_options(threads, inter_op=1, quiet=True, capped=True))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own, unexported error types for bad graphs
        raise _bundle_error(path, f"{layouts.ENCODER_ONNX} cannot be loaded by onnxruntime ({ort_error_line(exc)}); upgrade onnxruntime "
                                  "or re-export the bundle") from None


_SIGNATURE = {"inputs": {"ids": "tensor(int64)", "lengths": "tensor(int64)"},
              "outputs": {"embedding": "tensor(float)", "code": "tensor(uint8)"}}


def _check_signature(path: Path, session) -> None:
    """The graph's declared inputs and outputs: ids and lengths of int64, a float embedding and a uint8 code."""
    for kind, want in _SIGNATURE.items():
        declared = {x.name: x.type for x in (session.get_inputs() if kind == "inputs" else session.get_outputs())}
        for name, dtype in want.items():
            if declared.get(name) != dtype:
                raise _bundle_error(path, f"{layouts.ENCODER_ONNX} declares {kind[:-1]} {name!r} as {declared.get(name)}, "
                                          f"not {dtype}; re-export the bundle")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero): dot products become cosines."""
    v = np.asarray(vectors, np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


class Bundle:
    """A loaded bundle: tokenizer + ONNX encoder (+ an optional code index for `search`)."""

    def __init__(self, path: Path, manifest: dict, tokenizer: Tokenizer, session, threads: int = 0):
        self.path = path
        self.manifest = manifest
        self.tokenizer = tokenizer
        self.session = session
        self.threads = threads
        self.index: CodeIndex | None = None
        self._pool = None  # threads that run int8 sentences side by side (see embed)

    @classmethod
    def load(cls, path: str | Path, precision: str | None = None, threads: int = 0) -> Bundle:
        """Load and verify a bundle; `precision` picks fp32/int8 in a two-precision export; threads 0 = onnxruntime's default."""
        path = resolve_bundle(path, precision)
        manifest = read_manifest(path)
        check_precision(path, manifest, precision)
        files = verify_files(path, manifest)
        _binarizer_weights(path, files[layouts.BINARIZER_WEIGHTS], manifest)  # a broken one fails here, not at indexing
        try:
            tokenizer = Tokenizer.from_bytes(files[layouts.VOCAB], files[layouts.TOKENIZER_JSON], f"bundle {path}")
        except OndeviceError as exc:
            raise OndeviceError(f"{exc} (re-export the bundle)") from None
        session = _session(path, files[layouts.ENCODER_ONNX], threads)
        shapes = {o.name: o.shape for o in session.get_outputs()}
        if shapes.get("embedding", [None, None])[1:] != [manifest["dim"]] or \
                shapes.get("code", [None, None])[1:] != [manifest["code_bytes"]]:
            raise _bundle_error(path, f"{layouts.ENCODER_ONNX} outputs {shapes} do not match the manifest's dim "
                                      f"{manifest['dim']} / code_bytes {manifest['code_bytes']}; re-export the bundle")
        _check_signature(path, session)
        bundle = cls(path, manifest, tokenizer, session, threads)
        bundle._probe()
        return bundle

    def _probe(self) -> None:
        """Run the graph once on the highest token id: a vocabulary larger than the graph's embedding table, or
        weights that give NaN, fail here at load rather than on the first rare word an app encodes; the graph's
        codes must be the binarizer file's codes of its vectors (a binarizer of another width or weights is refused)."""
        top = len(self.tokenizer) - 1
        ids = np.array([[top, 1, 0], [1, 0, 0]], dtype=np.int64)  # the last id, [UNK], and a [PAD] beyond the length
        emb, code = self.run_ids(ids, np.array([2, 1], dtype=np.int64), what="vocab.txt against the graph's embedding table",
                                 limit_s=PROBE_SECONDS)
        data = (self.path / layouts.BINARIZER_WEIGHTS).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.manifest["files"][layouts.BINARIZER_WEIGHTS]["sha256"]:
            raise _bundle_error(self.path, f"{layouts.BINARIZER_WEIGHTS} changed while the bundle was loading; load it again")
        projection, offset = _binarizer_weights(self.path, data, self.manifest)
        z = emb.astype(np.float64) @ projection.astype(np.float64) + offset.astype(np.float64)

        graph_bits = unpack(code, self.bits)
        near = np.abs(z) < 1e-3 * (1 + np.abs(z).max())  # a sign this close to 0 may round either way in int8 or fp16
        if ((graph_bits != (z > 0)) & ~near).mean() > 0.02:
            raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX}'s codes are not {layouts.BINARIZER_WEIGHTS}'s codes of its "
                                           "vectors (a binarizer of other weights or width); re-export the bundle")

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def bits(self) -> int:
        return int(self.manifest["bits"])

    @property
    def code_bytes(self) -> int:
        return int(self.manifest["code_bytes"])

    @property
    def precision(self) -> str:
        return str(self.manifest["precision"])

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, precision={self.precision!r}, dim={self.dim}, bits={self.bits})"

    def run_ids(self, ids: np.ndarray, lengths: np.ndarray, what: str = "",
                limit_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The graph on token ids: (embeddings float32 (n, dim), codes uint8 (n, code_bytes)), checked on every call:
        the shapes and types the manifest says, finite vectors, no bits set past the code length. With `limit_s` the
        run is stopped (one line) once it takes longer (between two operators of the graph)."""
        from ondevice.ort_session import MAX_GRAPH_MEMORY, is_memory_error, run_options_with_limit

        try:
            with run_options_with_limit(limit_s) as options:
                emb, code = self.session.run(["embedding", "code"], {"ids": ids, "lengths": lengths}, options)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own, unexported error types
            check = f" (checking {what})" if what else ""
            if is_memory_error(exc):
                raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} needs more than {MAX_GRAPH_MEMORY >> 30} GB of memory for "
                                               f"{len(ids)} sentences{check}; encode fewer at a time (--batch-size), or the graph "
                                               "is not an encoder ondevice exports: re-export it") from None
            if limit_s is not None and "terminate" in str(exc).lower():
                raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} ran over {limit_s:g} s for {len(ids)} short sentences{check}; "
                                               "an exported encoder takes milliseconds: re-export the bundle") from None
            raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} failed to run{check}: {ort_error_line(exc)}; the bundle's files do not fit "
                                           "together, re-export it") from None
        n = len(ids)
        if not isinstance(emb, np.ndarray) or emb.dtype != np.float32 or emb.shape != (n, self.dim) or \
                not isinstance(code, np.ndarray) or code.dtype != np.uint8 or code.shape != (n, self.code_bytes):
            got = [f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}" for x in (emb, code)]
            raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} returned {got[0]} and {got[1]} for {n} sentences, not float32 "
                                           f"({n}, {self.dim}) and uint8 ({n}, {self.code_bytes}); re-export the bundle")
        finite = np.isfinite(emb).all(axis=1)
        if not finite.all():  # an index would store such a row as a code of all zeros, and search would find it
            row = int(np.flatnonzero(~finite)[0])
            raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} gave NaN or infinite values for {int((~finite).sum())} of {n} "
                                           f"sentences (the first at position {row} of this call); its weights are broken "
                                           "for some inputs: re-export it from a finite student")
        if self.bits % 8 and (code[:, -1] >> (self.bits % 8)).any():
            raise _bundle_error(self.path, f"{layouts.ENCODER_ONNX} sets bits past the {self.bits}-bit code length; re-export "
                                           "the bundle")
        return emb, code

    @property
    def encoder_id(self):
        """This bundle's identity as an index records it (ondevice.index.EncoderId): manifest, binarizer, precision."""
        from ondevice.index import EncoderId

        if not hasattr(self, "_encoder_id"):
            inherited = self.manifest.get("encoder_identity")
            if isinstance(inherited, str) and _SHA256.match(inherited):
                # a copy whose encoder files are the source bundle's bytes (`ondevice pairs export --bundle` adds a
                # pair head) keeps the source's identity, so indexes built with either match without a warning
                manifest_sha = inherited
            else:
                # the parsed manifest, canonically serialized: it names the sha256 of every file of the bundle
                canonical = json.dumps(self.manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                manifest_sha = hashlib.sha256(canonical.encode("ascii")).hexdigest()
            from ondevice.index import affine_sha256

            name = layouts.BINARIZER_WEIGHTS
            data = (self.path / name).read_bytes()  # small; hashed again here because these are the bytes parsed
            if hashlib.sha256(data).hexdigest() != self.manifest["files"][name]["sha256"]:
                raise _bundle_error(self.path, f"{name} fails its sha256 check (modified after loading); reload the bundle")
            projection, offset = _binarizer_weights(self.path, data, self.manifest)
            binarizer = affine_sha256(projection, offset)
            if projection.dtype == np.float16:  # rounded at export: the binarizer it came from
                recorded = _safetensors_metadata(data).get("affine_sha256")
                binarizer = recorded if isinstance(recorded, str) and _SHA256.match(recorded) else binarizer
            self._encoder_id = EncoderId(manifest_sha, binarizer, self.precision)
        return self._encoder_id

    @property
    def rows_independent(self) -> bool:
        """Whether a sentence's result is the same in any batch (fp32; int8 graphs with range anchors)."""
        return self.precision == "fp32" or self.manifest.get("int8_rows_independent") is True

    def _embed_rows(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """One sentence per onnxruntime run, rows spread over `threads` Python threads (onnxruntime releases the GIL)."""
        def one(text: str) -> tuple[np.ndarray, np.ndarray]:
            return self.run_ids(*self.tokenizer.batch([text]))

        workers = self.threads or os.cpu_count() or 1
        if workers > 1 and len(texts) > 1:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ondevice-int8")
            rows = list(self._pool.map(one, texts, chunksize=16))
        else:
            rows = [one(t) for t in texts]
        return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])

    def embed(self, texts: str | Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings and codes of `texts` in one pass, in input order (a str is one text).

        Sentences are sorted by length and run `batch_size` per onnxruntime call when the bundle's rows are
        independent (fp32, and int8 exports with range anchors: every code is then a function of its sentence
        alone, equal to a one-sentence call, tested bit for bit). Older int8 bundles (`"int8_rows_per_run": 1`)
        run one sentence per call: their int8 LSTM quantizes activations over the whole call.
        """
        texts = as_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise OndeviceError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not texts:
            return np.zeros((0, self.dim), np.float32), np.zeros((0, self.code_bytes), np.uint8)
        if len(texts) == 1:  # the on-device hot path: one sentence, no sorting or scatter
            return self.run_ids(*self.tokenizer.batch(texts))
        if not self.rows_independent:
            return self._embed_rows(texts)
        emb = np.zeros((len(texts), self.dim), dtype=np.float32)
        codes = np.zeros((len(texts), self.code_bytes), dtype=np.uint8)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths share a batch: less padding
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            emb[idx], codes[idx] = self.run_ids(*self.tokenizer.batch([texts[i] for i in idx]))
        return emb, codes

    def encode(self, texts: str | Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Float32 sentence embeddings (n, dim), the student's output."""
        return self.embed(texts, batch_size)[0]

    def codes(self, texts: str | Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Packed binary codes uint8 (n, code_bytes), bit order "little"."""
        return self.embed(texts, batch_size)[1]

    def attach_index(self, index: CodeIndex, strict: bool = False) -> Bundle:
        """Use `index` (any object with FAISS-style `search(codes, k)`) for `search`.

        A HammingIndex that records its encoder is checked against this bundle: another binarizer is an error;
        another encoder or precision with the same binarizer is a warning (an error with strict=True).
        """
        from ondevice.index import check_encoder

        if not callable(getattr(index, "search", None)):
            raise OndeviceError(f"{type(index).__name__} has no search(queries, k) method; pass a code index")
        if getattr(index, "bits", self.bits) != self.bits:
            raise OndeviceError(f"the index holds {index.bits}-bit codes but this bundle makes {self.bits}-bit codes; "
                                "build the index from this bundle's codes")
        warning = check_encoder(getattr(index, "encoder", None), self.encoder_id, "the index")
        if warning and strict:
            raise OndeviceError(warning)
        if warning:
            warnings.warn(warning, stacklevel=2)
        self.index = index
        return self

    def index_texts(self, texts: Sequence[str], batch_size: int = 64, rescore_vectors: bool = False,
                    tags: np.ndarray | None = None, categories: np.ndarray | None = None) -> Bundle:
        """Encode a catalog and attach an exact Hamming index over its codes (id i = texts[i]); the index searches on
        the bundle's thread count (threads=0: chosen from the work size).

        rescore_vectors=True also keeps each text's unit-length embedding as int8 (dim + 4 bytes per text) so that
        `search(..., rescore=m)` can re-rank; `tags`/`categories` are per-text attributes for `search(..., filter=)`.
        """
        if not rescore_vectors:
            return self.index_codes(self.codes(texts, batch_size), tags=tags, categories=categories)
        emb, codes = self.embed(texts, batch_size)
        return self.index_codes(codes, vectors=unit_rows(emb), tags=tags, categories=categories)

    def index_codes(self, codes: np.ndarray, vectors: np.ndarray | None = None, tags: np.ndarray | None = None,
                    categories: np.ndarray | None = None) -> Bundle:
        """Attach an exact Hamming index over packed codes this bundle made (uint8 (n, code_bytes); id i = row i), e.g.
        from `dipair().states_and_codes` or a saved catalog, without encoding the texts again; `vectors` (float,
        kept as int8 for rescoring), `tags` and `categories` as in HammingIndex.add."""
        from ondevice.index import HammingIndex

        index = HammingIndex(bits=self.bits, threads=self.threads or None, encoder=self.encoder_id)
        index.add(self._packed(codes, "catalog codes", "n"), vectors=vectors, tags=tags, categories=categories)
        self.index = index
        return self

    def search(self, texts: str | Sequence[str], k: int = 10, rescore: int | None = None,
               filter: Filter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k catalog rows per query by Hamming distance: (distances (q, k), ids (q, k)), -1 padded.

        rescore=m (an index built with rescore_vectors=True): the Hamming top m*k re-ranked by the int8 dot product
        with the query's embedding, returned as (scores (q, k) float32, descending, ids); `filter`: an
        ondevice.index.Filter applied inside the scan.
        """
        self._check_search(k)
        if rescore is None:
            if filter is None:
                return self.index.search(self.codes(texts), int(k))
            return self.index.search(self.codes(texts), int(k), filter=filter)
        emb, codes = self.embed(texts)
        found = self.index.search(codes, int(k), filter=filter, rescore=rescore, query_vectors=unit_rows(emb))
        return found.scores, found.ids

    def search_codes(self, codes: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """`search` for packed query codes this bundle made (uint8 (q, code_bytes)): (distances, ids), -1 padded."""
        self._check_search(k)
        return self.index.search(self._packed(codes, "query codes", "q"), int(k))

    def _packed(self, codes: np.ndarray, what: str, rows: str) -> np.ndarray:
        """`codes` as this bundle's packed codes, uint8 (rows, code_bytes), or a one-line error naming `what`."""
        codes = np.asarray(codes)
        if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != self.code_bytes:
            raise OndeviceError(f"{what} must be uint8 of shape ({rows}, {self.code_bytes}), got {codes.dtype} {codes.shape}")
        return codes

    def _check_search(self, k: int) -> None:
        if self.index is None:
            raise OndeviceError("no index attached; call bundle.index_texts(catalog) or bundle.attach_index(index) first")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
            raise OndeviceError(f"k must be an integer in 1..{MAX_K:,}, got {k!r}")

    # Pair heads (optional parts, `ondevice pairs export`): an add-on provides them (ondevice.addons), so this
    # module never imports ondevice.pairs.
    def part(self, name: str, threads: int = 0):
        """An optional part's scorer ('pair_head', 'dipair'), loaded and verified on first use."""
        parts = self.__dict__.setdefault("_parts", {})
        if name not in parts:
            parts[name] = addons.part_factory(name)(self, threads)
        return parts[name]

    def pair_head(self, threads: int = 0):
        """The bundle's pair scorer (loaded and verified on first use); an error if the bundle has none."""
        return self.part("pair_head", threads)

    def dipair(self, threads: int = 0):
        """The bundle's DiPair scorer (loaded on first use); an error if it has none."""
        return self.part("dipair", threads)

    def pair_scorer(self, threads: int = 0):
        """The bundle's pair scorer, whichever head it has: DiPair (`dipair`) or DSE / DvBERT (`pair_head`)."""
        return self.dipair(threads) if "dipair" in self.manifest else self.pair_head(threads)

    def pair_scores(self, a: str | Sequence[str], b: str | Sequence[str]) -> np.ndarray:
        """Task scores of text pairs (a[i], b[i]) by the pair head: regression scale, probability, or class probabilities."""
        return self.pair_head().pair_scores(a, b)

    def rerank(self, query: str, candidates: Sequence[str] | np.ndarray, k: int = 10,
               blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of `candidates` (texts or precomputed vectors) for `query` by the pair head (blended with the embedding
        cosine when the bundle has a blend, unless blend=False): (keys, rows)."""
        return self.pair_head().rerank(query, candidates, k, blend=blend)

    def search_rerank(self, query: str, vectors: np.ndarray, k: int = 10, shortlist: int = 1000,
                      blend: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Hamming top-`shortlist` from the attached index, then the pair head's top-k: (keys, catalog ids)."""
        return self.pair_head().search_rerank(query, vectors, k, shortlist, blend=blend)
