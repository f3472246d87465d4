"""Scale-out benchmark: teacher labelling local vs Ray, sharded vs single Hamming search, projection to 100M/1B codes.

    .venv/bin/python benchmarks/scale.py --part label            # labelling (about 3 minutes)
    .venv/bin/python benchmarks/scale.py --part label --teacher-backend onnx-int8 --sentences 4096
    .venv/bin/python benchmarks/scale.py --part search           # search 1M and 10M codes
    .venv/bin/python benchmarks/scale.py --part label --sentences 200 --repeats 1  # a quick look

Labelling: the packaged teacher (torch) on the first --sentences Wikipedia sentences, each run into a fresh cache,
at equal CPUs: local with 2 threads, Ray with 1 actor x 2 threads, Ray with 2 actors x 1 thread (the local Ray
starts once, before the timed runs; each timed Ray run includes creating the actor pool and loading the teacher
in every actor, as a real run does). Median of --repeats. Each Ray run records where its time went (actor start,
actor ready, each chunk written); the fixed start cost of a run is its time minus its rows at its own steady rate,
and from the fixed cost and the steady rates follows the corpus size at which Ray's overhead drops under 10%.
Search: random 256-bit codes, k=10; one HammingIndex (memory-mapped file) vs the same codes as 4 shards searched
in-process and on 4 Ray actors. Latency: 1 query per call; throughput: 100 queries per call. Medians of --repeats.
The projection uses the measured per-code scan cost of one shard actor and the measured router overhead.
Each run writes benchmarks/results/scale_<part>-<UTC time>.json (never overwritten).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from ondevice.results import results_path, run_metadata

ROOT = Path(__file__).resolve().parents[1]


def _meta(threads: int) -> dict:
    """The shared run metadata (ondevice.results.run_metadata) plus the versions that matter here."""
    meta = run_metadata(threads)
    for name in ("ray", "pyarrow"):
        try:
            meta["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            meta["versions"][name] = "absent"
    return meta


def _ray_init(num_cpus: int, temp: str) -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")  # same priority as the local run it is compared with
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, object_store_memory=512 << 20,
             _temp_dir=temp, logging_level="WARNING")
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False


# ------------------------------------------------------------------------------------------------ labelling


def bench_label(a: argparse.Namespace) -> dict:
    import torch

    from ondevice.corpus import default_data_dir, read_corpus
    from ondevice.scale.ray_label import ray_cached_vectors
    from ondevice.teacher import Teacher, cached_vectors

    corpus = default_data_dir() / "wiki" / "wiki_en_sentences_1m.txt.gz"
    sentences = read_corpus(corpus, a.sentences)
    torch.set_num_threads(a.cpus)
    teacher = Teacher(a.teacher, backend=a.teacher_backend, threads=a.cpus)
    teacher.encode(sentences[:64])  # warm the driver's model (local runs use it; Ray runs load their own)
    temp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    t0 = time.perf_counter()
    _ray_init(a.cpus + 1, temp)  # one logical CPU beyond the pool, as ondevice's own local start does
    ray_start_s = time.perf_counter() - t0
    configs = [("local", 0, a.cpus), ("ray", 1, a.cpus), ("ray", a.cpus, 1)]
    configs = [c for c in configs if ("local" if c[0] == "local" else f"ray_{c[1]}x{c[2]}") in a.configs + ["local"]]
    runs: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    chunk_times: dict[str, list[list[float]]] = {}  # seconds from the run's start to each chunk write
    phases: dict[str, list[dict]] = {}  # ray_cached_vectors' own timings per Ray run
    vectors = {}
    for rep in range(a.repeats):
        for backend, workers, threads in configs:  # interleaved, so drifting machine load hits every config alike
            name = "local" if backend == "local" else f"ray_{workers}x{threads}"
            root = Path(tempfile.mkdtemp(prefix="cache", dir=temp))
            stamps: list[float] = []
            t0 = time.perf_counter()
            if backend == "local":
                # The same chunk loop as cached_vectors, timed per chunk like the Ray run's on_chunk hook.
                from ondevice.teacher import VectorCache, cache_folder

                folder, key_src = cache_folder(teacher, sentences, root)
                cache = VectorCache(folder, len(sentences), teacher.dim, a.chunk, key_src)
                for c in cache.pending():
                    lo, hi = cache.bounds(c)
                    cache.write(c, teacher.encode(sentences[lo:hi]), teacher.info.normalize)
                    stamps.append(time.perf_counter())
                out = cached_vectors(teacher, sentences, chunk=a.chunk, root=root, progress=False)  # reads it back
            else:
                timings: dict = {}
                out = ray_cached_vectors(teacher, sentences, chunk=a.chunk, root=root, progress=False, workers=workers,
                                         cpus_per_worker=threads, on_chunk=lambda c, s=stamps: s.append(time.perf_counter()),
                                         timings=timings)
                phases.setdefault(name, []).append(_phases(timings))
            runs.setdefault(name, []).append(time.perf_counter() - t0)
            # Steady state: rows of the chunks written after each worker's first one, over the time from the
            # last of those first writes to the last write (excludes starting the actor pool and loading the
            # teacher in each actor, paid once per run; w workers finish their first chunks together).
            w = max(1, workers)
            steady.setdefault(name, []).append((len(stamps) - w) * a.chunk / (stamps[-1] - stamps[w - 1]))
            chunk_times.setdefault(name, []).append([round(t - t0, 3) for t in stamps])
            vectors[name] = out
            print(f"  rep {rep}: {name}: {len(sentences) / runs[name][-1]:.1f} sentences/s overall, "
                  f"{steady[name][-1]:.1f} steady", flush=True)
    import numpy as np

    ref = np.asarray(vectors["local"])
    rows = {}
    for name, secs in runs.items():
        med = statistics.median(secs)
        rows[name] = {"seconds": secs, "median_s": med, "sentences_per_s": len(sentences) / med,
                      "steady_sentences_per_s_runs": steady[name], "chunk_write_s": chunk_times[name],
                      "steady_sentences_per_s": statistics.median(steady[name]),
                      "max_abs_diff_vs_local": float(np.abs(np.asarray(vectors[name]) - ref).max())}
    local = rows["local"]
    for name, row in rows.items():
        row["overhead_vs_local"] = row["median_s"] / local["median_s"] - 1
        row["overhead_vs_local_incl_ray_start"] = (row["median_s"] + (ray_start_s if name != "local" else 0)) / local["median_s"] - 1
        row["steady_overhead_vs_local"] = local["steady_sentences_per_s"] / row["steady_sentences_per_s"] - 1
        if name == "local":
            continue
        row["phases"] = phases[name]
        # Fixed start cost: the run's time beyond its rows at its own steady rate (pool start, teacher load in each
        # actor, first results through Ray Data); then the corpus size where (ray - local) / local reaches 10%.
        fixed = [t - len(sentences) / r for t, r in zip(row["seconds"], row["steady_sentences_per_s_runs"])]
        row["fixed_start_s"] = statistics.median(fixed)
        per_ray, per_local = 1 / row["steady_sentences_per_s"], 1 / local["steady_sentences_per_s"]
        margin = 1.10 * per_local - per_ray  # seconds per sentence left over for the fixed cost under the target
        for key, cost in (("", row["fixed_start_s"]), ("_incl_ray_start", row["fixed_start_s"] + ray_start_s)):
            row["sentences_for_10pct" + key] = math.ceil(cost / margin) if margin > 0 else None
    return {"part": "label", "sentences": len(sentences), "chunk": a.chunk, "cpus": a.cpus, "teacher": teacher.info.path,
            "teacher_backend": teacher.backend, "ray_local_start_s": ray_start_s, "runs": rows,
            "fixed_cost_method": "ray run seconds minus sentences / that run's steady rate (chunks after each actor's "
                                 "first); sentences_for_10pct = fixed / (1.10 / local steady rate - 1 / ray steady rate)",
            "overhead_target": 0.10}


def _phases(t: dict) -> dict:
    """A Ray run's timings, rounded: Ray up, each actor's start and ready time, first and last chunk (s from call)."""
    actors = sorted(t.get("actors", {}).values(), key=lambda x: x["start_s"])
    return {"actor_kind": t.get("actor_kind"), "ray_up_s": round(t.get("ray_up_s", 0), 3),
            "dataset_built_s": round(t.get("dataset_s", 0), 3),
            "actor_start_s": [round(x["start_s"], 3) for x in actors],
            "actor_ready_s": [round(x["ready_s"], 3) for x in actors],
            "actor_load_s": [round(x["ready_s"] - x["start_s"], 3) for x in actors],
            "first_chunk_s": round(t["chunks_s"][0], 3), "last_chunk_s": round(t["chunks_s"][-1], 3)}


# ------------------------------------------------------------------------------------------------ search


def _median_s(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_search(a: argparse.Namespace) -> dict:
    import numpy as np

    from ondevice.index import HammingIndex
    from ondevice.scale.ray_search import RayShardedIndex
    from ondevice.scale.shards import ShardedIndex, build_shards

    temp = tempfile.mkdtemp(prefix="rb", dir=a.workdir)
    _ray_init(a.cpus, temp)
    rng = np.random.default_rng(a.seed)
    q100 = rng.integers(0, 256, (100, 32), dtype=np.uint8)
    q1 = q100[:1]
    results = []
    for n in a.sizes:
        codes = rng.integers(0, 256, (n, 32), dtype=np.uint8)
        folder = Path(temp) / f"n{n}"
        single_idx = HammingIndex(256)
        single_idx.add(codes)
        single_idx.save(folder.with_suffix(".odx"))
        build_shards(codes, folder, shards=a.shards)
        del codes, single_idx
        single = HammingIndex.load(folder.with_suffix(".odx"), threads=a.cpus)
        local = ShardedIndex.open(folder, threads=a.cpus)
        per = max(1, a.cpus // a.shards)
        ray_idx = RayShardedIndex.open(folder, threads=per, cpus_per_shard=a.cpus / a.shards)
        want = single.search(q100, 10)
        got = ray_idx.search(q100, 10)
        same = bool((want[0] == got[0]).all() and (want[1] == got[1]).all())
        row = {"n": n, "shards": a.shards, "threads_single": a.cpus, "threads_per_shard_actor": per,
               "ray_equals_single": same}
        for label, index in (("single", single), ("sharded_local", local), ("sharded_ray", ray_idx)):
            lat = _median_s(lambda ix=index: ix.search(q1, 10), a.repeats * 4)
            batch = _median_s(lambda ix=index: ix.search(q100, 10), a.repeats)
            row[label] = {"latency_1q_ms": lat * 1e3, "batch100_ms": batch * 1e3, "queries_per_s": 100 / batch}
            print(f"  n={n:,} {label}: 1 query {lat * 1e3:.2f} ms, 100 queries {batch * 1e3:.1f} ms", flush=True)
        # Per-shard cost: one actor alone (its own scan, no merge) on one shard, 1 and 100 queries.
        import ray

        actor = ray_idx.actors[0]
        shard_n = ray_idx.manifest.shards[0].count
        one = _median_s(lambda ac=actor: ray.get(ac.search.remote(q1, 10)), a.repeats * 4)
        hundred = _median_s(lambda ac=actor: ray.get(ac.search.remote(q100, 10)), a.repeats)
        row["one_shard_actor"] = {"codes": shard_n, "latency_1q_ms": one * 1e3, "batch100_ms": hundred * 1e3,
                                  "ns_per_code_1q": one * 1e9 / shard_n, "ns_per_code_query_batch100": hundred * 1e9 / shard_n / 100}
        row["router_overhead_1q_ms"] = row["sharded_ray"]["latency_1q_ms"] - one * 1e3
        ray_idx.close()
        results.append(row)
    import shutil

    shutil.rmtree(temp, ignore_errors=True)  # the index files: several hundred MB
    return {"part": "search", "k": 10, "bits": 256, "cpus": a.cpus, "rows": results,
            "projection": _project(results, a.project_shard_codes)}


def _project(rows: list[dict], shard_sizes: list[int]) -> dict:
    """What 100M and 1B codes need, from measured shard-actor costs at two shard sizes and the router overhead.

    One shard actor's call time is fitted as fixed + per_code x codes through the two measured sizes (the fixed
    part is Ray's call overhead, the slope the scan); the router overhead is the sharded Ray latency minus one
    actor's call time at the largest measured size. Shards run in parallel on their own cores.
    """
    small, large = rows[0], rows[-1]
    fits = {}
    for key, per in (("latency_1q_ms", 1), ("batch100_ms", 100)):
        n0, t0 = small["one_shard_actor"]["codes"], small["one_shard_actor"][key]
        n1, t1 = large["one_shard_actor"]["codes"], large["one_shard_actor"][key]
        slope = (t1 - t0) / (n1 - n0)  # ms per code per call
        fits[key] = {"fixed_ms": t0 - slope * n0, "ns_per_code": slope * 1e6 / per}
    router = large["sharded_ray"]["latency_1q_ms"] - large["one_shard_actor"]["latency_1q_ms"]
    bytes_per_code = 32 + 8  # 256-bit code + int64 id, nothing else is kept
    out = {"method": "one shard actor's call time = fixed + ns_per_code x codes, fitted through the measured "
                     f"shard sizes {small['one_shard_actor']['codes']:,} and {large['one_shard_actor']['codes']:,}; "
                     "plus the measured router overhead; shards in parallel, each actor on its own core(s)",
           "fit": fits, "router_overhead_ms": router, "threads_per_shard_actor": large["threads_per_shard_actor"],
           "targets": {}}
    for total in (100_000_000, 1_000_000_000):
        for per_shard in shard_sizes:
            shards = math.ceil(total / per_shard)
            n = total / shards
            out["targets"][f"{total:,} codes, {per_shard:,} per shard"] = {
                "shards": shards, "codes_per_shard": n, "memory_per_shard_gb": n * bytes_per_code / 1e9,
                "memory_total_gb": total * bytes_per_code / 1e9,
                "latency_1q_ms": fits["latency_1q_ms"]["fixed_ms"] + n * fits["latency_1q_ms"]["ns_per_code"] / 1e6 + router,
                "batch100_ms": fits["batch100_ms"]["fixed_ms"] + n * fits["batch100_ms"]["ns_per_code"] * 100 / 1e6 + router,
                "cores": shards * large["threads_per_shard_actor"]}
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["label", "search"], required=True)
    p.add_argument("--sentences", type=int, default=2048)
    p.add_argument("--chunk", type=int, default=128, help="cache chunk (rows per Ray block)")
    p.add_argument("--teacher", default="all-MiniLM-L6-v2")
    p.add_argument("--teacher-backend", default="torch", choices=["torch", "onnx", "onnx-int8"],
                   help="local and Ray runs alike; the ONNX ones run torch-free Ray actors")
    p.add_argument("--configs", nargs="+", default=["ray_1x2", "ray_2x1"],
                   help="Ray configurations besides local (ray_<actors>x<threads>, for --cpus 2)")
    p.add_argument("--cpus", type=int, default=2, help="CPUs every configuration gets")
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--project-shard-codes", type=int, nargs="+", default=[25_000_000, 5_000_000],
                   help="shard sizes the projection considers")
    p.add_argument("--project-from", help="recompute only the projection from this search results file")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="/tmp", help="where index files are written (several hundred MB)")
    a = p.parse_args(argv)
    meta = _meta(a.cpus)
    if a.project_from:  # derived numbers only: the measured rows are copied from the named file
        source = json.loads(Path(a.project_from).read_text())
        result = {"part": "search-projection", "source": Path(a.project_from).name, "source_commit": source["commit"],
                  "rows": source["rows"], "projection": _project(source["rows"], a.project_shard_codes)}
    else:
        result = bench_label(a) if a.part == "label" else bench_search(a)
    result.update(meta, loadavg_at_end=[round(x, 2) for x in os.getloadavg()])
    out = results_path(f"scale_{a.part}" + ("_projection" if a.project_from else ""))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
