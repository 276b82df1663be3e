"""The message index: msg id -> (ref count, file, offset, total size).

Entries live in a compiled open-addressing hash table (``hash_kernels``: one uint64 array,
32 bytes an entry, no Python object per entry), so a batch of writes, removes or GC moves
updates the index in one compiled call instead of one dict operation per id, and a large
index costs Python's cycle collector nothing. Single lookups (a client's ``read``,
``locate``) are one compiled call each.

After a clean restart, the saved index is loaded as sorted numpy columns (the *base*) and an
entry is moved into the table the first time it is looked up (``get``; a batch moves all its
ids' entries at once, ``prefetch``), so opening a store of millions of messages costs a file
read rather than millions of inserts.
"""

from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from . import hash_kernels as hk

REF, FILE, OFFSET, SIZE = 0, 1, 2, 3

ID_DTYPE = np.dtype("S16")   # byte-wise (memcmp) order; ids are always exactly 16 bytes
KEY_DTYPE = np.dtype("<u8")  # an id as two little-endian halves, as the kernels read it
MIN_CAPACITY = 1024
PREPARE_FROM = 1 << 16
PREPARE_UP_TO = 1 << 22
"""Tables of ``PREPARE_FROM`` to ``PREPARE_UP_TO`` slots (2 to 128 MiB) are allocated and
their pages touched ahead of the growth that needs them, on a thread of their own
(``_Standby``), once the table is 5/8 full (1/8 of its slots before the 3/4 mark): the page
faults of fresh memory, 3-36 ms for a 16 MiB table in the middle of a write stream (against
~2 ms for the rehash itself), are then off the server thread. The memory is the growth's,
taken that much earlier (a store that stays between 5/8 and 3/4 full keeps it unused).
Larger tables grow in line as before: their growth is rare and a standby would be large."""

Entry = tuple[int, int, int, int]


def keys_of(ids_raw) -> np.ndarray:
    """The ``(n, 2)`` key array of ids joined back to back (16 bytes each; no copy)."""
    return np.frombuffer(ids_raw, dtype=KEY_DTYPE).reshape(-1, 2)


