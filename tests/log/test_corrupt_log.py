"""Damage inside the flushed log (issue 17, items 1, 3 and 8): recovery trusts what the
checkpoint says is flushed, passes over a damaged record there (resynchronising at the next
good one) and keeps every good record around it; verify and scan go on past damage; a cut
segment file is a torn tail, not a store that refuses to open; a new store says so."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import strata
from strata.errors import CorruptRecordError
from strata.files.checkpoint import ABORT_NAME, CheckpointFile
from strata.testing.faults import flip_bit
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, file_name, file_size

from support import body_for, make_message, small_store_config

SEGMENT = 1 << 20      # the second segment stays unsealed: recovery walks it
SIZE = 300             # body bytes
COUNT = 5000           # about 1.8 MB: two segments
TOPIC = "t"


def config(**kw) -> strata.StoreConfig:
    kw.setdefault("segment_size", SEGMENT)
    kw.setdefault("flush_interval_ms", 60_000)
    kw.setdefault("flush_thorough_interval_ms", 60_000)
    return small_store_config(**kw)


def fill(store_dir: Path, count: int = COUNT) -> list:
    """``count`` flushed messages, then an unclean stop (abort marker left behind)."""
    store = strata.open(store_dir, config())
    store.create_topic(TOPIC, queues=1)
    out = []
    for i in range(0, count, 100):
        out += store.put_batch([make_message(j, topic=TOPIC, size=SIZE)
                                for j in range(i, min(count, i + 100))])
    assert all(r.ok for r in out)
    store.close()
    # an unclean stop after everything was flushed: the abort marker, a checkpoint without end
    store = strata.open(store_dir, config())
    store._abandon()
    assert (store_dir / ABORT_NAME).exists()
    return out


def where(store_dir: Path, offset: int) -> tuple[Path, int]:
    base = offset - offset % SEGMENT
    return store_dir / "commitlog" / file_name(base), HEADER_AREA + offset - base


def damage(store_dir: Path, r, field: int, bit: int = 3) -> None:
    path, pos = where(store_dir, r.commitlog_offset)
    flip_bit(path, pos + field, bit=bit)


def body_field(r) -> int:
    return r.size - rec.TRAILER_SIZE - SIZE // 2


def redispatch_everything(store_dir: Path) -> None:
    """Make the next open re-dispatch the whole log (a checkpoint from before any dispatch)."""
    cpf = CheckpointFile(store_dir)
    cpf.store(replace(cpf.load(), dispatched_offset=0))


def queue_bodies(store) -> list[bytes]:
    out, offset = [], 0
    while True:
        r = store.get(TOPIC, 0, offset, max_messages=1000)
        out += [m.body for m in r.messages]
        if r.next_offset == offset:
            return out
        offset = r.next_offset


def run_verify(store_dir: Path) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-m", "strata.cli.main", "verify", str(store_dir)],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def assert_all_but(store, results: list, bad: set[int]) -> None:
    """Every message but those at indexes ``bad`` is served by scan, get, read_at and
    get_by_id; the bad ones never are."""
    want = [body_for(i, SIZE) for i in range(len(results)) if i not in bad]
    assert [m.body for m in store.scan()] == want
    assert [m.body for m in store.scan(verify_crc=True)] == want
    assert queue_bodies(store) == want
    for i, r in enumerate(results):
        if i in bad:
            with pytest.raises(CorruptRecordError):
                if store.read_at(r.commitlog_offset) is None:   # a record start nobody sees
                    raise CorruptRecordError("not served", r.commitlog_offset)
        elif i % 97 == 0 or i - 1 in bad or i + 1 in bad:
            assert store.read_at(r.commitlog_offset).body == body_for(i, SIZE)
            assert store.get_by_id(r.msg_id).body == body_for(i, SIZE)


def test_flipped_body_byte_in_the_flushed_log_costs_only_that_record(tmp_store_dir):
    results = fill(tmp_store_dir)
    end = results[-1].commitlog_offset + results[-1].size
    victim = next(i for i, r in enumerate(results) if r.commitlog_offset > SEGMENT + 300_000)
    damage(tmp_store_dir, results[victim], body_field(results[victim]))
    redispatch_everything(tmp_store_dir)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert not rep.clean and rep.truncated_at is None and not rep.dropped_segments
        assert rep.end_offset == end and rep.zeroed_bytes == 0
        assert rep.verified_from == end   # the flushed range is trusted, not CRC-scanned
        assert_all_but(store, results, {victim})
    code, out, err = run_verify(tmp_store_dir)
    assert code == 1 and out["problems"] == 1 and out["records"] == COUNT - 1
    assert f"offset {results[victim].commitlog_offset}" in err and "CRC32C" in err


def test_flipped_length_field_is_passed_over_by_resynchronising(tmp_store_dir, caplog):
    results = fill(tmp_store_dir)
    end = results[-1].commitlog_offset + results[-1].size
    victim = next(i for i, r in enumerate(results) if r.commitlog_offset > SEGMENT + 200_000)
    damage(tmp_store_dir, results[victim], rec.POS_TOTAL_LENGTH + 1, bit=1)  # +512
    redispatch_everything(tmp_store_dir)   # dispatch meets the damage too: it must skip it

    with caplog.at_level(logging.ERROR), strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.end_offset == end and rep.truncated_at is None and rep.zeroed_bytes == 0
        assert [(d.offset, d.length) for d in rep.corrupt_records] == \
            [(results[victim].commitlog_offset, results[victim].size)]
        assert "trailer" in rep.corrupt_records[0].why or "length" in rep.corrupt_records[0].why
        assert f"offset {results[victim].commitlog_offset}" in rep.summary()
        assert rep.redispatched_records == COUNT - 1
        assert_all_but(store, results, {victim})
        more = store.put_batch([make_message(COUNT + i, topic=TOPIC, size=SIZE)
                                for i in range(10)])
        assert more[0].commitlog_offset == end
    assert any(str(results[victim].commitlog_offset) in m and r.levelno >= logging.ERROR
               for r in caplog.records for m in [r.getMessage()])
    code, out, err = run_verify(tmp_store_dir)
    assert code == 1 and out["problems"] == 1 and out["records"] == COUNT - 1 + 10


def test_two_damaged_records_are_both_listed_and_everything_else_kept(tmp_store_dir):
    results = fill(tmp_store_dir)
    end = results[-1].commitlog_offset + results[-1].size
    a = next(i for i, r in enumerate(results) if r.commitlog_offset > SEGMENT + 100_000)
    b = a + 700
    damage(tmp_store_dir, results[a], rec.POS_PHYSICAL_OFFSET, bit=4)
    damage(tmp_store_dir, results[b], rec.POS_MAGIC, bit=0)
    redispatch_everything(tmp_store_dir)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert rep.end_offset == end and rep.truncated_at is None
        assert [d.offset for d in rep.corrupt_records] == \
            [results[a].commitlog_offset, results[b].commitlog_offset]
        assert_all_but(store, results, {a, b})
    code, out, err = run_verify(tmp_store_dir)
    assert code == 1 and out["problems"] == 2
    for i in (a, b):
        assert f"offset {results[i].commitlog_offset}" in err


def test_verify_goes_past_damage_in_a_cleanly_closed_store(tmp_store_dir):
    with strata.open(tmp_store_dir, config()) as store:
        results = store.put_batch([make_message(i, size=SIZE) for i in range(2000)])
    bad = [100, 900, 1500]
    for i in bad:
        damage(tmp_store_dir, results[i], body_field(results[i]))
    damage(tmp_store_dir, results[1200], rec.POS_TOTAL_LENGTH + 1, bit=2)
    code, out, err = run_verify(tmp_store_dir)
    assert code == 1 and out["problems"] >= 4 and out["records"] == 2000 - 4
    for i in bad + [1200]:
        assert f"offset {results[i].commitlog_offset}" in err


def cut(path: Path, keep: int) -> int:
    """Cut the file to ``keep`` bytes (a copy that lost its tail); returns its old size."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(keep)
    return size


