"""CPU per message of the consumer-group state's live changes (pop, ack) and of a replay;
prints one JSON object per line and never asserts a time.

    PYTHONPATH=<tree>/src python bench/group_state.py [--rounds 600] [--batch 32] [--repeat 5]

Run it with PYTHONPATH switched between two trees for an A/B (process CPU time, the best of
``--repeat`` runs, so other load on the machine counts as little as it can). Each pop hands
out ``--batch`` messages of one queue (8 queues in turn) and each ack acknowledges them in
one call, as the gRPC layer does; every change is appended to the journal (``write``, no
fsync: the server fsyncs once a second).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from strata.broker.group_state import ConsumerGroups
from strata.broker.receipt import Receipt


def run(rounds: int, batch: int) -> tuple[float, float, float]:
    """CPU seconds of the pops, of the acks, and of reopening (replaying) the journal."""
    d = Path(tempfile.mkdtemp(prefix="strata-bench-groups-"))
    g = ConsumerGroups(d)
    pop_s = ack_s = 0.0
    off = 0
    deadline = 1 << 60
    for r in range(rounds):
        picked = [(off + i, 0) for i in range(batch)]
        t = time.process_time()
        handles = g.pop("g", "t", r % 8, 0, picked, off + batch, deadline)
        pop_s += time.process_time() - t
        receipts = [Receipt("g", "t", r % 8, o, h, deadline)
                    for (o, _a), h in zip(picked, handles)]
        t = time.process_time()
        g.ack(receipts[: batch // 2], now_ms=1)   # half acked: the rest stays in flight
        ack_s += time.process_time() - t
        off += batch
    g.journal.sync()
    t = time.process_time()
    ConsumerGroups(d)                              # what a restart after SIGKILL replays
    return pop_s, ack_s, time.process_time() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=600)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    best = [min(x) for x in zip(*(run(a.rounds, a.batch) for _ in range(a.repeat)))]
    n = a.rounds * a.batch
    print(json.dumps({"bench": "group_state", "rounds": a.rounds, "batch": a.batch,
                      "pop_cpu_us_per_msg": round(best[0] / n * 1e6, 3),
                      "ack_cpu_us_per_msg": round(best[1] / (n // 2) * 1e6, 3),
                      "replay_cpu_us_per_msg": round(best[2] / n * 1e6, 3)}), flush=True)


if __name__ == "__main__":
    main()
