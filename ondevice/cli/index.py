"""ondevice index: build an exact Hamming index file from packed codes or a corpus, search it, inspect it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.binarize import Binarizer
from ondevice.bits import MAX_BITS
from ondevice.cli import HelpFormatter as fmt
from ondevice.cli import add_seed
from ondevice.corpus import read_corpus
from ondevice.errors import OndeviceError
from ondevice.io import check_out_index_file, check_out_kind, check_replace, read_npy, sha256_file
from ondevice.runtime import Bundle, unit_rows
from ondevice.student import Student

HELP = ("build, search, serve and inspect an exact Hamming index; measure where a second search thread pays "
        "(subcommands: build, search, serve, info, calibrate)")


VERIFY_AUTO_BYTES = 64 << 20  # search checksums mapped index files up to this size itself (~30 ms at worst)


def _add_encoder(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("text encoder (to turn text into codes)")
    g.add_argument("--bundle", help="exported bundle dir (torch-free runtime)")
    g.add_argument("--precision", choices=("fp32", "int8"), default=None,
                   help="which half of a `--precision both` bundle (default: int8 if present; the choice is printed)")
    g.add_argument("--student", help="student dir (needs torch), together with --binarizer")
    g.add_argument("--binarizer", help="binarizer dir, together with --student")
    g.add_argument("--batch-size", type=int, default=256, help="sentences encoded per batch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="index_command", metavar="SUBCOMMAND")
    sub.required = True

    b = sub.add_parser("build", help="write an index file from packed codes (.npy) or a corpus", formatter_class=fmt)
    src = b.add_argument_group("input (one of)")
    src.add_argument("--codes", help="packed uint8 codes (n, code_bytes) as .npy, bit order 'little'; with --bundle "
                                     "(or --student + --binarizer) that encoder is recorded as the codes' maker")
    src.add_argument("--corpus", help="sentences, one per line (.gz allowed): encoded with --bundle or --student")
    b.add_argument("--ids", help="int64 ids (n,) as .npy (default: row numbers 0..n-1)")
    b.add_argument("--bits", type=int, default=None, help="bits per code (default: 8 x bytes per code)")
    b.add_argument("--max-sentences", type=int, default=None, help="use only the first N corpus sentences")
    b.add_argument("--int8-vectors", action="store_true",
                   help="also keep each sentence's embedding as int8 (dim + 4 bytes per item) for `index search --rescore`; "
                   "needs --corpus and --bundle")
    b.add_argument("--tags", help="uint64 tag masks (n,) as .npy: attributes for `index search --tags-all/--tags-any`")
    b.add_argument("--categories", help="int32 categories (n,) as .npy: attributes for `index search --category`")
    b.add_argument("--out", required=True, help="index file to write (e.g. catalog.odx); with --shards a folder")
    b.add_argument("--force", action="store_true",
                   help="let --out replace an existing file that is not an index, even an input of this run (atomically)")
    b.add_argument("--shards", type=int, default=0,
                   help="write S shard files (ids global) and a manifest.json with their checksums into folder --out")
    _add_encoder(b)
    add_seed(b)
    b.set_defaults(_index=_build)

    s = sub.add_parser("search", help="k nearest codes to text queries or to a codes file", formatter_class=fmt)
    s.add_argument("index", help="index file written by `ondevice index build`")
    q = s.add_argument_group("queries (one of)")
    q.add_argument("--query", action="append", help="a text query (repeatable); needs --bundle or --student")
    q.add_argument("--queries", help="packed uint8 query codes (nq, code_bytes) as .npy")
    s.add_argument("-k", type=int, default=10, help="neighbours per query")
    s.add_argument("--radius", type=int, default=None, help="instead of top-k: every code at distance < RADIUS (>= 1; 1: exact duplicates only)")
    s.add_argument("--threads", type=int, default=None,
                   help="search threads (default: chosen from the work size, one for small indexes, up to all cores)")
    s.add_argument("--corpus", help="the corpus the index was built from, to print the matching sentences")
    s.add_argument("--rerank", type=int, default=0, metavar="N",
                   help="take the Hamming top N, then show the top k by the bundle's pair head (its blended key; "
                        "e.g. the shipped duplicate-question head); needs --query, --bundle and --corpus (0: off)")
    s.add_argument("--rescore", type=int, default=None, metavar="M",
                   help="re-rank the Hamming top M*k by the int8 vectors the index keeps (`build --int8-vectors`); "
                   "needs --query and --bundle")
    f = s.add_argument_group("filter (rows are skipped inside the scan; the index needs --tags/--categories)")
    f.add_argument("--tags-all", type=lambda x: int(x, 0), default=0, metavar="MASK",
                   help="only rows whose tag mask has every bit of MASK (e.g. 0b101 or 5)")
    f.add_argument("--tags-any", type=lambda x: int(x, 0), default=0, metavar="MASK",
                   help="only rows whose tag mask has at least one bit of MASK")
    f.add_argument("--category", type=int, action="append", default=None,
                   help="only rows of this category (repeatable: any of them)")
    s.add_argument("--json", action="store_true", help="print one JSON object per query")
    s.add_argument("--no-mmap", action="store_true", help="read the index into memory (verifies its checksum)")
    s.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="sharded index: search the shards in this process, or one Ray actor per shard (ondevice[scale])")
    s.add_argument("--ray-address", default="", help="--backend ray: join this Ray cluster (default: a local Ray)")
    s.add_argument("--partial", action="store_true",
                   help="--backend ray: answer from the shards that respond and name the missing ones (default: error)")
    _add_encoder(s)
    add_seed(s)
    s.set_defaults(_index=_search)

    v = sub.add_parser("serve", help="HTTP search over a sharded index on Ray Serve (ondevice[scale]); Ctrl-C stops",
                       formatter_class=fmt)
    v.add_argument("index", help="sharded index folder written by `ondevice index build --shards S`")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    v.add_argument("--port", type=int, default=8000)
    v.add_argument("--route", default="/search", help="URL path of the search endpoint")
    v.add_argument("--ray-address", default="", help="join this Ray cluster (default: a local Ray)")
    v.add_argument("--replicas", type=int, default=1, help="replicas per shard")
    v.add_argument("--cpus-per-shard", type=float, default=1.0, help="logical CPUs each replica reserves")
    v.add_argument("--threads", type=int, default=1, help="search threads inside each replica")
    v.add_argument("--no-verify", action="store_true", help="skip the sha256 check of each shard file at start")
    add_seed(v)
    v.set_defaults(_index=_serve)

    i = sub.add_parser("info", help="print an index file's header; --verify checks every byte", formatter_class=fmt)
    i.add_argument("index", help="index file")
    i.add_argument("--verify", action="store_true", help="check the sha256 of all codes and ids")
    add_seed(i)
    i.set_defaults(_index=_info)

    c = sub.add_parser("calibrate", formatter_class=fmt,
                       help="measure this machine's thread crossover for searches and store it for every later process")
    c.add_argument("--bits", type=int, default=256, help="code width the measurement searches")
    c.add_argument("--max-mb", type=float, default=64.0, help="largest database measured (MB of codes)")
    c.add_argument("--repeats", type=int, default=15, help="timed searches per size and thread count")
    c.add_argument("--dry-run", action="store_true", help="measure and print, but do not store the result")
    c.add_argument("--seed", type=int, default=0, help="seed of the random codes and queries searched")
    c.set_defaults(_index=_calibrate)


def run(a: argparse.Namespace) -> int:
    return a._index(a)


# ------------------------------------------------------------------------------------------------ helpers


class _Encoder:
    """Texts -> packed codes through a bundle, or a student + binarizer (imported only when used)."""

    def __init__(self, a: argparse.Namespace):
        self.batch_size = a.batch_size
        if a.batch_size < 1:
            raise OndeviceError(f"--batch-size must be >= 1, got {a.batch_size}")
        if a.bundle and (a.student or a.binarizer):
            raise OndeviceError("give either --bundle or --student with --binarizer, not both")
        if a.precision and not a.bundle:
            raise OndeviceError("--precision picks a half of a bundle; it needs --bundle")
        if a.bundle:
            self._bundle = Bundle.load(a.bundle, precision=a.precision)
            self.bits = self._bundle.bits
            self.identity = self._bundle.encoder_id
            self.label = f"bundle {self._bundle.path} ({self._bundle.precision})"
        elif a.student and a.binarizer:
            # loaded on use: keeps the CLI's start (`ondevice --help` imports every command) light
            from ondevice.index import EncoderId, affine_sha256

            self._student, self._binarizer = Student.load(a.student), Binarizer.load(a.binarizer)
            self.bits = self._binarizer.bits
            self.identity = EncoderId(sha256_file(Path(a.student) / "model.safetensors"),
                                      affine_sha256(*self._binarizer.affine()), "float")
            self.label = f"student {a.student} (float) + binarizer {a.binarizer}"
        else:
            raise OndeviceError("text needs an encoder: pass --bundle DIR, or --student DIR and --binarizer DIR")

    @staticmethod
    def given(a: argparse.Namespace) -> bool:
        """Whether the command line names an encoder at all."""
        return bool(a.bundle or a.student or a.binarizer)

    def pair_head(self):
        """The bundle's pair scorer (DSE head); a one-line error for a student, or a bundle without one."""
        if not hasattr(self, "_bundle"):
            raise OndeviceError("--rerank uses a bundle's pair head: pass --bundle (e.g. pretrained), not --student")
        return self._bundle.pair_head()

    def embed(self, texts: list[str]):
        """(unit-length float embeddings, codes) of a bundle, for int8 vectors and rescoring."""
        if not hasattr(self, "_bundle"):
            raise OndeviceError("int8 vectors and --rescore use a bundle's embeddings: pass --bundle, not --student")
        emb, codes = self._bundle.embed(texts, batch_size=self.batch_size)
        return unit_rows(emb), codes

    def codes(self, texts: list[str]):
        if hasattr(self, "_bundle"):
            return self._bundle.codes(texts, batch_size=self.batch_size)
        return self._binarizer.transform(self._student.encode(texts, batch_size=self.batch_size))


