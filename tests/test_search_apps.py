"""Rescoring with int8 vectors, filters inside the scan and the index file's optional sections, against brute force."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from ondevice.bits import hamming_reference, pack
from ondevice.errors import OndeviceError
from ondevice.index import Filter, HammingIndex, quantize_int8, read_header


def golden_cases(index, queries: np.ndarray, qv: np.ndarray, specs) -> list[dict]:
    """Python's answers for each (filter, k, rescore m) spec, -1 padding dropped: the golden cases JS and Java match."""
    cases = []
    for flt, k, m in specs:
        case = {"k": k, "rescore": m, "filter": None if flt is None else
                {"tags_all": str(flt.tags_all), "tags_any": str(flt.tags_any), "categories": flt.categories}}
        if m:
            r = index.search(queries, k, filter=flt, rescore=m, query_vectors=qv)
            ids, dist, scores = r.ids, r.distances, r.scores
        else:
            dist, ids = index.search(queries, k, filter=flt)
            scores = None
        keep = [row >= 0 for row in ids]
        case["ids"] = [row[kp].tolist() for row, kp in zip(ids, keep)]
        case["distances"] = [row[kp].tolist() for row, kp in zip(dist, keep)]
        case["scores"] = None if scores is None else [row[kp].tolist() for row, kp in zip(scores, keep)]
        cases.append(case)
    return cases


def _data(n: int, bits: int, seed: int, dim: int = 12):
    rng = np.random.default_rng(seed)
    codes = pack(rng.random((n, bits)) < 0.15)  # sparse bits: many tied distances
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    tags = rng.integers(0, 1 << 6, n).astype(np.uint64) | (np.uint64(1) << np.uint64(63)) * rng.integers(0, 2, n).astype(np.uint64)
    cats = rng.integers(-2, 4, n).astype(np.int32)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)  # not ascending: the tie rule must use ids, not rows
    return codes, vecs, tags, cats, ids


def brute_filtered(codes, ids, allowed, queries, k):
    dist = hamming_reference(queries, codes)
    out_d = np.full((len(queries), k), -1)
    out_i = np.full((len(queries), k), -1)
    rows = np.flatnonzero(allowed)
    for q in range(len(queries)):
        order = rows[np.lexsort((ids[rows], dist[q, rows]))][:k]
        out_d[q, : len(order)], out_i[q, : len(order)] = dist[q, order], ids[order]
    return out_d, out_i


def brute_rescored(codes, ids, allowed, q8, scales, queries, qv, k, m):
    _, short = brute_filtered(codes, ids, allowed, queries, k * m)
    row_of = {int(i): r for r, i in enumerate(ids)}
    dist = hamming_reference(queries, codes)
    out = []
    for q in range(len(queries)):
        rows = np.array([row_of[int(i)] for i in short[q] if i >= 0], np.int64)
        s = (q8[rows].astype(np.float32) @ qv[q]) * scales[rows]
        order = np.lexsort((ids[rows], -s))[:k]
        out.append((s[order], ids[rows][order], dist[q, rows][order]))
    return out


FILTERS = {
    "none": Filter(),
    "empty": Filter(categories=[]),
    "all": Filter(tags_all=0),
    "sparse": Filter(tags_all=0b111, categories=[1, 3]),
    "dense": Filter(tags_any=0b11),
    "high bit": Filter(tags_all=1 << 63, tags_any=0b1010),
    "one category": Filter(categories=[-2]),
}


@pytest.mark.parametrize("bits", [64, 200, 256])
@pytest.mark.parametrize("threads", [1, 2])
def test_filtered_search_matches_brute_force(bits, threads):
    codes, _, tags, cats, ids = _data(400, bits, seed=bits + threads)
    index = HammingIndex(bits)
    index.add(codes, ids, tags=tags, categories=cats)
    queries = codes[[0, 5, 9, 33, 100]]
    for name, flt in FILTERS.items():
        allowed = flt.allows(tags, cats)
        for k in (1, 7, 450):
            d, i = index.search(queries, k, threads=threads, filter=flt)
            rd, ri = brute_filtered(codes, ids, allowed, queries, k)
            np.testing.assert_array_equal(d, rd, err_msg=name)
            np.testing.assert_array_equal(i, ri, err_msg=name)
            # k rows whenever k rows are allowed
            assert (i[:, : min(k, int(allowed.sum()))] >= 0).all(), name


