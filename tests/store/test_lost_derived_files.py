"""Derived files that went missing or were zeroed (issue 22, items 2 and 4): a consume queue
that is gone, shorter than the last checkpoint recorded, or holds zeroed or impossible units,
and a key-index file that is gone or whose chains are broken, are rebuilt from the commit log
at open and reported as a repair, after a clean close or a crash; queue offsets continue where
the log says (never from 0 again); a large index rebuild runs in the background while query
says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import strata
from strata.testing.faults import zero_range
from strata.format.consume_queue import UNIT_SIZE
from strata.format.segment import HEADER_AREA
from strata.store.message_store import MessageStore

from store_helpers import config as store_config
from support import body_for

TOPICS = ("pay", "orders")


def config(**kw) -> strata.StoreConfig:
    kw.setdefault("flush_interval_ms", 60_000)
    kw.setdefault("flush_thorough_interval_ms", 60_000)
    kw.setdefault("checkpoint_interval_ms", 3_600_000)
    return store_config(**kw)


def put(store, seqs) -> dict[str, list[int]]:
    placed: dict[str, list[int]] = {t: [] for t in TOPICS}
    for seq in seqs:
        topic = TOPICS[seq % 2]
        assert store.put(strata.Message(topic, body_for(seq), keys=(f"k{seq}",))).ok
        placed[topic].append(seq)
    return placed


def merge(a: dict, b: dict) -> dict:
    return {t: a.get(t, []) + b.get(t, []) for t in TOPICS}


def assert_serves(store, acked: dict[str, list[int]]) -> None:
    """Every acknowledged message at its queue offset (get) and by its key (query)."""
    for topic, seqs in acked.items():
        assert store.max_offset(topic, 0) == len(seqs), topic
        got, off = [], store.min_offset(topic, 0)
        assert off == 0
        while off < len(seqs):
            r = store.get(topic, 0, off, 16)
            assert r.messages and not r.corrupt, (topic, off, r)
            assert [m.queue_offset for m in r.messages] == list(range(off, off + len(r.messages)))
            got += [m.body for m in r.messages]
            off = r.next_offset
        assert got == [body_for(s) for s in seqs]
        for seq in seqs:
            assert [m.body for m in store.query(topic, f"k{seq}")] == [body_for(seq)], seq


def make(store_dir: Path, n: int, *, crash: bool = False, **kw) -> dict:
    """``n`` messages in pay and orders (one queue each), then a clean close, or a crash right
    after a checkpoint that covers them."""
    store = strata.open(store_dir, config(**kw))
    for t in TOPICS:
        store.create_topic(t, 1)
    acked = put(store, range(n))
    if crash:
        store._abandon(checkpointed=True)
    else:
        store.close()
    return acked


def queue_files(store_dir: Path, topic: str) -> list[Path]:
    return sorted((store_dir / "consumequeue" / topic / "0").iterdir())


def unit_at(n: int) -> int:
    return HEADER_AREA + n * UNIT_SIZE


def repairs(store, what: str) -> list[str]:
    return [r for r in store.recovery_report.repaired_files if what in r]


def reopen_and_check(store_dir: Path, acked: dict, what: str, **kw) -> None:
    """Open: a repair naming ``what`` is reported, everything is served, new puts continue
    the queues; then a clean reopen needs no repair and serves the same."""
    with strata.open(store_dir, config(**kw)) as store:
        assert repairs(store, what), store.recovery_report.repaired_files
        assert_serves(store, acked)
        n = sum(len(v) for v in acked.values())
        more = put(store, range(1000, 1004))
        assert store.wait_dispatched()
        for t in TOPICS:   # offsets continue: never a reused queue offset
            assert [m.queue_offset for m in store.get(t, 0, len(acked[t]), 8).messages] == \
                [len(acked[t]), len(acked[t]) + 1]
    acked = merge(acked, more)
    with strata.open(store_dir, config(**kw)) as store:
        assert not store.recovery_report.repaired_files, store.recovery_report.repaired_files
        assert_serves(store, acked)
        assert n + 4 == sum(len(v) for v in acked.values())


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_a_deleted_consume_queue_file_is_rebuilt(tmp_store_dir, crash):
    acked = make(tmp_store_dir, 60, crash=crash)
    (f,) = queue_files(tmp_store_dir, "pay")
    f.unlink()
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0")


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_a_deleted_consume_queue_folder_is_rebuilt(tmp_store_dir, crash):
    acked = make(tmp_store_dir, 60, crash=crash)
    shutil.rmtree(tmp_store_dir / "consumequeue")
    reopen_and_check(tmp_store_dir, acked, "consume queue")


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_zeroed_consume_queue_units_are_rebuilt(tmp_store_dir, crash):
    acked = make(tmp_store_dir, 250, crash=crash)
    (f,) = queue_files(tmp_store_dir, "pay")
    zero_range(f, unit_at(0), unit_at(125))          # the whole queue
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0")


def test_zeroing_100_of_the_first_125_units_hides_nothing(tmp_store_dir):
    acked = make(tmp_store_dir, 400)
    (f,) = queue_files(tmp_store_dir, "pay")
    zero_range(f, unit_at(20), unit_at(120))
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0")


def test_a_queue_shorter_than_the_checkpoint_says_is_rebuilt(tmp_store_dir):
    """The last units zeroed: the queue looks whole but short; the checkpoint knew better."""
    acked = make(tmp_store_dir, 100)
    (f,) = queue_files(tmp_store_dir, "pay")
    zero_range(f, unit_at(40), unit_at(50))
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0")


def test_the_first_of_several_queue_files_deleted(tmp_store_dir):
    acked = make(tmp_store_dir, 60, consume_queue_units=8)
    queue_files(tmp_store_dir, "pay")[0].unlink()
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0", consume_queue_units=8)


def test_the_last_of_several_queue_files_deleted(tmp_store_dir):
    acked = make(tmp_store_dir, 60, consume_queue_units=8)
    queue_files(tmp_store_dir, "orders")[-1].unlink()
    reopen_and_check(tmp_store_dir, acked, "consume queue orders/0", consume_queue_units=8)


def test_impossible_units_are_rebuilt(tmp_store_dir):
    """A unit whose size no record can have, or whose offset lies past the log's end."""
    acked = make(tmp_store_dir, 60)
    (f,) = queue_files(tmp_store_dir, "pay")
    with open(f, "r+b") as fh:
        fh.seek(unit_at(5) + 8)
        fh.write((7).to_bytes(4, "little"))               # a 7-byte record
        fh.seek(unit_at(9))
        fh.write((1 << 40).to_bytes(8, "little"))         # far past the log
    reopen_and_check(tmp_store_dir, acked, "consume queue pay/0")


