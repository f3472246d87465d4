"""Results files: complete metadata, one file per run, never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

from ondevice.results import load_results, start_run, write_result

ROOT = Path(__file__).resolve().parents[1]


def test_metadata_and_one_file_per_run(tmp_path) -> None:
    meta = start_run(threads=2, argv=["bench.py", "--n", "5"], n=5)
    assert meta["command"].endswith("bench.py --n 5") and meta["threads"] == 2 and meta["settings"] == {"n": 5}
    assert meta["cpu_model"] and meta["cpu_count"] >= 1 and len(meta["load_average_start"]) == 3
    assert meta["versions"]["numpy"] and meta["versions"]["python"]
    if Path("/proc/cpuinfo").exists():  # Linux: the CPU generation and caches beside the model name
        assert meta["cpu"]["vendor_id"] and meta["cpu"]["model"].isdigit() and meta["cpu"]["l1_cache"]
    if (ROOT / ".git").exists():  # inside a git checkout (not an exported source tree)
        assert len(meta["commit"].removesuffix("+dirty")) == 40
    first = write_result("bench", {"value": 1}, meta, root=tmp_path)
    second = write_result("bench", {"value": 2}, meta, root=tmp_path)  # same second: a new name, not a replacement
    assert first != second
    assert json.loads(first.read_text())["results"] == {"value": 1}
    blob = json.loads(second.read_text())
    assert blob["results"] == {"value": 2} and blob["meta"]["seconds"] >= 0 and "load_average_end" in blob["meta"]
    write_result("bench_other", {"value": 3}, meta, root=tmp_path)
    assert [b["results"]["value"] for _, b in load_results("bench", root=tmp_path)] == [1, 2]


def test_commit_of_a_copied_tree_comes_from_the_environment(monkeypatch) -> None:
    """A tree copied to another machine (whose .git may be stale or absent) names its commit via ONDEVICE_COMMIT."""
    from ondevice.results import start_run

    monkeypatch.setenv("ONDEVICE_COMMIT", "0123abcd" * 5)
    meta = start_run(threads=1)
    assert meta["commit"] == "0123abcd" * 5 and "gpu_model" in meta


def test_create_new_never_replaces_a_file(tmp_path) -> None:
    """Flat results files (benchmarks/pairs.py) share write_result's exclusive create: a taken name gets -1, -2."""
    from ondevice.results import create_new

    paths = [create_new(tmp_path / "new", "pairs-x-stsb-20260101T000000Z", f"{i}\n") for i in range(3)]
    assert [p.name for p in paths] == ["pairs-x-stsb-20260101T000000Z.json", "pairs-x-stsb-20260101T000000Z-1.json",
                                       "pairs-x-stsb-20260101T000000Z-2.json"]
    assert [p.read_text() for p in paths] == ["0\n", "1\n", "2\n"]


def test_every_committed_results_file_follows_the_one_naming_scheme() -> None:
    """<name>-<YYYYMMDDTHHMMSSZ>[-N].<ext>, name in [a-z0-9_]: what `stamped` writes, so one glob finds a benchmark's runs."""
    from ondevice.results import FILE, stamped

    bad = sorted(p.name for p in (ROOT / "benchmarks" / "results").iterdir() if not FILE.fullmatch(p.name))
    assert not bad, f"results files outside the naming scheme: {bad[:10]}"
    assert FILE.fullmatch(stamped("pairs-dipair-quality-stsb") + ".json")["name"] == "pairs_dipair_quality_stsb"
