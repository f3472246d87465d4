"""ondevice.bits: the permanent little bit order, padding that never counts, and codes from libraries that pack
the other way (sentence-transformers' "ubinary")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ondevice.bits import code_bytes, from_msb_first, hamming_reference, pack, unpack
from ondevice.errors import OndeviceError


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), bits=st.integers(1, 200), seed=st.integers(0, 2**31))
def test_pack_round_trip_bit_order_and_padding(n, bits, seed):
    b = np.random.default_rng(seed).integers(0, 2, (n, bits), dtype=np.uint8)
    codes = pack(b)
    assert codes.shape == (n, code_bytes(bits)) and np.array_equal(unpack(codes, bits), b)
    j = np.arange(bits)
    assert np.array_equal((codes[:, j // 8] >> (j % 8)) & 1, b)  # bit j is bit j % 8 of byte j // 8
    pad = code_bytes(bits) * 8 - bits
    if pad:
        assert not (codes[:, -1] >> (8 - pad)).any()  # padding bits are zero
    assert np.array_equal(hamming_reference(codes, codes), (b[:, None, :] != b[None, :, :]).sum(axis=2))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), bits=st.integers(1, 200), seed=st.integers(0, 2**31))
def test_msb_first_codes_convert_exactly_and_keep_their_distances(n, bits, seed):
    b = np.random.default_rng(seed).integers(0, 2, (n, bits), dtype=np.uint8)
    msb = np.packbits(b, axis=1)  # numpy's default order: most significant bit first
    assert np.array_equal(from_msb_first(msb, bits), pack(b))
    assert np.array_equal(hamming_reference(msb, msb), hamming_reference(pack(b), pack(b)))


def test_sentence_transformers_ubinary_codes():
    quantization = pytest.importorskip("sentence_transformers.util.quantization")
    x = np.random.default_rng(0).normal(size=(20, 100)).astype(np.float32)
    theirs = quantization.quantize_embeddings(x, precision="ubinary")
    ours = pack(x > 0)
    assert not np.array_equal(theirs, ours)  # other bytes for the same bits ...
    assert np.array_equal(hamming_reference(theirs, theirs), hamming_reference(ours, ours))  # ... same distances
    assert np.array_equal(from_msb_first(theirs, 100), ours)


def test_wrong_shapes_are_one_line():
    with pytest.raises(OndeviceError, match=r"shape \(n, 2\) for 16 bits"):
        from_msb_first(np.zeros((3, 3), np.uint8), 16)
    with pytest.raises(OndeviceError, match="2-d"):
        pack(np.zeros(8))
