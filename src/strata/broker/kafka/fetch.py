"""Fetch (key 1): messages of a partition from the fetch offset, as uncompressed v2 record
batches built in compiled code (``record_batch``'s batch writer), one batch per run of
consecutive offsets within each store read (``fetch_read``). The response is a
``FetchAnswer`` (``fetch_answer``) that encodes itself into one buffer sized before writing.
A partition answers at least one message even past its byte limit (KIP-74), then stops at
``partition_max_bytes`` and the request's ``max_bytes``. Nothing past the high watermark is
served: the queue's dispatched end, which never passes what the store counts as confirmed
(the fsync'd end under ``--flush sync``). An offset outside [log start, high watermark] is
OFFSET_OUT_OF_RANGE. Below ``min_bytes`` the request waits (up to ``max_wait_ms``) and is
woken when new messages are dispatched, not by polling.

Off the loop: the store reads (which can reach S3 through the tier) and the encoding run on
the listener's read lanes (``KafkaBroker.reader``, ``read_lanes``: a small pool of threads,
one connection's reads in order on one thread at a time, so a slow read holds its own
connection only); the event loop only looks up topics and offsets, which are in memory, and
keeps serving every other connection meanwhile.

Served ahead: a consumer reading a backlog alternates with the broker (its next Fetch comes
once it has the answer). So after answering a Fetch that left messages to read, the reader
connection's lane prepares the answer to the Fetch that should follow (the same partitions and byte
limits, each from the offset after what was just sent) while the client decodes; it starts
once the answer is in the socket (``after_sent``: started before, it held the GIL while the
loop wrote the answer, and consume measured ~40% slower). The next
Fetch takes it if it asks exactly that (in any partition order) and nothing it depends on
changed: the topics' partition counts, each partition's log start (retention) and the
prepared records still below the high watermark (a deleted or recreated topic); its high
watermarks and log starts are brought up to date in the frame. Else the prepared answer is
dropped and the Fetch is read afresh. ACL checks run before this handler, on every request.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka.fetch_answer import FetchAnswer
from strata.broker.kafka.fetch_read import partition_answer
from strata.broker.kafka.topics import partitions

CATCH_UP_S = 30.0                  # at most this long for dispatch to reach what was acknowledged
AHEAD = "fetch_ahead"              # a connection's answer prepared ahead, in its state


class _Want(NamedTuple):
    """A partition to read: what ``fetch_read.partition_answer`` takes from a request."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int


class _Ahead(NamedTuple):
    key: tuple
    answer: asyncio.Future          # of the FetchAnswer, from the connection's read lane


def _answer(store, topics: list, lookups: list, max_bytes: int, version: int,
            correlation_id: int) -> FetchAnswer:
    """On a read lane's thread: every partition read from the store and the answer encoded
    (then the store's buffers are let go: the frame holds the bytes)."""
    budget = max_bytes if max_bytes > 0 else 0x7FFFFFFF
    total = 0
    out = []
    for (topic, wants), (code, n) in zip(topics, lookups):
        parts = []
        for fp in wants:
            pa = partition_answer(store, topic, code, n, fp, budget - total)
            total += pa.size
            parts.append(pa)
        out.append((topic, parts))
    answer = FetchAnswer(out)
    answer.encode_framed(version, correlation_id)
    for _t, parts in out:
        for p in parts:
            if p.pieces:
                p.pieces = []
    return answer


def _key(topics: list, lookups: list, max_bytes: int, version: int) -> tuple:
    """What a prepared answer must match: the same partitions, offsets and limits in any
    order, and the topics' lookups as they were."""
    return (version, max_bytes, tuple(sorted(
        (topic, code, n, tuple(sorted((w.partition, w.fetch_offset, w.partition_max_bytes)
                                      for w in wants)))
        for (topic, wants), (code, n) in zip(topics, lookups))))


def _current(store, answer: FetchAnswer, topics: list) -> bool:
    """Whether a prepared answer to ``topics`` still holds: every partition's first record
    not removed by retention and its records still below the high watermark (not so after
    a topic was deleted and made again); if so, its watermarks are brought up to date."""
    firsts = {(topic, w.partition): w.fetch_offset for topic, wants in topics for w in wants}
    for topic, parts in answer.topics:
        for p in parts:
            start = store.min_offset(topic, p.partition_index)
            hw = store.max_offset(topic, p.partition_index)
            if start > firsts[topic, p.partition_index] or hw < p.next_offset:
                return False
            answer.set_watermarks(p, hw, start)
    return True


