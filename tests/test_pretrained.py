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


def test_the_shipped_bundle_scores_question_pairs():
    """The duplicate-question head (QQP) on the shipped encoder: frozen encoder, blend with the cosine, verified files."""
    bundle = ondevice.load()
    block = bundle.manifest["pairs"]
    assert block["task"] == "qqp" and block["encoder"]["frozen"] and block["run"]["config"]["freeze_encoder"] is True
    assert block["encoder"]["check"]["mean_cosine"] >= 0.999 and block["blend"]["similarity"] == "cosine"
    a = ["How do I reset my phone?", "How do I reset my phone?"]
    b = ["How can I factory-reset my phone?", "What is the capital of France?"]
    p = bundle.pair_scores(a, b)
    assert p.shape == (2,) and 0 <= p.min() and p.max() <= 1 and p[0] > p[1]
    assert list(bundle.pair_head().pair_decisions(a, b)) == [True, False]


@pytest.mark.slow
def test_shipped_pair_head_scores_what_its_manifest_records(shared_data):
    """Score regression on QQP dev: the blend through the runtime scores what export fitted on the same graphs, and the
    int8 head what the training run's fp32 head scored at the same threshold (within int8's noise)."""
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.bundle_eval import evaluate_pair_bundle

    got = evaluate_pair_bundle(pretrained_path(), load_pairs("qqp", "dev", shared_data))
    block = ondevice.load().manifest["pairs"]
    assert got["blend"]["accuracy"] == pytest.approx(block["blend"]["dev"]["accuracy"], abs=0.05)
    assert got["head"]["accuracy"] == pytest.approx(block["run"]["student_dev"]["accuracy"], abs=0.5)


def test_index_search_reranks_a_shortlist_with_the_shipped_head(tmp_path, capsys):
    """`ondevice index search --rerank N`: the Hamming top N reordered by the head's blended key, with its decisions."""
    import shutil

    from ondevice.cli import main

    faq = ["How can I factory-reset my phone?", "Which phone has the best camera?", "What is the capital of France?",
           "How do I restart my phone when it freezes?", "How do I reset my phone to factory settings?"]
    corpus = tmp_path / "faq.txt"
    corpus.write_text("\n".join(faq) + "\n", encoding="utf-8")
    index = str(tmp_path / "faq.odx")
    assert main(["index", "build", "--corpus", str(corpus), "--bundle", "pretrained", "--out", index]) == 0
    query = "How do I reset my phone?"
    base = ["index", "search", index, "--bundle", "pretrained", "--corpus", str(corpus), "--query", query]
    capsys.readouterr()
    assert main([*base, "-k", "2", "--rerank", "5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["results"]
    scores, keys = ondevice.load().pair_head().score_pairs([query] * len(faq), faq)
    best = sorted(range(len(faq)), key=lambda j: -keys[j])[:2]
    assert [r["id"] for r in got] == best and [r["key"] for r in got] == [round(float(keys[j]), 6) for j in best]
    assert all(r["decision"] for r in got) and got[0]["score"] == round(float(scores[best[0]]), 6)
    # what it needs is one line each: a corpus, k <= N, a bundle with a pair head
    assert main([*base[:5], "--query", query, "--rerank", "5"]) == 2
    assert main([*base, "-k", "6", "--rerank", "5"]) == 2
    headless = tmp_path / "headless"
    shutil.copytree(pretrained_path(), headless)
    manifest = json.loads((headless / "manifest.json").read_text())
    del manifest["pairs"]
    (headless / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["index", "search", index, "--bundle", str(headless), "--corpus", str(corpus), "--query", query,
                 "-k", "2", "--rerank", "5"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the line naming the encoder: one error line
    assert last.startswith("ondevice index: error:") and "no pair head" in last
    # a corpus shorter than the index: a hit beyond it is an error, not an empty text scored as if it were the hit
    short = tmp_path / "short.txt"
    short.write_text("\n".join(faq[:2]) + "\n", encoding="utf-8")
    assert main(["index", "search", index, "--bundle", "pretrained", "--corpus", str(short), "--query", query,
                 "-k", "2", "--rerank", "5"]) == 2
    assert "beyond the 2 lines of --corpus" in capsys.readouterr().err
    assert main([*base, "-k", "2", "--rerank", str(10**18)]) == 0  # the shortlist is the whole index, and said so
    assert f"reranked {len(faq)} candidates per query" in capsys.readouterr().err


@pytest.mark.slow
def test_the_wheel_carries_every_file_of_the_shipped_bundle(tmp_path):
    """Package data: a wheel built from the tracked files holds the whole shipped bundle, its pair head included."""
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    src = tmp_path / "src"
    for name in filter(None, (t.decode() for t in tracked)):
        if (root / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, src / name)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "wheel")], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = (tmp_path / "wheel").glob("ondevice-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    manifest = json.loads((pretrained_path() / "manifest.json").read_text())
    shipped = {f"ondevice/pretrained/default/{n}" for n in [*manifest["files"], "manifest.json"]}
    assert shipped <= names, sorted(shipped - names)
    assert "ondevice/pretrained/default/pair_head.onnx" in names
