"""Batch encoding of ref-store records (numba): a client's whole batch in one compiled call.

A batch arrives as the 16-byte ids joined back to back, the address of each body (read in
place: ``body_addresses``) and the bodies' lengths. ``encode_records`` writes records
``first`` to ``last - 1`` into the current file's write buffer, each as
``strata.format.refstore_record`` lays it out (size, id, body, CRC32C of the first three, end
marker: docs/format.md, section 11), computing the CRCs on the CPU's CRC instruction over the
bytes it has just written (they are in cache), three records' chains side by side. It
replaces four Python-level ``struct`` packs, two ``crc32c`` calls and three buffer appends per
message with one call per batch, and releases the GIL while it runs.

Pure functions over buffers: no file I/O, no threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format.record_kernels import crc3, crc32c_at, memcpy
from strata.format.record_objects import BYTES_DATA_AT
from strata.format.refstore_record import END_MARKER, HEADER_SIZE, MSG_ID_SIZE, OVERHEAD

_ID = MSG_ID_SIZE


@njit(cache=True, nogil=True)
def _put_u32(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF
    out[p + 2] = (v >> 16) & 0xFF
    out[p + 3] = (v >> 24) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _put_record(out, base_out, p, id_at, body_at, n):
    """A record at ``p`` but its CRC (the caller fills that in); returns where it ends."""
    _put_u32(out, p, np.uint32(n + _ID))
    memcpy(base_out + p + 4, id_at, _ID)
    memcpy(base_out + p + HEADER_SIZE, body_at, n)
    out[p + HEADER_SIZE + n + 4] = END_MARKER
    return p + n + OVERHEAD


@njit(cache=True, nogil=True)
def encode_records(out, at, ids, addrs, lens, first, last):
    """Write records ``first..last-1`` of a batch into ``out`` (uint8) from byte ``at``.

    ``ids``: the batch's ids joined (uint8, 16 bytes each); ``addrs``: int64 address of each
    body's first byte (``body_addresses``: alive for the call); ``lens``: int64 body lengths.
    Three records are written, then their CRCs taken as three chains in one loop (``crc3``:
    the CRC instruction's latency overlapped, ~3.5x a record at a time) while their bytes are
    in cache. Returns the position after the last record. The caller has made room for them.
    """
    base_out = out.ctypes.data
    base_ids = ids.ctypes.data
    p = at
    i = first
    while i + 3 <= last:
        n0 = lens[i]
        n1 = lens[i + 1]
        n2 = lens[i + 2]
        p0 = p
        p1 = _put_record(out, base_out, p0, base_ids + _ID * i, addrs[i], n0)
        p2 = _put_record(out, base_out, p1, base_ids + _ID * (i + 1), addrs[i + 1], n1)
        p = _put_record(out, base_out, p2, base_ids + _ID * (i + 2), addrs[i + 2], n2)
        c0, c1, c2 = crc3(base_out + p0, HEADER_SIZE + n0, base_out + p1, HEADER_SIZE + n1,
                          base_out + p2, HEADER_SIZE + n2)
        _put_u32(out, p0 + HEADER_SIZE + n0, c0)
        _put_u32(out, p1 + HEADER_SIZE + n1, c1)
        _put_u32(out, p2 + HEADER_SIZE + n2, c2)
        i += 3
    while i < last:
        n0 = lens[i]
        p0 = p
        p = _put_record(out, base_out, p0, base_ids + _ID * i, addrs[i], n0)
        _put_u32(out, p0 + HEADER_SIZE + n0, crc32c_at(base_out + p0, HEADER_SIZE + n0))
        i += 1
    return p


# The kernel copies each body from where it lies (``record_objects.BYTES_DATA_AT``: a bytes
# object's first byte from its id(), checked by that module's probe at import) instead of from
# one more copy of them all joined: a 1 MiB join per 1,000 KiB-bodies cost as much as the
# encoding. ``IN_PLACE`` False joins them and addresses the join (tests take both ways).
IN_PLACE = True


def body_addresses(bodies: list, sizes: np.ndarray) -> tuple[np.ndarray, object]:
    """The ``addrs`` argument of ``encode_records`` for a batch of ``bytes`` bodies, and what
    must stay alive while it is used (the list itself, or the join made in its place)."""
    n = len(bodies)
    if IN_PLACE:
        return np.fromiter(map(id, bodies), dtype=np.int64, count=n) + BYTES_DATA_AT, bodies
    joined = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    addrs = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=addrs[1:])
    if len(joined):
        addrs += joined.ctypes.data
    return addrs, joined


def warm() -> None:
    """Load the compiled kernel now (from numba's cache: 0.1–0.9 s once per process), so the
    first batch does not wait for it. The store's server thread calls it as it starts."""
    empty = np.empty(0, dtype=np.uint8)
    none = np.zeros(0, dtype=np.int64)
    encode_records(empty, 0, empty, none, none, 0, 0)
