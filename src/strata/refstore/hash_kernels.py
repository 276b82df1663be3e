"""Compiled open-addressing hash table of the ref store's message index (numba).

The table is one ``(capacity, 4)`` uint64 array, ``capacity`` a power of two. A slot holds:

    [0] the id's first 8 bytes, [1] its last 8 bytes (both read little-endian),
    [2] ref count | file number << 32,   [3] offset | total record size << 32

A record's size is never 0 (every record carries ``OVERHEAD`` bytes of framing), so
``slot[3] == 0`` marks a slot that holds no entry: empty if ``slot[2] == 0``, a tombstone (an
entry was deleted there; probing goes on past it) if ``slot[2] == 1``. Offsets, sizes, file
numbers and counts are all below 2**32: a data file is at most 4 GiB - 1 (``_check_config``)
and the saved index stores the other two as u32 (docs/format.md, section 11).

``meta`` is an int64 array ``[entries, used]``; ``used`` counts entries plus tombstones. The
caller keeps ``used`` at most 3/4 of the capacity (``ensure_room`` in ``index.py``), so every
probe meets an empty slot. Probing is linear from a 64-bit mix of both halves of the id, so
ids that differ only in a few bytes (counters, timestamps) still spread evenly.

Every function is a pure function over these arrays, releases the GIL and does a whole batch
in one call: the Python side pays one dispatch per batch, not one dict operation per id.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xFF51AFD7ED558CCD)
_M3 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)
_ZERO = np.uint64(0)
_TOMB = np.uint64(1)
_ONE = np.uint64(1)

ENTRIES, USED = 0, 1

# decref statuses (one per id of a batch of removes)
DROPPED, ABSENT, PAST_MARK, PARKED = 0, 1, 2, 3


@njit(cache=True, nogil=True, inline="always")
def _hash(k0, k1):
    h = k0 ^ (k1 * _M1)
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    h *= _M3
    h ^= h >> _S33
    return h


@njit(cache=True, nogil=True, inline="always")
def _find(slots, k0, k1):
    """Slot of the id, or -1."""
    mask = slots.shape[0] - 1
    i = np.int64(_hash(k0, k1) & np.uint64(mask))
    while True:
        if slots[i, 3] != _ZERO:
            if slots[i, 0] == k0 and slots[i, 1] == k1:
                return i
        elif slots[i, 2] == _ZERO:
            return -1
        i = (i + 1) & mask


@njit(cache=True, nogil=True, inline="always")
def _find_or_free(slots, k0, k1):
    """(slot, True) of the id if present, else (the slot to insert it at, False)."""
    mask = slots.shape[0] - 1
    i = np.int64(_hash(k0, k1) & np.uint64(mask))
    free = -1
    while True:
        if slots[i, 3] != _ZERO:
            if slots[i, 0] == k0 and slots[i, 1] == k1:
                return i, True
        elif slots[i, 2] == _ZERO:
            return (i if free < 0 else free), False
        elif free < 0:
            free = i
        i = (i + 1) & mask


@njit(cache=True, nogil=True, inline="always")
def _store(slots, meta, i, k0, k1, ref, file, off, size):
    """Put a new entry in free slot ``i``."""
    if slots[i, 2] == _ZERO:
        meta[USED] += 1          # an empty slot, not a tombstone
    meta[ENTRIES] += 1
    slots[i, 0] = k0
    slots[i, 1] = k1
    slots[i, 2] = np.uint64(ref) | (np.uint64(file) << _S32)
    slots[i, 3] = np.uint64(off) | (np.uint64(size) << _S32)


@njit(cache=True, nogil=True, inline="always")
def _kill(slots, meta, i):
    slots[i, 2] = _TOMB
    slots[i, 3] = _ZERO
    meta[ENTRIES] -= 1


@njit(cache=True, nogil=True, inline="always")
def _key_of(m):
    """The two halves of a 16-byte id given as ``bytes``."""
    k0 = _ZERO
    k1 = _ZERO
    for b in range(8):
        k0 |= np.uint64(m[b]) << np.uint64(8 * b)
        k1 |= np.uint64(m[8 + b]) << np.uint64(8 * b)
    return k0, k1


@njit(cache=True, nogil=True, inline="always")
def _slot_of(slots, m):
    """Slot of id ``m`` (bytes), or -1."""
    k0, k1 = _key_of(m)
    return _find(slots, k0, k1)


# ---------------------------------------------------------------------- one id (bytes)

@njit(cache=True, nogil=True)
def get_one(slots, m):
    """(ref, file, offset, size) of id ``m`` (bytes), ref -1 if absent."""
    i = _slot_of(slots, m)
    if i < 0:
        return (-1, 0, 0, 0)
    a = slots[i, 2]
    b = slots[i, 3]
    return (np.int64(a & _LOW), np.int64(a >> _S32), np.int64(b & _LOW), np.int64(b >> _S32))


@njit(cache=True, nogil=True)
def put_one(slots, meta, m, ref, file, off, size):
    """Insert or replace the entry of id ``m`` (the caller made room for one)."""
    k0, k1 = _key_of(m)
    i, found = _find_or_free(slots, k0, k1)
    if found:
        slots[i, 2] = np.uint64(ref) | (np.uint64(file) << _S32)
        slots[i, 3] = np.uint64(off) | (np.uint64(size) << _S32)
    else:
        _store(slots, meta, i, k0, k1, ref, file, off, size)


@njit(cache=True, nogil=True)
def write_one(slots, meta, m, file, off, size):
    """One write of id ``m``: ``(status, ref, file, offset, size)``. Status 0: the id was
    absent and is now entered with one reference at (``file``, ``off``, ``size``), where the
    caller appends it; 1: it was stored with references and has one more; 2: it is stored at
    count 0 (returned, nothing changed: the caller decides). Room for one made by the caller."""
    k0, k1 = _key_of(m)
    i, found = _find_or_free(slots, k0, k1)
    if not found:
        _store(slots, meta, i, k0, k1, 1, file, off, size)
        return (0, 1, file, off, size)
    a = slots[i, 2]
    b = slots[i, 3]
    if (a & _LOW) != _ZERO:
        slots[i, 2] = a + _ONE
        return (1, np.int64(a & _LOW) + 1, np.int64(a >> _S32), np.int64(b & _LOW),
                np.int64(b >> _S32))
    return (2, 0, np.int64(a >> _S32), np.int64(b & _LOW), np.int64(b >> _S32))


@njit(cache=True, nogil=True)
def set_ref_one(slots, m, ref):
    """Set the count of id ``m``'s entry; False if it has none."""
    i = _slot_of(slots, m)
    if i >= 0:
        slots[i, 2] = (slots[i, 2] & ~_LOW) | np.uint64(ref)
    return i >= 0


