"""Delay messages: held (``strata.broker.held``) until their delivery time, then put into
their topic, many at once in one batch.

A delivery time in the past (or now) is no reason to hold: such a message is stored at once.
One more than ``convert.MAX_DELAY_MS`` (40 days) ahead is refused by ``convert.to_store`` with
``ILLEGAL_DELIVERY_TIME``, before anything is stored or created.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from strata.broker import held_journal as hj
from strata.broker.properties import PROP_DELIVER_MS
from strata.broker.due_queue import DueQueue
from strata.broker.errors import InvalidMessageError
from strata.broker.held import HeldEntry, HeldMessages
from strata.broker.status import Status
from strata.store.message import Message
from strata.store.message_store import now_ms

log = logging.getLogger(__name__)

MOVE_BATCH = 1024                         # due messages put into their topics by one put
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


class Timer(DueQueue):
    """The delay messages of one broker, by delivery time; moves the due ones."""

    def __init__(self, held: HeldMessages, on_moved: Callable[[], None]) -> None:
        super().__init__(held, hj.Kind.DELAY)
        self.on_moved = on_moved
        self.moved = 0         # messages put into their topics
        self.recalled = 0
        self.batches = 0       # puts that did it

    async def hold(self, msgs: list[tuple[Message, int, str]]) -> list[HeldEntry]:
        """Hold (message, due ms, client message id) each until due."""
        entries = await self.held.hold([(m, hj.Kind.DELAY, due, mid) for m, due, mid in msgs])
        for e in entries:
            self.push(e.due_ms, e.id)
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
            raise InvalidMessageError(Status.BAD_REQUEST, f"recall handle {handle[:80]!r} is "
                                      f"not one this broker issues ({2 * hj.ID_BYTES} hex "
                                      "digits)")
        e = self.held.entries.get(held_id)
        if e is None or e.kind is not hj.Kind.DELAY or e.topic != topic or e.busy:
            raise InvalidMessageError(Status.NOT_FOUND, f"no delay message of topic {topic!r} "
                                      f"is held under recall handle {handle}: it was "
                                      "delivered or recalled already, or never held")
        await self.held.drop([e], hj.Reason.RECALLED)
        self.recalled += 1
        return e.message_id

    async def _run(self) -> None:
        while not self._stopping:
            batch = list(self.pop_due(now_ms(), MOVE_BATCH))
            if batch:
                try:
                    moved = await self.held.move(batch)
                except Exception:  # noqa: BLE001 - logged; the messages stay held
                    log.exception("moving %d due delay messages failed; retrying in %.0f s",
                                  len(batch), RETRY_S)
                    for e in batch:
                        if e.id in self.held.entries:
                            self.push(e.due_ms, e.id)
                    await asyncio.sleep(RETRY_S)
                    continue
                self.moved += len(moved)
                self.batches += 1
                self.on_moved()
                continue
            await self.wait_for_due()