def test_filter_without_attributes_and_after_remove():
    codes, _, tags, cats, ids = _data(300, 128, seed=3)
    plain = HammingIndex(128)
    plain.add(codes, ids)
    d0, i0 = plain.search(codes[:4], 9)
    d1, i1 = plain.search(codes[:4], 9, filter=Filter())  # attributes default to 0: everything passes an empty filter
    np.testing.assert_array_equal(d0, d1)
    np.testing.assert_array_equal(i0, i1)
    assert (plain.search(codes[:2], 5, filter=Filter(tags_all=1))[1] == -1).all()
    index = HammingIndex(128)
    index.add(codes, ids, tags=tags, categories=cats)
    index.remove(ids[::3])
    keep = np.ones(300, bool)
    keep[::3] = False
    flt = Filter(tags_any=0b101)
    d, i = index.search(codes[:4], 11, filter=flt)
    rd, ri = brute_filtered(codes[keep], ids[keep], flt.allows(tags[keep], cats[keep]), codes[:4], 11)
    np.testing.assert_array_equal(d, rd)
    np.testing.assert_array_equal(i, ri)
    index.set_attributes(ids[keep][:5], categories=np.full(5, 99))
    _, i = index.search(codes[:1], 10, filter=Filter(categories=[99]))
    assert sorted(i[0][i[0] >= 0].tolist()) == sorted(ids[keep][:5].tolist())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("use_filter", [False, True])
def test_rescoring_matches_brute_force(threads, use_filter):
    codes, vecs, tags, cats, ids = _data(500, 200, seed=7 + threads)
    q8, scales = quantize_int8(vecs)
    index = HammingIndex(200)
    index.add(codes, ids, vectors=vecs, tags=tags, categories=cats)
    queries = codes[[1, 2, 3, 40, 41]]
    qv = vecs[[1, 2, 3, 40, 41]] + 0.1
    flt = Filter(tags_any=0b110) if use_filter else None
    allowed = flt.allows(tags, cats) if flt else np.ones(500, bool)
    for k, m in ((1, 1), (5, 2), (10, 4), (10, 10), (60, 10)):
        got = index.search(queries, k, threads=threads, filter=flt, rescore=m, query_vectors=qv)
        for q, (s, i, d) in enumerate(brute_rescored(codes, ids, allowed, q8, scales, queries, qv, k, m)):
            np.testing.assert_allclose(got.scores[q, : len(s)], s, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got.ids[q, : len(i)], i)
            np.testing.assert_array_equal(got.distances[q, : len(d)], d)
            assert (got.ids[q, len(i):] == -1).all() and np.isneginf(got.scores[q, len(i):]).all()


def test_quantization_is_symmetric_per_row():
    v = np.array([[1.0, -2.0, 0.5], [0, 0, 0], [1e-3, 0, -1e-3]], np.float32)
    q8, sc = quantize_int8(v)
    assert q8.dtype == np.int8 and sc.dtype == np.float32
    assert q8[0].tolist() == [64, -127, 32] and sc[1] == 0 and q8[1].tolist() == [0, 0, 0]
    assert np.all(np.abs(q8 * sc[:, None] - v) <= np.abs(v).max(axis=1, keepdims=True) / 254 + 1e-9)


