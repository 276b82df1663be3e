"""``get_columns`` of records in one segment takes the one-buffer route
(``arrow_read.units_batch``: the consume-queue units read in their file's map, the records
checked by one compiled pass into the call's one buffer, the Arrow structs written by one
more) and hands out what ``get`` hands out. Every other read — across a commit-log segment's
end, across a consume-queue file's end, a damaged record — falls back to the general path
with the same answer."""

from __future__ import annotations

import pytest

import strata
from strata.store import arrow_read
from store_helpers import config, settle
from test_get_columns import as_rows, same_as_get
from test_get_columns_in_place import in_segment


@pytest.fixture
def one_call(monkeypatch) -> list:
    """What each ``units_batch`` call answered: True (a batch) or False (True, False or None:
    the general path then reads)."""
    seen: list[bool] = []
    real = arrow_read.units_batch

    def spy(*args, **kwargs):
        got = real(*args, **kwargs)
        seen.append(got is not None and not isinstance(got, bool))
        return got
    monkeypatch.setattr(arrow_read, "units_batch", spy)
    return seen


def message(i: int, topic: str = "t") -> strata.Message:
    """Plain messages, messages with no keys but a tag and a property, and with one or two
    keys; bodies of 0 to 250 bytes (≤ 12: inline in the views)."""
    body = bytes([65 + i % 26]) * (i * 7 % 251)
    if i % 3 == 0:
        return strata.Message(topic, body, born_timestamp=5 + i)
    if i % 3 == 1:
        return strata.Message(topic, body, tags="a", properties={"p": str(i)})
    return strata.Message(topic, body, keys=[f"k{i}", f"j{i}"][:1 + i % 2])


def test_one_call_reads_what_get_reads(tmp_path, one_call):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("plain", queues=1)
        s.create_topic("t", queues=1)
        s.put_batch([strata.Message("plain", bytes([66]) * (i % 40)) for i in range(1500)])
        s.put_batch([message(i) for i in range(1500)])
        settle(s)
        for topic in ("plain", "t"):
            for offset, n in ((0, 1), (7, 1), (3, 10), (0, 1000), (400, 1100), (1499, 5)):
                one_call.clear()
                same_as_get(s, topic, 0, offset, n)
                assert one_call == [True]
                r = s.get_columns(topic, 0, offset, n)
                r.batch.validate(full=True)
                assert in_segment(s, r.batch)
        keys = s.get_columns("t", 0, 0, 6).batch.column("keys").to_pylist()
        assert keys == [[], [], ["k2"], [], [], ["k5", "j5"]]   # empty lists, never null
        assert s.get_columns("plain", 0, 0, 3).batch.column("keys").null_count == 0


def test_reads_across_segment_and_queue_file_ends_fall_back(tmp_path, one_call):
    # 64 KiB segments and 512-unit consume-queue files: both ends are crossed
    with strata.open(tmp_path / "s", config(consume_queue_units=512)) as s:
        s.create_topic("t", queues=1)
        for start in range(0, 3000, 500):
            s.put_batch([message(i) for i in range(start, start + 500)])
        settle(s)
        assert len(s.log.segments.segments) > 3
        offset = 0
        while offset < 3000:   # the whole queue, 333 a call: calls across both kinds of end
            r = s.get_columns("t", 0, offset, 333)
            g = s.get("t", 0, offset, 333)
            assert (r.status, r.next_offset) == (g.status, g.next_offset)
            assert r.batch.to_pylist() == as_rows(g.messages)
            assert r.next_offset > offset
            offset = r.next_offset
        assert True in one_call and False in one_call   # both paths taken
        assert s.get_columns("t", 0, 511, 10).next_offset == 512   # a file's end ends a read


def test_empty_reads_and_a_restart(tmp_path, one_call):
    path = tmp_path / "s"
    with strata.open(path, config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        s.create_topic("none", queues=1)   # a queue without messages
        s.put_batch([message(i) for i in range(300)])
        settle(s)
        for topic in ("t", "none"):
            mx = s.max_offset(topic, 0)
            for offset in (mx, mx + 5):   # at and past the end: no rows, get's status
                one_call.clear()
                r = s.get_columns(topic, 0, offset, 10)
                same_as_get(s, topic, 0, offset, 10)
                assert len(r.batch) == 0 and r.batch.schema == arrow_read.schema(True)
                assert one_call == []   # nothing to read: no compiled call
    with strata.open(path, config(segment_size=8 << 20)) as s:   # after a restart
        one_call.clear()
        same_as_get(s, "t", 0, 0, 300)
        assert one_call == [True]
        assert in_segment(s, s.get_columns("t", 0, 0, 300).batch)


def test_without_the_crc_check_the_same_batch(tmp_path, one_call):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20,
                                            verify_crc_on_read=False)) as s:
        s.create_topic("t", queues=1)
        s.put_batch([message(i) for i in range(400)])
        settle(s)
        same_as_get(s, "t", 0, 13, 300)
        assert one_call == [True]
