"""Damaged records are never served: ``get`` passes over them and reports them, ``read_at`` and
``get_by_id`` raise CorruptRecordError naming the commit-log offset, ``query`` and ``scan`` pass
over them with a logged error, decoding never raises a raw UnicodeDecodeError, and the CLI
prints a clear error line instead of a traceback.

The bits are flipped in the segment file under a running store (its mapping shares the page
cache, so it reads the damage at once), as a failing disk or a stray write would."""

from __future__ import annotations

import logging
from contextlib import contextmanager
import subprocess
import sys

import pytest

import strata
from strata.errors import CorruptRecordError
from strata.testing.faults import flip_bit
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, file_name
from strata.store.message import CorruptRecord, GetStatus

from store_helpers import open_store, settle

SEGMENT = 64 * 1024


def put_n(store, n: int, *, queue_id: int = 0, tags=None) -> list:
    return list(store.put_batch([strata.Message("t", b"m%d" % i, queue_id=queue_id,
                                                tags=tags(i) if tags else None)
                                 for i in range(n)]))


def flip(store_dir, offset: int, within: int, bit: int = 0) -> None:
    """Invert one bit of the byte ``within`` the record at commit-log ``offset``."""
    base = offset - offset % SEGMENT
    flip_bit(store_dir / "commitlog" / file_name(base), HEADER_AREA + offset - base + within, bit)


@contextmanager
def queue_of(tmp_path, n: int, *, tags=None, **overrides):
    """A store with ``n`` messages in the one queue of topic "t", dispatched:
    (directory, store, put results)."""
    d = tmp_path / "s"
    with open_store(d, **overrides) as store:
        store.create_topic("t", queues=1)
        results = put_n(store, n, tags=tags)
        settle(store)
        yield d, store, results


def body_at(r) -> int:
    return r.size - rec.TRAILER_SIZE - 2   # the body ends just before the trailer


def topic_at(store, r) -> int:
    """Bytes from the start of ``r``'s record to its topic."""
    seg, pos = store.log.locate(r.commitlog_offset)
    return rec.topic_span(seg.mm, HEADER_AREA + pos)[0] - HEADER_AREA - pos


def test_crc_is_checked_on_read_by_default():
    assert strata.StoreConfig().verify_crc_on_read is True


def test_a_flipped_body_byte_is_passed_over_and_reported_by_get(tmp_path, caplog):
    with queue_of(tmp_path, 10) as (d, store, results):
        bad = results[4]
        flip(d, bad.commitlog_offset, body_at(bad), bit=3)
        with caplog.at_level(logging.ERROR, logger="strata"):
            r = store.get("t", 0, 0, max_messages=32)
        assert r.status is GetStatus.FOUND
        assert [m.body for m in r.messages] == [b"m%d" % i for i in range(10) if i != 4]
        assert r.next_offset == 10
        assert len(r.corrupt) == 1 and isinstance(r.corrupt[0], CorruptRecord)
        c = r.corrupt[0]
        assert (c.queue_offset, c.commitlog_offset) == (4, bad.commitlog_offset)
        assert "CRC32C mismatch" in c.reason
        assert f"commit-log offset {bad.commitlog_offset}" in caplog.text
        assert "strata verify" in caplog.text

        # a consumer reading in small batches is never stuck and sees the damage once
        seen, corrupt, off = [], [], 0
        while off < 10:
            r = store.get("t", 0, off, max_messages=4)
            seen += [m.queue_offset for m in r.messages]
            corrupt += [c.queue_offset for c in r.corrupt]
            assert r.next_offset > off
            off = r.next_offset
        assert seen == [0, 1, 2, 3, 5, 6, 7, 8, 9] and corrupt == [4]
        # only the damaged record: nothing served, nothing reported
        r = store.get("t", 0, 4, max_messages=1)
        assert r.status is GetStatus.NO_MATCHED_MESSAGE and r.messages == []
        assert [c.queue_offset for c in r.corrupt] == [4] and r.next_offset == 5


def test_read_at_and_get_by_id_raise_for_a_damaged_record(tmp_path):
    d = tmp_path / "s"
    with open_store(d) as store:
        results = put_n(store, 10)
        settle(store)
        bad = results[6]
        flip(d, bad.commitlog_offset, body_at(bad), bit=0)
        for read in (lambda: store.read_at(bad.commitlog_offset),
                     lambda: store.get_by_id(bad.msg_id)):
            with pytest.raises(CorruptRecordError) as ei:
                read()
            assert ei.value.offset == bad.commitlog_offset
            assert f"commit-log offset {bad.commitlog_offset}" in str(ei.value)
            assert "strata verify" in str(ei.value) and "rebuild-index" not in str(ei.value)
        # the records around it are intact, and a non-record offset is still just None
        assert store.read_at(results[5].commitlog_offset).body == b"m5"
        assert store.get_by_id(results[7].msg_id).body == b"m7"
        assert store.read_at(bad.commitlog_offset + 1) is None


