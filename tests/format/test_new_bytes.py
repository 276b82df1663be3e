"""``record_objects.new_bytes`` (a bytes object filled in place) and ``record_kernels.pack_to``
(the batch reader's copy into it) against ``pack`` into a numpy array: the same bytes, the same
field table; ``pack_heads_to`` (a scan's copy of all but the bodies) the heads alone."""

from __future__ import annotations

import ctypes

import numpy as np

from strata.format import record_kernels as rk
from strata.format import record_objects as ro
from strata.format import record_table as rt


def test_new_bytes_is_a_fresh_bytes_object_of_that_length():
    a, addr_a = ro.new_bytes(5)
    b, addr_b = ro.new_bytes(5)
    assert type(a) is bytes and len(a) == 5 and a is not b and addr_a != addr_b
    ctypes.memmove(addr_a, b"hello", 5)
    assert a == b"hello" and hash(a) == hash(b"hello")
    assert ro.new_bytes(0) == (b"", 0)


def _table(rng, n: int, data_len: int) -> tuple[np.ndarray, np.ndarray]:
    """A field table of n non-overlapping records' sections in a buffer of data_len bytes."""
    f = np.zeros((rt.FIELDS, n), np.int64)
    lens = rng.integers(12, 300, n)
    starts = np.sort(rng.choice(data_len // 300, n, replace=False)) * 300
    f[rt.F_HOSTS_AT] = starts
    f[rt.F_TOPIC_AT] = starts + 12
    f[rt.F_PROPS_AT] = starts + 12
    f[rt.F_BODY_AT] = starts + 12
    f[rt.F_BODY_END] = starts + lens
    f[rt.F_PHYS] = np.arange(n) * 7   # any other row rides along
    return f, lens


def test_pack_to_writes_what_pack_writes():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    f, lens = _table(rng, 100, len(data))
    status = np.where(rng.random(100) < 0.8, rt.GOOD, rt.NO_RECORD).astype(np.uint8)
    nbytes = int(lens[status == rt.GOOD].sum())
    f1, f2 = f.copy(), f.copy()
    out = np.zeros(nbytes, np.uint8)
    r1 = rk.pack(data, f1, status, out)
    buf, addr = ro.new_bytes(nbytes)
    r2 = rk.pack_to(data, f2, status, addr)
    assert r1 == r2 == int((status == rt.GOOD).sum())
    assert buf == out.tobytes()
    assert (f1[:, :r1] == f2[:, :r2]).all()
    good = np.flatnonzero(status == rt.GOOD)
    assert buf == b"".join(data[a:b].tobytes() for a, b in zip(
        f[rt.F_HOSTS_AT, good].tolist(), f[rt.F_BODY_END, good].tolist()))


def test_pack_heads_to_writes_each_records_sections_before_its_body():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    f, lens = _table(rng, 60, len(data))
    f[rt.F_TOPIC_AT] = f[rt.F_HOSTS_AT] + 6
    f[rt.F_PROPS_AT] = f[rt.F_HOSTS_AT] + 9
    f[rt.F_BODY_AT] = f[rt.F_HOSTS_AT] + rng.integers(9, 12, 60)   # heads of 9..11 bytes
    status = np.where(rng.random(60) < 0.7, rt.GOOD, rt.OTHER).astype(np.uint8)
    good = np.flatnonzero(status == rt.GOOD)
    heads = f[rt.F_BODY_AT, good] - f[rt.F_HOSTS_AT, good]
    g = f.copy()
    buf, addr = ro.new_bytes(int(heads.sum()))
    assert rk.pack_heads_to(data, g, status, addr) == len(good)
    assert buf == b"".join(data[a:b].tobytes() for a, b in zip(
        f[rt.F_HOSTS_AT, good].tolist(), f[rt.F_BODY_AT, good].tolist()))
    at = np.concatenate([[0], np.cumsum(heads)[:-1]])
    r = len(good)
    assert (g[rt.F_HOSTS_AT, :r] == at).all() and (g[rt.F_BODY_AT, :r] == at + heads).all()
    assert (g[rt.F_TOPIC_AT, :r] == at + 6).all() and (g[rt.F_PROPS_AT, :r] == at + 9).all()
    assert (g[rt.F_BODY_END, :r] == g[rt.F_BODY_AT, :r]).all()   # no body bytes in buf
    assert (g[rt.F_PHYS, :r] == f[rt.F_PHYS, good]).all()
