"""Helpers shared by the Spark tests (tests/spark): small stores, bodies, reading a topic back."""

from __future__ import annotations

from pathlib import Path

import strata
from strata.spark.geometry import open_readonly


def small_store_config() -> strata.StoreConfig:
    """64 KiB segments and small queue/index files: several segments from few messages."""
    return strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=1024,
                              index_slots=1024, index_entries=8192)


def body_for(seq: int, size: int) -> bytes:
    return (seq.to_bytes(8, "little") * (size // 8 + 1))[:size]


TOPICS = {"orders": 3, "audit": 2, "empty": 2}


def fill_store(path: Path, per_topic: dict[str, int]) -> None:
    """Messages with keys, tags and properties; every third without a key, some without tag."""
    with strata.open(path, small_store_config()) as store:
        for t, q in TOPICS.items():
            store.create_topic(t, queues=q)
        seq = 0
        for t, n in per_topic.items():
            msgs = []
            for i in range(n):
                kw = {}
                if i % 3:
                    kw["keys"] = (f"k{seq}", f"second-{seq}")
                else:
                    kw["keys"] = ()
                if i % 2:
                    kw["tags"] = f"tag{i % 4}"
                if i % 5 == 0:
                    kw["properties"] = {"region": "eu", "n": str(i)}
                msgs.append(strata.Message(t, body_for(seq, 50 + i % 90), **kw))
                seq += 1
            store.put_batch(msgs)
        store.wait_dispatched()


def all_messages(path, topic):
    """Every message of ``topic``, queue by queue, through a read-only store's ``get``."""
    with open_readonly(path) as store:
        out = []
        for q in range(store.queue_count(topic)):
            off = store.min_offset(topic, q)
            while off < store.max_offset(topic, q):
                got = store.get(topic, q, off, max_messages=256)
                out += got.messages
                off = got.next_offset
        return out
