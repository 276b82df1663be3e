"""Committed offsets (Kafka consumer groups) in the broker's group journal: replay without a
clean close, compaction, torn tails, older journal versions, and the off-loop writer."""

import asyncio
import struct
import threading

import pytest
from crc32c import crc32c

from strata.broker import journal as jr
from strata.broker.group_state import JOURNAL_NAME, Committed, ConsumerGroups
from strata.broker.offset_commits import CommitWriter

pytestmark = pytest.mark.broker


def test_commits_replay_without_close_last_one_wins(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.journal.append(g.commit("G", [("t", 0, Committed(5, 3, "m0", 111)),
                                    ("t", 1, Committed(7, -1, None, 112))]))
    g.journal.append(g.commit("G", [("t", 0, Committed(9, 4, "", 113))]))
    g.journal.append(g.commit("H", [("u", 2, Committed(1))]))
    g2 = ConsumerGroups(tmp_path)        # no close: what a SIGKILL leaves behind
    assert g2.committed_offsets("G") == {("t", 0): Committed(9, 4, "", 113),
                                         ("t", 1): Committed(7, -1, None, 112)}
    assert g2.committed_offsets("H") == {("u", 2): Committed(1)}
    assert g2.committed_offsets("nobody") == {}
    assert sorted(g2.committed_groups()) == ["G", "H"]


def test_compaction_keeps_commits_beside_queue_state(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.pop("G", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000)
    g.journal.append(g.commit("G", [("t", 0, Committed(42, 2, "meta \u00e9", 5))]))
    g.close()                            # rewrites the journal as a snapshot
    records, _ = jr.read_records((tmp_path / JOURNAL_NAME).read_bytes())
    kinds = [r.kind for r in records]
    assert kinds.count(jr.Kind.COMMIT) == 1 and jr.Kind.STATE in kinds
    g2 = ConsumerGroups(tmp_path)
    assert g2.committed_offsets("G") == {("t", 0): Committed(42, 2, "meta \u00e9", 5)}
    assert g2.queue("G", "t", 0).pop_offset == 1


def test_null_and_empty_metadata_stay_distinct():
    a = jr.decode_payload(jr.encode_commit("g", "t", 1, 3, -1, None, 0)[8:])
    b = jr.decode_payload(jr.encode_commit("g", "t", 1, 3, -1, "", 0)[8:])
    assert a.metadata is None and b.metadata == ""
    assert (a.kind, a.group, a.topic, a.queue_id, a.offset) == (jr.Kind.COMMIT, "g", "t", 1, 3)


def test_a_torn_commit_is_cut_and_earlier_ones_kept(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.journal.append(g.commit("G", [("t", 0, Committed(1))]))
    g.journal.append(g.commit("G", [("t", 0, Committed(2))]))
    path = tmp_path / JOURNAL_NAME
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)
    assert ConsumerGroups(tmp_path).committed_offsets("G") == {("t", 0): Committed(1)}


def test_a_bad_metadata_length_is_a_torn_record(tmp_path):
    good = jr.encode_commit("g", "t", 0, 1, -1, "abc", 0)
    payload = bytearray(good[8:])
    struct.pack_into("<i", payload, len(payload) - 3 - 4, 1000)     # longer than the record
    bad = struct.pack("<II", len(payload), crc32c(bytes(payload))) + bytes(payload)
    records, end = jr.read_records(jr.encode_header() + good + bad)
    assert [r.offset for r in records] == [1] and end == 16 + len(good)


@pytest.mark.parametrize("version", [jr.RENEW_VERSION, jr.COMMIT_VERSION, jr.MEMBERS_VERSION])
def test_older_journals_are_read_and_rewritten_as_version_5(tmp_path, version):
    path = tmp_path / JOURNAL_NAME
    older = jr.encode_pop("G", "t", 0, 4, 1000, [(3, 1, 9), (2, 0, 0)])  # 2: held back (FIFO)
    if version >= jr.COMMIT_VERSION:
        older += jr.encode_commit("K", "t", 1, 17, -1, None, 5)
    path.write_bytes(jr.encode_header(version=version) + older)
    g = ConsumerGroups(tmp_path)
    q = g.queue("G", "t", 0)
    assert q.pop_offset == 4
    assert q.in_flight[2].held and not q.in_flight[3].held
    assert q.due(now_ms=10**6, limit=10) == [(3, 1)]            # the held one never by time
    assert g.committed_offsets("K") == ({("t", 1): Committed(17, -1, None, 5)}
                                        if version >= jr.COMMIT_VERSION else {})
    assert g.memberships == {}
    assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == jr.GROUPS_VERSION == 5
    assert ConsumerGroups(tmp_path).queue("G", "t", 0).in_flight[2].held     # rewritten


def test_memberships_replay_last_one_wins_empty_deletes_and_survive_compaction(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.journal.append(jr.encode_members("A", b"image-1") + jr.encode_members("B", b"b")
                     + jr.encode_members("A", b"image-2") + jr.encode_members("B", b""))
    g2 = ConsumerGroups(tmp_path)        # no close; the open compacts
    assert g2.memberships == {"A": b"image-2"}
    records, _ = jr.read_records((tmp_path / JOURNAL_NAME).read_bytes())
    assert [(r.group, r.image) for r in records if r.kind is jr.Kind.MEMBERS] == \
        [("A", b"image-2")]
    g2.apply_membership("C", b"\x00" * 3)
    g2.close()
    assert ConsumerGroups(tmp_path).memberships == {"A": b"image-2", "C": b"\x00" * 3}


def test_a_members_record_with_a_bad_image_length_is_a_torn_record():
    good = jr.encode_members("g", b"abc")
    payload = bytearray(good[8:])
    struct.pack_into("<I", payload, 1 + 2 + 1, 99)          # longer than the record
    bad = struct.pack("<II", len(payload), crc32c(bytes(payload))) + bytes(payload)
    records, end = jr.read_records(jr.encode_header() + good + bad)
    assert [r.image for r in records] == [b"abc"] and end == 16 + len(good)


def test_a_refused_commit_leaves_the_offsets_as_they_were(tmp_path):
    """OffsetFetch reads the state: a commit is there only once its write succeeded."""
    g = ConsumerGroups(tmp_path)
    seen_during_write = []
    original = g.journal.append
    fail = {"on": False}

    def append(data):
        seen_during_write.append(g.committed_offsets("G"))
        if fail["on"]:
            raise OSError(28, "No space left on device")
        original(data)
    g.journal.append = append

    async def main():
        w = CommitWriter(g, sync=False)
        await w.commit("G", [("t", 0, Committed(3))])
        fail["on"] = True
        with pytest.raises(OSError):
            await w.commit("G", [("t", 0, Committed(8)), ("t", 1, Committed(2))])
        with pytest.raises(OSError):
            await w.store_membership("G", b"img")
        fail["on"] = False
        await w.commit("G", [("t", 1, Committed(5))])
        await w.close()
        return w
    w = asyncio.run(main())
    assert seen_during_write[0] == {} and seen_during_write[1] == {("t", 0): Committed(3)}
    assert w.failed == 2 and g.writing == 0
    assert g.committed_offsets("G") == {("t", 0): Committed(3), ("t", 1): Committed(5)}
    assert g.memberships == {}
    assert ConsumerGroups(tmp_path).committed_offsets("G") == g.committed_offsets("G")


def test_writer_appends_in_order_off_the_loop_and_groups_concurrent_commits(tmp_path):
    g = ConsumerGroups(tmp_path)
    loop_thread = threading.get_ident()
    threads = []
    original = g.journal.append

    def append(data):
        threads.append(threading.get_ident())
        original(data)
    g.journal.append = append

    async def main():
        w = CommitWriter(g, sync=True)
        await asyncio.gather(*(w.commit("G", [("t", 0, Committed(i))]) for i in range(50)))
        await w.close()
        return w
    w = asyncio.run(main())
    assert threads and loop_thread not in threads
    assert w.commits == 50 and 1 <= w.writes < 50       # later ones went together
    assert ConsumerGroups(tmp_path).committed_offsets("G") == {("t", 0): Committed(49)}


def test_writer_reports_a_failed_write(tmp_path):
    g = ConsumerGroups(tmp_path)

    def broken(data):
        raise OSError(28, "No space left on device")
    g.journal.append = broken

    async def main():
        w = CommitWriter(g, sync=False)
        with pytest.raises(OSError, match="No space"):
            await w.commit("G", [("t", 0, Committed(3))])
        await w.close()
    asyncio.run(main())


def test_committed_lag_metric(tmp_path):
    from strata.broker.metrics import GroupCollector
    from strata.store.message import Message
    from strata.store.message_store import MessageStore

    with MessageStore(tmp_path / "s") as store:
        store.create_topic("t", 2)
        store.put_batch([Message("t", b"x", queue_id=i % 2) for i in range(10)])
        store.wait_dispatched()
        g = ConsumerGroups(tmp_path / "b")
        g.journal.append(g.commit("G", [("t", 0, Committed(3))]))   # queue 1 never committed
        fams = {f.name: f for f in GroupCollector(store, g).collect()}
        samples = [(s.labels, s.value) for s in fams["strata_group_committed_lag"].samples]
        assert samples == [({"topic": "t", "group": "G"}, (5 - 3) + 5)]
        g.close()


def test_writer_under_sync_flush_answers_after_the_fsync(tmp_path):
    g = ConsumerGroups(tmp_path)
    events = []
    append, sync = g.journal.append, g.journal.sync
    g.journal.append = lambda data: (events.append("write"), append(data))
    g.journal.sync = lambda: (events.append("fsync"), sync())

    async def main():
        w = CommitWriter(g, sync=True)
        await w.commit("G", [("t", 0, Committed(1))])
        events.append("answered")
        w.sync = False                       # --flush async: written, not fsynced
        await w.commit("G", [("t", 0, Committed(2))])
        events.append("answered")
        await w.close()
    asyncio.run(main())
    assert events == ["write", "fsync", "answered", "write", "answered"]
