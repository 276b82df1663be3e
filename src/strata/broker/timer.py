"""Delay messages: held (``strata.broker.held``) until their delivery time, then put into
their topic, many at once in one batch.

A delivery time in the past (or now) is no reason to hold: such a message is stored at once.
One more than ``convert.MAX_DELAY_MS`` (40 days) ahead is refused by ``convert.to_store`` with
``ILLEGAL_DELIVERY_TIME``, before anything is stored or created.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from typing import Callable

from strata.broker import held_journal as hj
from strata.broker.convert import PROP_DELIVER_MS
from strata.broker.errors import InvalidMessageError
from strata.broker.held import HeldEntry, HeldMessages
from strata.broker.protocol import Code
from strata.store.message import Message
from strata.store.message_store import now_ms

log = logging.getLogger(__name__)

MOVE_BATCH = 1024                         # due messages put into their topics by one put
IDLE_WAIT_S = 1.0                         # look at the clock at least this often
RETRY_S = 1.0                             # after a move failed


def delivery_due(m: Message, now: int) -> int | None:
    """When a message must be delivered if it is to be held, else None (not a delay
    message, or due already)."""
    props = m.properties
    text = props.get(PROP_DELIVER_MS) if props else None
    if text is None:
        return None
    due = int(text)
    return due if due > now else None


class Timer:
    """The delay messages of one broker, by delivery time; moves the due ones."""

    def __init__(self, held: HeldMessages, on_moved: Callable[[], None]) -> None:
        self.held = held
        self.on_moved = on_moved
        self._heap = [(e.due_ms, e.id) for e in held.entries.values()
                      if e.kind is hj.Kind.DELAY]
        heapq.heapify(self._heap)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self.moved = 0         # messages put into their topics
        self.recalled = 0
        self.batches = 0       # puts that did it

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def hold(self, msgs: list[tuple[Message, int, str]]) -> list[HeldEntry]:
        """Hold (message, due ms, client message id) each until due."""
        entries = await self.held.hold([(m, hj.Kind.DELAY, due, mid) for m, due, mid in msgs])
        first = self._heap[0][0] if self._heap else None
        for e in entries:
            heapq.heappush(self._heap, (e.due_ms, e.id))
        if first is None or self._heap[0][0] < first:
            self._wake.set()
        return entries

    @staticmethod
    def recall_handle(e: HeldEntry) -> str:
        return e.id.hex()

    async def recall(self, handle: str, topic: str) -> str:
        """Drop a held delay message before it is due (``RecallMessage``); its client message
        id. InvalidMessageError naming why not: a malformed handle (BAD_REQUEST), one of no
        held delay message of ``topic`` — delivered already, recalled, never issued
        (NOT_FOUND)."""
        try:
            held_id = bytes.fromhex(handle)
        except ValueError:
            held_id = b""
        if len(held_id) != hj.ID_BYTES:
            raise InvalidMessageError(Code.BAD_REQUEST, f"recall handle {handle[:80]!r} is "
                                      f"not one this broker issues ({2 * hj.ID_BYTES} hex "
                                      "digits)")
        e = self.held.entries.get(held_id)
        if e is None or e.kind is not hj.Kind.DELAY or e.topic != topic or e.busy:
            raise InvalidMessageError(Code.NOT_FOUND, f"no delay message of topic {topic!r} "
                                      f"is held under recall handle {handle}: it was "
                                      "delivered or recalled already, or never held")
        await self.held.drop([e], hj.Reason.RECALLED)
        self.recalled += 1
        return e.message_id

    def _due(self, now: int) -> list[HeldEntry]:
        out: list[HeldEntry] = []
        while self._heap and self._heap[0][0] <= now and len(out) < MOVE_BATCH:
            _due, i = heapq.heappop(self._heap)
            e = self.held.entries.get(i)
            if e is not None and not e.busy:
                out.append(e)
        return out

    async def _run(self) -> None:
        while not self._stopping:
            batch = self._due(now_ms())
            if batch:
                try:
                    moved = await self.held.move(batch)
                except Exception:  # noqa: BLE001 - logged; the messages stay held
                    log.exception("moving %d due delay messages failed; retrying in %.0f s",
                                  len(batch), RETRY_S)
                    for e in batch:
                        if e.id in self.held.entries:
                            heapq.heappush(self._heap, (e.due_ms, e.id))
                    await asyncio.sleep(RETRY_S)
                    continue
                self.moved += len(moved)
                self.batches += 1
                self.on_moved()
                continue
            wait = IDLE_WAIT_S
            if self._heap:
                wait = min(wait, max(0.0, (self._heap[0][0] - now_ms()) / 1000))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def close(self) -> None:
        """Stop after the move under way (if any) has finished."""
        self._stopping = True
        if self._task is not None:
            self._wake.set()
            await self._task