def test_sections_round_trip_and_plain_files_stay_version_2(tmp_path):
    codes, vecs, tags, cats, ids = _data(130, 200, seed=11)
    plain = HammingIndex(200)
    plain.add(codes, ids)
    assert read_header(plain.save(tmp_path / "plain.odx"))["version"] == 2
    index = HammingIndex(200)
    index.add(codes, ids, vectors=vecs, tags=tags, categories=cats)
    path = index.save(tmp_path / "full.odx")
    assert read_header(path)["version"] == 3
    for mmap in (True, False):
        back = HammingIndex.load(path, mmap=mmap, verify=True)
        np.testing.assert_array_equal(back.vectors[0], index.vectors[0])
        np.testing.assert_array_equal(back.vectors[1], index.vectors[1])
        np.testing.assert_array_equal(back.tags, tags)
        np.testing.assert_array_equal(back.categories, cats)
        flt = Filter(tags_any=0b11, categories=[0, 1, 2])
        np.testing.assert_array_equal(back.search(codes[:3], 8, filter=flt)[1], index.search(codes[:3], 8, filter=flt)[1])
        r1 = back.search(codes[:3], 5, rescore=3, query_vectors=vecs[:3])
        r2 = index.search(codes[:3], 5, rescore=3, query_vectors=vecs[:3])
        np.testing.assert_array_equal(r1.ids, r2.ids)
    only_tags = HammingIndex(200)
    only_tags.add(codes, tags=tags)
    back = HammingIndex.load(only_tags.save(tmp_path / "tags.odx"))
    assert back.vectors is None and back.has_attributes and back.vector_dim == 0
    empty = HammingIndex(64)
    empty.add(np.zeros((0, 8), np.uint8), vectors=np.zeros((0, 4), np.float32), tags=np.zeros(0, np.uint64))
    assert len(HammingIndex.load(empty.save(tmp_path / "empty.odx"), verify=True)) == 0


def _rewrite_header(path, **fields):
    raw = bytearray(path.read_bytes())
    offsets = {"sections": 156, "dim": 160, "vectors": 164, "scales": 172, "tags": 180, "categories": 188}
    for name, value in fields.items():
        fmt = "<I" if name in ("sections", "dim") else "<Q"
        struct.pack_into(fmt, raw, offsets[name], value)
    struct.pack_into("<I", raw, 228, zlib.crc32(bytes(raw[:228])))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("fields", [
    {"sections": 4}, {"sections": 0}, {"dim": 0}, {"dim": 70000}, {"vectors": 0},
    {"scales": 1 << 62}, {"tags": 8}, {"categories": 1 << 63},
])
def test_hostile_section_headers_are_one_clear_error(tmp_path, fields):
    codes, vecs, tags, cats, ids = _data(40, 64, seed=2)
    index = HammingIndex(64)
    index.add(codes, ids, vectors=vecs, tags=tags, categories=cats)
    path = index.save(tmp_path / "x.odx")
    _rewrite_header(path, **fields)
    with pytest.raises(OndeviceError, match="inconsistent header|truncated"):
        HammingIndex.load(path)


def test_corrupt_sections_are_caught(tmp_path):
    codes, vecs, tags, cats, ids = _data(40, 64, seed=2)
    index = HammingIndex(64)
    index.add(codes, ids, vectors=vecs, tags=tags, categories=cats)
    path = index.save(tmp_path / "x.odx")
    head = read_header(path)
    raw = bytearray(path.read_bytes())
    raw[head["tags_offset"] + 3] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(OndeviceError, match="checksum"):
        HammingIndex.load(path, verify=True)
    raw[head["tags_offset"] + 3] ^= 1
    struct.pack_into("<f", raw, head["scales_offset"], -1.0)
    path.write_bytes(bytes(raw))
    with pytest.raises(OndeviceError, match="scale"):
        HammingIndex.load(path)