class MessageIndex:
    """Where every known message is, and how many references it has."""

    __slots__ = ("_slots", "_meta", "_room", "_standby", "_base_ids", "_base_u8", "_base_raw", "_base_ref", "_base_file",
                 "_base_off", "_base_size", "_taken", "_base_left")

    def __init__(self) -> None:
        self._slots = np.zeros((MIN_CAPACITY, 4), dtype=np.uint64)
        self._meta = np.zeros(2, dtype=np.int64)
        self._room = 0
        self._standby: _Standby | None = None
        self._clear_base()

    def _clear_base(self) -> None:
        self._base_ids = np.empty(0, dtype=ID_DTYPE)
        self._base_u8 = np.empty((0, 16), dtype=np.uint8)
        self._base_raw = b""
        self._base_ref = self._base_file = self._base_off = self._base_size = None
        self._taken = None
        self._base_left = 0

    def load_base(self, ids_raw: bytes, ref, file, offset, size) -> None:
        """Install saved columns (ids sorted ascending, 16 bytes each) as the base."""
        n = len(ids_raw) // 16
        self._base_raw = ids_raw
        self._base_ids = np.frombuffer(ids_raw, dtype=ID_DTYPE)
        self._base_u8 = np.frombuffer(ids_raw, dtype=np.uint8).reshape(n, 16)
        self._base_ref, self._base_file = ref, file
        self._base_off, self._base_size = offset, size
        self._taken = np.zeros(n, dtype=bool)
        self._base_left = n

    def ensure_room(self, n: int) -> None:
        """Grow (or clean of tombstones) the table so that ``n`` more entries fit under 3/4
        load; after a rehash it is at most half full. ``_room`` counts inserts known to fit
        (every insert takes at most one slot), so most calls read no numpy scalar. At 5/8,
        the successor of a table of the right size starts being prepared (``_Standby``)."""
        if n <= self._room:
            self._room -= n
            return
        cap = len(self._slots)
        used = int(self._meta[hk.USED])
        slack = cap * 3 // 4 - used
        if n > slack:
            need = (int(self._meta[hk.ENTRIES]) + n) * 2
            while cap < need:
                cap *= 2
            new = self._standby.take(cap) if self._standby is not None else None
            self._standby = None
            if new is None:
                new = np.zeros((cap, 4), dtype=np.uint64)
            hk.rehash(self._slots, new, self._meta)
            self._slots = new
            used = int(self._meta[hk.USED])
            slack = cap * 3 // 4 - used
        early = cap * 5 // 8 - used
        if n <= early:                # look again at 5/8: the successor is prepared then
            self._room = early - n
            return
        if self._standby is None and PREPARE_FROM <= 2 * cap <= PREPARE_UP_TO:
            self._standby = _Standby(2 * cap)
        self._room = slack - n

    def table_for(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The table's ``(slots, meta)`` arrays with room made for ``n`` more entries, for a
        kernel that enters them itself (``append.append_new``)."""
        self.ensure_room(n)
        return self._slots, self._meta

    # ------------------------------------------------------------------ lookups

    def get(self, msg_id: bytes) -> Entry | None:
        e = hk.get_one(self._slots, msg_id)
        if e[0] >= 0:
            return e
        if self._base_left:
            return self._take(msg_id)
        return None

    def _take(self, msg_id: bytes) -> Entry | None:
        i = hk.base_find(self._base_u8, msg_id)
        if i < 0 or self._taken[i]:
            return None
        e = (int(self._base_ref[i]), int(self._base_file[i]), int(self._base_off[i]),
             int(self._base_size[i]))
        self.ensure_room(1)
        hk.put_one(self._slots, self._meta, msg_id, *e)
        self._taken[i] = True
        self._base_left -= 1
        if not self._base_left:
            self._clear_base()
        return e

    def prefetch(self, msg_ids: list[bytes]) -> None:
        """Move the base entries of a batch of ids into the table in one vectorised lookup."""
        if not self._base_left or not msg_ids:
            return
        q = np.frombuffer(b"".join(msg_ids), dtype=ID_DTYPE)
        pos = np.searchsorted(self._base_ids, q)
        pos[pos >= len(self._base_ids)] = 0
        hit = (self._base_ids[pos] == q) & ~self._taken[pos]
        if hit.any():
            self._move_base(np.unique(pos[hit]))

    def _move_base(self, pos: np.ndarray) -> None:
        """Enter base rows ``pos`` (distinct, not yet taken) in the table."""
        self.ensure_room(len(pos))
        hk.put_many(self._slots, self._meta, keys_of(self._base_raw)[pos],
                    self._base_ref[pos], self._base_file[pos], self._base_off[pos],
                    self._base_size[pos])
        self._taken[pos] = True
        self._base_left -= len(pos)
        if not self._base_left:
            self._clear_base()

    def __len__(self) -> int:
        return int(self._meta[hk.ENTRIES]) + self._base_left

    # ------------------------------------------------------------------ single updates

    def insert(self, msg_id: bytes, ref: int, file: int, offset: int, size: int) -> Entry:
        """Add an entry for an id that ``get`` just reported absent."""
        self.ensure_room(1)
        hk.put_one(self._slots, self._meta, msg_id, ref, file, offset, size)
        return (ref, file, offset, size)

    def put(self, msg_id: bytes, entry: Entry) -> None:
        """Replace the entry of an id ``get`` just returned (or add it)."""
        self.ensure_room(1)
        hk.put_one(self._slots, self._meta, msg_id, *entry)

    def write_one(self, msg_id: bytes, file: int, offset: int,
                  size: int) -> tuple[int, int, int, int, int]:
        """A write of one id: enter it if absent, count one more reference if it has some;
        ``(status, ref, file, offset, size)`` (``hash_kernels.write_one``)."""
        if self._room > 0:
            self._room -= 1
        else:
            self.ensure_room(1)
        return hk.write_one(self._slots, self._meta, msg_id, file, offset, size)

    def set_ref(self, msg_id: bytes, ref: int) -> None:
        """Set the count of an id ``get`` just returned."""
        hk.set_ref_one(self._slots, msg_id, ref)

    def delete(self, msg_id: bytes) -> None:
        """Drop an entry previously returned by ``get``."""
        hk.delete_one(self._slots, self._meta, msg_id)

    def delete_if_at(self, msg_id: bytes, file: int, offset: int) -> bool:
        """Drop the entry only if it still points at (file, offset); True if dropped."""
        e = self.get(msg_id)
        if e is not None and e[FILE] == file and e[OFFSET] == offset:
            return hk.delete_one(self._slots, self._meta, msg_id)
        return False

    # ------------------------------------------------------------------ batch updates
    # ``keys`` is ``keys_of`` the batch's ids joined; the caller prefetched those ids.

    def insert_new(self, keys: np.ndarray, file: np.ndarray, offset: np.ndarray,
                   size: np.ndarray) -> int:
        """Enter new ids with one reference each, all or nothing: 0 done, 1 an id is known,
        2 an id comes twice (``hash_kernels.insert_new``)."""
        self.ensure_room(len(keys))
        return hk.insert_new(self._slots, self._meta, keys, file, offset, size)

    def incref_known(self, keys: np.ndarray) -> bool:
        """One more reference to each id if all are stored with a count above 0; else
        nothing changes and False."""
        return hk.incref_known(self._slots, keys)

    def insert_absent(self, keys: np.ndarray, ref: np.ndarray, file: int, offset: np.ndarray,
                      size: np.ndarray) -> np.ndarray:
        """Enter the ids not known yet, in order; returns which were entered (bool)."""
        self.ensure_room(len(keys))
        inserted = np.empty(len(keys), dtype=np.bool_)
        hk.insert_absent(self._slots, self._meta, keys, ref, file, offset, size, inserted)
        return inserted

    def decref(self, keys: np.ndarray, mark: tuple[int, int] | None,
               locked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Drop one reference per id: (status, freed file, freed size) per id
        (``hash_kernels.decref``)."""
        n = len(keys)
        status = np.empty(n, dtype=np.int8)
        freed_file = np.empty(n, dtype=np.int64)
        freed_size = np.empty(n, dtype=np.int64)
        mf, mo = (-1, 0) if mark is None else mark
        hk.decref(self._slots, keys, mf, mo, locked, status, freed_file, freed_size)
        return status, freed_file, freed_size

    def refs_at(self, msg_ids: list[bytes], file: int, offsets: np.ndarray) -> np.ndarray:
        """Per id: its count if its entry points at (file, offsets[j]), else -1."""
        self.prefetch(msg_ids)
        out = np.empty(len(msg_ids), dtype=np.int64)
        if msg_ids:
            hk.refs_at(self._slots, keys_of(b"".join(msg_ids)), file, offsets, out)
        return out

    def delete_at(self, msg_ids: list[bytes], file: int, offsets: np.ndarray) -> int:
        """Drop each id's entry still pointing at (file, offsets[j]); returns how many."""
        self.prefetch(msg_ids)
        if not msg_ids:
            return 0
        return hk.delete_at(self._slots, self._meta, keys_of(b"".join(msg_ids)), file, offsets)

    def relocate(self, msg_ids: list[bytes], file: int, offsets: np.ndarray, to_file: int,
                 to_offsets: np.ndarray) -> None:
        """Point each id's entry found at (file, offsets[j]) at (to_file, to_offsets[j])."""
        self.prefetch(msg_ids)
        if msg_ids:
            hk.relocate(self._slots, keys_of(b"".join(msg_ids)), file, offsets, to_file,
                        to_offsets)

    # ------------------------------------------------------------------ bulk views

    def _table_columns(self) -> tuple[np.ndarray, np.ndarray]:
        n = int(self._meta[hk.ENTRIES])
        keys = np.empty((n, 2), dtype=KEY_DTYPE)
        vals = np.empty((n, 4), dtype=np.int64)
        hk.extract(self._slots, keys, vals)
        return keys.view(ID_DTYPE).reshape(n), vals

    def items(self) -> Iterator[tuple[bytes, Entry]]:
        """Every entry (the base ones without moving them into the table)."""
        raw, ref, file, off, size = self.columns()
        for i, e in enumerate(zip(ref.tolist(), file.tolist(), off.tolist(), size.tolist())):
            yield raw[i * 16:i * 16 + 16], e

    def columns(self, live_only: bool = False):
        """(ids_raw sorted, ref, file, offset, size) numpy columns of every entry."""
        ids, v = self._table_columns()
        parts_ids = [ids]
        parts = [v]
        if self._base_left:
            keep = ~self._taken
            parts_ids.append(self._base_ids[keep])
            parts.append(np.stack([self._base_ref[keep].astype(np.int64),
                                   self._base_file[keep].astype(np.int64),
                                   self._base_off[keep].astype(np.int64),
                                   self._base_size[keep].astype(np.int64)], axis=1))
        ids = np.concatenate(parts_ids)
        v = np.concatenate(parts)
        if live_only:
            live = v[:, REF] > 0
            ids, v = ids[live], v[live]
        order = np.argsort(ids, kind="stable")   # timsort: faster than quicksort over ids
        ids, v = ids[order], v[order]             # that share long prefixes (counters)
        return ids.tobytes(), v[:, REF], v[:, FILE], v[:, OFFSET], v[:, SIZE]

    def live_count(self) -> int:
        """Entries with at least one reference."""
        n = int(np.count_nonzero(self._table_columns()[1][:, REF] > 0))
        if self._base_left:
            n += int(np.count_nonzero(self._base_ref[~self._taken] > 0))
        return n


class _Standby:
    """A zeroed table of ``capacity`` slots made, and every page of it touched, on a thread
    of its own: the next growth takes it (``take``) instead of faulting in fresh memory on
    the server thread. Until then it is the memory the growth would take anyway (briefly
    earlier: from half way to the growth, not from the growth on)."""

    __slots__ = ("capacity", "table", "_thread")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.table: np.ndarray | None = None
        self._thread = threading.Thread(target=self._make, name="refstore-index-grow",
                                        daemon=True)
        self._thread.start()

    def _make(self) -> None:
        table = np.zeros((self.capacity, 4), dtype=np.uint64)
        hk.touch_pages(table)
        self.table = table

    def take(self, capacity: int) -> np.ndarray | None:
        """The prepared table if it has ``capacity`` slots (waiting for it to be ready),
        else None."""
        if capacity != self.capacity:
            return None
        self._thread.join()
        return self.table


def warm() -> None:
    """Load (or compile) every hash-table kernel with the argument types the store passes,
    so no client's first read or batch waits for it (0.1–0.5 s once per process from numba's
    cache). The store's server thread calls it as it starts; ``strata warm`` too."""
    from . import snapshot
    idx = MessageIndex()
    ids = [bytes([k]) * 16 for k in range(4)]
    raw = b"".join(ids)
    cols = snapshot.decode_index(snapshot.encode_index(
        raw[:32], np.ones(2, dtype=np.int64), np.zeros(2, dtype=np.int64),
        np.array([0, 30], dtype=np.int64), np.full(2, 30, dtype=np.int64)))
    idx.load_base(*cols)
    idx.get(ids[0])                                   # get_one, put_many (base entry)
    idx.prefetch(ids)
    offs = np.array([60, 90], dtype=np.int64)
    one = np.ones(2, dtype=np.int64)
    idx.insert_new(keys_of(b"".join(ids[2:])), one, offs, one * 30)
    idx.incref_known(keys_of(raw))
    idx.decref(keys_of(raw), None, np.zeros(1, dtype=np.int64))
    idx.refs_at(ids, 0, offs[[0, 1, 0, 1]])
    idx.relocate(ids, 0, offs[[0, 1, 0, 1]], 1, offs[[0, 1, 0, 1]])
    idx.delete_at(ids, 1, offs[[0, 1, 0, 1]])
    idx.insert_absent(keys_of(raw), one[[0, 1, 0, 1]], 2, offs[[0, 1, 0, 1]], one[[0] * 4])
    idx.put(ids[0], (1, 2, 3, 40))
    idx.write_one(ids[0], 1, 2, 40)
    idx.write_one(bytes(range(16)), 1, 2, 40)
    idx.set_ref(ids[0], 0)
    idx.insert(bytes(16), 1, 2, 3, 40)
    idx.delete(ids[1])
    idx.ensure_room(len(idx._slots))                 # rehash
    hk.touch_pages(np.zeros((128, 4), dtype=np.uint64))
    idx.columns()
