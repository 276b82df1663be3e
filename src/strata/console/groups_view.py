"""Consumer-group state for the console: the broker's live ``ConsumerGroups`` when the
console runs inside ``strata serve``, else the group journal (``broker/groups.journal``) read
without opening it for writing (a running broker keeps appending to it; it is replaced whole
on compaction, so reading the path always sees whole records up to some point)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from strata.broker import journal as jr
from strata.broker.group_state import JOURNAL_NAME, ConsumerGroups, QueueState
from strata.errors import CorruptStoreError
from strata.files.layout import BROKER_DIR


# (group, topic, queue id) -> (commit offset, pop offset, in flight, redeliveries in flight)
GroupRows = dict[tuple[str, str, int], tuple[int, int, int, int]]
# Kafka groups: (group, topic, partition) -> committed offset
KafkaRows = dict[tuple[str, str, int], int]
# Kafka groups' live membership: group -> {state, protocol_type, protocol, members: [...]}
KafkaLive = dict[str, dict]


def _kafka_rows(committed: dict) -> KafkaRows:
    return {(g, t, q): c.offset for g, offsets in committed.items()
            for (t, q), c in list(offsets.items())}


def _live_rows(groups: ConsumerGroups) -> GroupRows:
    """The RocketMQ groups' rows of a live state, read where nothing changes it meanwhile
    (on the group worker's thread: see ``GroupSource.refresh``)."""
    return _rows(list(groups.queues.items()))


def _rows(queues: list[tuple[tuple[str, str, int], QueueState]]) -> GroupRows:
    out: GroupRows = {}
    for key, q in queues:
        flying = list(q.in_flight.values())
        out[key] = (q.commit_offset(), q.pop_offset, sum(1 for d in flying if not d.held),
                    sum(1 for d in flying if d.attempt > 1))
    return out


class GroupSource:
    """Where the console reads group state from; ``rows()`` is safe from any thread.

    A live state (``strata serve``'s) is changed by its group worker's thread (pops, acks,
    resets) and by the event loop (Kafka commits; acks while the worker idles): a reader on
    another thread could see a queue half-changed (its first offset not acked from one
    moment, its deliveries in flight from the next; ``min`` of a dict emptied between the
    test and the call). So ``rows()`` answers from a copy that ``refresh`` takes on the
    loop — the queues' on the worker's thread, in turn with its changes, the committed
    offsets on the loop, which alone changes them — before each reading that shows groups.
    """

    def __init__(self, store_dir: Path, live: ConsumerGroups | None = None,
                 kafka_live: Callable[[], KafkaLive] | None = None, worker=None) -> None:
        self.path = Path(store_dir) / BROKER_DIR / JOURNAL_NAME
        self.live = live
        # the serving broker's GroupWorker (strata.broker.group_worker); None: no broker
        # changes ``live`` but this console's own actions, on its event loop
        self.worker = worker
        self._copy: tuple[GroupRows, KafkaRows] = ({}, {})
        # inside `strata serve --kafka`: the Kafka coordinator's groups (state, members)
        self.kafka_live = kafka_live or (lambda: {})
        self._stamp: tuple | None = None
        self._cached: tuple[GroupRows, KafkaRows] = ({}, {})
        self._lock = threading.Lock()

    async def refresh(self) -> None:
        """On the event loop: copy a live state for ``rows`` and ``kafka_rows`` (nothing to
        do over a journal, which they read themselves)."""
        live = self.live
        if live is None:
            return
        if self.worker is None:
            rows = _live_rows(live)
        else:
            try:
                rows = await self.worker.call(_live_rows, live)
            except RuntimeError:    # the worker stopped (the broker stops): keep the last
                return
        self._copy = (rows, _kafka_rows(live.committed))

    def rows(self) -> GroupRows:
        """Per group, topic and queue: committed offset, pop offset, in flight, retries
        (a live state's as of the last ``refresh``)."""
        if self.live is not None:
            return self._copy[0]
        return self._journal()[0]

    def kafka_rows(self) -> KafkaRows:
        """Kafka groups' committed offsets per (group, topic, partition)."""
        if self.live is not None:
            return self._copy[1]
        return self._journal()[1]

    def _journal(self) -> tuple[GroupRows, KafkaRows]:
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return {}, {}
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                g = _replay(self.path.read_bytes())
                self._cached = (_rows(list(g.queues.items())), _kafka_rows(g.committed))
                self._stamp = stamp
            return self._cached


def _replay(data: bytes) -> ConsumerGroups:
    """The journal's records applied to an in-memory group state (nothing is written)."""
    try:
        records, _end = jr.read_records(data)
    except Exception as exc:   # CorruptJournalError and friends: say which file, go on
        raise CorruptStoreError(f"consumer-group journal: {exc}") from None
    return ConsumerGroups.replayed(records)
