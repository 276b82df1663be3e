"""``store.get``: every status with its next offset (RocketMQ's table), tag filtering (also with
forced tag-hash collisions), queue choice, consecutive queue offsets, topic administration."""

from __future__ import annotations

import pytest

import strata
import strata.format.consume_queue as cq_format
import strata.index.dispatch_batch as dispatch_batch_mod
import strata.store.queue_source as ms_mod  # get's tag filter (tag_hash) lives here
from strata.errors import InvalidInputError, TopicExistsError
from strata.store.message import GetStatus

from store_helpers import config, drain, open_store, settle


def put_n(store, topic, n, *, queue_id=0, tags=None, keys=None, start=0):
    return store.put_batch([strata.Message(topic, b"m%d" % (start + i), queue_id=queue_id,
                                           tags=tags(start + i) if callable(tags) else tags,
                                           keys=keys(start + i) if keys else ())
                            for i in range(n)])


# --------------------------------------------------------------------------- statuses


def test_found_returns_messages_in_order_and_next_after_the_last(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=2)
        put_n(store, "t", 10)
        settle(store)
        r = store.get("t", 0, 3, max_messages=4)
        assert r.status is GetStatus.FOUND and r.found
        assert [m.body for m in r.messages] == [b"m3", b"m4", b"m5", b"m6"]
        assert [m.queue_offset for m in r.messages] == [3, 4, 5, 6]
        assert all(m.topic == "t" and m.queue_id == 0 for m in r.messages)
        assert (r.next_offset, r.min_offset, r.max_offset) == (7, 0, 10)
        # the tail: fewer than asked, next = max
        r = store.get("t", 0, 8, max_messages=32)
        assert r.status is GetStatus.FOUND
        assert [m.body for m in r.messages] == [b"m8", b"m9"] and r.next_offset == 10


def test_found_stays_within_one_consume_queue_file(tmp_path):
    with open_store(tmp_path / "s", consume_queue_units=4) as store:
        store.create_topic("t", queues=1)
        put_n(store, "t", 10)
        settle(store)
        r = store.get("t", 0, 1, max_messages=32)
        assert r.status is GetStatus.FOUND
        assert [m.queue_offset for m in r.messages] == [1, 2, 3] and r.next_offset == 4
        assert [m.body for m in drain(store, "t", 0, batch=3)] == [b"m%d" % i for i in range(10)]


