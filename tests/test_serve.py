"""HTTP search on Ray Serve (local testing mode): the ingress merges exactly like one HammingIndex; failures named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex
from ondevice.scale.shards import build_shards, shard_bounds

pytest.importorskip("ray", reason="ray is not installed: the Ray tests need `pip install 'ondevice[scale]'`")
serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed: `pip install 'ondevice[scale]'`")

from ondevice.scale import serve as odserve


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """4 shards of 64-bit codes drawn from few values (many ties), the codes, and queries."""
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (40, 8), dtype=np.uint8)
    codes = base[rng.integers(0, len(base), 6_000)] ^ (rng.random((6_000, 8)) < 0.03).astype(np.uint8)
    folder = tmp_path_factory.mktemp("serve")
    build_shards(codes, folder, shards=4)
    return folder, codes, rng.integers(0, 256, (30, 8), dtype=np.uint8)


@pytest.fixture
def app(catalog, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # Serve writes nothing there in local mode; keep it out of ~ anyway
    handle = serve.run(odserve.search_app(catalog[0]), _local_testing_mode=True)
    yield handle


def _request(body):
    from starlette.requests import Request

    payload = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def receive():
        return {"type": "http.request", "body": payload, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}, receive)


def test_serve_search_equals_single_index(app, catalog):
    _, codes, queries = catalog
    single = HammingIndex(64)
    single.add(codes)
    for k in (1, 10, 80):
        got = app.search.remote(queries, k).result()
        want_d, want_i = single.search(queries, k)
        assert not got.partial
        np.testing.assert_array_equal(got.distances, want_d)
        np.testing.assert_array_equal(got.ids, want_i)


def test_http_body_answers_like_the_handle(app, catalog):
    _, _, queries = catalog
    response = app.remote(_request({"queries": [q.tobytes().hex() for q in queries[:3]], "k": 5})).result()
    assert response.status_code == 200
    body = json.loads(response.body)
    want = app.search.remote(queries[:3], 5).result()
    assert body["ids"] == want.ids.tolist() and body["distances"] == want.distances.tolist()
    assert body["partial"] is False and body["missing"] == []


@pytest.mark.parametrize("body, message", [
    (b"not json", "not JSON"),
    ([1, 2], "JSON object"),
    ({"queries": []}, "non-empty list"),
    ({"queries": ["zz" * 8]}, "not a hex string"),
    ({"queries": ["00" * 7]}, "16 hex digits"),
    ({"queries": ["00" * 8], "k": 0}, "1..10000"),
    ({"queries": ["00" * 8], "k": True}, "1..10000"),
    ({"queries": ["00" * 8], "partial": "yes"}, "true or false"),
])
def test_bad_http_requests_are_400_with_one_line(app, body, message):
    response = app.remote(_request(body)).result()
    assert response.status_code == 400
    error = json.loads(response.body)["error"]
    assert message in error and "\n" not in error


def test_failed_shard_is_named_or_reported_partial(app, catalog, monkeypatch):
    _, codes, queries = catalog
    real = odserve.ShardReplica.search

    def broken(self, q, k):
        if self.i == 2:
            raise RuntimeError("replica lost")
        return real(self, q, k)

    monkeypatch.setattr(odserve.ShardReplica, "search", broken)
    with pytest.raises(OndeviceError, match=r"shard 2 \(shard-00002.odx\) did not answer"):
        app.search.remote(queries, 10).result()
    got = app.search.remote(queries, 10, True).result()
    assert got.partial and got.missing == [2]
    keep = np.ones(len(codes), bool)
    lo, hi = shard_bounds(len(codes), 4)[2]
    keep[lo:hi] = False
    rest = HammingIndex(64)
    rest.add(codes[keep], ids=np.flatnonzero(keep))
    want_d, want_i = rest.search(queries, 10)
    np.testing.assert_array_equal(got.distances, want_d)
    np.testing.assert_array_equal(got.ids, want_i)
    http = app.remote(_request({"queries": [queries[0].tobytes().hex()], "k": 3})).result()
    assert http.status_code == 503 and "shard 2" in json.loads(http.body)["error"]
    http = app.remote(_request({"queries": [queries[0].tobytes().hex()], "k": 3, "partial": True})).result()
    assert http.status_code == 200 and json.loads(http.body)["missing"] == [2]


def test_parse_request_roundtrips_codes():
    codes = np.random.default_rng(2).integers(0, 256, (5, 4), dtype=np.uint8)
    q, k, partial = odserve.parse_request({"queries": [c.tobytes().hex() for c in codes], "k": 7}, 4)
    np.testing.assert_array_equal(q, codes)
    assert (k, partial) == (7, False)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serve_http_answers_over_real_http_like_one_index(ray_local, catalog):
    """`serve_http` (what `ondevice index serve` runs): Serve's HTTP proxy on a port, exact merged answers."""
    import urllib.request

    folder, codes, queries = catalog
    url = odserve.serve_http(folder, port=_free_port(), cpus_per_shard=0.25)
    try:
        body = json.dumps({"queries": [q.tobytes().hex() for q in queries[:5]], "k": 7}).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
    finally:
        serve.shutdown()
    single = HammingIndex(64)
    single.add(codes)
    d, i = single.search(queries[:5], 7)
    assert out["ids"] == i.tolist() and out["distances"] == d.tolist() and out["partial"] is False


def test_index_serve_bad_input_is_one_line(tmp_path, capsys):
    from ondevice.cli import main

    assert main(["index", "serve", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]


def test_serve_http_refuses_more_cpus_than_the_cluster_has(ray_local, catalog):
    with pytest.raises(OndeviceError, match="lower --cpus-per-shard"):
        odserve.serve_http(catalog[0], port=_free_port(), cpus_per_shard=1.0, replicas=4)
