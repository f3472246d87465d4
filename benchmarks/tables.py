"""Render the measured tables of README.md and the docs/ pages (DOCS) from the files in benchmarks/results/.

A table in a document sits between two markers naming its renderer and the results file(s) it reads:

    <!-- results: binarize_methods benchmarks/results/binarize_quality_test_final-20261122T040102Z.json teacher -->
    ...generated table...
    <!-- /results -->

    python benchmarks/tables.py            # rewrite every marked block from its files
    python benchmarks/tables.py --check    # exit 1 if a block differs from its files (tests/test_docs.py)

So a number in a marked block always comes from a committed file, and a stale one fails the tests.

DOCS is every Markdown page of the repository (outside .venv, node_modules and build folders) that holds a marked
block, so a page gains its check by gaining a block.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from ondevice.results import repo_root

ROOT = repo_root()  # the checkout (not this file's folder: the tests run a copy of benchmarks/)
_SKIP = {".venv", "node_modules", "build", "site", ".git"}


def _docs() -> tuple[str, ...]:
    """Every Markdown page with a marked block, relative to the checkout."""
    found = []
    for path in sorted(ROOT.rglob("*.md")):
        rel = path.relative_to(ROOT)
        if _SKIP.isdisjoint(rel.parts) and "<!-- results: " in path.read_text(encoding="utf-8", errors="replace"):
            found.append(rel.as_posix())
    return tuple(found)


DOCS = _docs()  # the documents with marked tables
BLOCK = re.compile(r"(<!-- results: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)
BITS = (64, 128, 256, 384, 512, 1024, 2048)
METHOD_ORDER = ("threshold", "random", "pca", "ae", "ae-sp")


def _load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def _encoder(blob: dict, name: str) -> dict:
    return next(r for r in blob["results"] if r["encoder"] == name)


def _cells(res: dict) -> dict[tuple[str, int], float]:
    return {(r["method"], r["bits"]): r["spearman"] for r in res["rows"]}


def binarize_methods(path: str, encoder: str) -> str:
    """Methods x bit counts (Spearman x100 of -Hamming), best per column in bold."""
    res = _encoder(_load(path), encoder)
    cells = _cells(res)
    methods = [m for m in METHOD_ORDER if any(k[0] == m for k in cells)]
    best = {b: max((cells[m, b] for m in methods if (m, b) in cells and m != "threshold"), default=None) for b in BITS}
    lines = ["| method | " + " | ".join(f"{b} bits ({b // 8} B)" for b in BITS) + " |", "|---|" + "---:|" * len(BITS)]
    for m in methods:
        row = []
        for b in BITS:
            v = cells.get((m, b))
            row.append("–" if v is None else (f"**{v:.2f}**" if v == best[b] and m != "threshold" else f"{v:.2f}"))
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def binarize_summary(path: str) -> str:
    """Teacher and student side by side at 64/256/1024/2048 bits, continuous cosine first."""
    blob = _load(path)
    enc = {name: _encoder(blob, name) for name in ("teacher", "student")}
    methods = ("random", "pca", "ae", "ae-sp")
    head = " | ".join(f"{e}: {m}" if i == 0 else m for e in enc for i, m in enumerate(methods))
    lines = [f"| bits (bytes) | {head} |", "|---|" + "---:|" * 8]
    lines.append(f"| continuous cosine | {enc['teacher']['continuous_cosine']:.2f} | | | | "
                 f"{enc['student']['continuous_cosine']:.2f} | | | |")
    for b in (64, 256, 1024, 2048):
        cells = [_cells(enc[e]).get((m, b)) for e in enc for m in methods]
        lines.append(f"| {b} ({b // 8}) | " + " | ".join("–" if v is None else f"{v:.2f}" for v in cells) + " |")
    return "\n".join(lines)


def _seed_files(paths: tuple[str, ...]) -> str:
    """The footer of a table over seeds: how many, and their results files."""
    return f"\n{len(paths)} seed{'s' if len(paths) > 1 else ''}: " + ", ".join(f"`{Path(p).name}`" for p in paths) + "."


def binarize_median(*paths: str) -> str:
    """The student's cells over several seeds: median (min-max) per method and bit count, and the ordering target."""
    runs = [_cells(_encoder(_load(p), "student")) for p in paths]
    bits = sorted({k[1] for r in runs for k in r if k[0] in ("random", "ae", "ae-sp")})
    # pca is deterministic (one value per width), shown when every run fitted it
    with_pca = all(any(k[0] == "pca" for k in r) for r in runs)
    lines = ["| bits | random | ae | ae-sp |" + (" pca |" if with_pca else "") + " ae-sp >= ae >= random (medians) |",
             "|---:|---:|---:|---:|" + ("---:|" if with_pca else "") + "---|"]
    for b in bits:
        med = {}
        cells = []
        for m in ("random", "ae", "ae-sp"):
            v = [r[m, b] for r in runs if (m, b) in r]
            med[m] = statistics.median(v)
            cells.append(f"{med[m]:.2f} ({min(v):.2f}-{max(v):.2f})")
        if with_pca:
            v = [r["pca", b] for r in runs if ("pca", b) in r]
            cells.append(f"{statistics.median(v):.2f}" if v else "–")
        ok = med["ae-sp"] >= med["ae"] >= med["random"]
        lines.append(f"| {b} | " + " | ".join(cells) + f" | {'holds' if ok else '**fails**'} |")
    lines.append(_seed_files(paths))
    return "\n".join(lines)