# --------------------------------------------------------------------------- key index


def index_files(store_dir: Path) -> list[Path]:
    return sorted(p for p in (store_dir / "index").iterdir() if p.name[:1].isdigit()
                  and not p.name.endswith(".damaged"))


@pytest.mark.parametrize("which", ["first", "last", "folder"])
@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_deleted_key_index_files_are_rebuilt(tmp_store_dir, which, crash):
    # 8 entries a file at most, so 60 keyed messages take several files
    acked = make(tmp_store_dir, 60, crash=crash, index_slots=8, index_entries=8)
    files = index_files(tmp_store_dir)
    assert len(files) >= 3
    if which == "folder":
        shutil.rmtree(tmp_store_dir / "index")
    else:
        (files[0] if which == "first" else files[-1]).unlink()
    reopen_and_check(tmp_store_dir, acked, "key index", index_slots=8, index_entries=8)


def test_an_untouched_store_reports_no_repair(tmp_store_dir):
    """An untouched store reports no repair (the check finds nothing, and says nothing)."""
    acked = make(tmp_store_dir, 60)
    with strata.open(tmp_store_dir, config()) as store:
        assert not store.recovery_report.repaired_files
        assert store.recovery_report.redispatched_records == 0
        assert_serves(store, acked)


def test_crash_without_close_keeps_queue_offsets(tmp_store_dir):
    """A crash (no checkpoint after the puts) and a deleted queue: offsets come from the log."""
    store = strata.open(tmp_store_dir, config())
    for t in TOPICS:
        store.create_topic(t, 1)
    acked = put(store, range(40))
    store.flush()
    assert store.wait_dispatched()
    store._write_checkpoint(clean_end=-1)
    more = put(store, range(40, 50))
    store.flush()
    assert store.wait_dispatched()
    store._abandon()
    shutil.rmtree(tmp_store_dir / "consumequeue" / "pay")
    reopen_and_check(tmp_store_dir, merge(acked, more), "consume queue pay/0")


def _entries_at(path: Path) -> tuple[int, int]:
    """(byte position of entry 0, entry count) of a key-index file."""
    from strata.format import key_index as fmt
    raw = path.read_bytes()
    header = fmt.KeyIndexHeader.decode(raw[:fmt.HEADER_BYTES])
    return fmt.entries_position(header.slots), fmt.peek_counters(raw)[2]


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_zeroed_entries_of_a_sealed_key_index_file_are_rebuilt(tmp_store_dir, crash):
    """A sealed file is not re-checked entry by entry when it is loaded; a zeroed stretch of
    its entries breaks the chains through it, and the keys there must not vanish."""
    acked = make(tmp_store_dir, 60, crash=crash, index_slots=8, index_entries=16)
    first = index_files(tmp_store_dir)[0]
    at, count = _entries_at(first)
    assert count == 16                      # full: sealed at the flush that followed
    zero_range(first, at + 20 * 5, at + 20 * 9)
    reopen_and_check(tmp_store_dir, acked, "key index", index_slots=8, index_entries=16)


