"""The shared row cache: same rows as computing them, resumable by chunk, rows reused across text lists."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.vector_cache import cached_rows, check_vectors


class Counting:
    """Deterministic per-text rows (float or uint8 codes), counting the texts it was asked for."""

    def __init__(self, dtype=np.float32, fail_after: int | None = None):
        self.dtype, self.fail_after, self.seen = dtype, fail_after, []

    def __call__(self, texts: list[str]) -> np.ndarray:
        if self.fail_after is not None and len(self.seen) >= self.fail_after:
            raise KeyboardInterrupt
        self.seen += texts
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=6) + 3 for t in texts]
        out = np.asarray(rows)
        return (out > 3).astype(np.uint8) if self.dtype == np.uint8 else out.astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_rows_equal_direct_computation_and_second_call_is_free(tmp_path, dtype) -> None:
    texts = [f"sentence {i}" for i in range(23)]
    fn = Counting(dtype)
    rows, computed = cached_rows(tmp_path, "enc", {"name": "x"}, texts, fn, chunk=5)
    assert computed and rows.dtype == dtype
    np.testing.assert_array_equal(rows, Counting(dtype)(texts))
    again, computed = cached_rows(tmp_path, "enc", {"name": "x"}, texts, fn, chunk=5)
    assert not computed and len(fn.seen) == 23
    np.testing.assert_array_equal(again, rows)


def test_interrupted_run_resumes_and_other_lists_reuse_rows(tmp_path) -> None:
    texts = [f"s{i}" for i in range(20)]
    with pytest.raises(KeyboardInterrupt):
        cached_rows(tmp_path, "enc", {"name": "x"}, texts, Counting(fail_after=10), chunk=5)
    fn = Counting()
    rows, _ = cached_rows(tmp_path, "enc", {"name": "x"}, texts, fn, chunk=5)
    assert fn.seen == texts[10:]  # the two finished chunks came from disk
    other = ["new one", *texts[3:8], "new two"]
    fn2 = Counting()
    rows2, _ = cached_rows(tmp_path, "enc", {"name": "x"}, other, fn2, chunk=5)
    assert fn2.seen == ["new one", "new two"]  # the rest were copied by sentence hash
    np.testing.assert_array_equal(rows2[1:6], rows[3:8])
    fn3 = Counting()
    cached_rows(tmp_path, "enc", {"name": "other encoder"}, other, fn3, chunk=5)
    assert fn3.seen == other  # another identity never donates


def test_bad_rows_are_never_marked_done(tmp_path) -> None:
    def check(rows, what):
        check_vectors(rows, normalized=True, what=what)

    with pytest.raises(OndeviceError, match="degenerate"):
        cached_rows(tmp_path, "enc", {"name": "x"}, ["a", "b"], lambda t: np.ones((len(t), 3)), check=check, dim=3)
    rows, computed = cached_rows(tmp_path, "enc", {"name": "x"}, ["a", "b"],
                                 lambda t: np.full((len(t), 3), 3 ** -0.5), check=check, dim=3)
    assert computed and np.allclose(np.linalg.norm(rows, axis=1), 1)


_FILLER = """
import sys, time
from pathlib import Path
import numpy as np
from ondevice.vector_cache import cached_rows

root, marker = Path(sys.argv[1]), Path(sys.argv[2])

def slow(texts):
    marker.touch()  # the folder's lock is held from here on
    time.sleep(0.2)
    return np.asarray([[len(t), t.count("1"), 1.0] for t in texts], np.float32)

cached_rows(root, "enc", {"name": "x"}, [f"s{i}" for i in range(12)], slow, chunk=4)
"""


def test_a_second_process_waits_for_the_filler_and_reuses_its_rows(tmp_path, capfd) -> None:
    import subprocess
    import sys
    import time

    texts = [f"s{i}" for i in range(12)]
    marker = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", _FILLER, str(tmp_path / "cache"), str(marker)])
    try:
        deadline = time.time() + 60
        while not marker.exists():
            assert child.poll() is None and time.time() < deadline, "the filling process did not start"
            time.sleep(0.01)
        seen: list[str] = []

        def fn(batch: list[str]) -> np.ndarray:
            seen.extend(batch)
            return np.zeros((len(batch), 3), np.float32)

        rows, computed = cached_rows(tmp_path / "cache", "enc", {"name": "x"}, texts, fn, chunk=4)
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
    # without the lock this process would have computed (and could have truncated) the same chunks
    assert not computed and seen == []
    np.testing.assert_array_equal(rows, [[len(t), t.count("1"), 1.0] for t in texts])
    assert "waiting for another process that is filling the cache" in capfd.readouterr().err


def test_a_finished_folder_is_read_while_its_lock_is_held(tmp_path) -> None:
    import os
    import threading

    from ondevice.vector_cache import LOCK_NAME, _try_lock

    texts = [f"s{i}" for i in range(7)]
    rows, _ = cached_rows(tmp_path, "enc", {"name": "x"}, texts, Counting(), chunk=3)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    fd = os.open(folder / LOCK_NAME, os.O_RDWR)  # a second open file: conflicts with the cache's own lock
    assert _try_lock(fd, block=False)
    try:
        got: list = []
        reader = threading.Thread(target=lambda: got.append(cached_rows(tmp_path, "enc", {"name": "x"}, texts,
                                                                         Counting(), chunk=3)))
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive(), "reading a finished cache waited for the fill lock"
    finally:
        os.close(fd)
    again, computed = got[0]
    assert not computed
    np.testing.assert_array_equal(again, rows)


def test_an_untrustworthy_state_is_refused_and_a_broken_sibling_is_no_donor(tmp_path) -> None:
    import json

    texts = [f"s{i}" for i in range(6)]
    cached_rows(tmp_path / "good", "enc", {"name": "x"}, texts, Counting(), chunk=4)
    (folder,) = [p for p in (tmp_path / "good").iterdir() if p.is_dir()]
    np.save(folder / "vectors.npy", np.full((6, 6), np.nan, np.float32))  # values no finished chunk may hold
    for state in ({"chunk": -1, "chunks": [], "n": 6}, {"chunk": 0, "chunks": [0], "n": 6},
                  {"chunk": 4, "chunks": [0, 5], "n": 6}, {"chunk": 4, "chunks": ["x"], "n": 6},
                  {"chunk": 4, "chunks": [0, 1], "n": 7}, [1, 2]):
        (folder / "state.json").write_text(json.dumps(state))
        with pytest.raises(OndeviceError, match="cannot trust|delete that folder"):
            cached_rows(tmp_path / "good", "enc", {"name": "x"}, texts, Counting(), chunk=4)
    # a sibling folder with a nonsense key or state is skipped as a donor, not a crash of every other fill
    (folder / "state.json").write_text(json.dumps({"chunk": 4, "chunks": ["x"], "n": 6}))
    (folder / "key.json").write_text("[]")
    fn = Counting()
    rows, computed = cached_rows(tmp_path / "good", "enc", {"name": "x"}, texts[:3], fn, chunk=4)
    assert computed and fn.seen == texts[:3]
    np.testing.assert_array_equal(rows, Counting()(texts[:3]))
