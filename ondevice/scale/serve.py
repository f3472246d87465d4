"""HTTP search on Ray Serve: one deployment per index shard and an ingress that merges exactly like the router.

    from ray import serve
    from ondevice.scale.serve import search_app
    serve.run(search_app("catalog/"), route_prefix="/search")     # POST {"queries": ["<hex code>", ...], "k": 10}

The ingress sends the queries to every shard deployment, waits for all of them and merges the S x k candidates by
(distance, id) with `merge_topk`, so an answer equals one `HammingIndex` over all codes. A shard that fails is an
error naming it (HTTP 503), unless the request asks for `"partial": true`: then the other shards' merged answer
comes back with `"partial": true` and the failed shard numbers in `"missing"`. Bad requests are HTTP 400 with one
line naming the problem.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ondevice._deps import require
from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.scale.ray_env import init_ray, ray_module
from ondevice.scale.shards import Manifest, ShardedResult, ShardInfo, merge_topk, open_shard, read_manifest

MAX_QUERIES = 10_000  # per request: bounds the memory one HTTP call can ask for
MAX_K = 10_000
MAX_ANSWER = 1_000_000  # queries x k (k clamped to the catalog's size): at most ~20 MB of JSON in one answer
MAX_BODY_BYTES = 16 << 20  # a request of 10,000 2048-bit hex codes is ~5 MB


class TooLarge(OndeviceError):
    """A request whose answer (or body) would exceed the bounds: HTTP 413."""


class ShardReplica:
    """Serve deployment body: one shard file, checked against the manifest and memory-mapped once per replica."""

    def __init__(self, manifest: dict, folder: str, i: int, verify: bool = True, threads: int = 1):
        m = Manifest(bits=manifest["bits"], count=manifest["count"], shards=[ShardInfo(**s) for s in manifest["shards"]])
        self.i, self.threads = i, threads
        self.index = open_shard(m, Path(folder), i, verify=verify, threads=threads)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(queries, k, threads=self.threads)


def parse_request(body: object, code_bytes: int, count: int | None = None) -> tuple[np.ndarray, int, bool]:
    """(queries uint8 (n, code_bytes), k, partial) from a JSON body {"queries": [hex, ...], "k": int, "partial": bool};
    with the catalog's `count`, k is clamped to it (no answer is padded beyond the catalog) and queries x k bounded."""
    if not isinstance(body, dict):
        raise OndeviceError('the request body must be a JSON object like {"queries": ["<hex code>"], "k": 10}')
    queries, k, partial = body.get("queries"), body.get("k", 10), body.get("partial", False)
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise OndeviceError('"queries" must be a non-empty list of hex strings, one packed code each')
    if len(queries) > MAX_QUERIES:
        raise OndeviceError(f'{len(queries)} queries in one request; send at most {MAX_QUERIES}')
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise OndeviceError(f'"k" must be an integer in 1..{MAX_K}, got {k!r}')
    if not isinstance(partial, bool):
        raise OndeviceError(f'"partial" must be true or false, got {partial!r}')
    if count is not None:
        k = max(1, min(k, int(count)))
    if len(queries) * k > MAX_ANSWER:
        raise TooLarge(f"{len(queries):,} queries x k {k:,} is more than the {MAX_ANSWER:,} results one answer may hold; "
                       "send fewer queries per request or a smaller k")
    out = np.zeros((len(queries), code_bytes), dtype=np.uint8)
    for row, text in enumerate(queries):
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise OndeviceError(f"query {row} is not a hex string") from None
        if len(raw) != code_bytes:
            raise OndeviceError(f"query {row} has {len(raw)} bytes; this index holds {code_bytes}-byte codes "
                                f"({2 * code_bytes} hex digits)")
        out[row] = np.frombuffer(raw, dtype=np.uint8)
    return out, k, partial


