"""The compiled record reader (strata.format.record_kernels, strata.log.batch_reader,
strata.log.record_walk's runs): the same verdicts as the per-record checks, CRC32C equal to
the crc32c package's, and messages made from one copied buffer only when read."""

from __future__ import annotations

import os

import numpy as np
import pytest
from crc32c import crc32c

import strata
from strata.testing.faults import flip_bit
from strata.format import record as rec
from strata.format import record_kernels as rk
from strata.format.record_batch import MessageBatch
from strata.format.segment import HEADER_AREA, file_name

from support import small_store_config


@pytest.mark.parametrize("start,length", [(0, 0), (0, 1), (3, 7), (5, 8), (1, 63), (7, 1000),
                                          (12, 4096 - 12)])
def test_crc32c_kernels_agree_with_the_crc32c_package(start, length):
    data = np.frombuffer(os.urandom(4096), np.uint8)
    want = crc32c(data[start:start + length].tobytes())
    assert rk.crc32c_of(data, start, start + length) == want
    assert rk.crc32c_table(data.ctypes.data + start, length) == want   # the portable one


def test_crc32c_of_every_tail_length_and_of_three_chains_agree_with_the_package():
    """The last 0-7 bytes go in 4-, 2- and 1-byte steps: every remainder, at every
    alignment, alone and as ``crc3``'s three chains of different lengths."""
    data = np.frombuffer(os.urandom(512), np.uint8)
    base = data.ctypes.data
    for length in range(0, 41):
        for start in range(8):
            want = crc32c(data[start:start + length].tobytes())
            assert rk.crc32c_of(data, start, start + length) == want, (start, length)
    for n0, n1, n2 in ((181, 181, 181), (0, 5, 13), (7, 6, 3), (200, 17, 9), (1, 0, 2)):
        got = rk.crc3(base + 1, n0, base + 230, n1, base + 3, n2)
        assert got == tuple(crc32c(data[a:a + n].tobytes())
                            for a, n in ((1, n0), (230, n1), (3, n2)))


def _store(tmp_store_dir, n=20, queues=2):
    store = strata.open(tmp_store_dir, small_store_config())
    store.create_topic("t", queues)
    store.create_topic("other", 1)
    results = store.put_batch([strata.Message("t", os.urandom(50 + i), keys=(f"k{i}",),
                                              tags="a" if i % 2 else "b",
                                              properties={"p": str(i)})
                               for i in range(n)])
    store.wait_dispatched()
    return store, results


def test_read_offsets_verdicts(tmp_store_dir):
    store, results = _store(tmp_store_dir, queues=1)
    try:
        offs = np.array([r.commitlog_offset for r in results[:6]], np.int64)
        limit = store.confirmed_offset()
        read = store.log.read_offsets(offs, limit, verify_crc=True, topic="t", queue_id=0,
                                      queue_offsets=np.arange(6))
        assert read.all_good and list(read.status) == [rk.GOOD] * 6
        assert list(read.messages) == [store.read_at(int(o)) for o in offs]
        # units leading to another message: wrong queue offset, wrong topic
        read = store.log.read_offsets(offs, limit, verify_crc=True, topic="t", queue_id=0,
                                      queue_offsets=np.arange(6)[::-1].copy())
        assert list(read.status) == [rk.OTHER] * 6 and len(read.messages) == 0
        read = store.log.read_offsets(offs, limit, verify_crc=True, topic="other",
                                      queue_id=0, queue_offsets=np.arange(6))
        assert set(read.status) == {rk.OTHER}
        # not a record start, beyond the limit
        bad = np.array([offs[0] + 1, offs[5]], np.int64)
        read = store.log.read_offsets(bad, int(offs[5]), verify_crc=True)
        assert list(read.status) == [rk.NO_RECORD, rk.NO_RECORD] and not read.damaged
    finally:
        store.close()


def test_a_flipped_body_bit_is_a_crc_mismatch_only_when_crcs_are_checked(tmp_store_dir):
    store, results = _store(tmp_store_dir, queues=1)
    store.close()
    r = results[3]
    flip_bit(tmp_store_dir / "commitlog" / file_name(0),
             HEADER_AREA + r.commitlog_offset + r.size - 10, bit=2)
    with strata.open(tmp_store_dir, readonly=True) as store:
        offs = np.array([x.commitlog_offset for x in results[:5]], np.int64)
        limit = store.confirmed_offset()
        read = store.log.read_offsets(offs, limit, verify_crc=True)
        assert list(read.status) == [rk.GOOD] * 3 + [rk.CRC_MISMATCH, rk.GOOD]
        assert "CRC32C mismatch" in read.damaged[3]
        assert [m.commitlog_offset for m in read.messages] == \
            [x.commitlog_offset for i, x in enumerate(results[:5]) if i != 3]
        unchecked = store.log.read_offsets(offs, limit, verify_crc=False)
        assert unchecked.all_good


