"""The write-back cache: bodies of writes the store's server has not processed yet.

A client puts the body here before sending the write, so the message is readable at once;
the server takes it out once the record is in the current file's write buffer (from which
reads are served until the OS has the bytes). Its size is bounded by the store's in-flight
limit, which blocks writers while the server is behind.

A batch goes in and out in C-level dict calls: ``_d`` maps an id to the body of its first
unprocessed write, and ``_extra`` counts, for the rare id written again while a write of it is
still in flight, how many more writes of it are pending.
"""

from __future__ import annotations



class WriteBackCache:
    """msg id -> body, plus the count of extra in-flight writes; guarded by the store lock."""

    __slots__ = ("_d", "_extra", "bytes")

    def __init__(self) -> None:
        self._d: dict[bytes, bytes] = {}
        self._extra: dict[bytes, int] = {}
        self.bytes = 0

    def add_many(self, msg_ids: list, bodies: list, nbytes: int) -> None:
        """Add one pending write per id (``nbytes``: the bodies' total length)."""
        d = self._d
        new = dict(zip(msg_ids, bodies))
        if len(new) == len(msg_ids) and d.keys().isdisjoint(new):
            d.update(new)          # the common case: ids not in flight, none twice
            self.bytes += nbytes
            return
        extra = self._extra
        n = 0
        for m, b in zip(msg_ids, bodies):
            if m in d:
                extra[m] = extra.get(m, 0) + 1
            else:
                d[m] = b
                n += len(b)
        self.bytes += n

    def get(self, msg_id: bytes):
        return self._d.get(msg_id)

    def done_many(self, msg_ids: list) -> None:
        """One write of each id was processed (applied or ignored)."""
        d = self._d
        if not self._extra:       # every id has exactly one pending write
            self.bytes -= sum(map(len, map(d.pop, msg_ids)))
            return
        extra = self._extra
        n = 0
        for m in msg_ids:
            k = extra.get(m)
            if k is None:
                n += len(d.pop(m))
            elif k == 1:
                del extra[m]
            else:
                extra[m] = k - 1
        self.bytes -= n

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, msg_id: bytes) -> bool:
        return msg_id in self._d
