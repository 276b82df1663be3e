"""Crash tests: a child process appends with flush="sync" from several threads and is killed
with SIGKILL at random moments, again and again on the same directory. After each kill the
store must hold every put that returned OK (readable, intact), nothing torn, and keep going."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

import strata
from support import body_source, expect_line, run_and_sigkill, shared_code

ROUNDS = 24  # 20 of them kill the child while it appends, 4 during start-up
THREADS = 4
WORKER_RANGE = 1_000_000      # seqs of round r are r*WORKER_RANGE + n
PARENT_BASE = 10 ** 9         # seqs the parent itself appends between rounds

CONFIG = dict(segment_size=64 * 1024, flush="sync", prefault=False, consume_queue_units=4096,
              index_slots=1024, index_entries=8192)

# Shared by the child (as source) and the parent (exec'd below): the body of message ``seq``.
BODY_SRC = body_source(40, 7919, 2500, 32)
body_of = shared_code(BODY_SRC)["body_of"]

CHILD_SRC = BODY_SRC + r'''
import itertools, os, sys, threading, json
import strata

store_dir, ack_path, first_seq, nthreads, cfg = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5]))
store = strata.open(store_dir, strata.StoreConfig(**cfg))
ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
counter = itertools.count(first_seq)
lock = threading.Lock()

def msg(seq):
    return strata.Message(f"crash{seq % 3}", body_of(seq), keys=[f"s{seq}"],
                          properties={"seq": str(seq)})

def worker(i):
    while True:
        n = 1 if i % 2 == 0 else 1 + next(counter) % 6  # (burns a seq now and then: fine)
        with lock:
            seqs = [next(counter) for _ in range(n)]
        if n == 1 and i % 4 == 0:
            results = [store.put(msg(seqs[0]))]
        else:
            results = store.put_batch([msg(s) for s in seqs])
        lines = "".join(f"{s} {r.commitlog_offset} {r.msg_id}\n"
                        for s, r in zip(seqs, results) if r.status is strata.PutStatus.OK)
        if lines:
            os.write(ack, lines.encode())  # one write: a kill cannot split it

threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(nthreads)]
for t in threads:
    t.start()
print("ready", flush=True)
for t in threads:
    t.join()
'''


def read_acks(path: Path) -> dict[int, tuple[int, str]]:
    acks: dict[int, tuple[int, str]] = {}
    if not path.exists():
        return acks
    for line in path.read_text().split("\n"):
        parts = line.split()
        if len(parts) == 3:  # an unfinished last line is not an acknowledgement
            acks[int(parts[0])] = (int(parts[1]), parts[2])
    return acks


def run_child_and_kill(script: Path, store_dir: Path, ack_path: Path, first_seq: int,
                       rng: random.Random, *, before_ready: bool) -> None:
    def pick_moment(proc) -> None:
        if before_ready:
            time.sleep(rng.uniform(0.05, 0.4))  # somewhere in start-up or recovery
            return
        expect_line(proc, b"ready")
        # let the appends get going (first acknowledgement), then kill at a random moment
        deadline = time.monotonic() + 30
        while not (ack_path.exists() and ack_path.stat().st_size) and \
                time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.3))

    run_and_sigkill([str(script), str(store_dir), str(ack_path), str(first_seq), str(THREADS),
                     json.dumps(CONFIG)], pick_moment)


@pytest.mark.slow
def test_sigkill_during_sync_appends_loses_nothing_acknowledged(tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    print(f"crash test seed {seed}")
    script = tmp_path / "child.py"
    script.write_text(CHILD_SRC)
    store_dir = tmp_path / "store"
    cfg = strata.StoreConfig(**CONFIG)

    acked: dict[int, tuple[int, str]] = {}   # every acknowledged seq -> (offset, msg id)
    issued_ranges: list[range] = []          # seqs a child might have written
    log_before: list[tuple[int, int]] = []   # (offset, seq) of the log after the last round
    kills_mid_write = 0

    for rnd in range(ROUNDS):
        first = (rnd + 1) * WORKER_RANGE
        issued_ranges.append(range(first, first + WORKER_RANGE))
        ack_path = tmp_path / f"acks-{rnd}"
        before_ready = rnd % 6 == 5
        run_child_and_kill(script, store_dir, ack_path, first, rng, before_ready=before_ready)
        new = read_acks(ack_path)
        if not before_ready:
            assert new, f"round {rnd}: the child acknowledged nothing before it was killed"
            kills_mid_write += 1
        acked.update(new)

        with strata.open(store_dir, cfg) as store:
            rep = store.recovery_report
            ctx = f"round {rnd}, seed {seed}: {rep.summary()}"
            # every put acknowledged in this round is there and intact (earlier ones are
            # checked below: the log they were found in must be unchanged)
            for seq, (off, mid) in new.items():
                m = store.read_at(off)
                assert m is not None, f"acked seq {seq} at {off} lost; {ctx}"
                assert m.body == body_of(seq) and m.properties["seq"] == str(seq), ctx
                assert m.msg_id == mid and store.get_by_id(mid) == m, ctx
            # every record is whole (CRC-verified) and is one that some put wrote
            log_now: list[tuple[int, int]] = []
            seen: set[int] = set()
            for m in store.scan(verify_crc=True):
                seq = int(m.properties["seq"])
                assert m.body == body_of(seq), f"record {m.commitlog_offset} torn; {ctx}"
                assert m.keys == (f"s{seq}",), ctx
                assert seq not in seen, f"seq {seq} stored twice; {ctx}"
                seen.add(seq)
                if seq not in acked:   # written but not acknowledged: was in flight
                    assert any(seq in r for r in issued_ranges), ctx
                log_now.append((m.commitlog_offset, seq))
            assert set(acked) <= seen, ctx
            # what recovery kept last time is still there, unchanged
            assert log_now[:len(log_before)] == log_before, ctx
            # and appending continues
            extra = [PARENT_BASE + rnd * 10 + j for j in range(3)]
            res = store.put_batch([strata.Message("crash0", body_of(s), keys=[f"s{s}"],
                                                  properties={"seq": str(s)}) for s in extra])
            for s, r in zip(extra, res):
                assert r.ok, ctx
                acked[s] = (r.commitlog_offset, r.msg_id)
                assert store.read_at(r.commitlog_offset).body == body_of(s)
                log_now.append((r.commitlog_offset, s))
            log_before = log_now

    assert kills_mid_write >= 20
    assert len(acked) > ROUNDS * 3
    with strata.open(store_dir, cfg, readonly=True) as store:
        assert [(m.commitlog_offset, int(m.properties["seq"]))
                for m in store.scan(verify_crc=True)] == log_before