# ------------------------------------------------------------------------------------------------ build


def _build(a: argparse.Namespace) -> int:
    from ondevice.index import HammingIndex

    if bool(a.codes) == bool(a.corpus):
        raise OndeviceError("give exactly one input: --codes CODES.npy or --corpus FILE (with --bundle or --student)")
    if a.max_sentences is not None and a.max_sentences < 1:
        raise OndeviceError(f"--max-sentences must be >= 1, got {a.max_sentences}")
    if a.shards < 0:
        raise OndeviceError(f"--shards must be >= 0 (0: one index file), got {a.shards}")
    if a.int8_vectors and not (a.corpus and a.bundle):
        raise OndeviceError("--int8-vectors keeps the bundle's embeddings of the sentences: it needs --corpus and --bundle")
    if a.shards and (a.int8_vectors or a.tags or a.categories):
        raise OndeviceError("--int8-vectors, --tags and --categories are kept in one index file; drop --shards")
    if a.shards:  # before any encoding: never into a bundle or other artifact, never over a file not an index
        check_out_kind(a.out, "sharded-index")
    else:
        if not a.force:
            check_out_index_file(a.out)
        # never an input of this run, a file inside an artifact folder or a link, unless --force
        check_replace(a.out, "--out", force=a.force, ours=lambda p: layouts.identify(p) == "index",
                      what="a Hamming index file", inputs=(a.codes, a.ids, a.corpus, a.tags, a.categories, a.bundle,
                                                           a.student))
    started = time.perf_counter()
    codes = read_npy(a.codes, "--codes") if a.codes else None  # empty, truncated, non-.npy or pickled: one line
    ids = read_npy(a.ids, "--ids") if a.ids else None
    encoder = _Encoder(a) if a.corpus or _Encoder.given(a) else None
    texts = None
    if a.corpus:
        texts = read_corpus(a.corpus, a.max_sentences)  # read before any progress line: a bad corpus is the only line
    if codes is not None:
        if codes.dtype != np.uint8 or codes.ndim != 2:
            raise OndeviceError(f"{a.codes} must hold uint8 packed codes of shape (n, code_bytes), got {codes.dtype} {codes.shape}")
        bits = a.bits if a.bits is not None else codes.shape[1] * 8
        if not 1 <= bits <= MAX_BITS:
            raise OndeviceError(f"--bits must be in 1..{MAX_BITS}, got {bits}")
        if encoder is not None and encoder.bits != bits:
            raise OndeviceError(f"{a.codes} holds {bits}-bit codes but the encoder makes {encoder.bits}-bit codes; "
                                "name the encoder that made these codes, or none")
    elif a.bits is not None and a.bits != encoder.bits:
        raise OndeviceError(f"--bits {a.bits} disagrees with the encoder's {encoder.bits}-bit codes; drop --bits")
    n = len(codes) if codes is not None else len(texts)
    if ids is not None and ids.shape != (n,):
        raise OndeviceError(f"{a.ids} has shape {ids.shape}; it needs one id per code ({n},)")
    if encoder is not None:
        print(f"encoder: {encoder.label}", file=sys.stderr)
    attrs = {}
    for name, dtype in (("tags", np.uint64), ("categories", np.int32)):
        given = getattr(a, name)
        if given:
            arr = read_npy(given, f"--{name}")
            if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
                raise OndeviceError(f"{given} must hold {n} integers ({name} for each code), got {arr.dtype} {arr.shape}")
            attrs[name] = arr
    vectors = None
    if codes is None and a.int8_vectors:
        parts = [encoder.embed(texts[i : i + 65536]) for i in range(0, len(texts), 65536)]
        vectors, codes = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        bits = encoder.bits
    elif codes is None:
        codes = np.concatenate([encoder.codes(texts[i : i + 65536]) for i in range(0, len(texts), 65536)])
        bits = encoder.bits
    if a.shards:
        from ondevice.scale.shards import build_shards

        manifest = build_shards(codes, a.out, a.shards, ids=ids, bits=bits)
        print(f"sharded index saved to {a.out}: {manifest.count:,} codes x {bits} bits in {len(manifest.shards)} shards "
              f"({sum(s.bytes for s in manifest.shards) / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s")
        return 0
    index = HammingIndex(bits, encoder=encoder.identity if encoder is not None else None)
    index.add(codes, ids, vectors=vectors, **attrs)
    index.save(a.out, force=a.force)
    print(f"index saved to {a.out}: {len(index):,} codes x {bits} bits "
          f"({Path(a.out).stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s")
    return 0


