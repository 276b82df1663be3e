"""The write-back cache: bodies of writes the store's server has not processed yet.

A client puts the body here before sending the write, so the message is readable at once;
the server takes it out once the record is in the current file's write buffer (from which
reads are served until the OS has the bytes). Its size is bounded by the store's in-flight
limit, which blocks writers while the server is behind.
"""

from __future__ import annotations


class WriteBackCache:
    """msg id -> [body, number of unprocessed writes]; guarded by the store lock."""

    __slots__ = ("_d", "bytes")

    def __init__(self) -> None:
        self._d: dict[bytes, list] = {}
        self.bytes = 0

    def add_many(self, msg_ids, bodies) -> None:
        d = self._d
        n = 0
        for m, b in zip(msg_ids, bodies):
            e = d.get(m)
            if e is None:
                d[m] = [b, 1]
                n += len(b)
            else:
                e[1] += 1
        self.bytes += n

    def get(self, msg_id: bytes):
        e = self._d.get(msg_id)
        return None if e is None else e[0]

    def body_for(self, msg_id: bytes):
        return self._d[msg_id][0]

    def done(self, msg_id: bytes) -> None:
        """One write of ``msg_id`` was processed (applied or ignored)."""
        e = self._d[msg_id]
        if e[1] == 1:
            del self._d[msg_id]
            self.bytes -= len(e[0])
        else:
            e[1] -= 1

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, msg_id: bytes) -> bool:
        return msg_id in self._d
