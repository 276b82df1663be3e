"""The write-back cache: bodies of writes the store's server has not processed yet.

A client puts the body here before sending the write, so the message is readable at once;
the server takes it out once the record is in the current file's write buffer (from which
reads are served until the OS has the bytes). Its size is bounded by the store's in-flight
limit, which blocks writers while the server is behind.

Batches are kept as they came (a deque of ``(ids, bodies, nbytes)``): the server's batches
come out in the order they went in, so a batch goes in and out in O(1). Only when someone
asks for an id (a read, ``contains``) while batches are in flight are they turned into a
dict — ``_d``: id -> body of its first unprocessed write, ``_extra``: for an id written again
while a write of it is in flight, how many more are pending — and the cache stays a dict
until it empties again.
"""

from __future__ import annotations

import collections


class WriteBackCache:
    """Writes in flight, by batch or by id; guarded by the store lock."""

    __slots__ = ("_batches", "_d", "_extra", "bytes")

    def __init__(self) -> None:
        self._batches: collections.deque = collections.deque()
        self._d: dict[bytes, bytes] = {}
        self._extra: dict[bytes, int] = {}
        self.bytes = 0

    def add_many(self, msg_ids: list, bodies: list, nbytes: int) -> None:
        """Add one pending write per id (``nbytes``: the bodies' total length)."""
        if not self._d:
            self._batches.append((msg_ids, bodies, nbytes))
            self.bytes += nbytes
        else:
            self._add_by_id(msg_ids, bodies)

    def _add_by_id(self, msg_ids: list, bodies: list) -> None:
        d, extra = self._d, self._extra
        n = 0
        for m, b in zip(msg_ids, bodies):
            if m in d:
                extra[m] = extra.get(m, 0) + 1
            else:
                d[m] = b
                n += len(b)
        self.bytes += n

    def _by_id(self) -> dict[bytes, bytes]:
        """The cache as a dict (batches in flight turned into one, once)."""
        if self._batches:
            batches = self._batches
            self._batches = collections.deque()
            self.bytes = 0
            for ids, bodies, _ in batches:
                self._add_by_id(ids, bodies)
        return self._d

    def get(self, msg_id: bytes):
        if not self._batches:             # nothing in flight by batch: no conversion
            return self._d.get(msg_id) if self._d else None
        return self._by_id().get(msg_id)

    def done_many(self, msg_ids: list) -> None:
        """One write of each id was processed (applied or ignored), batch by batch in the
        order they were added."""
        batches = self._batches
        if batches and batches[0][0] is msg_ids:
            self.bytes -= batches.popleft()[2]
            return
        d = self._by_id()
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
        """Ids with a write in flight (counted without turning batches into the dict)."""
        if self._batches:
            return len(set().union(*(ids for ids, _, _ in self._batches)))
        return len(self._d)

    def __contains__(self, msg_id: bytes) -> bool:
        return msg_id in self._by_id()
