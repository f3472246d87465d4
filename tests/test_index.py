"""HammingIndex (add/remove/search/range_search), its file format, FAISS interop and the CLI."""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

from ondevice.bits import hamming_reference, pack
from ondevice.cli import main
from ondevice.errors import OndeviceError
from ondevice.index import HEADER_BYTES, HammingIndex, read_header

BITS = 200  # 25 bytes per code: not a whole number of 64-bit words


def random_codes(n: int, bits: int = BITS, seed: int = 0, density: float = 0.5) -> np.ndarray:
    return pack(np.random.default_rng(seed).random((n, bits)) < density)


def brute(index_codes, index_ids, queries, k):
    dist = hamming_reference(queries, index_codes)
    out_d = np.full((len(queries), k), -1)
    out_i = np.full((len(queries), k), -1)
    for q in range(len(queries)):
        order = np.lexsort((index_ids, dist[q]))[:k]
        out_d[q, : len(order)], out_i[q, : len(order)] = dist[q, order], index_ids[order]
    return out_d, out_i


@pytest.fixture()
def index():
    idx = HammingIndex(BITS)
    idx.add(random_codes(300, seed=1, density=0.1))  # sparse bits: plenty of tied distances
    return idx


# ------------------------------------------------------------------------------------------------ API


def test_add_search_and_default_ids(index):
    assert (len(index), index.bits, index.code_bytes) == (300, BITS, 25)
    more = random_codes(50, seed=2, density=0.1)
    assert index.add(more).tolist() == list(range(300, 350))
    queries = random_codes(6, seed=3, density=0.1)
    queries[0] = more[7]
    for nq in (1, 6):
        d, i = index.search(queries[:nq], 12)
        rd, ri = brute(index.codes, index.ids, queries[:nq], 12)
        np.testing.assert_array_equal(d, rd)
        np.testing.assert_array_equal(i, ri)
    assert i[0, 0] == 307 and d[0, 0] == 0
    d1, i1 = index.search(queries[0], 3)  # one 1-d query
    assert d1.shape == (1, 3) and i1[0, 0] == 307


def test_custom_unordered_ids_break_ties_by_id():
    idx = HammingIndex(256)
    codes = np.zeros((6, 32), np.uint8)
    idx.add(codes, ids=np.array([50, 3, 40, 7, 9, 1]))
    d, i = idx.search(np.zeros((5, 32), np.uint8), 4)  # 5 queries: the blocks kernel
    assert i[0].tolist() == [1, 3, 7, 9] and (d == 0).all()
    d, i = idx.search(np.zeros((1, 32), np.uint8), 10)
    assert i[0].tolist() == [1, 3, 7, 9, 40, 50, -1, -1, -1, -1] and d[0, 6:].tolist() == [-1] * 4


def test_add_rejects_bad_input(index):
    with pytest.raises(OndeviceError, match="duplicates"):
        index.add(random_codes(2), ids=[1000, 1000])
    with pytest.raises(OndeviceError, match="already in the index"):
        index.add(random_codes(2), ids=[5, 1001])
    with pytest.raises(OndeviceError, match=">= 0"):
        index.add(random_codes(1), ids=[-1])
    with pytest.raises(OndeviceError, match=r"shape \(n, 25\)"):
        index.add(np.zeros((3, 24), np.uint8))
    idx29 = HammingIndex(29)
    with pytest.raises(OndeviceError, match="padding bits"):
        idx29.add(np.full((1, 4), 255, np.uint8))
    with pytest.raises(OndeviceError, match="k must be"):
        index.search(random_codes(1), 0)
    with pytest.raises(OndeviceError, match="bits must be"):
        HammingIndex(0)
    assert len(index) == 300


def test_remove(index):
    assert index.remove([3, 5, 999_999]) == 2
    assert len(index) == 298 and 3 not in index.ids and 5 not in index.ids
    _, i = index.search(index.codes[:4], 5)
    _, ri = brute(index.codes, index.ids, index.codes[:4], 5)
    np.testing.assert_array_equal(i, ri)
    assert index.add(random_codes(1, seed=9)).tolist() == [300]  # ids keep counting after the largest
    assert index.add(random_codes(1, seed=10), ids=[3]).tolist() == [3]  # a removed id can be reused
    assert index.remove([]) == 0


