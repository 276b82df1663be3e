"""The broker's pop path in process (no gRPC): pop + ack throughput of a consumer group on a
normal topic and on FIFO topics with G message groups, in one run; JSON lines.

    python bench/fifo_pop.py [--messages N] [--groups 1,4,64] [--queues Q] [--batch B]

Each case puts ``--messages`` messages into a fresh store (one topic, ``--queues`` queues;
FIFO messages spread round-robin over G message groups), then pops batches of ``--batch``
with ``strata.broker.receive.Popper`` and acks each batch through
``strata.broker.group_state.ConsumerGroups`` until every message is acked. On a FIFO topic a
pop hands out at most one message per message group and holds the others back (up to
``strata.broker.fifo.MAX_HELD`` per queue), so few groups mean small batches and held-back
messages walked on every pop: that cost is what the G cases show against the normal one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import strata
from strata.broker.group_state import ConsumerGroups
from strata.broker.receipt import ReceiptSigner
from strata.broker.receive import Popper

SMALL = dict(segment_size=64 << 20, index_slots=100_000, index_entries=400_000)


def case(root: Path, messages: int, groups: int, queues: int, batch: int) -> dict:
    d = root / f"g{groups}"
    store = strata.open(d / "store", strata.StoreConfig(**SMALL))
    store.create_topic("t", queues, message_type="fifo" if groups else "normal")
    msgs = [strata.Message("t", b"x" * 100, shard_key=f"g{i % groups}",
                           properties={"__SHARDINGKEY": f"g{i % groups}"}) if groups else
            strata.Message("t", b"x" * 100) for i in range(messages)]
    for i in range(0, messages, 1024):
        store.put_batch(msgs[i:i + 1024])
    store.wait_dispatched()
    cg = ConsumerGroups(d / "broker")
    signer = ReceiptSigner(b"k" * 32)
    popper = Popper(store, cg, signer)
    done = pops = 0
    now = 1_000_000
    t0 = time.perf_counter()
    while done < messages:
        got = popper.pop("cg", "t", None, batch, 60_000, now)
        pops += 1
        if got:
            cg.ack([signer.decode(x.receipt_handle) for x in got], now)
            done += len(got)
    el = time.perf_counter() - t0
    cg.close()
    store.close()
    return {"bench": "fifo_pop", "topic": "fifo" if groups else "normal",
            "message_groups": groups, "queues": queues, "batch": batch, "messages": messages,
            "pops": pops, "msgs_per_pop": round(messages / pops, 1),
            "msgs_per_s": round(messages / el)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--groups", default="1,4,64")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for g in [0, *(int(x) for x in a.groups.split(","))]:
            print(json.dumps(case(Path(tmp), a.messages, g, a.queues, a.batch)), flush=True)


if __name__ == "__main__":
    main()
