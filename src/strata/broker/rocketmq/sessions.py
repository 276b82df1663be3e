"""Telemetry sessions: each client's open Telemetry stream, what it publishes, and a queue of
commands the server pushes to it (settings replies, orphaned-transaction checks); and when
each client was last heard from, to tell whether it is still connected (the renewal of a push
consumer's invisible times lasts as long as that)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(eq=False)
class Session:
    """One open Telemetry stream."""

    client_id: str
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    client_type: int = 0
    topics: frozenset[str] = frozenset()     # what a producer said it publishes
    closed: bool = False

    def push(self, command) -> None:
        if not self.closed:
            self.outbox.put_nowait(command)

    def close(self) -> None:
        """End the stream (the server's generator stops after what is queued)."""
        if not self.closed:
            self.outbox.put_nowait(None)
            self.closed = True


class Sessions:
    """The open sessions by client id (changed on the event loop; ``connected_until`` is also
    read from the group worker's thread)."""

    def __init__(self) -> None:
        self.by_client: dict[str, Session] = {}
        self.last_seen: dict[str, int] = {}     # client id -> ms of its last call
        self._turn = 0

    def open(self, client_id: str) -> Session:
        s = Session(client_id)
        old = self.by_client.get(client_id)
        self.by_client[client_id] = s
        if old is not None:
            old.close()
        return s

    def closed(self, s: Session) -> bool:
        """``s`` ended; True if its client has no other stream open now."""
        s.closed = True
        if self.by_client.get(s.client_id) is s:
            del self.by_client[s.client_id]
            return True
        return s.client_id not in self.by_client

    def seen(self, client_id: str, now_ms: int) -> None:
        if client_id:
            self.last_seen[client_id] = now_ms

    def forget(self, client_id: str) -> None:
        """The client said goodbye, or its stream closed: not connected until it calls again."""
        self.last_seen.pop(client_id, None)

    def connected(self, client_id: str, now_ms: int, timeout_ms: int,
                  stream_timeout_ms: int) -> bool:
        """The client called within ``timeout_ms`` or, while a Telemetry stream of it is
        open, within ``stream_timeout_ms`` (a hung process keeps its connection open)."""
        return now_ms <= self.connected_until(client_id, timeout_ms, stream_timeout_ms)

    def connected_until(self, client_id: str, timeout_ms: int, stream_timeout_ms: int) -> int:
        """Until when (ms) the client counts as connected if it makes no call meanwhile (as
        ``connected`` decides); -1 if it is gone. Safe from another thread (dict reads)."""
        t = self.last_seen.get(client_id)
        if t is None:
            return -1
        s = self.by_client.get(client_id)
        open_ = s is not None and not s.closed
        return t + (stream_timeout_ms if open_ else timeout_ms)

    def producer_for(self, topic: str, prefer: str = "") -> Session | None:
        """A live producer session that publishes ``topic``: ``prefer`` (a client id) if it
        does, else the next one in turn."""
        s = self.by_client.get(prefer)
        if s is not None and not s.closed and topic in s.topics:
            return s
        found = [s for s in self.by_client.values() if not s.closed and topic in s.topics]
        if not found:
            return None
        self._turn += 1
        return found[self._turn % len(found)]

    def close_all(self) -> None:
        for s in list(self.by_client.values()):
            s.close()