def test_range_search(index):
    queries = random_codes(3, seed=4, density=0.1)
    lims, d, i = index.range_search(queries, 30)
    dist = hamming_reference(queries, index.codes)
    for q in range(3):
        hits = np.nonzero(dist[q] < 30)[0]
        assert sorted(i[lims[q] : lims[q + 1]].tolist()) == sorted(index.ids[hits].tolist())
        assert (np.diff(d[lims[q] : lims[q + 1]]) >= 0).all()
    lims, d, i = HammingIndex(BITS).range_search(queries, 30)
    assert lims.tolist() == [0, 0, 0, 0] and len(d) == len(i) == 0


def test_empty_index_search():
    d, i = HammingIndex(64).search(np.zeros((2, 8), np.uint8), 3)
    assert (d == -1).all() and (i == -1).all() and d.shape == (2, 3)


# ------------------------------------------------------------------------------------------------ file format


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(index, tmp_path, mmap):
    index.add(random_codes(5, seed=8), ids=[900, 901, 700, 950, 960])  # ids no longer ascending
    path = index.save(tmp_path / "a.odx")
    assert [p.name for p in tmp_path.iterdir()] == ["a.odx"]  # no temporary file left behind
    assert os.path.getsize(path) == read_header(path)["size"]
    loaded = HammingIndex.load(path, mmap=mmap)
    bases, base = [], loaded.codes
    while base is not None:
        bases.append(type(base))
        base = getattr(base, "base", None)
    assert (np.memmap in bases) == mmap  # mapped, not read, and never copied out of the map
    assert (len(loaded), loaded.bits) == (len(index), index.bits)
    np.testing.assert_array_equal(loaded.codes, index.codes)
    np.testing.assert_array_equal(loaded.ids, index.ids)
    q = random_codes(5, seed=11, density=0.1)
    for got, want in zip(loaded.search(q, 7), index.search(q, 7)):
        np.testing.assert_array_equal(got, want)
    assert loaded.add(random_codes(1, seed=12)).tolist() == [961]
    assert loaded.nbytes == len(loaded) * (25 + 8)


def test_empty_index_round_trip(tmp_path):
    path = HammingIndex(29).save(tmp_path / "e.odx")
    loaded = HammingIndex.load(path)
    assert (len(loaded), loaded.bits, loaded.code_bytes) == (0, 29, 4)


def test_overwrite_while_mapped(index, tmp_path):
    path = index.save(tmp_path / "a.odx")
    mapped = HammingIndex.load(path)
    before = np.array(mapped.codes[:3])
    index.remove(index.ids[:3])
    index.save(path)  # renamed over the mapped file: the old mapping keeps the old bytes
    np.testing.assert_array_equal(mapped.codes[:3], before)
    assert len(HammingIndex.load(path)) == 297


def _one_line_error(fn, match):
    with pytest.raises(OndeviceError, match=match) as info:
        fn()
    assert "\n" not in str(info.value)


def test_bad_files_give_one_line_errors(index, tmp_path):
    good = index.save(tmp_path / "good.odx").read_bytes()

    def write(name, data):
        (tmp_path / name).write_bytes(data)
        return tmp_path / name

    _one_line_error(lambda: HammingIndex.load(tmp_path / "missing.odx"), "not found")
    _one_line_error(lambda: HammingIndex.load(write("foreign.odx", b"PK\x03\x04" + good[4:])), "not an ondevice index")
    _one_line_error(lambda: HammingIndex.load(write("tiny.odx", good[:50])), "truncated")
    _one_line_error(lambda: HammingIndex.load(write("trunc.odx", good[:-10])), "truncated")
    for mmap in (True, False):  # the size check needs no data read
        _one_line_error(lambda mmap=mmap: HammingIndex.load(write("trunc2.odx", good[: HEADER_BYTES + 100]), mmap=mmap),
                        "truncated")
    v9 = bytearray(good)
    struct.pack_into("<I", v9, 8, 9)
    _one_line_error(lambda: HammingIndex.load(write("v9.odx", bytes(v9))), "version 9")
    hdr = bytearray(good)
    hdr[12] ^= 1  # bits field
    _one_line_error(lambda: HammingIndex.load(write("hdr.odx", bytes(hdr))), "corrupt header")
    body = bytearray(good)
    body[HEADER_BYTES + 10] ^= 0x10
    path = write("body.odx", bytes(body))
    _one_line_error(lambda: HammingIndex.load(path, mmap=False), "checksum")
    _one_line_error(lambda: HammingIndex.load(path, mmap=True, verify=True), "checksum")
    assert len(HammingIndex.load(path, mmap=True)) == 300  # by default a mapped load does not read the data
    order = bytearray(good)
    order[20] = 1  # bit order, with a re-computed header crc
    _recrc(order)
    _one_line_error(lambda: HammingIndex.load(write("order.odx", bytes(order))), "bit order")