class SearchIngress:
    """Serve ingress: fans a query batch out to every shard deployment and merges like `RayShardedIndex`."""

    def __init__(self, bits: int, files: list[str], *shards, count: int | None = None):
        self.bits, self.files, self.shards, self.count = bits, files, list(shards), count
        self.code_bytes = HammingIndex(bits).code_bytes

    async def search(self, queries: np.ndarray, k: int, partial: bool = False) -> ShardedResult:
        """k nearest codes over all shards; a failed shard is an error naming it unless `partial`."""
        HammingIndex(self.bits).search(queries, k)  # dtype, shape, padding bits and k checked as the single index does
        queries = np.ascontiguousarray(np.asarray(queries).reshape(-1, self.code_bytes))
        responses = [shard.search.remote(queries, int(k)) for shard in self.shards]
        dists, ids, missing, first = [], [], [], ""
        for i, response in enumerate(responses):
            try:
                d, n = await response
            except Exception as exc:  # noqa: BLE001 - a replica failure comes as Ray's or the shard's own error
                missing.append(i)
                first = first or f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1]}"
                continue
            dists.append(d)
            ids.append(n)
        if missing and not partial:
            names = ", ".join(f"{i} ({self.files[i]})" for i in missing)
            raise OndeviceError(f"shard {names} did not answer ({first}); redeploy it, or ask for partial results")
        if not dists:
            empty = np.full((len(queries), int(k)), -1)
            return ShardedResult(empty.astype(np.int32), empty.astype(np.int64), missing)
        d, n = merge_topk(dists, ids, int(k))
        return ShardedResult(d, n, missing)

    async def __call__(self, request):
        """HTTP: POST a JSON body (see `parse_request`); answers distances, ids, partial and missing."""
        JSONResponse = require("starlette.responses", "scale").JSONResponse  # Ray Serve brings it

        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
            return JSONResponse({"error": f"the request body is over {MAX_BODY_BYTES >> 20} MB"}, status_code=413)
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:  # a chunked body without a length
            return JSONResponse({"error": f"the request body is over {MAX_BODY_BYTES >> 20} MB"}, status_code=413)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return JSONResponse({"error": "the request body is not JSON"}, status_code=400)
        try:
            queries, k, partial = parse_request(body, self.code_bytes, self.count)
        except TooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except OndeviceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            result = await self.search(queries, k, partial)
        except OndeviceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503 if "did not answer" in str(exc) else 400)
        return JSONResponse({"distances": result.distances.tolist(), "ids": result.ids.tolist(),
                             "partial": result.partial, "missing": result.missing})


def search_app(path: str | os.PathLike, verify: bool = True, threads: int = 1, cpus_per_shard: float = 1.0,
               replicas: int = 1):
    """A Serve application for the sharded index at `path`: `serve.run(search_app(path))` deploys it.

    Each shard gets its own deployment (`replicas` copies, `cpus_per_shard` logical CPUs each), reading its file
    where the replica runs (a shared filesystem, or the same folder on every node).
    """
    ray_module()
    serve = require("ray.serve", "scale")

    manifest, folder = read_manifest(path)
    spec, where = asdict(manifest), str(folder.resolve())
    shards = [serve.deployment(ShardReplica, name=f"shard-{i:05d}", num_replicas=replicas,
                               ray_actor_options={"num_cpus": cpus_per_shard}).bind(spec, where, i, verify, threads)
              for i in range(len(manifest.shards))]
    ingress = serve.deployment(SearchIngress, name="ingress", ray_actor_options={"num_cpus": 0})
    return ingress.bind(manifest.bits, [s.file for s in manifest.shards], *shards, count=manifest.count)


def serve_http(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, route_prefix: str = "/search",
               ray_address: str | None = None, verify: bool = True, threads: int = 1, cpus_per_shard: float = 1.0,
               replicas: int = 1) -> str:
    """Deploy `search_app(path)` behind Serve's HTTP proxy on host:port and return the search URL (non-blocking).

    Starts a local Ray (or joins `ray_address`) first; `serve.shutdown()` takes the deployments down again.
    """
    manifest, _ = read_manifest(path)  # a bad folder is a one-line error before any Ray start
    if not 0 < port < 65536:
        raise OndeviceError(f"--port must be in 1..65535, got {port}")
    if not route_prefix.startswith("/"):
        raise OndeviceError(f"the route must start with '/', got {route_prefix!r}")
    if cpus_per_shard < 0 or replicas < 1 or threads < 1:
        raise OndeviceError("--cpus-per-shard must be >= 0, --replicas and --threads >= 1")

    resources = init_ray(ray_address)
    need = cpus_per_shard * replicas * len(manifest.shards)
    if need > resources.get("CPU", 0):
        # Serve would wait forever for replicas that cannot be placed; say what to change instead.
        raise OndeviceError(f"{len(manifest.shards)} shards x {replicas} replica(s) x {cpus_per_shard} CPUs need {need:g} "
                            f"CPUs but the Ray cluster has {resources.get('CPU', 0):g}; lower --cpus-per-shard "
                            "(0.5, or 0 to share) or add nodes")
    serve = require("ray.serve", "scale")

    serve.start(http_options={"host": host, "port": port})
    serve.run(search_app(path, verify=verify, threads=threads, cpus_per_shard=cpus_per_shard, replicas=replicas),
              name="ondevice-search", route_prefix=route_prefix)
    return f"http://{host}:{port}{route_prefix}"
