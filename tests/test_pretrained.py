"""The pretrained bundle shipped in the package: loadable with no path, verified, and scoring what its card says."""

import json

import numpy as np
import pytest

import ondevice
from ondevice.errors import OndeviceError
from ondevice.pretrained import ROOT, names, parse_spec, pretrained_path


def test_the_default_ships_and_loads_with_no_path():
    assert "default" in names()
    bundle = ondevice.load()
    vec, codes = bundle.embed(["A man is playing a guitar.", "Someone plays music.", "The stock market fell."])
    assert vec.shape == (3, bundle.dim) and codes.shape == (3, bundle.code_bytes) and bundle.bits == 2048
    assert bundle.precision == "int8"
    sims = vec @ vec.T / np.outer(np.linalg.norm(vec, axis=1), np.linalg.norm(vec, axis=1))
    assert sims[0, 1] > sims[0, 2]  # music is closer to guitar than the stock market is


def test_every_shipped_file_is_in_the_manifest():
    manifest = json.loads((pretrained_path() / "manifest.json").read_text())
    on_disk = {str(f.relative_to(pretrained_path())) for f in pretrained_path().rglob("*") if f.is_file()}
    assert on_disk - {"manifest.json"} == set(manifest["files"])  # nothing unchecked rides along


def test_golden_ids_match_the_shipped_tokenizer():
    bundle = ondevice.load()
    golden = pretrained_path() / "golden"
    texts = [json.loads(line) for line in (golden / "sentences.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
    rows = [[int(x) for x in line.split()] for line in (golden / "token_ids.txt").read_text().split("\n")[:-1]]
    assert len(texts) == len(rows) > 0
    assert [bundle.tokenizer.ids(t) for t in texts] == rows
    # the int8 graph's codes agree with the fp32 golden codes on nearly every bit
    codes = bundle.codes(texts)
    gold = np.load(golden / "codes.npy", allow_pickle=False)
    agree = 1 - np.unpackbits(codes ^ gold).mean()
    assert agree > 0.98


def test_cli_spec_names_the_shipped_bundle():
    assert parse_spec("pretrained") == ROOT / "default"
    assert parse_spec("pretrained:default") == ROOT / "default"
    assert parse_spec("some/dir") is None
    with pytest.raises(OndeviceError, match="no pretrained model"):
        parse_spec("pretrained:nope")


@pytest.mark.slow
def test_shipped_scores_match_its_model_card():
    """Score regression: STS-B test Spearman of the shipped int8 bundle equals what its manifest records."""
    from ondevice.eval import sts_spearman

    manifest = json.loads((pretrained_path() / "manifest.json").read_text())
    recorded = manifest["eval"]["measured"]["scores_x100"]["student int8 bundle"]["stsb_test"]
    assert sts_spearman(ondevice.load(), None, "stsb", "test") == pytest.approx(recorded, abs=0.1)
