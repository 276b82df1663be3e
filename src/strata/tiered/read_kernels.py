"""The tier reader's compiled check (numba): a run of a chunk's ``.log`` records against the
units of its ``.cq`` object, with the local reader's kernel (``record_kernels.check_at``).

A chunk's records keep the commit-log offset of the log that wrote them (docs/format.md,
section 14), which its units do not hold: each record's own ``physical_offset`` is read first
(where a header fits) and must lie inside the chunk's ``[first_phys, end_phys)``. Then
``check_at`` checks magic, lengths at both ends, field lengths adding up, that offset, the
CRC32C, and that the record is the unit's message (queue id, queue offset, topic bytes); a
record that passes all that but is not of its unit's size, or carries an offset outside the
chunk, is OTHER. Imported on first use, as the record kernels are.
"""

from __future__ import annotations

from numba import njit

from strata.format import record as rec
from strata.format.record_kernels import (
    F_BODY_END, F_HOSTS_AT, F_TOTAL, GOOD, OTHER, check_at, load_i64)

_HEADER = rec.HEADER_SIZE
_P_PHYS = rec.POS_PHYSICAL_OFFSET


@njit(cache=True, nogil=True)
def check_units(data, offsets, sizes, shift, lo_phys, hi_phys, topic, queue_id, queue_offsets,
                pos, phys, fields, status):
    """Check the records of units ``offsets``/``sizes`` (positions in the ``.log`` object;
    byte ``p`` of the object is ``data[p + shift]``) as messages ``queue_offsets`` of
    ``queue_id`` and ``topic``, CRC32C included, into ``status`` (GOOD, OTHER, NO_RECORD,
    CRC_MISMATCH) and ``fields`` (positions in ``data``); ``pos`` and ``phys`` are the
    caller's scratch (each record's position in ``data`` and the offset it carries).
    Returns (how many are GOOD, the bytes of their variable parts: hosts to body end)."""
    base = data.ctypes.data
    limit = len(data)
    n = len(offsets)
    for i in range(n):
        p = offsets[i] + shift
        pos[i] = p
        phys[i] = load_i64(base + p + _P_PHYS) if p >= 0 and p + _HEADER <= limit else -1
    good, nbytes = check_at(data, pos, phys, limit, True, topic, queue_id, queue_offsets,
                            fields, status)
    for i in range(n):
        if status[i] == GOOD and (fields[F_TOTAL, i] != sizes[i] or phys[i] < lo_phys or
                                  phys[i] >= hi_phys):
            status[i] = OTHER
            good -= 1
            nbytes -= fields[F_BODY_END, i] - fields[F_HOSTS_AT, i]
    return good, nbytes
