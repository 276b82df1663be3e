"""build_chunk, the upload's batch path: the records copied verbatim, key entries as the
per-record reference computes them, the same bytes whether it writes into a new buffer or a
reused (larger, dirty) one, sealed segments trusted by their footer CRC only while it
matches, and a damaged record named and never uploaded."""

from __future__ import annotations

import numpy as np
import pytest

import strata
from support import small_store_config
from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.consume_queue import UNIT_DTYPE
from strata.format.segment import HEADER_AREA
from strata.tiered.chunk import build_chunk
from strata.tiered.layout import KEY_ENTRY, key_hash, sort_keys


def mixed(i: int) -> strata.Message:
    kw: dict = {}
    shape = i % 5
    if shape == 0:
        kw["keys"] = (f"k{i}",)                           # the common shape: one key only
    elif shape == 1:
        kw["keys"] = (f"k{i}", f"é-{i}")
        kw["tags"] = "red"
    elif shape == 2:
        kw["properties"] = {"region": "eu"}
    elif shape == 3:
        kw["keys"] = (f"k{i}",)
        kw["properties"] = {rec.PROP_UNIQ_KEY: f"u{i}"}
    return strata.Message("orders", bytes([i % 251]) * (20 + i % 400), **kw)


def reference_keys(msgs, first: int) -> bytes:
    """Key entries the slow way: every record's properties parsed, every key hashed."""
    rows = []
    for i, m in enumerate(msgs):
        keys, _tags, uniq = rec.dispatch_properties(m.properties_raw)
        for k in (*keys, uniq) if uniq else keys:
            rows.append((key_hash("orders", k), m.store_timestamp, first + i))
    return sort_keys(np.array(rows, KEY_ENTRY)).tobytes() if rows else b""


@pytest.fixture
def store(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as s:
        for lo in range(0, 3000, 100):
            s.put_batch([mixed(i) for i in range(lo, lo + 100)])
        s.flush()                                       # full segments are sealed by a flush
        s.wait_dispatched()
        yield s


def test_chunks_hold_the_records_and_their_keys(store):
    dirty = bytearray(b"\xee" * (4 << 20))
    intact: set[int] = set()
    for q in range(store.queue_count("orders")):
        cq = store.queues.get("orders", q)
        units = cq.read_units(0, cq.max_offset())
        plain = build_chunk(store.log, "orders", q, 0, units)
        reused = build_chunk(store.log, "orders", q, 0, units, dirty, intact)
        assert reused.buffer is dirty and len(reused.log) < len(dirty)
        assert bytes(reused.log) == bytes(plain.log)
        assert (reused.cq, reused.keys, reused.meta) == (plain.cq, plain.keys, plain.meta)
        msgs = store.get("orders", q, 0, len(units)).messages
        assert len(msgs) == len(units)
        # the .log object is the records, back to back, byte for byte as in the log
        want = []
        for m in msgs:
            seg, at = store.log.locate(m.commitlog_offset)
            want.append(bytes(seg.mm[HEADER_AREA + at:HEADER_AREA + at + m.size]))
        assert bytes(plain.log) == b"".join(want)
        cq_units = np.frombuffer(plain.cq, UNIT_DTYPE)
        assert cq_units["offset"].tolist() == np.cumsum([0] + [m.size for m in msgs])[:-1] \
            .tolist()
        assert (cq_units["tag"] == units["tag"]).all()
        assert plain.keys == reference_keys(msgs, 0)
        assert plain.meta.keys_count == len(plain.keys) // KEY_ENTRY.itemsize > 0
    sealed = {s.base_offset for s in store.log.segments.segments if s.sealed}
    assert sealed and intact == sealed


def test_a_damaged_record_is_named_even_in_a_trusted_segment(store):
    seg = next(s for s in store.log.segments.segments if s.sealed)
    intact: set[int] = set()
    cq = store.queues.get("orders", 0)
    units = cq.read_units(0, cq.max_offset())
    build_chunk(store.log, "orders", 0, 0, units, None, intact)
    assert seg.base_offset in intact
    inside = units[(units["offset"] >= seg.base_offset)
                   & (units["offset"] < seg.base_offset + seg.wrote)]
    victim = int(inside["offset"][len(inside) // 2])
    at = HEADER_AREA + victim - seg.base_offset + int(inside["size"][len(inside) // 2]) - 6
    seg.mm[at] ^= 0x01                                   # a body byte of a sealed segment
    intact.clear()                                      # a new upload run checks again
    with pytest.raises(CorruptRecordError, match=str(victim)):
        build_chunk(store.log, "orders", 0, 0, units, None, intact)
    assert seg.base_offset not in intact