_CRC_AT = 156  # format v2: the crc32 of bytes 0..155


def _recrc(raw: bytearray) -> None:
    raw[_CRC_AT : _CRC_AT + 4] = struct.pack("<I", zlib.crc32(bytes(raw[:_CRC_AT])))


def _forged(good: bytes, ids=None, flags=None, offsets=None) -> bytes:
    """`good` with other ids / flags / offsets and a header whose crc and data sha256 are valid again."""
    import hashlib

    raw = bytearray(good)
    count, codes_off, ids_off = struct.unpack_from("<QQQ", raw, 24)
    if ids is not None:
        raw[ids_off : ids_off + 8 * count] = np.asarray(ids, "<i8").tobytes()
    if flags is not None:
        raw[21] = flags
    nb = struct.unpack_from("<I", raw, 16)[0]
    raw[56:88] = hashlib.sha256(bytes(raw[codes_off : codes_off + count * nb] + raw[ids_off:])).digest()
    if offsets is not None:
        struct.pack_into("<QQ", raw, 32, *offsets)
    _recrc(raw)
    return bytes(raw)


def test_loading_validates_ids_and_offsets(tmp_path):
    """A valid crc and sha256 do not make impossible ids or offsets acceptable."""
    index = HammingIndex(64)
    index.add(random_codes(10, bits=64, seed=3))
    good = index.save(tmp_path / "good.odx").read_bytes()
    ids = np.arange(10)

    def load(data, **kw):
        (tmp_path / "x.odx").write_bytes(data)
        return HammingIndex.load(tmp_path / "x.odx", **kw)

    assert load(_forged(good, ids=ids)).ids.tolist() == list(range(10))  # the forger itself is sound
    for mmap in (True, False):
        _one_line_error(lambda mmap=mmap: load(_forged(good, ids=[*ids[:9], -1]), mmap=mmap), "negative id")
        _one_line_error(lambda mmap=mmap: load(_forged(good, ids=[0, 1, 2, 2, 4, 5, 6, 7, 8, 9]), mmap=mmap),
                        "ascending but they are not")
        _one_line_error(lambda mmap=mmap: load(_forged(good, ids=[5, 1, 2, 3, 4, 0, 6, 7, 8, 9]), mmap=mmap),
                        "ascending but they are not")
        _one_line_error(lambda mmap=mmap: load(_forged(good, ids=[5, 1, 2, 3, 4, 5, 6, 7, 8, 9], flags=0), mmap=mmap),
                        "duplicate ids")
    assert load(_forged(good, ids=[9, 1, 2, 3, 4, 5, 6, 7, 8, 0], flags=0)).search(index.codes[:1], 1)[1][0, 0] == 9
    count = 10
    for offsets in ((0, 384), (64, 384), (256, 512), (256, 10**15), (HEADER_BYTES, HEADER_BYTES + 8 * count)):
        if offsets == (HEADER_BYTES, 384):
            continue
        _one_line_error(lambda offsets=offsets: load(_forged(good, offsets=offsets)), "inconsistent header")
    _one_line_error(lambda: load(_forged(good, flags=0x81)), "inconsistent header")  # unknown flag bits


def test_version_1_files_are_still_read(tmp_path):
    """A file in the version 1 layout (128-byte header, no encoder identity) loads and searches as before."""
    import hashlib

    codes = random_codes(20, seed=4)
    ids = np.arange(100, 120, dtype="<i8")
    ids_off = (128 + codes.nbytes + 63) // 64 * 64
    body = codes.tobytes() + b"\0" * (ids_off - 128 - codes.nbytes) + ids.tobytes()
    head = struct.pack("<8sIIIBB2xQQQQ32s", b"ONDVIDX\0", 1, BITS, 25, 0, 1, 20, 128, ids_off, ids_off + 160,
                       hashlib.sha256(codes.tobytes() + ids.tobytes()).digest())
    head += struct.pack("<I", zlib.crc32(head))
    path = tmp_path / "v1.odx"
    path.write_bytes(head + b"\0" * (128 - len(head)) + body)
    for mmap in (True, False):
        loaded = HammingIndex.load(path, mmap=mmap, verify=True)
        assert loaded.encoder is None and loaded.ids.tolist() == list(range(100, 120))
        assert loaded.search(codes[7], 1)[1][0, 0] == 107
    assert read_header(path)["version"] == 1