@pytest.mark.parametrize("verify", [True, False])
def test_a_flipped_topic_byte_is_a_corrupt_record_not_a_unicode_error(tmp_path, verify, caplog):
    with queue_of(tmp_path, 6, verify_crc_on_read=verify) as (d, store, results):
        bad = results[2]
        flip(d, bad.commitlog_offset, topic_at(store, bad), bit=7)  # "t" -> b"\xf4"
        with pytest.raises(CorruptRecordError) as ei:
            store.read_at(bad.commitlog_offset)
        assert ei.value.offset == bad.commitlog_offset
        with pytest.raises(CorruptRecordError) as ei:
            store.get_by_id(bad.msg_id)
        assert ei.value.offset == bad.commitlog_offset
        r = store.get("t", 0, 0)
        assert [m.body for m in r.messages] == [b"m0", b"m1", b"m3", b"m4", b"m5"]
        assert [(c.queue_offset, c.commitlog_offset) for c in r.corrupt] == \
            [(2, bad.commitlog_offset)]
        with caplog.at_level(logging.ERROR, logger="strata"):   # scan skips it, logged
            assert [m.body for m in store.scan()] == [b"m0", b"m1", b"m3", b"m4", b"m5"]
        assert f"commit-log offset {bad.commitlog_offset}" in caplog.text


def test_damage_in_the_fixed_header_is_the_record_s_not_the_queue_s(tmp_path):
    # a flipped length or offset field fails the header checks before any CRC: still the
    # record's damage, reported with its offset, for a writer and a read-only opener alike
    with queue_of(tmp_path, 8) as (d, store, results):
        flip(d, results[1].commitlog_offset, rec.POS_TOTAL_LENGTH, bit=2)
        flip(d, results[5].commitlog_offset, rec.POS_PHYSICAL_OFFSET, bit=1)
        want = [(1, results[1].commitlog_offset), (5, results[5].commitlog_offset)]
        r = store.get("t", 0, 0)
        assert [m.queue_offset for m in r.messages] == [0, 2, 3, 4, 6, 7]
        assert [(c.queue_offset, c.commitlog_offset) for c in r.corrupt] == want
    with strata.open(d, readonly=True) as reader:   # no writer: checks every unit too
        r = reader.get("t", 0, 0)
        assert [m.queue_offset for m in r.messages] == [0, 2, 3, 4, 6, 7]
        assert [(c.queue_offset, c.commitlog_offset) for c in r.corrupt] == want
        r = reader.get("t", 0, 1, max_messages=1)
        assert r.messages == [] and r.next_offset == 2 and len(r.corrupt) == 1


def test_tag_filtered_get_passes_over_damaged_records(tmp_path):
    parity = lambda i: "even" if i % 2 == 0 else "odd"  # noqa: E731
    with queue_of(tmp_path, 12, tags=parity) as (d, store, results):
        flip(d, results[4].commitlog_offset, body_at(results[4]))
        r = store.get("t", 0, 0, max_messages=3, tags="even")
        assert [m.body for m in r.messages] == [b"m0", b"m2", b"m6"]
        assert [c.queue_offset for c in r.corrupt] == [4] and r.next_offset == 7


def test_query_passes_over_a_damaged_record(tmp_path, caplog):
    d = tmp_path / "s"
    with open_store(d) as store:
        results = list(store.put_batch([strata.Message("t", b"v%d" % i, keys=["k", f"k{i}"])
                                        for i in range(4)]))
        settle(store)
        bad = results[2]
        flip(d, bad.commitlog_offset, body_at(bad), bit=5)
        with caplog.at_level(logging.ERROR, logger="strata"):
            assert store.query("t", "k2") == []
            assert sorted(m.body for m in store.query("t", "k")) == [b"v0", b"v1", b"v3"]
        assert f"commit-log offset {bad.commitlog_offset}" in caplog.text


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_cli_scan_and_get_on_a_damaged_record_print_one_error_line(tmp_path):
    with queue_of(tmp_path, 5) as (d, store, results):
        bad = results[3]
        flip(d, bad.commitlog_offset, topic_at(store, bad), bit=7)
    for args in (("scan", d), ("get", d, "t", 0, 0)):
        p = run_cli(*args)
        assert "Traceback" not in p.stderr, p.stderr
        assert f"commit-log offset {bad.commitlog_offset} is damaged" in p.stderr, p.stderr
        # the good messages are printed, the damaged one is not
        assert [line.count('"body"') for line in p.stdout.splitlines()] == [1, 1, 1, 1]
        assert p.returncode == 1, (args, p.stderr)   # passing over damage is not success
        if args[0] == "scan":
            assert "1 damaged record(s) passed over" in p.stderr, p.stderr
    assert "CorruptRecordError: t/0 offset 3" in p.stderr  # get
