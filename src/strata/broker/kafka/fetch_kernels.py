"""Compiled loops of a Fetch's store side (numba): how many of a store read's messages fit
the partition's byte budget, and the record table of plain messages (value and timestamp
only) straight from the store's field table, each in one pass instead of a dozen numpy
calls over the batch (those calls were ~15 % of the broker's CPU a consumed message).

The field table's rows are ``strata.format.record_table``'s, the record table's
``batch_layout``'s. Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

from numba import njit

from strata.broker.kafka.batch_layout import (
    R_TIMESTAMP, R_OFFSET_DELTA, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN, R_HEADER_FIRST,
    R_HEADER_COUNT, R_HEADERS_AT)
from strata.format.record_table import (F_PROPS_AT, F_BODY_AT, F_BODY_END, F_BORN_TS,
                                        F_STORE_TS)


@njit(cache=True, nogil=True)
def fitting(fields, size, limit, overhead, out):
    """Of the messages of ``fields`` (a field table), how many fit when ``size`` bytes are
    taken and ``limit`` is the budget, each counted as its body plus ``overhead``: the
    count into ``out[0]``, the bytes taken after them into ``out[1]``."""
    n = fields.shape[1]
    take = 0
    for i in range(n):
        grown = size + fields[F_BODY_END, i] - fields[F_BODY_AT, i] + overhead
        if grown > limit:
            break
        size = grown
        take += 1
    out[0] = take
    out[1] = size


@njit(cache=True, nogil=True)
def plain_records(fields, records):
    """The record table of the messages of ``fields`` into ``records`` (R_FIELDS rows, a
    column each): value = body, no key, no headers, timestamp = born time (store time when
    there is none), offset deltas 0, 1, ... Returns False, writing nothing, when a message
    has a key, tags or properties (its properties section is not empty)."""
    n = fields.shape[1]
    for i in range(n):
        if fields[F_PROPS_AT, i] != fields[F_BODY_AT, i]:
            return False
    for i in range(n):
        born = fields[F_BORN_TS, i]
        records[R_TIMESTAMP, i] = born if born > 0 else fields[F_STORE_TS, i]
        records[R_OFFSET_DELTA, i] = i
        records[R_KEY_AT, i] = 0
        records[R_KEY_LEN, i] = -1
        records[R_VALUE_AT, i] = fields[F_BODY_AT, i]
        records[R_VALUE_LEN, i] = fields[F_BODY_END, i] - fields[F_BODY_AT, i]
        records[R_HEADER_FIRST, i] = 0
        records[R_HEADER_COUNT, i] = 0
        records[R_HEADERS_AT, i] = 0
    return True


def warm() -> None:
    """Load both loops (numba's cached machine code) on a one-message table."""
    import numpy as np

    from strata.broker.kafka.batch_layout import R_FIELDS
    from strata.format.record_table import FIELDS
    fields = np.zeros((FIELDS, 1), np.int64)
    fitting(fields, 0, 1 << 20, 70, np.zeros(2, np.int64))
    plain_records(fields, np.empty((R_FIELDS, 1), np.int64))