def test_encoder_identity_round_trip_and_checks(tmp_path):
    """The index records which encoder made its codes; another binarizer is refused."""
    from ondevice.index import EncoderId, check_encoder

    enc = EncoderId("ab" * 32, "cd" * 32, "int8")
    index = HammingIndex(BITS, encoder=enc)
    index.add(random_codes(5))
    loaded = HammingIndex.load(index.save(tmp_path / "e.odx"))
    assert loaded.encoder == enc and read_header(tmp_path / "e.odx")["encoder"] == enc
    assert check_encoder(enc, enc, "x") is None
    assert check_encoder(None, enc, "x") is None and check_encoder(enc, None, "x") is None
    fp32 = EncoderId("ef" * 32, "cd" * 32, "fp32")
    assert "same binarizer" in check_encoder(enc, fp32, "x")
    _one_line_error(lambda: check_encoder(enc, EncoderId("ab" * 32, "00" * 31 + "11", "int8"), "x"),
                    "another binarizer")
    with pytest.raises(OndeviceError, match="EncoderId"):
        HammingIndex(BITS, encoder="int8")


def test_mapped_load_says_it_did_not_checksum(index, tmp_path, capsys):
    path = index.save(tmp_path / "a.odx")
    assert HammingIndex.load(path).verified is False
    assert HammingIndex.load(path, verify=True).verified is True
    assert HammingIndex.load(path, mmap=False).verified is True
    assert main(["index", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NOT checksummed" in out and "verified" not in out and " ok" not in out.lower()
    assert main(["index", "info", str(path), "--verify"]) == 0
    assert "sha256 of codes and ids verified" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ FAISS interop


def test_faiss_reads_the_same_codes():
    faiss = pytest.importorskip("faiss")
    codes = random_codes(500, bits=256, seed=13)
    queries = random_codes(4, bits=256, seed=14)
    ref = faiss.IndexBinaryFlat(256)
    ref.add(codes)  # ondevice.bits.pack output goes into FAISS unchanged
    fd, fi = ref.search(queries, 10)
    idx = HammingIndex(256)
    idx.add(codes)
    d, i = idx.search(queries, 10)
    np.testing.assert_array_equal(d, fd)
    for q in range(4):  # FAISS may order equal distances differently; the sets below the k-th distance agree
        below = d[q] < d[q, -1]
        assert set(i[q][below]) == set(fi[q][fd[q] < fd[q, -1]])
    flims, _, fids = ref.range_search(queries, 120)
    lims, _, ids = idx.range_search(queries, 120)
    np.testing.assert_array_equal(lims, flims)
    for q in range(4):
        assert sorted(ids[lims[q] : lims[q + 1]]) == sorted(fids[flims[q] : flims[q + 1]])


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_build_search_info(tmp_path, capsys):
    codes = random_codes(400, bits=72, seed=15)
    np.save(tmp_path / "codes.npy", codes)
    np.save(tmp_path / "ids.npy", np.arange(1000, 1400, dtype=np.int64))
    np.save(tmp_path / "q.npy", codes[[5, 9]])
    out = tmp_path / "c.odx"
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--ids", str(tmp_path / "ids.npy"),
                 "--out", str(out)]) == 0
    assert read_header(out)["bits"] == 72
    capsys.readouterr()
    assert main(["index", "search", str(out), "--queries", str(tmp_path / "q.npy"), "-k", "2", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    import json

    assert [json.loads(x)["results"][0]["id"] for x in lines] == [1005, 1009]
    assert main(["index", "search", str(out), "--queries", str(tmp_path / "q.npy"), "--radius", "1"]) == 0
    assert "id=1005" in capsys.readouterr().out
    assert main(["index", "info", str(out), "--verify"]) == 0
    assert "400 codes x 72 bits" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["index", "build", "--out", "x.odx"], "exactly one input"),
    (["index", "build", "--codes", "missing.npy", "--out", "x.odx"], "not found"),
    (["index", "search", "missing.odx", "--queries", "q.npy"], "not found"),
    (["index", "info", "missing.odx"], "not found"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_cli_bad_kernel_setting_is_one_line(tmp_path, capsys, monkeypatch):
    """A bad ONDEVICE_HAMMING_PATH, read deep inside the search, reaches the user as one line and exit code 2."""
    codes = random_codes(10, bits=64)
    np.save(tmp_path / "codes.npy", codes)
    out = str(tmp_path / "c.odx")
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--out", out]) == 0
    capsys.readouterr()
    monkeypatch.setenv("ONDEVICE_HAMMING_PATH", "avx9000")
    assert main(["index", "search", out, "--queries", str(tmp_path / "codes.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("ondevice index: error: unknown Hamming kernel path 'avx9000'; "
                   "use one of auto, native, portable, numpy")


def test_cli_rejects_mismatched_inputs(tmp_path, capsys):
    codes = random_codes(10, bits=64)
    np.save(tmp_path / "codes.npy", codes)
    np.save(tmp_path / "wide.npy", random_codes(2, bits=128))
    out = str(tmp_path / "c.odx")
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--bits", "100", "--out", out]) == 2
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--out", out]) == 0
    assert main(["index", "search", out, "--queries", str(tmp_path / "wide.npy")]) == 2
    assert main(["index", "search", out, "--query", "hello"]) == 2  # text needs an encoder
    (tmp_path / "c.odx").write_bytes(b"\0" * 10)
    assert main(["index", "info", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("ondevice index: error:") for line in err)


def test_cli_text_path_with_student_and_binarizer(tmp_path, capsys):
    """Build from a corpus through a student + binarizer and search with a text query."""
    pytest.importorskip("torch")
    from ondevice.binarize import Binarizer
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import PAD, UNK, Tokenizer

    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "big", "small", "red", "house", "tree", "car", "city", "river", "sees", "likes", "old", "new"]
    vocab = [PAD, UNK, *words]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=8, hidden_size=6, pooling="meanmax", output_dim=16,
                        max_tokens=24)
    emb = np.random.default_rng(0).normal(0, 0.7, (len(vocab), 8)).astype(np.float32)
    student = Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=24), emb, seed=0)
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(words, size=rng.integers(2, 9))) for _ in range(60)]
    binarizer = Binarizer.fit(student.encode(corpus), "random", 64, seed=0)  # a width other tests compile
    student.save(tmp_path / "student")
    binarizer.save(tmp_path / "binarizer")
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n")
    enc = ["--student", str(tmp_path / "student"), "--binarizer", str(tmp_path / "binarizer")]
    out = str(tmp_path / "t.odx")
    assert main(["index", "build", "--corpus", str(tmp_path / "corpus.txt"), "--out", out, *enc]) == 0
    assert read_header(out)["bits"] == 64
    capsys.readouterr()
    assert main(["index", "search", out, "--query", corpus[17], "-k", "3", "--json",
                 "--corpus", str(tmp_path / "corpus.txt"), *enc]) == 0
    import json

    hits = json.loads(capsys.readouterr().out)["results"]
    assert hits[0]["distance"] == 0 and corpus[17] in [h["text"] for h in hits if h["distance"] == 0]


