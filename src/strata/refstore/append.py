"""A batch of new messages appended in one compiled call: index insert, encode, copy.

The server thread's common case is a client's batch of ids the store has never seen that
fits in the current file. ``append_new`` does all of it in one call that releases the GIL:
it reads each id and body where it lies (the batch's two lists, walked through CPython's
list and bytes layouts), enters each id in the index's hash table (``hash_kernels``) at the
offset its record will have, and encodes the records into the current file's write buffer
(``encode.encode_records``: the bytes on disk are the same). Before it, the Python side
did a numpy plan of offsets, a join of the ids, an array of body addresses and two passes
over the table; side by side that was ~0.13 µs a message of the server thread's ~0.65.

The lists and their items are the store's own (``StoreClient.write_batch`` builds them; the
write-back cache only holds them), so nothing changes them while the GIL is released.
The layouts read are ``record_objects``' (checked there at import: ``LISTS_OF_BYTES``); where
they do not hold, ``IN_PLACE`` is False and the store takes its general path.

Pure over memory it is given: no file I/O, no threads.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from strata.format.record_kernels import load_i64, load_u64
from strata.format.record_objects import (BYTES_DATA_AT, LIST_ITEMS_AT, LISTS_OF_BYTES,
                                          VAR_SIZE_AT)
from strata.format.refstore_record import OVERHEAD

from . import encode
from .encode import encode_records
from .hash_kernels import _find, _find_or_free, _kill, _store

# outcomes of ``append_new`` other than the bytes written (>= 0)
KNOWN = -1            # an id is stored already, or comes twice: nothing was changed

# (little-endian too: the table's keys are the ids' halves read little-endian, ``index.py``)
IN_PLACE = encode.IN_PLACE and sys.byteorder == "little" and LISTS_OF_BYTES


@njit(cache=True, nogil=True)
def append_new(slots, meta, ids_at, bodies_at, first, last, out, at, file, off):
    """Append messages ``first..last-1`` of a batch: ids from the list at address ``ids_at``
    (16-byte ``bytes``), bodies from the list at ``bodies_at`` (``bytes``), records written
    into ``out`` (uint8) from byte ``at``, the first at file offset ``off`` of data file
    ``file``.

    Each id is entered in the table (``slots``/``meta``, room made by the caller) with one
    reference at its record's place; if one is in the table already or comes twice, those
    entered are taken out again and ``KNOWN`` is returned (the table holds the same entries;
    bytes may have been written past ``at``, which the caller does not count). Else returns
    the bytes written; the caller has made room for them."""
    n = last - first
    keys = np.empty((n, 2), dtype=np.uint64)
    addrs = np.empty(n, dtype=np.int64)
    lens = np.empty(n, dtype=np.int64)
    id_items = load_i64(ids_at + LIST_ITEMS_AT) + 8 * first
    body_items = load_i64(bodies_at + LIST_ITEMS_AT) + 8 * first
    for j in range(n):
        m = load_i64(id_items + 8 * j) + BYTES_DATA_AT
        k0 = load_u64(m)
        k1 = load_u64(m + 8)
        b = load_i64(body_items + 8 * j)
        size = load_i64(b + VAR_SIZE_AT)
        i, found = _find_or_free(slots, k0, k1)
        if found:                      # known, or a twin earlier in the batch: undo
            for u in range(j):
                _kill(slots, meta, _find(slots, keys[u, 0], keys[u, 1]))
            return KNOWN
        _store(slots, meta, i, k0, k1, 1, file, off, size + OVERHEAD)
        off += size + OVERHEAD
        keys[j, 0] = k0
        keys[j, 1] = k1
        addrs[j] = b + BYTES_DATA_AT
        lens[j] = size
    # the keys hold the ids' bytes as they were read (little-endian halves): the encoder
    # copies each id from there
    return encode_records(out, at, keys, addrs, lens, 0, n) - at


def warm() -> None:
    """Load the compiled kernel now (numba's cache), with the argument types the store uses."""
    slots = np.zeros((8, 4), dtype=np.uint64)
    meta = np.zeros(2, dtype=np.int64)
    ids = [bytes(16)]
    bodies = [b""]
    out = np.empty(64, dtype=np.uint8)
    if IN_PLACE:
        append_new(slots, meta, id(ids), id(bodies), 0, 0, out, 0, 0, 0)
