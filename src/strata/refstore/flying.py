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


class FlyingTable:
    """Shared by every client of a store and its server thread (one inner dict per client)."""

    def __init__(self) -> None:
        self._t: dict[str, dict[bytes, int]] = {}
        self._lock = threading.Lock()

    def client_write_many(self, cref: str, msg_ids: list) -> None:
        with self._lock:
            t = self._t.get(cref)
            if t is None:
                t = self._t[cref] = {}
            new = dict.fromkeys(msg_ids, WRITE)
            if len(new) == len(msg_ids) and t.keys().isdisjoint(new):
                t.update(new)          # the common case, in C: no id in flight, none twice
                return
            get = t.get
            for m in msg_ids:
                t[m] = get(m, 0) + WRITE

    def client_remove(self, cref: str, msg_id: bytes) -> bool:
        """True if this remove cancelled a write still in flight (so it must not be sent)."""
        with self._lock:
            t = self._t.get(cref)
            v = None if t is None else t.get(msg_id)
            if v is not None and (v >> 32) > (v & _LOW):
                t[msg_id] = v + 1
                return True
        return False

    def server_write_many(self, cref: str, msg_ids) -> list[bool] | None:
        """Account for processed writes; per id True to apply it, False if it was cancelled.

        Returns None when none was cancelled (the common case), to save a list.
        """
        out = None
        with self._lock:
            t = self._t[cref]
            if list(map(t.get, msg_ids)).count(WRITE) == len(msg_ids):
                # one uncancelled write in flight per id (so no id twice): drop them all
                collections.deque(map(t.__delitem__, msg_ids), 0)
                if not t:
                    del self._t[cref]
                return None
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
            return sum(len(t) for t in self._t.values())

    def entries(self) -> dict[tuple[str, bytes], tuple[int, int]]:
        with self._lock:
            return {(c, m): (v >> 32, v & _LOW)
                    for c, t in self._t.items() for m, v in t.items()}
