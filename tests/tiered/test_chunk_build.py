"""build_chunk, the upload's batch path: the records copied verbatim, key entries as the
per-record reference computes them, the same bytes whether it writes into a new buffer or a
reused (larger, dirty) one, sealed segments trusted by their footer CRC only while it
matches, and a damaged record named and never uploaded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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


def test_footer_crc_deferred_checks_each_record(store):
    """``footer_now=False`` (the upload's first chunk): no segment's footer CRC is computed
    then, the chunk is the same, and each record's own CRC still names a damaged one."""
    intact: set[int] = set()
    cq = store.queues.get("orders", 0)
    units = cq.read_units(0, cq.max_offset())
    later = build_chunk(store.log, "orders", 0, 0, units, None, intact, footer_now=False)
    assert intact == set()
    now = build_chunk(store.log, "orders", 0, 0, units, None, intact)
    assert intact and bytes(later.log) == bytes(now.log)
    assert (later.cq, later.keys, later.meta) == (now.cq, now.keys, now.meta)
    assert build_chunk(store.log, "orders", 0, 0, units, None, intact,
                       footer_now=False).meta == now.meta       # a known segment stays trusted
    seg = next(s for s in store.log.segments.segments if s.sealed)
    inside = units[(units["offset"] >= seg.base_offset)
                   & (units["offset"] < seg.base_offset + seg.wrote)]
    victim = int(inside["offset"][len(inside) // 2])
    at = HEADER_AREA + victim - seg.base_offset + int(inside["size"][len(inside) // 2]) - 6
    seg.mm[at] ^= 0x01
    with pytest.raises(CorruptRecordError, match=str(victim)):
        build_chunk(store.log, "orders", 0, 0, units, None, set(), footer_now=False)


# ---------------------------------------------------------------- the compiled builder

def varied(i: int) -> strata.Message:
    """Two topics interleaved in the log, every properties shape the builder parses: no
    properties, tags only, one key, several keys (some long enough for two BLAKE2b blocks,
    one message with more keys than records), unique keys (one empty: no entry), UTF-8."""
    topic = "orders" if i % 3 else "audit-log"
    kw: dict = {}
    shape = i % 9
    if shape == 0:
        kw["keys"] = (f"k{i}",)
    elif shape == 1:
        kw["keys"] = (f"k{i}", "long-" + "x" * (150 + i % 300), f"ü{i}")
        kw["tags"] = "red"
    elif shape == 2:
        kw["tags"] = "blue"
    elif shape == 3:
        kw["keys"] = (f"k{i}",)
        kw["properties"] = {rec.PROP_UNIQ_KEY: f"u{i}", "a": "b"}
    elif shape == 4:
        kw["properties"] = {rec.PROP_UNIQ_KEY: ""}
    elif shape == 5 and i % 45 == 5:
        kw["keys"] = tuple(f"many-{i}-{j}" for j in range(300))
    elif shape == 6:
        kw["keys"] = ("same", "same")
    return strata.Message(topic, bytes([i % 251]) * (1 + i % 700), **kw)


def test_the_compiled_builder_matches_the_python_reference(tmp_store_dir):
    """Byte for byte the chunks of the Python builder it replaced (tests/tiered/
    chunk_reference.py): .log, .cq, .keys and the metadata, with and without trusted
    segments, from new and from reused dirty buffers, whole queues and runs inside them."""
    from chunk_reference import build_chunk as reference
    with strata.open(tmp_store_dir, small_store_config()) as s:
        for lo in range(0, 2400, 120):
            s.put_batch([varied(i) for i in range(lo, lo + 120)])
        s.flush()
        s.wait_dispatched()
        dirty = bytearray(b"\xab" * (8 << 20))
        checked = grown = 0
        for topic in ("orders", "audit-log"):
            for q in range(s.queue_count(topic)):
                cq = s.queues.get(topic, q)
                n = cq.max_offset()
                for first, count in ((0, n), (7, n - 20), (n - 1, 1)):
                    units = cq.read_units(first, count)
                    for intact in (None, set()):
                        want = reference(s.log, topic, q, first, units, None,
                                         None if intact is None else set())
                        got = build_chunk(s.log, topic, q, first, units, dirty, intact)
                        assert bytes(got.log) == bytes(want.log)
                        assert (got.cq, got.keys, got.meta) == (want.cq, want.keys, want.meta)
                        dirty = got.buffer
                        checked += 1
                        grown = max(grown, got.meta.keys_count - got.meta.count)
                assert cq.max_offset() >= 100
        assert checked == 2 * 3 * (s.queue_count("orders") + s.queue_count("audit-log"))
        assert grown > 16      # more key entries than the first guess: the arrays grew


def _check_blake2b(data: bytes) -> None:
    import hashlib

    from strata.tiered.blake2b import blake2b64_of
    buf = np.zeros(len(data) + 256, np.uint8)
    buf[:len(data)] = np.frombuffer(data, np.uint8)
    want = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    assert int(blake2b64_of(buf, len(data))) == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_compiled_blake2b_is_hashlib(data):
    _check_blake2b(data)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 129, 255, 256, 257, 1000])
def test_compiled_blake2b_at_block_edges(n):
    _check_blake2b(bytes(i * 7 % 256 for i in range(n)))


def test_a_record_of_another_topic_is_named(store):
    """Units pointing at another topic's record of the same queue id and offset (a damaged
    consume queue): named, not uploaded."""
    other = []
    for i in range(3):
        other.append(strata.Message("other", b"x" * 30, keys=(f"o{i}",)))
    store.put_batch(other)
    store.flush()
    store.wait_dispatched()
    cq = store.queues.get("other", 0)
    units = cq.read_units(0, cq.max_offset())
    assert len(units)
    with pytest.raises(CorruptRecordError, match=r"orders/0 offset 0: .* commit-log offset "
                       rf"{int(units['offset'][0])} is damaged \(another"):
        build_chunk(store.log, "orders", 0, 0, units)


def test_damage_in_the_active_segment_is_named_per_record(store):
    """The active (unsealed) segment: each record's own CRC32C is checked, and a record whose
    CRC still matches but whose properties overrun their section is named too."""
    import crc32c as crc
    store.put_batch([strata.Message("orders", b"y" * 40, keys=(f"a{i}",)) for i in range(8)])
    store.flush()
    store.wait_dispatched()
    q = 0
    cq = store.queues.get("orders", q)
    units = cq.read_units(0, cq.max_offset())
    seg = store.log.segments.segments[-1]
    assert not seg.sealed
    tail = units[units["offset"] >= seg.base_offset]
    assert len(tail)
    phys, size = int(tail["offset"][-1]), int(tail["size"][-1])
    at = HEADER_AREA + phys - seg.base_offset
    seg.mm[at + size - 6] ^= 0x01                          # a body byte: the CRC fails
    with pytest.raises(CorruptRecordError, match=rf"commit-log offset {phys} is damaged "
                                                 r"\(its CRC32C"):
        build_chunk(store.log, "orders", q, 0, units, None, set())
    seg.mm[at + size - 6] ^= 0x01
    build_chunk(store.log, "orders", q, 0, units, None, set())   # whole again
    m = store.get("orders", q, len(units) - 1, 1).messages[0]
    props_at = at + (m.size - 4 - len(m.body) - len(m.properties_raw))
    assert bytes(seg.mm[props_at:props_at + 6]) == b"\x04\x00KEYS"
    seg.mm[props_at] = 0x40                                # a name running past the section
    seg.mm[at + rec.POS_CRC:at + rec.POS_CRC + 4] = crc.crc32c(
        bytes(seg.mm[at + rec.CRC_START:at + size])).to_bytes(4, "little")
    with pytest.raises(CorruptRecordError, match=rf"commit-log offset {phys} is damaged "
                                                 r"\(its properties overrun"):
        build_chunk(store.log, "orders", q, 0, units, None, set())
