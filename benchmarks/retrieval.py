"""QQP duplicate-question retrieval with the shipped bundle: float vectors, binary codes, codes + int8 rescoring.

    .venv/bin/python benchmarks/retrieval.py              # a few minutes; writes benchmarks/results/retrieval-<time>.json

Queries are the test-split questions of the QQP subset that have a duplicate in the test split (the split of
`ondevice.eval.pair_tasks`, by connected components of the question graph, seed 0); the corpus is every distinct
question of the subset (train, dev and test). A query's relevant items are its duplicate partners; the query itself
is left out of its results. Metrics: recall@1, recall@10 (share of a query's duplicates in its top 10) and MRR@10
(of the first duplicate). Methods: the bundle's float vectors by cosine (exact, numpy), its codes by Hamming
distance (HammingIndex), and codes + int8 rescoring of the Hamming top m*10 (m = 2, 4, 10). Time per query: one
query per call, median over `--timed` queries, on the real corpus and on a catalog of `--timing-n` items (the
corpus codes repeated) to show how the costs grow, also for filtered Hamming searches (random attributes). Bytes per item: what each method keeps per corpus item.

The SNLI catalog (the unique SNLI dev+test sentences, an evaluation catalog only) measures how much of the fp32
teacher's cosine top-10 each method recovers, with the queries and protocol of benchmarks/distill_quality.py
(`--snli-queries` seeded queries, each query's own row left out): the teacher's vectors, the bundle's float vectors,
its codes and codes + int8 rescoring. `--only snli` runs that part alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# One BLAS thread, like the one search thread the other methods get: a thread pool that spins on a shared machine
# made the float baseline look 20x slower than it is.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def qqp_retrieval(data: str, max_corpus: int | None) -> tuple[list[str], list[int], list[set[int]]]:
    """(corpus texts, query rows in the corpus, relevant rows per query) for the QQP test split."""
    from ondevice.eval.pair_tasks import load_pairs

    test = load_pairs("qqp", "test", data, 0)
    every = [load_pairs("qqp", split, data, 0) for split in ("train", "dev")] + [test]
    corpus: list[str] = []
    row: dict[str, int] = {}
    for part in [test, *every[:2]]:  # test questions first: a --max-corpus cut keeps every query's duplicates
        for q in (*part.a, *part.b):
            if q not in row:
                row[q] = len(corpus)
                corpus.append(q)
    if max_corpus is not None:
        corpus = corpus[:max_corpus]
        row = {q: i for i, q in enumerate(corpus)}
    dup: dict[int, set[int]] = {}
    for qa, qb, gold in zip(test.a, test.b, test.gold):
        if int(gold) == 1 and qa != qb and qa in row and qb in row:
            dup.setdefault(row[qa], set()).add(row[qb])
            dup.setdefault(row[qb], set()).add(row[qa])
    queries = sorted(dup)
    return corpus, queries, [dup[q] for q in queries]


def metrics(ranked: np.ndarray, relevant: list[set[int]]) -> dict[str, float]:
    """recall@1, recall@10 and MRR@10 of ranked rows (nq, >= 10), -1 padded."""
    r1, r10, mrr = [], [], []
    for rows, rel in zip(ranked, relevant):
        top = [int(x) for x in rows[:10] if x >= 0]
        r1.append(len(rel & set(top[:1])) / len(rel))
        r10.append(len(rel & set(top)) / len(rel))
        first = next((i for i, x in enumerate(top) if x in rel), None)
        mrr.append(0.0 if first is None else 1.0 / (first + 1))
    return {"recall@1": round(100 * float(np.mean(r1)), 2), "recall@10": round(100 * float(np.mean(r10)), 2),
            "mrr@10": round(100 * float(np.mean(mrr)), 2)}


def drop_self(rows: np.ndarray, queries: list[int], k: int) -> np.ndarray:
    """Each query's ranking without the query's own row, cut to k."""
    out = np.full((len(rows), k), -1, np.int64)
    for i, (r, q) in enumerate(zip(rows, queries)):
        kept = r[(r != q) & (r >= 0)][:k]
        out[i, : len(kept)] = kept
    return out


def float_topk(corpus: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact top k rows by dot product (unit vectors: cosine), best first."""
    scores = q @ corpus.T
    part = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
    order = np.take_along_axis(scores, part, 1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(part, order, 1)


def snli_overlap(bundle, data: str, n_queries: int, seed: int, multipliers: list[int], threads: int,
                 max_catalog: int | None = None) -> dict:
    """Share (%) of the fp32 teacher's cosine top-10 that each method's top-10 recovers on the SNLI catalog."""
    from ondevice.eval.data import read_snli_sentences
    from ondevice.eval.metrics import recall_at_k
    from ondevice.eval.retrieval import sample_queries, topk
    from ondevice.index import HammingIndex
    from ondevice.runtime import unit_rows
    from ondevice.teacher import Teacher

    catalog = read_snli_sentences(data)[:max_catalog]  # a prefix only in tiny runs (--max-corpus)
    q = sample_queries(len(catalog), min(n_queries, len(catalog)), seed)
    k, kk = 10, 11
    info = bundle.manifest["teacher"]
    teacher = Teacher(info.get("path", "all-MiniLM-L6-v2"), pooling=info.get("pooling", "mean"))  # fp32, torch
    started = time.perf_counter()
    reference = topk(teacher.encode(catalog), q, k)
    teacher_s = time.perf_counter() - started
    emb, codes = bundle.embed(catalog, batch_size=256)
    emb = unit_rows(emb)
    index = HammingIndex(bundle.bits, threads=threads)
    index.add(codes, vectors=emb)
    found = {"teacher float (cosine)": reference, "bundle float (cosine)": topk(emb, q, k),
             "bundle codes (Hamming)": drop_self(index.search(codes[q], kk)[1], list(q), k)}
    for m in multipliers:
        found[f"codes + int8 rescoring, m = {m}"] = drop_self(
            index.search(codes[q], kk, rescore=m, query_vectors=emb[q]).ids, list(q), k)
    rows = [{"method": name, "top10_vs_teacher": round(100 * recall_at_k(top, reference), 2)} for name, top in found.items()]
    for row in rows:
        print(f"SNLI {row['method']:>34}: {row['top10_vs_teacher']:6.2f}% of the teacher's top-10", flush=True)
    return {"task": "SNLI catalog (unique dev+test sentences): share of the fp32 teacher's cosine top-10 recovered",
            "catalog": len(catalog), "queries": len(q), "seed": seed, "k": k,
            "teacher": f"{teacher.info.name or info.get('path')} (fp32, torch)",
            "teacher_matches_bundle": teacher.info.weights_sha256 == info.get("weights_sha256"),
            "teacher_encode_seconds": round(teacher_s, 1), "rows": rows}


def time_per_query(fn, n: int) -> float:
    """Median milliseconds of fn(i) over n calls (after one warm-up call)."""
    fn(0)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(samples), 4)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results file."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.environ.get("ONDEVICE_DATA", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--max-corpus", type=int, default=None, help="use only the first N corpus questions and SNLI catalog sentences (tiny runs)")
    p.add_argument("--multipliers", type=int, nargs="+", default=[2, 4, 10], help="rescoring multipliers m")
    p.add_argument("--timed", type=int, default=200, help="queries timed one per call, per method")
    p.add_argument("--timing-n", type=int, default=100_000, help="catalog size of the second timing (0: skip)")
    p.add_argument("--threads", type=int, default=1, help="search threads (1: what one phone core sees)")
    p.add_argument("--snli-queries", type=int, default=1000, help="seeded SNLI catalog queries (0: skip SNLI)")
    p.add_argument("--seed", type=int, default=0, help="seed of the SNLI query sample")
    p.add_argument("--only", choices=("qqp", "snli"), default=None, help="run one task only")
    a = p.parse_args(argv)

    import ondevice
    from ondevice.index import Filter, HammingIndex
    from ondevice.io import write_record
    from ondevice.results import results_path, run_metadata
    from ondevice.runtime import unit_rows

    meta = run_metadata(a.threads)
    if a.only == "snli":
        bundle = ondevice.load()
        out = {**meta, "bundle": bundle.encoder_id.describe(), "bits": bundle.bits,
               "snli": snli_overlap(bundle, a.data, a.snli_queries, a.seed, a.multipliers, a.threads, a.max_corpus)}
        path = results_path("retrieval")
        write_record(path, out)
        print(f"results: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        return 0
    started = time.perf_counter()
    corpus, queries, relevant = qqp_retrieval(a.data, a.max_corpus)
    bundle = ondevice.load()
    emb, codes = bundle.embed(corpus, batch_size=256)
    emb = unit_rows(emb)
    encoded_s = time.perf_counter() - started
    print(f"{len(corpus):,} questions encoded in {encoded_s:.0f} s; {len(queries):,} queries", flush=True)
    k, kk = 10, 11  # one extra: the query itself is in the corpus
    qv, qc = emb[queries], codes[queries]
    index = HammingIndex(bundle.bits, threads=a.threads)
    index.add(codes, vectors=emb)
    rows: dict[str, np.ndarray] = {"bundle float (cosine)": float_topk(emb, qv, kk),
                                   "bundle codes (Hamming)": index.search(qc, kk)[1]}
    for m in a.multipliers:
        rows[f"codes + int8 rescoring, m = {m}"] = index.search(qc, kk, rescore=m, query_vectors=qv).ids
    dim, nb = emb.shape[1], codes.shape[1]
    item_bytes = {"bundle float (cosine)": 4 * dim, "bundle codes (Hamming)": nb + 8}
    nt = min(a.timed, len(queries))

    def filter_timings(idx: HammingIndex) -> dict[str, float]:
        # random attributes: tag bit 0 on half the rows, category 0..9; the filters skip rows inside the scan
        rng = np.random.default_rng(0)
        n = len(idx)
        tagged = HammingIndex(idx.bits, threads=a.threads)
        tagged.add(idx.codes, idx.ids, tags=rng.integers(0, 2, n).astype(np.uint64),
                   categories=rng.integers(0, 10, n).astype(np.int32))
        out = {}
        for name, flt in (("every row allowed", Filter()), ("half the rows (a tag bit)", Filter(tags_all=1)),
                          ("a tenth of the rows (a category)", Filter(categories=[3]))):
            out[name] = time_per_query(lambda i, flt=flt: tagged.search(qc[i : i + 1], kk, filter=flt), nt)
        return out

    def timings(idx: HammingIndex, vecs: np.ndarray) -> dict[str, float]:
        out = {"bundle float (cosine)": time_per_query(lambda i: float_topk(vecs, qv[i : i + 1], kk), nt),
               "bundle codes (Hamming)": time_per_query(lambda i: idx.search(qc[i : i + 1], kk), nt)}
        for m in a.multipliers:
            out[f"codes + int8 rescoring, m = {m}"] = time_per_query(
                lambda i, m=m: idx.search(qc[i : i + 1], kk, rescore=m, query_vectors=qv[i : i + 1]), nt)
        return out

    times = {len(corpus): timings(index, emb)}
    filters = {len(corpus): filter_timings(index)}
    if a.timing_n and a.timing_n > len(corpus):
        reps = -(-a.timing_n // len(corpus))
        big = HammingIndex(bundle.bits, threads=a.threads)
        q8, scales = index.vectors
        big.add(np.tile(codes, (reps, 1))[: a.timing_n], vectors=np.tile(q8, (reps, 1))[: a.timing_n],
                scales=np.tile(scales, reps)[: a.timing_n])
        times[a.timing_n] = timings(big, np.tile(emb, (reps, 1))[: a.timing_n])
        filters[a.timing_n] = filter_timings(big)
    table = []
    for name, ranked in rows.items():
        per_item = item_bytes.get(name, nb + 8 + dim + 4)
        row = {"method": name, **metrics(drop_self(ranked, queries, k), relevant), "bytes_per_item": per_item,
               "ms_per_query": {str(n): t[name] for n, t in times.items()}}
        table.append(row)
        print(f"{name:>34}: R@1 {row['recall@1']:6.2f}  R@10 {row['recall@10']:6.2f}  MRR@10 {row['mrr@10']:6.2f}  "
              f"{per_item:>5} B/item  " + "  ".join(f"{v:.3f} ms @ {int(n):,}" for n, v in row["ms_per_query"].items()),
              flush=True)
    out = {**meta, "task": "QQP subset, test-split questions with a duplicate; corpus = every question of the subset",
           "bundle": bundle.encoder_id.describe(), "bits": bundle.bits, "dim": dim, "corpus": len(corpus),
           "queries": len(queries), "timed_queries": nt, "encode_seconds": round(encoded_s, 1), "rows": table,
           "filtered_codes_ms_per_query": {str(n): t for n, t in filters.items()}}
    for n, t in filters.items():
        print(f"filtered Hamming search @ {n:,}: " + ", ".join(f"{k}: {v:.3f} ms" for k, v in t.items()))
    if a.snli_queries and a.only != "qqp":
        out["snli"] = snli_overlap(bundle, a.data, a.snli_queries, a.seed, a.multipliers, a.threads, a.max_corpus)
    path = results_path("retrieval")
    write_record(path, out)  # atomic: a reader never sees half a results file
    print(f"results: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
