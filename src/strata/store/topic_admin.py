"""Topic administration on an open store: create a topic, add queues, delete a topic (under
the put lock, so no put sees a topic half made or half gone)."""

from __future__ import annotations

from strata.errors import DiskFullError, InvalidInputError
from strata.format import record as rec
from strata.store.topics import MAX_QUEUES, TopicType, as_topic_type


def create_topic(store, topic: str, queues: int | None = None,
                 message_type: TopicType | str | None = None) -> bool:
    """Create ``topic`` with ``queues`` queues (default ``config.default_queues``) that
    accepts messages of ``message_type`` (a TopicType or its name: normal, fifo, delay,
    transaction; default normal). The broker checks sends against the type; the
    embedded put accepts any message into any topic.

    Returns False if it exists already with ``queues`` queues (or ``queues`` is None) and
    ``message_type`` (or ``message_type`` is None). An existing topic with another count
    or type raises TopicExistsError naming its own and changes nothing:
    ``set_queue_count`` adds queues; a type never changes.
    """
    store._check_writable()
    kind = None if message_type is None else as_topic_type(message_type)
    with store.life.put_lock:
        created = store.topic_table.create(
            topic, store.config.default_queues if queues is None else queues,
            since=store.log.max_offset(), message_type=kind or TopicType.NORMAL)
        if not created:
            store.topic_table.check_same(topic, queues, kind)
        return created


def set_queue_count(store, topic: str, queues: int) -> int:
    """Give an existing ``topic`` more queues (RocketMQ's topic update); returns the count.

    Queues are only ever added: fewer would strand the messages of the dropped ones, so a
    smaller count is refused. New queues start empty at offset 0; round-robin and
    ``shard_key`` placement use the new count from the next put on (a key may move to
    another queue, as in RocketMQ).
    """
    store._check_writable()
    if not isinstance(queues, int) or isinstance(queues, bool) or \
            not 1 <= queues <= MAX_QUEUES:
        raise InvalidInputError(f"queues must be an int in 1..{MAX_QUEUES}, got {queues!r}")
    with store.life.put_lock:
        now = store.topic_table.queues.get(topic)
        if now is None:
            raise InvalidInputError(f"no topic {topic!r} (create_topic makes one)")
        if queues < now:
            raise InvalidInputError(f"topic {topic!r} has {now} queues; a queue count can "
                                    f"only grow (removing queues would strand their "
                                    f"messages), got {queues}")
        return store.topic_table.ensure(topic, now, at_least=queues)


def delete_topic(store, topic: str) -> bool:
    """Forget a topic: its queues go at once; its records age out with the log."""
    store._check_writable()
    rec.encode_topic(topic)
    with store.life.put_lock:
        if topic not in store.topic_table.queues:
            return False
        store.wait_dispatched()
        try:
            store.topic_table.delete(topic)
        except DiskFullError:
            # No room even for the smaller table: the topic's queue files go first (their
            # space makes room for it), then the table is written.
            store.queues.delete_topic(topic)
            store.topic_table.delete(topic)
        store.queues.delete_topic(topic)
        for key in [k for k in store._queue_next if k[0] == topic]:
            del store._queue_next[key]
        store._round_robin.pop(topic, None)
        return True


def topic_type(store, topic: str) -> TopicType | None:
    """The message type ``topic`` accepts (None if there is no such topic)."""
    store._check_open()
    if store.readonly:
        store.topic_table.reload()
    return store.topic_table.type_of(topic)


def topics(store) -> list[str]:
    """Names of all topics, sorted."""
    store._check_open()
    if store.readonly:
        store.topic_table.reload()
    return sorted(store.topic_table.queues)


def queue_count(store, topic: str) -> int:
    """Number of queues of ``topic`` (0 if there is no such topic)."""
    store._check_open()
    if store.readonly:
        store.topic_table.reload()
    return store.topic_table.queues.get(topic, 0)
