"""The look-ahead recovery relies on (issue 22): ``MappedSegment.next_nonzero`` finds the first
non-zero byte (holes and zero runs skipped), ``resync_span`` finds the next good record past
any stretch of garbage or zeros and says where the final zeros start, and the quarantine file
keeps its pieces byte for byte and refuses a damaged copy by name."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.errors import CorruptStoreError
from strata.files.segment import MappedSegment
from strata.format.quarantine import QuarantinedPiece, decode_quarantine, encode_quarantine
from strata.format.segment import HEADER_AREA, KIND_COMMIT_LOG
from strata.log.quarantine import keep_aside, read_quarantine
from strata.log.record_walk import resync_span
from strata.files.io import DEFAULT_FILE_OPS

DATA = 1 << 22   # 4 MiB: several of next_nonzero's growing stretches


@pytest.fixture
def seg(tmp_path):
    s = MappedSegment.create(tmp_path / "00000000000000000000", KIND_COMMIT_LOG, 0, DATA,
                             DEFAULT_FILE_OPS)
    s.reserve(DATA)
    yield s
    s.close()


@pytest.mark.parametrize("at", [0, 1, 7, 8, 4095, 4096, 4097, 65_537, (1 << 20) + 3,
                                DATA - 9, DATA - 1])
def test_next_nonzero_finds_the_first_set_byte(seg, at):
    assert seg.next_nonzero(0, DATA) == DATA          # all zero
    seg.mm[HEADER_AREA + at] = 0x40
    assert seg.next_nonzero(0, DATA) == at
    assert seg.next_nonzero(at, DATA) == at
    assert seg.next_nonzero(at + 1, DATA) == DATA
    assert seg.next_nonzero(0, at) == at              # end is exclusive: none below it
    for start in {max(0, at - 1), max(0, at - 8), max(0, at - 5000)}:
        assert seg.next_nonzero(start, DATA) == at


def test_next_nonzero_random_layouts(seg):
    rng = random.Random(22)
    for _ in range(30):
        spots = sorted(rng.sample(range(DATA), 3))
        for p in spots:
            seg.mm[HEADER_AREA + p] = rng.randrange(1, 256)
        start = rng.randrange(DATA)
        want = next((p for p in spots if p >= start), DATA)
        assert seg.next_nonzero(start, DATA) == want
        for p in spots:
            seg.mm[HEADER_AREA + p] = 0


def test_resync_span_reports_where_the_last_zeros_start(seg):
    # garbage at 100..300, then zeros to the end: no good record; zeros start after the garbage
    seg.mm[HEADER_AREA + 100:HEADER_AREA + 300] = bytes(range(1, 201))
    nxt, zeros_from = resync_span(seg, 100, DATA)
    assert nxt == DATA
    assert 300 <= zeros_from and not any(seg.mm[HEADER_AREA + zeros_from:HEADER_AREA + DATA])
    assert zeros_from <= 300 + (1 << 16)


def test_quarantine_round_trip_and_damage(tmp_path):
    pieces = [QuarantinedPiece(4096, b"\x01" * 10 + bytes(5) + b"\x02"),
              QuarantinedPiece(1 << 30, bytes(range(256)))]
    raw = encode_quarantine(pieces)
    assert decode_quarantine(raw) == pieces
    for pos in (0, 9, 17, 20, 30, 36, 40, 50, len(raw) - 1):
        bad = bytearray(raw)
        bad[pos] ^= 0x10
        with pytest.raises(CorruptStoreError, match="q.bin"):
            decode_quarantine(bytes(bad), "q.bin")
    with pytest.raises(CorruptStoreError, match="cut short"):
        decode_quarantine(raw[:-3], "q.bin")
    store = tmp_path / "store"
    store.mkdir()
    first = keep_aside(store, pieces, DEFAULT_FILE_OPS)
    second = keep_aside(store, pieces[:1], DEFAULT_FILE_OPS)
    assert first == "quarantine/commitlog-00000000000000004096.bin"
    assert second == "quarantine/commitlog-00000000000000004096-1.bin"
    assert read_quarantine(store / first) == pieces
    assert read_quarantine(store / second) == pieces[:1]


@given(st.lists(st.tuples(st.integers(0, (1 << 62)), st.binary(min_size=1, max_size=300)),
                max_size=6))
def test_quarantine_layout_round_trips(raw_pieces):
    pieces = [QuarantinedPiece(offset, data) for offset, data in raw_pieces]
    buf = encode_quarantine(pieces)
    assert decode_quarantine(buf) == pieces
    assert len(buf) == 20 + sum(24 + len(p.data) for p in pieces)
