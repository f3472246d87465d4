"""The web demo's JavaScript matches Python, in Node and in a real browser (Chromium via Playwright).

A tiny seeded student + binarizer is exported (fp32 and int8, golden files). Node runs web_demo/ondevice.js with
onnxruntime-node and with onnxruntime-web's WebAssembly build; Playwright drives Debian's chromium on the page
served from 127.0.0.1. These tests fail (never skip) when node, the npm packages or chromium are missing:
`make test` installs them (see the Makefile).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web_demo"
sys.path.insert(0, str(ROOT / "android_demo" / "tools"))


def _tool(name: str):
    """A web_demo/tools module, imported by path under its own name (android_demo/tools has a make_catalog too)."""
    spec = importlib.util.spec_from_file_location(f"web_demo_{name}", WEB / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

SEED = 6
QUERIES = ["the cat sat on the mat", "A big red car on the road!", "Café İstanbul 東京 😀", ""]


def _node() -> str:
    node = shutil.which("node")
    assert node, "node is not on PATH: run `make test`, which installs nodejs and the web demo's npm packages"
    for pkg in ("onnxruntime-node", "onnxruntime-web"):
        assert (WEB / "node_modules" / pkg / "package.json").is_file(), (
            f"{pkg} is not installed in web_demo/node_modules: run `make test` (or "
            "`cd web_demo && ONNXRUNTIME_NODE_INSTALL=skip npm ci`)")
    return node


def _chromium() -> str:
    path = os.environ.get("ONDEVICE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not on PATH: run `make test`, which installs Debian's chromium (or set ONDEVICE_CHROMIUM)"
    return path


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([_node(), *args], cwd=WEB, capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def _values(out: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=(\S+)", out, flags=re.MULTILINE))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> Path:
    """fp32/ and int8/ bundles of a tiny random mean-pooling student, with golden files (hard Unicode included)."""
    import make_parity_bundle as mpb

    from ondevice.cli import main

    work = tmp_path_factory.mktemp("web")
    texts = mpb.sentences(1200)
    student = mpb.build_student(work, texts, pooling="mean")
    mpb.build_binarizer(work, student, texts)
    extra = work / "golden_sentences.txt"
    extra.write_text("".join(t + "\n" for t in texts[:400] if t.strip() and not any(c in mpb.LINE_BREAKS for c in t)),
                     encoding="utf-8")
    rc = main(["export", "--student", str(work / "student"), "--binarizer", str(work / "binarizer"),
               "--out", str(work / "bundle"), "--precision", "both", "--golden", "--golden-sentences", str(extra),
               "--seed", str(SEED)])
    assert rc == 0
    return work / "bundle"


def _python_codes(bundle: Path, out: Path) -> Path:
    """Codes of the golden token ids by the Python runtime (one sentence per run, as the JS side runs them)."""
    from ondevice.runtime import Bundle

    b = Bundle.load(bundle, threads=1)
    rows = [list(map(int, line.split())) for line in (bundle / "golden" / "token_ids.txt").read_text().splitlines()]
    codes = np.concatenate([b.run_ids(np.asarray([r], np.int64), np.asarray([len(r)], np.int64))[1] for r in rows])
    np.save(out, codes)
    return out


@pytest.mark.parametrize("backend", ["node", "web"])
def test_node_parity_fp32(bundles, backend, tmp_path):
    """fp32 on the golden files: token ids, codes and Hamming top-10 identical (onnxruntime-node and -web)."""
    res = _run("test/parity.mjs", str(bundles / "fp32"), "--backend", backend,
               "--python-codes", str(_python_codes(bundles / "fp32", tmp_path / "py.npy")))
    print(res.stdout)
    v = _values(res.stdout)
    n = int(v["sentences"])
    assert n >= 1000 and v["verified_files"] == "3"
    assert v["tokens_identical"] == f"{n}/{n}", res.stdout
    assert v["codes_identical_to_golden"] == f"{n}/{n}"
    assert v["codes_identical_to_python"] == f"{n}/{n}"
    assert float(v["max_abs_embedding_diff"]) < 1e-5
    q = int(v["topk_identical"].split("/")[1])
    assert q > 0 and v["topk_identical"] == f"{q}/{q}"


@pytest.mark.parametrize("backend", ["node", "web"])
def test_node_parity_int8(bundles, backend, tmp_path):
    """int8 (DynamicQuantizeLSTM): same codes as Python's onnxruntime; bit agreement with the fp32 golden reported."""
    res = _run("test/parity.mjs", str(bundles / "int8"), "--backend", backend,
               "--python-codes", str(_python_codes(bundles / "int8", tmp_path / "py.npy")))
    print(res.stdout)
    v = _values(res.stdout)
    n = int(v["sentences"])
    assert v["precision"] == "int8" and v["tokens_identical"] == f"{n}/{n}"
    assert v["codes_identical_to_python"] == f"{n}/{n}", res.stdout
    assert float(v["bit_agreement_vs_golden"]) >= 0.98  # int8 vs the fp32 model: reported, loosely bounded
    q = int(v["topk_identical"].split("/")[1])
    assert v["topk_identical"] == f"{q}/{q}"  # the search itself, on the golden codes


