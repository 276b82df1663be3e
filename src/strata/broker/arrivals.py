"""Waking long polls when new messages become visible to readers.

A put is acknowledged once its record is in the commit log; readers find a message through its
consume queue, which the store's dispatch thread fills a moment later. A long poll that looked
before the dispatch and then waited for "a send happened" could miss a message acknowledged
before it started (the send's wake-up came first, and nothing woke the poll again). So the
event here is set by the store's dispatch listener, after the records reached their queues,
and a poll also knows how far dispatch has to go to cover what was acknowledged before it
began (``caught_up``).

Use: ``ev = arrivals.take()`` before looking at the store, then ``await arrivals.wait(ev, s)``
(or ``arrivals.release()`` when not waiting after all): a dispatch between the look and the
wait still wakes it. Runs on the event loop; the listener hops over from the dispatch thread.
"""

from __future__ import annotations

import asyncio

from strata.store.message_store import MessageStore


class Arrivals:
    """The "new messages are visible" event of one store, for the polls of one event loop."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters = 0
        self.dispatched = 0        # commit-log offset the store has dispatched up to
        self.stopping = False      # set by a stopping server: waits end at once

    def start(self) -> None:
        """Listen to the store's dispatch (call on the event loop)."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self.dispatched = self.store.dispatched_offset()
        self.store.dispatch_listeners.append(self._dispatched)

    def close(self) -> None:
        try:
            self.store.dispatch_listeners.remove(self._dispatched)
        except ValueError:
            pass
        self._loop = None

    def _dispatched(self, offset: int) -> None:
        """On the store's dispatch thread: new records reached their queues."""
        self.dispatched = offset
        loop = self._loop
        if self._waiters and loop is not None:
            try:
                loop.call_soon_threadsafe(self.notify)
            except RuntimeError:      # the loop closed meanwhile (the server is stopping)
                pass

    def notify(self) -> None:
        """Wake every poll waiting now (new messages, an ack that frees a FIFO group, the
        stop). On the event loop."""
        ev, self._event = self._event, asyncio.Event()
        if ev is not None:
            ev.set()

    def take(self) -> asyncio.Event:
        """The event the next ``notify`` sets; take it before looking at the store."""
        if self._event is None:
            self._event = asyncio.Event()
        self._waiters += 1
        return self._event

    def release(self) -> None:
        """A ``take()`` not waited on after all."""
        self._waiters -= 1

    async def wait(self, event: asyncio.Event, timeout: float) -> None:
        """Until ``event`` is set or ``timeout`` seconds passed (then it returns quietly)."""
        try:
            if timeout > 0 and not self.stopping:
                await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._waiters -= 1

    def acknowledged(self) -> int:
        """The commit-log offset up to which puts are acknowledged now: a poll that starts
        here must see every message before it."""
        return self.store.confirmed_offset()

    def caught_up(self, target: int) -> bool:
        """Dispatch has made every record before commit-log offset ``target`` visible."""
        return self.store.dispatched_offset() >= target
