"""The flying table: writes and removes in flight between clients and the store's server.

Key: (client ref, msg id). Value: ``writes * WRITE + eliminated`` where ``writes`` counts the
client's writes of that id the server has not processed yet and ``eliminated`` how many of them
a later remove from the same client has cancelled. A remove that finds an uncancelled write in
flight cancels it and is never sent; the server then skips the write (still confirming it).
An entry exists only while a write is in flight, so the table is bounded by the in-flight
limit and empties when the server catches up.
"""

from __future__ import annotations

import collections
import threading

WRITE = 1 << 32
_LOW = WRITE - 1


class _Owner:
    """One client's writes in flight: as the batches it sent (``batches``, the common case:
    a write batch goes in and comes out whole, O(1)), or — once one of its removes had to
    look for an id among them — as counts per id (``counts``) until none is in flight."""

    __slots__ = ("batches", "counts")

    def __init__(self) -> None:
        self.batches: collections.deque = collections.deque()
        self.counts: dict[bytes, int] | None = None

    def by_id(self) -> dict[bytes, int]:
        if self.counts is None:
            self.counts = t = {}
            get = t.get
            for ids in self.batches:
                for m in ids:
                    t[m] = get(m, 0) + WRITE
            self.batches.clear()
        return self.counts


class FlyingTable:
    """Shared by every client of a store and its server thread (one ``_Owner`` per client)."""

    def __init__(self) -> None:
        self._t: dict[str, _Owner] = {}
        self._lock = threading.Lock()

    def client_write_many(self, cref: str, msg_ids: list) -> None:
        with self._lock:
            o = self._t.get(cref)
            if o is None:
                o = self._t[cref] = _Owner()
            if o.counts is None:
                o.batches.append(msg_ids)
                return
            t = o.counts
            get = t.get
            for m in msg_ids:
                t[m] = get(m, 0) + WRITE

    def client_remove(self, cref: str, msg_id: bytes) -> bool:
        """True if this remove cancelled a write still in flight (so it must not be sent)."""
        with self._lock:
            o = self._t.get(cref)
            if o is None:
                return False
            t = o.by_id()
            v = t.get(msg_id)
            if v is not None and (v >> 32) > (v & _LOW):
                t[msg_id] = v + 1
                return True
        return False

    def server_write_many(self, cref: str, msg_ids: list) -> list[bool] | None:
        """Account for processed writes; per id True to apply it, False if it was cancelled.

        Returns None when none was cancelled (the common case), to save a list.
        """
        out = None
        with self._lock:
            o = self._t[cref]
            if o.counts is None and o.batches[0] is msg_ids:
                o.batches.popleft()
                if not o.batches:
                    del self._t[cref]
                return None
            t = o.by_id()
            for k, m in enumerate(msg_ids):
                v = t[m]
                if v == WRITE:
                    del t[m]
                    continue
                if v & _LOW:
                    v -= WRITE + 1
                    if out is None:
                        out = [True] * len(msg_ids)
                    out[k] = False
                else:
                    v -= WRITE
                if v:
                    t[m] = v
                else:
                    del t[m]
            if not t:
                del self._t[cref]
        return out

    def __len__(self) -> int:
        with self._lock:
            return sum(len(o.counts) if o.counts is not None else
                       len(set().union(*o.batches)) for o in self._t.values())

    def entries(self) -> dict[tuple[str, bytes], tuple[int, int]]:
        with self._lock:
            return {(c, m): (v >> 32, v & _LOW)
                    for c, o in self._t.items() for m, v in o.by_id().items()}
