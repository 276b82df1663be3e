"""Retention with simulated time and simulated disk usage: expired segments go oldest first,
never the active one, at most ``max_files_deleted_per_run`` per pass; 75 % / 85 % / 90 % disk
thresholds; consume-queue and key-index files follow the log's new minimum; reads below it
answer OFFSET_TOO_SMALL; everything above it is intact."""

from __future__ import annotations

import time

import pytest

import strata
import strata.store.message_store as ms_mod
from strata.errors import DiskFullError
from strata.store.message import GetStatus

from store_helpers import T0, clock, config, drain, open_store, settle  # noqa: F401 (clock is a fixture)

HOUR = 3_600_000
RETENTION = 72 * HOUR




def hour_of(ms: int) -> int:
    return time.localtime(ms / 1000).tm_hour


def other_hour(ms: int) -> str:
    """A ``delete_when`` that is not the local hour of ``ms``."""
    return f"{(hour_of(ms) + 12) % 24:02d}"


class Filled:
    """What ``fill`` wrote: put results in order, and their bodies."""

    def __init__(self):
        self.results = []
        self.bodies = {}

    def put(self, store, topic="t"):
        n = len(self.results)
        m = strata.Message(topic, b"%06d" % n + b"-extra", keys=[f"k{n}", "all"])
        r = store.put(m)
        assert r.ok
        self.results.append(r)
        self.bodies[r.commitlog_offset] = m.body
        return r


