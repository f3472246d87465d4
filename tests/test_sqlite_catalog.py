"""SQLite catalogs: round trips with HammingIndex, transactional writes, a kill -9 mid-batch, sqlite-vec/usearch interop."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ondevice.bits import pack
from ondevice.errors import OndeviceError
from ondevice.index import Filter, HammingIndex
from ondevice.sqlite_catalog import Catalog, write_index


def _items(n: int, bits: int = 256, dim: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (pack(rng.random((n, bits)) < 0.5), rng.standard_normal((n, dim)).astype(np.float32),
            rng.integers(0, 1 << 63, n, dtype=np.uint64) | np.uint64(1 << 63) * rng.integers(0, 2, n).astype(np.uint64),
            rng.integers(0, 5, n).astype(np.int32))


def _same_index(a: HammingIndex, b: HammingIndex) -> None:
    oa, ob = np.argsort(a.ids), np.argsort(b.ids)
    np.testing.assert_array_equal(a.ids[oa], b.ids[ob])
    np.testing.assert_array_equal(a.codes[oa], b.codes[ob])
    np.testing.assert_array_equal(a.tags[oa], b.tags[ob])
    np.testing.assert_array_equal(a.categories[oa], b.categories[ob])
    if a.vectors is not None:
        np.testing.assert_array_equal(a.vectors[0][oa], b.vectors[0][ob])
        np.testing.assert_array_equal(a.vectors[1][oa], b.vectors[1][ob])


def test_index_round_trip_through_sqlite(tmp_path):
    codes, vecs, tags, cats = _items(300)
    index = HammingIndex(256)
    ids = np.arange(300, dtype=np.int64) * 3
    index.add(codes, ids, vectors=vecs, tags=tags, categories=cats)
    texts = [f"item {i}" for i in range(300)]
    with write_index(index, tmp_path / "c.db", texts=texts) as cat:
        assert len(cat) == 300 and cat.vector_dim == 8 and cat.texts([3, 6, 1]) == ["item 1", "item 2", None]
        back = cat.to_index()
    _same_index(index, back)
    flt = Filter(tags_all=1 << 63, categories=[1, 2])
    r1 = back.search(codes[:3], 5, filter=flt, rescore=3, query_vectors=vecs[:3])
    r2 = index.search(codes[:3], 5, filter=flt, rescore=3, query_vectors=vecs[:3])
    np.testing.assert_array_equal(r1.ids, r2.ids)
    with pytest.raises(OndeviceError, match="exists"):
        write_index(index, tmp_path / "c.db")


def test_add_remove_update_refresh_and_rollback(tmp_path):
    codes, vecs, tags, cats = _items(120, bits=100, dim=4, seed=1)
    cat = Catalog.create(tmp_path / "c.db", bits=100)
    cat.add(codes[:100], np.arange(100), tags=tags[:100], categories=cats[:100])
    index = cat.to_index()
    cat.remove([5, 6, 999])
    cat.update(np.array([7]), codes[110:111], categories=np.array([42]))
    cat.add(codes[100:110], np.arange(100, 110))
    rev = cat.rev
    with pytest.raises(OndeviceError, match="already in the catalog"):  # one id clashes: nothing of the batch stays
        cat.add(codes[110:120], np.arange(105, 115))
    with pytest.raises(OndeviceError, match="not in the catalog"):
        cat.update(np.array([5]), codes[:1])
    assert cat.rev == rev and len(cat) == 108
    assert cat.refresh(index) == 2 + 1 + 10
    _same_index(cat.to_index(), index)
    assert index.search(codes[110:111], 1)[1][0, 0] == 7
    _, i = index.search(codes[:1], 5, filter=Filter(categories=[42]))
    assert i[0].tolist() == [7, -1, -1, -1, -1]
    cat.close()
    with Catalog.open(tmp_path / "c.db") as again:
        _same_index(again.to_index(), index)
    with pytest.raises(OndeviceError, match="keeps no vectors"):
        Catalog.open(tmp_path / "c.db").add(codes[:1], [500], vectors=vecs[:1])


def test_foreign_and_bad_databases_are_one_line_errors(tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(OndeviceError, match="not an ondevice SQLite catalog"):
        Catalog.open(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(OndeviceError):
        Catalog.open(junk)
    with pytest.raises(OndeviceError, match="not found"):
        Catalog.open(tmp_path / "missing.db")
    with pytest.raises(OndeviceError, match="table"):
        Catalog.create(tmp_path / "x.db", bits=64, table="items; DROP")
    cat = Catalog.create(tmp_path / "y.db", bits=64)
    cat.add(np.zeros((1, 8), np.uint8), [1])
    cat._db.execute("UPDATE items SET code = x'0011'")
    with pytest.raises(OndeviceError, match="not 8 bytes"):
        cat.to_index()


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from ondevice.sqlite_catalog import Catalog
    cat = Catalog.open(sys.argv[1])
    rng = np.random.default_rng(0)
    batch, start = 2000, 0
    while True:
        codes = rng.integers(0, 256, (batch, 32), dtype=np.uint8)
        cat.add(codes, np.arange(start, start + batch), texts=[f"t{i}" for i in range(start, start + batch)])
        start += batch
        print(start, flush=True)
""")


