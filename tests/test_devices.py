"""Device and thread helpers: torch keeps the thread count a run asked for across a numba search."""

from __future__ import annotations

import numpy as np


def test_keep_torch_threads_restores_a_changed_count_and_leaves_others_alone():
    import torch

    from ondevice.devices import keep_torch_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with keep_torch_threads():
            torch.set_num_threads(2)  # what numba's OpenMP layer can do to the shared libgomp
        assert torch.get_num_threads() == 1
        with keep_torch_threads():
            pass
        assert torch.get_num_threads() == 1
        # around a real parallel Hamming search (large enough for the threaded path) the count stays too
        from ondevice.index import HammingIndex

        codes = np.random.default_rng(0).integers(0, 256, (20000, 32), dtype=np.uint8)
        index = HammingIndex(256)
        index.add(codes)
        with keep_torch_threads():
            index.search(codes[:64], 5, threads=2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
