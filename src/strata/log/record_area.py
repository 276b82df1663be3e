"""Views of the commit log's record areas for the bulk readers above log/ (Spark decoding, tier
upload): a segment's records as one numpy uint8 array whose byte 0 is the segment's first record
byte, so positions are commit-log offset minus the segment's base offset. Views, never copies;
the segment-file layout (header area, footer) stays known only to files/ and log/."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from strata.files.segment import MappedSegment
from strata.files.segment_queue import segment_runs
from strata.format.segment import HEADER_AREA


def record_area(seg: MappedSegment) -> np.ndarray:
    """The segment's bytes from its first record byte to the end of its map (uint8, a view)."""
    return np.frombuffer(seg.mm, np.uint8, offset=HEADER_AREA)


class AreaRun(NamedTuple):
    """Rows ``lo:hi`` of an offset array that fall in one segment: the segment (None below the
    oldest one), its record area and the rows' positions in it (both None with no segment)."""
    lo: int
    hi: int
    segment: MappedSegment | None
    area: np.ndarray | None
    positions: np.ndarray | None


def area_runs(segments: Sequence[MappedSegment], offsets: np.ndarray) -> list[AreaRun]:
    """``offsets`` (commit-log offsets, int64) split into runs of one segment each, with that
    segment's record area and the runs' positions in it (``offsets - base_offset``)."""
    return [AreaRun(lo, hi, None, None, None) if seg is None else
            AreaRun(lo, hi, seg, record_area(seg), offsets[lo:hi] - seg.base_offset)
            for lo, hi, seg in segment_runs(segments, offsets)]