@njit(cache=True, nogil=True)
def delete_one(slots, meta, m):
    """Drop the entry of id ``m``; True if there was one."""
    i = _slot_of(slots, m)
    if i >= 0:
        _kill(slots, meta, i)
    return i >= 0


# ---------------------------------------------------------------------- batches (keys: (n, 2))

@njit(cache=True, nogil=True)
def put_many(slots, meta, keys, ref, file, off, size):
    """Insert or replace one entry per row of ``keys`` (room made by the caller)."""
    for j in range(keys.shape[0]):
        k0 = keys[j, 0]
        k1 = keys[j, 1]
        i, found = _find_or_free(slots, k0, k1)
        if found:
            slots[i, 2] = np.uint64(ref[j]) | (np.uint64(file[j]) << _S32)
            slots[i, 3] = np.uint64(off[j]) | (np.uint64(size[j]) << _S32)
        else:
            _store(slots, meta, i, k0, k1, ref[j], file[j], off[j], size[j])


@njit(cache=True, nogil=True)
def insert_new(slots, meta, keys, file, off, size):
    """Enter a batch of new ids with one reference each, all or nothing.

    Returns 0 when done; 1 when an id is already in the table, 2 when an id comes twice in the
    batch — in both cases the table is as before the call."""
    n = keys.shape[0]
    for j in range(n):
        if _find(slots, keys[j, 0], keys[j, 1]) >= 0:
            return 1
    for j in range(n):
        k0 = keys[j, 0]
        k1 = keys[j, 1]
        i, found = _find_or_free(slots, k0, k1)
        if found:                    # a twin earlier in this batch: undo this batch
            for u in range(j):
                _kill(slots, meta, _find(slots, keys[u, 0], keys[u, 1]))
            return 2
        _store(slots, meta, i, k0, k1, 1, file[j], off[j], size[j])
    return 0


@njit(cache=True, nogil=True)
def insert_absent(slots, meta, keys, ref, file, off, size, inserted):
    """Enter each id not in the table yet (a later copy of an id loses); ``inserted[j]`` says
    which were entered."""
    for j in range(keys.shape[0]):
        k0 = keys[j, 0]
        k1 = keys[j, 1]
        i, found = _find_or_free(slots, k0, k1)
        inserted[j] = not found
        if not found:
            _store(slots, meta, i, k0, k1, ref[j], file, off[j], size[j])


@njit(cache=True, nogil=True)
def incref_known(slots, keys):
    """Add one reference to each id, all or nothing: False (nothing changed) unless every id
    has an entry with a count above 0 (a fan-out write of stored messages)."""
    for j in range(keys.shape[0]):
        i = _find(slots, keys[j, 0], keys[j, 1])
        if i < 0 or (slots[i, 2] & _LOW) == _ZERO:
            return False
    for j in range(keys.shape[0]):
        i = _find(slots, keys[j, 0], keys[j, 1])
        slots[i, 2] += _ONE
    return True