def test_mapped_index_takes_the_single_query_fast_path(tmp_path, monkeypatch):
    from ondevice.kernels import hamming

    index = HammingIndex(BITS)
    index.add(random_codes(300, seed=3))
    loaded = HammingIndex.load(index.save(tmp_path / "m.odx"), mmap=True)
    taken = []
    real = hamming._fast_knn

    def spy(*args):
        found = real(*args)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(hamming, "_fast_knn", spy)
    d, i = loaded.search(random_codes(1, seed=4), 5, threads=1)
    assert taken == [True]  # a memmap-backed index is not pushed onto the slower general path
    rd, ri = index.search(random_codes(1, seed=4), 5, threads=1)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(d, rd)


def test_cli_rerank_of_a_classes_head_prints_the_probability_it_ranks_by():
    """A 3-class head's task score is a row of probabilities: the hit shows the one it ranks by, JSON all three."""
    from types import SimpleNamespace

    from ondevice.cli.index import _rerank

    probs = np.array([[0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1]])
    head = SimpleNamespace(kind="classes", score_pairs=lambda a, b: (probs, probs[:, 1]))
    hits = [{"id": i, "distance": i, "text": t} for i, t in enumerate(["x", "y", "z"])]
    got = _rerank(head, "q", hits, 2)
    assert [h["id"] for h in got] == [2, 0]
    assert [h["score"] for h in got] == [0.8, 0.7] and got[0]["probabilities"] == [0.1, 0.8, 0.1]
    assert "decision" not in got[0]


