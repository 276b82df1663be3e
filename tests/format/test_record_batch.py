"""The batch decoder (strata.format.record_batch) agrees with check_record + decode_record.

Random runs of records (IPv4/IPv6 hosts, properties, empty bodies) are laid out back to back,
some positions are damaged or wrong; decode_at must return exactly what the one-record path
returns: the same message where that path accepts the record, None where it refuses it.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.record_batch import decode_at

from test_record_format import records


def one_by_one(buf: bytes, pos: int, phys: int, limit: int, verify_crc: bool):
    try:
        kind, _size = rec.check_record(buf, pos, limit, verify_crc=verify_crc)
    except CorruptRecordError:
        return None
    if kind != rec.RecordKind.MESSAGE:
        return None
    m = rec.decode_record(buf, pos)
    return m if m.commitlog_offset == phys else None


@st.composite
def logs(draw):
    """(buffer, record positions, their offsets) for 1..8 records written back to back."""
    kws = draw(st.lists(records(), min_size=1, max_size=8))
    buf = bytearray(b"\0" * 16)  # records do not start at 0
    positions, offsets = [], []
    for kw in kws:
        kw["physical_offset"] = 1000 + len(buf)
        positions.append(len(buf))
        offsets.append(kw["physical_offset"])
        buf += rec.encode_record(**kw)
    return buf, positions, offsets


@settings(max_examples=150, deadline=None)
@given(logs(), st.data())
def test_decode_at_matches_the_one_record_path(log, data):
    buf, positions, offsets = log
    # damage: flip a byte, cut the readable limit, ask for a wrong offset or a mid-record position
    if data.draw(st.booleans(), "flip"):
        i = data.draw(st.integers(16, len(buf) - 1), "flip at")
        buf[i] ^= 1 << data.draw(st.integers(0, 7), "bit")
    limit = data.draw(st.integers(16, len(buf)), "limit") if data.draw(st.booleans(), "cut") \
        else len(buf)
    pos = list(positions)
    phys = list(offsets)
    if data.draw(st.booleans(), "shift"):
        j = data.draw(st.integers(0, len(pos) - 1), "shifted record")
        pos[j] += data.draw(st.integers(1, 40), "shift by")
    if data.draw(st.booleans(), "wrong offset"):
        j = data.draw(st.integers(0, len(pos) - 1), "wrong offset record")
        phys[j] += 1
    verify = data.draw(st.booleans(), "verify crc")
    raw = bytes(buf)
    want = [one_by_one(raw, p, o, limit, verify) for p, o in zip(pos, phys)]
    got = decode_at(raw, np.array(pos, np.int64), np.array(phys, np.int64), limit,
                    verify_crc=verify)
    assert got == want
    for m in got:
        if m is None:
            continue
        try:
            expected = rec.decode_properties(m.properties_raw)
        except CorruptRecordError:  # a flipped bit the CRC was not asked to catch
            with pytest.raises(CorruptRecordError):
                m.keys
            continue
        assert (m.keys, m.tags, m.properties) == expected
        assert m.msg_id == rec.make_msg_id(m.store_host, m.commitlog_offset)


@given(records())
def test_stored_message_is_an_immutable_value(kw):
    m = rec.decode_record(rec.encode_record(**kw))
    assert m.keys == kw["keys"] and m.tags == kw["tags"] and m.properties == kw["properties"]
    assert pickle.loads(pickle.dumps(m)) == m
    assert hash(m) == hash(rec.decode_record(rec.encode_record(**kw)))
    m.properties["x"] = "changed"            # a copy: the message itself does not change
    assert m.properties == kw["properties"]
    try:
        m.topic = "other"
    except AttributeError:
        pass
    else:
        raise AssertionError("StoredMessage fields must be read-only")
    assert repr(m).startswith("StoredMessage(topic=")


def test_decode_at_with_nothing_readable():
    raw = bytes(200)
    assert decode_at(raw, np.array([0, 50], np.int64), np.array([0, 50], np.int64), 10) \
        == [None, None]
    assert decode_at(raw, np.array([], np.int64), np.array([], np.int64), 200) == []


def test_write_records_refuses_a_blob_that_disagrees_with_the_headers():
    from strata.format.record_batch import HEADER_DTYPE, write_records
    headers = np.zeros(2, HEADER_DTYPE)
    headers["total"] = 100
    buf = bytearray(b"\x55" * 400)
    with pytest.raises(ValueError, match="add up to 200 bytes"):
        write_records(buf, 10, headers, bytes(150))
    assert buf == bytearray(b"\x55" * 400)  # nothing written
