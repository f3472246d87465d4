"""The suite never writes to the user's home: HOME, the cache and the results folder are temporary for every test."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import REAL_HOME

from ondevice.io import cache_dir
from ondevice.results import results_dir


def test_home_cache_and_results_are_temporary() -> None:
    home = Path(os.environ["HOME"])  # the suite's, or a fixture's own temporary one (the Ray tests set theirs)
    assert home != REAL_HOME and not home.is_relative_to(REAL_HOME)
    for folder in (cache_dir(), results_dir()):
        assert not folder.is_relative_to(REAL_HOME), folder
        assert not folder.is_relative_to(Path(__file__).resolve().parents[1] / "benchmarks" / "results"), folder


def test_a_write_to_the_default_cache_would_be_seen(tmp_path, monkeypatch) -> None:
    """What pytest_unconfigure checks: a writer that ignores ONDEVICE_CACHE lands in the suite's HOME, not the user's."""
    monkeypatch.delenv("ONDEVICE_CACHE")
    assert cache_dir() == Path(os.environ["HOME"]) / ".cache" / "ondevice"
    assert not cache_dir().is_relative_to(REAL_HOME)
