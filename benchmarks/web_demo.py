"""Web demo timings: encode p50 in Chromium (onnxruntime-web, wasm, 1 thread) vs the Python runtime, and search.

    .venv/bin/python web_demo/tools/make_catalog.py --bundle BUNDLE --sentences 100k.txt --out SITE
    .venv/bin/python benchmarks/web_demo.py --site SITE --bundle BUNDLE     # -> benchmarks/results/web_demo-<time>.json

Same machine, same process tree, side by side: each round times the browser page and then the Python runtime
(`Bundle.embed` on one sentence, onnxruntime with 1 intra-op thread) on the same 20-token sentence, and Hamming
top-10 over the site's catalog in the page (ondevice.js, 32-bit words) and in Python (Numba kernel, 1 thread).
Figures are medians over rounds of per-round p50s. Page timings use performance.now(), which is precise to 5 us
here because the server sends cross-origin isolation headers. Chromium is Debian's, driven by Playwright.

A site built from a DiPair bundle (catalog token states cached) is also timed as the page searches it: encode, the
Hamming top 100, and the DiPair rerank of those 100 (the head graph in one onnxruntime-web call), against the same
three steps in Python (`DiPairScorer` on the bundle, 1 thread), for --rerank-queries catalog sentences as queries;
each round also counts the queries whose reranked top 10 equals Python's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np

from ondevice.results import create_new, stamped

ROOT = Path(__file__).resolve().parents[1]

def _web_tool(name: str):
    """A module of web_demo/tools/ (the site's own scripts), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"web_demo_tools_{name}", ROOT / "web_demo" / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE_ENCODE = """async ([text, runs, warmup]) => {
  const enc = window.ondeviceDemo.encoder;
  for (let i = 0; i < warmup; i++) await enc.encode(text);
  const out = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await enc.encode(text);
    out.push(performance.now() - t);
  }
  return out;
}"""

PAGE_SEARCH = """([rows, warmup]) => {
  const { catalog } = window.ondeviceDemo;
  const index = catalog.index;
  const code = (r) => {
    const q = new Uint8Array(index.codeBytes);
    const w = index.data.subarray(r * index.words, (r + 1) * index.words);
    for (let b = 0; b < index.codeBytes; b++) q[b] = (w[b >>> 2] >>> ((b & 3) << 3)) & 255;
    return q;
  };
  for (let i = 0; i < warmup; i++) index.search(code(rows[i % rows.length]), 10);
  const times = [], ids = [], dist = [];
  for (const r of rows) {
    const q = code(r);
    const t = performance.now();
    const res = index.search(q, 10);
    times.push(performance.now() - t);
    ids.push(Array.from(res.ids));
    dist.push(Array.from(res.distances));
  }
  return { times, ids, dist };
}"""


PAGE_RERANK = """async ([texts, warmup]) => {
  const { search } = window.ondeviceDemo;
  for (let i = 0; i < warmup; i++) await search(texts[i % texts.length]);
  const out = [];
  for (const t of texts) {
    const r = await search(t);
    out.push({ encode: r.encodeMs, search: r.searchMs, rerank: r.rerankMs, ids: Array.from(r.ids),
               keys: Array.from(r.keys) });
  }
  return out;
}"""

SHORTLIST = 100  # the page's (web_demo/app.js)


def python_rerank(dp, codes: np.ndarray, states: np.ndarray, text: str) -> tuple[list[int], np.ndarray, dict]:
    """The page's DiPair search in Python, one step at a time: (top-10 rows, their keys, milliseconds per step)."""
    from ondevice.kernels.hamming import knn

    t0 = time.perf_counter()
    qs, qc = dp.states_and_codes([text], "a")
    t1 = time.perf_counter()
    dist, rows = knn(codes, qc, SHORTLIST, threads=1)
    t2 = time.perf_counter()
    logits = dp.logits(qs, states[rows[0]])
    # the page's key: the head + Hamming blend where the bundle has one, else the head's rank key
    keys = dp.blend_keys(logits, dist[0]) if dp.blend is not None else dp.rank_key(logits)
    order = np.lexsort((rows[0], -keys))[:10]
    t3 = time.perf_counter()
    return rows[0][order].tolist(), keys[order], {"encode": (t1 - t0) * 1e3, "search": (t2 - t1) * 1e3,
                                                  "rerank": (t3 - t2) * 1e3}