# ------------------------------------------------------------------------------------------------ search


def _search(a: argparse.Namespace) -> int:
    from ondevice.index import HammingIndex, check_encoder
    from ondevice.kernels import hamming

    if bool(a.query) == bool(a.queries):
        raise OndeviceError("give text queries (--query TEXT, repeatable) or --queries CODES.npy, not both or neither")
    if a.k < 1:
        raise OndeviceError(f"-k must be >= 1, got {a.k}")
    if a.threads is not None and a.threads < 1:
        raise OndeviceError(f"--threads must be >= 1, got {a.threads}")
    if a.radius is not None and not 1 <= a.radius <= MAX_BITS + 1:
        # FAISS semantics (distance < radius): 0 would always find nothing; exact duplicates are at distance 0
        raise OndeviceError(f"--radius must be in 1..{MAX_BITS + 1}: it finds codes at distance < RADIUS (1: exact "
                            f"duplicates only; a code has at most {MAX_BITS} bits), got {a.radius}")
    if a.rerank < 0:
        raise OndeviceError(f"--rerank must be >= 0 (0: off), got {a.rerank}")
    if a.rerank and (a.rerank < a.k or a.radius is not None or not (a.query and a.bundle and a.corpus)):
        raise OndeviceError(f"--rerank {a.rerank} reranks a Hamming shortlist of N >= k ({a.k}) with the pair head of "
                            "the --bundle: it needs --query TEXT, --bundle and --corpus, and no --radius")
    if a.rescore is not None and (a.rescore < 1 or not (a.query and a.bundle) or a.radius is not None or a.rerank):
        raise OndeviceError(f"--rescore {a.rescore} re-ranks by the int8 vectors of the index: it needs M >= 1, --query TEXT "
                            "and --bundle, and no --radius or --rerank")
    flt = None
    if a.tags_all or a.tags_any or a.category is not None:
        from ondevice.index import Filter

        flt = Filter(tags_all=a.tags_all, tags_any=a.tags_any, categories=a.category)
    started = time.perf_counter()
    index = _open_for_search(a)
    if a.radius is not None and not isinstance(index, HammingIndex):
        raise OndeviceError("--radius is not supported on a sharded index; use -k")
    if (flt is not None or a.rescore is not None) and not isinstance(index, HammingIndex):
        raise OndeviceError("--rescore and filters need one index file, not a sharded index")
    if flt is not None and a.radius is not None:
        raise OndeviceError("filters work with -k searches, not --radius")
    if a.rescore is not None and not index.vector_dim:
        raise OndeviceError(f"{a.index} keeps no int8 vectors; build it with `ondevice index build --int8-vectors`")
    texts = _corpus_lookup(a.corpus)  # a bad corpus is reported before any progress line
    if a.queries:
        queries = read_npy(a.queries, "--queries")
        labels = [f"#{i}" for i in range(len(queries) if queries.ndim == 2 else 1)]
    else:
        encoder = _Encoder(a)
        if encoder.bits != index.bits:
            raise OndeviceError(f"the encoder makes {encoder.bits}-bit codes but {a.index} holds {index.bits}-bit codes; "
                                "use the encoder the index was built with")
        head = encoder.pair_head() if a.rerank else None  # fails here, before the search, when there is none
        print(f"encoder: {encoder.label}", file=sys.stderr)
        warning = check_encoder(getattr(index, "encoder", None), encoder.identity, str(a.index))
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        elif getattr(index, "encoder", None) is None:
            print(f"note: {a.index} does not record which encoder built it (built from codes, or by an older "
                  "ondevice), so the encoder could not be checked", file=sys.stderr)
        if a.rescore is not None:
            query_vectors, queries = encoder.embed(list(a.query))
            if query_vectors.shape[1] != index.vector_dim:
                raise OndeviceError(f"the bundle's embeddings have {query_vectors.shape[1]} dims, {a.index} keeps "
                                    f"{index.vector_dim}: use the bundle the index was built with")
        else:
            queries = encoder.codes(list(a.query))
        labels = list(a.query)
    k = max(a.k, a.rerank)
    nq = len(queries) if getattr(queries, "ndim", 1) == 2 else 1
    single = isinstance(index, HammingIndex)
    # One search in a fresh process: plain numpy beats loading Numba's kernels (~0.7 s) up to a few hundred MB.
    path = hamming.oneshot_path(len(index), index.code_bytes, nq) if single and flt is None and a.rescore is None else None
    loaded = time.perf_counter()
    if path is None and single:
        index.warmup(queries)  # kernel load (or first compile) timed apart from the search itself
    warm = time.perf_counter()
    missing: list[int] = []
    scores = None
    if a.rescore is not None or flt is not None:
        kk = min(k, max(1, len(index)))
        if a.rescore is not None:
            found = index.search(queries, kk, filter=flt, rescore=a.rescore, query_vectors=query_vectors)
            dist, ids, scores = found.distances, found.ids, found.scores
        else:
            dist, ids = index.search(queries, kk, filter=flt)
        rows = [(dist[i][ids[i] >= 0], ids[i][ids[i] >= 0]) for i in range(len(ids))]
    elif a.radius is not None:
        lims, dist, ids = index.range_search(queries, a.radius, path=path)
        rows = [(dist[lims[i] : lims[i + 1]], ids[lims[i] : lims[i + 1]]) for i in range(len(lims) - 1)]
    else:
        if getattr(a, "partial", False) and hasattr(index, "search_partial"):
            result = index.search_partial(queries, min(k, max(1, len(index))))
            dist, ids, missing = result.distances, result.ids, result.missing
        elif single:
            dist, ids = index.search(queries, min(k, max(1, len(index))), path=path)
        else:
            dist, ids = index.search(queries, min(k, max(1, len(index))))  # never allocate for a k beyond the index
        rows = [(dist[i][ids[i] >= 0], ids[i][ids[i] >= 0]) for i in range(len(ids))]
    elapsed = time.perf_counter() - warm
    answers = [[{"id": int(x), "distance": int(y), **({"text": texts(int(x))} if texts else {})} for x, y in zip(i, d)]
               for d, i in rows]
    if scores is not None:
        for q, hits in enumerate(answers):
            for rank, hit in enumerate(hits):
                hit["score"] = round(float(scores[q, rank]), 6)
    if a.rerank:
        answers = [_rerank(head, label, hits, a.k) for label, hits in zip(labels, answers)]
        shortlist = min(a.rerank, len(index))
    reranked = time.perf_counter() - warm - elapsed
    for label, hits in zip(labels, answers):
        if a.json:
            extra = {"partial": True, "missing_shards": missing} if missing else {}
            print(json.dumps({"query": label, "results": hits, **extra}, ensure_ascii=False))
            continue
        print(f"query {label}")
        for rank, hit in enumerate(hits, 1):
            extra = f"  {hit['text']}" if "text" in hit else ""
            head_cols = (f"score={hit['score']:<7.3f} " + ("yes " if hit.get("decision") else "no  " if "decision" in hit else "")
                         if a.rerank or "score" in hit else "")
            print(f"  {rank:>4}  id={hit['id']:<10} d={hit['distance']:<5}{head_cols}{extra}")
    kernel = "numpy" if path == "numpy" else f"numba, {(warm - loaded) * 1e3:.0f} ms to load kernels"
    print(f"searched {len(index):,} codes for {len(rows)} queries in {elapsed * 1e3:.2f} ms ({kernel}; "
          f"index and queries ready in {(loaded - started) * 1e3:.0f} ms)"
          + (f"; reranked {shortlist} candidates per query with the pair head in {reranked * 1e3:.1f} ms" if a.rerank else ""),
          file=sys.stderr)
    if missing:
        print(f"PARTIAL RESULT: shards {missing} did not answer; their codes were not searched", file=sys.stderr)
    return 0


