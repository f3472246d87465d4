"""Bit packing for binary codes. One permanent bit order: "little".

Bit j of a code lives in byte j // 8 at bit position j % 8 (least significant bit first), which is numpy's
`packbits(..., bitorder="little")`. Read as little-endian 64-bit words, bit j is bit j % 64 of word j // 64.
Codes whose bit count is not a multiple of 8 are padded with zero bits, which never count in a Hamming distance.
"""

from __future__ import annotations

import numpy as np

from ondevice.errors import OndeviceError

BIT_ORDER = "little"


MAX_BITS = 65_536  # 8 KiB per code; far beyond any useful sentence code, small enough to never exhaust memory


def code_bytes(bits: int) -> int:
    """Bytes per packed code of `bits` bits."""
    return (bits + 7) // 8


def pack(bits: np.ndarray) -> np.ndarray:
    """Pack a (n, bits) boolean/0-1 array into (n, ceil(bits/8)) uint8 codes."""
    bits = np.asarray(bits)
    if bits.ndim != 2:
        raise OndeviceError(f"expected a 2-d (n, bits) array of bits, got shape {bits.shape}")
    return np.packbits(bits.astype(bool, copy=False), axis=1, bitorder=BIT_ORDER)


def unpack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Unpack (n, ceil(bits/8)) uint8 codes into a (n, bits) uint8 0/1 array."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != code_bytes(bits):
        raise OndeviceError(f"codes must be uint8 of shape (n, {code_bytes(bits)}) for {bits} bits, got {codes.dtype} {codes.shape}")
    return np.unpackbits(codes, axis=1, count=bits, bitorder=BIT_ORDER)


def from_msb_first(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes packed most significant bit first (numpy's default `packbits`, sentence-transformers' "ubinary") in
    ondevice's bit order: the same bits, so the same Hamming distances, with each bit where a binarizer puts it."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != code_bytes(bits):
        raise OndeviceError(f"codes must be uint8 of shape (n, {code_bytes(bits)}) for {bits} bits, got {codes.dtype} {codes.shape}")
    return pack(np.unpackbits(codes, axis=1, count=bits, bitorder="big"))


def hamming_reference(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Brute-force (nq, n) Hamming distances between packed codes (numpy, for tests and small sets)."""
    q = np.ascontiguousarray(queries, dtype=np.uint8)
    c = np.ascontiguousarray(codes, dtype=np.uint8)
    return np.bitwise_count(q[:, None, :] ^ c[None, :, :]).sum(axis=2, dtype=np.int64)
