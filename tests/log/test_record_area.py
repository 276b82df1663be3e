"""The commit log's read API for callers above log/: store time and decode by offset, and
record-area views whose positions are offsets minus the segment's base (issue 15)."""

from __future__ import annotations

import numpy as np

import strata
from strata.format import record as rec
from strata.log.record_area import area_runs, record_area

from support import SMALL_SEGMENT, body_for, make_message


def _fill(store, n: int, size: int = 900) -> list:
    out = []
    for start in range(0, n, 5):
        out.extend(store.put_batch([make_message(i, size=size)
                                    for i in range(start, min(n, start + 5))]))
    return out


def test_store_time_and_decode_by_offset(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = _fill(store, 60)
        log = store.log
        for i, r in enumerate(results):
            m = log.decode_at(r.commitlog_offset)
            assert m.body == body_for(i, 900) and m.commitlog_offset == r.commitlog_offset
            assert log.store_time_at(r.commitlog_offset) == m.store_timestamp
        assert log.store_time_at(-1) is None and log.decode_at(-1) is None


def test_area_runs_are_views_with_positions_from_the_segment_base(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = _fill(store, 200)
        phys = np.array([r.commitlog_offset for r in results], np.int64)
        runs = area_runs(list(store.log.segments.segments), phys)
        assert len(runs) >= 3 and runs[0].lo == 0 and runs[-1].hi == len(phys)
        for run in runs:
            seg = run.segment
            assert run.area.base is not None                  # a view of the map, not a copy
            assert np.shares_memory(run.area, record_area(seg))
            assert (run.positions == phys[run.lo:run.hi] - seg.base_offset).all()
            for p, off in zip(run.positions.tolist(), phys[run.lo:run.hi].tolist()):
                assert rec.I64_AT.unpack_from(run.area, p + rec.POS_PHYSICAL_OFFSET)[0] == off
        assert all(r.positions.max() < SMALL_SEGMENT for r in runs)
        below = area_runs(list(store.log.segments.segments), np.array([-5], np.int64))
        assert below[0].segment is None and below[0].area is None
        del runs, run                                         # the views pin the maps
