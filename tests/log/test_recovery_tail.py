"""Recovery never throws good data away (issue 22, items 1 and 4-log): a bad record written
after the last checkpoint with good records after it is damage, not a torn tail (every good
record is kept, the bad one named); only a proven torn tail is cut, and its bytes are first
copied to a quarantine file; ``strata verify`` checks the range written since the checkpoint;
a deleted last segment of a cleanly closed store is reported as lost, with its offsets."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import strata
from strata.testing.faults import flip_bit, zero_range
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, file_name

from support import body_for, make_message, small_store_config

SEGMENT = 1 << 20
SIZE = 300
TOPIC = "t"


def config(**kw) -> strata.StoreConfig:
    kw.setdefault("segment_size", SEGMENT)
    kw.setdefault("flush", "sync")
    kw.setdefault("checkpoint_interval_ms", 3_600_000)   # only the checkpoint the test writes
    return small_store_config(**kw)


def where(store_dir: Path, offset: int) -> tuple[Path, int]:
    base = offset - offset % SEGMENT
    return store_dir / "commitlog" / file_name(base), HEADER_AREA + offset - base


def put_each(store, start: int, stop: int) -> list:
    out = [store.put(make_message(i, topic=TOPIC, size=SIZE)) for i in range(start, stop)]
    assert all(r.ok for r in out)
    return out


def crash_after_checkpoint(store_dir: Path, before: int = 100, after: int = 100,
                           **kw) -> tuple[list, int]:
    """``before`` acknowledged puts, a checkpoint covering them, ``after`` more acknowledged
    puts, then a crash (no close). Returns the results and the checkpoint's flushed offset."""
    store = strata.open(store_dir, config(**kw))
    store.create_topic(TOPIC, queues=1)
    if before > 500:   # many: in batches
        results = store.put_batch([make_message(i, topic=TOPIC, size=SIZE)
                                   for i in range(before)])
    else:
        results = put_each(store, 0, before)
    assert store.wait_dispatched(30)
    store.flush()
    store._write_checkpoint(clean_end=-1)
    flushed = store.checkpoint.load().flushed_offset
    assert flushed == results[-1].commitlog_offset + results[-1].size
    results += put_each(store, before, before + after)
    assert store.wait_dispatched(30)
    store._abandon()
    return results, flushed


