"""The resynchronising record walker (strata.log.record_walk): past a damaged record it finds
the next good one, and bytes that merely look like a record start do not fool it."""

from __future__ import annotations

import pytest

import strata
from strata.errors import CorruptRecordError
from strata.testing.faults import flip_bit
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, file_name
from strata.log.record_walk import RecordWalk, resync

from support import small_store_config

# A body that holds a record's magic followed by a plausible length: a false record start.
FAKE = rec.U32.pack(200) + rec.U32.pack(rec.MESSAGE_MAGIC) + bytes(40)


def build(store_dir, n: int = 40) -> list:
    with strata.open(store_dir, small_store_config()) as store:
        return store.put_batch([strata.Message("t", FAKE * 3 + bytes([i])) for i in range(n)])


def segment(store):
    return store.log.segments.segments[0]


def test_resync_skips_false_magic_inside_bodies(tmp_store_dir):
    results = build(tmp_store_dir)
    path = tmp_store_dir / "commitlog" / file_name(0)
    flip_bit(path, HEADER_AREA + results[5].commitlog_offset + rec.POS_TOTAL_LENGTH + 1, bit=0)
    with strata.open(tmp_store_dir, readonly=True) as store:
        seg = segment(store)
        assert resync(seg, results[5].commitlog_offset, seg.committed) == \
            results[6].commitlog_offset
        walk = RecordWalk(seg, 0, seg.committed)
        got = list(walk)
        good = [pos for pos, _size, why in got if why is None]
        assert good == [r.commitlog_offset for i, r in enumerate(results) if i != 5]
        assert [(d.offset, d.length) for d in walk.damage] == \
            [(results[5].commitlog_offset, results[5].size)]
        assert "trailer" in walk.damage[0].why
        limit = store.confirmed_offset()
        assert [pos for _s, pos, _n in store.log.iter_records(0, limit)] == good
        with pytest.raises(CorruptRecordError) as ei:
            list(store.log.iter_records(0, limit, strict=True))
        assert ei.value.offset == results[5].commitlog_offset


def test_a_walk_that_may_not_resync_stops_at_the_damage(tmp_store_dir):
    results = build(tmp_store_dir)
    path = tmp_store_dir / "commitlog" / file_name(0)
    flip_bit(path, HEADER_AREA + results[9].commitlog_offset + results[9].size - 20, bit=4)
    with strata.open(tmp_store_dir, readonly=True) as store:
        seg = segment(store)
        walk = RecordWalk(seg, 0, seg.committed, resync_until=0)   # a torn tail: the end
        assert [pos for pos, _s, _w in walk] == [r.commitlog_offset for r in results[:9]]
        assert walk.position == results[9].commitlog_offset and "CRC32C" in walk.stopped
        light = RecordWalk(seg, 0, seg.committed, crc_from=seg.committed,
                           light_until=seg.committed)   # trusted: no CRC, nothing found
        assert len(list(light)) == len(results) and not light.damage


def test_damage_up_to_the_end_of_the_walk(tmp_store_dir):
    results = build(tmp_store_dir)
    path = tmp_store_dir / "commitlog" / file_name(0)
    flip_bit(path, HEADER_AREA + results[-1].commitlog_offset + rec.POS_MAGIC, bit=1)
    with strata.open(tmp_store_dir, readonly=True) as store:
        seg = segment(store)
        end = results[-1].commitlog_offset + results[-1].size
        walk = RecordWalk(seg, 0, end)   # (recovery ended the log before it: nothing follows)
        assert sum(why is None for _p, _s, why in walk) == len(results) - 1
        assert [(d.offset, d.end) for d in walk.damage] == [(results[-1].commitlog_offset, end)]
        assert walk.position == end and not walk.closed


def test_verify_progress_moves_within_one_segment(tmp_store_dir):
    """Issue 26.6: `strata verify` of a one-segment store sat at 0 % until the end; its
    progress now moves with the bytes walked, run by run, up to the committed end."""
    from strata.log.verify import verify_log
    cfg = small_store_config(segment_size=8 << 20)
    with strata.open(tmp_store_dir, cfg) as store:
        for _ in range(40):
            store.put_batch([strata.Message("t", b"x") for _ in range(1024)])
        seen: list[int] = []
        found = verify_log(store.log.segments, store.confirmed_offset(), progress=seen.append)
        segs = list(store.log.segments.segments)
    assert len(segs) == 1 and found.records == 40 * 1024
    committed = segs[0].committed
    assert len(set(seen)) >= 3                     # 40,960 records: three runs and the end
    assert seen == sorted(seen) and 0 < seen[0] < committed and seen[-1] == committed
