"""The compiled CRC32C kernels against the crc32c package: one range, and many ranges checked
three at a time (``crc32c_many``), with lengths that end together, apart, off the 8-byte
steps and at zero."""

from __future__ import annotations

import numpy as np
import pytest
from crc32c import crc32c

from strata.format import record_kernels as rk


def _ranges(rng, buf: np.ndarray, count: int, max_len: int):
    starts = rng.integers(0, len(buf) - max_len, count).astype(np.int64)
    lens = rng.integers(0, max_len + 1, count).astype(np.int64)
    return starts, lens


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 7, 48, 100])
def test_many_ranges_match_the_library(count):
    rng = np.random.default_rng(count)
    buf = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    starts, lens = _ranges(rng, buf, count, 2000)
    if count >= 3:   # some equal lengths, some shorter than one 8-byte step
        lens[1] = lens[0]
        lens[2] = 5
    out = np.zeros(count, np.uint32)
    rk.crc32c_many(buf.ctypes.data + starts, lens, count, out)
    want = [crc32c(buf[s:s + n].tobytes()) for s, n in zip(starts.tolist(), lens.tolist())]
    assert out.tolist() == want


def test_three_at_once_equals_one_at_a_time():
    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 4096, dtype=np.uint8)
    a = buf.ctypes.data
    for n0, n1, n2 in [(0, 0, 0), (8, 8, 8), (9, 17, 1), (1000, 3, 64), (63, 64, 65)]:
        got = rk.crc32c_3(a, n0, a + 100, n1, a + 1001, n2)
        assert [int(c) for c in got] == [crc32c(buf[0:n0].tobytes()),
                                         crc32c(buf[100:100 + n1].tobytes()),
                                         crc32c(buf[1001:1001 + n2].tobytes())]
        assert int(rk.crc32c_at(a + 100, n1)) == crc32c(buf[100:100 + n1].tobytes())


def test_count_leaves_the_rest_of_out_alone():
    buf = np.arange(256, dtype=np.uint8)
    addrs = buf.ctypes.data + np.array([0, 10, 20, 30], np.int64)
    lens = np.array([16, 16, 16, 16], np.int64)
    out = np.full(4, 7, np.uint32)
    rk.crc32c_many(addrs, lens, 2, out)
    assert out[2:].tolist() == [7, 7]
    assert out[:2].tolist() == [crc32c(buf[0:16].tobytes()), crc32c(buf[10:26].tobytes())]
