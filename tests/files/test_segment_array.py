"""A ``MappedSegment`` keeps its map as one uint8 array for the compiled readers
(``record_walk.segment_map`` hands it out, no ``np.frombuffer`` a read): the file's bytes,
let go at close; a reader still holding it keeps the map readable."""

from __future__ import annotations

import pytest

from strata.files.segment import MappedSegment
from strata.format.segment import HEADER_AREA, KIND_COMMIT_LOG
from strata.log.record_walk import segment_map


def test_the_array_is_the_map_until_close(tmp_path):
    seg = MappedSegment.create(tmp_path / "seg", KIND_COMMIT_LOG, 0, 1 << 16)
    data = segment_map(seg)
    assert data is seg.array and len(data) == len(seg.mm)
    seg.mm[HEADER_AREA:HEADER_AREA + 3] = b"abc"
    assert bytes(data[HEADER_AREA:HEADER_AREA + 3]) == b"abc"   # the map, not a copy
    seg.close()
    assert seg.array is None
    with pytest.raises(ValueError):
        segment_map(seg)
    assert bytes(data[HEADER_AREA:HEADER_AREA + 3]) == b"abc"   # held: still readable
