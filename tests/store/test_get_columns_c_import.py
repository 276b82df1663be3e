"""``get_columns`` read as views builds its record batch through the Arrow C data interface: the structs written by one compiled call (``strata.format.arrow_c``) and
imported. The batch is the same as ``get``'s messages, valid to Arrow's full checks, keeps
what its buffers point into (the map read in place, or the copy) alive until Arrow releases
it — from any thread, through slices that outlive it, past the store's close — and then
lets go of it. Messages with keys get their key lists through the same import."""

from __future__ import annotations

import gc
import threading

import pyarrow as pa

import strata
from strata.store import arrow_read
from store_helpers import config, settle
from test_get_columns import as_rows
from test_get_columns_in_place import in_segment


def plain(i: int, topic: str = "t") -> strata.Message:
    """No keys, tags or properties: the C import's case. Bodies of 0 to 299 bytes (≤ 12:
    inline in the views)."""
    return strata.Message(topic, bytes([65 + i % 26]) * (i * 13 % 300), born_timestamp=7 + i)


def imported(batch) -> bool:
    """Whether ``batch`` came through the C import (its struct block is held with what the
    views point into: the read's span, or for the one-call read in place the segment's
    map)."""
    address = batch.column("body").buffers()[2].address
    for what in arrow_read.held_arrays():
        span = getattr(what[0], "span", what[0])
        if span.ctypes.data <= address < span.ctypes.data + max(1, len(span)):
            return True
    return False


def test_plain_messages_in_place_and_copied_equal_get(tmp_path):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("one", queues=1)
        s.create_topic("three", queues=3)   # interleaved records: read from one copy
        s.put_batch([plain(i, "one") for i in range(3000)])
        s.put_batch([plain(i, "three") for i in range(600)])
        settle(s)
        for topic, q, off, n in (("one", 0, 0, 1), ("one", 0, 5, 2999), ("one", 0, 100, 1024),
                                 ("three", 2, 3, 150)):
            r = s.get_columns(topic, q, off, n)
            g = s.get(topic, q, off, n)
            assert imported(r.batch)
            assert in_segment(s, r.batch) == (topic == "one")
            assert r.batch.schema == arrow_read.schema(True)
            r.batch.validate(full=True)
            assert (r.status, r.next_offset) == (g.status, g.next_offset)
            assert r.batch.to_pylist() == as_rows(g.messages)
            assert r.batch.column("keys").to_pylist() == [[]] * len(g.messages)


def test_buffers_live_until_arrow_releases_the_batch(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=1)
        s.put_batch([plain(i) for i in range(200)])
        settle(s)
        gc.collect()
        before = arrow_read.release_held()
        batch = s.get_columns("t", 0, 10, 100).batch
        want = as_rows(s.get("t", 0, 10, 100).messages)
        assert arrow_read.release_held() == before + 1
        part = batch.slice(40, 30)
        table = pa.Table.from_batches([batch])
        del batch
        gc.collect()
        assert arrow_read.release_held() == before + 1   # the slice and table hold it
        del table
    gc.collect()
    assert part.to_pylist() == want[40:70]            # the store closed: still readable
    done = threading.Event()

    def drop(held: list) -> None:   # the last reference let go on another thread
        held.clear()
        done.set()

    held = [part]
    del part
    threading.Thread(target=drop, args=(held,)).start()
    assert done.wait(10)
    gc.collect()
    assert arrow_read.release_held() == before


def test_keys_and_properties_come_through_the_import_too(tmp_path):
    with strata.open(tmp_path / "s", config(segment_size=8 << 20)) as s:
        s.create_topic("t", queues=1)
        s.put_batch([strata.Message("t", b"body%d" % i, keys=[f"k{i}", "ключ"][:i % 3],
                                    tags="a" if i % 4 else None,
                                    properties={"h": "é"} if i % 5 == 0 else None)
                     for i in range(1500)])
        settle(s)
        gc.collect()
        before = arrow_read.release_held()
        r = s.get_columns("t", 0, 3, 1400)
        assert arrow_read.release_held() == before + 1 and imported(r.batch)
        r.batch.validate(full=True)
        g = s.get("t", 0, 3, 1400)
        assert r.batch.to_pylist() == as_rows(g.messages)
        assert r.batch.column("keys").to_pylist()[:4] == [[], ["k4"], ["k5", "ключ"], []]
        del r
        gc.collect()
        assert arrow_read.release_held() == before
