"""segment_runs: the rows of a batch of commit-log offsets grouped by the segment holding them
(shared by CommitLog.read_batch, the Spark decoder and the verify job)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from strata.files.segment_queue import segment_runs

SEGMENTS = [SimpleNamespace(base_offset=b) for b in (100, 200, 300)]


def segment_of(offset: int):
    held = [s for s in SEGMENTS if s.base_offset <= offset]
    return held[-1] if held else None


@given(st.lists(st.integers(0, 400), max_size=40), st.booleans())
def test_every_row_lands_in_the_segment_holding_it(offsets, ascending):
    """Runs cover the rows in order, each exactly once, each with its own segment (None
    below the first), whether the offsets ascend or are out of order (damaged units)."""
    offsets = np.array(sorted(offsets) if ascending else offsets, np.int64)
    runs = segment_runs(SEGMENTS, offsets)
    at = 0
    for lo, hi, seg in runs:
        assert lo == at and hi > lo
        assert all(segment_of(int(o)) is seg for o in offsets[lo:hi])
        at = hi
    assert at == len(offsets)
    if ascending:   # one run per segment at most
        assert len({id(seg) for _, _, seg in runs}) == len(runs)


def test_no_segments_is_one_run_of_none():
    assert segment_runs([], np.array([5, 6], np.int64)) == [(0, 2, None)]
    assert segment_runs(SEGMENTS, np.array([], np.int64)) == []
