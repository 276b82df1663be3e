"""``get`` of large records that lie back to back keeps no copy of them: its batch is a view
of the segment's map (``batch_reader.read_offsets``), and its messages are made from the map
when read, each body copied once (``MessageBatch._scanned``). The messages are the same as
those of the packing path, every field; none of them keeps the map alive; the batch does,
past retention's deletion of the segment and the store's close; the CRC32C of every record is
still checked."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import strata
from strata.log import batch_reader
from store_helpers import body_byte, config, put_rolled, settle


def message(i: int, topic: str = "t") -> strata.Message:
    """Bodies of 700-999 B; every third message with keys, a tag and a property."""
    extra = {} if i % 3 else dict(keys=[f"k{i}", "x"], tags="tg", properties={"p": str(i)})
    return strata.Message(topic, bytes([65 + i % 26]) * (700 + i * 7 % 300),
                          born_timestamp=1_000 + i, **extra)


def is_map_view(batch) -> bool:
    return type(batch._buf) is np.ndarray and batch._items is None


def packed(monkeypatch, s, *args):
    """The same get, by the packing path (records copied into the batch's bytes)."""
    with monkeypatch.context() as m:
        m.setattr(batch_reader, "IN_PLACE_MIN_BYTES", 1 << 40)
        r = s.get(*args)
        assert type(r.messages._buf) is bytes
        return [x.values() for x in r.messages]


def test_large_back_to_back_records_are_read_from_the_map(tmp_path, monkeypatch):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("one", queues=1)
        s.create_topic("four", queues=4)   # each queue's records interleave: packed
        s.put_batch([message(i, "one") for i in range(300)])
        s.put_batch([message(i, "four") for i in range(400)])
        s.put_batch([strata.Message("one", b"small") for _ in range(50)])
        settle(s)
        r = s.get("one", 0, 10, 200)
        assert len(r.messages) == 200 and is_map_view(r.messages)
        want = packed(monkeypatch, s, "one", 0, 10, 200)
        one = r.messages[8]            # a message made alone, from the map
        assert one.values() == want[8] and one.keys == ("k18", "x")
        assert [m.values() for m in r.messages] == want
        assert r.messages.bodies() == [w[4] for w in want]
        assert [m.properties.get("p") for m in r.messages[:4]] == [None, None, "12", None]
        assert s.get("one", 0, 10, 200).messages.bodies() == [w[4] for w in want]
        assert not is_map_view(s.get("four", 2, 0, 80).messages)
        assert not is_map_view(s.get("one", 0, 300, 50).messages)   # small records: packed
        assert [m.body for m in s.get("one", 0, 290, 60).messages] == \
            [message(i).body for i in range(290, 300)] + [b"small"] * 50


def test_messages_do_not_keep_the_map_the_batch_outlives_retention_and_close(tmp_path):
    cfg = config()   # 64 KiB segments
    with strata.open(tmp_path / "s", cfg) as s:
        put_rolled(s, "t", message, 400, 20)
        kept = s.get("t", 0, 0, 30).messages        # not read yet: a view of the map
        assert is_map_view(kept)
        read = s.get("t", 0, 30, 30).messages
        assert is_map_view(read)
        got = list(read)                            # read: the map is let go
        assert not is_map_view(read) and type(got[0]._rows.buf) is bytes
        seg = s.log.segments.segments[0]
        seg_ref = weakref.ref(seg)
        s.retention.disk_usage = lambda: 0.10
        assert s.clean_expired(now_ms=s.log.last_store_timestamp + 10**12) >= 1
        assert not (tmp_path / "s" / "commitlog" / f"{0:020d}").exists()
        del seg
        gc.collect()
        assert seg_ref() is None or seg_ref().closed
        assert [m.body for m in kept] == [message(i).body for i in range(30)]
        assert [m.queue_offset for m in got] == list(range(30, 60))
        mn = s.min_offset("t", 0)
        later = s.get("t", 0, mn, 20).messages
        assert is_map_view(later)
    gc.collect()   # the store closed: the batch still reads its records
    assert [m.queue_offset for m in later] == list(range(mn, min(mn + 20, 400)))
    assert [m.body for m in later] == [message(i).body for i in range(mn, min(mn + 20, 400))]


def test_a_changed_byte_is_caught_by_the_crc(tmp_path):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([message(i) for i in range(60)])
        settle(s)
        assert is_map_view(s.get("t", 0, 0, 60).messages)
        seg, at = body_byte(s, res[17])
        seg.mm[at] ^= 0x01
        r = s.get("t", 0, 0, 60)
        assert [c.queue_offset for c in r.corrupt] == [17]
        assert [m.queue_offset for m in r.messages] == [i for i in range(60) if i != 17]
        seg.mm[at] ^= 0x01
        r = s.get("t", 0, 0, 60)
        assert is_map_view(r.messages) and [m.body for m in r.messages] == \
            [message(i).body for i in range(60)]


def test_the_kafka_fetch_reads_an_in_place_batch_as_a_packed_one(tmp_path, monkeypatch):
    """The Kafka listener's Fetch turns a batch's table into record columns without making
    messages (``MessageBatch.table``): over the map view the values are the same bytes."""
    from strata.broker.kafka import fetch_read
    from strata.broker.kafka import batch_kernels as bk

    def values(limit: int) -> list[bytes]:
        parts, _size = fetch_read._read(s, "t", 0, 5, limit)
        out = []
        for cols, _plan, _firsts in fetch_read._pieces(parts)[0]:
            r = cols.records
            out += [bytes(cols.data[a:a + n]) for a, n in
                    zip(r[bk.R_VALUE_AT].tolist(), r[bk.R_VALUE_LEN].tolist())]
        return out

    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        s.put_batch([strata.Message("t", bytes([65 + i % 26]) * (700 + i))
                     for i in range(300)])
        settle(s)
        assert is_map_view(s.get("t", 0, 5, 100).messages)
        for limit in (1 << 20, 50_000):   # all of them; a part of the first batch
            got = values(limit)
            want = [bytes([65 + i % 26]) * (700 + i) for i in range(5, 5 + len(got))]
            assert got == want and len(got) == (295 if limit > 50_000 else len(got))
            with monkeypatch.context() as m:
                m.setattr(batch_reader, "IN_PLACE_MIN_BYTES", 1 << 40)
                assert values(limit) == got


def test_records_of_several_topics_read_in_place_carry_their_own_topics(tmp_path):
    """``read_offsets`` without a topic (commit-log reads by offset): each message's topic
    read from its record, in place as well."""
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("a", queues=1)
        s.create_topic("bb", queues=1)
        res = s.put_batch([message(i, "a" if i % 2 else "bb") for i in range(100)])
        settle(s)
        offsets = np.array([r.commitlog_offset for r in res], np.int64)
        found = s.log.read_offsets(offsets, s.confirmed_offset(), verify_crc=True)
        assert found.all_good and is_map_view(found.messages)
        got = list(found.messages)
        assert [m.topic for m in got] == ["a" if i % 2 else "bb" for i in range(100)]
        assert [m.values()[1:] for m in got] == \
            [tuple(s.read_at(int(o)))[1:] for o in offsets]