def _cli_error(capsys, argv) -> str:
    """The one stderr line of a command that must fail with exit code 2 (no progress line before it)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_cli_bad_inputs_are_one_line_that_says_what_is_wrong(tmp_path, capsys):
    """Empty .npy files, folders given as files, --radius 0, a negative --rerank, a missing corpus with an encoder."""
    np.save(tmp_path / "codes.npy", random_codes(10, bits=64))
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    index = str(tmp_path / "c.odx")
    assert main(["index", "build", "--codes", str(tmp_path / "codes.npy"), "--out", index]) == 0
    capsys.readouterr()
    assert "--codes" in _cli_error(capsys, ["index", "build", "--codes", str(tmp_path / "empty.npy"), "--out", index])
    assert "is empty (0 bytes)" in _cli_error(capsys, ["index", "search", index, "--queries", str(tmp_path / "empty.npy")])
    assert "--codes" in _cli_error(capsys, ["index", "build", "--codes", str(tmp_path / "folder"), "--out", index])
    for argv in (["index", "search", str(tmp_path / "folder"), "--queries", str(tmp_path / "codes.npy")],
                 ["index", "info", str(tmp_path / "folder")]):
        err = _cli_error(capsys, argv)
        assert "is a folder without manifest.json" in err and "--shards N" in err
    assert "exact duplicates" in _cli_error(capsys, ["index", "search", index, "--queries", str(tmp_path / "codes.npy"),
                                                     "--radius", "0"])
    assert "got -1" in _cli_error(capsys, ["index", "search", index, "--queries", str(tmp_path / "codes.npy"),
                                           "--rerank", "-1"])
    err = _cli_error(capsys, ["index", "build", "--corpus", str(tmp_path / "nope.txt"), "--bundle", "pretrained",
                              "--out", index])
    assert "corpus not found" in err  # the only line: no "encoder: ..." progress line before it
    assert "--max-sentences" in _cli_error(capsys, ["index", "build", "--corpus", str(tmp_path / "nope.txt"), "--bundle",
                                                    "pretrained", "--max-sentences", "0", "--out", index])
    # --radius 1 is the smallest radius that finds anything: the code itself, at distance 0
    assert main(["index", "search", index, "--queries", str(tmp_path / "codes.npy"), "--radius", "1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(any(hit["distance"] == 0 for hit in row["results"]) for row in rows)


def test_cli_build_replaces_only_an_index(tmp_path, capsys):
    """`index build --out` over a file that is not an index, or `--shards` into a bundle: one line, nothing changed."""
    np.save(tmp_path / "codes.npy", np.arange(64, dtype=np.uint8).reshape(32, 2))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"format": "ondevice-bundle"}')
    build = ["index", "build", "--codes", str(tmp_path / "codes.npy")]
    for argv, expected in (([*build, "--out", str(weights)], "is not a Hamming index file"),
                           ([*build, "--shards", "2", "--out", str(bundle)], "holds an exported bundle")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err
    assert weights.read_bytes() == b"weights" and sorted(p.name for p in bundle.iterdir()) == ["manifest.json"]
    assert main([*build, "--out", str(tmp_path / "a.odx")]) == 0
    assert main([*build, "--out", str(tmp_path / "a.odx")]) == 0  # an earlier index is replaced


def test_cli_calibrate_stores_the_crossover_for_later_processes(tmp_path, capsys, monkeypatch):
    """`ondevice index calibrate` measures every size on 1 and all threads, prints them, and stores the result where
    every later search on this machine reads it; --dry-run stores nothing; bad settings are one line, exit 2."""
    from ondevice.kernels import hamming

    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path))
    monkeypatch.setattr(hamming, "_PARALLEL_MIN_BYTES", [])
    argv = ["index", "calibrate", "--bits", "64", "--max-mb", "0.125", "--repeats", "2", "--seed", "3"]
    assert main([*argv, "--dry-run"]) == 0
    assert not hamming.calibration_file().exists()
    assert main(argv) == 0
    out, err = capsys.readouterr()
    saved = json.loads(hamming.calibration_file().read_text())
    assert saved["nbytes"] == 8 and saved["seed"] == 3
    assert [r["bytes"] for r in saved["measurements"]] == [65536, 131072]  # both sizes up to --max-mb, always
    assert f"parallel_min_bytes = {saved['parallel_min_bytes']:,}" in out and "stored in" in out
    assert err.count(" KB: 1 thread ") == 4  # two sizes, the dry run and the stored run
    assert hamming.parallel_min_bytes() == saved["parallel_min_bytes"]
    for bad, message in ((["--bits", "12"], "--bits must be a multiple of 8"), (["--repeats", "1"], "--repeats"),
                         (["--max-mb", "0.01"], "--max-mb must be at least")):
        assert main(["index", "calibrate", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
