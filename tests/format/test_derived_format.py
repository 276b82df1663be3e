"""The derived-files summary layout (docs/format.md section 6a): what is encoded decodes to the
same summary, and anything damaged or cut is refused with a ValueError naming the problem."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.format.derived import DerivedSummary, IndexFileEnd, QueueEnd

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
queues = st.builds(QueueEnd, st.text(min_size=1, max_size=40), st.integers(0, (1 << 32) - 1),
                   i64, i64, i64, i64, i64)
files = st.builds(IndexFileEnd, i64, st.integers(0, (1 << 32) - 1), i64)
summaries = st.builds(DerivedSummary, st.lists(queues, max_size=8).map(tuple),
                      st.lists(files, max_size=8).map(tuple), i64)


@given(summaries)
def test_round_trip(s):
    assert DerivedSummary.decode(s.encode()) == s


@given(summaries, st.data())
def test_any_flipped_bit_or_cut_is_refused(s, data):
    raw = bytearray(s.encode())
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    else:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    with pytest.raises(ValueError):
        DerivedSummary.decode(bytes(raw))


def test_names_the_problem():
    raw = DerivedSummary((QueueEnd("t", 0, 0, 0, 5, 0, 500),), (), 500).encode()
    with pytest.raises(ValueError, match="checksum"):
        DerivedSummary.decode(raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(ValueError, match="not a strata derived-files summary"):
        DerivedSummary.decode(b"garbage")