def test_no_message_in_queue_for_an_existing_empty_queue(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=4)
        put_n(store, "t", 3, queue_id=1)
        settle(store)
        for q in (0, 2, 3):
            r = store.get("t", q, 0)
            assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE
            assert (r.messages, r.next_offset, r.min_offset, r.max_offset) == ([], 0, 0, 0)
            # any offset: the queue is empty, next is 0
            assert store.get("t", q, 5).status is GetStatus.NO_MESSAGE_IN_QUEUE
            assert store.get("t", q, 5).next_offset == 0
        store.create_topic("empty", queues=2)
        assert store.get("empty", 1, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_no_matched_logic_queue_for_unknown_topic_and_queue_id(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=4)
        put_n(store, "t", 3, queue_id=3)
        settle(store)
        for topic, q in (("nope", 0), ("t", 4), ("t", 100)):
            r = store.get(topic, q, 0)
            assert r.status is GetStatus.NO_MATCHED_LOGIC_QUEUE, (topic, q)
            assert (r.messages, r.next_offset) == ([], 0)
        assert store.get("t", 3, 0).status is GetStatus.FOUND
        with pytest.raises(InvalidInputError):
            store.get("../x", 0, 0)
        with pytest.raises(InvalidInputError):
            store.get("t", "0", 0)


def test_offset_overflow_one_and_badly(tmp_path):
    with open_store(tmp_path / "s") as store:
        put_n(store, "t", 5)
        settle(store)
        r = store.get("t", 0, 5)
        assert r.status is GetStatus.OFFSET_OVERFLOW_ONE
        assert (r.messages, r.next_offset, r.max_offset) == ([], 5, 5)
        for off in (6, 7, 1000):
            r = store.get("t", 0, off)
            assert r.status is GetStatus.OFFSET_OVERFLOW_BADLY
            assert (r.messages, r.next_offset, r.max_offset) == ([], 5, 5)


def test_offset_too_small_below_the_minimum(tmp_path):
    with open_store(tmp_path / "s") as store:
        put_n(store, "t", 5)
        settle(store)
        r = store.get("t", 0, -1)
        assert r.status is GetStatus.OFFSET_TOO_SMALL and r.next_offset == 0


def test_offset_too_small_after_retention_next_is_the_new_minimum(tmp_path):
    with open_store(tmp_path / "s") as store:
        body = bytes(1000)
        for i in range(200):      # ~200 KiB: several 64 KiB segments
            store.put(strata.Message("t", body, queue_id=0, keys=[f"k{i}"]))
        settle(store)
        segs = len(store.log.segments.segments)
        assert segs >= 3
        store.retention.disk_usage = lambda: 0.10
        deleted = store.clean_expired(now_ms=store.log.last_store_timestamp + 10**12)
        assert deleted == segs - 1
        mn = store.min_offset("t", 0)
        assert 0 < mn < 200 and store.max_offset("t", 0) == 200
        for off in (0, mn - 1):
            r = store.get("t", 0, off)
            assert r.status is GetStatus.OFFSET_TOO_SMALL
            assert (r.next_offset, r.min_offset, r.max_offset) == (mn, mn, 200)
        r = store.get("t", 0, mn)
        assert r.status is GetStatus.FOUND and r.messages[0].queue_offset == mn
        assert r.messages[0].commitlog_offset >= store.min_commitlog_offset()


def test_offset_found_null_when_the_queue_file_holding_the_offset_is_gone(tmp_path):
    with open_store(tmp_path / "s", consume_queue_units=4) as store:
        store.create_topic("t", queues=1)
        put_n(store, "t", 12)
        settle(store)
        cq = store.queues.get("t", 0)
        assert [s.base_offset for s in cq.segments.segments] == [0, 80, 160]
        # the middle file (units 4..7) vanishes under the store
        middle = cq.segments.segments.pop(1)
        cq.segments._bases.pop(1)
        try:
            for off in (4, 5, 7):
                r = store.get("t", 0, off)
                assert r.status is GetStatus.OFFSET_FOUND_NULL, off
                assert (r.messages, r.next_offset) == ([], 8)
            assert store.get("t", 0, 8).status is GetStatus.FOUND
            assert store.get("t", 0, 3).status is GetStatus.FOUND
        finally:
            cq.segments.segments.insert(1, middle)
            cq.segments._bases.insert(1, middle.base_offset)


def test_a_missing_middle_queue_file_is_rebuilt_on_open(tmp_path):
    cfg = config(consume_queue_units=4)
    with open_store(tmp_path / "s", cfg) as store:
        store.create_topic("t", queues=1)
        put_n(store, "t", 12)
    (tmp_path / "s" / "consumequeue" / "t" / "0" / "00000000000000000080").unlink()
    with strata.open(tmp_path / "s", cfg) as store:
        assert any("missing" in r for r in store.recovery_report.repaired_files)
        got, off = [], 0
        while off < 12:
            r = store.get("t", 0, off, 32)
            got += [m.queue_offset for m in r.messages]
            off = r.next_offset
        assert got == list(range(12))


# --------------------------------------------------------------------------- tags


def test_tag_filter_single_or_list_and_star(tmp_path):
    tags = ["a", "b", "c", None]
    with open_store(tmp_path / "s") as store:
        put_n(store, "t", 40, tags=lambda i: tags[i % 4])
        settle(store)

        def bodies(spec):
            return [m.body for m in drain(store, "t", 0, tags=spec, batch=5)]

        want = {t: [b"m%d" % i for i in range(40) if tags[i % 4] == t] for t in tags}
        everything = [b"m%d" % i for i in range(40)]
        assert bodies("a") == want["a"]
        assert bodies("b") == want["b"]
        assert bodies("a||b") == sorted(want["a"] + want["b"], key=lambda b: int(b[1:]))
        assert bodies(" a || c ") == sorted(want["a"] + want["c"], key=lambda b: int(b[1:]))
        assert bodies(["b", "c"]) == sorted(want["b"] + want["c"], key=lambda b: int(b[1:]))
        assert bodies(("c",)) == want["c"]
        assert bodies("*") == everything
        assert bodies(None) == everything
        assert bodies(["a", "*"]) == everything
        assert bodies("zzz") == []
        r = store.get("t", 0, 0, 3, tags="a||b")
        assert [m.tags for m in r.messages] == ["a", "b", "a"]
        assert r.next_offset == 5      # after the last returned unit (offset 4)
        with pytest.raises(InvalidInputError):
            store.get("t", 0, 0, tags=5)
        with pytest.raises(InvalidInputError):
            store.get("t", 0, 0, tags=["a", 5])


def test_no_matched_message_next_is_after_the_scanned_units(tmp_path):
    with open_store(tmp_path / "s") as store:
        put_n(store, "t", 10, tags="x")
        settle(store)
        r = store.get("t", 0, 2, max_messages=4, tags="y")
        assert r.status is GetStatus.NO_MATCHED_MESSAGE
        assert r.messages == [] and r.next_offset == 10 and r.max_offset == 10
        assert store.get("t", 0, 10, tags="y").status is GetStatus.OFFSET_OVERFLOW_ONE
    # a long filtered run: the scan stops after a bounded number of units, but always moves on
    with open_store(tmp_path / "s2", consume_queue_units=100) as store:
        put_n(store, "t", 250, tags="x")
        settle(store)
        r = store.get("t", 0, 30, max_messages=1, tags="y")
        assert r.status is GetStatus.NO_MATCHED_MESSAGE
        assert r.next_offset == 100    # the end of the consume-queue file that was scanned
        off, seen = 0, 0
        while True:
            r = store.get("t", 0, off, 1, tags="y")
            if r.status is not GetStatus.NO_MATCHED_MESSAGE:
                break
            assert off < r.next_offset <= 250
            off, seen = r.next_offset, seen + 1
        assert r.status is GetStatus.OFFSET_OVERFLOW_ONE and off == 250 and seen == 3


@pytest.fixture
def colliding_tags(monkeypatch):
    """Make "red" and "blue" share a tag hash everywhere the store computes one."""
    real = cq_format.tag_hash

    def forced(tag):
        return real("red") if tag in ("red", "blue") else real(tag)

    for mod in (cq_format, dispatch_batch_mod, ms_mod):
        monkeypatch.setattr(mod, "tag_hash", forced)
    return forced


def test_tag_hash_collisions_never_leak(tmp_path, colliding_tags):
    assert colliding_tags("red") == colliding_tags("blue")
    tags = ["red", "blue", "green"]
    with open_store(tmp_path / "s") as store:
        put_n(store, "t", 30, tags=lambda i: tags[i % 3])
        put_n(store, "t", 5, queue_id=1, tags="blue")
        settle(store)
        cq = store.queues.get("t", 0)
        assert cq.unit(0)[2] == cq.unit(1)[2]       # the collision really is on disk
        for spec in ("red", "blue", ["blue"], "red||green"):
            wanted = {spec} if isinstance(spec, str) and "||" not in spec else (
                set(spec) if isinstance(spec, list) else set(spec.split("||")))
            got = drain(store, "t", 0, tags=spec, batch=4)
            assert [m.body for m in got] == [b"m%d" % i for i in range(30)
                                             if tags[i % 3] in wanted], spec
        r = store.get("t", 1, 0, tags="red")      # only colliding "blue" messages there
        assert r.status is GetStatus.NO_MATCHED_MESSAGE and r.next_offset == 5
        r = store.get("t", 1, 0, tags="blue")
        assert r.status is GetStatus.FOUND and len(r.messages) == 5


# --------------------------------------------------------------------------- queue choice


def test_explicit_queue_id_and_out_of_range_queue_id(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=3)
        rs = store.put_batch([strata.Message("t", b"x", queue_id=q) for q in (2, 0, 2, 1, 2)])
        assert [(r.topic, r.queue_id, r.queue_offset) for r in rs] == [
            ("t", 2, 0), ("t", 0, 0), ("t", 2, 1), ("t", 1, 0), ("t", 2, 2)]
        before = store.max_commitlog_offset()
        with pytest.raises(InvalidInputError, match="queue_id 3"):
            store.put_batch([strata.Message("t", b"ok", queue_id=0),
                             strata.Message("t", b"bad", queue_id=3)])
        assert store.max_commitlog_offset() == before     # nothing of the batch was written
        settle(store)
        assert [store.max_offset("t", q) for q in range(3)] == [1, 1, 3]


def test_shard_key_keeps_one_queue_across_restarts(tmp_path):
    keys = [f"customer-{i}" for i in range(20)]
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=8)
        first = {k: store.put(strata.Message("t", b"1", shard_key=k)).queue_id for k in keys}
        again = {k: store.put(strata.Message("t", b"2", shard_key=k)).queue_id for k in keys}
        assert first == again
        assert len(set(first.values())) > 1      # keys spread over queues
    with open_store(tmp_path / "s") as store:
        after = {k: store.put(strata.Message("t", b"3", shard_key=k)).queue_id for k in keys}
        assert after == first
        settle(store)
        for k, q in first.items():   # one key's messages in order in its queue
            mine = [m.body for m in drain(store, "t", q) if m.body in (b"1", b"2", b"3")]
            assert b"".join(mine).count(b"1") >= 1
        per_queue = {q: [m.body for m in drain(store, "t", q)] for q in set(first.values())}
        for q, bodies in per_queue.items():
            n = sum(1 for v in first.values() if v == q)
            assert bodies == [b"1"] * n + [b"2"] * n + [b"3"] * n