def twenty_tokens(tokenizer) -> str:
    """A sentence of exactly 20 in-vocabulary word tokens (the same recipe as benchmarks/bundle.py)."""
    from ondevice.tokenizer import tokenize

    words = [w for w in tokenizer.vocab[2:500] if tokenize(w) == [w] and w.isalnum()][:20]
    text = " ".join(words)
    if len(tokenizer.ids(text)) != 20:
        raise SystemExit("could not build a 20-token sentence from the bundle's vocabulary")
    return text


def git_state() -> tuple[str, bool]:
    """HEAD's commit and whether the work tree has changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    return git("rev-parse", "HEAD"), bool(git("status", "--porcelain"))


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def versions(web: Path) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("ondevice", "numpy", "numba", "onnxruntime", "playwright"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    node = shutil.which("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False) if node else None
    out["node"] = version.stdout.strip() if version else "not installed"
    pkg = web / "node_modules" / "onnxruntime-web" / "package.json"
    out["onnxruntime-web"] = json.loads(pkg.read_text())["version"] if pkg.is_file() else "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--site", required=True, type=Path, help="site folder written by web_demo/tools/make_catalog.py")
    p.add_argument("--bundle", required=True, type=Path, help="the bundle the site was built from (Python side)")
    p.add_argument("--precision", choices=("fp32", "int8"), default=None)
    p.add_argument("--runs", type=int, default=300, help="timed encodes per round and runtime")
    p.add_argument("--search-queries", type=int, default=50, help="timed searches per round and runtime")
    p.add_argument("--rerank-queries", type=int, default=50,
                   help="DiPair sites: catalog sentences searched and reranked per round and runtime")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="picks the catalog rows used as search queries")
    p.add_argument("--chromium", default=os.environ.get("ONDEVICE_CHROMIUM") or shutil.which("chromium"))
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--note", default="", help="free text stored in the results (e.g. what the bundle is)")
    p.add_argument("--screenshot", type=Path, default=None, help="after timing, search --query and save a PNG")
    p.add_argument("--query", default="The river flows through the old city.")
    a = p.parse_args(argv)

    from ondevice.kernels.hamming import knn
    from playwright.sync_api import sync_playwright
    serve = _web_tool("serve").serve

    from ondevice.runtime import Bundle

    bundle = Bundle.load(a.bundle, precision=a.precision, threads=1)
    site_manifest = json.loads((a.site / "assets" / "bundle" / "manifest.json").read_text())
    if site_manifest["files"]["encoder.onnx"] != bundle.manifest["files"]["encoder.onnx"]:
        raise SystemExit(f"{a.site} was not built from {bundle.path}: their encoder.onnx differ")
    text = twenty_tokens(bundle.tokenizer)
    codes = np.load(a.site / "assets" / "catalog" / "codes.npy")
    rows = np.random.default_rng(a.seed).choice(len(codes), a.search_queries, replace=False).tolist()
    states_file = a.site / "assets" / "catalog" / "dipair_states.npy"
    dipair = states_file.is_file()
    if dipair:
        from ondevice.catalog import read_sentences

        states = np.load(states_file)
        sentences = read_sentences(a.site / "assets" / "catalog" / "sentences.jsonl")
        pick = np.random.default_rng(a.seed + 1).choice(len(sentences), a.rerank_queries, replace=False)
        rerank_texts = [sentences[i] for i in pick]
        dp = bundle.dipair(threads=1)
    started = datetime.now(timezone.utc)
    load_start = os.getloadavg()
    rounds = []
    with serve(a.site, seconds=900) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("document.body.dataset.state !== 'loading'", timeout=120_000)
        if page.get_attribute("body", "data-state") != "ready":
            raise SystemExit(f"page did not load: {page.inner_text('#status')}")
        page_info = page.evaluate("""() => ({ isolated: self.crossOriginIsolated, threads: window.ondeviceDemo.ort.env.wasm.numThreads,
                                       ua: navigator.userAgent })""")
        for r in range(a.rounds):
            web_ms = page.evaluate(PAGE_ENCODE, [text, a.runs, 30])
            for _ in range(30):
                bundle.embed(text)
            py_ms, py_cpu = [], []
            for _ in range(a.runs):
                c, w = time.thread_time(), time.perf_counter()
                bundle.embed(text)
                py_ms.append((time.perf_counter() - w) * 1e3)
                py_cpu.append((time.thread_time() - c) * 1e3)
            s = page.evaluate(PAGE_SEARCH, [rows, 5])
            knn(codes, codes[rows[:5]], 10, threads=1)
            py_search = []
            for row in rows:
                w = time.perf_counter()
                d, i = knn(codes, codes[row : row + 1], 10, threads=1)
                py_search.append((time.perf_counter() - w) * 1e3)
            d, i = knn(codes, codes[rows], 10, threads=1)
            same = bool(np.array_equal(np.asarray(s["ids"]), i) and np.array_equal(np.asarray(s["dist"]), d))
            rounds.append({
                "browser_encode_p50_ms": statistics.median(web_ms), "browser_encode_p99_ms": pct(web_ms, 0.99),
                "python_encode_p50_ms": statistics.median(py_ms), "python_encode_p99_ms": pct(py_ms, 0.99),
                "python_encode_cpu_p50_ms": statistics.median(py_cpu),
                "browser_search_p50_ms": statistics.median(s["times"]), "browser_search_p99_ms": pct(s["times"], 0.99),
                "python_search_p50_ms": statistics.median(py_search),
                "search_top10_identical_to_python": same,
            })
            if dipair:
                web = page.evaluate(PAGE_RERANK, [rerank_texts, 5])
                for text in rerank_texts[:5]:
                    python_rerank(dp, codes, states, text)
                py = [python_rerank(dp, codes, states, text) for text in rerank_texts]
                for step in ("encode", "search", "rerank"):
                    rounds[-1][f"browser_dipair_{step}_p50_ms"] = statistics.median(w[step] for w in web)
                    rounds[-1][f"python_dipair_{step}_p50_ms"] = statistics.median(p[2][step] for p in py)
                rounds[-1]["browser_dipair_rerank_p99_ms"] = pct([w["rerank"] for w in web], 0.99)
                rounds[-1]["dipair_top10_equal_queries"] = sum(w["ids"] == p[0] for w, p in zip(web, py))
                rounds[-1]["dipair_key_max_abs_diff"] = max(float(np.max(np.abs(np.asarray(w["keys"]) - p[1])))
                                                            for w, p in zip(web, py))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                 for k, v in rounds[-1].items()), flush=True)
        if a.screenshot:
            page.set_viewport_size({"width": 900, "height": 820})
            page.fill("#query", a.query)
            page.press("#query", "Enter")
            page.wait_for_function("(q) => document.getElementById('results').dataset.query === q", arg=a.query)
            page.screenshot(path=str(a.screenshot), full_page=True)
        chromium_version = browser.version
        browser.close()

    def med(key: str) -> float:
        return statistics.median(x[key] for x in rounds)

    summary = {k: med(k) for k in rounds[0]
               if k not in ("search_top10_identical_to_python", "dipair_top10_equal_queries", "dipair_key_max_abs_diff")}
    if dipair:
        summary["dipair_top10_equal_queries"] = min(x["dipair_top10_equal_queries"] for x in rounds)
        summary["dipair_key_max_abs_diff"] = max(x["dipair_key_max_abs_diff"] for x in rounds)
        summary["dipair_rerank_queries"] = a.rerank_queries
        summary["dipair_shortlist"] = SHORTLIST
    summary["browser_vs_python_encode"] = summary["browser_encode_p50_ms"] / summary["python_encode_p50_ms"]
    summary["search_top10_identical_to_python"] = all(x["search_top10_identical_to_python"] for x in rounds)
    m = bundle.manifest
    commit, dirty = git_state()
    result = {
        "benchmark": "web_demo", "date": started.isoformat(timespec="seconds"), "commit": commit, "dirty": dirty,
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "note": a.note,
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "threads": 1,
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
        "versions": {**versions(ROOT / "web_demo"), "chromium": chromium_version}, "page": page_info,
        "bundle": {"precision": m["precision"], "dim": m["dim"], "bits": m["bits"], "vocab": len(bundle.tokenizer),
                   "student": m["student"], "training": m.get("training"),
                   "encoder_onnx_bytes": m["files"]["encoder.onnx"]["bytes"]},
        "catalog_codes": len(codes), "sentence": text, "sentence_tokens": 20, "runs_per_round": a.runs,
        "search_queries_per_round": a.search_queries, "rounds": rounds, "summary": summary,
        "dipair": ({"shape": list(states.shape), "dtype": str(states.dtype), "task": m["dipair"]["task"],
                    "rerank_queries": rerank_texts} if dipair else None),
    }
    a.out_dir.mkdir(parents=True, exist_ok=True)
    out = create_new(a.out_dir, stamped("web_demo"), json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