def binarize_judged(*paths: str) -> str:
    """Seeds of autoencoders that pick their epoch with a judge: medians (min-max), the paired-by-seed differences
    the ordering compares, and how often each autoencoder kept its start (epoch 0); for ae-sp fine-tuned from ae
    (sp_start "ae"), also how often the judge kept a fine-tune epoch over ae's pick."""
    rows = [{(r["method"], r["bits"]): r for r in _encoder(_load(p), "student")["rows"]} for p in paths]
    bits = sorted({k[1] for r in rows for k in r if k[0] == "ae"})
    tuned = any("sp_from_epoch" in r[k] for r in rows for k in r if k[0] == "ae-sp")
    lines = [("| bits | random | ae | ae-sp | ae - random, by seed: median (ahead) | ae-sp - ae, by seed: median "
              "(ahead / level) | start kept: ae / ae-sp |" + (" fine-tune kept |" if tuned else "")
              + " ae-sp >= ae >= random (medians) |"),
             "|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if tuned else "") + "---|"]
    for b in bits:
        runs = [r for r in rows if all((m, b) in r for m in ("random", "ae", "ae-sp"))]
        val = {m: [r[m, b]["spearman"] for r in runs] for m in ("random", "ae", "ae-sp")}
        med = {m: statistics.median(v) for m, v in val.items()}
        cells = [f"{med[m]:.2f} ({min(v):.2f}-{max(v):.2f})" for m, v in val.items()]
        d1 = [x - y for x, y in zip(val["ae"], val["random"])]
        d2 = [x - y for x, y in zip(val["ae-sp"], val["ae"])]
        cells.append(f"{statistics.median(d1):+.2f} ({sum(d > 0 for d in d1)} of {len(d1)})")
        cells.append(f"{statistics.median(d2):+.2f} ({sum(d > 0 for d in d2)} / {sum(d == 0 for d in d2)} of {len(d2)})")
        kept = [sum(r[m, b].get("selected_epoch") == 0 for r in runs) for m in ("ae", "ae-sp")]
        cells.append(f"{kept[0]} / {kept[1]} of {len(runs)}")
        if tuned:
            ft = sum(r["ae-sp", b].get("selected_epoch", 0) >= r["ae-sp", b].get("sp_from_epoch", 1 << 30) for r in runs)
            cells.append(f"{ft} of {len(runs)}")
        ok = med["ae-sp"] >= med["ae"] >= med["random"]
        lines.append(f"| {b} | " + " | ".join(cells) + f" | {'holds' if ok else '**fails**'} |")
    lines.append(_seed_files(paths))
    return "\n".join(lines)


def binarize_seeds(path0: str, path1: str) -> str:
    """The same cells with two seeds."""
    a, b = _load(path0), _load(path1)
    lines = ["| encoder, bits | random seed 0 / 1 | ae seed 0 / 1 | ae-sp seed 0 / 1 |", "|---|---:|---:|---:|"]
    for name in ("teacher", "student"):
        ca, cb = _cells(_encoder(a, name)), _cells(_encoder(b, name))
        for bits in sorted({k[1] for k in cb}):
            cells = [f"{ca[m, bits]:.2f} / {cb[m, bits]:.2f}" for m in ("random", "ae", "ae-sp")]
            lines.append(f"| {name}, {bits} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def binarize_starts(path: str) -> str:
    """Untrained codes over seeds: STS-B test median ± sd (dev median) per projection, and held-out top-10 recall."""
    blob = _load(path)
    summ = {(r["codes"], r["bits"]): r for r in blob["results"]["summary"]}
    kinds = ("random", "orthogonal", "whiten-random", "whiten-orthogonal")
    names = ("random", "orthogonal rows", "whitened, random", "whitened, orthogonal rows")
    lines = ["| bits | " + " | ".join(names) + " | top-10 recall: random / orthogonal |", "|---:|" + "---:|" * 5]
    for b in sorted({k[1] for k in summ}):
        cells = [f"{summ[k, b]['stsb_test_median']:.2f} ± {summ[k, b]['stsb_test_sd']:.2f} (dev {summ[k, b]['stsb_dev_median']:.2f})"
                 for k in kinds]
        cells.append(f"{summ['random', b]['top10_recall_median']:.3f} / {summ['orthogonal', b]['top10_recall_median']:.3f}")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    seeds = summ["random", min(k[1] for k in summ)]["seeds"]
    meta = blob["meta"]
    lines.append(f"\nSTS-B test Spearman x100 of -Hamming, median ± sd over {seeds} seeds (dev median in brackets); "
                 f"{meta['date'][:10]}, {meta['cpu_model']}, commit {meta['commit'][:7]}, `{Path(path).name}`.")
    return "\n".join(lines)


def _si(x: float) -> str:
    return f"{x / 1e9:.2f} G" if x >= 1e9 else f"{x / 1e6:.0f} M"


def hamming_main(path: str) -> str:
    """Every (bits, queries, threads, library) cell of the main 1M-code table, with ratios against FAISS."""
    blob = _load(path)
    rows = [r for r in blob["rows"] if r["n"] == 1_000_000]
    faiss = {(r["bits"], r["nq"], r["threads"]): r["ms"] for r in rows if r["lib"] == "faiss"}
    bw = blob["bandwidth_gbps"]
    lines = [("| bits | queries | threads | library | ms | CPU ms | codes/s | GB/s | G words/s | % of read BW | "
             "% of buffer sum | vs FAISS |"), "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = {"ondevice": 0, "faiss": 1, "numpy": 2}
    for r in sorted(rows, key=lambda r: (r["bits"], r["nq"], r["threads"], order[r["lib"]])):
        single = r["nq"] == 1
        read = f"{100 * r['gbps'] / bw[str(r['threads'])]:.0f}%" if single else ""
        buf = f"{100 * r['gbps'] / r['buffer_gbps']:.0f}%" if single and r.get("buffer_gbps") else ""
        ratio = faiss[r["bits"], r["nq"], r["threads"]] / r["ms"]
        lines.append(f"| {r['bits']} | {r['nq']} | {r['threads']} | {r['lib']} | {r['ms']:.1f} | {r['cpu_ms']:.1f} | "
                     f"{_si(r['codes_per_s'])} | {r['gbps']:.2f} | {r['gwords']:.2f} | {read} | {buf} | {ratio:.2f}x |")
    return "\n".join(lines)


def hamming_scaling(path: str) -> str:
    """ms (G words/s) against the number of codes, 256 bits, 2 threads."""
    rows = [r for r in _load(path)["rows"] if r["bits"] == 256 and r["threads"] == 2]
    get = {(r["lib"], r["n"], r["nq"]): r for r in rows}
    lines = ["| codes | ondevice 1 query | FAISS 1 query | ratio | ondevice 100 queries | FAISS 100 queries | ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted({r["n"] for r in rows}):
        cells = []
        for nq in (1, 100):
            o, f = get[("ondevice", n, nq)], get[("faiss", n, nq)]
            cells += [f"{o['ms']:.2f} ({o['gwords']:.1f})", f"{f['ms']:.2f} ({f['gwords']:.1f})", f"{f['ms'] / o['ms']:.2f}x"]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def bundle_sizes(path: str) -> str:
    return size_table(_load(path)["results"])


def size_table(r: dict) -> str:
    """Bundle sizes by file and by ONNX weight group, from a bundle benchmark's results (also printed by it)."""
    lines = [("| bundle | total | without encoder.pt | encoder.onnx | encoder.pt | binarizer.safetensors | vocab.txt | "
              "onnx weights: embedding / LSTM / proj / binarizer |"), "|---|---|---|---|---|---|---|---|"]
    for prec in ("fp32", "int8"):
        s = r["sizes"][prec]
        w, f = s["encoder.onnx weights"], s["files"]
        lines.append(f"| {prec} | {_mb(s['total'])} | {_mb(s['total'] - f.get('encoder.pt', 0))} | {_mb(f['encoder.onnx'])} | "
                     f"{_mb(f.get('encoder.pt', 0))} | {_mb(f['binarizer.safetensors'])} | {_mb(f['vocab.txt'])} | "
                     + " / ".join(_mb(w.get(k, 0)) for k in ("embedding", "lstm", "proj", "binarizer")) + " |")
    return "\n".join(lines)


def bundle_codes(path: str) -> str:
    """benchmarks/bundle_codes.py: the shipped int8 bundle's size per stored projection, then each graph's codes."""
    r = _load(path)["results"]
    sizes = r["shipped_configuration_bytes"]
    lines = ["| int8 bundle as shipped (64 golden sentences, no encoder.pt) | total | encoder.onnx | binarizer.safetensors |",
             "|---|---|---|---|"]
    for proj in ("float32", "float16"):
        s = sizes[proj]
        lines.append(f"| projection stored as {proj} | {_mb(s['total'])} | {_mb(s['files']['encoder.onnx'])} | "
                     f"{_mb(s['files']['binarizer.safetensors'])} |")
    lines += ["", (f"| graph ({r['sentences']:,} STS-B dev sentences) | STS-B dev, cosine | STS-B dev, Hamming | "
                   "bit agreement vs reference | mean cosine vs reference | batches of 64 = one per call |"),
              "|---|---|---|---|---|---|"]
    for g in r["graphs"]:
        same = g.get("batch_64_equals_one_per_call")
        same_txt = "-" if same is None else (f"yes (codes of {same['codes_rows_identical']:.1%} of rows)"
                                             if same["embeddings"] else f"no (codes of {same['codes_rows_identical']:.1%} of rows)")
        lines.append(f"| {g['name']} | {g['stsb_dev_cosine']:.2f} | {g['stsb_dev_hamming']:.2f} | "
                     f"{g['bit_agreement_vs_reference']:.4f} | {g['mean_cosine_vs_reference']:.5f} | {same_txt} |")
    return "\n".join(lines)


def bundle_latency(path: str) -> str:
    return latency_table(_load(path)["results"])


def latency_table(r: dict) -> str:
    """Latency and throughput rows of a bundle benchmark's results (also printed by it)."""
    teacher = next((x for x in r["rows"] if x["name"].startswith("teacher fp32")), None)
    lines = [("| encoder (1 thread) | p50, 20-token sentence | p50 of 50-call windows, min-max | p99 | "
             "throughput, batches of 64 | vs teacher fp32 |"), "|---|---|---|---|---|---|"]
    for x in r["rows"]:
        ratio = f"{x['sentences_per_s'] / teacher['sentences_per_s']:.1f}x" if teacher else "-"
        lines.append(f"| {x['name']} | {x['p50_ms']:.3f} ms ({x['wall_p50_ms']:.3f}) | "
                     f"{x['window_p50_min_ms']:.3f}-{x['window_p50_max_ms']:.3f} ms | {x['p99_ms']:.3f} ms "
                     f"({x['wall_p99_ms']:.3f}) | {x['sentences_per_s']:,.0f} sent/s ({x['wall_sentences_per_s']:,.0f}) "
                     f"| {ratio} |")
    return "\n".join(lines)


def bundle_by_length(path: str) -> str:
    rows = _load(path)["results"]["by_length"]
    names = list(dict.fromkeys(x["name"] for x in rows))
    lines = ["| tokens | " + " | ".join(f"{n} p50" for n in names) + " |", "|---:|" + "---:|" * len(names)]
    for n in sorted({x["tokens"] for x in rows}):
        got = {x["name"]: x["p50_ms"] for x in rows if x["tokens"] == n}
        lines.append(f"| {n} | " + " | ".join(f"{got[k]:.3f} ms" for k in names) + " |")
    return "\n".join(lines)


def bundle_int8_products(path: str) -> str:
    """Exact int8 products (every ondevice session) against onnxruntime's default session, from benchmarks/bundle.py."""
    blob = _load(path)
    m, cpu = blob["meta"], blob["meta"].get("cpu", {})
    vnni = {True: "with VNNI", False: "without VNNI"}.get(cpu.get("vnni"), "VNNI not recorded")
    return int8_products_table(blob["results"]) + "\n\n" + (
        f"`{Path(path).name}` ({m['date'][:10]}, commit {m['commit'][:7]}, {m['cpu_model']} family "
        f"{cpu.get('cpu_family', '?')} model {cpu.get('model', '?')}, {vnni}; thread CPU time).")


def int8_products_table(r: dict) -> str:
    """The exact-vs-default int8 rows of a bundle benchmark's results (also printed by it)."""
    ab = r["int8_products"]
    lines = [("| int8 bundle (1 thread, 20 tokens) | p50, exact products | p50, onnxruntime default | exact / default | "
              "default vs exact: mean cosine | default vs exact: code bits |"), "|---|---:|---:|---:|---:|---:|"]
    for name, x in ab.items():
        lines.append(f"| {name} | {x['exact_p50_ms']:.3f} ms | {x['default_p50_ms']:.3f} ms | {x['ratio']:.2f}x | "
                     f"{x['default_vs_exact_cosine']:.5f} | {x['default_vs_exact_bits']:.4f} |")
    calls = next(iter(ab.values()))["calls"]
    lines += ["", f"The two sessions timed in alternating 50-call windows, {calls} calls each."]
    if "int8_quality_8bit_weights" in r:
        q7, q8 = r["int8_quality"], r["int8_quality_8bit_weights"]
        lines[-1] += (f" This run's int8 bundle against its fp32 bundle, exact products: 7-bit weights mean cosine "
                      f"{q7['mean_cosine']:.5f}, code bits {q7['bit_agreement']:.4f}; 8-bit weights "
                      f"{q8['mean_cosine']:.5f}, {q8['bit_agreement']:.4f}.")
    return "\n".join(lines)


def bundle_meta(path: str) -> str:
    blob = _load(path)
    m, r = blob["meta"], blob["results"]
    q = r["int8_quality"]
    return (f"Run `{Path(path).name}`: commit {m['commit'][:12]}, {m['date']}, {m['cpu_model']}, {m['cpu_count']} cores, "
            f"load average {m['load_average_start'][0]:.2f} at start; {r['student']} (vocab {r['vocab']:,}), "
            f"{r['bits']}-bit binarizer. int8 vs fp32 bundle on the throughput sentences: mean cosine "
            f"{q['mean_cosine']:.5f}, bit agreement {q['bit_agreement']:.4f}, top-10 overlap {q['top10_overlap']:.3f} "
            f"({q['top10_overlap_ties']:.3f} counting ties at the 10th distance).")


def _row(blob: dict, prefix: str) -> dict | None:
    return next((x for x in blob["results"]["rows"] if x["name"].startswith(prefix)), None)


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


def bundle_runs(*paths: str) -> str:
    """One line per run of benchmarks/bundle.py, then the median over runs."""
    lines = [("| run | load avg at start | int8 p50 (50-call windows) | fp32 p50 | teacher fp32 p50 | "
             "int8 throughput vs teacher fp32 |"), "|---|---:|---|---:|---:|---:|"]
    cols: dict[str, list[float]] = {"int8": [], "fp32": [], "teacher": [], "ratio": []}
    for path in paths:
        blob = _load(path)
        i8, f32, t = _row(blob, "bundle int8"), _row(blob, "bundle fp32"), _row(blob, "teacher fp32")
        ratio = i8["sentences_per_s"] / t["sentences_per_s"]
        cols["int8"].append(i8["p50_ms"])
        cols["fp32"].append(f32["p50_ms"])
        cols["teacher"].append(t["p50_ms"])
        cols["ratio"].append(ratio)
        lines.append(f"| `{Path(path).name}` | {blob['meta']['load_average_start'][0]:.1f} | {i8['p50_ms']:.3f} ms "
                     f"({i8['window_p50_min_ms']:.3f}-{i8['window_p50_max_ms']:.3f}) | {f32['p50_ms']:.3f} ms | "
                     f"{t['p50_ms']:.3f} ms | {ratio:.1f}x |")
    lines.append(f"| **median of {len(paths)} runs** | | **{_median(cols['int8']):.3f} ms** | {_median(cols['fp32']):.3f} ms "
                 f"| {_median(cols['teacher']):.3f} ms | {_median(cols['ratio']):.1f}x |")
    return "\n".join(lines)


def bundle_summary(*paths: str) -> str:
    """README's bundle table: sizes of the first run, medians over runs of p50, p99 and throughput."""
    blobs = [_load(p) for p in paths]
    sizes = blobs[0]["results"]["sizes"]

    def med(prefix: str, key: str) -> float:
        return _median([_row(b, prefix)[key] for b in blobs])

    t_rate = med("teacher fp32", "sentences_per_s")
    lines = [f"| median of {len(paths)} runs | int8 bundle | fp32 bundle | teacher (ONNX fp32) |", "|---|---|---|---|"]
    lines.append(f"| bundle size | {_mb(sizes['int8']['total'])} (encoder.onnx {_mb(sizes['int8']['files']['encoder.onnx'])}) | "
                 f"{_mb(sizes['fp32']['total'])} (encoder.onnx {_mb(sizes['fp32']['files']['encoder.onnx'])}) | "
                 f"{_mb(sizes['teacher fp32 (onnxruntime)'])} (model only) |")
    cells = [f"{med(p, 'p50_ms'):.2f} / {med(p, 'p99_ms'):.2f} ms" for p in ("bundle int8", "bundle fp32", "teacher fp32")]
    lines.append("| p50 / p99, one 20-token sentence, thread CPU time | " + " | ".join(cells) + " |")
    i8, f32 = med("bundle int8", "sentences_per_s"), med("bundle fp32", "sentences_per_s")
    lines.append(f"| throughput, batches of 64 | {i8:,.0f} sentences/s ({i8 / t_rate:.1f}x teacher) | "
                 f"{f32:,.0f} sentences/s ({f32 / t_rate:.1f}x) | {t_rate:,.0f} sentences/s |")
    size = sizes["int8"]["total"]
    p50s = [_row(b, "bundle int8")["p50_ms"] for b in blobs]
    ratios = [_row(b, "bundle int8")["sentences_per_s"] / _row(b, "teacher fp32")["sentences_per_s"] for b in blobs]
    verdict = lambda ok: "**met**" if ok else "**missed**"
    lines += ["", (f"Targets: int8 bundle <= 10 MB: {verdict(size <= 10e6)} ({_mb(size)}); >= 20x the teacher's throughput: "
              f"{verdict(min(ratios) >= 20)} (runs: {min(ratios):.0f}-{max(ratios):.0f}x); p50 <= 1 ms for a 20-token "
              f"sentence on 1 thread: {verdict(max(p50s) <= 1)} (runs: {min(p50s):.3f}-{max(p50s):.3f} ms).")]
    return "\n".join(lines)


def demo_output(path: str) -> str:
    blob = _load(path)
    m = blob["meta"]
    return (f"Run `{Path(path).name}` (commit {m['commit'][:12]}, {m['date']}, {m['cpu_model']}, {m['cpu_count']} cores, "
            f"load average {m['load_average_start'][0]:.1f} at start, {m['seconds'] / 60:.1f} min for the demo "
            "command):\n\n```\n" + "\n".join(blob["results"]["lines"]).strip("\n") + "\n```")


def walkthrough(path: str) -> str:
    """README's first-ten-minutes: every step's commands and what they printed (benchmarks/walkthrough.py)."""
    blob = _load(path)
    m, r = blob["meta"], blob["results"]
    lines = [(f"Run `{Path(path).name}` (`benchmarks/walkthrough.py`, commit {m['commit'][:12]}, {m['date']}, "
             f"{m['cpu_model']}, {m['cpu_count']} cores, load average {m['load_average_start'][0]:.1f} at start; "
             f"{sum(s['seconds'] for s in r['steps']):.0f} s for the steps):"), ""]
    for i, s in enumerate(r["steps"]):
        if i == 0:  # the install line is shown with the first step, not run
            lines += ["```bash", r["install"], f"{s['text']}   # {s['title']}", "```"]
        else:
            lines += [f"```{s['kind']}", f"# {s['title']}", s["text"], "```"]
        shown = s["output"].replace(r["root"], "...").rstrip("\n")
        if shown:
            lines += ["```", shown, "```"]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _run_line(path: str) -> str:
    m = _load(path)["meta"]
    return (f"Run `{Path(path).name}`: commit {m['commit'][:12]}, {m['date']}, {m['cpu_model']}, {m['cpu_count']} cores, "
            f"load average {m['load_average_start'][0]:.2f} at start.")


def jvm_core(path: str) -> str:
    """Per operation: thread CPU time p50, wall p50 / p99."""
    r = _load(path)["results"]
    lines = [_run_line(path), "", "| operation | CPU p50 | wall p50 / p99 | calls |", "|---|---:|---:|---:|"]
    for x in r["rows"]:
        lines.append(f"| {x['what']} | {x['cpu_p50_ms']:.2f} ms | {x['wall_p50_ms']:.2f} / {x['wall_p99_ms']:.2f} ms "
                     f"| {x['n']} |")
    bound = r.get("read_bound")
    if bound:
        lines += ["", (f"Hamming top-10 over the JVM's read bound (its fastest plain scan of the same buffer, "
                       f"{bound['cpu_p50_ms']:.2f} ms = {bound['gbps']:.1f} GB/s, CPU p50): "
                       f"**{bound['topk_over_bound']:.2f}x** (target: within 2x, "
                       f"{'met' if bound['topk_over_bound'] <= 2 else 'missed'}).")]
    return "\n".join(lines)


def hamming_grid(*paths: str) -> str:
    """The device-sized grid of benchmarks/hamming_knn.py (one or more runs), with its targets, as it prints it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hamming_knn", Path(__file__).with_name("hamming_knn.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = [_load(p) for p in paths]
    runs = [f"`{Path(p).name}` (commit {r['commit'][:12]}, {r['cpu_model']}, {r['cpus']} CPUs, load "
            f"{r['load_average_start'][0]:.1f} at start, {r['load_average_end'][0]:.1f} at end)" for p, r in zip(paths, results)]
    return "Runs: " + "; ".join(runs) + ".\n\n" + module.report(results)


def hamming_ab(*paths: str) -> str:
    """In-process A/Bs of scan builds (benchmarks/hamming_prefetch_ab.py): each build's ms and share of the read bound."""
    lines = []
    for path in paths:
        blob = _load(path)
        rows = blob["results"]["rows"]
        builds = [name for name in rows[0]["ms"] if name != "read"]
        lines += [_run_line(path), "", "| codes | bits | threads | " + " | ".join(builds) + " | read bound |",
                  "|---:|---:|---:|" + "---:|" * (len(builds) + 1)]
        for r in rows:
            lines.append(f"| {r['n']:,} | {r['bits']} | {r['threads']} | "
                         + " | ".join(f"{r['ms'][b]:.4f} ms ({r['read_share'][b]:.0%})" for b in builds)
                         + f" | {r['ms']['read']:.4f} ms |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def hamming_stream_bound(path: str) -> str:
    """Bare test loops vs the read sum vs the search (benchmarks/hamming_stream_bound.py), shares of the read bound."""
    rows = _load(path)["results"]["rows"]
    split = "kernel" in rows[0]["ms"]  # runs from 2026-11-29 17:30 also time the call floor and the bare kernel
    extra = ("call floor", "kernel") if split else ()
    lines = [_run_line(path), "", "| codes | bits | threads | read sum | test (no branch) | test + branch | "
             + ("call floor | kernel alone | " if split else "") + "ondevice knn |",
             "|---:|---:|---:|---:|---:|---:|" + "---:|" * len(extra) + "---:|"]
    for r in rows:
        ms, share = r["ms"], r["read_share"]
        cells = [f"{ms[k]:.4f} ms ({share[k]:.0%})" for k in ("test", "test+branch")]
        cells += [f"{ms['call floor'] * 1e3:.1f} us"] if split else []
        cells += [f"{ms[k]:.4f} ms ({share[k]:.0%})" for k in ("kernel", "ondevice") if k in ms]
        lines.append(f"| {r['n']:,} | {r['bits']} | {r['threads']} | {ms['read']:.4f} ms | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage(path: str) -> str:
    blob = _load(path)
    m, r = blob["meta"], blob["results"]
    return (f"**{r['percent']:.1f}%** of {r['statements']:,} statements ({r['missing']:,} not run), run "
            f"`{Path(path).name}` (commit {m['commit'][:12]}, {m['date']}, `{r['test_command']}`: "
            f"{r['tests']}). Numba-compiled kernel bodies run as machine code and count as not run.")


def suite(path: str) -> str:
    """One test-suite run (benchmarks/suite.py): pytest time and counts, the whole command's time, coverage if measured."""
    blob = _load(path)
    m, r = blob["meta"], blob["results"]

    def clock(seconds: float) -> str:
        return f"{int(seconds // 60)}:{int(seconds % 60):02d}"

    counts = ", ".join(f"{n:,} {word}" for word, n in r["counts"].items() if word not in ("warning", "deselected"))
    text = (f"**{clock(r['pytest_seconds'])}** (min:s) of pytest, {counts}, on {m['cpu_model']} with "
            f"{m['cpu_count']} cores")
    if r["command_seconds"]:
        text += f"; {clock(r['command_seconds'])} for the whole command, install included"
    if r["coverage"]:
        c = r["coverage"]
        text += (f"; line coverage **{c['percent']:.1f}%** of {c['statements']:,} statements ({c['missing']:,} not "
                 "run; Numba-compiled kernel bodies run as machine code and count as not run)")
    text += f". Run `{Path(path).name}` (commit {m['commit'][:12]}, {m['date']}, `{r['test_command']}`)."
    if r["slowest"]:
        text += "\n\n| slowest tests | phase | seconds |\n|---|---|---:|\n"
        text += "\n".join(f"| `{x['test']}` | {x['phase']} | {x['seconds']:.1f} |" for x in r["slowest"][:10])
    return text


def eval_table(path: str) -> str:
    """The table of an `ondevice eval` report.md (report.json beside it holds every number and hash)."""
    return "\n".join(line for line in (ROOT / path).read_text(encoding="utf-8").splitlines() if line.startswith("|"))


def eval_median(*paths: str) -> str:
    """Several `ondevice eval` runs of the same encoders (e.g. --seed 0, 1, 2): per view and column the median, with
    min-max when the runs differ; float views are the same in every run and show one value."""
    reports = [_load(p) for p in paths]
    first = reports[0]
    tasks = [t for t in first["tasks"] if t not in first["skipped"] and t != "retrieval"]
    retrieval = "retrieval" in first["tasks"] and "retrieval" not in first["skipped"]
    from ondevice.eval.tasks import TASKS

    cols = ["encoder", "representation", "bytes/sentence", *(f"{TASKS[t].title} ρ" for t in tasks)]
    cols += ["R@10 vs own float", "R@10 vs reference"] if retrieval else []

    def cell(values: list[float | None]) -> str:
        got = [v for v in values if v is not None]
        if not got:
            return "-"
        med = statistics.median(got)
        return f"{med:.1f}" if max(got) - min(got) < 0.05 else f"{med:.1f} ({min(got):.1f}-{max(got):.1f})"

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * 3 + "---:|" * (len(cols) - 3)]
    from ondevice.binarize import METHODS

    rank = {m: i for i, m in enumerate(("bundle", *METHODS))}  # a bundle's own codes, then the binarizers
    order = sorted(first["views"].items(),  # floats first, then by width, methods in the order README lists them
                   key=lambda kv: (kv[1]["binary"], kv[1]["dim"] if kv[1]["binary"] else 0, rank.get(kv[1]["method"], 99)))
    for name, meta in order:
        rep = f"{meta['method']} {meta['dim']} bits" if meta["binary"] else f"float32 × {meta['dim']}"
        row = [name, rep, str(meta["bytes_per_sentence"])]
        res = [r["results"][name] for r in reports]
        row += [cell([x.get(t, {}).get("spearman") for x in res]) for t in tasks]
        if retrieval:
            row += [cell([(x.get("retrieval") or {}).get(k) for x in res]) for k in ("recall_vs_float", "recall_vs_reference")]
        lines.append("| " + " | ".join(row) + " |")
    runs = ", ".join(f"`{p}` (seed {r['seed']}, commit {r.get('commit', '?')[:12]}, {r['created'][:16]}, "
                     f"{r.get('cpu_model', '?')})" for p, r in zip(paths, reports))
    return "\n".join(lines) + f"\n\nMedian over {len(reports)} runs (min-max where they differ): {runs}."


def distill_ablation(path: str) -> str:
    """One row per recipe variant of benchmarks/distill_ablation.py (choose on STS-B dev)."""
    blob = _load(path)
    snli = any("snli_top10_vs_teacher" in r for r in blob["rows"])  # runs with --snli-queries have the column
    lines = ["| variant | held-out cosine | STS-B dev | STS-B test | SICK-R test | " + ("SNLI top-10 | " if snli else "")
             + "params (w/o embeddings) |", "|---|---:|---:|---:|---:|" + ("---:|" if snli else "") + "---:|"]
    for r in blob["rows"]:
        cell = (f" {r['snli_top10_vs_teacher']:.1f}% |" if "snli_top10_vs_teacher" in r else " |") if snli else ""
        lines.append(f"| {r['variant']} | {r['held_out_cosine']:.4f} | {r['stsb_dev']:.2f} | {r['stsb_test']:.2f} "
                     f"| {r['sickr_test']:.2f} |{cell} {r['params']:,} ({r['params_without_embeddings']:,}) |")
    return "\n".join(lines)


def distill_quality(path: str) -> str:
    """Encoders side by side (benchmarks/distill_quality.py): quality, then speed."""
    blob = _load(path)
    # a run with --compare-teacher also scores SNLI retrieval against each compared teacher's top 10
    others = [k.removeprefix("retrieval_top10_vs_") for k in next(iter(blob["scores_x100"].values()))
              if k.startswith("retrieval_top10_vs_") and k != "retrieval_top10_vs_teacher"]
    lines = ["| encoder | STS-B dev | STS-B test | SICK-R test | SNLI top-10 vs teacher (%) |"
             + "".join(f" vs {o} (%) |" for o in others), "|---|---:|---:|---:|---:|" + "---:|" * len(others)]
    for name, s in blob["scores_x100"].items():
        lines.append(f"| {name} | {s['stsb_dev']:.2f} | {s['stsb_test']:.2f} | {s['sickr_test']:.2f} "
                     f"| {s['retrieval_top10_vs_teacher']:.2f} |" + "".join(f" {s[f'retrieval_top10_vs_{o}']:.2f} |"
                                                                          for o in others))
    return "\n".join(lines)


def distill_students(*paths: str) -> str:
    """Full-scale students side by side, one distill_quality run each: what changed in the recipe, and the scores."""
    lines = [("| student | sentences | corpus in front | word vectors | vocab | epochs | held-out cosine | STS-B dev | "
              "STS-B test | SICK-R test | SNLI top-10 (%) |"), "|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for path in paths:
        b = _load(path)
        c, s = b["distill_config"], b["scores_x100"]["student"]
        splits = {True: "STS-B train", False: "none"}.get(c["train_splits"], str(c["train_splits"]).replace(",", ", "))
        if c.get("train_split_repeats", 1) > 1:
            splits += f" (x{c['train_split_repeats']} per epoch)"
        dim = c["embedding_dim"] or 50
        last = b["train_log"][-1]  # epochs done when measured (a run may be measured before its last epoch)
        n = f"{c['max_sentences']:,}" if c["max_sentences"] else "all (1M Wikipedia)"
        epochs = f"{last['epoch']}" + (f" more, from `{Path(c['init_from']).name}`" if c.get("init_from") else "")
        lines.append(f"| `{Path(b['student_dir']).name}` | {n} | {splits} | {c['word_vectors']} {dim}-d | "
                     f"{c['vocab_size']:,} | {epochs} | {last['held_out_cosine']:.4f} | {s['stsb_dev']:.2f} | {s['stsb_test']:.2f} | "
                     f"{s['sickr_test']:.2f} | {s['retrieval_top10_vs_teacher']:.2f} |")
    return "\n".join(lines)


def _mean_std(x: dict) -> str:
    """'mean ± std' of a benchmarks/pairs.py spread (the mean alone for one run)."""
    return f"{x['mean']:.2f} ± {x['std']:.2f}" if x.get("std") is not None else f"{x['mean']:.2f}"


def _view_names(teacher: str) -> list[str]:
    """The folder names of a `--teacher` value's comma-separated views (a mean of several teachers)."""
    return [Path(v).name for v in teacher.split(",")]


def pairs_seeds(path: str) -> str:
    """DvBERT vs DSE over seeds (benchmarks/pairs.py seeds): per seed dev and test, then mean, std and the difference."""
    b = _load(path)
    metric = b["metric"]
    seeds = [str(x) for x in b["seeds"]]
    lines = ["| seed | DSE dev | DvBERT dev | DSE test | DvBERT test | DvBERT - DSE (test) |", "|---:|---:|---:|---:|---:|---:|"]
    for k in seeds:
        d, v = b["runs"]["dse"][k], b["runs"]["dvbert"][k]
        lines.append(f"| {k} | {d['dev'][metric]:.2f} | {v['dev'][metric]:.2f} | {d['test'][metric]:.2f} | "
                     f"{v['test'][metric]:.2f} | {v['test'][metric] - d['test'][metric]:+.2f} |")
    dev, test, diff = b["summary_dev"], b["summary"], b["dvbert_minus_dse"]
    ms = _mean_std
    lines.append(f"| mean ± std | {ms(dev['dse'][metric])} | {ms(dev['dvbert'][metric])} | {ms(test['dse'][metric])} | "
                 f"{ms(test['dvbert'][metric])} | {ms(diff['per_seed'])} |")
    teachers = b.get("teachers_test") or {}
    lines += ["", f"{metric} x100 on {b['task']} ({b['test_pairs']:,} test pairs); DvBERT - DSE on dev: "
              f"{ms(diff['dev_per_seed'])}; beyond the seed spread: {diff['beyond_seed_spread']}; DSE alpha(s) "
              f"{', '.join(f'{x:g}' for x in b['dse_alphas'])}; DvBERT teachers: {', '.join(Path(t).name for t in b['dvbert_teachers'])}"
              + "".join(f"; teacher {Path(t).name} test {m[metric]:.2f}" for t, m in teachers.items())
              + (f"; the teachers' mean logit test {b['teachers_mean_test'][metric]:.2f}" if "teachers_mean_test" in b else "")
              + (f"; DSE taught by the mean of {', '.join(_view_names(b['dse_teacher']))}"
                 if "," in (b.get("dse_teacher") or "") else "")
              + "."]
    if "dvbert_augment" in b:  # files written before that (commit 383dddd) trained DvBERT on the labelled pairs only and do not say so
        c = b["dvbert_config"]
        what = (f"{c['augment_random']:,} random + {c['augment_neighbors']} neighbour(s)/sentence"
                + (f" + {c['augment_tasks']} train text" if c["augment_tasks"] else "")
                + (f" + {c['augment_edits']} edited copies/pair" if c["augment_edits"] else ""))
        lines[-1] += (f" Transfer set: {what}, the same pairs for both students (DvBERT's scored by each of its teachers)."
                      if b["dvbert_augment"] else " DvBERT trained on the labelled pairs only (`--no-dvbert-augment`).")
    anneal = (b.get("dvbert_config") or {}).get("anneal", "linear")
    if anneal != "linear":  # the schedule is linear; say when a run used another
        lines[-1] += (" DvBERT without teacher annealing (`--anneal none`: the teachers' target throughout, gold never"
                      " used)." if anneal == "none" else f" DvBERT's gold weight: `--anneal {anneal}`.")
    return "\n".join(lines)


def pairs_teachers(path: str) -> str:
    """Cross-encoder teachers of a `benchmarks/pairs_suite.py` run: settings, dev and test per teacher, dev-chosen ones."""
    b = _load(path)
    chosen = {t for c in b["chosen"].values() for t in c.get("teachers", [])}
    lines = ["| teacher | task | epochs | lr | both orders | seed | train s | dev | test | dev-chosen setting |",
             "|---|---|---:|---:|:---:|---:|---:|---:|---:|:---:|"]
    for name, t in sorted(b["teachers"].items(), key=lambda kv: (kv[1]["config"]["task"], kv[0])):
        c = t["config"]
        key = "spearman" if "spearman" in t["test"] else "accuracy"
        f1 = f" / F1 {t['test']['f1']:.2f}" if "f1" in t["test"] else ""
        lines.append(f"| {Path(name).name} | {c['task']} | {c['epochs']} | {c['lr']:g} | {'yes' if c.get('both_orders') else ''} | "
                     f"{c['seed']} | {t['train_seconds']:.0f} | {t['dev'][key]:.2f} | {t['test'][key]:.2f}{f1} | "
                     f"{'yes' if name in chosen else ''} |")
    m = b["machine"]
    lines += ["", (f"Spearman x100 (STS-B, SICK-R) or accuracy x100 (MRPC, QQP, SICK-E); dev picks the setting per task, "
              f"its seeds 1.. are DvBERT's independent teachers. {m.get('gpu') or m['cpu']}, {b['date'][:10]}, commit "
              f"{b['commit'][:7]}.")]
    return "\n".join(lines)


def distill_targets(path: str) -> str:
    """The student-quality targets against what the run measured."""
    b = _load(path)
    s, t, m = (b["scores_x100"][k] for k in ("student", "teacher", "model2vec"))

    def ok(cond: bool) -> str:
        return "met" if cond else "**missed**"

    rows = [
        ("STS-B test >= 0.90 x teacher", f"{b['student_over_teacher']['stsb_test']:.3f} ({s['stsb_test']:.2f} vs {0.9 * t['stsb_test']:.2f} needed)",
         ok(b["student_over_teacher"]["stsb_test"] >= 0.9)),
        ("SICK-R test >= 0.90 x teacher", f"{b['student_over_teacher']['sickr_test']:.3f}", ok(b["student_over_teacher"]["sickr_test"] >= 0.9)),
        ("STS-B test >= model2vec + 5", f"{b['student_minus_model2vec']['stsb_test']:+.2f} ({s['stsb_test']:.2f} vs {m['stsb_test']:.2f})",
         ok(b["student_minus_model2vec"]["stsb_test"] >= 5)),
        ("SICK-R test >= model2vec + 5", f"{b['student_minus_model2vec']['sickr_test']:+.2f} ({s['sickr_test']:.2f} vs {m['sickr_test']:.2f})",
         ok(b["student_minus_model2vec"]["sickr_test"] >= 5)),
        ("SNLI cosine top-10 recovers >= 50% of the teacher's", f"{s['retrieval_top10_vs_teacher']:.2f}% ({s['retrieval_top10_vs_teacher'] - 50:+.2f} points)",
         ok(s["retrieval_top10_vs_teacher"] >= 50)),
    ]
    lines = ["| target | measured | |", "|---|---|---|"] + [f"| {a} | {v} | {o} |" for a, v, o in rows]
    return "\n".join(lines)


def distill_speed(path: str) -> str:
    """Sentences/s on the same STS-B sentences and threads, and the ratio to the torch teacher."""
    b = _load(path)
    lines = ["| encoder | sentences/s | x teacher (torch) |", "|---|---:|---:|"]
    for name, v in b["sentences_per_second"].items():
        lines.append(f"| {name} | {v:,.0f} | {b['speed_ratio_vs_teacher_torch'][name]:.2f} |")
    c = b["int8_teacher_cosine_to_fp32"]
    for label, o in (b.get("int8_cosine_to_fp32") or {}).items():  # compared teachers (--compare-teacher)
        if label != "teacher":
            lines.append(f"\n{label}: int8 vs fp32 cosine over the timed sentences: mean {o['mean']:.4f}, min {o['min']:.4f}.")
    lines.append(f"\nint8 teacher vs fp32 teacher, cosine over the timed sentences: mean {c['mean']:.4f}, min {c['min']:.4f}. "
                 f"{b['speed_sentences']:,} STS-B sentences, {b['machine']['threads']} threads, {b['machine']['cpu']}, "
                 f"load average {b['machine']['loadavg_at_start'][0]} at the start.")
    return "\n".join(lines)


def devices(*paths: str) -> str:
    """benchmarks/devices.py runs: teacher labelling and a student epoch on the GPU against the same machine's CPU."""
    lines = [("| teacher batch | device | sentences | teacher sentences/s | student epoch sentences/s | GPU / CPU teacher | "
              "GPU / CPU student | results file |"), "|---:|---|---:|---:|---:|---:|---:|---|"]
    for path in paths:
        b = _load(path)
        for r in b["rows"]:
            gpu = r["device"] != "cpu"
            lines.append(f"| {b['settings']['teacher_batch_size']} | {b['machine']['gpu'] if gpu else str(b['machine']['cores']) + ' CPU threads'} "
                         f"| {r['sentences']:,} | {r['teacher_sentences_per_s']:,.0f} | {r['student_sentences_per_s']:,.0f} "
                         f"| {b['gpu_over_cpu']['teacher'] if gpu else ''} | {b['gpu_over_cpu']['student'] if gpu else ''} "
                         f"| {'`' + Path(path).name + '`' if gpu else ''} |")
    b = _load(paths[0])
    c = b["teacher_gpu_vs_cpu"]
    lines.append(f"\n{b['machine']['cpu']}; teacher: {'random weights in the architecture and tokenizer of ' if b['random_weights'] else ''}"
                 f"`{Path(b['teacher']).name}`; student hidden {b['settings']['hidden']}, batch {b['settings']['batch_size']}; "
                 f"GPU vs CPU teacher vectors over {c['sentences']:,} sentences: min cosine {c['min_cosine']:.7f}, "
                 f"max abs difference {c['max_abs_diff']:.1e}.")
    return "\n".join(lines)


def _best_epoch(dev: dict) -> str:
    """The published epoch (and stage) of a run, or the two epochs a kept weight soup averaged."""
    if isinstance(dev.get("soup"), dict):
        return f"soup of {dev['soup']['best_epoch']} + {dev['soup']['final_epoch']}"
    return f"{dev['epoch']} ({dev['stage']})"


def _dse_name(run: str, with_alpha: bool = False) -> str:
    """A DSE run by its folder: the sweep's name for an alpha-<a> sub-folder (with it when asked), else its own."""
    p = Path(run)
    if not p.name.startswith("alpha-"):
        return p.name
    return f"{p.parent.name}/{p.name}" if with_alpha else p.parent.name


def _dipair_summary_text(sm: dict, counts: bool) -> str:
    """One line of a `dipair_summary` (benchmarks/pairs.py): means ± std, difference, ratios; `counts` names the runs."""
    ms = _mean_std
    n = {k: f" ({sm[k]['n']} {'seeds' if k == 'dipair' else 'run' + ('s' if sm[k]['n'] != 1 else '')})" if counts else ""
         for k in ("dipair", "dse") if k in sm}
    parts = [f"DiPair {ms(sm['dipair'])}{n['dipair']}"] if "dipair" in sm else []
    parts += [f"DSE {ms(sm['dse'])}{n['dse']}"] if "dse" in sm else []
    parts += [f"difference of means {sm['difference_of_means']:+.2f}"] if "difference_of_means" in sm else []
    parts += [f"DiPair mean {sm['mean_ratio_to_cross_encoder']:.3f}x the cross-encoder"] if "mean_ratio_to_cross_encoder" in sm else []
    parts += [f"DSE mean {sm['dse_mean_ratio_to_cross_encoder']:.3f}x"] if "dse_mean_ratio_to_cross_encoder" in sm else []
    if "paired_by_seed" in sm:
        pb = sm["paired_by_seed"]
        parts += ["DiPair - DSE of the same seed " + ", ".join(f"{d:+.2f}" for d in pb["differences"]) +
                  f" (seeds {', '.join(map(str, pb['seeds']))}; median {pb['median']:+.2f})"]
    return "; ".join(parts)


def dipair_quality(*paths: str) -> str:
    """DiPair runs (benchmarks/pairs.py dipair-quality) against their cross-encoder and DSE run: one row per run."""
    lines = [("| DiPair run | N / M / D / layers | select | stage 1 / 2 epochs | augmentation | best epoch (stage) | dev | "
              "test | DSE test | DiPair - DSE | x cross-encoder | SRA cosine before -> after |"),
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    header = lines[:]
    for n, path in enumerate(paths):
        b = _load(path)
        key = "spearman" if "spearman" in b["cross_encoder"] else "accuracy"
        if n:  # the previous file's note ends a table: repeat the header so these rows render as one
            lines += header
        for r in b["dipair"]:
            c, dv, sra = r["config"], r["dev"], r["sra_cosine"]
            aug = (f"{c['augment_random']:,} random + {c['augment_neighbors']} neighbour(s)/sentence"
                   if c["augment_random"] or c["augment_neighbors"] else "none")
            if c.get("augment_tasks"):
                aug += f" + {c['augment_tasks']} train text (<= {c['augment_tasks_max']:,} sentences)"
            if c.get("augment_text"):
                aug += f" + `{Path(c['augment_text']).name}` (<= {c['augment_text_max']:,} sentences)"
            if c.get("augment_edits"):
                aug += f" + {c['augment_edits']} edited cop{'y' if c['augment_edits'] == 1 else 'ies'}/pair"
            loss = f", {c['loss']} loss" if c.get("loss", "bce") != "bce" else ""  # runs before --loss: bce
            lines.append(f"| {Path(r['run']).name} | {c['n']} / {c['m']} / {c['d']} / {c['layers']} | {c['select']}{' + pooled slot' if c.get('pooled_slot') else ''}{loss} | "
                         f"{c['stage1_epochs']} / {c['stage2_epochs']} | {aug} | {_best_epoch(dv)} | "
                         f"{dv[key]:.2f} | {r['test'][key]:.2f} | "
                         + (f"{b['dse']['test'][key]:.2f} | {r['minus_dse_points']:+.2f} | " if "dse" in b else "- | - | ")
                         + f"{r['ratio_to_cross_encoder']:.3f} | {sra['before']:.3f} -> {sra['after']:.3f} |")
        runs = b["dse"].get("runs", [b["dse"]]) if "dse" in b else []
        what = ("no DSE run in this file" if not runs else
                f"`{_dse_name(b['dse']['run'], True)}` is the DSE run" if len(runs) == 1 else
                f"DSE test is the mean of {len(runs)} runs: " + ", ".join(
                    f"`{_dse_name(d['run'])}` {d['test'][key]:.2f}" for d in runs))
        # runs taught by other teachers than --teacher (e.g. a mean of views): each on test
        own = "".join(f"; runs' teacher {' + '.join(_view_names(t))} {m[key]:.2f}"
                      for t, m in (b.get("run_teachers_test") or {}).items())
        note = (f"{b['task']}: {key} x100 on the test split; cross-encoder {b['cross_encoder'][key]:.2f} ({what}){own}; "
                f"{b['date'][:10]}, commit {b['commit'][:7]}, `{Path(path).name}`.")
        lines += ["", note, ""]
        if "summary" in b:
            lines += [f"Mean ± sample std: {_dipair_summary_text(b['summary'], counts=True)}.", ""]
        blends = [("DiPair", r) for r in b["dipair"] if "blend" in r] + [("DSE", d) for d in runs if "blend" in d]
        if blends and "note" not in blends[0][1]["blend"]:
            lines += [f"Each run's head, its fine-tuned encoder's cosine, and the two blended (`--blend`; {key} x100):", "",
                      "| run | student | w (chosen on dev) | dev: head / cosine / blend | test: head / cosine / blend |",
                      "|---|---|---:|---|---|"]
            for kind, r in blends:
                bl, name = r["blend"], (Path(r["run"]).name if kind == "DiPair" else _dse_name(r["run"]))
                lines.append(f"| {name} | {kind} | {bl['weight']:.2f} | {bl['dev']['head_alone']:.2f} / "
                             f"{bl['dev']['cosine_alone']:.2f} / {bl['dev'][key]:.2f} | {r['test'][key]:.2f} / "
                             f"{bl['cosine_alone_test'][key]:.2f} / {bl['test'][key]:.2f} |")
            lines.append("")
        split = next((r for r in b["dipair"] if "oov_split" in r), None)
        if split is not None:  # --oov-split: where the students' gap to the cross-encoder lies
            lines += _oov_split_table(b, split, runs, key)
        bits = next((r["blend_hamming"]["bits"] for r in [*b["dipair"], *runs] if "blend_hamming" in r), None)
        hamming_what = f"The same with minus the Hamming distance of {bits}-bit codes (random projection) for the cosine"
        for name, what in (("summary_cosine_alone", "Each run's fine-tuned encoder, cosine alone"),
                           ("summary_blend", "Head + w x encoder cosine (z-scores, w chosen on dev per run)"),
                           ("summary_blend_hamming", hamming_what)):
            if name in b:
                lines += [f"{what}: {_dipair_summary_text(b[name], counts=False)}.", ""]
    return "\n".join(lines).rstrip()


def _oov_split_table(b: dict, first: dict, runs: list, key: str) -> list[str]:
    """Each model's test metric on the pairs whose sides differ in out-of-vocabulary words, and on the rest."""
    n = first["oov_differs_pairs"]
    total = first["test"]["n"]
    lines = [(f"Test {key} x100 on the {n:,} of {total:,} pairs whose two sides hold different words outside the "
             f"student's vocabulary, and on the other {total - n:,} (`--oov-split`; F1 in brackets where binary):"), "",
             "| model | pairs with differing unknown words | the rest | all |", "|---|---:|---:|---:|"]

    def cell(m: dict) -> str:
        return f"{m[key]:.2f}" + (f" ({m['f1']:.2f})" if "f1" in m else "")

    models = ([("cross-encoder", first["oov_split_cross_encoder"], b["cross_encoder"])] if "oov_split_cross_encoder" in first
              else [])
    models += [(f"DSE `{_dse_name(d['run'])}`", d["oov_split"], d["test"]) for d in runs if "oov_split" in d]
    models += [(f"DiPair `{Path(r['run']).name}`", r["oov_split"], r["test"]) for r in b["dipair"] if "oov_split" in r]
    for name, parts, whole in models:
        lines.append(f"| {name} | {cell(parts['oov_differs'])} | {cell(parts['rest'])} | {cell(whole)} |")
    return [*lines, ""]


def bundle_quality(*paths: str) -> str:
    """Exported pair bundles through the runtime (benchmarks/pairs.py bundle-quality): head and blend per bundle, then
    each head kind's mean ± std per precision."""
    lines = ["| task | bundle | head | precision | bits | w (dev) | dev: head / blend | test: head | test: blend | blend x cross-encoder |",
             "|---|---|---|---|---:|---:|---|---:|---:|---:|"]
    notes = []
    for path in paths:
        b = _load(path)
        key = "spearman" if "spearman" in b["cross_encoder"] else "accuracy"
        for r in b["bundles"]:
            kind = "DiPair" if r["head_kind"] == "dipair" else "DSE"
            dv = r.get("dev_blend") or {}
            blend = r.get("blend")
            lines.append(f"| {b['task']} | {Path(r['bundle']).parent.name} | {kind} | {r['precision']} | {r['bits']} | "
                         + (f"{blend['weight']:.2f} | {dv['head_alone']:.2f} / {dv[key]:.2f} | " if blend else "- | - | ")
                         + f"{r['head'][key]:.2f} | " + (f"{blend[key]:.2f} | {blend['ratio_to_cross_encoder']:.3f} |" if blend else "- | - |"))
        summary = []
        for kind, per in b["summary"].items():
            for precision, parts in per.items():
                if parts.get("blend", {}).get("n", 0) > 1:
                    summary.append(f"{'DiPair' if kind == 'dipair' else 'DSE'} {precision}: head {_mean_std(parts['head'])}, "
                                   f"blend {_mean_std(parts['blend'])} ({parts['blend']['ratio_of_mean']:.3f}x)")
        lead = b.get("dipair_minus_dse", {})
        lead_text = "; ".join(f"{p}: head {v['head']:+.2f}, blend {v['blend']:+.2f}" for p, v in lead.items() if "blend" in v)
        notes.append(f"`{Path(path).name}` ({b['task']}, {key} x100 on test; cross-encoder {b['cross_encoder'][key]:.2f}; "
                     f"{b['date'][:10]}, commit {b['commit'][:7]}, {b['cpu_model']})"
                     + (": " + "; ".join(summary) if summary else "") + (f". DiPair - DSE, {lead_text}" if lead_text else "") + ".")
    return "\n".join(lines + [""] + notes)


def pair_head_on_bundle(path: str, teacher_from: str | None = None) -> str:
    """A head trained on a bundle's frozen encoder (benchmarks/pairs.py bundle-quality on that bundle): the
    cross-encoder, the bundle's cosine alone, the head, the head + cosine blend; the head's bytes and the bundle's.
    With several bundles (seeds), the first one's rows, then the mean ± std over all of them. A run without the
    cross-encoder takes its row from `teacher_from` (another bundle-quality run of the same task and test split)."""
    b = _load(path)
    ce_source = b if "cross_encoder" in b else _load(teacher_from)
    if ce_source.get("task") != b["task"]:
        raise ValueError(f"{teacher_from} scores {ce_source.get('task')}, not {b['task']}")
    ce = ce_source["cross_encoder"]
    key = "spearman" if "spearman" in ce else "accuracy"
    extra = "f1" if key == "accuracy" else "pearson"
    first, n = b["bundles"][0], len(b["bundles"])
    size = first["bytes"]
    lines = [f"| {b['task']} test | {key} x100 | {extra} x100 | x cross-encoder | bytes on device |",
             "|---|---:|---:|---:|---|",
             f"| cross-encoder teacher (MiniLM-L6, fine-tuned) | {ce[key]:.2f} | {ce[extra]:.2f} | 1.000 | - |"]
    which = f" (`{first['bundle']}`)" if n > 1 else ""
    rows = [("the bundle's embedding cosine alone" + (" (threshold on dev)" if key == "accuracy" else ""),
             first["cosine"], "no extra bytes"),
            (f"pair head alone{which}", first["head"], f"{_mb(size['head'])} head"),
            (f"head + cosine blend (w = {first['blend']['weight']:.2f} on dev), what `rerank` ranks by{which}",
             first["blend"], f"bundle with head {_mb(size['bundle'])}")]
    lines += [f"| {what} | {m[key]:.2f} | {m[extra]:.2f} | {m[key] / ce[key]:.3f} | {note} |" for what, m, note in rows]
    if n > 1:
        summary = b["summary"]["pairs"][first["precision"]]
        for part, what in (("head", "pair head alone"), ("blend", "head + cosine blend")):
            lines.append(f"| {what}, {n} seeds: mean ± std | {_mean_std(summary[part])} | | "
                         f"{summary[part]['ratio_of_mean']:.3f} | |")
    def check(encoder: dict) -> str:
        c, before = encoder["check"], encoder.get("check_before_requantization")
        if before is None:
            return f"{c['mean_cosine']:.5f}"
        return f"{c['mean_cosine']:.5f} to the encoder it was requantized from, which had {before['mean_cosine']:.5f}"

    checks = ", ".join(check(r["encoder"]) for r in b["bundles"])
    lines += ["", (f"`{Path(path).name}` ({first['precision']} bundle{'s' if n > 1 else ''}, {b['date'][:10]}, commit "
                   f"{b['commit'][:7]}, {b['cpu_model']}); encoder check at export: mean cosine {checks} to the "
                   "training encoder." + ("" if ce_source is b else
                                          f" Cross-encoder row from `{Path(teacher_from).name}` (same test split)."))]
    return "\n".join(lines)


def web_demo(path: str) -> str:
    """The page (onnxruntime-web, wasm, 1 thread) against the Python runtime (1 thread), side by side
    (benchmarks/web_demo.py): encode and Hamming top-10, and on a DiPair site the page's reranked search step by step."""
    b = _load(path)
    s, m = b["summary"], b["bundle"]
    rows = [("encode p50, 20-token sentence", s["browser_encode_p50_ms"], s["browser_encode_p99_ms"],
             s["python_encode_p50_ms"]),
            ((f"Hamming top-10, {b['catalog_codes']:,} x {m['bits']}-bit codes, p50 of {b['search_queries_per_round']} "
             "queries (catalog rows)"), s["browser_search_p50_ms"], s["browser_search_p99_ms"], s["python_search_p50_ms"])]
    if b.get("dipair"):
        n = s["dipair_rerank_queries"]
        rows += [(f"DiPair search, p50 of {n} queries (catalog sentences): encode the query's token states",
                  s["browser_dipair_encode_p50_ms"], None, s["python_dipair_encode_p50_ms"]),
                 (f"... Hamming top {s['dipair_shortlist']}", s["browser_dipair_search_p50_ms"], None,
                  s["python_dipair_search_p50_ms"]),
                 (f"... rerank of those {s['dipair_shortlist']} by the DiPair head + Hamming blend",
                  s["browser_dipair_rerank_p50_ms"], s["browser_dipair_rerank_p99_ms"], s["python_dipair_rerank_p50_ms"])]
    lines = ["| | browser, wasm 1 thread | Python runtime, 1 thread | browser / Python |", "|---|---:|---:|---:|"]
    for what, web, p99, py in rows:
        web_cell = f"{web:.3f} ms" + (f" (p99 {p99:.2f})" if p99 is not None else "")
        lines.append(f"| {what} | {web_cell} | {py:.3f} ms | {web / py:.1f}x |")
    identical = "equalled" if s["search_top10_identical_to_python"] else "did NOT equal"
    note = (f"The page's Hamming top-10 {identical} the kernel's for every timed query in every round.")
    if b.get("dipair"):
        d = b["dipair"]
        note += (f" DiPair ({d['task']}, catalog states {d['dtype']} {' x '.join(map(str, d['shape']))}): the page's "
                 f"reranked top 10 (rows and order) equalled Python's for at least {s['dipair_top10_equal_queries']} "
                 f"of the {n} queries in each round, rank keys within {s['dipair_key_max_abs_diff']:.1e}.")
    lines += ["", note, "", (f"`{Path(path).name}` ({m['precision']} bundle, {b['date'][:10]}, commit {b['commit'][:7]}, "
                             f"{b['cpu_model']}, {len(b['rounds'])} rounds, medians of per-round p50s, load average "
                             f"{b['load_average_start'][0]:.2f} at start; {b['note']})")]
    return "\n".join(lines)


def token_probe(*paths: str) -> str:
    """lab/pairs_token_probe.py: frozen features, a head over the pooled comparison alone against the same head
    with token states, per source (mean ± sample std over head seeds, and tokens - pooled paired by seed)."""
    lines = [("| features (frozen) | N / M slots | token width | dev: pooled / tokens | test: pooled / tokens | "
             "tokens - pooled, test (per seed) |"), "|---|---|---:|---|---|---|"]
    names = {"student": "SRA student: BiLSTM outputs + sentence vector",
             "teacher": "bi-encoder teacher: wordpieces after [CLS] + mean-pooled vector"}
    foot = []
    for path in paths:
        b = _load(path)
        st = b["settings"]
        for source, sm in b["summary"].items():
            width = next(r["token_width"] for r in b["runs"] if r["source"] == source)
            name = names.get(source, f"`{'/'.join(Path(source).parts[-3:])}`: BiLSTM outputs + sentence vector")
            gains = ", ".join(f"{g:+.2f}" for g in sm["token_gain_test"])
            lines.append(f"| {name} | {st['n']} / {st['m']} | {width} | {_mean_std(sm['dev']['pooled'])} / "
                         f"{_mean_std(sm['dev']['tokens'])} | {_mean_std(sm['test']['pooled'])} / {_mean_std(sm['test']['tokens'])} | "
                         f"**{sm['token_gain_test_mean']:+.2f}** ({gains}) |")
        foot.append(f"`{Path(path).name}` (commit {b['commit'][:7]}, {b['date'][:10]}, {b['cpu_model']})")
    b = _load(paths[0])
    st = b["settings"]
    lines += ["", (f"{b['task']}: {b['metric']} x100, {len(st['seeds'].split(','))} head seeds each; {b['train_pairs']:,} "
                   f"labelled + {b['augment_pairs']:,} transfer pairs ({st['augment_random']:,} random + "
                   f"{st['augment_neighbors']} neighbour(s)/sentence + {st['augment_edits']} edited copies/pair, data seed "
                   f"{st['data_seed']}) scored by `{', '.join(_view_names(st['teacher']))}`; projections + a "
                   f"{st['layers']}-layer head (D {st['d']}) trained {st['epochs']} epochs, the dev-best epoch's test score; "
                   "slot 0 of each side is its projected sentence vector, the comparison slot reads the two; "
                   "`pooled` leaves every token slot empty. " + "; ".join(foot) + ".")]
    return "\n".join(lines)


_CLI_BARE = "(default: %(default)s)"  # what ondevice.cli gives an option declared without help


def _cli_default(action) -> str:
    """An option's default as the reference shows it: blank where --help shows none or it depends on the machine."""
    import argparse

    d, text = action.default, action.help or ""
    if d is None or d is False or d == "" or d == argparse.SUPPRESS or ("default" in text and text != _CLI_BARE):
        return ""
    if isinstance(d, str) and Path(d).is_absolute():  # resolved from $ONDEVICE_DATA or the checkout: the help says
        return ""
    return f"`{d}`"


def _cli_help(action) -> str:
    """An option's help as --help prints it (argparse's %(...)s filled in), as one table cell."""
    if action.help == _CLI_BARE:  # an option declared without help: the default column says it all
        return ""
    text = " ".join((action.help or "").split())
    if "%(" in text:
        text = text % {**vars(action), "default": action.default}
    return text.replace("|", "\\|")


def _cli_option(action) -> str:
    """The flags of an option (with its choices), or a positional argument's name."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    flags = ", ".join(f"`{f}`" for f in action.option_strings)
    if action.choices:
        flags += " {" + ", ".join(str(c) for c in action.choices) + "}"
    return flags


def _cli_parser_table(parser) -> list[str]:
    import argparse

    rows = [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]
    if not rows:
        return []
    lines = ["| option | default | what it does |", "|---|---|---|"]
    lines += [f"| {_cli_option(a)} | {_cli_default(a)} | {_cli_help(a)} |" for a in rows]
    return lines


def cli_reference(*groups: str) -> str:
    """Every `ondevice` command and sub-command with its one-line help and its options (flags, choices, default,
    help), from the argparse parsers themselves. `groups`: command names, or `core` (every command but `pairs`);
    none: all of them."""
    import argparse

    from ondevice.cli import _commands, build_parser

    names = [n for n in _commands() if not groups or n in groups or ("core" in groups and n != "pairs")]
    lines = ["| command | what it does |", "|---|---|"]
    for n in names:
        hidden = " (not listed by `ondevice --help`)" if getattr(_commands()[n], "HIDDEN", False) else ""
        lines.append(f"| [`ondevice {n}`](#ondevice-{n}) | {_commands()[n].HELP.replace('|', chr(92) + '|')}{hidden} |")
    for name in names:
        root = build_parser(name)  # builds only this command's arguments (and imports only what they need)
        sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
        lines += ["", f"## `ondevice {name}`", "", _commands()[name].HELP]
        table = _cli_parser_table(parser)
        if table:
            lines += [""] + table
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {c.dest: c.help for c in action._choices_actions}
                for child_name, child in action.choices.items():
                    text = helps.get(child_name) or child.description or ""  # a step not listed has no help=
                    lines += ["", f"### `ondevice {name} {child_name}`", "", text]
                    table = _cli_parser_table(child)
                    if table:
                        lines += [""] + table
    return "\n".join(lines)


def retrieval(path: str) -> str:
    """benchmarks/retrieval.py: quality, bytes per item and ms per query of each method, per catalog size; the share
    of the codes-to-float gap rescoring closes; the filtered codes-only timings when the file has them."""
    r = _load(path)
    if "rows" not in r:  # a run of the SNLI part alone (--only snli)
        return _retrieval_snli(r, path)
    rows = r["rows"]
    sizes = sorted({int(n) for x in rows for n in x["ms_per_query"]})
    m = r["machine"]
    threads = m.get("threads", 1)
    lines = [f"{r['task']}: {r['queries']:,} queries, {r['corpus']:,} items;",  # prose lines stay under 200 characters
             (f"{r['bundle']}, {r['bits']}-bit codes. ms/query: median of {r['timed_queries']} single-query calls, "
              f"{m['cpu']}, {threads} thread{'s' if threads != 1 else ''}."),
             f"Run `{Path(path).name}` (commit {r['commit'][:12]}, {r['date']}).",
             "", "| method | R@1 | R@10 | MRR@10 | bytes/item | " + " | ".join(f"ms/query @ {n:,}" for n in sizes) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(sizes)]
    for x in rows:
        ms = " | ".join(f"{x['ms_per_query'][str(n)]:.3f}" if str(n) in x["ms_per_query"] else "-" for n in sizes)
        lines.append(f"| {x['method']} | {x['recall@1']:.2f} | {x['recall@10']:.2f} | {x['mrr@10']:.2f} | "
                     f"{x['bytes_per_item']:,} | {ms} |")
    floats = [x for x in rows if "float" in x["method"]]
    codes = [x for x in rows if x["method"].startswith("bundle codes")]
    rescored = [x for x in rows if "rescoring" in x["method"]]
    if floats and codes and rescored:
        f, c, big = floats[0], codes[0], str(sizes[-1])
        parts = []
        for x in rescored:
            closed = []
            for key in ("recall@1", "recall@10", "mrr@10"):
                gap = f[key] - c[key]
                closed.append(f"{100 * (x[key] - c[key]) / gap:.0f}%" if gap > 0 else "no gap")
            slow = x["ms_per_query"].get(big, float("nan")) / c["ms_per_query"].get(big, float("nan"))
            parts.append(f"{x['method'].split(', ')[-1]} {'/'.join(closed)} at {slow:.2f}x")
        lines += ["", (f"Share of the codes-to-float gap closed by rescoring (R@1/R@10/MRR@10), and its time over codes "
                       f"alone at {int(big):,} items:"), "; ".join(parts) + "."]
    filtered = r.get("filtered_codes_ms_per_query")
    if filtered:
        fs = sorted(filtered, key=int)
        kinds = list(filtered[fs[0]])
        lines += ["", "| filtered Hamming search (codes only) | " + " | ".join(f"ms/query @ {int(n):,}" for n in fs) + " |",
                  "|---|" + "---:|" * len(fs)]
        lines += [f"| {k} | " + " | ".join(f"{filtered[n][k]:.3f}" for n in fs) + " |" for k in kinds]
    if r.get("snli"):
        lines += ["", _retrieval_snli(r, path, run_line=False)]
    return "\n".join(lines)


def _retrieval_snli(r: dict, path: str, run_line: bool = True) -> str:
    """The SNLI part of a benchmarks/retrieval.py file: each method's share of the teacher's top-10."""
    s = r["snli"]
    lines = [f"{s['task']}: {s['catalog']:,} sentences, {s['queries']:,} seeded queries (seed {s['seed']});",
             f"teacher {s['teacher']}; {r['bundle']}, {r['bits']}-bit codes."]
    if run_line:
        lines.append(f"Run `{Path(path).name}` (commit {r['commit'][:12]}, {r['date']}).")
    lines += ["", "| method | SNLI top-10 vs teacher (%) |", "|---|---:|"]
    lines += [f"| {x['method']} | {x['top10_vs_teacher']:.2f} |" for x in s["rows"]]
    by = {x["method"]: x["top10_vs_teacher"] for x in s["rows"]}
    f, c = by.get("bundle float (cosine)"), by.get("bundle codes (Hamming)")
    rescored = [(name.split(", ")[-1], v) for name, v in by.items() if "rescoring" in name]
    if f is not None and c is not None and f > c and rescored:
        lines += ["", "Share of the codes-to-float gap closed by rescoring: "
                  + "; ".join(f"{m} {100 * (v - c) / (f - c):.0f}%" for m, v in rescored) + "."]
    return "\n".join(lines)


RENDERERS: dict[str, Callable[..., str]] = {f.__name__: f for f in (
    pair_head_on_bundle, bundle_quality, dipair_quality, distill_ablation, distill_quality, distill_students, distill_targets, distill_speed, pairs_seeds, pairs_teachers,
    binarize_methods, binarize_summary, binarize_seeds, binarize_median, binarize_judged, binarize_starts, hamming_main, hamming_scaling, bundle_sizes, bundle_latency,
    bundle_by_length, bundle_meta, bundle_int8_products, demo_output, walkthrough, eval_table, eval_median, jvm_core, bundle_runs, bundle_summary, coverage, suite, bundle_codes,
    hamming_grid, devices, hamming_ab, hamming_stream_bound, web_demo, token_probe, cli_reference, retrieval)}


def render(text: str) -> str:
    """`text` with every marked block regenerated from its results files."""
    def one(m: re.Match) -> str:
        name, *args = m.group("spec").split()
        return m.group(1) + RENDERERS[name](*args).rstrip("\n") + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report blocks that differ; exit 1 if any")
    a = p.parse_args(argv)
    stale = []
    for doc in DOCS:
        path = ROOT / doc
        old = path.read_text(encoding="utf-8")
        new = render(old)
        if new != old:
            stale.append(doc)
            if not a.check:
                path.write_text(new, encoding="utf-8")
    if a.check and stale:
        print(f"tables differ from benchmarks/results in: {', '.join(stale)}; run `make tables`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
