"""Byte layouts of the commit log (strata.format): round trips, peeks, limits, damage detection.

Pure functions only: no files, no threads.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from strata.errors import (CorruptRecordError, InvalidInputError, InvalidTopicError,
                           MessageTooLargeError, StrataError)
from strata.format import checkpoint as cpf
from strata.format import record as rec
from strata.format import segment as segf

# --------------------------------------------------------------------------- strategies

i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
u32 = st.integers(0, (1 << 32) - 1)
port = st.integers(0, 0xFFFF)

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
hosts = st.tuples(st.one_of(ipv4, ipv6), port)

TOPIC_ALPHABET = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=127)

# Any unicode the codec can encode (hypothesis' text() leaves out lone surrogates).
utext = st.text(max_size=40)
keys = st.lists(st.text(min_size=1, max_size=30), max_size=4).map(tuple)
tags = st.none() | st.text(min_size=1, max_size=30)
prop_names = st.text(min_size=1, max_size=20).filter(lambda s: s not in rec.RESERVED_PROPERTIES)
properties = st.dictionaries(prop_names, utext, max_size=6)
bodies = st.binary(max_size=2048)


@st.composite
def records(draw):
    """Keyword arguments for ``encode_record`` covering every field."""
    return dict(
        queue_id=draw(i32), flag=draw(i32), queue_offset=draw(i64),
        physical_offset=draw(i64),
        # bits 0x10/0x20 are owned by the encoder (host families); the rest pass through
        sys_flag=draw(i32),
        born_ts=draw(i64), store_ts=draw(i64), tx_offset=draw(i64), reconsume=draw(i32),
        born_host=draw(hosts), store_host=draw(hosts), topic=draw(topics),
        keys=draw(keys), tags=draw(tags), properties=draw(properties), body=draw(bodies))


def expected_sys_flag(kw) -> int:
    flag = kw["sys_flag"] & ~(rec.SYSFLAG_BORN_HOST_V6 | rec.SYSFLAG_STORE_HOST_V6)
    if ipaddress.ip_address(kw["born_host"][0]).version == 6:
        flag |= rec.SYSFLAG_BORN_HOST_V6
    if ipaddress.ip_address(kw["store_host"][0]).version == 6:
        flag |= rec.SYSFLAG_STORE_HOST_V6
    return flag


def simple_record(**over) -> bytes:
    kw = dict(queue_id=3, flag=7, queue_offset=42, physical_offset=4096, sys_flag=0,
              born_ts=1_700_000_000_000, store_ts=1_700_000_000_123, tx_offset=0, reconsume=1,
              born_host=("192.168.1.20", 40000), store_host=("10.0.0.1", 10911),
              topic="orders", keys=("o-1", "o-2"), tags="new", properties={"a": "b"},
              body=b"hello world")
    kw.update(over)
    return rec.encode_record(**kw)


# --------------------------------------------------------------------------- message record


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(kw=records())
def test_message_record_round_trip(kw):
    raw = rec.encode_record(**kw)
    n_hosts = sum(18 if ipaddress.ip_address(h[0]).version == 6 else 6
                  for h in (kw["born_host"], kw["store_host"]))
    props = rec.encode_properties(kw["keys"], kw["tags"], kw["properties"])
    assert len(raw) == rec.record_size(n_hosts, len(kw["topic"]), len(props), len(kw["body"]))

    assert rec.check_record(raw, 0, len(raw)) == (rec.RecordKind.MESSAGE, len(raw))
    m = rec.decode_record(raw)
    assert m.size == len(raw)
    assert m.topic == kw["topic"]
    assert m.queue_id == kw["queue_id"]
    assert m.flag == kw["flag"]
    assert m.queue_offset == kw["queue_offset"]
    assert m.commitlog_offset == kw["physical_offset"]
    assert m.sys_flag == expected_sys_flag(kw)
    assert m.born_timestamp == kw["born_ts"]
    assert m.store_timestamp == kw["store_ts"]
    assert m.prepared_transaction_offset == kw["tx_offset"]
    assert m.reconsume_times == kw["reconsume"]
    assert m.born_host == kw["born_host"]
    assert m.store_host == kw["store_host"]
    assert m.keys == kw["keys"]
    assert m.tags == kw["tags"]
    assert m.properties == kw["properties"]
    assert m.body == kw["body"]
    assert m.msg_id == rec.make_msg_id(kw["store_host"], kw["physical_offset"])


@settings(max_examples=200)
@given(kw=records(), prefix=st.binary(max_size=64), suffix=st.binary(max_size=64))
def test_peek_functions_agree_with_decode(kw, prefix, suffix):
    """Readers filter on peeked fields; they must equal what a full decode says, at any position."""
    raw = rec.encode_record(**kw)
    buf = bytearray(prefix + raw + suffix)
    pos = len(prefix)
    m = rec.decode_record(buf, pos)
    size, qid, qoff, phys, sys_flag, store_ts = rec.peek(buf, pos)
    assert (size, qid, qoff, phys, sys_flag, store_ts) == (
        m.size, m.queue_id, m.queue_offset, m.commitlog_offset, m.sys_flag, m.store_timestamp)

    start, n = rec.topic_span(buf, pos)
    assert bytes(buf[start:start + n]).decode() == m.topic
    pstart, pn = rec.properties_span(buf, pos)
    assert pstart == start + n
    section = bytes(buf[pstart:pstart + pn])
    assert rec.decode_properties(section) == (m.keys, m.tags, m.properties)
    assert tuple(rec.find_property(section, rec.PROP_KEYS)) == m.keys
    assert rec.find_property(section, rec.PROP_TAGS) == ([m.tags] if m.tags is not None else [])

    # the fixed positions documented in the module
    assert rec.I32_AT.unpack_from(buf, pos + rec.POS_QUEUE_ID)[0] == m.queue_id
    assert rec.I32_AT.unpack_from(buf, pos + rec.POS_FLAG)[0] == m.flag
    assert rec.I64_AT.unpack_from(buf, pos + rec.POS_QUEUE_OFFSET)[0] == m.queue_offset
    assert rec.I64_AT.unpack_from(buf, pos + rec.POS_PHYSICAL_OFFSET)[0] == m.commitlog_offset
    assert rec.I64_AT.unpack_from(buf, pos + rec.POS_BORN_TIMESTAMP)[0] == m.born_timestamp
    assert rec.I64_AT.unpack_from(buf, pos + rec.POS_STORE_TIMESTAMP)[0] == m.store_timestamp
    assert rec.U32.unpack_from(buf, pos + rec.POS_BODY_LENGTH)[0] == len(m.body)
    assert rec.U16_AT.unpack_from(buf, pos + rec.POS_TOPIC_LENGTH)[0] == len(m.topic)
    # the trailer repeats the length, so the log can be walked backwards
    assert rec.U32.unpack_from(buf, pos + size - rec.TRAILER_SIZE)[0] == size
    assert rec.check_record(buf, pos, pos + size) == (rec.RecordKind.MESSAGE, size)


@pytest.mark.parametrize("born,store", [
    (("127.0.0.1", 1), ("10.1.2.3", 10911)),
    (("::1", 0), ("10.1.2.3", 10911)),
    (("10.1.2.3", 65535), ("2001:db8::42", 10911)),
    (("fe80::1:2:3:4", 8080), ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 65535)),
])
def test_ipv4_and_ipv6_hosts(born, store):
    raw = simple_record(born_host=born, store_host=store)
    m = rec.decode_record(raw)
    assert (m.born_host, m.store_host) == (born, store)
    assert bool(m.sys_flag & rec.SYSFLAG_BORN_HOST_V6) == (":" in born[0])
    assert bool(m.sys_flag & rec.SYSFLAG_STORE_HOST_V6) == (":" in store[0])


def test_empty_body_and_no_properties():
    raw = rec.encode_record(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
                            born_ts=0, store_ts=0, tx_offset=0, reconsume=0,
                            born_host=("0.0.0.0", 0), store_host=("0.0.0.0", 0), topic="t")
    assert len(raw) == rec.HEADER_SIZE + 12 + 1 + 0 + 0 + rec.TRAILER_SIZE
    m = rec.decode_record(raw)
    assert (m.body, m.keys, m.tags, m.properties) == (b"", (), None, {})


def test_unicode_properties_keys_and_tags():
    props = {"città": "naïve ☃", "名前": "値 🚀", "empty": "", "UNIQ_KEY": "x"}
    raw = simple_record(keys=("ключ", "🔑"), tags="标签", properties=props)
    m = rec.decode_record(raw)
    assert m.keys == ("ключ", "🔑")
    assert m.tags == "标签"
    assert m.properties == props


def _props_of_size(n: int) -> dict[str, str]:
    """One property whose encoded section is exactly ``n`` bytes (2 + 1 + 2 + value)."""
    return {"p": "v" * (n - 5)}


def test_properties_at_limit_accepted_one_more_refused():
    assert len(rec.encode_properties((), None, _props_of_size(32767))) == 32767
    raw = simple_record(keys=(), tags=None, properties=_props_of_size(32767))
    assert rec.decode_record(raw).properties == _props_of_size(32767)

    with pytest.raises(MessageTooLargeError, match="32768.*32767"):
        rec.encode_properties((), None, _props_of_size(32768))
    # keys and tags count towards the same limit: the entry KEYS=k takes 2+4+2+1 = 9 bytes
    assert len(rec.encode_properties(("k",), None, _props_of_size(32767 - 9))) == 32767
    with pytest.raises(MessageTooLargeError):
        rec.encode_properties(("k",), None, _props_of_size(32767 - 9 + 1))
    with pytest.raises(MessageTooLargeError):
        simple_record(keys=(), tags=None, properties=_props_of_size(32768))


def test_multibyte_properties_are_limited_by_encoded_bytes():
    value = "é" * ((32767 - 5) // 2)  # 2 bytes each in UTF-8
    assert len(rec.encode_properties((), None, {"p": value})) == 32767
    with pytest.raises(MessageTooLargeError):
        rec.encode_properties((), None, {"p": value + "é"})


def test_topic_of_127_accepted_128_refused():
    t127 = "a" * 127
    assert rec.decode_record(simple_record(topic=t127)).topic == t127
    with pytest.raises(InvalidTopicError, match="length 128"):
        simple_record(topic="a" * 128)


@pytest.mark.parametrize("topic", ["", "../x", "a/b", "a b", "ä", "a.b", "x\n"])
def test_bad_topic_names_refused(topic):
    with pytest.raises(InvalidTopicError) as ei:
        rec.encode_topic(topic)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, StrataError)
    assert "topic" in str(ei.value)


def test_non_str_topic_refused():
    with pytest.raises(InvalidTopicError, match="must be a str"):
        rec.encode_topic(b"orders")


@pytest.mark.parametrize("kw,match", [
    (dict(properties={"KEYS": "x"}), "reserved"),
    (dict(properties={"TAGS": "x"}), "reserved"),
    (dict(properties={"": "x"}), "property names"),
    (dict(properties={"a": 1}), "must be a str"),
    (dict(keys=("",)), "keys"),
    (dict(keys=(5,)), "keys"),
    (dict(tags=""), "tags"),
    (dict(born_host=("not-an-ip", 1)), "host"),
    (dict(store_host=("10.0.0.1", 70000)), "port"),
    (dict(keys=("\ud800",)), "UTF-8|utf-8|encod"),
    (dict(properties={"a": "\udfff"}), "UTF-8|utf-8|encod"),
])
def test_bad_record_fields_refused(kw, match):
    with pytest.raises(InvalidInputError, match=match):
        simple_record(**kw)


def test_large_body_round_trip():
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    m = rec.decode_record(simple_record(body=body))
    assert m.body == body


# --------------------------------------------------------------------------- damage detection


def test_every_single_bit_flip_is_detected():
    raw = simple_record(born_host=("::1", 5))
    for i in range(len(raw)):
        for bit in range(8):
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            with pytest.raises(CorruptRecordError) as ei:
                rec.check_record(bad, 0, len(bad))
            assert ei.value.offset == 0


@settings(max_examples=200)
@given(kw=records(), data=st.data())
def test_random_bit_flip_detected(kw, data):
    raw = bytearray(rec.encode_record(**kw))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptRecordError):
        rec.check_record(raw, 0, len(raw))


@settings(max_examples=100)
@given(kw=records(), data=st.data())
def test_torn_tail_detected(kw, data):
    """A record cut short (the rest of the file never written) is never taken for a record."""
    raw = rec.encode_record(**kw)
    n = data.draw(st.integers(0, len(raw) - 1))
    # cut off: the buffer ends early
    with pytest.raises(CorruptRecordError):
        rec.check_record(raw[:n], 0, n)
    # torn: the last bytes read back as zeros (preallocated file, page never written)
    torn = raw[:n] + bytes(len(raw) - n)
    assume(torn != raw)  # zeroing bytes that were zero already tears nothing
    with pytest.raises(CorruptRecordError):
        rec.check_record(torn, 0, len(torn))


def test_zeroed_record_detected():
    raw = simple_record()
    with pytest.raises(CorruptRecordError, match="zero"):
        rec.check_record(bytes(len(raw)), 0, len(raw))


def test_check_record_names_position():
    raw = simple_record()
    buf = bytearray(100) + bytearray(raw)
    assert rec.check_record(buf, 100, len(buf)) == (rec.RecordKind.MESSAGE, len(raw))
    buf[100 + 50] ^= 0x80
    with pytest.raises(CorruptRecordError, match="CRC") as ei:
        rec.check_record(buf, 100, len(buf))
    assert ei.value.offset == 100
    assert rec.check_record(buf, 100, len(buf), verify_crc=False)[1] == len(raw)


def test_record_does_not_fit_limit():
    raw = simple_record()
    with pytest.raises(CorruptRecordError):
        rec.check_record(raw, 0, len(raw) - 1)


# --------------------------------------------------------------------------- blank record


@given(length=st.integers(rec.BLANK_MIN_SIZE, 1 << 16), pad=st.integers(0, 32))
def test_blank_record_round_trip(length, pad):
    buf = bytearray(pad + length)
    rec.write_blank(buf, pad, length)
    assert rec.check_record(buf, pad, pad + length) == (rec.RecordKind.BLANK, length)
    assert rec.U32.unpack_from(buf, pad)[0] == length
    assert rec.U32.unpack_from(buf, pad + 4)[0] == rec.BLANK_MAGIC
    assert rec.U32.unpack_from(buf, pad + length - 4)[0] == length


def test_blank_record_too_small_or_damaged():
    with pytest.raises(ValueError):
        rec.write_blank(bytearray(16), 0, rec.BLANK_MIN_SIZE - 1)
    buf = bytearray(64)
    rec.write_blank(buf, 0, 64)
    with pytest.raises(CorruptRecordError):   # does not fit what remains
        rec.check_record(buf, 0, 32)
    buf[60] ^= 1  # trailer
    with pytest.raises(CorruptRecordError, match="trailer"):
        rec.check_record(buf, 0, 64)


# --------------------------------------------------------------------------- segment header/footer


@given(kind=st.sampled_from([segf.KIND_COMMIT_LOG, segf.KIND_CONSUME_QUEUE]),
       base=u64, size=u64)
def test_segment_header_round_trip(kind, base, size):
    h = segf.SegmentHeader(kind=kind, base_offset=base, data_size=size)
    raw = h.encode()
    assert len(raw) == segf.HEADER_BYTES <= segf.HEADER_AREA
    assert segf.SegmentHeader.decode(raw + bytes(100)) == h


@given(data=st.data())
def test_segment_header_damage_refused(data):
    raw = bytearray(segf.SegmentHeader(kind=1, base_offset=1 << 20, data_size=1 << 20).encode())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ValueError):
        segf.SegmentHeader.decode(raw)


def test_segment_header_short_or_foreign():
    with pytest.raises(ValueError, match="shorter"):
        segf.SegmentHeader.decode(b"STRATASG")
    with pytest.raises(ValueError, match="not a strata segment"):
        segf.SegmentHeader.decode(bytes(segf.HEADER_BYTES))


def test_segment_header_other_version_refused():
    raw = segf.SegmentHeader(kind=1, base_offset=0, data_size=4096, version=99).encode()
    with pytest.raises(ValueError, match="version 99"):
        segf.SegmentHeader.decode(raw)


@given(count=u64, length=u64, tmin=i64, tmax=i64, crc=u32)
def test_segment_footer_round_trip(count, length, tmin, tmax, crc):
    f = segf.SegmentFooter(count, length, tmin, tmax, crc)
    raw = f.encode()
    assert len(raw) == segf.FOOTER_BYTES <= segf.FOOTER_AREA
    assert segf.SegmentFooter.decode(raw + bytes(50)) == f


@given(data=st.data())
def test_damaged_or_missing_footer_reads_as_none(data):
    raw = bytearray(segf.SegmentFooter(10, 65536, 1, 2, 0xDEADBEEF).encode())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    assert segf.SegmentFooter.decode(raw) is None
    assert segf.SegmentFooter.decode(bytes(segf.FOOTER_AREA)) is None
    assert segf.SegmentFooter.decode(raw[:-1]) is None


def test_segment_file_names_and_sizes():
    assert segf.file_name(0) == "0" * 20
    assert segf.file_name(1 << 30) == "00000000001073741824"
    assert segf.file_size(65536) == 4096 + 65536 + 4096


# --------------------------------------------------------------------------- checkpoint, state page


@given(vals=st.tuples(*[i64] * 9))
def test_checkpoint_round_trip(vals):
    cp = cpf.Checkpoint(*vals)
    raw = cp.encode()
    assert len(raw) == cpf.CHECKPOINT_BYTES
    assert cpf.Checkpoint.decode(raw) == cp


@given(data=st.data())
def test_checkpoint_damage_refused(data):
    raw = bytearray(cpf.Checkpoint(flushed_offset=123, clean_end_offset=456).encode())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ValueError):
        cpf.Checkpoint.decode(bytes(raw))
    with pytest.raises(ValueError):
        cpf.Checkpoint.decode(bytes(raw[:10]))


@given(pid=u32, confirmed=i64, dispatched=i64, mino=i64)
def test_state_page_round_trip(pid, confirmed, dispatched, mino):
    raw = bytearray(cpf.encode_state(pid, confirmed, dispatched, mino))
    assert len(raw) == cpf.STATE_BYTES
    assert cpf.decode_state(raw) == (pid, confirmed, dispatched, mino)
    # the writer updates the offsets in place at their documented positions
    cpf.STATE_OFFSET.pack_into(raw, cpf.STATE_POS_CONFIRMED, confirmed ^ 1)
    cpf.STATE_OFFSET.pack_into(raw, cpf.STATE_POS_DISPATCHED, dispatched ^ 1)
    cpf.STATE_OFFSET.pack_into(raw, cpf.STATE_POS_MIN, mino ^ 1)
    assert cpf.decode_state(raw) == (pid, confirmed ^ 1, dispatched ^ 1, mino ^ 1)


def test_state_page_foreign_refused():
    with pytest.raises(ValueError):
        cpf.decode_state(bytes(cpf.STATE_BYTES))


# --------------------------------------------------------------------------- message ids


@given(host=hosts, offset=st.integers(0, (1 << 63) - 1))
def test_msg_id_round_trip(host, offset):
    mid = rec.make_msg_id(host, offset)
    v6 = ipaddress.ip_address(host[0]).version == 6
    assert len(mid) == (56 if v6 else 32)
    assert mid == mid.upper() and int(mid, 16) >= 0
    assert rec.parse_msg_id(mid) == (host, offset)
    assert rec.parse_msg_id(mid.lower()) == (host, offset)
    assert mid == rec.msg_id_prefix(host) + f"{offset:016X}"


def test_msg_id_is_rocketmq_layout():
    # address bytes, port as 4 bytes, offset as 8 bytes, big-endian hex
    assert rec.make_msg_id(("127.0.0.1", 10911), 0x1234) == \
        "7F000001" + "00002A9F" + "0000000000001234"


@pytest.mark.parametrize("bad", ["", "XYZ", "0" * 31, "0" * 33, "G" * 32, None, 12])
def test_malformed_msg_id_refused(bad):
    with pytest.raises(InvalidInputError):
        rec.parse_msg_id(bad)


@pytest.mark.parametrize("keys,properties,match", [
    (5, None, "keys must be a sequence"),
    (b"abc", None, "keys must be a sequence"),
    ((), [("a", "b")], "properties must be a mapping"),
    ((), "a=b", "properties must be a mapping"),
])
def test_wrongly_typed_keys_or_properties_refused(keys, properties, match):
    with pytest.raises(InvalidInputError, match=match):
        rec.encode_properties(keys, None, properties)


def test_keys_may_be_none_or_any_iterable():
    assert rec.encode_properties(None, "t", None) == rec.encode_properties((), "t", None)
    assert rec.encode_properties(iter(["a", "b"]), None, None) == \
        rec.encode_properties(["a", "b"], None, None)


@given(keys, tags, properties, st.none() | st.text(min_size=1, max_size=20))
def test_dispatch_properties_reads_keys_tags_and_unique_key(ks, tg, props, uniq):
    if uniq is not None:
        props = {**props, rec.PROP_UNIQ_KEY: uniq}
    raw = rec.encode_properties(ks, tg, props)
    assume(len(raw) <= rec.MAX_PROPERTIES_BYTES)
    assert rec.dispatch_properties(raw) == (list(ks), tg, uniq)
    assert rec.dispatch_properties(memoryview(raw)) == (list(ks), tg, uniq)


def test_dispatch_properties_single_key_shape():
    raw = rec.encode_properties(("only",), None, None)
    assert rec.dispatch_properties(raw) == (["only"], None, None)
    two = rec.encode_properties(("a", "b"), None, None)  # starts the same, is longer
    assert rec.dispatch_properties(two) == (["a", "b"], None, None)