def test_tokenizer_agrees_on_every_code_point(tmp_path):
    """Python vs JS tokens for each code point of planes 0-3 and 14 alone, and for the hard golden sentences.

    Only code points that one side's Unicode data does not assign may differ (Python 3.11: Unicode 14; V8: newer).
    """
    import make_parity_bundle as mpb
    from ondevice.export.golden import SPECIAL

    from ondevice.tokenizer import tokenize

    cps = [cp for cp in [*range(0x40000), *range(0xE0000, 0xF0000)] if not 0xD800 <= cp < 0xE000]
    texts = [chr(cp) for cp in cps] + list(SPECIAL) + mpb.sentences(300) + [
        "ΟΔΟΣ Σ ς", "İI ı", "x" * 300, "a" * 5 + "\u0301" * 3, "\ud800 lone surrogate"]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    _run("test/tokens.mjs", str(src), str(tmp_path / "out.jsonl"))
    got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(got) == len(texts)
    differ = [(t, js, tokenize(t)) for t, (js, js_unassigned) in zip(texts, got) if js != tokenize(t)]
    excused = [d for d in differ if len(d[0]) == 1 and unicodedata.category(d[0]) == "Cn"]
    js_unassigned = [t for t, (js, un) in zip(texts, got) if un and js != tokenize(t)]
    real = [d for d in differ if d not in excused and d[0] not in js_unassigned]
    assert not real, real[:5]
    assert len(excused) <= 25_000  # characters Unicode 15-17 added (most in CJK extensions) that Python 3.11 lacks


@pytest.mark.parametrize("bits", [8, 24, 72, 256, 2048])
def test_js_search_equals_python_reference(bits, tmp_path):
    """Hamming top-k of random codes (many ties at few bits) by ondevice.js vs the numpy reference."""
    from ondevice.export.golden import hamming_topk

    rng = np.random.default_rng(bits)
    nbytes = bits // 8
    catalog = rng.integers(0, 256, (700, nbytes), dtype=np.uint8)
    catalog[600:] = catalog[:100]  # exact duplicates: ties broken by the smaller row
    queries = np.concatenate([rng.integers(0, 256, (20, nbytes), dtype=np.uint8), catalog[:5]])
    np.save(tmp_path / "c.npy", catalog)
    np.save(tmp_path / "q.npy", queries)
    _run("test/search.mjs", str(tmp_path / "c.npy"), str(tmp_path / "q.npy"), "10", str(tmp_path / "r.json"))
    got = json.loads((tmp_path / "r.json").read_text())
    dist, rows = hamming_topk(queries, catalog, 10)
    np.testing.assert_array_equal(np.asarray(got["ids"]), rows)
    np.testing.assert_array_equal(np.asarray(got["distances"]), dist)


def test_js_unit_checks(bundles):
    """Bundle verification failures (tampered, truncated, wrong version, unsafe name), .npy, popcount, ties."""
    res = _run("test/unit.mjs", str(bundles / "fp32"))
    print(res.stdout)
    assert "failed=0" in res.stdout and res.stdout.count("\nok ") >= 10