def test_a_link_into_another_slot_is_rebuilt(tmp_store_dir):
    from strata.format import key_index as fmt
    import numpy as np
    acked = make(tmp_store_dir, 60, index_slots=8, index_entries=16)
    first = index_files(tmp_store_dir)[0]
    at, count = _entries_at(first)
    ents = np.frombuffer(first.read_bytes(), fmt.ENTRY_DTYPE, count, at)
    slot = ents["hash"].astype(np.int64) % 8
    # an entry with a link whose target is of another slot: a flipped bit in its link
    n = next(i for i in range(2, count) if ents["prev"][i] > 0)
    other = next(j for j in range(1, n) if slot[j] != slot[n])
    with open(first, "r+b") as f:
        f.seek(at + 20 * n + 16)
        f.write(int(other).to_bytes(4, "little"))
    reopen_and_check(tmp_store_dir, acked, "key index", index_slots=8, index_entries=16)


# --------------------------------------------------------------------------- background rebuild


def test_a_large_index_rebuild_runs_in_the_background(tmp_store_dir, monkeypatch):
    """Past BACKGROUND_REBUILD_BYTES of log to re-dispatch, the open does not wait for the
    key index: query says it is rebuilding (never a partial answer), get works at once, puts
    made meanwhile are indexed too, and a close in the middle loses nothing."""
    import threading

    from strata.errors import IndexRebuildingError
    from strata.index import key_index_rebuild as kir

    monkeypatch.setattr(kir, "BACKGROUND_REBUILD_BYTES", 0)
    acked = make(tmp_store_dir, 300, index_slots=8, index_entries=64)
    shutil.rmtree(tmp_store_dir / "index")
    # hold the rebuild's thread at its first batch until the test has looked
    release = threading.Event()
    inner = kir.KeyIndexRebuild._run

    def held(self):
        release.wait(30)
        inner(self)

    monkeypatch.setattr(kir.KeyIndexRebuild, "_run", held)
    cfg = dict(index_slots=8, index_entries=64)
    with strata.open(tmp_store_dir, config(**cfg)) as store:
        assert [r for r in store.recovery_report.repaired_files if "background" in r]
        with pytest.raises(IndexRebuildingError, match="being rebuilt"):
            store.query("pay", "k0")
        with strata.open(tmp_store_dir, readonly=True) as reader:   # another process's view
            with pytest.raises(IndexRebuildingError, match="being rebuilt"):
                reader.query("pay", "k0")
        for t in TOPICS:   # get is served at once
            assert store.max_offset(t, 0) == len(acked[t])
        more = put(store, range(1000, 1010))
        assert store.wait_dispatched()
        release.set()
        assert store.wait_index_rebuilt(30)
        acked = merge(acked, more)
        assert_serves(store, acked)
        with strata.open(tmp_store_dir, readonly=True) as reader:
            assert [m.body for m in reader.query("pay", "k0")] == [body_for(0)]
    # a close while the rebuild runs: the next open replays what the index lacked
    shutil.rmtree(tmp_store_dir / "index")
    monkeypatch.setattr(kir.KeyIndexRebuild, "_run", lambda self: self._stop.wait(30))
    with strata.open(tmp_store_dir, config(**cfg)) as store:
        with pytest.raises(IndexRebuildingError):
            store.query("pay", "k0")
    monkeypatch.setattr(kir.KeyIndexRebuild, "_run", inner)
    monkeypatch.setattr(kir, "BACKGROUND_REBUILD_BYTES", 1 << 40)
    with strata.open(tmp_store_dir, readonly=True) as reader:   # the writer stopped first
        with pytest.raises(IndexRebuildingError):
            reader.query("pay", "k0")
    with strata.open(tmp_store_dir, config(**cfg)) as store:
        assert_serves(store, acked)
    with strata.open(tmp_store_dir, readonly=True) as reader:
        assert [m.body for m in reader.query("pay", "k0")] == [body_for(0)]


def test_offsets_continue_where_the_checkpoint_left_them_when_the_log_lost_the_records(
        tmp_store_dir):
    """pay's records went with the oldest log segment (retention) and its queue folder is
    deleted: nothing is left to rebuild, but pay's next message still gets the offset after
    the last one handed out, never 0 again."""
    with strata.open(tmp_store_dir, config()) as store:
        for t in TOPICS:
            store.create_topic(t, 1)
        for seq in range(20):
            assert store.put(strata.Message("pay", body_for(seq))).ok
        for seq in range(200):   # roll a few 64 KiB segments
            assert store.put(strata.Message("orders", bytes(1000))).ok
        assert store.wait_dispatched()
        last_pay = store.get("pay", 0, 19, 1).messages[0].commitlog_offset
        assert store.clean_expired(force=True) >= 1
        assert store.min_commitlog_offset() > last_pay
    shutil.rmtree(tmp_store_dir / "consumequeue" / "pay")
    with strata.open(tmp_store_dir, config()) as store:
        assert repairs(store, "consume queue pay/0"), store.recovery_report.repaired_files
        assert any("continue at offset 20" in r for r in store.recovery_report.repaired_files)
        r = store.put(strata.Message("pay", b"after"))
        assert r.ok and r.queue_offset == 20
        assert store.wait_dispatched()
        got = store.get("pay", 0, 20, 4)
        assert [m.body for m in got.messages] == [b"after"]
