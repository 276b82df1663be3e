"""The compiled decode loops (strata.spark.kernels) against the record format's own decoder:
header fields, byte-range gathers, and damaged records reported instead of read past."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.format import record as rec
from strata.spark import kernels as k
from strata.spark.decode import _Column


@pytest.mark.parametrize("case", ["equal", "similar", "one-huge", "at-buffer-end", "empty-rows",
                                  "nulls"])
def test_gather_equals_slicing(case):
    rng = np.random.default_rng(7)
    data = np.frombuffer(rng.bytes(1 << 16), np.uint8)
    n = 300
    mask = None
    if case == "equal":
        lens = np.full(n, 100)
    elif case in ("similar", "nulls"):
        lens = rng.integers(80, 120, n)
        mask = rng.random(n) < 0.7 if case == "nulls" else None
    elif case == "one-huge":
        lens = np.full(n, 10)
        lens[5] = 40_000
    elif case == "at-buffer-end":
        lens = rng.integers(1, 50, n)
        lens[-1] = 200
    else:
        lens = rng.integers(0, 3, n)
    lens = lens.astype(np.int64)
    starts = rng.integers(0, len(data) - lens.max() - 1, n).astype(np.int64)
    if case == "at-buffer-end":
        starts[0] = len(data) - lens[0]  # a short row ending exactly at the buffer's end
    col = _Column(lens, mask)
    col.copy(data, starts[:120], 0, 120)             # rows from two sources, one buffer
    other = data.copy()
    col.copy(other, starts[120:], 120, n)
    want = [data[s:s + m].tobytes() for s, m in zip(starts, lens)]
    if mask is not None:
        want = [w if keep else None for w, keep in zip(want, mask)]
    assert col.array().to_pylist() == want


HOSTS = [("10.0.0.7", 4321), ("::1", 9876), ("2001:db8::42", 1), ("192.168.1.1", 65535)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS),
                          st.lists(st.text(min_size=1, max_size=5), max_size=3),
                          st.one_of(st.none(), st.text(min_size=1, max_size=6)),
                          st.dictionaries(st.text("abcxyz", min_size=1, max_size=4),
                                          st.text(max_size=8), max_size=3),
                          st.binary(max_size=300)), min_size=1, max_size=12))
def test_scan_headers_reads_what_the_record_decoder_reads(msgs):
    buf = bytearray(b"\xee" * 7)                     # records at odd, unaligned positions
    pos = []
    for i, (born, store, keys, tags, props, body) in enumerate(msgs):
        pos.append(len(buf))
        buf += rec.encode_record(queue_id=i % 3, flag=0, queue_offset=100 + i,
                                 physical_offset=5000 + len(buf), sys_flag=0,
                                 born_ts=1_700_000_000_000 + i, store_ts=1_800_000_000_000 + i,
                                 tx_offset=0, reconsume=0, born_host=born, store_host=store,
                                 topic="t%d" % i, keys=keys, tags=tags, properties=props,
                                 body=body)
    data = np.frombuffer(bytes(buf), np.uint8)
    pos = np.array(pos, np.int64)
    n = len(pos)
    fields = np.empty((k.FIELDS, n), np.int64)
    assert k.scan_headers(data, pos, 5000 + pos, fields, 0, True) == (-1, k.GOOD)
    key_count, user_count, tag_start, tag_len = (np.empty(n, np.int64) for _ in range(4))
    assert k.scan_properties(data, fields[k.PROPS_START], fields[k.PROPS_LEN], key_count,
                             user_count, tag_start, tag_len, 0) == -1

    def entries(users, count):
        spans = [np.empty(int(count.sum()), np.int64) for _ in range(4)]
        assert k.property_spans(data, fields[k.PROPS_START], fields[k.PROPS_LEN], users, 0,
                                *spans) == len(spans[0])
        text = [data[a:a + b].tobytes().decode() for a, b in zip(spans[0], spans[1])]
        values = [data[a:a + b].tobytes().decode() for a, b in zip(spans[2], spans[3])]
        return iter(zip(text, values))

    key_values = (v for _, v in entries(False, key_count))
    user_entries = entries(True, user_count)
    for j, p in enumerate(pos.tolist()):
        m = rec.decode_record(data, p)
        f = fields[:, j]
        assert (f[k.QUEUE_OFFSET], f[k.STORE_TS], f[k.BORN_TS]) == \
            (m.queue_offset, m.store_timestamp, m.born_timestamp)
        assert f[k.SYS_FLAG] == m.sys_flag
        assert data[f[k.BODY_START]:f[k.BODY_START] + f[k.BODY_LEN]].tobytes() == m.body
        props = rec.decode_properties(data[f[k.PROPS_START]:f[k.PROPS_START] + f[k.PROPS_LEN]])
        assert props[0] == tuple(m.keys) and props[1] == m.tags
        assert tuple(next(key_values) for _ in range(key_count[j])) == tuple(m.keys)
        assert dict(next(user_entries) for _ in range(user_count[j])) == dict(m.properties)
        tag = data[tag_start[j]:tag_start[j] + tag_len[j]].tobytes().decode() \
            if tag_len[j] >= 0 else None
        assert tag == m.tags
        if m.keys:
            assert f[k.KEY_LEN] != k.NO_KEY
            key = data[f[k.KEY_START]:f[k.KEY_START] + f[k.KEY_LEN]].tobytes()
            assert key == m.keys[0].encode()
        else:
            assert f[k.KEY_LEN] == k.NO_KEY


def _one_record(phys: int, body=b"x" * 40, keys=("key-1",)) -> bytearray:
    return bytearray(rec.encode_record(
        queue_id=0, flag=0, queue_offset=0, physical_offset=phys, sys_flag=0, born_ts=1,
        store_ts=2, tx_offset=0, reconsume=0, born_host=HOSTS[0], store_host=HOSTS[0],
        topic="t", keys=keys, body=body))


@pytest.mark.parametrize("damage", ["none", "magic", "offset", "body-past-end", "key-past-props",
                                    "position-past-end", "negative-position", "field-lengths",
                                    "trailer", "body-byte"])
def test_scan_headers_reports_a_damaged_record_instead_of_reading_past_it(damage):
    good = _one_record(0)
    raw = _one_record(len(good))
    pos = 0
    if damage == "magic":
        raw[4] ^= 0xFF
    elif damage == "offset":
        struct.pack_into("<q", raw, 28, 12345)
    elif damage == "body-past-end":
        struct.pack_into("<I", raw, 68, 1 << 30)
    elif damage == "key-past-props":
        props_at = rec.HEADER_SIZE + 12 + 1
        struct.pack_into("<H", raw, props_at + 6, 60000)
    elif damage == "field-lengths":     # magic, offset, both lengths right; body 1 byte short
        struct.pack_into("<I", raw, rec.POS_BODY_LENGTH, 39)
    elif damage == "trailer":           # the length at the end disagrees with the one in front
        struct.pack_into("<I", raw, len(raw) - rec.TRAILER_SIZE, len(raw) + 8)
    elif damage == "body-byte":         # only the CRC32C sees it
        raw[len(raw) - rec.TRAILER_SIZE - 3] ^= 0x01
    elif damage == "none":
        pass
    elif damage == "position-past-end":
        pos = len(raw) - 10
    else:
        pos = -5
    data = np.frombuffer(bytes(good + raw), np.uint8)
    at = np.array([0, len(good) + pos], np.int64)
    phys = at.copy()
    phys[1] = len(good)                              # what the consume queue says it is
    fields = np.zeros((k.FIELDS, 2), np.int64)
    assert k.scan_headers(data, at[:1], phys[:1], fields, 0, True) == (-1, k.GOOD)
    if damage == "none":
        assert k.scan_headers(data, at, phys, fields, 0, True) == (-1, k.GOOD)
        return
    if damage == "body-byte":   # intact but for its CRC32C: only a CRC-checking read sees it
        assert k.scan_headers(data, at, phys, fields, 0, False) == (-1, k.GOOD)
        assert k.scan_headers(data, at, phys, fields, 0, True) == (1, k.CRC_MISMATCH)
    elif damage == "key-past-props":   # whole, so the CRC32C (when checked) fails it first
        assert k.scan_headers(data, at, phys, fields, 0, False) == (1, k.NO_RECORD)
        assert k.scan_headers(data, at, phys, fields, 0, True) == (1, k.CRC_MISMATCH)
    else:
        for crc in (False, True):
            assert k.scan_headers(data, at, phys, fields, 0, crc) == (1, k.NO_RECORD)
    assert fields[k.BODY_LEN, 0] == 40               # the intact record before it was read


def test_read_range_key_column_with_and_without_properties(tmp_path):
    import strata
    from strata.spark.planning import QueueRange
    from strata.spark.schema import arrow_schema, read_schema
    from strata.spark.source import read_range

    path = tmp_path / "s"
    with strata.open(path, strata.StoreConfig(prefault=False)) as store:
        store.create_topic("plain", queues=1)
        store.create_topic("mixed", queues=1)
        store.put_batch([strata.Message("plain", b"p%d" % i) for i in range(50)])
        store.put_batch([strata.Message("mixed", b"m%d" % i,
                                        keys=(f"k{i}",) if i % 2 else (),
                                        tags="t" if i % 3 else None) for i in range(50)])
        store.wait_dispatched()
    schema = arrow_schema(read_schema())
    plain = [b for b in read_range(str(path), QueueRange("plain", 0, 0, 50), schema, 64)]
    assert plain[0].column(0).null_count == 50
    assert plain[0].column(1).to_pylist() == [b"p%d" % i for i in range(50)]
    mixed = [b for b in read_range(str(path), QueueRange("mixed", 0, 0, 50), schema, 64)]
    assert mixed[0].column(0).to_pylist() == [b"k%d" % i if i % 2 else None for i in range(50)]


def test_scan_properties_reports_an_entry_running_past_the_section():
    good = _one_record(0)
    bad = _one_record(len(good))
    props_at = rec.HEADER_SIZE + 12 + 1                    # after the hosts and topic "t"
    struct.pack_into("<H", bad, props_at + 2 + 4, 200)     # KEYS value length: past the end
    data = np.frombuffer(bytes(good + bad), np.uint8)
    at = np.array([0, len(good)], np.int64)
    fields = np.zeros((k.FIELDS, 2), np.int64)
    assert k.scan_headers(data, at, at.copy(), fields, 0, False) == (1, k.NO_RECORD)  # key check
    key_count, user_count, tag_start, tag_len = (np.zeros(2, np.int64) for _ in range(4))
    fields[k.PROPS_START, 1] = len(good) + props_at
    fields[k.PROPS_LEN, 1] = fields[k.PROPS_LEN, 0]
    assert k.scan_properties(data, fields[k.PROPS_START], fields[k.PROPS_LEN], key_count,
                             user_count, tag_start, tag_len, 0) == 1
    assert key_count[0] == 1 and tag_len[0] == -1


def test_metadata_columns_equal_the_stores_own_decoding(tmp_path):
    """tags, keys and msg_id (built for a whole batch at once) equal what get() returns, for
    batches written under one store host and for a batch mixing two (IPv4 and IPv6)."""
    import strata
    from strata.spark.planning import QueueRange
    from strata.spark.schema import arrow_schema, read_schema
    from strata.spark.source import read_range

    path = tmp_path / "s"
    cfg = dict(segment_size=1 << 20, prefault=False, consume_queue_units=4096,
               index_slots=1024, index_entries=8192)
    for host in (("10.1.2.3", 10911), ("2001:db8::7", 10911)):
        with strata.open(path, strata.StoreConfig(store_host=host, **cfg)) as store:
            store.create_topic("t", queues=1)
            store.put_batch([strata.Message("t", b"m%d" % i,
                                            keys=tuple(f"k{i}-{j}" for j in range(i % 3)),
                                            tags=f"tag{i % 4}" if i % 5 else None,
                                            properties={"p": "v"} if i % 2 else None)
                             for i in range(30)])
            store.wait_dispatched()
    schema = arrow_schema(read_schema(True, True))
    with strata.open(path, readonly=True) as store:
        want = store.get("t", 0, 0, 100).messages
    for batch_rows in (30, 100):                        # one host per batch, then both in one
        got = []
        for b in read_range(str(path), QueueRange("t", 0, 0, 60), schema, batch_rows):
            got += b.select(["tags", "keys", "msg_id", "headers"]).to_pylist()
        assert [g["tags"] for g in got] == [m.tags for m in want]
        assert [tuple(g["keys"]) for g in got] == [tuple(m.keys) for m in want]
        assert [g["msg_id"] for g in got] == [m.msg_id for m in want]
        assert [{h["key"]: h["value"].decode() for h in g["headers"]} for g in got] == \
            [dict(m.properties) for m in want]
