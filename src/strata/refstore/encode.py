"""Batch encoding of ref-store records (numba): a client's whole batch in one compiled call.

A batch arrives as two joined byte strings — the 16-byte ids back to back and the bodies back
to back — plus the bodies' start offsets. ``encode_records`` writes records ``first`` to
``last - 1`` into the current file's write buffer, each as ``strata.format.refstore_record``
lays it out (size, id, body, CRC32C of the first three, end marker: docs/format.md, section 11),
computing each CRC on the CPU's CRC instruction over the bytes it has just written (they are in
cache). It replaces four Python-level ``struct`` packs, two ``crc32c`` calls and three buffer
appends per message with one call per batch, and releases the GIL while it runs.

Pure functions over buffers: no file I/O, no threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format.record_kernels import crc32c_at, memcpy
from strata.format.refstore_record import END_MARKER, HEADER_SIZE, MSG_ID_SIZE, OVERHEAD

_ID = MSG_ID_SIZE


@njit(cache=True, nogil=True)
def _put_u32(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF
    out[p + 2] = (v >> 16) & 0xFF
    out[p + 3] = (v >> 24) & 0xFF


@njit(cache=True, nogil=True)
def encode_records(out, at, ids, bodies, starts, first, last):
    """Write records ``first..last-1`` of a batch into ``out`` (uint8) from byte ``at``.

    ``ids``: the batch's ids joined (uint8, 16 bytes each); ``bodies``: its bodies joined
    (uint8); ``starts``: int64 offsets into ``bodies``, one more than there are messages.
    Returns the position after the last record. The caller has made room for them.
    """
    base_out = out.ctypes.data
    base_ids = ids.ctypes.data
    base_bodies = bodies.ctypes.data
    p = at
    for i in range(first, last):
        s = starts[i]
        n = starts[i + 1] - s
        _put_u32(out, p, np.uint32(n + _ID))
        memcpy(base_out + p + 4, base_ids + _ID * i, _ID)
        memcpy(base_out + p + HEADER_SIZE, base_bodies + s, n)
        crc = crc32c_at(base_out + p, HEADER_SIZE + n)
        _put_u32(out, p + HEADER_SIZE + n, crc)
        out[p + HEADER_SIZE + n + 4] = END_MARKER
        p += n + OVERHEAD
    return p


def batch_bodies(bodies: list, lens) -> tuple[np.ndarray, np.ndarray]:
    """The ``bodies`` and ``starts`` arguments of ``encode_records`` for a batch."""
    starts = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    return np.frombuffer(b"".join(bodies), dtype=np.uint8), starts


def warm() -> None:
    """Load the compiled kernel now (from numba's cache: 0.1–0.9 s once per process), so the
    first batch does not wait for it. The store's server thread calls it as it starts."""
    empty = np.empty(0, dtype=np.uint8)
    encode_records(empty, 0, empty, empty, np.zeros(1, dtype=np.int64), 0, 0)
