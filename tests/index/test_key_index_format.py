"""Byte layout of key index files: round trips and the time arithmetic (no files)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from strata.format import key_index as fmt

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u32 = st.integers(0, (1 << 32) - 1)
i32 = st.integers(fmt.DELTA_MIN, fmt.DELTA_MAX)
ms = st.integers(-(1 << 50), 1 << 50)


def test_sizes_and_positions():
    assert fmt.HEADER_BYTES == 72 and fmt.SLOT_BYTES == 4 and fmt.ENTRY_BYTES == 20
    assert fmt.file_size(5_000_000, 20_000_000) == 72 + 20_000_000 + 400_000_000
    assert fmt.slot_position(3) == 72 + 12
    assert fmt.entry_position(10, 2) == 72 + 40 + 40


@given(slots=st.integers(1, fmt.MAX_SLOTS), entries=st.integers(2, fmt.MAX_ENTRIES),
       begin=i64, base=i64, flags=u32, end=i64, count=u32, used=u32, lo=i32, hi=i32)
def test_header_round_trip(slots, entries, begin, base, flags, end, count, used, lo, hi):
    h = fmt.KeyIndexHeader(slots=slots, entries=entries, begin_offset=begin, base_timestamp=base,
                           flags=flags, end_offset=end, entry_count=count, used_slots=used,
                           min_delta=lo, max_delta=hi)
    raw = h.encode()
    assert len(raw) == fmt.HEADER_BYTES
    assert fmt.KeyIndexHeader.decode(raw) == h
    assert fmt.peek_counters(raw) == (flags, end, count, used, lo, hi)
    buf = bytearray(raw)
    fmt.write_counters(buf, 0, -1, 1, 0, 0, 0)
    assert fmt.KeyIndexHeader.decode(buf).entry_count == 1


@given(h=u32, p=i64, d=i32, prev=st.integers(0, fmt.MAX_ENTRIES))
def test_entry_and_slot_round_trip(h, p, d, prev):
    raw = fmt.encode_entry(h, p, d, prev)
    assert len(raw) == 20 and fmt.decode_entry(b"xx" + raw, 2) == (h, p, d, prev)
    assert fmt.decode_slot(fmt.encode_slot(prev)) == prev


@given(begin=st.integers(0, 10**19), seq=st.integers(0, 1000))
def test_file_name_round_trip_and_order(begin, seq):
    name = fmt.file_name(begin, seq)
    assert fmt.parse_file_name(name) == (begin, seq)
    assert len(name.split("-")[0]) == 20


def test_parse_file_name_rejects_others():
    for name in ("abc", "123", "00000000000000000000.tmp", "00000000000000000000-",
                 "00000000000000000000-x"):
        assert fmt.parse_file_name(name) is None


def test_decode_rejects_damage():
    good = fmt.KeyIndexHeader(slots=4, entries=8, begin_offset=0, base_timestamp=1).encode()
    with pytest.raises(ValueError, match="magic"):
        fmt.KeyIndexHeader.decode(b"X" + good[1:])
    with pytest.raises(ValueError, match="checksum"):
        fmt.KeyIndexHeader.decode(good[:12] + b"\x05" + good[13:])
    with pytest.raises(ValueError, match="shorter"):
        fmt.KeyIndexHeader.decode(good[:10])
    h = fmt.KeyIndexHeader.decode(good)
    h.validate(fmt.file_size(4, 8))
    with pytest.raises(ValueError, match="needs"):
        h.validate(fmt.file_size(4, 8) - 1)


@given(ts=ms, base=ms)
def test_time_delta_brackets_the_store_time(ts, base):
    d = fmt.time_delta(ts, base)
    lo, hi = fmt.time_range(base, d, d)
    if fmt.DELTA_MIN < d < fmt.DELTA_MAX:
        assert lo <= ts <= hi and hi - lo == 999


@given(ts=ms, base=ms, a=ms, b=ms)
def test_delta_bounds_never_lose_a_match(ts, base, a, b):
    begin, end = min(a, b), max(a, b)
    lo, hi = fmt.delta_bounds(begin, end, base)
    d = fmt.time_delta(ts, base)
    if begin <= ts <= end:
        assert lo <= d <= hi                      # coarse filter is a superset ...
    if lo <= d <= hi and fmt.DELTA_MIN < d < fmt.DELTA_MAX:
        assert begin - 999 <= ts <= end + 999     # ... off by less than a second


def test_default_hash_is_31_bit_crc32c():
    from crc32c import crc32c
    assert fmt.key_hash("T#k") == crc32c(b"T#k") & 0x7FFFFFFF
    assert fmt.key_hash("T#\u00e9") == crc32c("T#\u00e9".encode()) & 0x7FFFFFFF
