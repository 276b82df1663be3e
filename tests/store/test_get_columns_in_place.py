"""``get_columns`` reads records that lie back to back in place: the body and properties
views point into the segment's map, no byte is copied. Such arrays keep the map alive on
their own — past the segment's deletion by retention, the store's close, a restart — and
the CRC32C of every record is still checked (a changed byte is passed over as ``get`` passes
it over). Records that do not lie back to back are copied, as before."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa

import strata
from strata.format import view_kernels as vk
from strata.format.consume_queue import UNIT_SIZE
from strata.format.record_table import VIEW_FIELDS
from strata.log.batch_reader import topic_array
from strata.format.segment import HEADER_AREA
from store_helpers import config, settle
from test_get_columns import as_rows


def message(i: int, topic: str = "t") -> strata.Message:
    return strata.Message(topic, bytes([65 + i % 26]) * (i * 11 % 300),
                          keys=[f"k{i}"][:i % 2], born_timestamp=1_000 + i)


def span_address(batch) -> tuple[int, int]:
    buf = batch.column("body").buffers()[2]
    return buf.address, buf.size


def in_segment(store, batch) -> bool:
    """Whether the batch's bytes lie inside one of the store's segment maps."""
    at, size = span_address(batch)
    for seg in store.log.segments.segments:
        base = np.frombuffer(seg.mm, np.uint8).ctypes.data
        if base <= at and at + size <= base + len(seg.mm):
            return True
    return False


def test_back_to_back_records_are_read_in_place_others_copied(tmp_path):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("one", queues=1)
        s.create_topic("three", queues=3)   # each queue's records interleave
        s.put_batch([message(i, "one") for i in range(200)])
        s.put_batch([message(i, "three") for i in range(300)])
        settle(s)
        r = s.get_columns("one", 0, 20, 150)
        assert in_segment(s, r.batch)
        assert r.batch.to_pylist() == as_rows(s.get("one", 0, 20, 150).messages)
        r.batch.validate(full=True)
        r = s.get_columns("three", 1, 0, 100)
        assert len(r.batch) == 100 and not in_segment(s, r.batch)
        assert r.batch.to_pylist() == as_rows(s.get("three", 1, 0, 100).messages)


def test_in_place_arrays_outlive_retention_close_and_restart(tmp_path):
    cfg = config()   # 64 KiB segments
    with strata.open(tmp_path / "s", cfg) as s:
        s.create_topic("t", queues=1)
        for start in range(0, 800, 40):
            s.put_batch([message(i) for i in range(start, start + 40)])
        settle(s)
        assert len(s.log.segments.segments) >= 3
        first = s.get_columns("t", 0, 0, 30).batch
        assert in_segment(s, first)
        want = as_rows(s.get("t", 0, 0, 30).messages)
        s.retention.disk_usage = lambda: 0.10
        assert s.clean_expired(now_ms=s.log.last_store_timestamp + 10**12) >= 1
        assert not (tmp_path / "s" / "commitlog" / f"{0:020d}").exists()
        gc.collect()
        assert first.to_pylist() == want   # its segment deleted: the map lives on
        mn = s.min_offset("t", 0)
        later = s.get_columns("t", 0, mn, 50).batch
        later_want = as_rows(s.get("t", 0, mn, 50).messages)
        assert later.to_pylist() == later_want
    gc.collect()
    assert first.to_pylist() == want and later.to_pylist() == later_want  # store closed
    with strata.open(tmp_path / "s", cfg) as s:   # a restart reads the same
        again = s.get_columns("t", 0, mn, 50).batch
        assert in_segment(s, again) and again.to_pylist() == later_want
    del s
    gc.collect()
    assert again.to_pylist() == later_want and later.to_pylist() == later_want


def test_a_changed_byte_in_place_is_caught_by_the_crc(tmp_path):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([message(i + 3) for i in range(60)])
        settle(s)
        assert in_segment(s, s.get_columns("t", 0, 0, 60).batch)
        seg = s.log.segments.segments[0]
        at = res[17].commitlog_offset - seg.base_offset + HEADER_AREA
        total = int.from_bytes(seg.mm[at:at + 4], "little")
        body_byte = at + total - 40     # inside the body (its CRC alone can tell)
        seg.mm[body_byte] ^= 0x01
        r = s.get_columns("t", 0, 0, 60)
        assert 17 not in r.batch.column("queue_offset").to_pylist()
        assert r.batch.to_pylist() == as_rows(s.get("t", 0, 0, 60).messages)
        seg.mm[body_byte] ^= 0x01
        assert len(s.get_columns("t", 0, 0, 60).batch) == 60


def test_records_at_the_very_end_of_the_map_are_copied(tmp_path):
    """A view of ≤ 12 bytes holds them itself, read as whole words: records that end within
    ``PAD`` bytes of the map's end are copied (never a read past the map), the rest read in
    place; the values are the same."""
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([strata.Message("t", b"xy" * (i % 6)) for i in range(9)])
        settle(s)
        cq, _ = s._queue("t", 0)
        units = cq.read_unit_bytes(0, 9)
        assert len(units) == 9 * UNIT_SIZE
        seg = s.log.segments.segments[0]
        first = res[0].commitlog_offset - seg.base_offset + HEADER_AREA
        last = res[8].commitlog_offset - seg.base_offset + HEADER_AREA
        end = last + int.from_bytes(seg.mm[last:last + 4], "little")
        delta = seg.base_offset - HEADER_AREA + first
        for room, where in ((0, -1), (vk.PAD - 1, -1), (vk.PAD, 0)):
            data = np.frombuffer(seg.mm, np.uint8)[first:end + room].copy()
            table = np.empty((VIEW_FIELDS, 9), np.int64)
            views = np.empty((2, 36), np.int32)
            good, span, _props, start, own = vk.views_at(
                data, units, delta, end - first, True, topic_array("t"), 0, 0, table, views,
                True)
            assert (good, own, start) == (9, end - first, where)
            buf = pa.py_buffer(data[start:start + own] if start >= 0 else span)
            got = pa.Array.from_buffers(pa.binary_view(), 9,
                                        [None, pa.py_buffer(views[0]), buf])
            got.validate(full=True)
            assert got.to_pylist() == [b"xy" * (i % 6) for i in range(9)]


def test_a_unit_size_that_is_not_the_records_own_is_caught(tmp_path):
    """The span is laid out from the units' sizes: a unit whose size is not its record's
    length sends the read down ``get``'s path, with ``get``'s answer."""
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        s.put_batch([message(i + 1) for i in range(30)])
        settle(s)
        want = s.get_columns("t", 0, 0, 30).batch.to_pylist()
        assert len(want) == 30
        qseg = s._queue("t", 0)[0].segments.segments[0]
        for unit, delta in ((7, 8), (29, 1), (12, -4)):
            at = HEADER_AREA + unit * UNIT_SIZE + 8
            size = int.from_bytes(qseg.mm[at:at + 4], "little")
            qseg.mm[at:at + 4] = (size + delta).to_bytes(4, "little")
            r = s.get_columns("t", 0, 0, 30)
            assert r.batch.to_pylist() == as_rows(s.get("t", 0, 0, 30).messages)
            qseg.mm[at:at + 4] = size.to_bytes(4, "little")
            assert s.get_columns("t", 0, 0, 30).batch.to_pylist() == want
