"""Build the pretrained default bundle shipped in the package (ondevice/pretrained/<name>/) from a student dir.

    # 1. choose the binarizer on STS-B dev and stage the int8 bundle beside the student
    .venv/bin/python recipes/make_pretrained.py --student RUN/student
    # 2. measure it (benchmarks/distill_quality.py --student RUN/student --bundle RUN/student-bundle), then ship it
    .venv/bin/python recipes/make_pretrained.py --student RUN/student \
        --choice benchmarks/results/make_pretrained-<time>.json --quality benchmarks/results/distill_quality-<time>.json

A bundle shipped with 8-bit int8 LSTM weights (before 2026-11-28) is re-rounded to 7 bits without its student
folder (export/requantize.py: exact and ~1.5x faster on x86 CPUs without VNNI; the pair head comes along):

    .venv/bin/python -m ondevice requantize --bundle pretrained --out RUN/requantized
    .venv/bin/python -m ondevice unpack --bundle pretrained --out RUN/unpacked      # the network it approximates
    .venv/bin/python benchmarks/distill_quality.py --student RUN/unpacked --bundle RUN/requantized
    .venv/bin/python recipes/make_pretrained.py --requantize --quality benchmarks/results/distill_quality-<time>.json

Step 1 fits 2048-bit binarizers (`--methods`) on the student's vectors of 50,000 Wikipedia sentences past the
training prefix (a binarizer is unsupervised), picks the one with the best STS-B *dev* Spearman of Hamming
similarity, saves it beside the student and exports the student with it as an int8 bundle with golden files.
Step 2 exports again with the measured scores in the manifest and model card and copies the bundle into
`ondevice/pretrained/<name>/`. Each step writes `benchmarks/results/make_pretrained-<time>.json`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ondevice.export.bundle import ExportConfig, export

from ondevice.binarize import Binarizer
from ondevice.corpus import WIKI_RELPATH, default_data_dir, read_corpus
from ondevice.eval import sts_spearman
from ondevice.io import read_json, write_json
from ondevice.pretrained import ROOT
from ondevice.results import results_path, run_metadata
from ondevice.runtime import Bundle
from ondevice.student import Student


class Codes:
    """An encoder view that returns packed codes (sts_spearman then scores by negative Hamming distance)."""

    def __init__(self, student: Student, binarizer: Binarizer):
        self.student, self.binarizer = student, binarizer

    def encode(self, texts):
        return self.binarizer.transform(self.student.encode(texts))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, default=None, help="student dir (steps 1 and 2)")
    p.add_argument("--requantize", action="store_true",
                   help="re-round the shipped bundle's 8-bit LSTM weights to 7 bits, with --quality of the new bundle")
    p.add_argument("--choice", type=Path, default=None, help="step 2: the step-1 results JSON (binarizer already chosen)")
    p.add_argument("--quality", type=Path, default=None, help="step 2: distill_quality results JSON of the bundle (model card)")
    p.add_argument("--name", default="default")
    p.add_argument("--bits", type=int, default=2048)
    p.add_argument("--methods", nargs="+", default=["random", "ae-sp", "threshold"])
    p.add_argument("--fit-sentences", type=int, default=50000)
    p.add_argument("--fit-offset", type=int, default=1_100_000, help="skip this many wiki lines (the training prefix)")
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--torchscript", action="store_true", help="ship encoder.pt too (larger)")
    p.add_argument("--golden-count", type=int, default=64, help="golden sentences shipped (they cost ~2.3 KB each)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.requantize:
        return requantize(a)
    if a.student is None:
        p.error("--student is required (unless --requantize)")

    student = Student.load(a.student)
    if a.choice is None:
        lines = read_corpus(a.data / WIKI_RELPATH)
        fit = lines[a.fit_offset : a.fit_offset + a.fit_sentences] or lines[-a.fit_sentences :]
        vectors = student.encode(fit)
        rows, best = {}, None
        for method in a.methods:
            bits = student.dim if method == "threshold" else a.bits
            binarizer = Binarizer.fit(vectors, method=method, bits=bits, seed=a.seed)
            dev = round(sts_spearman(Codes(student, binarizer), a.data, "stsb", "dev"), 2)
            rows[method] = {"bits": bits, "stsb_dev_hamming": dev}
            print(method, rows[method], flush=True)
            if bits == a.bits and (best is None or dev > rows[best[0]]["stsb_dev_hamming"]):
                best = (method, binarizer)
        method, binarizer = best
        binarizer_dir = a.student.parent / f"{a.student.name}-binarizer"
        binarizer.save(binarizer_dir)  # step 2 and benchmarks/bundle.py use this one
    else:
        choice = read_json(a.choice, "make_pretrained step-1 results")
        rows, method, binarizer_dir = choice["binarizers"], choice["chosen"], Path(choice["binarizer_dir"])
        binarizer = Binarizer.load(binarizer_dir)
    evaluation = {"binarizer_choice_on_stsb_dev": rows, "chosen": method}
    if a.quality:
        evaluation["measured"] = _measured(a.quality)
    staging = a.student.parent / f"{a.student.name}-bundle"
    export(student, binarizer, staging, ExportConfig(precision="int8", golden=True, golden_count=a.golden_count,
                                                 torchscript=a.torchscript, seed=a.seed),
           student_dir=a.student, evaluation=evaluation)
    Bundle.load(staging)  # checksums and a full load before anything is copied into the package
    size = sum(f.stat().st_size for f in staging.rglob("*") if f.is_file())
    result = {**run_metadata(0), "student_dir": str(a.student), "binarizer_dir": str(binarizer_dir), "bundle_dir": str(staging),
              "bytes": size, "binarizers": rows, "chosen": method, "quality_file": str(a.quality) if a.quality else None}
    if a.choice is not None:
        target = ROOT / a.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(staging, target)
        Bundle.load(target)
        result["package_dir"] = str(target.relative_to(ROOT.parents[1]))
    out = results_path("make_pretrained")
    write_json(out, result)
    print(f"bundle {result.get('package_dir', staging)} ({size / 1e6:.2f} MB), binarizer {method}; results {out}")
    return 0


def _measured(path: Path) -> dict:
    q = read_json(path, "quality results")
    return {"results_file": path.name, "commit": q.get("commit"), "scores_x100": q["scores_x100"],
            "sentences_per_second": q["sentences_per_second"]}


def requantize(a: argparse.Namespace) -> int:
    """The shipped bundle with 7-bit LSTM weights; its eval: the binarizer choice (same binarizer), the new bundle's
    measurements (`--quality`) and, kept beside them, those of the encoder it replaces."""
    from ondevice.export.requantize import requantize_bundle

    from ondevice.io import cache_dir

    if a.quality is None:
        sys.exit("make_pretrained.py: --requantize needs --quality, the distill_quality results of the requantized bundle")
    target = ROOT / a.name
    old = Bundle.load(target).manifest.get("eval", {})
    evaluation = {k: old[k] for k in ("binarizer_choice_on_stsb_dev", "chosen") if k in old}
    evaluation["measured"] = _measured(a.quality)
    if "measured" in old:
        evaluation["measured_before_requantization"] = old["measured"]
    staging = cache_dir() / "bench" / f"pretrained-{a.name}-requantized"
    record = requantize_bundle(target, staging, evaluation=evaluation, data=a.data)
    size = sum(f.stat().st_size for f in staging.rglob("*") if f.is_file())
    shutil.rmtree(target)
    shutil.copytree(staging, target)
    Bundle.load(target)
    result = {**run_metadata(0), "requantized": record, "bundle_dir": str(staging), "bytes": size,
              "quality_file": str(a.quality), "package_dir": str(target.relative_to(ROOT.parents[1]))}
    out = results_path("make_pretrained")
    write_json(out, result)
    print(f"bundle {result['package_dir']} ({size / 1e6:.2f} MB), LSTM weights 7-bit; results {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