def _rerank(head, query: str, hits: list[dict], k: int) -> list[dict]:
    """The Hamming shortlist `hits` ordered by the pair head's rank key (ties keep the Hamming order), top k, each
    with the head's task score, key and, for a binary head, its decision."""
    if not hits:
        return hits
    scores, keys = head.score_pairs([query] * len(hits), [h["text"] for h in hits])
    decisions = keys > head.decision_threshold() if head.kind == "binary" else None
    order = sorted(range(len(hits)), key=lambda j: (-keys[j], j))[:k]
    # a classes head scores with one probability per label: its score is the one it ranks by (the key), all in JSON
    return [{**hits[j], "score": round(float(keys[j] if scores.ndim > 1 else scores[j]), 6), "key": round(float(keys[j]), 6),
             **({"probabilities": [round(float(x), 6) for x in scores[j]]} if scores.ndim > 1 else {}),
             **({"decision": bool(decisions[j])} if decisions is not None else {})} for j in order]


def _open_for_search(a: argparse.Namespace):
    """A single index file, or a sharded index (folder or manifest.json) searched here or on Ray actors."""
    from ondevice.index import HammingIndex, read_header
    from ondevice.scale.shards import ShardedIndex, is_sharded

    if not is_sharded(a.index):
        if a.backend == "ray" or a.partial:
            raise OndeviceError("--backend ray and --partial apply to a sharded index (built with --shards)")
        head = read_header(a.index)
        # A small mapped file is checksummed here (cheap); a large one is searched unchecked, and we say so.
        verify = not a.no_mmap and head["size"] <= VERIFY_AUTO_BYTES
        index = HammingIndex.load(a.index, mmap=not a.no_mmap, verify=verify or None, threads=a.threads)
        if not index.verified:
            print(f"note: {a.index} is memory-mapped and its {head['size'] / 1e6:,.0f} MB of codes were not checksummed; "
                  "`ondevice index info --verify` checks them", file=sys.stderr)
        return index
    if a.backend == "ray":
        from ondevice.scale.ray_search import RayShardedIndex

        return RayShardedIndex.open(a.index, address=a.ray_address or None, threads=a.threads or 1,
                                    allow_missing=a.partial)
    if a.partial:
        raise OndeviceError("--partial applies to --backend ray (a local sharded search reads every shard or fails)")
    return ShardedIndex.open(a.index, threads=a.threads)


