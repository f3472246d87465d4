"""Every benchmarks/*.py runs end to end with tiny sizes (slow: each starts a Python process and real models)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))

# Tiny arguments per script ({tmp}: a scratch folder). A new benchmark must add its line here.
TINY = {
    "binarize_quality": ["--train-sentences", "300", "--methods", "random", "ae", "--bits", "64",
                         "--hyper", '{"epochs": 1}', "--quiet", "--out-dir", "{tmp}/out", "--bundle", "pretrained"],
    "binarize_epochs": ["--train-sentences", "300", "--held-out", "100", "--bits", "64", "--epochs", "2", "--teacher-recall",
                        "--hyper", '{"input": "whiten", "init": "pca"}'],
    "binarize_starts": ["--train-sentences", "300", "--held-out", "100", "--bits", "64", "--seeds", "2"],
    "bundle": ["--runs", "30", "--sentences", "64", "--lengths", "5", "10", "--length-runs", "20", "--no-teacher",
               "--workdir", "{tmp}/work"],
    "distill_ablation": ["--sentences", "300", "--epochs", "1", "--variants", "hidden_size=16"],
    # Its smallest run still embeds ~30k evaluation sentences with the teacher (13 min here): too long for CI.
    "distill_quality": ["--help"],
    # These three need a trained student, a site or a package folder to write into; --help at least loads them
    # (tests/test_web_demo.py and tests/test_pretrained.py exercise what they drive).
    # needs a trained student and binarizer (tests/test_runtime.py and tests/test_export.py check the two changes
    # it measures: rows independent with range anchors, the float16 projection)
    "bundle_codes": ["--help"],
    "web_demo": ["--help"],
    "cli_search": ["--n", "2000", "--runs", "2", "--cold-runs", "1", "--out-dir", "{tmp}/out"],
    # Added on main while this list was written; --help only until their authors give tiny sizes.
    "scale": ["--help"],
    "web_variants": ["--help"],
    # Its quality/speed modes need a trained cross-encoder, DSE run and pair bundle (tests/test_pairs_*.py exercise
    # what they drive); dipair-speed runs with a random head of the given shape and the same-cost packaged MiniLM.
    "pairs": ["dipair-speed", "--n", "4", "--m", "4", "--d", "32", "--ffn", "64", "--pairs", "500", "--batch", "256",
              "--ce-pairs", "8", "--repeats", "1", "--pooled-slot"],
    # needs the tiny pair fixtures: test_pairs_suite_runs_with_tiny_models below runs it end to end
    "pairs_suite": ["--help"],
    "jvm_core": ["--quick"],
    # needs a CUDA GPU (it compares the GPU with the CPU); the gpu-marked tests of tests/test_devices.py train what it times
    "devices": ["--help"],
    "plots": ["--out", "{tmp}/plots"],
    "tables": ["--check"],
    # a real run is the whole suite; test_suite_record_from_a_real_log below records a small pytest run's output
    "suite": ["--help"],
    # QQP retrieval on the first 500 corpus questions; timing on 3,000 items
    "retrieval": ["--max-corpus", "500", "--timed", "5", "--timing-n", "3000", "--multipliers", "2", "4",
                  "--snli-queries", "50"],
    "walkthrough": [],  # README's first ten minutes with the shipped model: ~10 s
    "hamming_prefetch_ab": ["--sizes", "20000", "--bits", "64", "--distances", "0", "512", "--set", "COUNT_FIRST_MAX_WORDS=0,1",
                            "--rounds", "1", "--budget", "0.01", "--results-dir", "{tmp}/out"],
    "hamming_stream_bound": ["--sizes", "4000", "--bits", "64", "256", "--threads", "1", "2", "--rounds", "2", "--budget",
                             "0.01", "--results-dir", "{tmp}/out"],
    "hamming_knn": ["--sizes", "1000", "20000", "--bits", "256", "--threads", "1", "2", "--batch", "4",
                    "--batch-n", "20000", "--budget", "0.05", "--read-min", "20000", "--rounds", "2", "--out-dir", "{tmp}/out"],
}
# Benchmarks that write a results file (checked below).
WRITES_RESULTS = {"binarize_quality", "binarize_epochs", "binarize_starts", "bundle", "jvm_core", "distill_ablation", "walkthrough",
                  "retrieval"}


def _bench_copy(tmp_path: Path, **env_extra: str) -> tuple[Path, dict[str, str]]:
    """A copy of benchmarks/ in tmp_path with an empty results/ (results files never land in the repository) and the
    environment that sends them there, with its own cache unless `env_extra` names one."""
    bench = shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("results"))
    (bench / "results").mkdir()
    env = {**os.environ, "ONDEVICE_CACHE": str(tmp_path / "cache"), "ONDEVICE_RESULTS": str(bench / "results"), **env_extra}
    return bench, env


def _bench_run(bench: Path, env: dict[str, str], script: str, args: list[str]) -> subprocess.CompletedProcess:
    """Run benchmarks/SCRIPT.py from the copy (repository root as working directory)."""
    return subprocess.run([sys.executable, str(bench / f"{script}.py"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def test_the_recipe_loads():
    """recipes/ (how the shipped model is built) keeps working; lab/ probes are records, outside the suite."""
    for script in ("recipes/make_pretrained.py",):
        res = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=ROOT, capture_output=True, text=True,
                             timeout=300, check=False)
        assert res.returncode == 0 and "usage:" in res.stdout, script + res.stderr[-2000:]


def test_every_benchmark_has_tiny_arguments():
    assert set(SCRIPTS) == set(TINY), "give every benchmarks/*.py tiny arguments in TINY"


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_runs_with_tiny_sizes(name, shared_data, slow_cache, tmp_path):
    bench, env = _bench_copy(tmp_path, ONDEVICE_CACHE=str(slow_cache), ONDEVICE_DATA=str(shared_data))
    res = _bench_run(bench, env, name, [a.replace("{tmp}", str(tmp_path)) for a in TINY[name]])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    if name in WRITES_RESULTS:
        written = list((bench / "results").glob(f"{name}*.json"))
        assert written and all('"commit"' in p.read_text() for p in written), written
    if name == "binarize_quality":  # the student half came from the shipped bundle's embeddings
        import json

        (found,) = (bench / "results").glob("binarize_quality*.json")
        encoders = {r["encoder"]: r for r in json.loads(found.read_text())["results"]}
        assert set(encoders) == {"teacher", "student"}
        assert encoders["student"]["student"] == "bundle pretrained" and encoders["student"]["bundle_manifest_sha256"]
        assert {(row["method"], row["bits"]) for row in encoders["student"]["rows"]} == {("random", 64), ("ae", 64)}
    if name == "bundle":  # the int8 bundles timed with exact products and with onnxruntime's default session
        import json

        (found,) = (bench / "results").glob("bundle-*.json")
        results = json.loads(found.read_text())["results"]
        products = results["int8_products"]
        assert set(products) == {"this run's int8 bundle (7-bit weights)", "the same student, 8-bit weights",
                                 "the shipped bundle (7-bit weights)"}
        for label, ab in products.items():
            assert ab["calls"] >= 50 and ab["exact_p50_ms"] > 0 and ab["ratio"] > 0
            assert 0.9 < ab["default_vs_exact_cosine"] <= 1.0 + 1e-6 and 0.5 < ab["default_vs_exact_bits"] <= 1.0
            if "7-bit" in label:  # u8 x s8 pair sums cannot saturate: both sessions compute the same on any CPU
                assert ab["default_vs_exact_bits"] == 1.0 and ab["default_vs_exact_cosine"] == pytest.approx(1.0, abs=1e-6)
        assert 0.9 < results["int8_quality_8bit_weights"]["mean_cosine"] <= 1.0 + 1e-6
    if name == "binarize_starts":  # every projection kind scored on both splits for each seed, and summarized
        import json

        (found,) = (bench / "results").glob("binarize_starts*.json")
        res = json.loads(found.read_text())["results"]
        kinds = {"random", "orthogonal", "whiten-random", "whiten-orthogonal"}
        assert {(r["codes"], r["seed"]) for r in res["rows"]} == {(k, s) for k in kinds for s in (0, 1)}
        assert {r["codes"] for r in res["summary"]} == kinds and all(r["seeds"] == 2 for r in res["summary"])
        assert all(-100 <= r["stsb_test"] <= 100 and 0 <= r["top10_recall"] <= 1 for r in res["rows"])
    if name == "walkthrough":  # every step printed what README shows, and the rendered block hides the checkout path
        import json

        (found,) = (bench / "results").glob("walkthrough-*.json")
        steps = json.loads(found.read_text())["results"]["steps"]
        assert "(2, 256) uint8" in steps[1]["output"]
        assert "index saved to catalog.odx: 5,000 codes x 2048 bits" in steps[2]["output"]
        assert "stsb-test app/codes-2048" in steps[3]["output"]
        first, second = (json.loads(line) for line in steps[4]["output"].strip().splitlines())
        assert first["decision"] is True and second["decision"] is False and first["score"] > second["score"]
        assert "an exported bundle" in steps[5]["output"] and "loaded with every check" in steps[5]["output"]
        assert "catalog.odx: a Hamming index file" in steps[5]["output"]
        spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
        tables = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tables)
        text = tables.walkthrough(str(found))
        assert "Bundle('.../ondevice/pretrained/default'" in text and str(ROOT) not in text
    if name == "hamming_prefetch_ab":  # every combination of distance and setting is a build; one thread: serial ones
        import json

        (found,) = (tmp_path / "out").glob("hamming_prefetch_ab-*.json")
        (row,) = json.loads(found.read_text())["results"]["rows"]
        assert set(row["ms"]) == {"0 B, COUNT_FIRST_MAX_WORDS=0", "0 B, COUNT_FIRST_MAX_WORDS=1",
                                  "512 B, COUNT_FIRST_MAX_WORDS=0", "512 B, COUNT_FIRST_MAX_WORDS=1", "read"}
        one = _bench_run(bench, env, name, ["--sizes", "20000", "--bits", "64", "--distances", "-1", "--threads", "1",
                                            "--rounds", "1", "--budget", "0.01", "--results-dir", str(tmp_path / "one")])
        assert one.returncode == 0 and "1 threads: default" in one.stdout, one.stdout[-2000:] + one.stderr[-2000:]
        bad = _bench_run(bench, env, name, ["--set", "NO_SUCH=1"])
        assert bad.returncode == 2 and "has no setting 'NO_SUCH'" in bad.stderr
    if name == "hamming_stream_bound":  # each width, size and thread count: the read sum, both bare loops, the search
        import json

        (found,) = (tmp_path / "out").glob("hamming_stream_bound-*.json")
        rows = json.loads(found.read_text())["results"]["rows"]
        assert {(r["bits"], r["threads"]) for r in rows} == {(64, 1), (64, 2), (256, 1), (256, 2)}
        for r in rows:
            assert set(r["ms"]) == {"read", "test", "test+branch", "call floor", "kernel", "ondevice"}
            assert all(v > 0 for v in r["ms"].values()) and r["chunks"] == 1  # 4,000 codes: serial at any threads
            assert all(len(v) == 2 for v in r["round_ms"].values())
    if name == "cli_search":  # warm runs load every kernel from Numba's disk cache: none compiles again
        import json

        (found,) = (tmp_path / "out").glob("cli_search-*.json")
        files = json.loads(found.read_text())["numba_cache_files"]
        assert files["after_fill"] > 0 and files["added_by_warm_runs"] == 0, files
    if name == "hamming_knn":  # cells from --read-min on carry their own read bound, and the table uses it
        import json

        (grid,) = (tmp_path / "out").glob("hamming_grid-*.json")
        blob = json.loads(grid.read_text())
        cells = blob["cells"]
        assert {c["n"] for c in cells if c["lib"] == "read"} == {20000}
        # one worker per library and thread setting; numpy at 1 thread only
        assert {c["threads"] for c in cells if c["lib"] == "faiss"} == {1, 2}
        assert {c["threads"] for c in cells if c["lib"] == "numpy"} == {1}
        assert {c["lib"] for c in cells if c["threads"] == 2} >= {"ondevice", "ondevice-auto", "faiss"}
        # each reported cell is the median of its rounds, and both rounds ran every library
        assert {(c["lib"], c["round"]) for c in blob["round_cells"]} == {(c["lib"], r) for c in cells for r in (0, 1)}
        for c in cells:
            mine = [x["ms"] for x in blob["round_cells"]
                    if (x["lib"], x["n"], x["bits"], x["threads"], x["nq"]) == (c["lib"], c["n"], c["bits"], c["threads"], c["nq"])]
            assert len(mine) == 2 and c["round_ms"] == mine and c["ms"] == pytest.approx((mine[0] + mine[1]) / 2)
        # both catalogs fit the paired limit: ondevice and FAISS also timed in one process, at one thread only
        assert {(c["lib"], c["n"], c["threads"]) for c in cells if c["lib"].endswith("-paired")} == {
            (lib, n, 1) for lib in ("ondevice-paired", "faiss-paired") for n in (1000, 20000)}
        row = next(line for line in res.stdout.splitlines() if line.startswith("| 20,000 | 256 | 1 |"))
        assert row.split("|")[-3].strip().endswith("%") and row.split("|")[-2].strip().endswith("x")
        assert "one-thread cells also timed in one process:" in res.stdout


def test_suite_record_from_a_real_log(tmp_path):
    """benchmarks/suite.py reads a finished pytest run's summary line and durations into one results file, and the
    tables renderer shows it; a log without a summary line is one error."""
    import json

    tests = tmp_path / "test_two.py"
    tests.write_text("import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_fast():\n    pass\n\n"
                     "def test_skipped():\n    import pytest\n    pytest.skip('no')\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--durations=5", "--durations-min=0", str(tests)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False)
    log = tmp_path / "run.log"
    log.write_text(run.stdout + run.stderr)
    bench, env = _bench_copy(tmp_path)
    res = _bench_run(bench, env, "suite", ["--log", str(log), "--command", "pytest test_two.py"])
    assert res.returncode == 0, res.stderr[-2000:]
    (path,) = (bench / "results").glob("suite-*.json")
    r = json.loads(path.read_text())["results"]
    assert r["counts"] == {"passed": 2, "skipped": 1} and 0.3 <= r["pytest_seconds"] < 300
    assert r["slowest"][0]["test"].endswith("test_two.py::test_slow") and r["slowest"][0]["seconds"] >= 0.3
    assert r["coverage"] is None and r["test_command"] == "pytest test_two.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("tables_copy", bench / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    text = tables.suite(str(path))
    assert "2 passed, 1 skipped" in text and "test_two.py::test_slow" in text
    bad = tmp_path / "bad.log"
    bad.write_text("collected 0 items\n")
    res = _bench_run(bench, env, "suite", ["--log", str(bad)])
    assert res.returncode == 2 and "no pytest summary line" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_pairs_suite_runs_with_tiny_models(pair_env, tmp_path):
    """`benchmarks/pairs_suite.py` end to end on the tiny fixtures: teachers, dev-picked setting, extra teacher seeds,
    students per seed side by side, then the aggregated seeds and quality files; a second call reuses everything."""
    import json

    bench, env = _bench_copy(tmp_path)
    args = ["--out", str(tmp_path / "suite"), "--student", str(pair_env.student), "--base", str(pair_env.base),
            "--data", str(pair_env.data), "--device", "cpu", "--jobs", "2", "--tasks", "mrpc", "--seeds", "0,1",
            "--teacher-seeds", "2", "--teacher-epochs", "1", "--max-train-pairs", "24",
            "--student-args", "--epochs 1 --augment-random 8 --augment-neighbors 0 --dse-alphas 0,0.5"]
    res = _bench_run(bench, env, "pairs_suite", args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (path,) = (bench / "results").glob("pairs_suite-*.json")
    out = json.loads(path.read_text())
    chosen = out["chosen"]["mrpc"]
    assert set(chosen["by_setting"]) == {"e3", "e3-both"} and chosen["dev"] == max(chosen["by_setting"].values())
    assert len(chosen["teachers"]) == 2 and all(f"-{chosen['setting']}-s" in t for t in chosen["teachers"])
    assert all("test" in t and "accuracy" in t["test"] for t in out["teachers"].values())
    assert any(f.startswith("pairs_seeds_mrpc-") for f in out["results_files"])
    assert any(f.startswith("pairs_quality_mrpc-") for f in out["results_files"])
    seeds = json.loads((bench / "results" / next(f for f in out["results_files"] if "seeds" in f)).read_text())
    assert seeds["seeds"] == [0, 1] and set(seeds["dse_alphas_test"]) == {"0", "0.5"}
    assert seeds["dvbert_teachers"] == chosen["teachers"]
    def commands() -> int:  # teacher and student commands the suite ran so far (one "$ " line each)
        return sum(p.read_text().count("\n$ ") + p.read_text().startswith("$ ")
                   for p in (tmp_path / "suite" / "logs").glob("*-s*.log"))

    ran = commands()
    again = _bench_run(bench, env, "pairs_suite", args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert commands() == ran + 2  # teachers reused; only the two per-seed student calls run again (and find their runs)


@pytest.mark.slow
def test_pairs_seeds_mode_runs_with_tiny_models(pair_env, tmp_path):
    """`benchmarks/pairs.py seeds` (DvBERT vs DSE) end to end on the tiny pair fixtures; its results JSON is complete."""
    import json

    bench, env = _bench_copy(tmp_path)
    teacher = str(pair_env.teacher())
    args = ["seeds", "--task", "stsb", "--data", str(pair_env.data), "--student", str(pair_env.student),
            "--teachers", f"{teacher},{teacher}:ba", "--seeds", "0,1", "--epochs", "1", "--max-train-pairs", "32",
            "--augment-random", "10", "--augment-neighbors", "0", "--dse-alphas", "0.5", "--workdir", str(tmp_path / "w"),
            "--quiet"]
    res = _bench_run(bench, env, "pairs", args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (path,) = (bench / "results").glob("pairs_seeds_stsb-*.json")
    out = json.loads(path.read_text())
    for method in ("dse", "dvbert"):
        s = out["summary"][method]["spearman"]
        assert s["n"] == 2 and s["std"] is not None and min(s["values"]) == s["min"]
    per_seed = [out["runs"]["dvbert"][k]["test"]["spearman"] - out["runs"]["dse"][k]["test"]["spearman"] for k in ("0", "1")]
    assert out["dvbert_minus_dse"]["per_seed"]["mean"] == pytest.approx(np.mean(per_seed), abs=2e-3)
    assert out["dvbert_teachers"] == [teacher, teacher + ":ba"] and teacher in out["teachers_test"]
    assert out["dvbert_augment"] is True and out["dvbert_config"]["augment_random"] == 10
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.crossencoder import CrossEncoderTeacher
    from ondevice.pairs.metrics import evaluate_scores

    t, test = CrossEncoderTeacher.load(teacher), load_pairs("stsb", "test", pair_env.data)
    both = (t.logits(test.a, test.b) + t.logits(test.b, test.a)) / 2  # the (a, b) and (b, a) views' mean
    assert out["teachers_mean_test"]["spearman"] == pytest.approx(evaluate_scores(t.spec, both, test.gold, None)["spearman"], abs=0.01)
    dse_aug = json.loads((tmp_path / "w" / "dse-seed0" / "alpha-0.5" / "data.json").read_text())["augment_pairs"]
    assert json.loads((tmp_path / "w" / "dvbert-seed0" / "data.json").read_text())["augment_pairs"] == dse_aug == 10
    caption = _script("tables").pairs_seeds(str(path))
    assert "Transfer set: 10 random + 0 neighbour(s)/sentence, the same pairs" in caption and "anneal" not in caption
    out["dvbert_config"]["anneal"] = "none"  # a run of the ablation says so in its caption
    path.write_text(json.dumps(out))
    assert "DvBERT without teacher annealing (`--anneal none`" in _script("tables").pairs_seeds(str(path))
    res = _bench_run(bench, env, "pairs", [*args[:-5], "--augment-random", "9", *args[-5:]])
    assert res.returncode != 0 and "finished run with other settings (augment_random)" in res.stderr  # not reused


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dipair_quality_summary_over_seeds_renders(tmp_path):
    # Several DiPair and DSE runs (seeds): mean, sample std and the difference of means, as the README table states them.
    pairs, tables = _script("pairs"), _script("tables")
    dipair, dse = [79.58, 77.86, 78.57], [78.03, 77.5]
    sm = pairs.dipair_summary("spearman", dipair, dse, 83.54)
    assert sm["dipair"]["std"] == pytest.approx(np.std(dipair, ddof=1), abs=1e-3)
    assert sm["difference_of_means"] == pytest.approx(np.mean(dipair) - np.mean(dse), abs=1e-3)
    assert sm["mean_ratio_to_cross_encoder"] == pytest.approx(np.mean(dipair) / 83.54, abs=1e-4)
    assert "dse" not in pairs.dipair_summary("spearman", dipair, [], None)
    assert sm["dse_mean_ratio_to_cross_encoder"] == pytest.approx(np.mean(dse) / 83.54, abs=1e-4)
    assert set(pairs.dipair_summary("spearman", [], dse, 83.54)) == {"metric", "dse", "dse_mean_ratio_to_cross_encoder"}
    assert set(pairs.dipair_summary("spearman", [], dse, None)) == {"metric", "dse"}  # an ablation: DSE's spread only
    pb = pairs.paired_by_seed([(0, 79.58), (1, 77.86), (2, 78.57)], [(1, 77.5), (0, 78.03)])
    assert pb == {"seeds": [0, 1], "differences": [1.55, 0.36], "median": pytest.approx(0.955), "min": 0.36, "max": 1.55}
    assert pairs.paired_by_seed([(0, 79.58)], [(0, 78.03)]) is None  # one seed pairs nothing worth a line
    assert "DiPair - DSE of the same seed +1.55, +0.36 (seeds 0, 1; median +0.95)" in tables._dipair_summary_text(
        pairs.dipair_summary("spearman", dipair, dse, 83.54, pb), counts=True)
    cfg = {"n": 8, "m": 8, "d": 128, "layers": 1, "select": "first", "pooled_slot": True, "stage1_epochs": 3,
           "stage2_epochs": 4, "augment_random": 30000, "augment_neighbors": 1}
    rows = [{"run": f"/r/dipair-s{i}", "config": cfg, "dev": {"epoch": 5, "stage": 2, "spearman": 83.0},
             "test": {"spearman": v}, "minus_dse_points": round(v - float(np.mean(dse)), 2),
             "ratio_to_cross_encoder": v / 83.54, "sra_cosine": {"before": 0.747, "after": 0.78}} for i, v in enumerate(dipair)]
    runs = [{"run": f"/r/dse-s{i}/alpha-1", "test": {"spearman": v}} for i, v in enumerate(dse)]
    blob = {"task": "stsb", "date": "2026-11-24T00:00:00", "commit": "0" * 40, "cross_encoder": {"spearman": 83.54},
            "dse": {"run": runs[0]["run"], "runs": runs, "test": {"spearman": round(float(np.mean(dse)), 2)}},
            "dipair": rows, "summary": sm}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(blob))
    text = tables.dipair_quality(str(path))
    assert text.count("| dipair-s") == 3
    assert "DSE test is the mean of 2 runs: `dse-s0` 78.03, `dse-s1` 77.50" in text
    assert f"DiPair {np.mean(dipair):.2f} ± {np.std(dipair, ddof=1):.2f} (3 seeds)" in text
    assert f"difference of means {np.mean(dipair) - np.mean(dse):+.2f}" in text
    assert f"DSE mean {np.mean(dse) / 83.54:.3f}x" in text
    assert "encoder cosine" not in text  # a run without --blend has no blend lines
    assert "first + pooled slot |" in text and "loss" not in text  # runs before --loss, and bce runs, say nothing
    path.write_text(json.dumps({**blob, "dipair": [{**rows[0], "config": {**cfg, "loss": "mse"}}, *rows[1:]]}))
    assert tables.dipair_quality(str(path)).count("| first + pooled slot, mse loss |") == 1
    path.write_text(json.dumps(blob))
    pairs_blend = pairs.dipair_summary("spearman", [v + 1 for v in dipair], [v + 1.5 for v in dse], 83.54)
    path.write_text(json.dumps({**blob, "summary_blend": pairs_blend, "summary_cosine_alone": pairs_blend}))
    text = tables.dipair_quality(str(path))
    assert f"Head + w x encoder cosine (z-scores, w chosen on dev per run): DiPair {np.mean(dipair) + 1:.2f}" in text
    assert f"difference of means {np.mean(dipair) - np.mean(dse) - 0.5:+.2f}" in text


def test_blend_metrics_choose_the_weight_on_dev_and_never_fall_below_the_head_there():
    # z(head) + w * z(cos) with w picked on dev: on dev never below the head alone (w = 0 is a candidate); a cosine
    # that carries the signal the head misses earns a positive weight, and the test score is that weight's.
    from types import SimpleNamespace

    from ondevice.eval.pair_tasks import task_spec
    from ondevice.pairs.metrics import evaluate_scores

    pairs = _script("pairs")
    rng = np.random.default_rng(0)

    def split(n, tag):
        gold = rng.uniform(0, 5, n)
        a, b = [f"{tag}a{i}" for i in range(n)], [f"{tag}b{i}" for i in range(n)]
        angle = (5 - gold + rng.normal(0, 0.6, n)) / 5 * 1.4  # the pair's angle falls as gold rises, with noise
        vec = {s: np.array([1.0, 0.0]) for s in a}
        vec.update({s: np.array([np.cos(t), np.sin(t)]) for s, t in zip(b, angle)})
        head = {(x, y): g + rng.normal(0, 1.0) for x, y, g in zip(a, b, gold)}
        return SimpleNamespace(a=a, b=b, gold=gold), vec, head

    (dev, vd, hd), (test, vt, ht) = split(400, "d"), split(400, "t")
    vec, head = {**vd, **vt}, {**hd, **ht}
    encode = lambda texts: np.stack([vec[t] for t in texts])
    logits = lambda a, b: np.array([[head[x, y]] for x, y in zip(a, b)])
    spec = task_spec("stsb")
    out = pairs._blend_metrics(spec, logits, encode, dev, test)
    assert out["dev"]["spearman"] >= out["dev"]["head_alone"] and out["weight"] > 0
    assert out["dev"]["head_alone"] == evaluate_scores(spec, logits(dev.a, dev.b), dev.gold)["spearman"]
    head_test = evaluate_scores(spec, logits(test.a, test.b), test.gold)["spearman"]
    assert out["test"]["spearman"] > head_test  # the cosine is the better signal here, on both splits
    cos = pairs._cosine(encode(test.a), encode(test.b))
    assert out["cosine_alone_test"]["spearman"] == evaluate_scores(spec, cos, test.gold)["spearman"]
    # with codes the similarity is minus the Hamming distance: one bit here (angle to [1, 0] under ~0.7)
    bit_codes = lambda v: np.packbits((v[:, :1] > 0.76).astype(np.uint8), axis=1)
    out = pairs._blend_metrics(spec, logits, encode, dev, test, codes=bit_codes)
    far = np.array([(x[0] > 0.76) != (y[0] > 0.76) for x, y in zip(encode(test.a), encode(test.b))], np.float64)
    assert out["cosine_alone_test"]["spearman"] == evaluate_scores(spec, -far, test.gold)["spearman"] > 0
    # weight 0 is exactly the head: a cosine that is the negative of the signal is never blended in
    vec.update({s: np.array([np.cos(1.4 - t), np.sin(1.4 - t)]) for s, t in
                zip([*dev.b, *test.b], np.arccos(np.clip(encode([*dev.b, *test.b])[:, 0], -1, 1)))})
    out = pairs._blend_metrics(spec, logits, encode, dev, test)
    assert out["weight"] == 0 and out["test"]["spearman"] == head_test
    binary = pairs._blend_metrics(task_spec("mrpc"), logits, encode,
                                  SimpleNamespace(a=dev.a, b=dev.b, gold=(dev.gold > 2.5).astype(int)),
                                  SimpleNamespace(a=test.a, b=test.b, gold=(test.gold > 2.5).astype(int)))
    assert "threshold" in binary["test"] and binary["dev"]["accuracy"] >= binary["dev"]["head_alone"]
    assert pairs._blend_metrics(task_spec("sick-e"), logits, encode, dev, test) == {"note": "no blend for a 3-class task"}


def test_eval_median_renders_medians_and_ranges_over_runs(tmp_path):
    tables = _script("tables")
    paths = []
    for seed, (dev, rec) in enumerate([(74.0, 26.0), (76.0, 30.0), (75.0, 28.0)]):
        report = {"seed": seed, "created": f"2026-11-27T02:0{seed}:00+00:00", "commit": "a" * 40, "cpu_model": "CPU",
                  "tasks": ["stsb-dev", "retrieval"], "skipped": {},
                  "views": {"app": {"method": "float", "dim": 384, "binary": False, "bytes_per_sentence": 1536},
                            "app/itq-64": {"method": "itq", "dim": 64, "binary": True, "bytes_per_sentence": 8}},
                  "results": {"app": {"stsb-dev": {"spearman": 83.5}, "retrieval": {"recall_vs_reference": 50.4}},
                              "app/itq-64": {"stsb-dev": {"spearman": dev},
                                             "retrieval": {"recall_vs_float": rec, "recall_vs_reference": 20.0}}}}
        path = tmp_path / f"r{seed}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
    text = tables.eval_median(*paths)
    assert "| app | float32 × 384 | 1536 | 83.5 | - | 50.4 |" in text  # equal in every run: one value
    assert "| app/itq-64 | itq 64 bits | 8 | 75.0 (74.0-76.0) | 28.0 (26.0-30.0) | 20.0 |" in text
    assert "Median over 3 runs" in text and "seed 2, commit aaaaaaaaaaaa" in text


def test_binarize_judged_renders_paired_differences_and_kept_starts(tmp_path):
    tables = _script("tables")
    paths = []
    # (random, ae, ae-sp, ae's epoch, ae-sp's epoch) at 64 bits, per seed
    for seed, (rnd, ae, sp, ep_ae, ep_sp) in enumerate([(69.0, 70.0, 70.0, 0, 0), (70.0, 69.5, 70.5, 3, 2),
                                                        (68.0, 69.0, 69.5, 0, 4)]):
        rows = [{"method": "random", "bits": 64, "spearman": rnd},
                {"method": "ae", "bits": 64, "spearman": ae, "selected_epoch": ep_ae},
                {"method": "ae-sp", "bits": 64, "spearman": sp, "selected_epoch": ep_sp}]
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"meta": {}, "results": [{"encoder": "student", "rows": rows}]}))
        paths.append(str(path))
    text = tables.binarize_judged(*paths)
    # medians 69.0 / 69.5 / 70.0; ae - random by seed +1, -0.5, +1; ae-sp - ae 0, +1, +0.5; starts kept 2 / 1
    assert ("| 64 | 69.00 (68.00-70.00) | 69.50 (69.00-70.00) | 70.00 (69.50-70.50) | +1.00 (2 of 3) | "
            "+0.50 (2 / 1 of 3) | 2 / 1 of 3 | holds |") in text
    assert "3 seeds: `s0.json`, `s1.json`, `s2.json`." in text


@pytest.mark.slow
def test_binarize_quality_judges_the_autoencoder_on_train_pairs(shared_data, slow_cache, tmp_path):
    """--judge-task stsb with select "pairs": the autoencoder rows carry the judge's score of their pick."""
    bench, env = _bench_copy(tmp_path, ONDEVICE_CACHE=str(slow_cache), ONDEVICE_DATA=str(shared_data))
    args = ["--train-sentences", "300", "--methods", "ae", "--bits", "64", "--skip-teacher", "--bundle", "pretrained",
            "--hyper", '{"epochs": 2, "select": "pairs"}', "--judge-task", "stsb", "--quiet", "--out-dir", str(tmp_path / "out")]
    res = _bench_run(bench, env, "binarize_quality", args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (found,) = (bench / "results").glob("binarize_quality*.json")
    blob = json.loads(found.read_text())
    (row,) = blob["results"][0]["rows"]
    assert blob["meta"]["settings"]["judge_task"] == "stsb" and 0 <= row["selected_epoch"] <= 2
    assert 0 < row["judge_spearman"] <= 100
    res = _bench_run(bench, env, "binarize_quality", [a for a in args if a not in ("--judge-task", "stsb")])
    assert res.returncode == 2 and "go together" in res.stderr


def test_pairs_dipair_quality_mode_reports_each_runs_teacher(artifacts, pair_env, tiny_teacher, tmp_path):
    """`benchmarks/pairs.py dipair-quality` end to end on tiny runs, with a mean of two views as --teacher: the ratio is
    to that mean, and the cross-encoder the runs learnt from is reported on its own."""
    import json

    bench, env = _bench_copy(tmp_path)
    teacher = str(pair_env.teacher())
    views = f"{teacher},bi-encoder:{tiny_teacher}"
    args = ["dipair-quality", "--task", "stsb", "--data", str(pair_env.data), "--teacher", views,
            "--dse-run", str(artifacts["dse-run"]), "--runs", str(artifacts["dipair-run"]), "--skip-hamming", "--threads", "1",
            "--oov-split"]
    res = _bench_run(bench, env, "pairs", args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (path,) = (bench / "results").glob("pairs_dipair_quality_stsb-*.json")
    out = json.loads(path.read_text())
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.crossencoder import evaluate_teacher
    from ondevice.pairs.views import open_teacher

    test = load_pairs("stsb", "test", pair_env.data)
    assert out["cross_encoder"]["spearman"] == pytest.approx(
        evaluate_teacher(open_teacher(views, "stsb", pair_env.data), test)["spearman"], abs=0.01)
    assert list(out["run_teachers_test"]) == [teacher]  # both runs learnt from the cross-encoder alone
    row = out["dipair"][0]
    assert row["ratio_to_cross_encoder"] == pytest.approx(row["test"]["spearman"] / out["cross_encoder"]["spearman"], abs=1e-3)
    for split in (row["oov_split"], row["oov_split_cross_encoder"], out["dse"]["oov_split"]):
        assert split["oov_differs"]["n"] == row["oov_differs_pairs"] and split["rest"]["n"] == len(test) - row["oov_differs_pairs"]
    table = _script("tables").dipair_quality(str(path))
    rows = [line for line in table.split("pairs with differing unknown words")[1].splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0].split(" `")[0] for r in rows] == ["| cross-encoder", "| DSE", "| DiPair"]
    assert rows[-1].endswith(f"| {row['test']['spearman']:.2f} |")


def test_oov_split_counts_pairs_whose_unknown_words_differ():
    from ondevice.eval.pair_tasks import PairData, task_spec
    from ondevice.pairs.metrics import evaluate_scores
    from ondevice.tokenizer import Tokenizer

    pairs = _script("pairs")
    tok = Tokenizer(["[PAD]", "[UNK]", "a", "cat", "dog", "sat", "?"])
    data = PairData("qqp", "test", ["a cat sat", "a zebra sat", "a zebra", "an okapi?", "dog"],
                    ["a dog sat", "a zebra sat ?", "a gnu", "the okapi", "Dog"], np.array([0, 1, 0, 1, 1]))
    differs = pairs._oov_differs(tok, data)
    assert differs.tolist() == [False, False, True, True, False]  # same unknown words on both sides count as none
    logits = np.array([-1.0, 2.0, 3.0, -2.0, 1.0])
    split = pairs._oov_split(task_spec("qqp"), logits, data, 0.0, differs)
    assert split["oov_differs"] == evaluate_scores(task_spec("qqp"), logits[2:4], data.gold[2:4], 0.0)
    assert split["rest"]["accuracy"] == 100.0 and split["oov_differs"]["accuracy"] == 0.0



def test_dipair_runs_from_each_seeds_dse_encoder_are_seeds_of_one_setting(tmp_path):
    """DiPair runs whose --student is the encoder of a DSE run of the same seed group as seeds; other students,
    or a DSE run of another seed, keep runs apart."""
    import json

    pairs = _script("pairs")
    for seed in (0, 1, 2):
        alpha = tmp_path / f"dse-s{seed}" / "alpha-0.5"
        (alpha / "student").mkdir(parents=True)
        (alpha / "dse_config.json").write_text(json.dumps({"task": "qqp", "alpha": 0.5, "seed": seed, "threads": 1}))

    def config(seed, student_seed=None, **kw):
        s = seed if student_seed is None else student_seed
        return {"task": "qqp", "data": str(tmp_path), "student": str(tmp_path / f"dse-s{s}" / "alpha-0.5" / "student"),
                "seed": seed, "threads": 1, **kw}

    assert len({pairs._setting_key(config(s)) for s in (0, 1, 2)}) == 1
    assert len({pairs._setting_key(config(0)), pairs._setting_key(config(1, student_seed=0))}) == 2
    assert len({pairs._setting_key(config(0)), pairs._setting_key(config(1, loss="mse"))}) == 2
    assert pairs._setting_key(config(0)) == pairs._setting_key(config(1, loss="bce"))  # a config from before --loss
    plain = [{"task": "qqp", "data": str(tmp_path), "student": "runs/student", "seed": s} for s in (0, 1)]
    assert len({pairs._setting_key(c) for c in plain}) == 1
    assert pairs._setting_key(plain[0]) != pairs._setting_key({**plain[0], "student": "runs/other"})
