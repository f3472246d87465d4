"""Results files: complete metadata, one file per run, never overwritten."""

from __future__ import annotations

import json
import pathlib
import platform
import sys
import types
from pathlib import Path

import pytest

from ondevice import results
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


def test_stamped_refuses_names_outside_the_scheme() -> None:
    for bad in ("a b", "dé", "x/y", ""):
        with pytest.raises(ValueError, match="lowercase letters, digits and underscores"):
            results.stamped(bad)
    assert results.stamped("My-Bench").startswith("my_bench-")


def test_create_new_gives_up_after_a_thousand_taken_names(tmp_path, monkeypatch) -> None:
    real_open = open

    def taken(path, mode="r", *args, **kwargs):  # every exclusive create finds its name taken
        if mode == "x":
            raise FileExistsError(path)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", taken)
    with pytest.raises(RuntimeError, match="could not find a free results file name for s in"):
        results.create_new(tmp_path, "s", "{}\n")
    assert list(tmp_path.iterdir()) == []


def test_commit_outside_git_and_missing_machine_facts_are_empty(monkeypatch) -> None:
    """No git on PATH: no commit; /proc and /sys unreadable: the platform's processor name and no CPU details."""

    monkeypatch.delenv("ONDEVICE_COMMIT", raising=False)
    monkeypatch.setenv("PATH", "")
    assert results.commit() == ""
    real = pathlib.Path.read_text

    def unreadable(self, *a, **k):
        if str(self).startswith(("/proc", "/sys")):
            raise PermissionError(str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "read_text", unreadable)
    assert results.cpu_model() == (platform.processor() or platform.machine())
    assert results.cpu_details() == {}


def test_gpu_model_reads_an_imported_torch_and_survives_a_broken_one(monkeypatch) -> None:

    def fake_torch(available):
        cuda = types.SimpleNamespace(is_available=available, get_device_name=lambda i: f"Fake GPU {i}")
        return types.SimpleNamespace(cuda=cuda)

    monkeypatch.setitem(sys.modules, "torch", fake_torch(lambda: True))
    assert results.gpu_model() == "Fake GPU 0"
    monkeypatch.setitem(sys.modules, "torch", fake_torch(lambda: False))
    assert results.gpu_model() is None

    def broken():
        raise RuntimeError("CUDA driver version is insufficient")

    monkeypatch.setitem(sys.modules, "torch", fake_torch(broken))
    assert results.gpu_model() is None


def test_versions_leave_out_packages_that_are_not_installed(monkeypatch) -> None:
    monkeypatch.setattr(results, "PACKAGES", ("numpy", "no-such-package-ondevice-test"))
    got = results.versions()
    assert set(got) == {"python", "numpy"} and got["numpy"].split(".")[0].isdigit()


def test_flat_results_files_and_their_metadata(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ONDEVICE_COMMIT", "ab" * 20 + "+dirty")
    meta = results.flat_metadata("bench.py", ["--seed", "3"], threads=2)
    assert (meta["commit"], meta["dirty"], meta["threads"]) == ("ab" * 20, True, 2)
    assert meta["command"].endswith("bench.py --seed 3") and meta["python"] == meta["versions"]["python"]
    first = results.write_flat({**meta, "score": 0.5}, "pairs-x", root=tmp_path)
    second = results.write_flat({**meta, "score": 0.7}, "pairs-x", root=tmp_path)
    assert first != second and results.FILE.fullmatch(first.name)["name"] == "pairs_x"
    blob = json.loads(second.read_text())
    assert blob["score"] == 0.7 and len(blob["load_average_end"]) == 3 and list(blob) == sorted(blob)
    monkeypatch.setenv("ONDEVICE_RESULTS", str(tmp_path / "default"))
    assert results.write_flat({"x": 1}, "y").parent == tmp_path / "default"


def test_run_metadata_is_the_machine_layout(monkeypatch) -> None:
    monkeypatch.setenv("ONDEVICE_COMMIT", "cd" * 20)
    meta = results.run_metadata(threads=3)
    assert (meta["commit"], meta["dirty"]) == ("cd" * 20, False)
    assert meta["machine"]["threads"] == 3 and meta["machine"]["cores"] >= 1 and len(meta["machine"]["loadavg_at_start"]) == 3
    monkeypatch.setenv("ONDEVICE_COMMIT", "")
    monkeypatch.setattr(results, "commit", lambda: "")
    assert results.run_metadata(threads=1)["commit"] == "unknown"


def test_results_path_is_a_name_no_earlier_run_has(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ONDEVICE_RESULTS", str(tmp_path))
    monkeypatch.setattr(results, "stamped", lambda name: f"{name}-20260101T000000Z")
    first = results.results_path("bench")
    assert first == tmp_path / "bench-20260101T000000Z.json" and not first.exists()
    first.write_text("{}")
    (tmp_path / "bench-20260101T000000Z-1.json").write_text("{}")
    assert results.results_path("bench") == tmp_path / "bench-20260101T000000Z-2.json"