def _corpus_lookup(path: str | None):
    if not path:
        return None

    texts = read_corpus(path)

    def text(i: int) -> str:
        if not 0 <= i < len(texts):  # an empty text would be shown, and scored by --rerank, as if it were the hit
            raise OndeviceError(f"hit id {i} is beyond the {len(texts):,} lines of --corpus {path}; give the corpus the "
                                "index was built from (ids are its line numbers)")
        return texts[i]

    return text


# ------------------------------------------------------------------------------------------------ info


def _info(a: argparse.Namespace) -> int:
    from ondevice.index import HammingIndex, read_header
    from ondevice.scale.shards import ShardedIndex, is_sharded, read_manifest

    if is_sharded(a.index):
        manifest, _ = read_manifest(a.index)
        if a.verify:
            ShardedIndex.open(a.index, verify=True)
        print(f"{a.index}: sharded index, {manifest.count:,} codes x {manifest.bits} bits in {len(manifest.shards)} "
              f"shards{', checksums ok' if a.verify else ''}")
        return 0

    head = read_header(a.index)
    HammingIndex.load(a.index, mmap=True, verify=a.verify)  # ids and offsets are always checked, the data on --verify
    enc = head["encoder"]
    print(f"{a.index}: format v{head['version']}, {head['count']:,} codes x {head['bits']} bits "
          f"({head['code_bytes']} bytes each), bit order little, ids {'ascending' if head['ascending'] else 'unordered'}")
    print(f"  encoder: {enc.describe() if enc else 'not recorded'}")
    if head["sections"]:
        kept = ([f"int8 vectors ({head['vector_dim']} dims + a float32 scale per row)"] if head["vector_dim"] else []) + \
            (["attributes (uint64 tags, int32 category per row)"] if head["sections"] & 2 else [])
        print(f"  sections: {', '.join(kept)}")
    print(f"  data: sha256 of codes and ids{' and sections' if head['sections'] else ''} verified" if a.verify else
          "  data: header and ids checked; codes NOT checksummed (add --verify to read and check every byte)")
    return 0


