"""ListOffsets (key 2): latest (-1: the high watermark), earliest (-2: the log start), or by
timestamp with Kafka's CreateTime meaning: the first offset whose record timestamp (the
producer's, ``mapping``) is at or after the one asked for. Producer timestamps need not grow
with the offsets, so the lookup reads the queue's timestamps in order, in compiled-free but
batched reads of ``store.get``, on a worker thread (never on the event loop).
"""

from __future__ import annotations

import asyncio

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka.mapping import TIMESTAMP
from strata.broker.kafka.topics import partitions
from strata.errors import StrataError
from strata.store.message import GetStatus

ListOffsetsResponse = api.response_class(2)
TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse

LATEST, EARLIEST = -1, -2
CHUNK = 4096


def _timestamp(m) -> int:
    born = m.born_timestamp
    if born:
        return born
    props = m.properties
    t = props.get(TIMESTAMP) if props else None
    return int(t) if t is not None else m.store_timestamp


def offset_for_timestamp(store, topic: str, part: int, ts: int) -> tuple[int, int]:
    """(offset, its timestamp) of the first record at or after ``ts``; (-1, -1) if none."""
    offset = store.min_offset(topic, part)
    end = store.max_offset(topic, part)
    while offset < end:
        got = store.get(topic, part, offset, min(CHUNK, end - offset))
        if got.status is not GetStatus.FOUND or not got.messages:
            if got.next_offset > offset:
                offset = got.next_offset
                continue
            break
        for m in got.messages:
            t = _timestamp(m)
            if t >= ts:
                return m.queue_offset, t
        offset = got.next_offset
    return -1, -1


def _lookup(store, topic: str, part: int, ts: int) -> tuple[int, int, int]:
    """(error code, timestamp, offset)."""
    try:
        if ts == LATEST:
            return ke.NONE, -1, store.max_offset(topic, part)
        if ts == EARLIEST:
            return ke.NONE, -1, store.min_offset(topic, part)
        if ts < 0:
            return ke.INVALID_REQUEST, -1, -1
        offset, t = offset_for_timestamp(store, topic, part, ts)
        return ke.NONE, t, offset
    except StrataError as exc:
        return ke.code_for(exc), -1, -1


@api.handles(2, 1, 6, flexible_from=6)
async def list_offsets(ctx: api.RequestContext, request):
    broker = ctx.broker
    store = broker.store
    loop = asyncio.get_running_loop()
    topics = []
    for t in request.topics:
        code, n = partitions(broker, t.name, create=False)
        parts = []
        for p in t.partitions:
            pc, ts, off = code, -1, -1
            if pc == ke.NONE and not 0 <= p.partition_index < n:
                pc = ke.UNKNOWN_TOPIC_OR_PARTITION
            if pc == ke.NONE:
                if p.timestamp in (LATEST, EARLIEST):
                    pc, ts, off = _lookup(store, t.name, p.partition_index, p.timestamp)
                else:
                    pc, ts, off = await loop.run_in_executor(
                        None, _lookup, store, t.name, p.partition_index, p.timestamp)
            parts.append(PartitionResponse(partition_index=p.partition_index, error_code=pc,
                                           old_style_offsets=[], timestamp=ts, offset=off,
                                           leader_epoch=-1))
        topics.append(TopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
