"""The ref-store record layout: round trips, checks, and the scanner over damaged bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from strata.errors import CorruptRecordError, InvalidInputError, MessageTooLargeError
from strata.format import refstore_record as rec

ids = st.binary(min_size=16, max_size=16)
bodies = st.binary(max_size=600)


@given(ids, bodies)
def test_encode_decode_round_trip(msg_id, body):
    raw = rec.encode(msg_id, body)
    assert len(raw) == rec.record_size(len(body)) == len(body) + 25
    assert raw[-1] == 0xFF
    assert rec.check_at(raw, 0) == len(raw)
    assert rec.decode(raw) == (msg_id, body)
    assert rec.body_of(raw, 0, len(raw), msg_id) == body
    buf = bytearray()
    assert rec.append(buf, msg_id, body) == len(raw)
    assert bytes(buf) == raw


def test_layout_is_little_endian_size_id_body_crc_marker():
    raw = rec.encode(b"I" * 16, b"hello")
    assert raw[:4] == (16 + 5).to_bytes(4, "little")
    assert raw[4:20] == b"I" * 16
    assert raw[20:25] == b"hello"
    from crc32c import crc32c
    assert raw[25:29] == crc32c(raw[:25]).to_bytes(4, "little")
    assert raw[29:] == b"\xff"


@settings(max_examples=60)
@given(st.lists(st.tuples(ids, bodies), min_size=1, max_size=8), st.data())
def test_scan_finds_every_record_and_skips_damage(records, data):
    buf = bytearray()
    spans = []
    for m, b in records:
        start = len(buf)
        rec.append(buf, m, b)
        spans.append((start, len(buf) - start, m))
    assert list(rec.scan(bytes(buf))) == spans
    # damage one record: every other record is still found
    victim = data.draw(st.integers(0, len(spans) - 1))
    off, total, _ = spans[victim]
    pos = data.draw(st.integers(off, off + total - 1))
    buf[pos] ^= 0x5A
    found = list(rec.scan(bytes(buf)))
    for k, span in enumerate(spans):
        if k != victim:
            assert span in found
    assert spans[victim] not in found


def test_scan_stops_cleanly_at_a_torn_tail_and_zero_fill():
    buf = bytearray()
    rec.append(buf, b"a" * 16, b"x" * 300)
    whole = len(buf)
    rec.append(buf, b"b" * 16, b"y" * 300)
    torn = bytes(buf[:whole + 100]) + b"\0" * 70000
    assert [m for _, _, m in rec.scan(torn)] == [b"a" * 16]
    assert rec.damaged_regions(torn) == [(whole, len(torn) - whole)]
    # a record after a zero run whose size field starts with zero bytes (size 0x0100)
    after = bytearray(b"\0" * 5000)
    start = len(after)
    rec.append(after, b"c" * 16, b"z" * (0x100 - 16))
    assert after[start] == 0
    assert list(rec.scan(bytes(after))) == [(start, 0x100 + 9, b"c" * 16)]


def test_decode_rejects_bad_bytes_with_the_offset():
    raw = bytearray(rec.encode(b"k" * 16, b"body"))
    raw[-1] = 0
    with pytest.raises(CorruptRecordError) as exc:
        rec.decode(bytes(raw))
    assert exc.value.offset == 0
    with pytest.raises(CorruptRecordError):
        rec.body_of(rec.encode(b"k" * 16, b"body"), 0, 29, b"j" * 16)


@pytest.mark.parametrize("bad", [b"short", b"x" * 17, "a" * 16, 12345, None])
def test_bad_msg_ids_are_refused(bad):
    with pytest.raises(InvalidInputError, match="message id"):
        rec.check_msg_id(bad)


def test_bodies_must_be_bytes_and_fit():
    assert rec.check_body(bytearray(b"ab"), 10) == b"ab"
    with pytest.raises(InvalidInputError, match="bytes"):
        rec.check_body("text", 10)
    with pytest.raises(MessageTooLargeError, match="at most 10"):
        rec.check_body(b"x" * 11, 10)
