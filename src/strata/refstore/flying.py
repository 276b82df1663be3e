"""The flying table: writes and removes in flight between clients and the store's server.

Key: (client ref, msg id). Value: ``writes * WRITE + eliminated`` where ``writes`` counts the
client's writes of that id the server has not processed yet and ``eliminated`` how many of them
a later remove from the same client has cancelled. A remove that finds an uncancelled write in
flight cancels it and is never sent; the server then skips the write (still confirming it).
An entry exists only while a write is in flight, so the table is bounded by the in-flight
limit and empties when the server catches up.
"""

from __future__ import annotations

import threading

WRITE = 1 << 32
_LOW = WRITE - 1


class FlyingTable:
    """Shared by every client of a store and its server thread."""

    def __init__(self) -> None:
        self._t: dict[tuple[str, bytes], int] = {}
        self._lock = threading.Lock()

    def client_write_many(self, cref: str, msg_ids) -> None:
        t = self._t
        with self._lock:
            for m in msg_ids:
                k = (cref, m)
                t[k] = t.get(k, 0) + WRITE

    def client_remove(self, cref: str, msg_id: bytes) -> bool:
        """True if this remove cancelled a write still in flight (so it must not be sent)."""
        k = (cref, msg_id)
        with self._lock:
            v = self._t.get(k)
            if v is not None and (v >> 32) > (v & _LOW):
                self._t[k] = v + 1
                return True
        return False

    def server_write(self, cref: str, msg_id: bytes) -> bool:
        """Account for one processed write; True if it must be applied, False if cancelled."""
        k = (cref, msg_id)
        with self._lock:
            v = self._t[k]
            if v & _LOW:
                v -= WRITE + 1
                apply = False
            else:
                v -= WRITE
                apply = True
            if v:
                self._t[k] = v
            else:
                del self._t[k]
        return apply

    def server_write_many(self, cref: str, msg_ids) -> list[bool]:
        t = self._t
        out = []
        with self._lock:
            for m in msg_ids:
                k = (cref, m)
                v = t[k]
                if v & _LOW:
                    v -= WRITE + 1
                    out.append(False)
                else:
                    v -= WRITE
                    out.append(True)
                if v:
                    t[k] = v
                else:
                    del t[k]
        return out

    def __len__(self) -> int:
        return len(self._t)

    def entries(self) -> dict[tuple[str, bytes], tuple[int, int]]:
        with self._lock:
            return {k: (v >> 32, v & _LOW) for k, v in self._t.items()}
