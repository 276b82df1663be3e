"""Helpers of the tier tests: stores with a tier, and checks of what the tier holds."""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass

import strata
from support import make_message, small_store_config
from strata.tiered.layout import parse_chunk_path
from strata.tiered.reader import TieredQueueReader

TOPICS = ("orders", "audit")
S3_ENV = {"AWS_ACCESS_KEY_ID": "strata-test", "AWS_SECRET_ACCESS_KEY": "strata-test",
          "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_bucket(endpoint: str) -> str:
    import boto3
    name = f"strata-{uuid.uuid4().hex[:12]}"
    c = boto3.client("s3", endpoint_url=endpoint)
    c.create_bucket(Bucket=name)
    c.close()
    return name


@dataclass
class Tier:
    """Where a test's tier lives: a URL, an endpoint (S3 only) and its kind."""

    kind: str
    url: str
    endpoint: str | None

    def backend(self, **options):
        from strata.tiered.connect import open_backend
        return open_backend(self.url, self.endpoint, **options)




def tier_config(tier, **overrides) -> strata.StoreConfig:
    return small_store_config(tier_url=tier.url, tier_endpoint_url=tier.endpoint, **overrides)


def fill(store, n: int, start: int = 0, batch: int = 50) -> None:
    """Messages start..start+n-1 over two topics, keys k<seq>, every third one tagged."""
    for lo in range(start, start + n, batch):
        store.put_batch([make_message(i, topic=TOPICS[i % 2], size=60 + i % 300,
                                      tags="red" if i % 3 == 0 else None)
                         for i in range(lo, min(start + n, lo + batch))])


def local_history(store) -> dict[tuple[str, int], list]:
    """Every message of every queue, read locally (once dispatch has reached every message
    put: a queue's end is what dispatch has covered, which can lag a put just made)."""
    assert store.wait_dispatched(timeout=30.0)
    out = {}
    for topic in store.topics():
        for q in range(store.queue_count(topic)):
            msgs, off = [], store.min_offset(topic, q)
            while off < store.max_offset(topic, q):
                r = store.get(topic, q, off, 500)
                msgs.extend(r.messages)
                off = r.next_offset
            out[(topic, q)] = msgs
    return out


def tier_history(reader: TieredQueueReader, queues) -> dict[tuple[str, int], list]:
    out = {}
    for topic, q in queues:
        msgs, off = [], reader.min_offset(topic, q)
        while off < reader.max_offset(topic, q):
            got = reader.get(topic, q, off, 333)
            assert got, (topic, q, off)
            msgs.extend(got)
            off += len(got)
        out[(topic, q)] = msgs
    return out


def check_tier_consistent(backend, reader: TieredQueueReader, *, from_zero: bool = True) -> None:
    """Chunks follow each other with no gap or overlap (from offset 0 unless tier retention
    dropped the oldest), every counted object exists, and no object exists that the metadata
    does not count."""
    counted = set()
    for q in reader.metadata.queues.values():
        expect = q.chunks[0].first if q.chunks else q.next_offset
        assert not from_zero or q.chunks == [] or q.chunks[0].first == 0, q
        for c in q.chunks:
            assert c.first == expect, (q.topic, q.queue_id, c.first, expect)
            expect = c.end
            for kind in ("log", "cq") + (("keys",) if c.keys_count else ()):
                counted.add(f"queues/{q.topic}/{q.queue_id}/{c.first:020d}.{kind}")
        assert q.next_offset == expect
    present = {p for p in backend.list("queues/") if parse_chunk_path(p)}
    assert present == counted
    report = reader.verify()
    assert report.ok, report.problems
