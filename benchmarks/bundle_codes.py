"""What the int8 bundle's float16 projection and range anchors do to its size and its codes.

    nice .venv/bin/python benchmarks/bundle_codes.py --student RUN/student --binarizer RUN/student-binarizer

Sizes: the student exported as make_pretrained.py ships it (int8, 64 golden sentences, no encoder.pt), once with
the binarizer projection stored as float32 and once as float16 (the default for int8 bundles).
Codes: every distinct STS-B **dev** sentence through five graphs built from the same weights, one thread:
the fp32 graph with the float32 projection (the reference), the fp32 graph with the float16 projection, the
int8 graph without range anchors run one sentence per call (the shipped bundle before this change), and the
int8 graph with anchors (float32 / float16 projection) run in length-sorted batches of 64. Per graph: STS-B dev
Spearman x100 of cosine and of -Hamming, bit agreement and mean cosine against the reference, and for the int8
graphs whether batches of 64 give exactly the one-sentence results.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from ondevice.corpus import default_data_dir
from ondevice.results import start_run, write_result


class GraphEncoder:
    """One ONNX graph in an onnxruntime session (1 thread); `batch` 1 runs one sentence per call."""

    def __init__(self, model, tokenizer, batch: int):
        from ondevice.ort_session import cpu_session, session_options

        self.session = cpu_session(model.SerializeToString(), session_options(1, inter_op=1))
        self.tokenizer, self.batch = tokenizer, batch

    def embed(self, texts: list[str], batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        batch = batch or self.batch
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [np.zeros((len(texts), o.shape[1]), np.float32 if o.name == "embedding" else np.uint8)
               for o in self.session.get_outputs()]
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            ids, lengths = self.tokenizer.batch([texts[i] for i in idx])
            out[0][idx], out[1][idx] = self.session.run(["embedding", "code"], {"ids": ids, "lengths": lengths})
        return out[0], out[1]


class View:
    """sts_spearman's encoder protocol over precomputed vectors or codes of known texts."""

    def __init__(self, texts: list[str], values: np.ndarray):
        self.row, self.values = {t: i for i, t in enumerate(texts)}, values

    def encode(self, texts):
        return self.values[[self.row[t] for t in texts]]


def _bundle_bytes(student, binarizer, projection: str, work: Path) -> dict:
    from ondevice.export.bundle import ExportConfig, export

    out = work / f"bundle-{projection}"
    export(student, binarizer, out, ExportConfig(precision="int8", golden=True, golden_count=64, torchscript=False,
                                                 projection=projection))
    files = {p.relative_to(out).as_posix(): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    return {"total": sum(files.values()), "files": files}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", required=True)
    p.add_argument("--binarizer", required=True)
    p.add_argument("--data", default=str(default_data_dir()))
    p.add_argument("--results-dir", default=None)
    a = p.parse_args(argv)
    meta = start_run(threads=1)

    import torch
    from ondevice.export.bundle import _state, stored_projection
    from ondevice.export.onnx_graph import build_graph
    from ondevice.export.quantize import build_int8_graph

    from ondevice.binarize import Binarizer
    from ondevice.bits import unpack
    from ondevice.eval import sts_spearman
    from ondevice.eval.data import read_stsb
    from ondevice.student import Student

    torch.set_num_threads(1)
    student, binarizer = Student.load(a.student), Binarizer.load(a.binarizer)
    with tempfile.TemporaryDirectory(prefix="ondevice-codes-") as tmp:
        sizes = {proj: _bundle_bytes(student, binarizer, proj, Path(tmp)) for proj in ("float32", "float16")}

    pairs = read_stsb(Path(a.data), "dev")
    texts = list(dict.fromkeys(pairs.a + pairs.b))
    state, cfg, tok = _state(student), student.config, student.tokenizer
    A, c = binarizer.affine()
    A16 = stored_projection(A, "float16").astype(np.float32)
    graphs = {
        "fp32 graph, float32 projection (reference)": (build_graph(cfg, state, A, c), 64),
        "fp32 graph, float16 projection": (build_graph(cfg, state, A16, c, projection_dtype="float16"), 64),
        "int8 without anchors, float32 projection, one sentence per call (before)":
            (build_int8_graph(cfg, state, A, c, range_anchors=False), 1),
        "int8 with anchors, float32 projection, batches of 64": (build_int8_graph(cfg, state, A, c), 64),
        "int8 with anchors, float16 projection, batches of 64 (after)":
            (build_int8_graph(cfg, state, A16, c, projection_dtype="float16"), 64),
    }
    rows, ref = [], None
    for name, (model, batch) in graphs.items():
        enc = GraphEncoder(model, tok, batch)
        emb, codes = enc.embed(texts)
        ref = ref or (emb, codes)
        cos = (emb * ref[0]).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref[0], axis=1))
        row = {"name": name, "stsb_dev_cosine": round(sts_spearman(View(texts, emb), a.data, "stsb", "dev"), 3),
               "stsb_dev_hamming": round(sts_spearman(View(texts, codes), a.data, "stsb", "dev"), 3),
               "bit_agreement_vs_reference": float((unpack(codes, binarizer.bits) == unpack(ref[1], binarizer.bits)).mean()),
               "codes_identical_to_reference": float((codes == ref[1]).all(1).mean()),
               "mean_cosine_vs_reference": float(cos.mean())}
        if "int8" in name:  # the other batching: one sentence per call vs batches of 64
            other = enc.embed(texts, batch=64 if batch == 1 else 1)
            row["batch_64_equals_one_per_call"] = {"embeddings": bool(np.array_equal(other[0], emb)),
                                                   "codes_rows_identical": float((other[1] == codes).all(1).mean())}
        rows.append(row)
        print(row, flush=True)
    results = {"student": a.student, "binarizer": a.binarizer, "bits": binarizer.bits, "sentences": len(texts),
               "shipped_configuration_bytes": sizes, "graphs": rows}
    print(f"sizes: float32 projection {sizes['float32']['total'] / 1e6:.2f} MB, float16 {sizes['float16']['total'] / 1e6:.2f} MB")
    print(f"wrote {write_result('bundle_codes', results, meta, root=a.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
