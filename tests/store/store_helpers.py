"""Helpers shared by the store tests (tests/store): opening small stores, draining queues."""

from __future__ import annotations

from pathlib import Path

import pytest

import strata
import strata.store.message_store as ms_mod
from strata.store.message import GetStatus

KiB = 1 << 10
T0 = 1_700_000_000_000


@pytest.fixture
def clock(monkeypatch):
    """Store times under test control: ``clock.t`` is what the next put is stamped with."""

    class Clock:
        t = T0

    c = Clock()
    import strata.store.put_path as put_path    # stamps the puts
    for module in (ms_mod, put_path):
        monkeypatch.setattr(module, "now_ms", lambda: c.t)
    return c


def config(**overrides) -> strata.StoreConfig:
    """64 KiB segments, small queue/index files, no pre-faulting: rolls happen with few messages
    and stores open fast. Background flush/checkpoint/retention stay out of the way."""
    kw = dict(segment_size=64 * KiB, prefault=False, consume_queue_units=4096,
              index_slots=1024, index_entries=8192, retention_check_interval_ms=3_600_000)
    kw.update(overrides)
    return strata.StoreConfig(**kw)


def open_store(path: Path, cfg: strata.StoreConfig | None = None, **overrides):
    return strata.open(path, cfg if cfg is not None else config(**overrides))


def settle(store) -> None:
    """Wait until queues and index cover everything appended so far."""
    assert store.wait_dispatched(timeout=30.0)


def drain(store, topic: str, queue_id: int, offset: int | None = None, *, batch: int = 32,
          tags=None) -> list:
    """Every message of a queue from ``offset`` (default: its minimum), via ``get``."""
    off = store.min_offset(topic, queue_id) if offset is None else offset
    out = []
    while True:
        r = store.get(topic, queue_id, off, batch, tags=tags)
        if r.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            assert r.next_offset > off, r
            out.extend(r.messages)
            off = r.next_offset
            continue
        assert r.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE), r
        return out


def put_rolled(store, topic: str, make, count: int, step: int, min_segments: int = 3) -> None:
    """``make(i)`` for i < ``count`` put in batches of ``step`` into a new one-queue
    ``topic``, dispatched, over at least ``min_segments`` commit-log segments."""
    store.create_topic(topic, queues=1)
    for start in range(0, count, step):
        store.put_batch([make(i) for i in range(start, min(count, start + step))])
    settle(store)
    assert len(store.log.segments.segments) >= min_segments


def body_byte(store, put) -> tuple:
    """(segment, position in its map) of a byte inside the body of the record ``put`` (a put
    result) wrote: a flip there only its CRC32C can tell."""
    from strata.format.segment import HEADER_AREA
    seg = store.log.segments.find(put.commitlog_offset)
    at = put.commitlog_offset - seg.base_offset + HEADER_AREA
    return seg, at + int.from_bytes(seg.mm[at:at + 4], "little") - 40
