"""Crash tests extended to dispatch: a child process appends with flush="sync" (small batches and
big ones, with keys and tags) and reports every acknowledged message; the parent SIGKILLs it at
random moments — also right after a big batch returns, while the dispatch pipeline is still
behind — and on reopen checks that every acknowledged message is reachable through its queue
and its keys, that queue offsets are consecutive with no duplicates, and that appending goes on.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import strata
from support import body_source, expect_line, run_and_sigkill, shared_code
from strata.store.message import GetStatus

ROUNDS = 12
TOPICS = ("c0", "c1")
QUEUES = 4
GROUPS = 7
CONFIG = dict(segment_size=256 * 1024, flush="sync", prefault=False, consume_queue_units=64,
              index_slots=64, index_entries=512, checkpoint_interval_ms=100,
              retention_check_interval_ms=3_600_000)

BODY_SRC = body_source(10, 7919, 600, 16) + '''
def message(strata, seq, queue_id=None):
    return strata.Message(f"c{seq % 2}", body_of(seq), keys=[f"s{seq}", f"g{seq % 7}"],
                          tags=f"t{seq % 3}", properties={"seq": str(seq)}, queue_id=queue_id)
'''
_ns = shared_code(BODY_SRC)
body_of, message = _ns["body_of"], _ns["message"]

CHILD_SRC = BODY_SRC + r'''
import json, os, random, sys
import strata

store_dir, ack_path, first_seq, seed, cfg = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                             int(sys.argv[4]), json.loads(sys.argv[5]))
rng = random.Random(seed)
store = strata.open(store_dir, strata.StoreConfig(**cfg))
for t in ("c0", "c1"):
    store.create_topic(t, queues=4)
ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
print("ready", flush=True)
seq = first_seq
while True:
    big = rng.random() < 0.15
    n = rng.randint(200, 900) if big else rng.randint(1, 12)
    seqs = list(range(seq, seq + n))
    seq += n
    msgs = [message(strata, s, queue_id=(s % 4 if s % 5 == 0 else None)) for s in seqs]
    results = store.put_batch(msgs) if n > 1 or rng.random() < 0.5 else [store.put(msgs[0])]
    lines = "".join(f"{s} {r.topic} {r.queue_id} {r.queue_offset} {r.commitlog_offset}\n"
                    for s, r in zip(seqs, results) if r.status is strata.PutStatus.OK)
    os.write(ack, lines.encode())  # one write: a kill cannot split a line
    if big:
        print("big", flush=True)
'''


def read_acks(path: Path) -> dict[int, tuple[str, int, int, int]]:
    acks = {}
    if path.exists():
        for line in path.read_text().split("\n"):
            parts = line.split()
            if len(parts) == 5:
                acks[int(parts[0])] = (parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
    return acks


def run_child_and_kill(script: Path, store_dir: Path, ack_path: Path, first_seq: int,
                       rng: random.Random, mode: str) -> None:
    def pick_moment(proc) -> None:
        if mode == "startup":               # during start-up, recovery or replay
            time.sleep(rng.uniform(0.05, 0.5))
            return
        expect_line(proc, b"ready")
        if mode == "after_big":             # right after a big batch: dispatch is behind
            for _ in range(rng.randint(1, 2)):
                expect_line(proc, b"big")
        else:
            time.sleep(rng.uniform(0.01, 0.4))

    run_and_sigkill([str(script), str(store_dir), str(ack_path), str(first_seq),
                     str(rng.getrandbits(32)), json.dumps(CONFIG)], pick_moment)


def check_store(store, acked, ctx) -> None:
    """Every acknowledged message by queue and by key; queues consecutive, no duplicates."""
    assert store.wait_dispatched(timeout=30.0), ctx
    # ground truth: the recovered log
    in_log: dict[int, strata.StoredMessage] = {}
    for m in store.scan():
        seq = int(m.properties["seq"])
        assert seq not in in_log, f"seq {seq} twice in the log; {ctx}"
        in_log[seq] = m
    assert set(acked) <= set(in_log), f"lost {sorted(set(acked) - set(in_log))[:5]}; {ctx}"
    # queues: offsets 0..n-1, each record of the topic exactly once, in log order
    queued: set[int] = set()
    for topic in TOPICS:
        assert store.queue_count(topic) == QUEUES, ctx
        for q in range(QUEUES):
            off, n = 0, store.max_offset(topic, q)
            assert store.min_offset(topic, q) == 0, ctx
            prev_phys = -1
            while off < n:
                r = store.get(topic, q, off, 1024)
                assert r.status is GetStatus.FOUND, (r.status, off, n, ctx)
                for i, m in enumerate(r.messages):
                    assert m.queue_offset == off + i and m.queue_id == q, ctx
                    assert m.commitlog_offset > prev_phys, ctx
                    prev_phys = m.commitlog_offset
                    seq = int(m.properties["seq"])
                    assert seq not in queued, f"seq {seq} queued twice; {ctx}"
                    queued.add(seq)
                    assert m.topic == topic and m.body == body_of(seq), ctx
                off = r.next_offset
            assert store.get(topic, q, n).status in (GetStatus.OFFSET_OVERFLOW_ONE,
                                                     GetStatus.NO_MESSAGE_IN_QUEUE), ctx
    assert queued == set(in_log), f"queued vs log differ; {ctx}"
    # every acknowledged message where its put said, by queue and by its own key
    for seq, (topic, q, qoff, phys) in acked.items():
        r = store.get(topic, q, qoff, 1)
        assert r.status is GetStatus.FOUND and r.messages[0].commitlog_offset == phys, \
            f"acked seq {seq} not at {topic}/{q}/{qoff}; {ctx}"
    sample = random.Random(len(acked)).sample(sorted(acked), min(len(acked), 300))
    for seq in sample:
        topic, _q, _qoff, phys = acked[seq]
        got = store.query(topic, f"s{seq}")
        assert [m.commitlog_offset for m in got] == [phys], f"key s{seq}; {ctx}"
    # group keys: exactly the log's messages with that key, newest first
    for topic in TOPICS:
        for g in range(GROUPS):
            want = sorted((m.commitlog_offset for m in in_log.values()
                           if m.topic == topic and f"g{g}" in m.keys), reverse=True)
            got = store.query(topic, f"g{g}", max_results=1_000_000)
            assert [m.commitlog_offset for m in got] == want, f"key g{g}; {ctx}"


def test_sigkill_during_dispatch_keeps_every_acknowledged_message_reachable(tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    print(f"crash dispatch seed {seed}")
    script = tmp_path / "child.py"
    script.write_text(CHILD_SRC)
    store_dir = tmp_path / "store"
    cfg = strata.StoreConfig(**CONFIG)
    modes = ["after_big", "random", "after_big", "random", "startup", "after_big"] * 2
    acked: dict[int, tuple[str, int, int, int]] = {}
    redispatched = 0
    next_seq = 0
    for rnd in range(ROUNDS):
        ack_path = tmp_path / f"acks-{rnd}"
        first = next_seq = next_seq + 1_000_000
        run_child_and_kill(script, store_dir, ack_path, first, rng, modes[rnd])
        acked.update(read_acks(ack_path))
        store = strata.open(store_dir, cfg)
        rep = store.recovery_report
        redispatched += rep.redispatched_records
        ctx = f"round {rnd} ({modes[rnd]}), seed {seed}: {rep.summary()}"
        check_store(store, acked, ctx)
        # appending goes on where each queue left off
        extra = [next_seq + 900_000 + j for j in range(4)]
        before = {(t, q): store.max_offset(t, q) for t in TOPICS for q in range(QUEUES)}
        for s, r in zip(extra, store.put_batch([message(strata, s, queue_id=s % QUEUES)
                                                for s in extra])):
            assert r.ok and r.queue_offset == before[(r.topic, r.queue_id)], ctx
            before[(r.topic, r.queue_id)] += 1
            acked[s] = (r.topic, r.queue_id, r.queue_offset, r.commitlog_offset)
        if rnd % 3 == 2:
            store._abandon()        # the parent crashes too, now and then
        else:
            store.close()
    assert len(acked) > ROUNDS * 20
    assert redispatched > 0         # some kills did leave dispatch behind
    with strata.open(store_dir, cfg) as store:
        check_store(store, acked, f"final, seed {seed}")
    with strata.open(store_dir, readonly=True) as ro:
        assert sum(ro.max_offset(t, q) for t in TOPICS for q in range(QUEUES)) >= len(acked)
