"""A stateful model test of the store: random puts (several topics, keys, tags, explicit queue
ids, batches), gets (random offsets and tag filters), key queries, time lookups, topic
creation/deletion, clean restarts and unclean ones (``_abandon``: no flush, no checkpoint),
all checked against a plain in-memory model: (topic, queue) -> list of messages."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
import pytest

import strata
from strata.errors import TopicExistsError
from strata.store.message import GetStatus

from store_helpers import config

TOPICS = ("a", "b", "c")
KEYS = ("k0", "k1", "k2", "k3")
TAGS = (None, "x", "y", "z")
UNITS = 8                  # consume-queue units per file: gets cross file ends often
DEFAULT_QUEUES = 3
SCAN_LIMIT = 800           # units a filtered get may look at (see MessageStore.get)


@dataclass
class Stored:
    body: bytes
    keys: tuple[str, ...]
    tags: str | None
    commitlog_offset: int
    store_timestamp: int


message = st.tuples(st.sampled_from(TOPICS),
                    st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
                    st.sampled_from(TAGS),
                    st.one_of(st.none(), st.integers(0, 3)),    # queue id (3 may not exist)
                    st.sampled_from((0, 20, 300, 2500, 9000)))  # body size: segments roll


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="strata-model-"))
        self.cfg = config(consume_queue_units=UNITS, index_slots=4, index_entries=32,
                          default_queues=DEFAULT_QUEUES)
        self.store = strata.open(self.dir / "s", self.cfg)
        self.queues: dict[str, int] = {}                       # topic -> queue count
        self.model: dict[tuple[str, int], list[Stored]] = {}
        self.seq = 0

    def teardown(self) -> None:
        try:
            if not self.store.closed:
                self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def settle(self) -> None:
        assert self.store.wait_dispatched(timeout=30.0)

    def topic_messages(self, topic: str) -> list[Stored]:
        return sorted((m for (t, _q), ms in self.model.items() if t == topic for m in ms),
                      key=lambda m: m.commitlog_offset)

    # ------------------------------------------------------------------ rules

    @initialize(topic=st.sampled_from(TOPICS), n=st.integers(1, 5))
    def create_first_topic(self, topic, n):
        assert self.store.create_topic(topic, queues=n) is True
        self.queues[topic] = n

    @rule(batch=st.lists(message, min_size=1, max_size=8))
    def put(self, batch):
        msgs = []
        for topic, keys, tags, qid, size in batch:
            n_q = self.queues.get(topic, DEFAULT_QUEUES)
            if qid is not None and qid >= n_q:
                qid = None                     # out-of-range ids are tested in test_get
            self.seq += 1
            body = (b"%d:" % self.seq) * (size // 4 + 1)
            msgs.append(strata.Message(topic, body[:max(size, len(str(self.seq)) + 1)],
                                       keys=keys, tags=tags, queue_id=qid))
        results = self.store.put_batch(msgs)
        assert len({r.store_timestamp for r in results}) == 1
        for m, r in zip(msgs, results):
            assert r.ok and r.topic == m.topic
            self.queues.setdefault(m.topic, DEFAULT_QUEUES)
            assert 0 <= r.queue_id < self.queues[m.topic]
            if m.queue_id is not None:
                assert r.queue_id == m.queue_id
            q = self.model.setdefault((m.topic, r.queue_id), [])
            assert r.queue_offset == len(q)
            q.append(Stored(m.body, tuple(m.keys), m.tags, r.commitlog_offset,
                            r.store_timestamp))

    @rule(topic=st.sampled_from(TOPICS), q=st.integers(0, 5), where=st.integers(-2, 40),
          max_messages=st.sampled_from((1, 2, 5, 32)),
          tags=st.sampled_from((None, "x", "x||y", ["y", "z"], "*", "nope")))
    def get(self, topic, q, where, max_messages, tags):
        self.settle()
        stored = self.model.get((topic, q), [])
        n = len(stored)
        offset = where if where < 0 else (where * n) // 20 if where <= 20 else n + where - 21
        r = self.store.get(topic, q, offset, max_messages, tags=tags)
        assert (r.min_offset, r.max_offset) == ((0, n) if topic in self.queues
                                                and q < self.queues[topic] else (0, 0))
        if topic not in self.queues or q >= self.queues[topic]:
            assert (r.status, r.next_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
            return
        if n == 0:
            assert (r.status, r.next_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
            return
        if offset < 0:
            assert (r.status, r.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 0)
            return
        if offset == n:
            assert (r.status, r.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, n)
            return
        if offset > n:
            assert (r.status, r.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, n)
            return
        if tags is None or tags == "*":
            wanted = None
        else:
            wanted = set(tags.split("||")) if isinstance(tags, str) else set(tags)
        nxt = r.next_offset
        assert offset < nxt <= n
        expect = [(i, s) for i, s in enumerate(stored[offset:nxt], offset)
                  if wanted is None or s.tags in wanted]
        assert [(m.queue_offset, m.body, m.commitlog_offset) for m in r.messages] == [
            (i, s.body, s.commitlog_offset) for i, s in expect]
        for m, (i, s) in zip(r.messages, expect):
            assert (m.topic, m.queue_id, m.tags, m.keys) == (topic, q, s.tags, s.keys)
            assert m.store_timestamp == s.store_timestamp
        assert r.status is (GetStatus.FOUND if expect else GetStatus.NO_MATCHED_MESSAGE)
        assert len(r.messages) <= max_messages
        if len(r.messages) == max_messages:
            assert nxt == r.messages[-1].queue_offset + 1
        else:   # stopped at the queue's end, a queue-file end, or the scan limit
            assert nxt == n or nxt % UNITS == 0 or nxt - offset >= SCAN_LIMIT
        if wanted is None:   # unfiltered: as many as asked, unless an end came first
            assert len(r.messages) == min(max_messages, n - offset,
                                          UNITS - offset % UNITS)

    @rule(topic=st.sampled_from(TOPICS + ("zz",)), key=st.sampled_from(KEYS + ("nokey",)),
          window=st.integers(0, 3))
    def query(self, topic, key, window):
        self.settle()
        mine = [m for m in self.topic_messages(topic) if key in m.keys]
        begin, end = 0, None
        if window and mine:
            ts = sorted({m.store_timestamp for m in mine})
            begin = ts[len(ts) // 3] if window & 1 else 0
            end = ts[(2 * len(ts)) // 3] if window & 2 else None
            mine = [m for m in mine if begin <= m.store_timestamp
                    and (end is None or m.store_timestamp <= end)]
        got = self.store.query(topic, key, begin_ms=begin, end_ms=end, max_results=10_000)
        assert [(m.commitlog_offset, m.body) for m in got] == [
            (m.commitlog_offset, m.body) for m in reversed(mine)]
        assert all(m.topic == topic and key in m.keys for m in got)
        if len(mine) > 2:
            few = self.store.query(topic, key, begin_ms=begin, end_ms=end, max_results=2)
            assert [m.commitlog_offset for m in few] == [m.commitlog_offset
                                                          for m in reversed(mine)][:2]

    @precondition(lambda self: any(self.model.values()))
    @rule(pick=st.integers(0, 10**6), delta=st.sampled_from((-1, 0, 1)),
          boundary=st.sampled_from(("lower", "upper")))
    def offset_for_time(self, pick, delta, boundary):
        self.settle()
        keys = sorted(k for k, v in self.model.items() if v)
        topic, q = keys[pick % len(keys)]
        stored = self.model[(topic, q)]
        ts = stored[pick % len(stored)].store_timestamp + delta
        if boundary == "lower":
            expect = next((i for i, s in enumerate(stored) if s.store_timestamp >= ts),
                          len(stored))
        else:
            expect = max((i for i, s in enumerate(stored) if s.store_timestamp <= ts), default=0)
        assert self.store.offset_for_time(topic, q, ts, boundary) == expect

    @rule(topic=st.sampled_from(TOPICS), n=st.integers(1, 5))
    def create_topic(self, topic, n):
        if self.queues.get(topic, n) != n:      # another count: refused, nothing changes
            with pytest.raises(TopicExistsError):
                self.store.create_topic(topic, queues=n)
            assert self.store.queue_count(topic) == self.queues[topic]
            return
        created = self.store.create_topic(topic, queues=n)
        assert created == (topic not in self.queues)
        if created:
            self.queues[topic] = n
        assert self.store.queue_count(topic) == self.queues[topic]

    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic):
        assert self.store.delete_topic(topic) == (topic in self.queues)
        self.queues.pop(topic, None)
        for k in [k for k in self.model if k[0] == topic]:
            del self.model[k]

    @rule()
    def clean_restart(self):
        self.store.close()
        self.store = strata.open(self.dir / "s", self.cfg)

    @rule()
    def unclean_restart(self):
        self.store._abandon()
        self.store = strata.open(self.dir / "s", self.cfg)
        assert self.store.recovery_report is not None

    # ------------------------------------------------------------------ invariants

    @invariant()
    def queues_match_the_model(self):
        self.settle()
        assert self.store.topics() == sorted(self.queues)
        for topic, n_q in self.queues.items():
            assert self.store.queue_count(topic) == n_q
            for q in range(n_q):
                n = len(self.model.get((topic, q), []))
                assert (self.store.min_offset(topic, q), self.store.max_offset(topic, q)) == (0, n)


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=30, stateful_step_count=30, deadline=None,
                                   database=None,
                                   suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])
