"""BLAKE2b with an 8-byte digest, compiled (numba): the tier's key hash (docs/format.md
section 14: the first 8 bytes of BLAKE2b, digest size 8, no key, of ``topic#key``, read as a
little-endian u64) computed inside the chunk builder's one pass instead of a ``hashlib`` call
per key from Python.

RFC 7693's algorithm, the 16 working words as scalars (registers), the message words loaded
straight from the bytes; ``layout.key_hash`` (``hashlib``) is the reference the tests compare
it with. Loads are native-endian, which is the format's little-endian on the x86-64 and arm64
machines strata runs on. Pure functions over addresses: no I/O.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format.record_kernels import load_u64

_IV = np.array([0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B,
                0xA54FF53A5F1D36F1, 0x510E527FADE682D1, 0x9B05688C2B3E6C1F,
                0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179], np.uint64)
BLOCK = 128
# parameter block word 0 for digest length 8, no key, fanout 1, depth 1
_H0 = np.uint64(0x6A09E667F3BCC908 ^ 0x01010008)


@njit(inline="always")
def _rotr(x, n):
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@njit(inline="always")
def _g(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@njit(inline="always")
def _round(v, m, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    """One round on the working words ``v``; ``s*``: the round's message word order."""
    v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15 = v
    v0, v4, v8, v12 = _g(v0, v4, v8, v12, load_u64(m + 8 * s0), load_u64(m + 8 * s1))
    v1, v5, v9, v13 = _g(v1, v5, v9, v13, load_u64(m + 8 * s2), load_u64(m + 8 * s3))
    v2, v6, v10, v14 = _g(v2, v6, v10, v14, load_u64(m + 8 * s4), load_u64(m + 8 * s5))
    v3, v7, v11, v15 = _g(v3, v7, v11, v15, load_u64(m + 8 * s6), load_u64(m + 8 * s7))
    v0, v5, v10, v15 = _g(v0, v5, v10, v15, load_u64(m + 8 * s8), load_u64(m + 8 * s9))
    v1, v6, v11, v12 = _g(v1, v6, v11, v12, load_u64(m + 8 * s10), load_u64(m + 8 * s11))
    v2, v7, v8, v13 = _g(v2, v7, v8, v13, load_u64(m + 8 * s12), load_u64(m + 8 * s13))
    v3, v4, v9, v14 = _g(v3, v4, v9, v14, load_u64(m + 8 * s14), load_u64(m + 8 * s15))
    return (v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15)


@njit(cache=True, nogil=True, boundscheck=False)
def blake2b64(address, n):
    """BLAKE2b (digest size 8) of the ``n`` bytes at ``address`` as a u64 (its digest read
    little-endian). The bytes from ``address + n`` up to the next multiple of 128 must be
    zero (the last block's padding is read in place)."""
    h0, h1, h2, h3 = _H0, _IV[1], _IV[2], _IV[3]
    h4, h5, h6, h7 = _IV[4], _IV[5], _IV[6], _IV[7]
    start = np.int64(0)
    while True:
        last = n - start <= BLOCK
        done = n if last else start + BLOCK    # the byte counter t
        m = address + start
        v0, v1, v2, v3, v4, v5, v6, v7 = h0, h1, h2, h3, h4, h5, h6, h7
        v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
        v12 = _IV[4] ^ np.uint64(done)
        v13 = _IV[5]
        v14 = ~_IV[6] if last else _IV[6]
        v15 = _IV[7]
        v = (v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15)
        # the 12 rounds written out, so that every message word's place is a constant
        v = _round(v, m, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
        v = _round(v, m, 14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3)
        v = _round(v, m, 11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4)
        v = _round(v, m, 7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8)
        v = _round(v, m, 9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13)
        v = _round(v, m, 2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9)
        v = _round(v, m, 12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11)
        v = _round(v, m, 13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10)
        v = _round(v, m, 6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5)
        v = _round(v, m, 10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0)
        v = _round(v, m, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
        v = _round(v, m, 14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3)
        v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15 = v
        h0 ^= v0 ^ v8
        h1 ^= v1 ^ v9
        h2 ^= v2 ^ v10
        h3 ^= v3 ^ v11
        h4 ^= v4 ^ v12
        h5 ^= v5 ^ v13
        h6 ^= v6 ^ v14
        h7 ^= v7 ^ v15
        if last:
            return h0
        start += BLOCK


@njit(cache=True, nogil=True)
def blake2b64_of(data, n):
    """``blake2b64`` of ``data[:n]`` (a uint8 array zero from ``n`` to the next multiple of
    128): for tests."""
    return blake2b64(data.ctypes.data, n)
