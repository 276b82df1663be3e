"""Fault injection (LevelDB-style): power loss, torn writes, flipped bits, zeroed tails and a
full disk. After each, recovery must end at the last good record, say so, and the store must
keep working."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import strata
from strata.errors import CorruptRecordError, DiskFullError
from strata.testing.faults import FaultInjectingFileOps, flip_bit, zero_range
from strata.format.segment import HEADER_AREA, SegmentFooter, file_name
from strata.store.message_store import MessageStore

from support import SMALL_SEGMENT, body_for, make_message, small_store_config

SIZE = 700  # body bytes of the messages these tests write


def assert_cut_at(rep, offset: int) -> None:
    """An unclean recovery that ended the log at ``offset``, zeroing what followed."""
    assert not rep.clean
    assert rep.end_offset == offset
    assert rep.truncated_at == offset
    assert rep.problem and rep.zeroed_bytes > 0


def config(**kw) -> strata.StoreConfig:
    # The background flusher stays out of the way: what is durable is what the test flushed.
    kw.setdefault("flush_interval_ms", 60_000)
    kw.setdefault("flush_thorough_interval_ms", 60_000)
    return small_store_config(**kw)


def open_faulty(path: Path, cfg: strata.StoreConfig | None = None):
    fops = FaultInjectingFileOps()
    return MessageStore(path, cfg or config(), file_ops=fops), fops


def put_range(store, start: int, stop: int, batch: int = 5) -> list:
    out = []
    for i in range(start, stop, batch):
        out += store.put_batch([make_message(j, size=SIZE) for j in range(i, min(stop, i + batch))])
    assert all(r.ok for r in out)
    return out


def where(store_dir: Path, offset: int) -> tuple[Path, int]:
    """(segment file, file offset) holding commit-log ``offset``."""
    base = offset - offset % SMALL_SEGMENT
    return store_dir / "commitlog" / file_name(base), HEADER_AREA + offset - base


def segment_of(offset: int) -> int:
    return offset // SMALL_SEGMENT


def assert_has_exactly(store, n: int, results: list) -> None:
    """The log holds messages 0..n-1 (and nothing else), each readable and intact."""
    got = list(store.scan(verify_crc=True))
    assert [m.body for m in got] == [body_for(i, SIZE) for i in range(n)]
    for i, r in enumerate(results[:n]):
        m = store.read_at(r.commitlog_offset)
        assert m is not None and m.body == body_for(i, SIZE)
        assert store.get_by_id(r.msg_id) == m
    for r in results[n:]:
        assert store.read_at(r.commitlog_offset) is None
        assert store.get_by_id(r.msg_id) is None


def assert_keeps_working(store_dir: Path, n: int, results: list) -> None:
    """Append after recovery, read everything back, and again after a clean restart."""
    with strata.open(store_dir, config()) as store:
        end = store.max_commitlog_offset()
        more = put_range(store, n, n + 30)
        assert more[0].commitlog_offset >= end
        assert_has_exactly(store, n + 30, results[:n] + more)
    with strata.open(store_dir, config()) as store:
        assert store.recovery_report.clean
        assert_has_exactly(store, n + 30, results[:n] + more)


# --------------------------------------------------------------------------- power loss


def test_power_loss_async_loses_only_unflushed_tail(tmp_store_dir):
    store, fops = open_faulty(tmp_store_dir)
    results = put_range(store, 0, 40)
    store.flush()
    results += put_range(store, 40, 50)  # same segment, never synced
    assert segment_of(results[-1].commitlog_offset) == segment_of(results[39].commitlog_offset)
    store._abandon()
    lost = fops.power_loss()
    assert sum(lost.values()) > 0

    end_of_flushed = results[39].commitlog_offset + results[39].size
    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean
        assert rep.end_offset == end_of_flushed == store.max_commitlog_offset()
        # nothing after the end survived to be truncated: the loss left zeros only
        assert rep.truncated_at in (None, end_of_flushed)
        assert_has_exactly(store, 40, results)
    assert_keeps_working(tmp_store_dir, 40, results)


def test_power_loss_async_drops_unsynced_segments(tmp_store_dir):
    store, fops = open_faulty(tmp_store_dir)
    results = put_range(store, 0, 60)
    store.flush()
    results += put_range(store, 60, 300)  # rolls into several new, never-synced segments
    n_files = len(list((tmp_store_dir / "commitlog").iterdir()))
    assert segment_of(results[-1].commitlog_offset) >= segment_of(results[59].commitlog_offset) + 2
    store._abandon()
    fops.power_loss()

    end_of_flushed = results[59].commitlog_offset + results[59].size
    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean
        assert rep.end_offset == end_of_flushed
        assert rep.truncated_at == end_of_flushed
        assert rep.problem
        assert rep.dropped_segments
        assert len(list((tmp_store_dir / "commitlog").iterdir())) < n_files
        assert str(end_of_flushed) in rep.summary()
        assert_has_exactly(store, 60, results)
    assert_keeps_working(tmp_store_dir, 60, results)


def test_power_loss_with_partial_writeback_tears_a_record(tmp_store_dir):
    """The kernel wrote back part of the unflushed tail before the power went: a record is
    half on disk. Recovery must end before it."""
    store, fops = open_faulty(tmp_store_dir)
    results = put_range(store, 0, 30)
    store.flush()
    results += put_range(store, 30, 45)
    torn = results[40]
    seg = store.log.segments.last()
    assert seg.base_offset <= torn.commitlog_offset
    # pretend the pages up to the middle of message 40 reached the disk
    upto = HEADER_AREA + torn.commitlog_offset - seg.base_offset + torn.size // 2
    fops.msync(seg.path, seg.mm, HEADER_AREA, upto - HEADER_AREA)
    store._abandon()
    fops.power_loss()

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert_cut_at(rep, torn.commitlog_offset)
        assert_has_exactly(store, 40, results)
    assert_keeps_working(tmp_store_dir, 40, results)


def test_power_loss_sync_loses_nothing_acknowledged(tmp_store_dir):
    store, fops = open_faulty(tmp_store_dir, config(flush="sync"))
    results = []
    for i in range(0, 200, 7):   # single puts and batches, rolling segments
        if i % 2:
            results.append(store.put(make_message(i, size=SIZE)))
            results += store.put_batch([make_message(j, size=SIZE) for j in range(i + 1, i + 7)])
        else:
            results += store.put_batch([make_message(j, size=SIZE) for j in range(i, i + 7)])
    assert all(r.ok for r in results)
    assert segment_of(results[-1].commitlog_offset) >= 2
    store._abandon()
    fops.power_loss()

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean
        assert rep.end_offset == results[-1].commitlog_offset + results[-1].size
        assert rep.truncated_at is None and not rep.dropped_segments
        assert_has_exactly(store, len(results), results)
    assert_keeps_working(tmp_store_dir, len(results), results)


# --------------------------------------------------------------------------- torn / zeroed tail


def _crash_after_flush(store_dir: Path, n: int) -> list:
    store, _ = open_faulty(store_dir)
    results = put_range(store, 0, n)
    store.flush()
    store._abandon()
    return results


@pytest.mark.parametrize("tear", [4, 16, SIZE // 2, "all-but-header"])
def test_torn_last_write(tmp_store_dir, tear):
    results = _crash_after_flush(tmp_store_dir, 50)
    last = results[-1]
    n = last.size - 8 if tear == "all-but-header" else tear
    path, pos = where(tmp_store_dir, last.commitlog_offset)
    zero_range(path, pos + last.size - n, pos + last.size)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert_cut_at(rep, last.commitlog_offset)
        assert_has_exactly(store, 49, results)
    # the torn bytes were zeroed: they cannot come back
    assert path.read_bytes()[pos:pos + last.size] == bytes(last.size)
    assert_keeps_working(tmp_store_dir, 49, results)


def test_zeroed_tail_at_record_boundary(tmp_store_dir):
    results = _crash_after_flush(tmp_store_dir, 50)
    cut = results[45]
    path, pos = where(tmp_store_dir, cut.commitlog_offset)
    zero_range(path, pos, HEADER_AREA + SMALL_SEGMENT)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean
        assert rep.end_offset == cut.commitlog_offset
        assert rep.truncated_at in (None, cut.commitlog_offset)
        assert_has_exactly(store, 45, results)
    assert_keeps_working(tmp_store_dir, 45, results)


def test_zeroed_tail_inside_a_record(tmp_store_dir):
    results = _crash_after_flush(tmp_store_dir, 50)
    cut = results[45]
    path, pos = where(tmp_store_dir, cut.commitlog_offset)
    zero_range(path, pos + 20, HEADER_AREA + SMALL_SEGMENT)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.end_offset == cut.commitlog_offset
        assert rep.truncated_at == cut.commitlog_offset
        assert rep.problem
        assert_has_exactly(store, 45, results)
    assert_keeps_working(tmp_store_dir, 45, results)


# --------------------------------------------------------------------------- flipped bits


@pytest.mark.parametrize("where_in_record", [0, 5, 30, 100, -3])
def test_bit_flip_in_active_segment(tmp_store_dir, where_in_record):
    """A flipped bit past the checkpoint's flushed offset with good records after it is damage,
    not a torn tail (issue 22): only the hit record is lost."""
    results = _crash_after_flush(tmp_store_dir, 60)
    active = segment_of(results[-1].commitlog_offset)
    in_active = [i for i, r in enumerate(results) if segment_of(r.commitlog_offset) == active]
    k = in_active[len(in_active) // 2]
    victim = results[k]
    path, pos = where(tmp_store_dir, victim.commitlog_offset)
    flip_bit(path, pos + (where_in_record % victim.size), bit=3)
    end = results[-1].commitlog_offset + results[-1].size

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean and rep.end_offset == end
        assert rep.truncated_at is None and rep.zeroed_bytes == 0
        assert [d.offset for d in rep.corrupt_records] == [victim.commitlog_offset]
        assert str(victim.commitlog_offset) in rep.summary()
        assert [m.body for m in store.scan(verify_crc=True)] == \
            [body_for(i, SIZE) for i in range(60) if i != k]


def test_bit_flip_in_sealed_segment_found_by_verification(tmp_store_dir, caplog):
    """A sealed segment with a valid footer is trusted at open (no rescan): a verified scan
    must find the damage, name its offset in a logged error, skip it and go on."""
    with strata.open(tmp_store_dir, config()) as store:
        results = put_range(store, 0, 250)
    victim_i = next(i for i, r in enumerate(results) if segment_of(r.commitlog_offset) == 1) + 3
    victim = results[victim_i]
    path, pos = where(tmp_store_dir, victim.commitlog_offset)
    flip_bit(path, pos + victim.size - 100, bit=6)  # inside the body

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.clean and rep.records_verified == 0  # trusted without a rescan
        caplog.clear()
        got = [m.body for m in store.scan(verify_crc=True)]
        assert got == [body_for(i, SIZE) for i in range(250) if i != victim_i]
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and f"offset {victim.commitlog_offset}" in errors[0]
        assert "CRC32C" in errors[0]
    with strata.open(tmp_store_dir, config(verify_crc_on_read=True)) as store:
        with pytest.raises(CorruptRecordError) as ei:   # the record is damaged, never served
            store.read_at(victim.commitlog_offset)
        assert ei.value.offset == victim.commitlog_offset
        assert store.read_at(results[victim_i - 1].commitlog_offset).body == \
            body_for(victim_i - 1, SIZE)


def test_damaged_footer_only_rescans_and_loses_nothing(tmp_store_dir):
    with strata.open(tmp_store_dir, config()) as store:
        results = put_range(store, 0, 250)
    seg1 = tmp_store_dir / "commitlog" / file_name(SMALL_SEGMENT)
    flip_bit(seg1, HEADER_AREA + SMALL_SEGMENT + 20, bit=1)
    assert SegmentFooter.decode(seg1.read_bytes()[HEADER_AREA + SMALL_SEGMENT:]) is None

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.scanned_segments >= 1 and rep.records_walked > 0
        assert rep.truncated_at is None and not rep.dropped_segments
        assert_has_exactly(store, 250, results)
        store.flush()
    # the rescanned segment was sealed again
    assert SegmentFooter.decode(seg1.read_bytes()[HEADER_AREA + SMALL_SEGMENT:]) is not None
    assert_keeps_working(tmp_store_dir, 250, results)


def test_bit_flip_in_flushed_segment_with_damaged_footer_costs_only_that_record(tmp_store_dir):
    # The footer is damaged, so the segment is walked again; but it lies in what the
    # checkpoint says is flushed: the damaged record is not a torn tail, nothing is cut.
    with strata.open(tmp_store_dir, config()) as store:
        results = put_range(store, 0, 250)
        end = store.max_commitlog_offset()
    n_files = len(list((tmp_store_dir / "commitlog").iterdir()))
    assert n_files >= 3
    victim_i = next(i for i, r in enumerate(results) if segment_of(r.commitlog_offset) == 1) + 3
    victim = results[victim_i]
    path, pos = where(tmp_store_dir, victim.commitlog_offset)
    flip_bit(path, pos + 50, bit=0)
    flip_bit(path, HEADER_AREA + SMALL_SEGMENT + 30, bit=2)  # the footer too: rescan

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.trusted_segments == 1 and not rep.clean
        assert rep.end_offset == end
        assert rep.truncated_at is None and not rep.dropped_segments and rep.zeroed_bytes == 0
        assert [m.body for m in store.scan(verify_crc=True)] == \
            [body_for(i, SIZE) for i in range(250) if i != victim_i]
        with pytest.raises(CorruptRecordError):
            store.read_at(victim.commitlog_offset)
        assert store.read_at(results[victim_i + 1].commitlog_offset).body == \
            body_for(victim_i + 1, SIZE)


# --------------------------------------------------------------------------- full disk


@pytest.mark.parametrize("preallocate", [True, False])
def test_disk_full_refuses_cleanly_then_recovers(tmp_store_dir, preallocate):
    store, fops = open_faulty(tmp_store_dir, config(preallocate=preallocate))
    results = put_range(store, 0, 10)
    fops.fill_disk(0)
    seq = 10
    with pytest.raises(DiskFullError) as ei:
        for _ in range(1000):  # until a roll needs a segment the disk cannot hold
            batch = [make_message(j, size=SIZE) for j in range(seq, seq + 4)]
            results += store.put_batch(batch)
            seq += 4
    assert isinstance(ei.value, OSError) and "space" in str(ei.value)
    n = len(results)
    assert n > 10
    end = store.max_commitlog_offset()
    assert end == results[-1].commitlog_offset + results[-1].size
    # nothing of the refused batch is visible, nothing acknowledged is lost
    assert_has_exactly(store, n, results)
    assert not list((tmp_store_dir / "commitlog").glob("*.alloc"))
    # still full: refused again, still unchanged
    with pytest.raises(DiskFullError):
        store.put_batch([make_message(j, size=SIZE) for j in range(n, n + 100)])
    assert store.max_commitlog_offset() == end

    fops.free_disk()
    more = store.put_batch([make_message(j, size=SIZE) for j in range(n, n + 100)])
    assert all(r.ok for r in more) and more[0].commitlog_offset >= end
    results += more
    assert_has_exactly(store, n + 100, results)
    store.close()
    with strata.open(tmp_store_dir, config()) as store:
        assert store.recovery_report.clean
        assert_has_exactly(store, n + 100, results)


def test_refused_batch_leaves_footer_statistics_intact(tmp_store_dir):
    """A batch undone because the disk was full must not leave its store time, or its record
    count, in the segment's footer."""
    store, fops = open_faulty(tmp_store_dir, config(preallocate=False))
    results = put_range(store, 0, 70)
    n = SMALL_SEGMENT // results[0].size - 2
    results += put_range(store, 70, n)  # the first segment is nearly full
    assert segment_of(results[-1].commitlog_offset) == 0
    fops.fill_disk(0)
    time.sleep(0.003)  # the refused batch gets a later store time than the stored ones
    with pytest.raises(DiskFullError):
        # the first record of the batch still fits the segment, the rest need a new one
        store.put_batch([make_message(j, size=SIZE) for j in range(n, n + 10)])
    fops.free_disk()
    # the next record does not fit the first segment: it is closed without new records
    big = store.put(strata.Message("t", bytes(SMALL_SEGMENT // 2)))
    assert segment_of(big.commitlog_offset) == 1
    store.close()
    seg0 = tmp_store_dir / "commitlog" / file_name(0)
    footer = SegmentFooter.decode(seg0.read_bytes()[HEADER_AREA + SMALL_SEGMENT:])
    assert footer is not None
    assert footer.record_count == n
    assert footer.min_store_timestamp == min(r.store_timestamp for r in results)
    assert footer.max_store_timestamp == max(r.store_timestamp for r in results)