def _physical_memory() -> int:
    """This machine's physical memory in bytes (0 when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def _calibrate(a: argparse.Namespace) -> int:
    from ondevice.kernels import hamming

    if a.bits < 8 or a.bits % 8 or a.bits > MAX_BITS:
        raise OndeviceError(f"--bits must be a multiple of 8 from 8 to {MAX_BITS}, got {a.bits}")
    if a.repeats < 2:
        raise OndeviceError(f"--repeats must be >= 2 (a percentile needs two timings), got {a.repeats}")
    max_bytes = int(a.max_mb * (1 << 20))
    memory = _physical_memory()
    if memory and max_bytes > memory // 4:  # the measured database is held in memory, plus the kernels' buffers
        raise OndeviceError(f"--max-mb {a.max_mb:g} is more than a quarter of this machine's {memory >> 20:,} MB of "
                            f"memory; use at most {memory >> 22:,}")
    if max_bytes < 64 << 10:
        raise OndeviceError(f"--max-mb must be at least 0.0625 (64 KB, the smallest size measured), got {a.max_mb}")
    threads = hamming.default_threads()
    print(f"searching {a.bits}-bit codes on 1 and {threads} threads (75th percentile of {a.repeats} searches):",
          file=sys.stderr)

    def show(row: dict) -> None:
        print(f"  {row['bytes'] / 1024:>9,.0f} KB: 1 thread {row['serial_s'] * 1e6:8.1f} us, {row['threaded_chunks']} "
              f"threads {row['threaded_s'] * 1e6:8.1f} us", file=sys.stderr)

    result = hamming.calibrate(nbytes=a.bits // 8, repeats=a.repeats, save=not a.dry_run, max_bytes=max_bytes,
                               seed=a.seed, progress=show)
    where = "not stored (--dry-run)" if a.dry_run else f"stored in {hamming.calibration_file()}"
    if threads < 2:
        print(f"one thread only (NUMBA_NUM_THREADS={threads}): searches stay serial; {where}")
    elif result["crossover_bytes"] is None:
        print(f"a second thread never paid up to {a.max_mb:g} MB: parallel_min_bytes = "
              f"{result['parallel_min_bytes']:,}; {where}")
    else:
        print(f"threads pay from {result['crossover_bytes']:,} bytes of work: parallel_min_bytes = "
              f"{result['parallel_min_bytes']:,} (one thread per that much work); {where}")
    return 0


def _serve(a: argparse.Namespace) -> int:
    from ondevice.scale.serve import serve_http

    url = serve_http(a.index, host=a.host, port=a.port, route_prefix=a.route, ray_address=a.ray_address or None,
                     verify=not a.no_verify, threads=a.threads, cpus_per_shard=a.cpus_per_shard, replicas=a.replicas)
    print(f"searching {a.index} at {url}: POST {{\"queries\": [\"<hex code>\"], \"k\": 10}}; Ctrl-C stops", flush=True)
    serve = require("ray.serve", "scale")

    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0