# --------------------------------------------------------------------------------------------- real browser


def _python_top10(bundle: Path, catalog: Path, text: str) -> list[tuple[int, int]]:
    from ondevice.export.golden import hamming_topk

    from ondevice.runtime import Bundle

    codes = np.load(catalog / "codes.npy")
    dist, rows = hamming_topk(Bundle.load(bundle).codes([text]), codes, 10)
    return list(zip(rows[0].tolist(), dist[0].tolist()))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    _node()
    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to run as root, which is how `make test` runs on a fresh machine
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"], timeout=60_000)
        yield b
        b.close()


def _open(browser, url: str):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("document.body.dataset.state !== 'loading'", timeout=60_000)
    return page, errors


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_browser_top10_equals_python(browser, bundles, precision, tmp_path):
    """The page in Chromium: type a query, press Enter; the shown top-10 (rows, distances) equals Python's."""
    from ondevice.catalog import read_sentences

    web_catalog, serve = _tool("make_catalog"), _tool("serve").serve

    site = tmp_path / "site"
    sentences = read_sentences(bundles / precision / "golden" / "sentences.jsonl")[:600]
    info = web_catalog.build(bundles, sentences, site, precision=precision)
    assert info["count"] == 600 and info["precision"] == precision
    with serve(site, seconds=120) as url:
        page, errors = _open(browser, url)
        assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")
        assert f"{precision} bundle verified" in page.inner_text("#status")
        assert page.is_hidden("#pairs")  # no pair head in this bundle: no pair form
        for text in QUERIES:
            page.fill("#query", text)
            page.press("#query", "Enter")
            page.wait_for_function("(q) => document.getElementById('results').dataset.query === q", arg=text)
            shown = [(int(li.get_attribute("data-row")), int(li.get_attribute("data-distance")))
                     for li in page.query_selector_all("#results li")]
            assert shown == _python_top10(bundles / precision, site / "assets" / "catalog", text), text
            texts = [li.text_content() for li in page.query_selector_all("#results li .text")]
            assert texts == [sentences[r] for r, _ in shown]
            assert re.fullmatch(r"encode \d+\.\d\d ms · search \d+\.\d\d ms over 600 codes", page.inner_text("#timing"))
        assert not errors
        page.close()