def test_get_hands_out_a_lazy_batch_that_outlives_the_store(tmp_store_dir):
    store, results = _store(tmp_store_dir, queues=1)
    expected = [store.read_at(r.commitlog_offset) for r in results]
    got = store.get("t", 0, 0, 64)
    assert isinstance(got.messages, MessageBatch) and got.messages._items is None
    assert len(got.messages) == len(results) and got.messages._items is None   # not made
    one = got.messages[4]                       # one message, made alone
    assert one == expected[4] and got.messages._items is None
    store.close()                               # the batch holds its own copy of the bytes
    assert got.messages == expected and list(got.messages) == expected
    assert got.messages[-1] == expected[-1] and got.messages[1:3] == expected[1:3]
    assert got.messages + [] == expected and [] + got.messages == expected
    m = got.messages[7]
    assert (m.keys, m.tags, m.properties, m.topic) == (("k7",), "a", {"p": "7"}, "t")


def test_scan_batches_and_damage(tmp_store_dir):
    store, results = _store(tmp_store_dir, n=300)
    expected = list(store.scan(0))
    assert len(expected) == 300
    batches = list(store.log.scan_batches(0, store.confirmed_offset(), verify_crc=True,
                                          rows=64))
    assert [len(b) for b in batches[:4]] == [64] * 4 or len(store.log.segments.segments) > 1
    assert max(len(b) for b in batches) <= 64
    assert [m for b in batches for m in b] == expected
    store.close()
    bad = results[100]
    seg_base = max(s for s in (int(p.name) for p in (tmp_store_dir / "commitlog").iterdir())
                   if s <= bad.commitlog_offset)
    flip_bit(tmp_store_dir / "commitlog" / file_name(seg_base),
             HEADER_AREA + bad.commitlog_offset - seg_base + bad.size - 8, bit=0)
    with strata.open(tmp_store_dir, readonly=True) as store:
        seen = []
        got = list(store.scan(0, verify_crc=True, on_damage=lambda o, e: seen.append((o, e))))
        assert [o for o, _e in seen] == [bad.commitlog_offset] and "CRC32C" in seen[0][1]
        assert got == [m for m in expected if m.commitlog_offset != bad.commitlog_offset]
    with strata.open(tmp_store_dir, small_store_config(verify_crc_on_read=False),
                     readonly=True) as store:
        assert len(list(store.scan(0))) == 300   # without CRC checks the bit goes unseen


@pytest.mark.parametrize("body,run_bytes", [
    (10, 1 << 20),      # small records: the runs grow past the first 1024 rows, up to rows
    (4000, 64 << 10),   # large ones: ~64 KiB of records a run once their size is seen
])
def test_scan_batches_sized_by_bytes(tmp_path, body, run_bytes):
    """``scan_batches`` with ``run_bytes``: the first run of a segment has at most
    ``WALK_ROWS`` records, the next ones about ``run_bytes`` of them (up to ``rows``); the
    messages are those of fixed-size runs, in order, whatever the sizes."""
    n = 5000 if body < 100 else 1200
    store = strata.open(tmp_path / "s", strata.StoreConfig(segment_size=64 << 20,
                                                           flush="async"))
    store.create_topic("t", 1)
    for start in range(0, n, 500):
        store.put_batch([strata.Message("t", bytes([i % 251]) * body)
                         for i in range(start, min(n, start + 500))])
    limit = store.confirmed_offset()
    want = [m.body for b in store.log.scan_batches(0, limit, verify_crc=True, rows=256,
                                                  run_bytes=None) for m in b]
    sizes = [len(b) for b in store.log.scan_batches(0, limit, verify_crc=True, rows=3000,
                                                    run_bytes=run_bytes)]
    got = list(store.scan(0))
    later = min(3000, run_bytes // got[0].size)   # every record the same size here
    assert sizes[0] == 1024 and sum(sizes) == n == len(want)
    assert set(sizes[1:-1]) == {later} and 0 < sizes[-1] <= later
    assert [m.body for m in got] == want and [m.queue_offset for m in got] == list(range(n))
    assert all(m.body == bytes([i % 251]) * body for i, m in enumerate(got))
    store.close()


def test_a_topic_that_is_no_name_is_damage(tmp_store_dir):
    store, results = _store(tmp_store_dir, queues=1)
    store.close()
    r = results[2]
    flip_bit(tmp_store_dir / "commitlog" / file_name(0),
             HEADER_AREA + r.commitlog_offset + rec.HEADER_SIZE + 12, bit=7)  # topic byte
    with strata.open(tmp_store_dir, small_store_config(verify_crc_on_read=False),
                     readonly=True) as store:
        seen = []
        got = list(store.scan(0, on_damage=lambda o, e: seen.append((o, e))))  # no CRC
        assert [o for o, _e in seen] == [r.commitlog_offset]   # (the CRC names it)
        assert len(got) == len(results) - 1
        res = store.get("t", 0, 0, 64)
        assert [c.queue_offset for c in res.corrupt] == [2]
        assert len(res.messages) == len(results) - 1