def flip_body(store_dir: Path, r) -> None:
    path, pos = where(store_dir, r.commitlog_offset)
    flip_bit(path, pos + r.size - rec.TRAILER_SIZE - SIZE // 2, bit=5)


def queue_bodies(store) -> list[bytes]:
    out, offset = [], 0
    while True:
        got = store.get(TOPIC, 0, offset, max_messages=1000)
        out += [m.body for m in got.messages]
        if got.next_offset == offset:
            return out
        offset = got.next_offset


def run_verify(store_dir: Path) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-m", "strata.cli.main", "verify", str(store_dir)],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_flip_after_the_checkpoint_costs_only_that_record(tmp_store_dir, caplog):
    results, flushed = crash_after_checkpoint(tmp_store_dir)
    victim = results[120]
    assert victim.commitlog_offset > flushed
    end = results[-1].commitlog_offset + results[-1].size
    flip_body(tmp_store_dir, victim)

    with caplog.at_level(logging.ERROR), strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean and rep.end_offset == end == store.max_commitlog_offset()
        assert rep.truncated_at is None and rep.zeroed_bytes == 0 and not rep.dropped_segments
        assert [d.offset for d in rep.corrupt_records] == [victim.commitlog_offset]
        assert "CRC32C" in rep.corrupt_records[0].why
        assert rep.lost_anything and str(victim.commitlog_offset) in rep.summary()
        want = [body_for(i, SIZE) for i in range(200) if i != 120]
        assert [m.body for m in store.scan(verify_crc=True)] == want
        assert queue_bodies(store) == want      # the consume queue skips only the damaged one
        assert store.query(TOPIC, "k119") and store.query(TOPIC, "k121")
        assert store.query(TOPIC, "k199")[0].body == body_for(199, SIZE)
        more = store.put(make_message(200, topic=TOPIC, size=SIZE))
        assert more.commitlog_offset == end
    assert any(str(victim.commitlog_offset) in r.getMessage() and r.levelno >= logging.ERROR
               for r in caplog.records)
    with strata.open(tmp_store_dir, config()) as store:
        assert len(queue_bodies(store)) == 200


def test_verify_before_open_finds_damage_written_after_the_checkpoint(tmp_store_dir):
    results, flushed = crash_after_checkpoint(tmp_store_dir)
    flip_body(tmp_store_dir, results[120])
    code, out, err = run_verify(tmp_store_dir)
    assert code == 1 and out["problems"] == 1
    assert out["records"] == 199
    assert f"offset {results[120].commitlog_offset}" in err and "CRC32C" in err
    # a read-only open (what verify does) changed nothing: a writer still keeps everything
    with strata.open(tmp_store_dir, config()) as store:
        assert len(queue_bodies(store)) == 199


def test_torn_tail_after_the_checkpoint_is_quarantined_before_it_is_cut(tmp_store_dir):
    results, flushed = crash_after_checkpoint(tmp_store_dir)
    last = results[-1]
    path, pos = where(tmp_store_dir, last.commitlog_offset)
    zero_range(path, pos + last.size - 40, pos + last.size)   # its last 40 bytes never landed
    torn = path.read_bytes()[pos:pos + last.size]

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.end_offset == rep.truncated_at == last.commitlog_offset
        assert not rep.corrupt_records
        assert rep.quarantine is not None and rep.quarantine in rep.summary()
        assert len(queue_bodies(store)) == 199
    assert path.read_bytes()[pos:pos + last.size] == bytes(last.size)   # cut from the log
    from strata.log.quarantine import read_quarantine
    q = tmp_store_dir / rep.quarantine
    pieces = read_quarantine(q)
    assert [p.offset for p in pieces] == [last.commitlog_offset]
    assert pieces[0].data.ljust(last.size, b"\0") == torn    # trailing zeros are not kept
    assert len(pieces[0].data) == last.size - 40


def test_a_run_of_zeros_with_good_records_after_it_is_not_a_torn_tail(tmp_store_dir):
    """Pages lost in the middle of what was written (a power loss writes back pages out of
    order): the records after the hole are whole; they are kept and the hole is reported."""
    results, flushed = crash_after_checkpoint(tmp_store_dir)
    a, b = results[130], results[140]
    path, pos = where(tmp_store_dir, a.commitlog_offset)
    zero_range(path, pos, where(tmp_store_dir, b.commitlog_offset)[1])

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.truncated_at is None and rep.zeroed_bytes == 0
        assert [(d.offset, d.end) for d in rep.corrupt_records] == \
            [(a.commitlog_offset, b.commitlog_offset)]
        assert rep.lost_anything
        want = [body_for(i, SIZE) for i in range(200) if not 130 <= i < 140]
        assert [m.body for m in store.scan(verify_crc=True)] == want
        assert queue_bodies(store) == want


def test_flip_in_the_last_record_is_a_torn_tail_kept_aside(tmp_store_dir):
    results, flushed = crash_after_checkpoint(tmp_store_dir)
    last = results[-1]
    flip_body(tmp_store_dir, last)
    path, pos = where(tmp_store_dir, last.commitlog_offset)
    damaged = path.read_bytes()[pos:pos + last.size]
    code, out, err = run_verify(tmp_store_dir)   # what the open will cut, said before it
    assert code == 1 and out["records"] == 199
    assert f"offset {last.commitlog_offset}: log-end" in err.replace("\n", " ")
    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.truncated_at == last.commitlog_offset and rep.lost_anything
        assert rep.quarantine is not None
    from strata.log.quarantine import read_quarantine
    pieces = read_quarantine(tmp_store_dir / rep.quarantine)
    assert pieces[0].offset == last.commitlog_offset
    assert pieces[0].data.ljust(last.size, b"\0") == damaged


def test_deleted_last_segment_of_a_cleanly_closed_store_is_reported_lost(tmp_store_dir):
    cfg = config(flush="async")
    with strata.open(tmp_store_dir, cfg) as store:
        results = store.put_batch([make_message(i, topic=TOPIC, size=SIZE) for i in range(5000)])
        end = store.max_commitlog_offset()
    files = sorted((tmp_store_dir / "commitlog").iterdir())
    assert len(files) >= 2
    files[-1].unlink()
    base = int(files[-1].name)
    code, out, err = run_verify(tmp_store_dir)   # said before any writer opens it, too
    assert code == 1 and "missing-segment" in err and files[-1].name in err

    with strata.open(tmp_store_dir, cfg) as store:
        rep = store.recovery_report
        assert rep.lost_anything
        assert rep.problem and files[-1].name in rep.problem
        assert f"[{base}, {end})" in rep.problem
        assert files[-1].name in rep.summary()
        kept = [body_for(i, SIZE) for i, r in enumerate(results) if r.commitlog_offset < base]
        assert [m.body for m in store.scan()] == kept
        # the lost offsets are never reused: a stand-in holds them, new records go after
        more = store.put(make_message(9999, topic=TOPIC, size=SIZE))
        assert more.commitlog_offset >= end
        assert store.read_at(more.commitlog_offset).body == body_for(9999, SIZE)
    assert files[-1].exists()   # the stand-in
    with strata.open(tmp_store_dir, cfg) as store:
        rep = store.recovery_report
        assert rep.clean and not rep.lost_anything
        assert [m.body for m in store.scan()] == kept + [body_for(9999, SIZE)]


def test_deleted_last_segment_after_a_crash_is_reported_lost(tmp_store_dir):
    results, flushed = crash_after_checkpoint(tmp_store_dir, before=4000, after=10,
                                              flush="async")
    files = sorted((tmp_store_dir / "commitlog").iterdir())
    base = int(files[-1].name)
    assert len(files) >= 2 and flushed > base
    files[-1].unlink()
    with strata.open(tmp_store_dir, config(flush="async")) as store:
        rep = store.recovery_report
        assert rep.lost_anything and rep.missing_segments == [files[-1].name]
        assert f"[{base}, {flushed})" in rep.problem
        assert [m.body for m in store.scan()] == \
            [body_for(i, SIZE) for i, r in enumerate(results) if r.commitlog_offset < base]


def test_a_lost_segment_restored_over_its_stand_in_comes_back(tmp_store_dir, tmp_path):
    cfg = config(flush="async")
    with strata.open(tmp_store_dir, cfg) as store:
        results = store.put_batch([make_message(i, topic=TOPIC, size=SIZE) for i in range(5000)])
    last = sorted((tmp_store_dir / "commitlog").iterdir())[-1]
    backup = tmp_path / "backup"
    backup.write_bytes(last.read_bytes())
    last.unlink()
    with strata.open(tmp_store_dir, cfg) as store:
        assert store.recovery_report.missing_segments == [last.name]
        more = store.put(make_message(5000, topic=TOPIC, size=SIZE))
    last.write_bytes(backup.read_bytes())   # the operator restores the file
    with strata.open(tmp_store_dir, cfg) as store:
        assert [m.body for m in store.scan()] == [body_for(i, SIZE) for i in range(5001)]
        assert store.read_at(results[-1].commitlog_offset).body == body_for(4999, SIZE)
        assert store.read_at(more.commitlog_offset).body == body_for(5000, SIZE)