@njit(cache=True, nogil=True)
def decref(slots, keys, mark_file, mark_off, locked, status, freed_file, freed_size):
    """Drop one reference per id, in order (a batch of one client's removes).

    ``status[j]``: DROPPED, ABSENT (no entry, or count already 0), PAST_MARK (the entry is at or
    after the dying client's mark ``(mark_file, mark_off)``; ``mark_file`` -1: no mark) or
    PARKED (its file is in ``locked``: the GC holds it; ``freed_file[j]`` is that file). For a
    count that reached 0, ``freed_file[j]``/``freed_size[j]`` name the bytes that stopped
    being live (else -1/0)."""
    for j in range(keys.shape[0]):
        freed_file[j] = -1
        freed_size[j] = 0
        i = _find(slots, keys[j, 0], keys[j, 1])
        if i < 0:
            status[j] = ABSENT
            continue
        a = slots[i, 2]
        ref = np.int64(a & _LOW)
        number = np.int64(a >> _S32)
        if ref == 0:
            status[j] = ABSENT
            continue
        b = slots[i, 3]
        off = np.int64(b & _LOW)
        if mark_file >= 0 and (number > mark_file or (number == mark_file and off >= mark_off)):
            status[j] = PAST_MARK
            continue
        parked = False
        for f in locked:
            if f == number:
                parked = True
        if parked:
            status[j] = PARKED
            freed_file[j] = number
            continue
        status[j] = DROPPED
        slots[i, 2] = a - _ONE
        if ref == 1:
            freed_file[j] = number
            freed_size[j] = np.int64(b >> _S32)


@njit(cache=True, nogil=True)
def refs_at(slots, keys, file, off, out):
    """``out[j]``: the count of id ``j`` if its entry points at (``file``, ``off[j]``), else -1."""
    for j in range(keys.shape[0]):
        out[j] = -1
        i = _find(slots, keys[j, 0], keys[j, 1])
        if i >= 0 and np.int64(slots[i, 2] >> _S32) == file and \
                np.int64(slots[i, 3] & _LOW) == off[j]:
            out[j] = np.int64(slots[i, 2] & _LOW)


@njit(cache=True, nogil=True)
def delete_at(slots, meta, keys, file, off):
    """Drop each id's entry that still points at (``file``, ``off[j]``); returns how many."""
    n = 0
    for j in range(keys.shape[0]):
        i = _find(slots, keys[j, 0], keys[j, 1])
        if i >= 0 and np.int64(slots[i, 2] >> _S32) == file and \
                np.int64(slots[i, 3] & _LOW) == off[j]:
            _kill(slots, meta, i)
            n += 1
    return n


@njit(cache=True, nogil=True)
def relocate(slots, keys, file, off, to_file, to_off):
    """Point each id's entry found at (``file``, ``off[j]``) at (``to_file``, ``to_off[j]``)."""
    for j in range(keys.shape[0]):
        i = _find(slots, keys[j, 0], keys[j, 1])
        if i >= 0 and np.int64(slots[i, 2] >> _S32) == file and \
                np.int64(slots[i, 3] & _LOW) == off[j]:
            slots[i, 2] = (slots[i, 2] & _LOW) | (np.uint64(to_file) << _S32)
            slots[i, 3] = (slots[i, 3] & ~_LOW) | np.uint64(to_off[j])


@njit(cache=True, nogil=True)
def base_find(base, m):
    """Row of id ``m`` (bytes) in ``base`` ((n, 16) uint8, rows in byte-wise order: the saved
    index), or -1: a binary search without numpy's per-call conversion of the key."""
    lo = 0
    hi = base.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        c = 0
        for b in range(16):
            x = base[mid, b]
            y = m[b]
            if x != y:
                c = -1 if x < y else 1
                break
        if c < 0:
            lo = mid + 1
        elif c > 0:
            hi = mid
        else:
            return mid
    return -1


# ---------------------------------------------------------------------- whole table

@njit(cache=True, nogil=True)
def rehash(old, new, meta):
    """Move every entry of ``old`` into the empty table ``new`` (tombstones dropped)."""
    mask = new.shape[0] - 1
    n = 0
    for s in range(old.shape[0]):
        if old[s, 3] != _ZERO:
            i = np.int64(_hash(old[s, 0], old[s, 1]) & np.uint64(mask))
            while new[i, 3] != _ZERO:
                i = (i + 1) & mask
            new[i, 0] = old[s, 0]
            new[i, 1] = old[s, 1]
            new[i, 2] = old[s, 2]
            new[i, 3] = old[s, 3]
            n += 1
    meta[ENTRIES] = n
    meta[USED] = n


@njit(cache=True, nogil=True)
def touch_pages(slots):
    """Write a zero into every 4 KiB page of a zeroed table (128 slots each), so the OS maps
    its memory now rather than at the first inserts."""
    for s in range(0, slots.shape[0], 128):
        slots[s, 0] = _ZERO


@njit(cache=True, nogil=True)
def extract(slots, keys, vals):
    """Copy every entry out: ``keys`` (n, 2) uint64, ``vals`` (n, 4) int64 (ref, file,
    offset, size), in slot order; returns n."""
    n = 0
    for s in range(slots.shape[0]):
        if slots[s, 3] != _ZERO:
            keys[n, 0] = slots[s, 0]
            keys[n, 1] = slots[s, 1]
            vals[n, 0] = np.int64(slots[s, 2] & _LOW)
            vals[n, 1] = np.int64(slots[s, 2] >> _S32)
            vals[n, 2] = np.int64(slots[s, 3] & _LOW)
            vals[n, 3] = np.int64(slots[s, 3] >> _S32)
            n += 1
    return n
