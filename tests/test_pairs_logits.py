"""Teacher logits cache: keyed by content, computed once, resumable after a crash, never keeps non-finite rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.pairs.logits import cached_logits, pairs_sha256


def _fn(calls):
    def fn(a, b):
        calls.append(len(a))
        return np.array([[len(x) - len(y), len(x)] for x, y in zip(a, b)], np.float32)
    return fn


def test_second_call_computes_nothing_and_keys_by_content(tmp_path):
    a, b = [f"s{i}" for i in range(50)], [f"t{i * 7}" for i in range(50)]
    calls: list[int] = []
    first = cached_logits({"t": 1}, a, b, _fn(calls), 2, chunk=16, root=tmp_path, progress=False)
    n = len(calls)
    again = cached_logits({"t": 1}, a, b, _fn(calls), 2, chunk=16, root=tmp_path, progress=False)
    assert len(calls) == n == 4 and np.array_equal(first, again)
    cached_logits({"t": 2}, a, b, _fn(calls), 2, root=tmp_path, progress=False)  # another teacher: recomputed
    assert len(calls) == n + 1
    assert pairs_sha256(["a\tb"], ["c"]) != pairs_sha256(["a"], ["b\tc"])  # no ambiguity in the key


def test_resumes_after_a_crash(tmp_path):
    a, b = [f"s{i}" for i in range(40)], [f"t{i}" for i in range(40)]
    calls: list[int] = []
    good = _fn(calls)

    def flaky(x, y):
        if len(calls) == 2:
            raise RuntimeError("killed")
        return good(x, y)

    with pytest.raises(RuntimeError):
        cached_logits({"t": 1}, a, b, flaky, 2, chunk=10, root=tmp_path, progress=False)
    out = cached_logits({"t": 1}, a, b, good, 2, chunk=10, root=tmp_path, progress=False)
    assert calls == [10, 10, 10, 10]  # two chunks before the crash, two after: nothing recomputed
    assert np.array_equal(out, _fn([])(a, b))
    assert (next(tmp_path.iterdir()) / "key.json").is_file()


def test_a_folder_of_the_earlier_layout_is_adopted_without_recomputing(tmp_path):
    a, b = [f"s{i}" for i in range(25)], [f"t{i}" for i in range(25)]
    calls: list[int] = []
    first = cached_logits({"t": 1}, a, b, _fn(calls), 2, chunk=10, root=tmp_path, progress=False)
    folder = next(tmp_path.iterdir())
    # rewrite it as the earlier layout left it: logits.npy, identity.json, a finished prefix of 20 rows
    (folder / "vectors.npy").rename(folder / "logits.npy")
    (folder / "key.json").rename(folder / "identity.json")
    (folder / "state.json").write_text(json.dumps({"done": 20, "n": 25}))
    out = cached_logits({"t": 1}, a, b, _fn(calls), 2, chunk=10, root=tmp_path, progress=False)
    assert calls == [10, 10, 5, 5]  # only the unfinished last chunk is computed again
    assert np.array_equal(out, first) and not (folder / "logits.npy").exists()
    assert cached_logits({"t": 1}, [], [], _fn(calls), 2, root=tmp_path, progress=False).shape == (0, 2)


def test_non_finite_logits_are_refused_and_never_marked_done(tmp_path):
    a, b = [f"s{i}" for i in range(30)], [f"t{i}" for i in range(30)]
    calls: list[int] = []
    good = _fn(calls)

    def bad_second_chunk(x, y):
        out = good(x, y)
        if len(calls) == 2:
            out[3, 1] = np.nan
        return out

    with pytest.raises(OndeviceError, match="chunk 1: the teacher gave non-finite logits"):
        cached_logits({"t": 1}, a, b, bad_second_chunk, 2, chunk=10, root=tmp_path, progress=False)
    out = cached_logits({"t": 1}, a, b, good, 2, chunk=10, root=tmp_path, progress=False)
    assert calls == [10, 10, 10, 10]  # the bad chunk was not kept: computed again, then the last one
    assert np.isfinite(out).all() and np.array_equal(out, _fn([])(a, b))


def test_pairs_another_list_already_scored_are_copied_not_scored_again(tmp_path):
    a, b = [f"s{i}" for i in range(40)], [f"t{i}" for i in range(40)]
    calls: list[int] = []
    cached_logits({"t": 1}, a[:30], b[:30], _fn(calls), 2, chunk=8, root=tmp_path, progress=False)
    calls.clear()
    # pairs 20..39, then pair 0 with its sides swapped (another pair: a teacher's logit is not symmetric)
    a2, b2 = a[20:] + [b[0]], b[20:] + [a[0]]
    out = cached_logits({"t": 1}, a2, b2, _fn(calls), 2, chunk=8, root=tmp_path, progress=False)
    assert sum(calls) == 11  # pairs 30..39 and the swapped pair
    assert np.array_equal(out, _fn([])(a2, b2))
    calls.clear()
    cached_logits({"t": 2}, a2, b2, _fn(calls), 2, chunk=8, root=tmp_path, progress=False)
    assert sum(calls) == 21  # another teacher's cache is never a donor
