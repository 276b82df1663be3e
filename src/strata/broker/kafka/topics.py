"""Topic and partition lookups shared by the Kafka handlers: a Kafka topic is a strata topic,
its partitions are the topic's queues; auto-creation follows ``--no-auto-create``. Creating
a topic writes (and fsyncs) the topic table, so it runs on a worker thread; requests that
need the same new topic wait for the one creation, in the order they came."""

from __future__ import annotations

import asyncio

from strata.broker.kafka import errors as ke
from strata.broker.names import check_topic
from strata.errors import StrataError


async def partitions(broker, topic: str, *, create: bool) -> tuple[int, int]:
    """(error code, partition count) of ``topic``; creates it (default queue count) when
    ``create`` and the broker auto-creates. Returns without suspending when the topic
    exists (pipelined produces keep their order)."""
    try:
        check_topic(topic)
    except StrataError:
        return ke.INVALID_TOPIC_EXCEPTION, 0
    store = broker.store
    n = store.queue_count(topic)
    if n == 0 and create and broker.auto_create:
        code = await run_create(broker, topic, store.create_topic, topic)
        if code != ke.NONE:
            return code, 0
        n = store.queue_count(topic)
    if n == 0:
        return ke.UNKNOWN_TOPIC_OR_PARTITION, 0
    return ke.NONE, n


async def run_create(broker, topic: str, fn, *args) -> int:
    """Run the topic change ``fn(*args)`` on a worker thread, once per topic at a time (others
    asking meanwhile wait for it); the Kafka error code of its outcome."""
    pending: dict = broker.state.setdefault("creating", {})
    fut = pending.get(topic)
    if fut is None:
        loop = asyncio.get_running_loop()
        fut = pending[topic] = loop.run_in_executor(None, _code_of, fn, args)
        fut.add_done_callback(lambda _f: pending.pop(topic, None))
    return await asyncio.shield(fut)


def _code_of(fn, args) -> int:
    try:
        fn(*args)
    except StrataError as exc:
        return ke.code_for(exc)
    return ke.NONE
