"""A SQLite catalog written by Python is read and searched by the Java core (JDBC) and by the web page's JS (sql.js).

Python writes a catalog (two add batches, removals, updates; ids out of insertion order; tags with bit 63 set; text),
searches `Catalog.to_index()` plain, filtered and rescored, and the Java core (through Debian's sqlite-jdbc, which
`make test` installs) and ondevice.js (through sql.js from web_demo/node_modules, in Node and in Chromium) must return
the same ids, distances and scores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_search_apps import golden_cases

from ondevice.bits import pack
from ondevice.index import Filter
from ondevice.sqlite_catalog import Catalog

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web_demo"
CORE = ROOT / "android_demo" / "core" / "src"
SQLITE_JDBC = ("/usr/share/java/sqlite-jdbc.jar", "/usr/share/java/xerial-sqlite-jdbc.jar")


def write_golden_catalog(path: Path, seed: int = 5) -> dict:
    """Write a catalog at `path`; returns the queries, query vectors, its rows and the Python results of each case."""
    rng = np.random.default_rng(seed)
    n, bits, dim = 260, 70, 16
    codes = pack(rng.random((n, bits)) < 0.2)
    codes[200:] = codes[:60]  # exact duplicates: ties go to the smaller id everywhere
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    high = (np.uint64(1) << np.uint64(63)) * rng.integers(0, 2, n).astype(np.uint64)
    tags = rng.integers(0, 8, n).astype(np.uint64) | high
    cats = rng.integers(-2, 3, n).astype(np.int32)
    ids = 1000 + 7 * rng.permutation(n)  # inserted out of id order
    texts = [f"item {i}: caf\u00e9 \u6771\u4eac \"{i % 7}\"" for i in range(n)]
    with Catalog.create(path, bits, vector_dim=dim) as cat:
        for part in (slice(0, 150), slice(150, n)):
            cat.add(codes[part], ids[part], vectors=vecs[part], tags=tags[part], categories=cats[part],
                    texts=texts[part])
        cat.remove(ids[10:30])
        cat.update(ids[40:45], codes[45:50], vectors=vecs[45:50], tags=tags[45:50], categories=cats[45:50],
                   texts=[f"updated {i}" for i in range(5)])
        index = cat.to_index()
        rev = cat.rev
        stored = cat.texts(sorted(index.ids.tolist()))
    queries = np.concatenate([pack(rng.random((6, bits)) < 0.2), codes[:2], codes[12:13]])
    qv = rng.standard_normal((len(queries), dim)).astype(np.float32)
    specs = [(None, 10, 0), (Filter(tags_all=1 << 63), 10, 0), (Filter(tags_any=0b011, categories=[-1, 2]), 7, 0),
             (Filter(categories=[]), 5, 0), (None, 10, 4), (Filter(tags_all=0b100), 5, 3), (None, 400, 0)]
    cases = golden_cases(index, queries, qv, specs)
    return {"bits": bits, "dim": dim, "rev": rev, "ids": sorted(index.ids.tolist()), "texts": stored,
            "queries": queries.tolist(), "query_vectors": qv.tolist(), "cases": cases}


def _same_results(golden: dict, got: dict) -> None:
    assert got["size"] == len(golden["ids"]) == 240
    assert (got["bits"], got["vector_dim"], got["rev"]) == (golden["bits"], golden["dim"], golden["rev"])
    assert got["ids"] == golden["ids"]
    assert got["texts"] == golden["texts"]
    assert len(got["cases"]) == len(golden["cases"])
    for want, have in zip(golden["cases"], got["cases"]):
        assert have["ids"] == want["ids"], (want["filter"], want["rescore"])
        assert have["distances"] == want["distances"]
        if want["scores"] is not None:
            for a, b in zip(have["scores"], want["scores"]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert golden["cases"][3]["ids"] == [[]] * len(golden["queries"])  # an empty category list allows nothing
    assert all(len(row) == 240 for row in golden["cases"][6]["ids"])  # k above the size: every row, once


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> tuple[Path, Path, dict]:
    work = tmp_path_factory.mktemp("sqlite-apps")
    g = write_golden_catalog(work / "catalog.db")
    (work / "golden.json").write_text(json.dumps(g))
    assert not (work / "catalog.db-wal").exists() or not (work / "catalog.db-wal").stat().st_size  # closed: one file
    return work / "catalog.db", work / "golden.json", g


def _jdbc_jar() -> str | None:
    env = os.environ.get("ONDEVICE_SQLITE_JDBC")
    return env if env else next((p for p in SQLITE_JDBC if Path(p).is_file()), None)


@pytest.fixture(scope="module")
def java_check(tmp_path_factory) -> list[str]:
    """The command that runs SqliteCatalogCheck (the core's classes compiled for Java 8, sqlite-jdbc on the path)."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not (javac and java):
        pytest.skip("javac/java (JDK >= 11) not on PATH")
    jar = _jdbc_jar()
    if jar is None:
        pytest.skip("sqlite-jdbc is not installed (`make test` installs Debian's libxerial-sqlite-jdbc-java)")
    classes = tmp_path_factory.mktemp("sqlite-java") / "classes"
    names = ["HammingIndex", "Codes", "Filter", "Json", "BundleException", "SqliteCatalog"]
    sources = [str(CORE / "main/java/ai/ondevice/core" / f"{n}.java") for n in names]
    sources.append(str(CORE / "test/java/ai/ondevice/core/SqliteCatalogCheck.java"))
    sources.append(str(CORE / "test/java/ai/ondevice/core/SearchAppsCheck.java"))  # its golden-case filter parser
    res = subprocess.run([javac, "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "--release", "8", "-Xlint:all",
                          "-Xlint:-options", "-Werror", "-encoding", "UTF-8", "-d", str(classes), *sources],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join([str(classes), jar]),
            "ai.ondevice.core.SqliteCatalogCheck"]


def test_java_reads_the_sqlite_catalog(golden, java_check, tmp_path):
    db, gpath, g = golden
    res = subprocess.run([*java_check, str(db), str(gpath), str(tmp_path / "out.json")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    _same_results(g, json.loads((tmp_path / "out.json").read_text(encoding="utf-8")))


def _bad_databases(golden, tmp_path) -> list[tuple[Path, str]]:
    """(database, the error each reader must give): no catalog at all, and a catalog with a truncated code."""
    import sqlite3

    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t(x)")
    db.commit()
    db.close()
    broken = tmp_path / "broken.db"
    shutil.copyfile(golden[0], broken)
    db = sqlite3.connect(broken)
    db.execute("UPDATE items SET code = x'0102' WHERE id = (SELECT min(id) FROM items)")
    db.commit()
    db.close()
    return [(other, "not an ondevice"), (broken, "has a code that is not 9 bytes")]


def test_java_refuses_foreign_and_corrupt_databases(golden, java_check, tmp_path):
    for db, message in _bad_databases(golden, tmp_path):
        res = subprocess.run([*java_check, str(db), str(golden[1]), str(tmp_path / "out.json")],
                             capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode != 0 and "BundleException" in res.stderr and message in res.stderr, res.stderr


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (`make test` installs it)")
    assert (WEB / "node_modules" / "sql.js" / "package.json").is_file(), (
        "sql.js is not installed in web_demo/node_modules: run `make web-install` (or `cd web_demo && npm ci`)")
    return node


def test_node_reads_the_sqlite_catalog_with_sql_js(golden, tmp_path):
    db, gpath, g = golden
    res = subprocess.run([_node(), "test/sqlite_catalog.mjs", str(db), str(gpath), str(tmp_path / "out.json")],
                         cwd=WEB, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    _same_results(g, got)
    with Catalog.open(db) as cat:
        want_tags = cat.to_index().tags
    assert got["tags"] == [str(t) for t in want_tags.tolist()]  # all 64 bits, bit 63 included


def test_node_refuses_foreign_and_corrupt_databases(golden, tmp_path):
    node = _node()
    for db, message in _bad_databases(golden, tmp_path):
        res = subprocess.run([node, "test/sqlite_catalog.mjs", str(db), str(golden[1]), str(tmp_path / "out.json")],
                             cwd=WEB, capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode != 0 and "OndeviceError" in res.stderr and message in res.stderr, res.stderr


PAGE = """<!doctype html><meta charset="utf-8"><title>sqlite catalog check</title>
<script src="vendor/sql.js/sql-wasm-browser.js"></script>
<script type="module">
import { SqliteCatalog } from "./ondevice.js";
try {
  const SQL = await initSqlJs({ locateFile: (f) => "vendor/sql.js/" + f });
  const cat = SqliteCatalog.open(SQL, new Uint8Array(await (await fetch("catalog.db")).arrayBuffer()));
  const g = await (await fetch("golden.json")).json();
  const cases = g.cases.map((c) => {
    const out = { ids: [], distances: [], scores: [] };
    g.queries.forEach((query, qi) => {
      const filter = c.filter && { tagsAll: BigInt(c.filter.tags_all), tagsAny: BigInt(c.filter.tags_any),
        categories: c.filter.categories };
      const r = cat.searchWith(Uint8Array.from(query), c.k, { filter, rescore: c.rescore || 0,
        queryVector: Float32Array.from(g.query_vectors[qi]) });
      out.ids.push(r.ids);
      out.distances.push(Array.from(r.distances));
      out.scores.push(r.scores ? Array.from(r.scores) : null);
    });
    return out;
  });
  window.result = { size: cat.size, bits: cat.bits, vector_dim: cat.vectorDim, rev: cat.rev, ids: cat.ids,
    texts: cat.texts, cases };
} catch (e) {
  window.result = { error: String(e && e.stack || e) };
}
</script>
"""


def test_browser_reads_the_sqlite_catalog_with_sql_js(golden, tmp_path):
    """The site's vendor/sql.js files (copied by tools/make_catalog.py) run in Chromium on the same catalog."""
    import importlib.util

    db, gpath, g = golden
    _node()
    chromium = os.environ.get("ONDEVICE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not on PATH (`make test` installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    tools = {}
    for name in ("make_catalog", "serve"):
        spec = importlib.util.spec_from_file_location(f"web_demo_{name}_sqlite", WEB / "tools" / f"{name}.py")
        tools[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tools[name])
    site = tmp_path / "site"
    tools["make_catalog"].copy_page(site)
    assert sorted(p.name for p in (site / "vendor" / "sql.js").iterdir()) == ["sql-wasm-browser.js",
                                                                               "sql-wasm-browser.wasm"]
    shutil.copyfile(db, site / "catalog.db")
    shutil.copyfile(gpath, site / "golden.json")
    (site / "check.html").write_text(PAGE, encoding="utf-8")
    with tools["serve"].serve(site) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"], timeout=60_000)
        try:
            page = browser.new_page()
            page.goto(url + "check.html")
            page.wait_for_function("window.result !== undefined", timeout=60_000)
            got = page.evaluate("window.result")
        finally:
            browser.close()
    assert "error" not in got, got.get("error")
    _same_results(g, got)