def test_short_last_segment_is_a_torn_tail(tmp_store_dir):
    results = fill(tmp_store_dir, 3000)
    last = max((tmp_store_dir / "commitlog").iterdir())
    inside = [i for i, r in enumerate(results) if r.commitlog_offset >= int(last.name)]
    keep_i = inside[len(inside) // 2]    # the cut falls inside this record
    _path, pos = where(tmp_store_dir, results[keep_i].commitlog_offset)
    old = cut(last, pos + 50)

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert last.stat().st_size == old == file_size(SEGMENT)
        assert rep.end_offset == results[keep_i].commitlog_offset
        assert rep.truncated_at == results[keep_i].commitlog_offset
        assert "lost" in rep.problem
        assert any(last.name in s and "zero-extended" in s for s in rep.restored_segments)
        assert last.name in rep.summary()
        assert [m.body for m in store.scan()] == [body_for(i, SIZE) for i in range(keep_i)]
        assert queue_bodies(store) == [body_for(i, SIZE) for i in range(keep_i)]
        store.put(make_message(99, topic=TOPIC, size=SIZE))
    with strata.open(tmp_store_dir, config()) as store:
        assert store.recovery_report.clean
        assert len(list(store.scan())) == keep_i + 1
    assert run_verify(tmp_store_dir)[0] == 0


def test_short_segment_that_is_not_the_last_keeps_the_later_segments(tmp_store_dir):
    results = fill(tmp_store_dir, 3000)
    first = min((tmp_store_dir / "commitlog").iterdir())
    keep_i = len([r for r in results if r.commitlog_offset < SEGMENT]) // 2
    _path, pos = where(tmp_store_dir, results[keep_i].commitlog_offset)
    cut(first, pos + 10)
    lost = {i for i, r in enumerate(results) if keep_i <= i and r.commitlog_offset < SEGMENT}

    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert first.stat().st_size == file_size(SEGMENT)
        assert not rep.dropped_segments and rep.truncated_at is None
        assert [(g.offset, g.end) for g in rep.closed_gaps] == \
            [(results[keep_i].commitlog_offset, SEGMENT)]
        assert rep.restored_segments and first.name in rep.summary()
        want = [body_for(i, SIZE) for i in range(len(results)) if i not in lost]
        assert [m.body for m in store.scan()] == want
        assert queue_bodies(store) == want
        store.flush()
    code, out, err = run_verify(tmp_store_dir)
    assert out["records"] == len(results) - len(lost)
    assert "commitlog/" not in err   # the log itself is whole again; only queue units that
    # point at the lost records may be listed (they are lost: a get passes over them)


def test_a_read_only_opener_names_a_cut_segment(tmp_store_dir):
    fill(tmp_store_dir, 500)
    last = max((tmp_store_dir / "commitlog").iterdir())
    cut(last, HEADER_AREA + 5000)
    with pytest.raises(strata.errors.CorruptStoreError, match="tail was lost"):
        strata.open(tmp_store_dir, readonly=True)
    assert last.stat().st_size == HEADER_AREA + 5000   # a reader changes nothing


def test_a_new_store_says_it_was_created(tmp_path, caplog):
    d = tmp_path / "fresh"
    with caplog.at_level(logging.INFO, logger="strata.log.recovery"):
        with strata.open(d, config()) as store:
            rep = store.recovery_report
            assert rep.new_store
            assert rep.summary() == f"created a new store at {d}"
    assert f"created a new store at {d}" in caplog.text
    assert "unclean" not in caplog.text
    with strata.open(d, config()) as store:
        assert not store.recovery_report.new_store and store.recovery_report.clean


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("where_in_header", [0, 4, 17, 24])
def test_a_damaged_segment_header_is_rewritten_from_the_name(tmp_store_dir, which,
                                                             where_in_header):
    results = fill(tmp_store_dir, 3000)
    files = sorted((tmp_store_dir / "commitlog").iterdir())
    path = files[0] if which == "first" else files[-1]
    flip_bit(path, where_in_header, bit=2)
    with pytest.raises(strata.errors.CorruptStoreError, match=path.name):
        strata.open(tmp_store_dir, readonly=True)   # a reader changes nothing
    with strata.open(tmp_store_dir, config()) as store:
        rep = store.recovery_report
        assert any(path.name in s and "header" in s for s in rep.restored_segments)
        assert rep.truncated_at is None and not rep.corrupt_records
        assert_all_but(store, results, set())
    with strata.open(tmp_store_dir, readonly=True) as reader:
        assert len(list(reader.scan())) == len(results)
