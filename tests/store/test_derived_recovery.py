"""Consume queues and key index are derived from the commit log: after a power loss (units
written back partly and out of order) or a damaged file, recovery rebuilds them from the log,
so every acknowledged message is served by ``get`` at its queue offset and by ``query``, and
nothing else is, across later clean restarts too."""

from __future__ import annotations

from pathlib import Path

import pytest

import strata
from strata.testing.faults import FaultInjectingFileOps, flip_bit, zero_range
from strata.format.consume_queue import UNIT_SIZE
from strata.format.segment import HEADER_AREA
from strata.store.message import GetStatus
from strata.store.message_store import MessageStore

from store_helpers import config as store_config
from support import body_for

TOPICS = ("pay", "orders")


def config(**kw) -> strata.StoreConfig:
    # No background flush or checkpoint: what is durable is what the test made durable.
    kw.setdefault("flush_interval_ms", 60_000)
    kw.setdefault("flush_thorough_interval_ms", 60_000)
    kw.setdefault("checkpoint_interval_ms", 3_600_000)
    return store_config(**kw)


def put(store, seqs: range) -> dict[str, list[int]]:
    """Messages ``seqs``, alternately to pay and orders (one queue each); key ``k<seq>``."""
    placed: dict[str, list[int]] = {t: [] for t in TOPICS}
    for seq in seqs:
        topic = TOPICS[seq % 2]
        r = store.put(strata.Message(topic, body_for(seq), keys=(f"k{seq}",)))
        assert r.ok
        placed[topic].append(seq)
    return placed


def merge(a: dict, b: dict) -> dict:
    return {t: a.get(t, []) + b.get(t, []) for t in TOPICS}


def assert_serves_exactly(store, acked: dict[str, list[int]]) -> None:
    """``get`` returns each acknowledged message at its queue offset and nothing else;
    ``query`` finds each by its key."""
    for topic, seqs in acked.items():
        assert store.min_offset(topic, 0) == 0
        assert store.max_offset(topic, 0) == len(seqs)
        for off, seq in enumerate(seqs):
            r = store.get(topic, 0, off, 1)
            assert r.status is GetStatus.FOUND, (topic, off, r)
            m = r.messages[0]
            assert (m.topic, m.queue_id, m.queue_offset, m.body) == (topic, 0, off, body_for(seq))
        got, off = [], 0
        while off < len(seqs):
            r = store.get(topic, 0, off, 7)
            assert r.status is GetStatus.FOUND and not r.corrupt
            got += [m.body for m in r.messages]
            off = r.next_offset
        assert got == [body_for(s) for s in seqs]
        for seq in seqs:
            found = store.query(topic, f"k{seq}")
            assert [m.body for m in found] == [body_for(seq)]


def queue_file(store_dir: Path, topic: str) -> Path:
    (path,) = sorted((store_dir / "consumequeue" / topic / "0").iterdir())
    return path


def unit_at(n: int) -> int:
    return HEADER_AREA + n * UNIT_SIZE