def test_round_robin_spreads_evenly(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.create_topic("t", queues=4)
        rs = store.put_batch([strata.Message("t", b"x") for _ in range(10)])
        rs += [store.put(strata.Message("t", b"y")) for _ in range(6)]
        qids = [r.queue_id for r in rs]
        assert sorted(qids.count(q) for q in range(4)) == [4, 4, 4, 4]
        assert all(qids[i] != qids[i + 1] for i in range(len(qids) - 1))
        store.put(strata.Message("t", b"z", queue_id=0))
        settle(store)
        assert [store.max_offset("t", q) for q in range(4)] == [5, 4, 4, 4]


def test_queue_offsets_are_consecutive_per_queue_across_batches_and_restarts(tmp_path):
    cfg = config()
    expect: dict[int, list[int]] = {}
    for rnd in range(3):
        with open_store(tmp_path / "s", cfg) as store:
            for b in range(5):
                msgs = [strata.Message("t", b"%d-%d-%d" % (rnd, b, i),
                                       queue_id=(i * 3 + b) % 5 if i % 2 else None)
                        for i in range(7)]
                for r in store.put_batch(msgs):
                    expect.setdefault(r.queue_id, []).append(r.queue_offset)
            settle(store)
            for q, offs in expect.items():
                assert offs == list(range(len(offs))), q
                got = drain(store, "t", q)
                assert [m.queue_offset for m in got] == offs
                assert store.max_offset("t", q) == len(offs)
        if rnd == 1:   # an unclean stop in between
            store2 = open_store(tmp_path / "s", cfg)
            store2._abandon()


# --------------------------------------------------------------------------- topics


def test_create_topic_queue_count_and_topics(tmp_path):
    with open_store(tmp_path / "s", default_queues=3) as store:
        assert store.topics() == [] and store.queue_count("x") == 0
        assert store.create_topic("orders", queues=5) is True
        assert store.create_topic("orders", queues=5) is False       # exists as asked
        assert store.create_topic("orders") is False                 # any count will do
        for other in (2, 8):                                          # not silently kept
            with pytest.raises(TopicExistsError, match="exists with 5 queues, not"):
                store.create_topic("orders", queues=other)
        assert store.queue_count("orders") == 5
        assert store.create_topic("b-topic") is True
        assert store.queue_count("b-topic") == 3
        store.put(strata.Message("auto_created", b"x"))               # default queues
        assert store.queue_count("auto_created") == 3
        assert store.topics() == ["auto_created", "b-topic", "orders"]
        for bad in (0, -1, 1025, "4", True):
            with pytest.raises(InvalidInputError):
                store.create_topic("bad", queues=bad)
        for name in ("", "../x", "a" * 200, "sp ace"):
            with pytest.raises(InvalidInputError):
                store.create_topic(name)
        assert store.topics() == ["auto_created", "b-topic", "orders"]
    with open_store(tmp_path / "s", default_queues=3) as store:     # persisted
        assert store.topics() == ["auto_created", "b-topic", "orders"]
        assert [store.queue_count(t) for t in store.topics()] == [3, 3, 5]


@pytest.mark.parametrize("restart", ["none", "clean", "unclean"])
def test_deleted_then_recreated_topic_does_not_see_old_messages(tmp_path, restart):
    cfg = config()
    store = open_store(tmp_path / "s", cfg)
    store.create_topic("t", queues=2)
    store.put_batch([strata.Message("t", b"old%d" % i, queue_id=i % 2, keys=["k"])
                     for i in range(10)])
    store.put(strata.Message("other", b"keep", keys=["k"]))
    settle(store)
    assert store.delete_topic("t") is True
    assert store.delete_topic("t") is False
    assert "t" not in store.topics() and store.queue_count("t") == 0
    assert store.get("t", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.query("t", "k") == []
    assert store.max_offset("t", 0) == 0 and store.min_offset("t", 0) == 0
    if restart == "clean":
        store.close()
        store = open_store(tmp_path / "s", cfg)
    elif restart == "unclean":
        store._abandon()
        store = open_store(tmp_path / "s", cfg)
    assert "t" not in store.topics()
    assert store.get("t", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    store.create_topic("t", queues=3)
    assert store.queue_count("t") == 3
    for q in range(3):
        assert store.get("t", q, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    r = store.put(strata.Message("t", b"new", queue_id=0, keys=["k"]))
    assert r.queue_offset == 0
    settle(store)
    assert [m.body for m in store.query("t", "k")] == [b"new"]
    assert [m.body for m in drain(store, "t", 0)] == [b"new"]

    # a crash after the re-creation: replay must not resurrect the old records either
    store._abandon()
    with open_store(tmp_path / "s", cfg) as store:
        settle(store)
        assert [m.body for m in drain(store, "t", 0)] == [b"new"]
        assert all(store.get("t", q, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
                   for q in (1, 2))
        assert [m.body for m in store.query("t", "k")] == [b"new"]
        assert [m.body for m in store.query("other", "k")] == [b"keep"]
        assert store.put(strata.Message("t", b"next", queue_id=0)).queue_offset == 1


def test_deleted_topic_auto_created_again_by_a_put(tmp_path):
    with open_store(tmp_path / "s", default_queues=2) as store:
        store.put_batch([strata.Message("t", b"old", queue_id=1) for _ in range(3)])
        settle(store)
        store.delete_topic("t")
        r = store.put(strata.Message("t", b"new", queue_id=1))
        assert (r.queue_id, r.queue_offset) == (1, 0)
        settle(store)
        assert store.queue_count("t") == 2
        assert [m.body for m in drain(store, "t", 1)] == [b"new"]


# --------------------------------------------------------------------------- bad arguments


def test_reads_refuse_bad_arguments_with_a_named_error(tmp_path):
    # scan(from_offset="a") and query(begin_ms="a") raised a raw TypeError
    with open_store(tmp_path / "s") as store:
        store.put_batch([strata.Message("t", b"m%d" % i, keys=["k"]) for i in range(3)])
        settle(store)
        for call, name in ((lambda: store.scan(from_offset="a"), "from_offset"),
                           (lambda: store.scan(from_offset=True), "from_offset"),
                           (lambda: store.scan(to_offset=1.5), "to_offset"),
                           (lambda: store.scan(verify_crc="yes"), "verify_crc"),
                           (lambda: store.query("t", "k", begin_ms="a"), "begin_ms"),
                           (lambda: store.query("t", "k", end_ms="a"), "end_ms"),
                           (lambda: store.query("t", "k", max_results=True), "max_results"),
                           (lambda: store.get("t", 0, 0, True), "max_messages")):
            with pytest.raises(InvalidInputError, match=name):
                call()   # refused at the call, before any reading
        assert [m.body for m in store.scan(to_offset=None)] == [b"m0", b"m1", b"m2"]
        assert len(store.query("t", "k", begin_ms=0, end_ms=None)) == 3


def test_scan_to_an_offset_inside_a_record_stops_before_it_without_calling_it_damaged(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.put_batch([strata.Message("t", b"m%04d" % i) for i in range(3000)])
        settle(store)
        offsets = [m.commitlog_offset for m in store.scan()]
        for stop in (offsets[1] + 3, offsets[2500] + 1, offsets[1500], 1):
            damage = []
            got = [m.commitlog_offset for m in
                   store.scan(0, to_offset=stop, on_damage=lambda o, e: damage.append(o))]
            assert got == [o for o in offsets if o < stop]
            assert damage == []
        assert [m.body for m in store.scan(offsets[10], to_offset=offsets[12])] == \
            [b"m0010", b"m0011"]