async def _take_ahead(broker, conn, topics: list, lookups: list, max_bytes: int,
                      version: int, min_bytes: int) -> FetchAnswer | None:
    """The connection's prepared answer if it answers this Fetch; else None (dropped)."""
    ahead = conn.state.pop(AHEAD, None)
    if ahead is None:
        return None
    if ahead.answer.cancelled() or ahead.key != _key(topics, lookups, max_bytes, version):
        ahead.answer.cancel()
        broker.fetch_ahead_dropped += 1
        return None
    try:
        answer = await ahead.answer
    except Exception:  # noqa: BLE001 - read afresh: that read reports what went wrong
        answer = None
    if answer is None or answer.size() < max(1, min_bytes) or answer.has_error() or \
            not _current(broker.store, answer, topics):
        broker.fetch_ahead_dropped += 1
        return None
    broker.fetch_ahead_served += 1
    return answer


def _prepare_next(broker, conn, answer: FetchAnswer, topics: list, lookups: list,
                  max_bytes: int, version: int) -> None:
    """Start preparing the answer to the Fetch that should follow ``answer`` (the same
    partitions, each from after what ``answer`` carries), if ``answer`` left any to read."""
    if answer.has_error() or broker.stopping or not any(
            p.next_offset < p.high_watermark for _t, parts in answer.topics for p in parts):
        return
    # by partition, not by position: a prepared answer's partitions are in the order of the
    # request it predicted, and clients rotate the order from one Fetch to the next
    # (librdkafka does): paired by position, a partition that had reached its end swapped
    # offsets with another, and every other prepared answer was dropped
    after = {(t, p.partition_index): p.next_offset for t, parts in answer.topics
             for p in parts}
    nxt = [(topic, [w._replace(fetch_offset=after.get((topic, w.partition), w.fetch_offset))
                    for w in wants])
           for topic, wants in topics]
    old = conn.state.pop(AHEAD, None)       # one not taken (the client asked something else)
    if old is not None:
        old.answer.cancel()
        broker.fetch_ahead_dropped += 1
    fut = broker.reader.run(conn, _answer, broker.store, nxt, lookups, max_bytes, version, 0)
    conn.state[AHEAD] = _Ahead(_key(nxt, lookups, max_bytes, version), fut)


async def _lookups(broker, topics: list, refused: int) -> list[tuple[int, int]]:
    """(error code, partition count) per topic; the last ``refused`` ones the ACL refused."""
    n = len(topics) - refused
    return [await partitions(broker, t, create=False) for t, _w in topics[:n]] + \
        [(ke.TOPIC_AUTHORIZATION_FAILED, 0)] * refused


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
    topics = [(ft.topic, [_Want(fp.partition, fp.fetch_offset, fp.partition_max_bytes)
                          for fp in ft.partitions]) for ft in request.topics]
    version, max_bytes = ctx.api_version, request.max_bytes
    # topics the ACL refused (authorize): answered TOPIC_AUTHORIZATION_FAILED, never read
    refused = [(ft.topic, [_Want(fp.partition, 0, 0) for fp in ft.partitions])
               for ft in ctx.refused_topics]
    topics += refused
    lookups = await _lookups(broker, topics, len(refused))
    answer = await _take_ahead(broker, ctx.connection, topics, lookups, max_bytes, version,
                               request.min_bytes)
    while answer is None:
        arrival = broker.arrival()
        answer = await broker.reader.run(ctx.connection, _answer, broker.store, topics,
                                         lookups, max_bytes, version, ctx.correlation_id)
        left = deadline - time.monotonic()
        if answer.size() >= max(1, request.min_bytes) or left <= 0 or broker.stopping or \
                answer.has_error(but=ke.TOPIC_AUTHORIZATION_FAILED if refused else None):
            broker.release()
            break
        await broker.wait_on(arrival, left)
        answer = None
        lookups = await _lookups(broker, topics, len(refused))
    answer.after_sent = lambda: _prepare_next(broker, ctx.connection, answer, topics,
                                              lookups, max_bytes, version)
    return answer
