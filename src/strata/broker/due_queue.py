"""A heap of held messages by due time, with the background task that waits for the next one
to fall due: what the delay timer and the transaction checker share."""

from __future__ import annotations

import asyncio
import heapq
from abc import ABC, abstractmethod

from strata.broker import held_journal as hj
from strata.broker.held import HeldMessages
from strata.store.message_store import now_ms

IDLE_WAIT_S = 1.0                         # look at the clock at least this often


class DueQueue(ABC):
    """Held entries of one kind by due time. A subclass's ``_run`` loops while not
    ``_stopping``, takes what ``pop_due`` gives and calls ``wait_for_due`` when none is due."""

    def __init__(self, held: HeldMessages, kind: hj.Kind) -> None:
        self.held = held
        self._heap = [(e.due_ms, e.id) for e in held.entries.values() if e.kind is kind]
        heapq.heapify(self._heap)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    @abstractmethod
    async def _run(self) -> None:
        """The task: loop while not ``_stopping`` over what ``pop_due`` gives."""

    def push(self, due_ms: int, held_id: bytes) -> None:
        """Schedule an entry; wakes the task if it is now the first due."""
        earlier = not self._heap or due_ms < self._heap[0][0]
        heapq.heappush(self._heap, (due_ms, held_id))
        if earlier and self._wake is not None:
            self._wake.set()

    def pop_due(self, now: int, limit: int | None = None):
        """The entries due at ``now`` still held and not busy, at most ``limit`` of them."""
        while self._heap and self._heap[0][0] <= now and (limit is None or limit > 0):
            _due, i = heapq.heappop(self._heap)
            e = self.held.entries.get(i)
            if e is not None and not e.busy and e.due_ms <= now:
                if limit is not None:
                    limit -= 1
                yield e

    async def wait_for_due(self) -> None:
        """Sleep until the first entry falls due, one is pushed earlier, or IDLE_WAIT_S."""
        wait = IDLE_WAIT_S
        if self._heap:
            wait = min(wait, max(0.0, (self._heap[0][0] - now_ms()) / 1000))
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except asyncio.TimeoutError:
            pass

    async def close(self) -> None:
        """Stop after the work under way (if any) has finished."""
        self._stopping = True
        if self._task is not None:
            self._wake.set()
            await self._task