def test_bad_inputs_are_one_line_errors():
    codes, vecs, *_ = _data(20, 64, seed=1)
    index = HammingIndex(64)
    index.add(codes, vectors=vecs)
    for kwargs, msg in [
        ({"rescore": 2}, "query_vectors"),
        ({"rescore": 0, "query_vectors": vecs[:1]}, "rescore"),
        ({"rescore": 2, "query_vectors": vecs[:1, :3]}, "shape"),
        ({"query_vectors": vecs[:1]}, "only used with rescore"),
        ({"filter": "x"}, "Filter"),
    ]:
        with pytest.raises(OndeviceError, match=msg):
            index.search(codes[:1], 3, **kwargs)
    with pytest.raises(OndeviceError, match="every add"):
        index.add(codes[:2])
    with pytest.raises(OndeviceError, match="dims"):
        index.add(codes[:2], vectors=vecs[:2, :4])
    with pytest.raises(OndeviceError, match="no int8 vectors"):
        HammingIndex(64).search(codes[:1], 1, rescore=2, query_vectors=vecs[:1])
    with pytest.raises(OndeviceError, match="tags"):
        index.add(codes[:2], vectors=vecs[:2], tags=np.array([-1, 2]))
    for bad in ({"tags_all": -1}, {"tags_any": 1 << 64}, {"categories": ["a"]}, {"categories": [1 << 40]}):
        with pytest.raises(OndeviceError):
            Filter(**bad)


# ------------------------------------------------------------------------------------------------ bundle and CLI

TEXTS = ["a cat sat on the mat", "dogs bark loudly at night", "the stock market fell sharply",
         "a kitten sleeps on a rug", "stocks dropped again today", "how do I bake bread", "recipes for sourdough bread"]


@pytest.fixture(scope="module")
def bundle():
    import ondevice

    return ondevice.load()


def test_bundle_rescoring_and_filters(bundle):
    from ondevice.runtime import unit_rows

    bundle.index_texts(TEXTS, rescore_vectors=True, categories=np.array([0, 0, 1, 0, 1, 2, 2]))
    assert bundle.index.vector_dim == bundle.dim
    emb = unit_rows(bundle.encode(["a small cat"]))
    scores, ids = bundle.search(["a small cat"], 3, rescore=len(TEXTS))  # every row rescored: the int8 cosine order
    q8, sc = bundle.index.vectors
    exact = (q8.astype(np.float32) @ emb[0]) * sc
    assert ids[0].tolist() == np.argsort(-exact)[:3].tolist()
    np.testing.assert_allclose(scores[0], np.sort(exact)[::-1][:3], rtol=1e-5)
    _, ids = bundle.search(["bread"], 5, filter=Filter(categories=[2]))
    assert sorted(ids[0][ids[0] >= 0].tolist()) == [5, 6]
    bundle.index_texts(TEXTS)
    with pytest.raises(OndeviceError, match="no int8 vectors"):
        bundle.search(["x"], 2, rescore=2)


