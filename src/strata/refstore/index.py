"""The message index: msg id -> (ref count, file, offset, total size).

Entries touched since the store opened live in a dict of 4-tuples of ints, replaced (``put``)
when they change. A tuple of ints is untracked by Python's cycle collector once it has
survived one young collection, so an index of millions of entries adds nothing to the full
collections the rest of the process triggers (mutable lists would be walked by every one of
them: hundreds of ms each at a few million entries), and a batch of new entries is built by
``zip`` in C without a list per entry. After
a clean restart, the saved index is loaded as sorted numpy columns (the *base*) and an entry is
moved into the dict the first time it is looked up, so opening a store of a million messages
costs a file read rather than a million dict inserts.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Iterator

import numpy as np

REF, FILE, OFFSET, SIZE = 0, 1, 2, 3

ID_DTYPE = np.dtype("S16")   # byte-wise (memcmp) order; ids are always exactly 16 bytes


class MessageIndex:
    """Where every known message is, and how many references it has."""

    __slots__ = ("_d", "_base_ids", "_base_raw", "_base_ref", "_base_file", "_base_off",
                 "_base_size", "_taken", "_base_left")

    def __init__(self) -> None:
        self._d: dict[bytes, tuple[int, int, int, int]] = {}
        self._clear_base()

    def _clear_base(self) -> None:
        self._base_ids = np.empty(0, dtype=ID_DTYPE)
        self._base_raw = b""
        self._base_ref = self._base_file = self._base_off = self._base_size = None
        self._taken = None
        self._base_left = 0

    def load_base(self, ids_raw: bytes, ref, file, offset, size) -> None:
        """Install saved columns (ids sorted ascending, 16 bytes each) as the base."""
        n = len(ids_raw) // 16
        self._base_raw = ids_raw
        self._base_ids = np.frombuffer(ids_raw, dtype=ID_DTYPE)
        self._base_ref, self._base_file = ref, file
        self._base_off, self._base_size = offset, size
        self._taken = np.zeros(n, dtype=bool)
        self._base_left = n

    # ------------------------------------------------------------------ lookups

    def get(self, msg_id: bytes) -> tuple[int, int, int, int] | None:
        e = self._d.get(msg_id)
        if e is None and self._base_left:
            return self._take(msg_id)
        return e

    def _take(self, msg_id: bytes) -> tuple[int, int, int, int] | None:
        i = int(np.searchsorted(self._base_ids, msg_id))
        if i >= len(self._base_ids) or self._taken[i] or \
                self._base_raw[i * 16:i * 16 + 16] != msg_id:
            return None
        self._taken[i] = True
        self._base_left -= 1
        e = (int(self._base_ref[i]), int(self._base_file[i]), int(self._base_off[i]),
             int(self._base_size[i]))
        self._d[msg_id] = e
        if not self._base_left:
            self._clear_base()
        return e

    def prefetch(self, msg_ids: list[bytes]) -> None:
        """Move the base entries of a batch of ids into the dict in one vectorised lookup."""
        if not self._base_left or not msg_ids:
            return
        q = np.frombuffer(b"".join(msg_ids), dtype=ID_DTYPE)
        pos = np.searchsorted(self._base_ids, q)
        pos[pos >= len(self._base_ids)] = 0
        hit = (self._base_ids[pos] == q) & ~self._taken[pos]
        if hit.any():
            for k in np.nonzero(hit)[0].tolist():
                if self._base_left:
                    self.get(msg_ids[k])

    def __len__(self) -> int:
        return len(self._d) + self._base_left

    # ------------------------------------------------------------------ updates

    def insert(self, msg_id: bytes, ref: int, file: int, offset: int,
               size: int) -> tuple[int, int, int, int]:
        """Add an entry for an id that ``get`` just reported absent."""
        e = (ref, file, offset, size)
        self._d[msg_id] = e
        return e

    def put(self, msg_id: bytes, entry: tuple[int, int, int, int]) -> None:
        """Replace the entry of an id ``get`` just returned (entries are immutable tuples)."""
        self._d[msg_id] = entry

    def delete(self, msg_id: bytes) -> None:
        """Drop an entry previously returned by ``get``."""
        self._d.pop(msg_id, None)

    def delete_if_at(self, msg_id: bytes, file: int, offset: int) -> bool:
        """Drop the entry only if it still points at (file, offset); True if dropped."""
        e = self.get(msg_id)
        if e is not None and e[FILE] == file and e[OFFSET] == offset:
            del self._d[msg_id]
            return True
        return False

    # ------------------------------------------------------------------ bulk views

    def items(self) -> Iterator[tuple[bytes, tuple[int, int, int, int]]]:
        """Every entry (the base ones without moving them into the dict)."""
        yield from list(self._d.items())
        if self._base_left:
            idx = np.nonzero(~self._taken)[0]
            raw = self._base_raw
            for i, r, f, o, s in zip(idx.tolist(), self._base_ref[idx].tolist(),
                                     self._base_file[idx].tolist(),
                                     self._base_off[idx].tolist(),
                                     self._base_size[idx].tolist()):
                yield raw[i * 16:i * 16 + 16], (r, f, o, s)

    def columns(self, live_only: bool = False):
        """(ids_raw sorted, ref, file, offset, size) numpy columns of every entry."""
        n_d = len(self._d)
        ids_d = b"".join(self._d.keys())
        vals = np.fromiter(itertools.chain.from_iterable(self._d.values()), dtype=np.int64,
                           count=4 * n_d).reshape(n_d, 4)
        parts_ids = [np.frombuffer(ids_d, dtype=ID_DTYPE)]
        parts = [vals]
        if self._base_left:
            keep = ~self._taken
            parts_ids.append(self._base_ids[keep])
            parts.append(np.stack([self._base_ref[keep].astype(np.int64),
                                   self._base_file[keep].astype(np.int64),
                                   self._base_off[keep].astype(np.int64),
                                   self._base_size[keep].astype(np.int64)], axis=1))
        ids = np.concatenate(parts_ids)
        v = np.concatenate(parts) if parts else np.empty((0, 4), dtype=np.int64)
        if live_only:
            live = v[:, REF] > 0
            ids, v = ids[live], v[live]
        order = np.argsort(ids, kind="stable")
        ids, v = ids[order], v[order]
        return ids.tobytes(), v[:, REF], v[:, FILE], v[:, OFFSET], v[:, SIZE]

    def count_where(self, pred) -> int:
        return sum(1 for _, e in self.items() if pred(e))


def build(entries: Iterable[tuple[bytes, int, int, int, int]]) -> MessageIndex:
    idx = MessageIndex()
    for msg_id, ref, file, offset, size in entries:
        idx.insert(msg_id, ref, file, offset, size)
    return idx