def test_kill_9_mid_batch_keeps_the_last_commit(tmp_path):
    path = tmp_path / "crash.db"
    Catalog.create(path, bits=256).close()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = 0
    try:
        while committed < 6000:
            line = proc.stdout.readline()
            assert line, "the writer died"
            committed = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # lands inside the next batch's transaction (or between two)
        proc.wait()
    with Catalog.open(path) as cat:
        n = len(cat)
        assert n >= committed and n % 2000 == 0  # every committed batch, and no part of an uncommitted one
        index = cat.to_index()
        assert cat.texts([n - 1]) == [f"t{n - 1}"]
    d, i = index.search(index.codes[[0, n - 1]], 1)
    assert i[:, 0].tolist() == [0, n - 1] and (d[:, 0] == 0).all()


def test_sqlite_vec_and_usearch_agree_with_hamming_index(tmp_path):
    sqlite_vec = pytest.importorskip("sqlite_vec")
    usearch_index = pytest.importorskip("usearch.index")
    rng = np.random.default_rng(5)
    bits, n, k = 256, 500, 10
    codes = pack(rng.random((n, bits)) < 0.5)
    queries = pack(rng.random((20, bits)) < 0.5)
    index = HammingIndex(bits)
    index.add(codes)
    ours_d, ours_i = index.search(queries, k)
    cat = write_index(index, tmp_path / "v.db")
    driver = sqlite3 if hasattr(sqlite3.Connection, "enable_load_extension") else \
        pytest.importorskip("pysqlite3", reason="this Python's sqlite3 cannot load extensions")
    db = driver.connect(str(tmp_path / "v.db"))
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.execute(f"CREATE VIRTUAL TABLE vec_items USING vec0(embedding bit[{bits}])")
    db.execute("INSERT INTO vec_items(rowid, embedding) SELECT id, vec_bit(code) FROM items")  # the column as stored
    for q in range(len(queries)):
        rows = db.execute("SELECT rowid, distance FROM vec_items WHERE embedding MATCH vec_bit(?) AND k = ? "
                          "ORDER BY distance", (queries[q].tobytes(), k)).fetchall()
        assert [int(r[1]) for r in rows] == ours_d[q].tolist()
        tie = ours_d[q] < ours_d[q, -1]  # ids agree except among rows tied with the k-th distance
        assert {r[0] for r, t in zip(rows, tie) if t} == set(ours_i[q][tie].tolist())
        scalar = db.execute("SELECT id, vec_distance_hamming(vec_bit(code), vec_bit(?)) d FROM items ORDER BY d, id "
                            "LIMIT ?", (queries[q].tobytes(), k)).fetchall()
        assert [r[0] for r in scalar] == ours_i[q].tolist()
    cat.close()
    u = usearch_index.Index(ndim=bits, metric="hamming", dtype="b1")
    u.add(np.arange(n), codes)
    found = u.search(queries, k, exact=True)
    for q in range(len(queries)):
        assert found.distances[q].astype(int).tolist() == ours_d[q].tolist()
        tie = ours_d[q] < ours_d[q, -1]
        assert set(found.keys[q][tie].tolist()) == set(ours_i[q][tie].tolist())
