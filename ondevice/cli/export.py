"""ondevice export: student + binarizer -> one bundle (ONNX + TorchScript + tokenizer + manifest) an app embeds."""

from __future__ import annotations

import argparse

from ondevice.binarize import Binarizer
from ondevice.corpus import read_exact_lines
from ondevice.errors import OndeviceError
from ondevice.export.bundle import CHOICES, PROJECTIONS, ExportConfig, export
from ondevice.io import check_finite_json, check_out_dir, read_json
from ondevice.student import Student

HELP = "export a student and its binarizer as one verified bundle (encoder.onnx, encoder.pt, manifest.json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = ExportConfig()
    p.add_argument("--student", required=True, help="student dir written by `ondevice distill`")
    p.add_argument("--binarizer", required=True, help="binarizer dir written by `ondevice binarize`")
    p.add_argument("--out", required=True, help="bundle folder to write (replaces an earlier bundle there)")
    p.add_argument("--precision", default=d.precision, choices=CHOICES,
                   help="fp32, int8 (smallest: what apps ship), or both (as OUT/fp32 and OUT/int8)")
    p.add_argument("--golden", action="store_true", help="also write golden/ files other runtimes are tested against")
    p.add_argument("--golden-sentences", default=None,
                   help="with --golden: extra golden sentences, one per line, UTF-8, .gz allowed (your own text: it "
                        "is copied into the bundle)")
    p.add_argument("--with-weights", action="store_true",
                   help="also write student.safetensors (fp32) for runtimes with their own forward pass; with "
                        "--precision both it goes into fp32/ only (int8/ stays small)")
    p.add_argument("--no-torchscript", action="store_true", help="leave encoder.pt out (ONNX only: a smaller bundle)")
    p.add_argument("--projection", default=d.projection, choices=PROJECTIONS,
                   help="how the binarizer projection is stored: auto = float16 in int8 bundles (half its bytes; "
                        "codes from the rounded weights everywhere), float32 in fp32 ones")
    p.add_argument("--int8-weight-bits", type=int, default=d.int8_weight_bits, choices=(7, 8),
                   help="int8 LSTM weights: 7 bits (default: exact and ~1.5x faster on x86 CPUs without VNNI) or 8 "
                        "(one bit more precision)")
    p.add_argument("--eval", default=None, help="JSON file with an evaluation summary to put in the manifest")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the generated golden and check sentences")


def run(a: argparse.Namespace) -> int:
    check_out_dir(a.out)
    named = (a.golden_sentences,) if a.golden_sentences else ()
    config = ExportConfig(precision=a.precision, golden=a.golden, golden_extra=named, with_weights=a.with_weights,
                          torchscript=not a.no_torchscript, projection=a.projection, seed=a.seed,
                          int8_weight_bits=a.int8_weight_bits)
    config.validate()  # before any file is read: --golden-sentences without --golden, ...
    if a.golden_sentences:  # .gz allowed like a corpus, but every character kept, and text that is not UTF-8 refused
        config.golden_extra = tuple(read_exact_lines(a.golden_sentences, "--golden-sentences"))
    evaluation = check_finite_json(read_json(a.eval, "--eval summary"), f"--eval {a.eval}") if a.eval else None
    if evaluation is not None and not isinstance(evaluation, dict):
        raise OndeviceError(f"--eval {a.eval} must hold a JSON object")
    student = Student.load(a.student)
    written = export(student, Binarizer.load(a.binarizer), a.out, config, student_dir=a.student, evaluation=evaluation)
    for folder in written:
        total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        onnx_mb = (folder / "encoder.onnx").stat().st_size / 1e6
        print(f"bundle written to {folder} ({total / 1e6:.2f} MB, encoder.onnx {onnx_mb:.2f} MB)")
    return 0
