"""Which encoder graph suits ONNX Runtime Web: fp32, int8 (DynamicQuantizeLSTM), or int8 embedding + float LSTM.

    .venv/bin/python benchmarks/web_variants.py --student S --binarizer B --sentences catalog.txt
        # -> benchmarks/results/web_variants_<time>.json

Builds the three graphs from one student + binarizer with the exporter's own builders (`build_graph`,
`build_int8_graph`; the third is `build_graph(..., int8_embedding=True)` without dynamic quantization: the
row-wise int8 embedding table dequantized in the graph, then the float LSTM), and measures
- size of each encoder.onnx;
- quality against the fp32 graph on the first --n sentences (Python onnxruntime, one sentence per run as in an
  app): mean cosine of the embeddings, bit agreement of the codes, and overlap of the Hamming top-10 of the first
  100 sentences over all n (ties to the smaller row);
- single-sentence latency of a 20-token sentence in onnxruntime-web's WebAssembly build under Node (the same
  .wasm the page runs; 1 thread) and in Python onnxruntime (1 thread), side by side, in rounds (one Node
  process per round, the variants' order rotated); figures are medians of the per-round p50s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ondevice.results import create_new, stamped

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web_demo"

from web_demo import cpu_model, git_state, twenty_tokens, versions


def topk_overlap(ref: np.ndarray, other: np.ndarray, queries: int, k: int = 10) -> float:
    from ondevice.export.golden import hamming_topk

    _, a = hamming_topk(ref[:queries], ref, k)
    _, b = hamming_topk(other[:queries], other, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a.tolist(), b.tolist())]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--student", required=True, type=Path)
    p.add_argument("--binarizer", required=True, type=Path)
    p.add_argument("--sentences", required=True, type=Path, help="quality sentences, one per line")
    p.add_argument("--n", type=int, default=2000, help="sentences for the quality figures")
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args(argv)

    from ondevice.export.bundle import _state
    from ondevice.export.onnx_graph import build_graph
    from ondevice.export.quantize import build_int8_graph

    from ondevice.binarize import Binarizer
    from ondevice.catalog import read_sentences
    from ondevice.ort_session import cpu_session, session_options
    from ondevice.student import Student

    student, binarizer = Student.load(a.student), Binarizer.load(a.binarizer)
    state, (A, c), cfg = _state(student), binarizer.affine(), student.config
    graphs = {"fp32": build_graph(cfg, state, A, c), "int8": build_int8_graph(cfg, state, A, c),
              "int8-embedding+fp32-lstm": build_graph(cfg, state, A, c, int8_embedding=True)}
    texts = read_sentences(a.sentences)[: a.n]
    tok = student.tokenizer
    rows = [tok.ids(t) for t in texts]
    started = datetime.now(timezone.utc)
    load_start = os.getloadavg()
    result: dict = {"benchmark": "web_variants", "date": started.isoformat(timespec="seconds"),
                    "command": " ".join([Path(sys.executable).name, *sys.argv]), "cpu_model": cpu_model(),
                    "cpu_count": os.cpu_count(), "threads": 1, "load_average_start": load_start,
                    "versions": versions(WEB), "student": str(a.student), "binarizer": str(a.binarizer),
                    "vocab": len(tok), "quality_sentences": len(texts), "variants": {}}
    with tempfile.TemporaryDirectory(prefix="ondevice-web-variants-") as tmp:
        paths, sessions, outputs = {}, {}, {}
        opts = session_options(1, inter_op=1)
        for name, model in graphs.items():
            paths[name] = Path(tmp) / f"{name}.onnx"
            paths[name].write_bytes(model.SerializeToString())
            sessions[name] = cpu_session(str(paths[name]), opts)
            embs, codes = [], []
            for r in rows:
                e, code = sessions[name].run(["embedding", "code"], {"ids": np.asarray([r], np.int64),
                                                                     "lengths": np.asarray([len(r)], np.int64)})
                embs.append(e[0])
                codes.append(code[0])
            outputs[name] = (np.asarray(embs), np.asarray(codes))
        ref_e, ref_c = outputs["fp32"]
        bits = binarizer.bits
        from ondevice.bits import unpack

        for name, (e, code) in outputs.items():
            cos = (e * ref_e).sum(1) / np.maximum(np.linalg.norm(e, axis=1) * np.linalg.norm(ref_e, axis=1), 1e-12)
            result["variants"][name] = {
                "encoder_onnx_bytes": paths[name].stat().st_size,
                "ops": sorted({n.op_type for n in graphs[name].graph.node}),
                "mean_cosine_vs_fp32": float(cos.mean()),
                "bit_agreement_vs_fp32": float((unpack(code, bits) == unpack(ref_c, bits)).mean()),
                "top10_overlap_vs_fp32": topk_overlap(ref_c, code, min(100, len(texts))),
            }

        text = twenty_tokens(tok)
        ids = tok.ids(text)
        feed = {"ids": np.asarray([ids], np.int64), "lengths": np.asarray([len(ids)], np.int64)}
        web_rounds: dict[str, list[float]] = {n: [] for n in graphs}
        py_rounds: dict[str, list[float]] = {n: [] for n in graphs}
        names = list(graphs)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[: r % len(names)]  # rotated: no variant is always timed first
            res = subprocess.run(["node", "bench/time_encode.mjs", json.dumps(ids), str(a.runs), "1",
                                  *[str(paths[n]) for n in order]], cwd=WEB, capture_output=True, text=True,
                                 check=True)
            web = json.loads(res.stdout)
            for n in order:
                web_rounds[n].append(web[str(paths[n])][0])
                for _ in range(30):
                    sessions[n].run(None, feed)
                t = []
                for _ in range(a.runs):
                    s = time.perf_counter()
                    sessions[n].run(None, feed)
                    t.append((time.perf_counter() - s) * 1e3)
                py_rounds[n].append(statistics.median(t))
        for n in graphs:
            v = result["variants"][n]
            v["wasm_node_p50_ms_rounds"] = web_rounds[n]
            v["python_ort_p50_ms_rounds"] = py_rounds[n]
            v["wasm_node_p50_ms"] = statistics.median(web_rounds[n])
            v["python_ort_p50_ms"] = statistics.median(py_rounds[n])
    result["sentence"] = text
    result["load_average_end"] = os.getloadavg()
    result["commit"], result["dirty"] = git_state()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    out = create_new(a.out_dir, stamped("web_variants"), json.dumps(result, indent=2) + "\n")
    for n, v in result["variants"].items():
        print(f"{n:26s} {v['encoder_onnx_bytes'] / 1e6:6.2f} MB  cos {v['mean_cosine_vs_fp32']:.5f}  "
              f"bits {v['bit_agreement_vs_fp32']:.4f}  top10 {v['top10_overlap_vs_fp32']:.3f}  "
              f"wasm {v['wasm_node_p50_ms']:.3f} ms  python {v['python_ort_p50_ms']:.3f} ms")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
