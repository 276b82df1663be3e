"""Fetch (key 1): messages of a partition from the fetch offset, as uncompressed v2 record
batches built in compiled code (``record_batch.encode_batches_into``), one batch per run of
consecutive offsets. A partition answers at least one message even past its byte limit
(KIP-74), then stops at ``partition_max_bytes`` and the request's ``max_bytes``. Nothing past
the high watermark is served: the queue's dispatched end, which never passes what the store
counts as confirmed (the fsync'd end under ``--flush sync``). An offset outside [log start,
high watermark] is OFFSET_OUT_OF_RANGE. Below ``min_bytes`` the request waits (up to
``max_wait_ms``) and is woken when new messages are dispatched, not by polling.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka.mapping import from_message
from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka.record_batch import RecordColumns, encode_batches
from strata.format import record_table as rk
from strata.format.record_batch import MessageBatch
from strata.broker.kafka.topics import partitions
from strata.errors import StrataError
from strata.store.message import GetStatus

FetchResponse = api.response_class(1)
TopicData = FetchResponse.FetchableTopicResponse
PartitionData = TopicData.PartitionData

READ_CHUNK = 1024                  # messages per store.get
RECORD_OVERHEAD = 70               # bytes of a v2 record beside its value (an estimate)
CATCH_UP_S = 30.0                  # at most this long for dispatch to reach what was acknowledged


def _plain_columns(parts: list) -> RecordColumns | None:
    """Columns straight from the store's field table, without a message object each, when
    every message is plain (no keys, tags or properties: the value and a timestamp only);
    else None."""
    tables = []
    for part in parts:
        t = part.table() if isinstance(part, MessageBatch) else None
        if t is None:
            return None
        tables.append(t)
    datas, recs = [], []
    base = 0
    for buf, f in tables:
        if (f[rk.F_PROPS_AT] != f[rk.F_BODY_AT]).any():
            return None
        n = f.shape[1]
        r = np.zeros((bk.R_FIELDS, n), np.int64)
        born = f[rk.F_BORN_TS]
        r[bk.R_TIMESTAMP] = np.where(born > 0, born, f[rk.F_STORE_TS])
        r[bk.R_KEY_LEN] = -1
        r[bk.R_VALUE_AT] = f[rk.F_BODY_AT] + base
        r[bk.R_VALUE_LEN] = f[rk.F_BODY_END] - f[rk.F_BODY_AT]
        recs.append(r)
        datas.append(np.frombuffer(buf, np.uint8))
        base += len(buf)
    data = datas[0] if len(datas) == 1 else np.concatenate(datas)
    records = recs[0] if len(recs) == 1 else np.concatenate(recs, axis=1)
    records[bk.R_OFFSET_DELTA] = np.arange(records.shape[1])
    return RecordColumns(data, np.zeros((bk.B_FIELDS, 0), np.int64), records,
                         np.zeros((bk.H_FIELDS, 0), np.int64))


def _columns(msgs) -> RecordColumns:
    ts, keys, values, headers = [], [], [], []
    for m in msgs:
        k, v, t, h = from_message(m)
        ts.append(t)
        keys.append(k)
        values.append(v)
        headers.append([(hk.encode("utf-8"), hv) for hk, hv in h])
    return RecordColumns.from_lists(ts, keys, values, headers)


def _read(store, topic: str, part: int, offset: int, limit: int) -> tuple[list, int]:
    """The store's batches of messages from ``offset`` while they stay within ``limit``
    bytes (at least one message), and the bytes they take. Batches are kept as the store
    returns them (a MessageBatch makes no message object until one is asked for)."""
    parts: list = []
    size = count = 0
    while size < limit:
        want = READ_CHUNK if not count else max(1, min(READ_CHUNK, (limit - size) // max(
            1, size // count) + 1))
        got = store.get(topic, part, offset, want)
        if got.status is not GetStatus.FOUND or not got.messages:
            if got.status is GetStatus.OFFSET_FOUND_NULL and got.next_offset > offset:
                offset = got.next_offset
                continue
            break
        batch = got.messages
        t = batch.table() if isinstance(batch, MessageBatch) else None
        if t is not None:
            f = t[1]
            sizes = (f[rk.F_BODY_END] - f[rk.F_BODY_AT] + RECORD_OVERHEAD).tolist()
        else:
            sizes = [len(m.body) + RECORD_OVERHEAD for m in batch]
        take = 0
        for n in sizes:
            if (count or take) and size + n > limit:
                break
            size += n
            take += 1
        if take < len(sizes):
            batch = MessageBatch(t[0], t[1][:, :take], topic) if t is not None \
                else list(batch)[:take]
            parts.append(batch)
            return parts, size
        parts.append(batch)
        count += take
        offset = got.next_offset
    return parts, size


def _offsets(parts: list) -> np.ndarray:
    out = []
    for p in parts:
        t = p.table() if isinstance(p, MessageBatch) else None
        out.append(t[1][rk.F_QUEUE_OFFSET] if t is not None
                   else np.fromiter((m.queue_offset for m in p), np.int64))
    return np.concatenate(out) if len(out) > 1 else out[0]


def _encode(parts: list) -> bytes:
    offsets = _offsets(parts)
    breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
    firsts = np.concatenate(([0], breaks)).astype(np.int64)
    counts = np.diff(np.concatenate((firsts, [len(offsets)]))).astype(np.int64)
    cols = _plain_columns(parts)
    if cols is None:
        cols = _columns([m for p in parts for m in p])
    return encode_batches(cols, firsts, counts, offsets[firsts])


def _partition(broker, topic: str, code: int, n: int, fp, budget: int) -> tuple[object, int]:
    store = broker.store
    p = fp.partition
    if code == ke.NONE and not 0 <= p < n:
        code = ke.UNKNOWN_TOPIC_OR_PARTITION
    if code != ke.NONE:
        return PartitionData(partition_index=p, error_code=code, high_watermark=-1,
                             last_stable_offset=-1, log_start_offset=-1,
                             aborted_transactions=None, preferred_read_replica=-1,
                             records=None), 0
    hw = store.max_offset(topic, p)
    start = store.min_offset(topic, p)
    offset = fp.fetch_offset
    records = b""
    if not start <= offset <= hw:
        code = ke.OFFSET_OUT_OF_RANGE
    elif offset < hw and budget > 0:
        try:
            parts, _size = _read(store, topic, p, offset,
                                 min(fp.partition_max_bytes, budget))
        except StrataError as exc:
            parts, code = [], ke.code_for(exc)
        if parts:
            records = _encode(parts)
    return PartitionData(partition_index=p, error_code=code, high_watermark=hw,
                         last_stable_offset=hw, log_start_offset=start,
                         aborted_transactions=None, preferred_read_replica=-1,
                         records=records), len(records)


async def _answer(broker, request) -> tuple[list, int]:
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    topics = []
    for ft in request.topics:
        code, n = await partitions(broker, ft.topic, create=False)
        parts = []
        for fp in ft.partitions:
            pd, size = _partition(broker, ft.topic, code, n, fp, budget - total)
            total += size
            parts.append(pd)
        topics.append(TopicData(topic=ft.topic, partitions=parts))
    return topics, total


@api.handles(1, 4, 12, flexible_from=12)
async def fetch(ctx: api.RequestContext, request):
    broker = ctx.broker
    deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
    target = broker.store.confirmed_offset()
    if broker.dispatched < target:
        # what was acknowledged before this fetch (a RocketMQ send, which is answered before
        # dispatch) is served by it: wait for dispatch to reach it, woken by the dispatch
        try:
            await asyncio.wait_for(broker.until_dispatched(target), CATCH_UP_S)
        except asyncio.TimeoutError:
            pass
    while True:
        arrival = broker.arrival()
        topics, total = await _answer(broker, request)
        left = deadline - time.monotonic()
        if total >= max(1, request.min_bytes) or left <= 0 or broker.stopping or \
                _has_error(topics):
            broker.release()
            break
        await broker.wait_on(arrival, left)
    return FetchResponse(throttle_time_ms=0, error_code=ke.NONE, session_id=0,
                         responses=topics)


def _has_error(topics) -> bool:
    return any(p.error_code != ke.NONE for t in topics for p in t.partitions)
