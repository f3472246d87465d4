"""ondevice.catalog: the catalog folder both demo apps read (sentences, codes from the bundle, checksums)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ondevice.catalog import copy_bundle_files, read_sentences, write_catalog
from ondevice.errors import OndeviceError
from ondevice.io import sha256_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "android_demo" / "tools"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    import make_parity_bundle

    from ondevice.runtime import Bundle

    return Bundle.load(make_parity_bundle.build(tmp_path_factory.mktemp("catalog"), pooling="mean"))


def test_read_sentences_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\n  \ntwo\r\nthree", encoding="utf-8")
    assert read_sentences(tmp_path / "a.txt") == ["one", "two", "three"]
    (tmp_path / "b.jsonl").write_text('"x\\ny"\n\n"\\u2028z"\n', encoding="utf-8")
    assert read_sentences(tmp_path / "b.jsonl") == ["x\ny", "\u2028z"]


@pytest.mark.parametrize("name,content,message", [
    ("missing.txt", None, "not found"),
    ("bad.txt", b"\xff\xfe\x00", "not UTF-8"),
    ("bad.jsonl", b'"ok"\n{not json\n', "line 2 is not JSON"),
    ("num.jsonl", b'"ok"\n3\n', "must be a JSON string"),
])
def test_read_sentences_bad_input(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(OndeviceError, match=message):
        read_sentences(tmp_path / name)


def test_write_catalog_rows_codes_and_checksums(bundle, tmp_path):
    sentences = ["a cat sat", "ΟΔΟΣ\u2028line", "", "a cat sat"]
    info = write_catalog(bundle, sentences, tmp_path / "cat")
    codes = np.load(tmp_path / "cat" / "codes.npy", allow_pickle=False)
    np.testing.assert_array_equal(codes, bundle.codes(sentences))
    lines = (tmp_path / "cat" / "sentences.jsonl").read_text(encoding="ascii").split("\n")
    assert [json.loads(x) for x in lines if x] == sentences  # ASCII-escaped: no line reader splits a sentence
    assert info == json.loads((tmp_path / "cat" / "catalog.json").read_text())
    assert info["count"] == 4 and info["code_bytes"] == bundle.code_bytes and info["bits"] == bundle.bits
    assert info["encoder_sha256"] == sha256_file(bundle.path / "encoder.onnx")
    for name in ("codes.npy", "sentences.jsonl"):
        assert info["files"][name] == {"sha256": sha256_file(tmp_path / "cat" / name),
                                       "bytes": (tmp_path / "cat" / name).stat().st_size}
    with pytest.raises(OndeviceError, match="at least one"):
        write_catalog(bundle, [], tmp_path / "empty")


def test_copy_bundle_files(bundle, tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "README.md").write_text("an earlier copy")
    copied = copy_bundle_files(bundle, out, ["manifest.json", "encoder.onnx"], optional=["README.md", "nope.bin"])
    assert copied == ["manifest.json", "encoder.onnx", "README.md"]
    assert sorted(p.name for p in out.iterdir()) == sorted(copied)  # an earlier copy is replaced, not merged
    (out / "notes.txt").write_text("the user's")  # anything else in the folder is not ours to delete
    with pytest.raises(OndeviceError, match="notes.txt, which are not bundle files"):
        copy_bundle_files(bundle, out, ["manifest.json"])
    assert (out / "notes.txt").read_text() == "the user's"
    with pytest.raises(OndeviceError, match="has no nope.bin"):
        copy_bundle_files(bundle, tmp_path / "c", ["nope.bin"])


def test_write_catalog_with_dipair_states(dipair_bundle, bundle, tmp_path):
    """A DiPair bundle's catalog caches each sentence's int8 side-b states (the same pass as its code), checksummed."""
    from ondevice.runtime import Bundle

    dp = Bundle.load(dipair_bundle[1] / "int8").dipair()
    sentences = ["a cat sat", "", "the dog ran far away from the cat today", "a cat sat"]
    info = write_catalog(dp.bundle, sentences, tmp_path / "cat", dipair_states=True)
    states = np.load(tmp_path / "cat" / "dipair_states.npy", allow_pickle=False)
    assert states.dtype == np.int8 and info["dipair_states"]["shape"] == [4, dp.m, dp.d] == list(states.shape)
    np.testing.assert_array_equal(states, dp.states(sentences, "b", int8=True))
    np.testing.assert_array_equal(np.load(tmp_path / "cat" / "codes.npy"), dp.bundle.codes(sentences))
    assert info["files"]["dipair_states.npy"] == {"sha256": sha256_file(tmp_path / "cat" / "dipair_states.npy"),
                                                   "bytes": (tmp_path / "cat" / "dipair_states.npy").stat().st_size}
    assert info == json.loads((tmp_path / "cat" / "catalog.json").read_text())
    info = write_catalog(dp.bundle, sentences[:2], tmp_path / "cat")  # rewritten without: no stale states left
    assert "dipair_states" not in info and not (tmp_path / "cat" / "dipair_states.npy").exists()
    with pytest.raises(OndeviceError, match="no DiPair head"):
        write_catalog(bundle, sentences, tmp_path / "plain", dipair_states=True)