def crash_after_checkpoint(store_dir: Path) -> tuple[dict, dict]:
    """30 messages then a clean close (the checkpoint covers them), then 40 more whose log
    records are flushed but whose units never were, and a crash. Returns (before, after)."""
    with strata.open(store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        before = put(store, range(30))
    store = MessageStore(store_dir, config(), file_ops=FaultInjectingFileOps())
    after = put(store, range(30, 70))
    store.flush()
    assert store.wait_dispatched()
    store._abandon()
    return before, after


def test_partly_written_back_units_are_redispatched(tmp_store_dir):
    before, after = crash_after_checkpoint(tmp_store_dir)
    acked = merge(before, after)
    # Write-back out of order: pay's unit 16 lost, unit 17's commit-log offset lost (its size
    # kept), orders' unit 17 offset lost and its last unit lost. (Unit 17 is where a binary
    # search over the 35 units looks first.)
    pay, orders = queue_file(tmp_store_dir, "pay"), queue_file(tmp_store_dir, "orders")
    zero_range(pay, unit_at(16), unit_at(17))
    zero_range(pay, unit_at(17), unit_at(17) + 8)
    zero_range(orders, unit_at(17), unit_at(17) + 8)
    zero_range(orders, unit_at(34), unit_at(35))
    with strata.open(tmp_store_dir, config()) as store:
        assert store.recovery_report.redispatched_records >= 40
        assert_serves_exactly(store, acked)
    with strata.open(tmp_store_dir, config()) as store:   # and after a clean restart
        assert store.recovery_report.clean
        assert_serves_exactly(store, acked)


def test_power_loss_of_units_after_the_checkpoint(tmp_store_dir):
    """Every unit after the checkpoint lost, except a stray later one written back."""
    before, after = crash_after_checkpoint(tmp_store_dir)
    pay = queue_file(tmp_store_dir, "pay")
    kept = pay.read_bytes()[unit_at(30):unit_at(31)]
    zero_range(pay, unit_at(15), unit_at(35))
    with open(pay, "r+b") as f:       # unit 30 reached the disk; 15..29 did not
        f.seek(unit_at(30))
        f.write(kept)
    with strata.open(tmp_store_dir, config()) as store:
        assert_serves_exactly(store, merge(before, after))
    with strata.open(tmp_store_dir, config()) as store:
        assert_serves_exactly(store, merge(before, after))


def test_writer_get_reports_a_damaged_unit_and_the_writer_rederives_it(tmp_store_dir):
    """A unit damaged under a running writer (its offset lost, its size kept) leads to the
    record at commit-log offset 0, pay's message 0. Reads never write: get passes over the
    unit and reports it; the writer's background service re-derives it from the log, and
    then get serves the right message and the unit's bytes are the good ones again."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(20))
        assert store.wait_dispatched()
        qfile = queue_file(tmp_store_dir, "pay")
        good = qfile.read_bytes()[unit_at(3):unit_at(4)]
        zero_range(qfile, unit_at(3), unit_at(3) + 8)
        r = store.get("pay", 0, 0, 10)
        assert [m.queue_offset for m in r.messages] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        assert [(c.queue_offset, c.commitlog_offset) for c in r.corrupt] == [(3, 0)]
        assert "another record" in r.corrupt[0].reason
        assert store.wait_repaired()
        assert qfile.read_bytes()[unit_at(3):unit_at(4)] == good
        r = store.get("pay", 0, 0, 10)
        assert [m.body for m in r.messages] == [body_for(s) for s in acked["pay"][:10]]
        assert [m.queue_offset for m in r.messages] == list(range(10)) and not r.corrupt


def test_a_read_never_writes_and_close_repairs_what_reads_found(tmp_store_dir, monkeypatch):
    """get over a damaged unit leaves every file as it was (the writer's background repair
    is kept from running here); the writer's close re-derives the unit before its
    checkpoint, so the next open serves every message."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(20))
        assert store.wait_dispatched()
        monkeypatch.setattr(store.repairs, "run", lambda s: 0)   # no background repair
        qfile = queue_file(tmp_store_dir, "pay")
        good = qfile.read_bytes()[unit_at(3):unit_at(4)]
        zero_range(qfile, unit_at(3), unit_at(3) + 8)
        damaged = qfile.read_bytes()
        for _ in range(3):
            r = store.get("pay", 0, 0, 10)
            assert [c.queue_offset for c in r.corrupt] == [3]
        assert store.repairs.pending() == 1
        assert qfile.read_bytes() == damaged
        monkeypatch.undo()
    assert qfile.read_bytes()[unit_at(3):unit_at(4)] == good
    with strata.open(tmp_store_dir, config()) as store:
        r = store.get("pay", 0, 0, 10)
        assert [m.body for m in r.messages] == [body_for(s) for s in acked["pay"][:10]]
        assert not r.corrupt


def test_writer_get_never_serves_another_units_record(tmp_store_dir):
    """When the unit's record cannot be found (here its header names another queue offset
    too), get passes over the unit and says why; it never serves the record at offset 0."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(20))
        assert store.wait_dispatched()
        qfile = queue_file(tmp_store_dir, "pay")
        target = store.get("pay", 0, 3, 1).messages[0].commitlog_offset
        zero_range(qfile, unit_at(3), unit_at(3) + 8)
        seg = sorted(p for p in (tmp_store_dir / "commitlog").iterdir() if p.name.isdigit())[0]
        flip_bit(seg, HEADER_AREA + target + 20, 5)       # its queue offset field
        r = store.get("pay", 0, 0, 10)
        assert [m.queue_offset for m in r.messages] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        assert [m.body for m in r.messages] == [body_for(s) for s in acked["pay"][:10]
                                                if s != acked["pay"][3]]
        assert [(c.queue_offset, c.commitlog_offset) for c in r.corrupt] == [(3, 0)]
        assert "another record" in r.corrupt[0].reason
        r = store.get("pay", 0, 3, 1)
        assert r.messages == [] and r.next_offset == 4 and r.corrupt[0].queue_offset == 3


def test_get_serves_the_record_a_unit_with_a_flipped_size_leads_to(tmp_store_dir):
    """The unit's offset still leads to its own message: get serves it (the size in the unit
    is not what makes a record the unit's); on a writer and on a read-only opener alike."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(20))
        assert store.wait_dispatched()
        flip_bit(queue_file(tmp_store_dir, "pay"), unit_at(4) + 8, 3)
        r = store.get("pay", 0, 0, 10)
        assert [m.body for m in r.messages] == [body_for(s) for s in acked["pay"][:10]]
        assert not r.corrupt
    with strata.open(tmp_store_dir, readonly=True) as ro:
        assert [m.body for m in ro.get("pay", 0, 0, 10).messages] == \
            [body_for(s) for s in acked["pay"][:10]]


# --------------------------------------------------------------------------- damaged files


def zero_header(path: Path) -> None:
    zero_range(path, 0, 64)


def test_key_index_file_with_a_zeroed_header_is_rebuilt(tmp_store_dir):
    """A power loss right after a key-index file was created leaves its header zeroed."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(40))
    (index_file,) = [p for p in (tmp_store_dir / "index").iterdir() if p.name.isdigit()]
    zero_header(index_file)
    with strata.open(tmp_store_dir, config()) as store:
        report = store.recovery_report
        assert any("key index" in r and index_file.name in r for r in report.repaired_files)
        assert report.redispatched_records == 40
        assert_serves_exactly(store, acked)
    assert (tmp_store_dir / "index" / (index_file.name + ".damaged")).exists()
    with strata.open(tmp_store_dir, config()) as store:
        assert store.recovery_report.clean and not store.recovery_report.repaired_files
        assert_serves_exactly(store, acked)


def test_consume_queue_file_with_a_zeroed_header_is_rebuilt(tmp_store_dir):
    with strata.open(tmp_store_dir, config(consume_queue_units=8)) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        acked = put(store, range(60))
    files = sorted((tmp_store_dir / "consumequeue" / "pay" / "0").iterdir())
    assert len(files) == 4
    zero_header(files[1])       # pay's units 8..15; the files after it are set aside too
    with strata.open(tmp_store_dir, config(consume_queue_units=8)) as store:
        report = store.recovery_report
        (line,) = [r for r in report.repaired_files if "consume queue pay/0" in r]
        assert files[1].name in line
        assert_serves_exactly(store, acked)
        more = put(store, range(60, 64))
    acked = merge(acked, more)
    with strata.open(tmp_store_dir, config(consume_queue_units=8)) as store:
        assert store.recovery_report.clean and not store.recovery_report.repaired_files
        assert_serves_exactly(store, acked)
