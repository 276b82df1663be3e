"""A read-only opener in another process, while a writer (flush="sync") runs: it sees queues,
key index and messages up to what the writer has confirmed — nothing beyond the flushed offset,
never a torn record — and it sees topics and queues the writer creates after it opened."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

import strata

from store_helpers import config
from support import body_source, shared_code

BODY_SRC = body_source(20, 131, 900, 16)
body_of = shared_code(BODY_SRC)["body_of"]

# The reader: opens the store read-only once, then answers "observe" requests on stdin with a
# snapshot of everything it can see (JSON on stdout), checking every record it reads itself.
READER_SRC = BODY_SRC + r'''
import json, sys
import strata
from strata.store.message import GetStatus

ro = strata.open(sys.argv[1], readonly=True)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    torn = []
    snap = {"topics": {t: ro.queue_count(t) for t in ro.topics()}, "queues": {}, "keys": {},
            "at": {}, "torn": torn}
    for t, n in snap["topics"].items():
        for q in range(n):
            mn, mx = ro.min_offset(t, q), ro.max_offset(t, q)
            seen, off = [], mn
            while off < mx:
                r = ro.get(t, q, off, 64)
                if r.status is not GetStatus.FOUND:
                    torn.append(f"{t}/{q}@{off}: {r.status.name} (max {mx})")
                    break
                for m in r.messages:
                    seq = int(m.properties["seq"])
                    if m.body != body_of(seq) or m.topic != t or m.queue_id != q:
                        torn.append(f"{t}/{q}@{m.queue_offset}: bad record for seq {seq}")
                    seen.append([m.queue_offset, m.commitlog_offset, m.size, seq])
                off = r.next_offset
            snap["queues"][f"{t}/{q}"] = [mn, mx, seen]
            first = ro.get(t, q, 0)
            snap.setdefault("get0", {})[f"{t}/{q}"] = [first.status.name, first.next_offset]
    for t, k in req.get("keys", []):
        snap["keys"][f"{t}#{k}"] = [m.commitlog_offset
                                    for m in ro.query(t, k, max_results=100000)]
    for off, msg_id in req.get("at", []):
        m = ro.read_at(off)
        by_id = ro.get_by_id(msg_id)
        snap["at"][str(off)] = [int(m.properties["seq"]) if m else None,
                                int(by_id.properties["seq"]) if by_id else None]
    scanned = []
    for m in ro.scan(verify_crc=True):
        seq = int(m.properties["seq"])
        if m.body != body_of(seq):
            torn.append(f"scan: bad record at {m.commitlog_offset}")
        scanned.append([m.commitlog_offset, m.size, seq])
    snap["scan"] = scanned
    print(json.dumps(snap), flush=True)
'''


class Reader:
    def __init__(self, tmp_path, store_dir):
        script = tmp_path / "reader.py"
        script.write_text(READER_SRC)
        self.proc = subprocess.Popen([sys.executable, str(script), str(store_dir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line and json.loads(line) == {"ready": True}, self.proc.stderr.read()

    def observe(self, keys=(), at=()) -> dict:
        self.proc.stdin.write(json.dumps({"keys": list(keys), "at": list(at)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"reader died: {self.proc.stderr.read()}"
        snap = json.loads(line)
        assert snap["torn"] == [], snap["torn"]
        return snap

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert self.proc.returncode == 0, err


class Writer:
    """The writer side (this process): puts numbered messages and remembers them."""

    def __init__(self, store):
        self.store = store
        self.seq = 0
        self.acked = {}            # seq -> PutResult
        self.lock = threading.Lock()

    def put(self, topic, n, *, queue_id=None):
        with self.lock:
            seqs = list(range(self.seq, self.seq + n))
            self.seq += n
        msgs = [strata.Message(topic, body_of(s), keys=[f"s{s}", f"g{s % 3}"],
                               properties={"seq": str(s)}, queue_id=queue_id) for s in seqs]
        rs = self.store.put_batch(msgs)
        for s, r in zip(seqs, rs):
            assert r.ok
            self.acked[s] = r
        return rs

    def expected_queues(self) -> dict:
        out = {}
        for t in self.store.topics():
            for q in range(self.store.queue_count(t)):
                out[f"{t}/{q}"] = []
        for s, r in sorted(self.acked.items(), key=lambda kv: kv[1].commitlog_offset):
            out[f"{r.topic}/{r.queue_id}"].append([r.queue_offset, r.commitlog_offset, r.size, s])
        return out


def observe_until(reader, want, *, keys=(), at=(), tries=50):
    """Observe until ``want(snapshot)`` holds (the writer's last step is visible)."""
    for _ in range(tries):
        snap = reader.observe(keys, at)
        if want(snap):
            return snap
        time.sleep(0.05)
    return snap


@pytest.fixture
def writer(tmp_path):
    store = strata.open(tmp_path / "s", config(flush="sync", sync_flush_timeout_ms=60_000))
    w = Writer(store)
    yield w
    if not store.closed:
        store.close()


def queues_of(snap):
    return {k: v[2] for k, v in snap["queues"].items()}


def test_reader_sees_confirmed_messages_queues_keys_and_new_topics(tmp_path, writer):
    store = writer.store
    store.create_topic("a", queues=2)
    writer.put("a", 30)
    assert store.wait_dispatched()
    reader = Reader(tmp_path, tmp_path / "s")
    try:
        keys = [("a", "s5"), ("a", "g1"), ("b", "g1"), ("a", "nope")]
        snap = observe_until(reader, lambda s: queues_of(s) == writer.expected_queues(),
                             keys=keys)
        assert snap["topics"] == {"a": 2}
        assert queues_of(snap) == writer.expected_queues()
        assert snap["keys"]["a#s5"] == [writer.acked[5].commitlog_offset]
        assert snap["keys"]["a#g1"] == sorted((r.commitlog_offset for s, r in writer.acked.items()
                                               if s % 3 == 1), reverse=True)
        assert snap["keys"]["b#g1"] == [] and snap["keys"]["a#nope"] == []
        # a topic created after the reader opened, with more queues, and a queue first used now
        store.create_topic("b", queues=5)
        writer.put("b", 12)
        writer.put("b", 3, queue_id=4)
        writer.put("a", 10)
        assert store.wait_dispatched()
        snap = observe_until(reader, lambda s: queues_of(s) == writer.expected_queues(),
                             keys=keys)
        assert snap["topics"] == {"a": 2, "b": 5}
        assert queues_of(snap) == writer.expected_queues()
        assert snap["keys"]["b#g1"] == sorted((r.commitlog_offset for s, r in writer.acked.items()
                                               if s % 3 == 1 and r.topic == "b"), reverse=True)
        assert [x[2] for x in snap["scan"]] == [s for s, _ in sorted(
            writer.acked.items(), key=lambda kv: kv[1].commitlog_offset)]
        # an auto-created topic and a deleted one
        writer.put("auto", 4)
        assert store.delete_topic("a")
        assert store.wait_dispatched()
        for s in [s for s, r in writer.acked.items() if r.topic == "a"]:
            del writer.acked[s]
        snap = observe_until(reader, lambda s: set(s["topics"]) == {"b", "auto"} and
                             queues_of(s) == writer.expected_queues())
        assert snap["topics"] == {"auto": 8, "b": 5}
        assert queues_of(snap) == writer.expected_queues()
    finally:
        reader.close()


def test_nothing_beyond_the_flushed_offset_is_visible(tmp_path, writer):
    store = writer.store
    store.create_topic("a", queues=1)
    writer.put("a", 5)
    assert store.wait_dispatched()
    gate = threading.Event()
    reader = Reader(tmp_path, tmp_path / "s")
    try:
        gc = store._group_commit
        real_flush = gc.flush_fn

        def gated(least_pages):
            gate.wait()
            return real_flush(least_pages)

        gc.flush_fn = gated
        end = store.max_commitlog_offset()
        pending = []
        t = threading.Thread(target=lambda: pending.append(writer.put("a", 4)))
        t.start()
        deadline = time.monotonic() + 30
        while store.max_commitlog_offset() == end and time.monotonic() < deadline:
            time.sleep(0.005)
        hidden_end = store.max_commitlog_offset()
        assert hidden_end > end and t.is_alive()       # appended, not yet flushed
        assert store.flushed_offset() <= end or store.confirmed_offset() <= end
        hidden_ids = [(end, f"{store._msg_id_prefix}{end:016X}")]
        before = writer.expected_queues()
        keys = [("a", "s5"), ("a", "s8"), ("a", "g2")]
        for _ in range(3):
            snap = reader.observe(keys, hidden_ids)
            assert queues_of(snap) == before
            assert snap["queues"]["a/0"][:2] == [0, 5]
            assert max(o + n for o, n, _s in snap["scan"]) == end
            assert snap["keys"]["a#s5"] == [] and snap["keys"]["a#s8"] == []
            assert snap["keys"]["a#g2"] == [writer.acked[2].commitlog_offset]
            assert snap["at"][str(end)] == [None, None]
            time.sleep(0.05)
        # the flush happens: the put returns and the records become visible
        gate.set()
        t.join(timeout=60)
        assert not t.is_alive() and len(pending) == 1
        gc.flush_fn = real_flush
        assert store.wait_dispatched()
        snap = observe_until(reader, lambda s: queues_of(s) == writer.expected_queues(),
                             keys=keys, at=hidden_ids)
        assert queues_of(snap) == writer.expected_queues()
        assert snap["queues"]["a/0"][:2] == [0, 9]
        assert snap["keys"]["a#s5"] == [writer.acked[5].commitlog_offset] == [end]
        assert snap["keys"]["a#s8"] == [writer.acked[8].commitlog_offset]
        assert snap["at"][str(end)] == [5, 5]
        assert max(o + n for o, n, _s in snap["scan"]) == hidden_end
    finally:
        gate.set()          # never leave the writer's group commit blocked
        reader.close()


def test_concurrent_writes_never_show_torn_or_unconfirmed_records(tmp_path, writer):
    store = writer.store
    store.create_topic("a", queues=3)
    store.create_topic("b", queues=2)
    writer.put("a", 10)
    reader = Reader(tmp_path, tmp_path / "s")
    stop = threading.Event()
    errors = []

    def produce():
        try:
            i = 0
            while not stop.is_set():
                writer.put("a" if i % 3 else "b", 1 + (i * 7) % 40)
                if i == 20:
                    store.create_topic("c", queues=4)
                if i > 20:
                    writer.put("c", 2)
                i += 1
        except BaseException as exc:       # reported below
            errors.append(exc)

    t = threading.Thread(target=produce)
    t.start()
    snaps = []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline or len(snaps) < 5:
            snap = reader.observe()
            flushed = store.flushed_offset()      # taken after the reader looked
            snaps.append(snap)
            # nothing beyond what was flushed when the reader looked
            assert all(o + n <= flushed for o, n, _s in snap["scan"])
            for key, (mn, mx, seen) in snap["queues"].items():
                # (the queue may grow while the reader walks it: it read at least to mx)
                assert mn == 0 and [x[0] for x in seen] == list(range(len(seen))), key
                assert len(seen) >= mx, key
                assert all(o + n <= flushed for _q, o, n, _s in seen)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert store.wait_dispatched()
    final = observe_until(reader, lambda s: queues_of(s) == writer.expected_queues())
    reader.close()
    want = writer.expected_queues()
    assert queues_of(final) == want
    assert final["topics"] == {"a": 3, "b": 2, "c": 4}
    # every earlier view was a prefix of the final one: no record changed or vanished
    for snap in snaps:
        for key, (_mn, _mx, seen) in snap["queues"].items():
            assert seen == want[key][:len(seen)], key
        assert snap["scan"] == final["scan"][:len(snap["scan"])]
    assert len({len(s["scan"]) for s in snaps}) > 1         # the reader did see progress


def test_reader_follows_the_writers_retention(tmp_path, writer):
    store = writer.store
    store.create_topic("a", queues=2)
    for _ in range(40):
        writer.put("a", 5)          # ~90 KiB per 40 puts of ~470 B: a few 64 KiB segments
    while len(store.log.segments.segments) < 4:
        writer.put("a", 20)
    assert store.wait_dispatched()
    reader = Reader(tmp_path, tmp_path / "s")
    try:
        snap = reader.observe()
        assert all(v[0] == 0 for v in snap["queues"].values())
        store.retention.disk_usage = lambda: 0.10
        assert store.clean_expired(now_ms=2**50) >= 3
        low = store.min_commitlog_offset()
        for s in [s for s, r in writer.acked.items() if r.commitlog_offset < low]:
            del writer.acked[s]
        mins = {f"a/{q}": store.min_offset("a", q) for q in range(2)}
        assert all(m > 0 for m in mins.values())

        want = writer.expected_queues()

        def check(snap):
            assert queues_of(snap) == want
            for key, mn in mins.items():
                assert snap["queues"][key][0] == mn
                assert snap["get0"][key] == ["OFFSET_TOO_SMALL", mn]
            assert min(o for o, _n, _s in snap["scan"]) == low

        check(observe_until(reader, lambda s: queues_of(s) == writer.expected_queues()))
    finally:
        reader.close()
    store.close()
    reader = Reader(tmp_path, tmp_path / "s")     # opened after the writer has gone
    try:
        check(reader.observe())
    finally:
        reader.close()


@pytest.fixture
def units_in_flight(tmp_path):
    """A writer whose queue t/0 holds 16 messages, with units 10 and 11 zeroed as if the
    writer's copy had landed out of order (12..15 there, 10 and 11 not yet). Yields (store
    path, a function that completes the copy)."""
    path = tmp_path / "s"
    writer = strata.open(path, config(consume_queue_units=16))
    try:
        writer.create_topic("t", queues=1)
        writer.put_batch([strata.Message("t", b"m%d" % i) for i in range(16)])
        assert writer.wait_dispatched()
        seg = writer.queues.get("t", 0).segments.last()
        at = 4096 + 10 * 20                        # units 10 and 11 of the file
        saved = bytes(seg.mm[at:at + 40])
        seg.mm[at:at + 40] = bytes(40)

        def complete() -> None:
            seg.mm[at:at + 40] = saved

        yield path, complete
    finally:
        writer.close()


def test_a_reader_waits_at_units_the_writer_is_still_copying(units_in_flight):
    """A copy of units can land out of order (the last ones first): a read-only get stops
    before the first unit that is not complete yet and reads it next time, instead of
    answering NO_MATCHED_MESSAGE and moving past it."""
    path, complete = units_in_flight
    with strata.open(path, readonly=True) as reader:
        got = reader.get("t", 0, 8, 8)
        assert [m.body for m in got.messages] == [b"m8", b"m9"] and got.next_offset == 10
        waiting = reader.get("t", 0, 10, 8)
        assert waiting.messages == [] and waiting.next_offset == 10
        complete()
        done = reader.get("t", 0, 10, 8)
        assert [m.body for m in done.messages] == [b"m%d" % i for i in range(10, 16)]


def test_a_readers_queue_end_stops_before_units_still_being_copied(units_in_flight):
    """max_offset (what a consumer or a Spark read plans up to) never counts a unit past one
    the writer has not copied yet, even where a binary search over the file would."""
    path, complete = units_in_flight
    with strata.open(path, readonly=True) as reader:
        assert reader.max_offset("t", 0) == 10
        complete()
        assert reader.max_offset("t", 0) == 16


UNIT_10 = 4096 + 10 * 20      # unit 10 of a queue's first file: commit-log offset (8 bytes) first


def tagged_queue(path):
    """A writer whose queue t/0 holds m0..m15, all tagged "x"."""
    writer = strata.open(path, config(consume_queue_units=16))
    writer.create_topic("t", queues=1)
    writer.put_batch([strata.Message("t", b"m%d" % i, tags="x") for i in range(16)])
    assert writer.wait_dispatched()
    return writer


@pytest.mark.parametrize("tags", [None, "x"])
def test_a_reader_waits_at_a_unit_whose_offset_is_not_copied_yet(tmp_path, tags):
    """The stores of one memcpy land in any order: unit 10 can show its size while its
    commit-log offset is still zero. That unit leads to m0's record; a read-only get must not
    answer m0 as the message at offset 10, but stop before it and read it once complete."""
    writer = tagged_queue(tmp_path / "s")
    try:
        seg = writer.queues.get("t", 0).segments.last()
        saved = bytes(seg.mm[UNIT_10:UNIT_10 + 8])
        seg.mm[UNIT_10:UNIT_10 + 8] = bytes(8)
        with strata.open(tmp_path / "s", readonly=True) as reader:
            assert reader.max_offset("t", 0) == 16            # its size is there
            got = reader.get("t", 0, 8, 8, tags=tags)
            assert [m.body for m in got.messages] == [b"m8", b"m9"] and got.next_offset == 10
            seg.mm[UNIT_10:UNIT_10 + 8] = saved                # the copy completes
            done = reader.get("t", 0, 10, 8, tags=tags)
            assert [m.body for m in done.messages] == [b"m%d" % i for i in range(10, 16)]
            assert [m.queue_offset for m in done.messages] == list(range(10, 16))
    finally:
        writer.close()


def test_a_unit_leading_to_another_record_with_no_writer_is_reported(tmp_path):
    """With no writer, a unit that does not lead to its own record is damage: a read-only get
    names the queue and offset instead of answering another message in its place."""
    writer = tagged_queue(tmp_path / "s")
    seg_path = writer.queues.get("t", 0).segments.last().path
    writer.close()
    with open(seg_path, "r+b") as f:
        f.seek(UNIT_10)
        f.write(bytes(8))                                      # now leads to m0's record
    with strata.open(tmp_path / "s", readonly=True) as reader:
        got = reader.get("t", 0, 0, 10)
        assert [m.body for m in got.messages] == [b"m%d" % i for i in range(10)]
        with pytest.raises(strata.errors.CorruptRecordError, match=r"t/0: .* offset 10 "):
            reader.get("t", 0, 8, 8)


def test_a_reader_opened_with_no_writer_follows_one_that_starts_later(tmp_path):
    """A reader that found no writer used to stay at the log end it had found: the units of
    later messages were there, their records past its end, and get skipped them. It now
    notices the new writer and reads them."""
    path = tmp_path / "s"
    with strata.open(path, config()) as writer:
        writer.create_topic("t", queues=1)
        writer.put_batch([strata.Message("t", b"a%d" % i) for i in range(5)])
    with strata.open(path, readonly=True) as reader:
        assert [m.body for m in reader.get("t", 0, 0, 10).messages] == \
            [b"a%d" % i for i in range(5)]
        with strata.open(path, config()) as writer:
            writer.put_batch([strata.Message("t", b"b%d" % i) for i in range(5)])
            assert writer.wait_dispatched()
            deadline = time.monotonic() + 10
            got = reader.get("t", 0, 5, 10)
            while not got.messages and time.monotonic() < deadline:
                assert got.next_offset == 5            # waits; never moves past them
                time.sleep(0.02)
                got = reader.get("t", 0, 5, 10)
            assert [m.body for m in got.messages] == [b"b%d" % i for i in range(5)]
            assert reader.max_offset("t", 0) == 10