def test_browser_refuses_a_tampered_bundle(browser, bundles, tmp_path):
    """Web Crypto verification in the page: one changed byte in encoder.onnx stops it with a one-line error."""
    web_catalog, serve = _tool("make_catalog"), _tool("serve").serve
    site = tmp_path / "site"
    web_catalog.build(bundles, ["a cat", "a dog"], site, precision="fp32")
    onnx = site / "assets" / "bundle" / "encoder.onnx"
    data = bytearray(onnx.read_bytes())
    data[len(data) // 2] ^= 1
    onnx.write_bytes(bytes(data))
    with serve(site, seconds=60) as url:
        page, _ = _open(browser, url)
        assert page.get_attribute("body", "data-state") == "error"
        assert "encoder.onnx fails its sha256 check" in page.inner_text("#status")
        assert page.is_disabled("#query")
        page.close()


# --------------------------------------------------------------------------------------------- pair head

PAIR = ("How do I reset my phone?", "How can I factory-reset my phone?")


def _python_pair(a: str, b: str) -> tuple[float, float, bool]:
    """Probability, blended key and decision of the shipped head by the Python runtime's embeddings and the head's
    fp32 weights (what the JavaScript and Java cores read; the Python runtime itself runs the int8 head graph)."""
    from safetensors.numpy import load_file

    import ondevice
    from ondevice.pairs.blend import Blend
    from ondevice.pairs.model import head_forward_numpy
    from ondevice.pretrained import pretrained_path

    bundle = ondevice.load(threads=1)
    u, v = bundle.encode([a, b])
    logit = head_forward_numpy(load_file(str(pretrained_path() / "pair_head.safetensors")), u[None], v[None])[0, 0]
    blend = Blend.from_dict(bundle.manifest["pairs"]["blend"], "test")
    cos = float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
    key = float(blend.keys(np.asarray([logit], np.float64), np.asarray([cos]))[0])
    return float(1 / (1 + np.exp(-logit))), key, key > blend.threshold


def test_js_pair_head_on_the_shipped_bundle(tmp_path):
    """ondevice.js's pair head: golden logits and blend keys of the shipped bundle, and a pair scored end to end."""
    from ondevice.pretrained import pretrained_path

    res = _run("test/pairs.mjs", str(pretrained_path()), "--a", PAIR[0], "--b", PAIR[1])
    values = _values(res.stdout)
    assert values["task"] == "qqp" and values["pairs"] == "500" and values["decisions_identical"] == "500/500"
    assert float(values["max_abs_diff"]) <= 1e-5 and float(values["blend_max_abs_diff"]) <= 1e-5
    row = json.loads(res.stdout.strip().splitlines()[-1])
    score, key, decision = _python_pair(*PAIR)
    assert row["score"] == pytest.approx(score, abs=1e-4) and row["key"] == pytest.approx(key, abs=1e-3)
    assert row["decision"] is decision is True
    # a tampered head, and a bundle without one: one line, exit code 2
    bad = tmp_path / "bad"
    shutil.copytree(pretrained_path(), bad)
    data = bytearray((bad / "pair_head.safetensors").read_bytes())
    data[-3] ^= 1
    (bad / "pair_head.safetensors").write_bytes(bytes(data))
    out = subprocess.run([_node(), "test/pairs.mjs", str(bad)], cwd=WEB, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and "pair_head.safetensors fails its sha256 check" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1
    manifest = json.loads((bad / "manifest.json").read_text())
    del manifest["pairs"]
    (bad / "manifest.json").write_text(json.dumps(manifest))
    out = subprocess.run([_node(), "test/pairs.mjs", str(bad)], cwd=WEB, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and "this bundle has no pair head" in out.stderr, out.stderr


def test_browser_compares_two_questions_with_the_shipped_head(browser, tmp_path):
    """The page on the shipped bundle shows its pair form; the decision and probability equal Python's."""
    from ondevice.pretrained import pretrained_path

    web_catalog, serve = _tool("make_catalog"), _tool("serve").serve
    site = tmp_path / "site"
    web_catalog.build(pretrained_path(), ["A man plays a guitar.", "The stock market fell."], site)
    with serve(site, seconds=120) as url:
        page, errors = _open(browser, url)
        assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")
        assert page.is_visible("#pairs") and page.inner_text("#pairs-task") == "Are these two questions duplicates?"
        score, _, decision = _python_pair(*PAIR)
        page.fill("#pair-a", PAIR[0])
        page.fill("#pair-b", PAIR[1])
        page.click("#pair-go")
        page.wait_for_function("() => document.getElementById('pair-result').dataset.score !== undefined")
        assert float(page.get_attribute("#pair-result", "data-score")) == pytest.approx(score, abs=1e-4)
        assert page.get_attribute("#pair-result", "data-decision") == str(decision).lower() == "true"
        assert page.inner_text("#pair-result").startswith("duplicate: probability ")
        assert not errors
        page.close()


# --------------------------------------------------------------------------------------------- DiPair head


def _dipair_pairs(bundle: Path) -> list[list[str]]:
    from ondevice.catalog import read_sentences

    texts = read_sentences(bundle / "golden" / "sentences.jsonl")
    return [[texts[i], texts[(7 * i + 3) % len(texts)]] for i in range(24)] + [["", texts[0]], [QUERIES[2], QUERIES[1]]]


def _python_dipair(run: Path, bundle: Path, pairs: list[list[str]]) -> dict[str, np.ndarray]:
    """Scores, keys and distances of text pairs by the Python runtime's states and codes and the head's fp32 weights
    (what ondevice.js reads; the Python runtime itself runs the head graph, int8 in an int8 bundle)."""
    from ondevice.pairs.blend import hamming_distances
    from ondevice.pairs.dipair import head_forward_numpy, load_head_weights
    from ondevice.runtime import Bundle

    dp = Bundle.load(bundle, threads=1).dipair()
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    (sa, ca), (sb, cb) = dp.states_and_codes(a, "a"), dp.states_and_codes(b, "b")
    cfg, w = load_head_weights(run)
    logits = head_forward_numpy(cfg, w, sa, sb)
    dist = hamming_distances(ca, cb)
    return {"score": dp.transform(logits), "key": dp.blend_keys(logits, dist), "distance": dist}


def _python_states(bundle: Path, rows: int, out: Path) -> str:
    """The Python runtime's token states of the first golden token-id rows, one row per run as the JS side runs them."""
    from ondevice.runtime import Bundle

    b = Bundle.load(bundle, threads=1)
    lines = (bundle / "golden" / "token_ids.txt").read_text().splitlines()[:rows]
    got = [b.session.run(["token_states_a", "token_states_b"], {
        "ids": np.asarray([[int(x) for x in line.split()]], np.int64).reshape(1, -1),
        "lengths": np.asarray([len(line.split())], np.int64)}) for line in lines]
    np.save(out / "a.npy", np.concatenate([g[0] for g in got]))
    np.save(out / "b.npy", np.concatenate([g[1] for g in got]))
    return f"{out / 'a.npy'},{out / 'b.npy'}"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_js_dipair_head_parity(dipair_bundle, precision, tmp_path):
    """ondevice.js's DiPair head: golden logits and blend keys, the encoder's token states against the golden
    (fp32) and the Python runtime's, and text pairs scored end to end against Python."""
    run, root = dipair_bundle
    bundle = root / precision
    manifest = json.loads((bundle / "manifest.json").read_text())
    rows = manifest["dipair"]["golden"]["sentences"]
    pairs = _dipair_pairs(bundle)
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    res = _run("test/dipair.mjs", str(bundle), "--python-states", _python_states(bundle, rows, tmp_path),
               "--pairs", str(tmp_path / "pairs.json"))
    print(res.stdout)
    v = _values(res.stdout)
    assert v["task"] == "stsb" and int(v["pairs"]) == manifest["dipair"]["golden"]["pairs"] == 300
    assert float(v["max_abs_diff"]) <= 1e-5 and float(v["blend_max_abs_diff"]) <= 1e-5
    assert int(v["sentences"]) == rows
    assert float(v["states_max_abs_diff_vs_python"]) <= 1e-5
    if precision == "fp32":  # the golden states are the fp32 graph's; the fp32 head graph ranks as the loop does
        assert float(v["states_max_abs_diff_vs_golden"]) <= 1e-5
        assert float(v["rerank_key_max_abs_diff"]) <= 1e-3 and v["rerank_top10_graph"] == v["rerank_top10_loop"]
    else:  # the int8 head graph: close to the fp32 weights' loop, not equal
        assert float(v["rerank_key_max_abs_diff"]) < 0.5 * float(np.std(_python_dipair(run, bundle, pairs)["key"])) + 0.05
    assert v["verified"] == "dipair_head.safetensors,dipair_head.onnx"
    got = [json.loads(line) for line in res.stdout.strip().splitlines()[-len(pairs):]]
    want = _python_dipair(run, bundle, pairs)
    assert [g["distance"] for g in got] == want["distance"].tolist()
    np.testing.assert_allclose([g["score"] for g in got], want["score"], atol=1e-4)
    np.testing.assert_allclose([g["key"] for g in got], want["key"], atol=1e-3)


def test_js_dipair_decisions_and_bad_bundles(dipair_bundle, tmp_path):
    """Binary decisions equal Python's (the test head relabelled binary, with a blend threshold between two keys);
    a tampered head, a blend over other codes and a bundle without a DiPair head: one line, exit code 2."""
    from ondevice.runtime import Bundle

    run, root = dipair_bundle
    binary = tmp_path / "binary"
    shutil.copytree(root / "fp32", binary)
    manifest = json.loads((binary / "manifest.json").read_text())
    pairs = _dipair_pairs(binary)
    keys = np.sort(_python_dipair(run, binary, pairs)["key"])
    manifest["dipair"].update(task_type="binary", threshold=0.0)
    manifest["dipair"]["blend"]["threshold"] = float(keys[len(keys) // 2 - 1] + keys[len(keys) // 2]) / 2
    (binary / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    res = _run("test/dipair.mjs", str(binary), "--pairs", str(tmp_path / "pairs.json"))
    got = [json.loads(line)["decision"] for line in res.stdout.strip().splitlines()[-len(pairs):]]
    want = Bundle.load(binary).dipair().pair_decisions([p[0] for p in pairs], [p[1] for p in pairs])
    assert got == want.tolist() and 0 < sum(got) < len(got)

    def fails(folder: Path) -> str:
        out = subprocess.run([_node(), "test/dipair.mjs", str(folder)], cwd=WEB, capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stdout + out.stderr
        return out.stderr

    bad = tmp_path / "bad"
    shutil.copytree(root / "int8", bad)
    data = bytearray((bad / "dipair_head.safetensors").read_bytes())
    data[-3] ^= 1
    (bad / "dipair_head.safetensors").write_bytes(bytes(data))
    assert "dipair_head.safetensors fails its sha256 check" in fails(bad)
    shutil.copyfile(root / "int8" / "dipair_head.safetensors", bad / "dipair_head.safetensors")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["dipair"]["blend"]["bits"] = 128
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert "manifest.json dipair.blend is not a minus_hamming blend over this bundle's 64-bit codes" in fails(bad)
    del manifest["dipair"]
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert "this bundle has no DiPair head" in fails(bad)


def test_browser_scores_a_pair_with_a_dipair_head(browser, dipair_bundle, tmp_path):
    """The page on a DiPair bundle shows the pair form; the score equals Python's."""
    web_catalog, serve = _tool("make_catalog"), _tool("serve").serve
    run, root = dipair_bundle
    site = tmp_path / "site"
    web_catalog.build(root, ["a cat", "a dog"], site, precision="int8")
    assert (site / "assets" / "bundle" / "dipair_head.safetensors").is_file()
    pair = _dipair_pairs(root / "int8")[0]
    with serve(site, seconds=120) as url:
        page, errors = _open(browser, url)
        assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")
        assert "DiPair head: stsb (regression), 4 + 5 token states of 8, 2 layer(s)" in page.text_content("#info")
        assert page.is_visible("#pairs") and page.inner_text("#pairs-task") == "Score a pair (stsb)"
        page.fill("#pair-a", pair[0])
        page.fill("#pair-b", pair[1])
        page.click("#pair-go")
        page.wait_for_function("() => document.getElementById('pair-result').dataset.score !== undefined")
        want = _python_dipair(run, root / "int8", [pair])
        assert float(page.get_attribute("#pair-result", "data-score")) == pytest.approx(want["score"][0], abs=1e-4)
        assert float(page.get_attribute("#pair-result", "data-key")) == pytest.approx(want["key"][0], abs=1e-3)
        assert not errors
        page.close()


def _python_rerank(bundle: Path, catalog: Path, query: str) -> tuple[list[int], np.ndarray]:
    """The page's search on a DiPair bundle by Python: Hamming top 100 of the catalog codes, reranked by the bundle's
    head graph (as the page runs it) on the query's side-a states and the catalog's cached int8 states."""
    from ondevice.export.golden import hamming_topk

    from ondevice.runtime import Bundle

    dp = Bundle.load(bundle).dipair()
    qs, qc = dp.states_and_codes([query], "a")
    dist, rows = hamming_topk(qc, np.load(catalog / "codes.npy"), 100)
    keys = dp.blend_keys(dp.logits(qs, np.load(catalog / "dipair_states.npy")[rows[0]]), dist[0])
    order = np.lexsort((rows[0], -keys))[:10]
    return rows[0][order].tolist(), keys[order]


def test_browser_reranks_search_with_a_dipair_head(browser, dipair_bundle, tmp_path):
    """A DiPair bundle's site caches the catalog's token states; the page reranks its Hamming top 100 by the head +
    Hamming blend, and the shown top-10 equals Python's; a tampered states file stops loadCatalog."""
    from ondevice.catalog import read_sentences

    web_catalog, serve = _tool("make_catalog"), _tool("serve").serve
    _, root = dipair_bundle
    site = tmp_path / "site"
    sentences = read_sentences(root / "int8" / "golden" / "sentences.jsonl")[:300]
    info = web_catalog.build(root, sentences, site, precision="int8")
    assert info["dipair_states"]["shape"] == [300, 5, 8]
    catalog = site / "assets" / "catalog"
    with serve(site, seconds=120) as url:
        page, errors = _open(browser, url)
        assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")
        assert "the Hamming top 100 reranked by the DiPair head" in page.text_content("#info")
        for text in [*QUERIES[:3], sentences[5]]:
            page.fill("#query", text)
            page.press("#query", "Enter")
            page.wait_for_function("(q) => document.getElementById('results').dataset.query === q", arg=text)
            items = page.query_selector_all("#results li")
            rows = [int(li.get_attribute("data-row")) for li in items]
            keys = np.asarray([float(li.get_attribute("data-key")) for li in items])
            want_rows, want_keys = _python_rerank(root / "int8", catalog, text)
            np.testing.assert_allclose(keys, want_keys, atol=1e-3)
            # rows equal, but for neighbours whose keys tie within float rounding
            assert all(r == w or abs(k - want_keys[i]) < 1e-3 for i, (r, w, k) in enumerate(zip(rows, want_rows, keys))), text
            assert sorted(rows) == sorted(want_rows) or len(set(rows) ^ set(want_rows)) <= 2
            assert "DiPair rerank of 100 in" in page.inner_text("#timing")
        assert not errors
        page.close()
    res = _run("test/catalog.mjs", str(site / "assets" / "bundle"), str(catalog))
    assert _values(res.stdout) == {"count": "300", "verified": "codes.npy,sentences.jsonl,dipair_states.npy",
                                   "dipair_states": str(300 * 5 * 8)}

    def fails() -> str:
        out = subprocess.run([_node(), "test/catalog.mjs", str(site / "assets" / "bundle"), str(catalog)], cwd=WEB,
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stdout + out.stderr
        return out.stderr

    data = bytearray((catalog / "dipair_states.npy").read_bytes())
    data[-1] ^= 1
    (catalog / "dipair_states.npy").write_bytes(bytes(data))
    assert "catalog dipair_states.npy fails its sha256 check" in fails()
    info = json.loads((catalog / "catalog.json").read_text())
    del info["files"]["dipair_states.npy"]
    (catalog / "catalog.json").write_text(json.dumps(info))
    assert "catalog.json does not list dipair_states.npy" in fails()


def test_web_demo_benchmark_times_a_dipair_sites_rerank(dipair_bundle, tmp_path):
    """benchmarks/web_demo.py on a DiPair site also times the page's reranked search step by step against Python's,
    compares the two top-10s, and writes it all to its results file (tiny settings)."""
    from ondevice.catalog import read_sentences

    _, root = dipair_bundle
    site = tmp_path / "site"
    sentences = read_sentences(root / "int8" / "golden" / "sentences.jsonl")[:120]
    _tool("make_catalog").build(root, sentences, site, precision="int8")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "web_demo.py"), "--site", str(site), "--bundle",
                          str(root), "--precision", "int8", "--runs", "3", "--rounds", "1", "--search-queries", "3",
                          "--rerank-queries", "4", "--out-dir", str(tmp_path / "out"), "--chromium", _chromium()],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (found,) = (tmp_path / "out").glob("web_demo-*.json")
    result = json.loads(found.read_text())
    s = result["summary"]
    steps = [f"{side}_dipair_{step}_p50_ms" for side in ("browser", "python") for step in ("encode", "search", "rerank")]
    assert all(s[k] > 0 for k in steps) and s["dipair_rerank_queries"] == 4 and s["dipair_shortlist"] == 100
    assert 0 <= s["dipair_top10_equal_queries"] <= 4 and s["dipair_key_max_abs_diff"] < 1e-3
    assert result["dipair"]["shape"] == [120, 5, 8] and len(result["dipair"]["rerank_queries"]) == 4
