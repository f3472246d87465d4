"""Sharded Hamming search on Ray: one actor per shard memory-maps its file and runs the Numba kernel; a router merges.

    index = RayShardedIndex.open("catalog/", address=None)     # local Ray unless an address is given
    distances, ids = index.search(queries, k=10)               # exactly HammingIndex over all codes, ties included
    result = index.search_partial(queries, k=10)               # result.missing names shards that did not answer

A shard that is missing, corrupt or dead is an OndeviceError naming it; only `search_partial` (or
`allow_missing=True` at open) returns fewer shards, and then says which.
"""

from __future__ import annotations

import os
from dataclasses import asdict

import numpy as np

from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.scale.ray_env import error_line, init_ray, ray_module
from ondevice.scale.shards import Manifest, ShardedResult, ShardInfo, merge_topk, open_shard, read_manifest


class _ShardServer:
    """Ray actor body: one shard, opened once (checked against the manifest), searched in place."""

    def __init__(self, manifest: dict, folder: str, i: int, verify: bool, threads: int):
        self.i, self.threads, self.error = i, threads, None
        try:
            m = Manifest(bits=manifest["bits"], count=manifest["count"],
                         shards=[ShardInfo(**s) for s in manifest["shards"]])
            self.index = open_shard(m, __import__("pathlib").Path(folder), i, verify=verify, threads=threads)
        except OndeviceError as exc:  # reported by `ready`, so the router can name the shard in one line
            self.error = str(exc)

    def ready(self) -> tuple[str | None, str, int]:
        return self.error, os.uname().nodename, 0 if self.error else len(self.index)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(queries, k, threads=self.threads)


class RayShardedIndex:
    """Router over one Ray actor per shard; `search` equals one HammingIndex over all codes."""

    def __init__(self, manifest: Manifest, actors: list, missing: list[int]):
        self.manifest, self.actors, self.missing = manifest, actors, list(missing)

    @classmethod
    def open(cls, path: str | os.PathLike, address: str | None = None, verify: bool = True, threads: int = 1,
             cpus_per_shard: float | None = None, allow_missing: bool = False,
             timeout_s: float = 600.0) -> RayShardedIndex:
        """Start one actor per shard of the manifest at `path` (on a cluster, spread over the nodes).

        `cpus_per_shard` (logical CPUs each actor reserves) defaults to min(1, cluster CPUs / shards), so every
        shard can be placed; an explicit value that cannot be placed is an error rather than a wait.
        """
        manifest, folder = read_manifest(path)
        ray = ray_module()
        cpus = float(init_ray(address, num_cpus=os.cpu_count()).get("CPU", 0))
        shards = len(manifest.shards)
        if cpus_per_shard is None:
            cpus_per_shard = min(1.0, cpus / shards)
        if cpus_per_shard <= 0 or cpus_per_shard * shards > cpus + 1e-9:
            raise OndeviceError(f"{shards} shards x {cpus_per_shard:g} CPUs do not fit the {cpus:g} CPUs of the Ray "
                                "cluster; add nodes or ask for fewer CPUs per shard")
        server = ray.remote(_ShardServer)
        # Shard files are read where each actor runs: a shared filesystem, or the same path on every node.
        actors = [server.options(num_cpus=cpus_per_shard, scheduling_strategy="SPREAD", max_restarts=0,
                                 name=None).remote(asdict(manifest), str(folder.resolve()), i, verify, threads)
                  for i in range(len(manifest.shards))]
        missing, problems = [], []
        for i, actor in enumerate(actors):
            try:
                error, _, _ = ray.get(actor.ready.remote(), timeout=timeout_s)
            except ray.exceptions.RayError as exc:
                error = f"shard {i} actor failed to start: {error_line(exc)}"
            if error:
                missing.append(i)
                problems.append(error)
        if problems and not allow_missing:
            for actor in actors:
                ray.kill(actor)
            raise OndeviceError(problems[0] + (f" (and {len(problems) - 1} more shards)" if len(problems) > 1 else ""))
        return cls(manifest, actors, missing)

    @property
    def bits(self) -> int:
        return self.manifest.bits

    def __len__(self) -> int:
        return self.manifest.count

    def search_partial(self, queries: np.ndarray, k: int, timeout_s: float | None = None) -> ShardedResult:
        """Merged top-k of the shards that answer; `missing` lists the others (dead, unreachable, timed out)."""
        ray = ray_module()
        probe = HammingIndex(self.bits)
        probe.search(queries, k)  # checks dtype, shape, padding bits and k exactly as the single index does
        queries = np.ascontiguousarray(np.asarray(queries).reshape(-1, probe.code_bytes))
        ref = ray.put(queries)
        live = [i for i in range(len(self.actors)) if i not in self.missing]
        futures = {i: self.actors[i].search.remote(ref, int(k)) for i in live}
        dists, ids, missing = [], [], list(self.missing)
        for i, fut in futures.items():
            try:
                d, n = ray.get(fut, timeout=timeout_s)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.ObjectLostError):
                missing.append(i)
                continue
            dists.append(d)
            ids.append(n)
        if not dists:
            empty = np.full((len(queries), int(k)), -1)
            return ShardedResult(empty.astype(np.int32), empty.astype(np.int64), sorted(missing))
        d, n = merge_topk(dists, ids, int(k))
        return ShardedResult(d, n, sorted(missing))

    def search(self, queries: np.ndarray, k: int, timeout_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """k nearest codes over all shards, (int32 distances, int64 ids); any shard not answering is an error."""
        result = self.search_partial(queries, k, timeout_s)
        if result.missing:
            names = ", ".join(f"{i} ({self.manifest.shards[i].file})" for i in result.missing)
            raise OndeviceError(f"shard {names} did not answer (dead, missing or timed out); restart it with "
                                "RayShardedIndex.open, or ask for partial results with search_partial / --partial")
        return result.distances, result.ids

    def close(self) -> None:
        """Stop the shard actors."""
        ray = ray_module()
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
