"""The Android demo's pure-Java core matches Python bit for bit on `ondevice export --golden` files.

The test builds a tiny random student + binarizer, exports a bundle with golden files and the student's fp32
weights, compiles android_demo/core with `javac` and runs two plain-Java mains (no JUnit, no Gradle):
`CoreTests` (tokenizer cases, JSON, Hamming ties, bad bundles: tampered / missing file, wrong format_version)
and `ParityCheck` (token ids, Hamming top-10, Java forward pass vs Python embeddings and codes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "android_demo" / "core"
sys.path.insert(0, str(ROOT / "android_demo" / "tools"))

JAVAC = shutil.which("javac")
JAVA = shutil.which("java")
pytestmark = pytest.mark.skipif(not (JAVAC and JAVA), reason="javac/java (JDK >= 11) not on PATH: cannot build the Java core")


# javac is a Java program too: the C1 JIT alone starts it faster on a small, busy machine.
FAST_JVM_START = ["-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1"]


def _run(cmd: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory) -> Path:
    """android_demo/core compiled for Java 8 (the API level Android's D8 handles everywhere)."""
    out = tmp_path_factory.mktemp("java-classes")
    sources = sorted(str(p) for p in (CORE / "src").rglob("*.java"))
    flags = ["--release", "8", "-Xlint:all", "-Xlint:-options", "-Werror", "-encoding", "UTF-8"]
    res = _run([JAVAC, *FAST_JVM_START, *flags, "-d", str(out), *sources])
    assert res.returncode == 0, f"javac failed:\n{res.stdout}\n{res.stderr}"
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle of a seeded tiny random student, exported with golden files, weights and a float16 projection
    (what int8 bundles store; the default-size test below covers float32)."""
    pytest.importorskip("torch")  # the student is built and exported with torch
    pytest.importorskip("onnx")
    import make_parity_bundle

    return make_parity_bundle.build(tmp_path_factory.mktemp("parity"), projection="float16")


def test_java_forward_pass_for_every_pooling(java_classes, tmp_path):
    """The other poolings against torch directly (quick stand-in bundles: no ONNX export, 150 sentences each)."""
    pytest.importorskip("torch")
    import make_parity_bundle

    paths = [make_parity_bundle.build(tmp_path / p, pooling=p, n=150, exporter="dev") for p in ("mean", "max", "last")]
    res = _java(java_classes, "ParityCheck", *map(str, paths), "--min-bit-agreement", "0.999", "--min-mean-cosine", "0.9999")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("tokens_identical=150/150") == 3 and res.stdout.count("PARITY OK") == 3


def test_tokenizer_agrees_on_every_code_point_the_jvm_knows(java_classes, tmp_path):
    """Python vs Java on each code point of planes 0-3 and 14 alone (NFKC, lowercase, category rules).

    Only characters this JVM's Unicode version does not assign may differ (Java 17: Unicode 13, Python 3.11: 14).
    """
    from ondevice.tokenizer import tokenize

    cps = [cp for cp in [*range(0x40000), *range(0xE0000, 0xF0000)] if not 0xD800 <= cp < 0xE000]
    lines = (f"{cp:x}\t" + "|".join(".".join(f"{ord(c):x}" for c in tok) for tok in tokenize(chr(cp))) + "\n"
             for cp in cps)
    path = tmp_path / "codepoints.tsv"
    path.write_text("".join(lines), encoding="ascii")
    res = _java(java_classes, "UnicodeCheck", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    values = dict(re.findall(r"^(\w+)=(\S+)", res.stdout, flags=re.MULTILINE))
    assert int(values["codepoints"]) == len(cps) and int(values["differ_assigned_in_jvm"]) == 0
    assert int(values["differ_unassigned_in_jvm"]) <= 1000  # a newer Python knows more; only those may differ


def test_core_uses_only_apis_android_24_has():
    """javac --release 8 checks Java 8; these Java 8+ APIs exist on Android only from API 26 (or not at all)."""
    newer = ["java.nio.file", "java.time", "String.join(", "List.of(", "Map.of(", "Set.of(", ".readAllBytes(",
             "java.util.Base64", "java.lang.invoke"]
    for src in (CORE / "src" / "main").rglob("*.java"):
        code = "\n".join(line for line in src.read_text(encoding="utf-8").splitlines()
                         if not line.strip().startswith(("*", "/**", "//")))
        assert not [api for api in newer if api in code], f"{src.name} uses an API Android 7 (API 24) lacks"


def _generated_r(res: Path) -> str:
    """An R class with every id, layout and string the app's resources define (what aapt would generate)."""
    ids = sorted({m for f in (res / "layout").glob("*.xml") for m in re.findall(r'@\+id/(\w+)', f.read_text())})
    layouts = sorted(f.stem for f in (res / "layout").glob("*.xml"))
    strings = sorted(re.findall(r'<string name="(\w+)"', (res / "values" / "strings.xml").read_text()))

    def block(kind: str, names: list[str]) -> str:
        body = " ".join(f"public static final int {n} = {i + 1};" for i, n in enumerate(names))
        return f"public static final class {kind} {{ {body} }}"

    return ("package ai.ondevice.demo; public final class R { " + block("id", ids) + " " + block("layout", layouts)
            + " " + block("string", strings) + " }\n")


def test_app_sources_type_check_against_stubs(java_classes, tmp_path):
    """The app's Java compiles against signature stubs of Android/AndroidX/ONNX Runtime and its own resources."""
    app = ROOT / "android_demo" / "app" / "src" / "main"
    (tmp_path / "R.java").write_text(_generated_r(app / "res"))
    sources = [*(ROOT / "android_demo" / "tools" / "stubs").rglob("*.java"), *(app / "java").rglob("*.java"),
               tmp_path / "R.java"]
    res = _run([JAVAC, *FAST_JVM_START, "--release", "8", "-Xlint:-options", "-encoding", "UTF-8",
                "-cp", str(java_classes), "-d", str(tmp_path / "classes"), *map(str, sources)])
    assert res.returncode == 0, f"the app does not compile:\n{res.stdout}\n{res.stderr}"


def _java(classes: Path, main: str, *args: str) -> subprocess.CompletedProcess:
    return _run([JAVA, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", str(classes), f"ai.ondevice.core.{main}", *args])


def test_core_unit_checks(java_classes, bundle, tmp_path):
    """Java unit checks, bad bundles, and the app's flow on assets written by tools/make_catalog.py."""
    import make_catalog

    sentences = make_catalog.read_sentences(bundle / "golden" / "sentences.jsonl")[:300]
    info = make_catalog.build(bundle, sentences, tmp_path / "assets")
    assert info["count"] == 300 and (tmp_path / "assets" / "bundle" / "student.safetensors").is_file()
    assert not (tmp_path / "assets" / "bundle" / "golden").exists()
    res = _java(java_classes, "CoreTests", str(bundle), "--assets", str(tmp_path / "assets"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "core_tests_failed=0" in res.stdout


def test_parity_with_python_golden_files(java_classes, bundle):
    res = _java(java_classes, "ParityCheck", str(bundle), "--min-bit-agreement", "0.999", "--min-mean-cosine", "0.9999")
    out = res.stdout
    print(out)
    assert res.returncode == 0, out + res.stderr
    values = dict(re.findall(r"^(\w+)=(\S+)", out, flags=re.MULTILINE))

    n_sent = int(values["sentences"])
    same, total = map(int, values["tokens_identical"].split("/"))
    assert n_sent >= 1000 and same == total == n_sent

    q_same, q_total = map(int, values["topk_identical"].split("/"))
    assert q_total > 0 and q_same == q_total

    assert float(values["bit_agreement"]) >= 0.999
    assert float(values["mean_cosine"]) >= 0.9999
    assert "PARITY OK" in out
    _differing_bits_are_sign_ties(bundle, out, n_sent)


def test_golden_files_are_what_the_java_check_reads(bundle):
    """Cheap guard on the golden layout the Java side relies on (shapes, dtypes, tie order)."""
    from ondevice.bits import hamming_reference

    g = bundle / "golden"
    codes, catalog = np.load(g / "codes.npy"), np.load(g / "catalog_codes.npy")
    queries, ids, dist = np.load(g / "queries.npy"), np.load(g / "topk_ids.npy"), np.load(g / "topk_dist.npy")
    assert codes.dtype == catalog.dtype == np.uint8 and ids.shape == dist.shape == (len(queries), 10)
    d = hamming_reference(codes[queries], catalog)
    order = np.lexsort((np.broadcast_to(np.arange(d.shape[1]), d.shape), d), axis=1)[:, :10]
    np.testing.assert_array_equal(order, ids)
    np.testing.assert_array_equal(np.take_along_axis(d, order, axis=1), dist)


@pytest.mark.slow
def test_parity_on_a_student_of_the_default_size(java_classes, tmp_path):
    """The 'identical' claim at the size an app ships: vocabulary 50,000, hidden 256, 384-d, 2048-bit codes."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import make_parity_bundle

    path = make_parity_bundle.build(tmp_path, pooling="mean", size="default")
    # ~1,300 default-size forward passes in plain Java: the full JIT (not C1 only, as for the quick checks), and
    # seconds on an idle core but minutes on a busy shared one
    res = _run([JAVA, "-XX:+UseSerialGC", "-cp", str(java_classes), "ai.ondevice.core.ParityCheck", str(path),
                "--min-bit-agreement", "0.999", "--min-mean-cosine", "0.9999"], timeout=1800)
    assert res.returncode == 0, res.stdout + res.stderr
    values = dict(re.findall(r"^(\w+)=(\S+)", res.stdout, flags=re.MULTILINE))
    n = int(values["sentences"])
    assert n >= 1000 and values["tokens_identical"] == f"{n}/{n}"
    q_same, q_total = map(int, values["topk_identical"].split("/"))
    assert q_total > 0 and q_same == q_total
    _differing_bits_are_sign_ties(path, res.stdout, n)


def _differing_bits_are_sign_ties(bundle: Path, out: str, n: int) -> None:
    """Codes are identical except where a bit's pre-sign value h.A + c is within float rounding of 0.

    Java and Python add the same float32 products in a different order, so embeddings differ by ~1e-7 and a
    value that close to the threshold can land on either side; any other differing bit is a real bug.
    """
    from safetensors.numpy import load_file

    diffs = [tuple(map(int, d.split(":"))) for d in re.findall(r"^code_bit_differs=(\S+)", out, flags=re.MULTILINE)]
    same = int(re.search(r"^codes_identical=(\d+)/", out, flags=re.MULTILINE).group(1))
    assert same == n - len({i for i, _ in diffs})
    w = load_file(str(bundle / "binarizer.safetensors"))
    z = np.load(bundle / "golden" / "embeddings.npy") @ w["projection"] + w["offset"]
    for i, bit in diffs:
        assert abs(z[i, bit]) < 1e-5, f"sentence {i} bit {bit}: pre-sign value {z[i, bit]:.3g} is not a tie"
    assert len(diffs) <= max(1, n * z.shape[1] // 100_000), f"{len(diffs)} differing bits is more than rounding explains"


def test_pair_head_parity_on_the_shipped_bundle(java_classes):
    """The Java core scores the pretrained bundle's pair head like the golden fp32 graph, blend keys included."""
    from ondevice.pretrained import pretrained_path

    res = _java(java_classes, "PairParityCheck", str(pretrained_path()), "--max-abs-diff", "1e-5")
    values = dict(re.findall(r"^(\w+)=(\S+)", res.stdout, flags=re.MULTILINE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert values["pairs"] == "500" and values["decisions_identical"] == "500/500" and float(values["max_abs_diff"]) <= 1e-5
    assert values["blend_pairs"] == "500" and float(values["blend_max_abs_diff"]) <= 1e-5
    assert values["blend_decisions_identical"] == "500/500"  # PairHead.decide: what the app shows