def test_cli_build_int8_vectors_and_search_rescore_filter(tmp_path, capsys):
    import json

    from ondevice.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    np.save(tmp_path / "tags.npy", np.array([1, 1, 2, 1, 2, 4, 4], np.uint64))
    out = tmp_path / "c.odx"
    assert main(["index", "build", "--corpus", str(corpus), "--bundle", "pretrained", "--int8-vectors",
                 "--tags", str(tmp_path / "tags.npy"), "--out", str(out)]) == 0
    assert read_header(out)["version"] == 3
    capsys.readouterr()
    assert main(["index", "search", str(out), "--bundle", "pretrained", "--query", "a small cat", "-k", "2",
                 "--rescore", "3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["results"]
    assert [h["id"] for h in hits][:1] in ([0], [3]) and hits[0]["score"] >= hits[1]["score"]
    assert main(["index", "search", str(out), "--bundle", "pretrained", "--query", "bread", "-k", "5",
                 "--tags-any", "4", "--json"]) == 0
    assert sorted(h["id"] for h in json.loads(capsys.readouterr().out)["results"]) == [5, 6]
    assert main(["index", "info", str(out), "--verify"]) == 0
    assert "int8 vectors (384 dims" in capsys.readouterr().out
    plain = tmp_path / "p.odx"
    assert main(["index", "build", "--corpus", str(corpus), "--bundle", "pretrained", "--out", str(plain)]) == 0
    assert main(["index", "search", str(plain), "--bundle", "pretrained", "--query", "x", "--rescore", "2"]) == 2
    assert "keeps no int8 vectors" in capsys.readouterr().err
    assert main(["index", "build", "--corpus", str(corpus), "--int8-vectors", "--codes", "x.npy",
                 "--out", str(plain)]) == 2


# ------------------------------------------------------------------------------------------------ JS runtime parity


def golden_search_apps(seed: int = 4) -> dict:
    """A golden case file: codes, attributes, int8 vectors, queries and the Python results of filters and rescoring."""
    rng = np.random.default_rng(seed)
    n, bits, dim = 300, 72, 16
    codes = pack(rng.random((n, bits)) < 0.2)
    codes[250:] = codes[:50]  # exact duplicates: ties go to the smaller row everywhere
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    tags = rng.integers(0, 8, n).astype(np.uint64) | (np.uint64(1) << np.uint64(40)) * rng.integers(0, 2, n).astype(np.uint64)
    cats = rng.integers(0, 4, n).astype(np.int32)
    index = HammingIndex(bits)
    index.add(codes, vectors=vecs, tags=tags, categories=cats)
    q8, scales = index.vectors
    queries = np.concatenate([pack(rng.random((6, bits)) < 0.2), codes[:2]])
    qv = rng.standard_normal((len(queries), dim)).astype(np.float32)
    specs = [(None, 10, 0), (Filter(tags_all=1 << 40), 10, 0), (Filter(tags_any=0b011, categories=[1, 2]), 7, 0),
             (Filter(categories=[]), 5, 0), (None, 10, 4), (Filter(tags_all=0b100), 5, 3)]
    cases = golden_cases(index, queries, qv, specs)
    return {"code_bytes": codes.shape[1], "dim": dim, "codes": codes.tolist(), "tags": [str(t) for t in tags.tolist()],
            "categories": cats.tolist(), "vectors": q8.tolist(), "scales": scales.tolist(), "queries": queries.tolist(),
            "query_vectors": qv.tolist(), "cases": cases}


def test_js_filters_and_rescoring_equal_python(tmp_path):
    import json
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (`make test` installs it)")
    golden = golden_search_apps()
    (tmp_path / "g.json").write_text(json.dumps(golden))
    web = Path(__file__).resolve().parent.parent / "web_demo"
    res = subprocess.run([node, "test/search_apps.mjs", str(tmp_path / "g.json"), str(tmp_path / "out.json")], cwd=web,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads((tmp_path / "out.json").read_text())["cases"]
    for want, have in zip(golden["cases"], got):
        assert have["ids"] == want["ids"], want["filter"]
        assert have["distances"] == want["distances"]
        if want["scores"] is not None:
            for a, b in zip(have["scores"], want["scores"]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert golden["cases"][3]["ids"] == [[]] * len(golden["queries"])  # an empty category list allows nothing


def test_java_filters_and_rescoring_equal_python(tmp_path):
    import json
    import shutil
    import subprocess
    from pathlib import Path

    javac, java = shutil.which("javac"), shutil.which("java")
    if not (javac and java):
        pytest.skip("javac/java (JDK >= 11) not on PATH")
    core = Path(__file__).resolve().parent.parent / "android_demo" / "core" / "src"
    names = ["main/java/ai/ondevice/core/" + n for n in ("HammingIndex", "Codes", "Filter", "Json", "BundleException")]
    sources = [str(core / f"{n}.java") for n in names] + [str(core / "test/java/ai/ondevice/core/SearchAppsCheck.java")]
    res = subprocess.run([javac, "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "--release", "8", "-Xlint:all",
                          "-Xlint:-options", "-Werror", "-encoding", "UTF-8", "-d", str(tmp_path / "classes"), *sources],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    golden = golden_search_apps()
    (tmp_path / "g.json").write_text(json.dumps(golden))
    res = subprocess.run([java, "-cp", str(tmp_path / "classes"), "ai.ondevice.core.SearchAppsCheck",
                          str(tmp_path / "g.json"), str(tmp_path / "out.json")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads((tmp_path / "out.json").read_text())["cases"]
    for want, have in zip(golden["cases"], got, strict=True):
        assert have["ids"] == want["ids"], want["filter"]
        assert have["distances"] == want["distances"]
        if want["scores"] is not None:
            for a, b in zip(have["scores"], want["scores"]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
