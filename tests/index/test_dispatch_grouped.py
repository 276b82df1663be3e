"""A batch of many topics and queues dispatched in one call (units grouped by queue, each
queue's run copied in one slice by ``ConsumeQueue.append_run``) builds exactly the consume
queues that dispatching its records one by one builds: the same units, the same blanks, the
same file boundaries, and a replay of the batch changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.format import unit_kernels as uk
from strata.format.consume_queue import BLANK_SIZE, UNIT_SIZE
from strata.format.segment import HEADER_AREA
from strata.index.dispatch import TX_PREPARED, TX_ROLLBACK
from strata.index.dispatch_batch import DispatchBatch
from strata.index.queues import GATE_ALL_TOPICS, ConsumeQueueSet, TopicGate

TOPICS = ["orders", "payments", "shipments", "audit"]
UNITS_PER_FILE = 24   # small files: queues' runs cross file ends


def _batches(seed: int, n_batches: int, size: int, queues: int = 8) -> list[DispatchBatch]:
    """Demo-shaped batches (4 topics round robin, 8 queues picked at random), with some
    transactional records (no unit) and, for one queue, a jump in its queue offsets."""
    rng = np.random.default_rng(seed)
    nxt = np.zeros((len(TOPICS), queues), np.int64)
    nxt[1, 3] = 5   # payments/3 starts at unit 5: blank units before it
    off, out = 0, []
    for b in range(n_batches):
        codes = np.arange(size) % len(TOPICS)
        qids = rng.integers(0, queues, size)
        flags = rng.choice([0, 0, 0, 0, 0, 0, TX_PREPARED, TX_ROLLBACK], size)
        qo = np.empty(size, np.int64)
        for i in range(size):
            qo[i] = nxt[codes[i], qids[i]]
            nxt[codes[i], qids[i]] += 1
        if b == 1:
            nxt[2, 0] += 30    # shipments/0 jumps past a whole file: a gap
        sizes = rng.integers(50, 400, size)
        offs = off + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        off = int(offs[-1] + sizes[-1])
        tags = rng.integers(-2**40, 2**40, size)
        out.append(DispatchBatch(TOPICS, codes, qids, qo, offs, sizes, tags, offs, flags, []))
    return out


def _kernel_args(b: DispatchBatch) -> tuple:
    n = len(b)
    return (b.topic_codes, b.queue_ids, b.sys_flags, b.queue_offsets, b.offsets, b.sizes,
            b.tag_hashes, np.empty(n * UNIT_SIZE, np.uint8), np.empty(n, np.int64),
            np.empty((uk.MAX_GROUPS, 6), np.int64), np.empty(n, np.int64), 0xC,
            TX_PREPARED, TX_ROLLBACK)


def _contents(qs: ConsumeQueueSet) -> dict:
    """Every queue's state: offsets, record end, and the bytes of each file's data area
    up to what it holds."""
    out = {}
    for (topic, qid), cq in sorted(qs.queues.items()):
        files = [(seg.base_offset, seg.committed, bytes(seg.mm[HEADER_AREA:HEADER_AREA
                                                                + seg.committed]))
                 for seg in cq.segments.segments]
        out[(topic, qid)] = (cq.min_offset(), cq.max_offset(), cq.max_phys_end, files)
    return out


@pytest.mark.parametrize("seed,queues", [(1, 8), (2, 8), (3, 8), (4, 40)])
def test_grouped_dispatch_equals_record_by_record(tmp_path: Path, seed: int,
                                                  queues: int) -> None:
    """(40 queues of 4 topics: more than the compiled grouping takes, numpy's sort groups.)"""
    batches = _batches(seed, 4, 200, queues)
    assert queues * len(TOPICS) <= uk.MAX_GROUPS or \
        uk.group_units(*_kernel_args(batches[0]))[0] == -1
    grouped = ConsumeQueueSet(tmp_path / "grouped", UNITS_PER_FILE)
    single = ConsumeQueueSet(tmp_path / "single", UNITS_PER_FILE)
    try:
        for batch in batches:
            grouped.dispatch(batch)
            for i in range(len(batch)):
                single.dispatch(batch.select(np.array([i])))
        want = _contents(single)
        assert len(want) > 0.9 * len(TOPICS) * queues   # (a queue may draw no record)
        assert _contents(grouped) == want
        # a replay (after a crash) of every batch, or of a later part of one, changes nothing
        for batch in batches:
            grouped.dispatch(batch)
        grouped.dispatch(batches[-1].select(np.arange(100, 200)))
        assert _contents(grouped) == want
    finally:
        grouped.close()
        single.close()


def test_the_batches_exercise_gaps_and_transactions(tmp_path: Path) -> None:
    """The shapes above reach the fallbacks: transactional records get no unit, a queue
    that starts late and one that jumps get blank units, and the rest are real units."""
    batches = _batches(7, 3, 200)
    qs = ConsumeQueueSet(tmp_path / "q", UNITS_PER_FILE)
    try:
        for batch in batches:
            qs.dispatch(batch)
        real = blank = 0
        for cq in qs.queues.values():
            sizes = [cq.unit(n)[1] for n in range(cq.min_offset(), cq.max_offset())]
            real += sum(0 < s != BLANK_SIZE for s in sizes)
            blank += sum(s == BLANK_SIZE for s in sizes)
        kept = sum(int(((b.sys_flags & 0xC) != TX_PREPARED).sum()
                       - ((b.sys_flags & 0xC) == TX_ROLLBACK).sum()) for b in batches)
        assert real == kept < sum(len(b) for b in batches)
        assert qs.queues[("payments", 3)].min_offset() == 5
        jumped = qs.queues[("shipments", 0)]
        assert any(jumped.unit(n)[1] == BLANK_SIZE
                   for n in range(jumped.min_offset(), jumped.max_offset()))
        assert blank > 0
    finally:
        qs.close()


def test_append_run_refuses_what_is_not_the_end_of_the_newest_file(tmp_path: Path) -> None:
    qs = ConsumeQueueSet(tmp_path / "q", UNITS_PER_FILE)
    try:
        cq = qs.get_or_create("orders", 0)
        cq.put_batch([(i, 100 * i, 100, 0) for i in range(20)])
        unit = np.zeros(UNIT_SIZE, np.uint8)
        before = bytes(cq.segments.last().mm)
        assert not cq.append_run(19, memoryview(unit), 0)        # already there
        assert not cq.append_run(21, memoryview(unit), 0)        # a gap
        assert not cq.append_run(20, memoryview(np.zeros(5 * UNIT_SIZE, np.uint8)), 0)
        assert bytes(cq.segments.last().mm) == before            # nothing written
        assert cq.append_run(20, memoryview(unit), 7)             # fits: written
        assert cq.max_offset() == 21 and cq.max_phys_end == 7
    finally:
        qs.close()


class _Table:
    def __init__(self, queues: dict, since: dict) -> None:
        self.queues, self.since = queues, since


class _Sink:
    def __init__(self) -> None:
        self.batches: list[DispatchBatch] = []

    def dispatch(self, batch: DispatchBatch) -> None:
        self.batches.append(batch)


@pytest.mark.parametrize("n_topics", [4, GATE_ALL_TOPICS + 36])
def test_the_topic_gate_keeps_exactly_the_live_topics_records(n_topics: int) -> None:
    """Records of topics not in the table, or below their topic's ``since``, are dropped; the
    rest pass in log order (a reader knowing few topic names, and one knowing very many)."""
    rng = np.random.default_rng(n_topics)
    names = [f"t{i}" for i in range(n_topics)]
    n = 300
    codes = rng.integers(0, 4, n) * (n_topics // 4)      # the batch uses 4 of the names
    offs = np.arange(n, dtype=np.int64) * 100
    batch = DispatchBatch(names, codes, np.zeros(n), np.arange(n), offs, np.full(n, 100),
                          np.zeros(n), offs, np.zeros(n), [])
    used = [names[c] for c in sorted(set(codes.tolist()))]
    table = _Table({t: 8 for t in names if t != used[0]}, {used[1]: 15_000})
    sink = _Sink()
    TopicGate(table, sink).dispatch(batch)
    want = [i for i in range(n) if names[codes[i]] != used[0]
            and (names[codes[i]] != used[1] or offs[i] >= 15_000)]
    assert len(sink.batches) == 1
    assert sink.batches[0].offsets.tolist() == offs[want].tolist()
    assert 0 < len(want) < n