def fill(store, clock, segments: int, filled: Filled | None = None) -> Filled:
    """Append until the log's segment number ``segments - 1`` exists. Every message appended
    while segment k is the newest is stamped T0 + k hours, so segment k's newest record is from
    T0 + k hours."""
    filled = filled or Filled()
    segs = store.log.segments.segments
    size = store.config.segment_size
    i = len(filled.results)
    while not segs or segs[-1].base_offset // size < segments - 1:
        clock.t = T0 + (segs[-1].base_offset // size if segs else 0) * HOUR
        batch = []
        for j in range(4):
            n = i + j
            topic = "t" if n % 3 else "u"
            batch.append(strata.Message(topic, b"%06d" % n + bytes(700), keys=[f"k{n}", "all"],
                                        tags="even" if n % 2 == 0 else "odd"))
        for m, r in zip(batch, store.put_batch(batch)):
            filled.results.append(r)
            filled.bodies[r.commitlog_offset] = m.body
        i += 4
    settle(store)
    return filled


def seg_bases(store):
    return [s.base_offset for s in store.log.segments.segments]


def check_consistent(store, filled: Filled) -> None:
    """Everything at or above the log's minimum is reachable; below it answers TOO_SMALL."""
    low = store.min_commitlog_offset()
    assert low == seg_bases(store)[0]
    per_queue: dict[tuple[str, int], list] = {}
    for r in filled.results:
        per_queue.setdefault((r.topic, r.queue_id), []).append(r)
    for (topic, q), rs in per_queue.items():
        kept = [r for r in rs if r.commitlog_offset >= low]
        mn = kept[0].queue_offset if kept else rs[-1].queue_offset + 1
        assert store.min_offset(topic, q) == mn, (topic, q)
        assert store.max_offset(topic, q) == rs[-1].queue_offset + 1
        got = drain(store, topic, q)
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in kept]
        assert all(m.body == filled.bodies[m.commitlog_offset] for m in got)
        if mn > 0:
            for off in {0, mn - 1}:
                g = store.get(topic, q, off)
                assert g.status is GetStatus.OFFSET_TOO_SMALL, (topic, q, off)
                assert (g.next_offset, g.min_offset) == (mn, mn)
        if kept:
            first = store.read_at(kept[0].commitlog_offset)
            assert store.earliest_time(topic, q) == first.store_timestamp
    # key queries: the survivors exactly, never a deleted record
    for r in filled.results[:: max(1, len(filled.results) // 40)]:
        n = int(filled.bodies[r.commitlog_offset][:6])
        got = store.query(r.topic, f"k{n}")
        assert [m.commitlog_offset for m in got] == (
            [r.commitlog_offset] if r.commitlog_offset >= low else [])
    alls = store.query("t", "all", max_results=10_000)
    assert [m.commitlog_offset for m in alls] == sorted(
        (r.commitlog_offset for r in filled.results
         if r.topic == "t" and r.commitlog_offset >= low), reverse=True)


def test_expired_segments_go_oldest_first_at_most_n_per_run(tmp_path, clock):
    cfg = config(max_files_deleted_per_run=2, consume_queue_units=16, index_slots=8,
                 index_entries=64)
    with open_store(tmp_path / "s", cfg) as store:
        filled = fill(store, clock, 8)
        store.retention.disk_usage = lambda: 0.10
        bases = seg_bases(store)
        assert len(bases) == 8
        # nothing is old enough yet
        assert store.clean_expired(now_ms=T0 + RETENTION - 1) == 0
        # segments 0..4 are expired (newest record T0 + k h, k <= 4), 5.. are not
        now = T0 + RETENTION + 4 * HOUR + HOUR // 2
        assert store.clean_expired(now_ms=now) == 2
        assert seg_bases(store) == bases[2:]
        check_consistent(store, filled)
        assert store.clean_expired(now_ms=now) == 2
        assert seg_bases(store) == bases[4:]
        assert store.clean_expired(now_ms=now) == 1
        assert seg_bases(store) == bases[5:]
        assert store.clean_expired(now_ms=now) == 0
        check_consistent(store, filled)
        # much later everything has expired, but the active segment always stays
        later = T0 + RETENTION + 100 * HOUR
        while store.clean_expired(now_ms=later):
            pass
        assert seg_bases(store) == bases[-1:]
        check_consistent(store, filled)
        # appending goes on
        r = store.put(strata.Message("t", b"after", keys=["after"]))
        settle(store)
        assert [m.body for m in store.query("t", "after")] == [b"after"]
        assert store.get("t", r.queue_id, r.queue_offset).messages[0].body == b"after"


def test_clean_expired_uses_the_retention_clock_by_default(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        fill(store, clock, 3)
        store.retention.disk_usage = lambda: 0.10
        store.retention.clock_ms = lambda: T0 + RETENTION - 1
        assert store.clean_expired() == 0
        store.retention.clock_ms = lambda: T0 + RETENTION + HOUR
        assert store.clean_expired() == 2
        assert len(seg_bases(store)) == 1


def test_consume_queue_and_index_files_follow_the_log_minimum(tmp_path, clock):
    cfg = config(consume_queue_units=8, index_slots=8, index_entries=32)
    with open_store(tmp_path / "s", cfg) as store:
        filled = fill(store, clock, 6)
        store.retention.disk_usage = lambda: 0.10
        cq_dir = tmp_path / "s" / "consumequeue"

        def cq_files():
            return {p.parent.relative_to(cq_dir).as_posix(): sorted(
                int(f.name) for f in p.parent.iterdir()) for p in cq_dir.glob("*/*/0*")}

        before_cq = cq_files()
        before_ix = store.key_index.files()
        assert sum(map(len, before_cq.values())) > 20 and len(before_ix) > 10
        assert store.clean_expired(now_ms=T0 + RETENTION + 3 * HOUR) == 4
        low = store.min_commitlog_offset()
        after_cq = cq_files()
        after_ix = store.key_index.files()
        assert len(after_ix) < len(before_ix)
        # index: every older file still kept has entries at or above the minimum
        assert all(f["end_offset"] >= low for f in after_ix[:-1])
        assert [f["name"] for f in after_ix] == [f["name"] for f in before_ix][-len(after_ix):]
        assert sum(map(len, after_cq.values())) < sum(map(len, before_cq.values()))
        for qname, files in after_cq.items():
            assert files == before_cq[qname][-len(files):]       # oldest ones went
            topic, q = qname.split("/")
            cq = store.queues.get(topic, int(q))
            for seg in cq.segments.segments[:-1]:               # a kept older file is needed
                last = seg.base_offset // 20 + seg.committed // 20 - 1
                off, size, _t = cq.unit(last)
                assert off + size > low
        check_consistent(store, filled)


def test_min_offsets_survive_clean_and_unclean_restart(tmp_path, clock):
    cfg = config(consume_queue_units=8)
    store = open_store(tmp_path / "s", cfg)
    filled = fill(store, clock, 5)
    store.retention.disk_usage = lambda: 0.10
    assert store.clean_expired(now_ms=T0 + RETENTION + 2 * HOUR) == 3
    check_consistent(store, filled)
    store.close()
    store = open_store(tmp_path / "s", cfg)
    check_consistent(store, filled)
    fill(store, clock, 7, filled)
    store.retention.disk_usage = lambda: 0.10
    assert store.clean_expired(now_ms=T0 + RETENTION + 4 * HOUR) == 2
    check_consistent(store, filled)
    store._abandon()
    with open_store(tmp_path / "s", cfg) as store:
        check_consistent(store, filled)
        assert store.recovery_report is not None


def test_below_75_percent_only_at_the_deletion_hour(tmp_path, clock):
    now = T0 + RETENTION + 10 * HOUR        # everything but the active segment has expired
    with open_store(tmp_path / "s", delete_when=other_hour(now)) as store:
        fill(store, clock, 4)
        bases = seg_bases(store)
        store.retention.disk_usage = lambda: 0.50
        assert store.retention.run_once(now) == 0        # not the hour, disk fine
        assert seg_bases(store) == bases
        assert store.clean_expired(now_ms=now) == 3      # on demand it runs regardless
    with open_store(tmp_path / "s2", delete_when=f"{hour_of(now):02d}") as store:
        fill(store, clock, 4)
        store.retention.disk_usage = lambda: 0.50
        assert store.retention.run_once(now) == 3        # at the deletion hour
        assert len(seg_bases(store)) == 1


def test_above_75_percent_expired_files_go_at_any_hour_but_only_expired(tmp_path, clock):
    now = T0 + RETENTION + HOUR + HOUR // 2   # segments 0 and 1 expired, 2.. not
    with open_store(tmp_path / "s", delete_when=other_hour(now)) as store:
        filled = fill(store, clock, 5)
        bases = seg_bases(store)
        store.retention.disk_usage = lambda: 0.80
        assert store.retention.run_once(now) == 2
        assert seg_bases(store) == bases[2:]
        assert store.retention.run_once(now) == 0        # the rest is young
        assert not store.life.disk_full
        filled.put(store)
        settle(store)
        check_consistent(store, filled)


def test_by_default_unexpired_files_are_kept_however_full_the_disk(tmp_path, clock):
    """Forced deletion of unexpired messages is opt-in: by default a full disk refuses puts
    and keeps every acknowledged message; clean_expired(force=True) is the operator's way out."""
    now = T0 + HOUR                                      # nothing has expired
    cfg = config(delete_when=other_hour(now), max_files_deleted_per_run=2)
    with open_store(tmp_path / "s", cfg) as store:
        filled = fill(store, clock, 5)
        bases = seg_bases(store)
        for usage in (0.87, 0.95, 1.0):
            store.retention.disk_usage = lambda: usage
            assert store.retention.run_once(now) == 0
            assert seg_bases(store) == bases
        assert store.life.disk_full
        with pytest.raises(DiskFullError, match="disk"):
            store.put(strata.Message("t", b"no"))
        check_consistent(store, filled)
        assert store.clean_expired(now, force=True) == 2  # the operator decides
        assert seg_bases(store) == bases[2:]
        assert store.life.disk_full                          # still 100 %: still refused
        store.retention.disk_usage = lambda: 0.5
        store.retention.run_once(now)
        filled.put(store)
        settle(store)
        check_consistent(store, filled)


def test_above_85_percent_oldest_files_go_regardless_of_age_when_enabled(tmp_path, clock):
    now = T0 + HOUR                                      # nothing has expired
    cfg = config(delete_when=other_hour(now), max_files_deleted_per_run=3,
                 delete_unexpired_when_full=True)
    with open_store(tmp_path / "s", cfg) as store:
        filled = fill(store, clock, 6)
        bases = seg_bases(store)
        store.retention.disk_usage = lambda: 0.80
        assert store.retention.run_once(now) == 0        # 80 %: nothing expired, nothing goes
        store.retention.disk_usage = lambda: 0.87
        assert store.retention.run_once(now) == 3        # at most 3 per pass
        assert seg_bases(store) == bases[3:]
        assert not store.life.disk_full                      # puts still accepted
        filled.put(store, "u")
        settle(store)
        check_consistent(store, filled)
        assert store.retention.run_once(now) == 2
        assert store.retention.run_once(now) == 0        # never the active segment
        assert seg_bases(store) == bases[5:]
        check_consistent(store, filled)


def test_above_90_percent_puts_are_refused_until_space_is_back(tmp_path, clock):
    now = T0 + HOUR
    cfg = config(delete_when=other_hour(now), max_files_deleted_per_run=1,
                 delete_unexpired_when_full=True)
    with open_store(tmp_path / "s", cfg) as store:
        filled = fill(store, clock, 4)
        bases = seg_bases(store)
        usage = {"v": 0.95}
        store.retention.disk_usage = lambda: usage["v"]
        assert store.retention.run_once(now) == 1        # cleans at once, regardless of age
        assert seg_bases(store) == bases[1:]
        assert store.life.disk_full
        end = store.max_commitlog_offset()
        for attempt in (lambda: store.put(strata.Message("t", b"no")),
                        lambda: store.put_batch([strata.Message("u", b"no")] * 3)):
            with pytest.raises(DiskFullError, match="disk"):
                attempt()
        assert store.max_commitlog_offset() == end       # nothing written
        # reads keep working while full
        check_consistent(store, filled)
        # usage still high: still refused after the next pass
        assert store.retention.run_once(now) == 1
        with pytest.raises(DiskFullError):
            store.put(strata.Message("t", b"no"))
        # space comes back, but puts wait for a pass to notice
        usage["v"] = 0.50
        with pytest.raises(DiskFullError):
            store.put(strata.Message("t", b"no"))
        assert store.retention.run_once(now) == 0
        assert not store.life.disk_full
        r = filled.put(store)
        settle(store)
        assert [m.commitlog_offset for m in store.query("t", f"k{len(filled.results) - 1}")] \
            == [r.commitlog_offset]
        check_consistent(store, filled)


def test_above_90_percent_clears_in_the_same_pass_once_deletion_frees_space(tmp_path, clock):
    now = T0 + HOUR
    with open_store(tmp_path / "s", delete_when=other_hour(now),
                    delete_unexpired_when_full=True) as store:
        filled = fill(store, clock, 5)
        # usage falls below 90 % once only three segments are left
        store.retention.disk_usage = lambda: 0.95 if len(store.log.segments.segments) > 3 \
            else 0.70
        assert store.retention.run_once(now) >= 2
        assert not store.life.disk_full
        filled.put(store)
        settle(store)
        check_consistent(store, filled)


def test_undispatched_segments_are_never_deleted(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        fill(store, clock, 2)
        reput = store._reput
        reput.stop()                       # dispatch stalls: the log runs ahead of the queues
        while len(store.log.segments.segments) < 5:
            clock.t = T0 + len(store.log.segments.segments) * HOUR
            store.put_batch([strata.Message("t", bytes(900), keys=["late"]) for _ in range(8)])
        stalled_at = reput.reput_offset
        store.retention.disk_usage = lambda: 0.95
        deleted = store.clean_expired(now_ms=T0 + 1000 * HOUR)
        assert all(s.base_offset + s.data_size > stalled_at or s is store.log.segments.last()
                   for s in store.log.segments.segments)
        assert store.min_commitlog_offset() <= stalled_at
        assert deleted == 1                # the one segment dispatch had finished
        reput.catch_up()                   # dispatch catches up: the records are all there
        late = store.query("t", "late", max_results=1000)
        assert late and all(m.commitlog_offset >= store.min_commitlog_offset() for m in late)
        assert len(late) == sum(1 for m in store.scan() if m.keys == ("late",))
