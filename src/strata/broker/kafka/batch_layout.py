"""The layout of a Kafka record batch v2 as the compiled loops see it: the header's byte
positions and attribute bits, the rows of the batch, record and header tables, the reason codes
of a rejected record set, and the big-endian and zigzag-varint readers and writers (numba,
inlined into the loops of ``batch_kernels`` and ``batch_encode_kernels``).

The bytes are described in ``docs/kafka_records.md``. Every reader is bounded by its caller;
nothing here reads past the positions it is given. Compiled on first use and cached beside this
file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format.record_kernels import load_u8

# --------------------------------------------------------------------------- layout

HEADER_SIZE = 61          # a batch header, baseOffset .. recordCount
LOG_OVERHEAD = 12         # baseOffset + batchLength: the bytes batchLength does not count
MIN_RECORD = 7            # length varint (1) + attributes, timestamp, offset delta, key
#                           length, value length, header count (1 each)
P_LENGTH, P_LEADER_EPOCH, P_MAGIC, P_CRC, P_ATTRIBUTES, P_LAST_DELTA = 8, 12, 16, 17, 21, 23
P_BASE_TS, P_MAX_TS, P_PRODUCER_ID, P_PRODUCER_EPOCH, P_BASE_SEQUENCE, P_COUNT = \
    27, 35, 43, 51, 53, 57

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

# Rows of the batch table (one column per batch).
(B_BASE_OFFSET, B_LEADER_EPOCH, B_ATTRIBUTES, B_LAST_DELTA, B_BASE_TS, B_MAX_TS,
 B_PRODUCER_ID, B_PRODUCER_EPOCH, B_BASE_SEQUENCE, B_COUNT, B_FIRST_RECORD, B_AT, B_SIZE,
 B_RECORDS_AT, B_RECORDS_END, B_CRC) = range(16)
B_FIELDS = 16
# Rows of the record table (one column per record). Lengths are -1 for null.
(R_TIMESTAMP, R_OFFSET_DELTA, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN, R_HEADER_FIRST,
 R_HEADER_COUNT, R_HEADERS_AT) = range(9)
R_FIELDS = 9
# Rows of the header table (one column per header). A header's key is never null.
H_KEY_AT, H_KEY_LEN, H_VALUE_AT, H_VALUE_LEN = range(4)
H_FIELDS = 4

# Reasons a kernel stops (err[0]); err[1..4] = batch, record, byte position, a value.
OK = 0
SHORT_HEADER = 1          # fewer bytes left than a batch header
BAD_BATCH_LENGTH = 2      # batchLength below the header's size
TRUNCATED_BATCH = 3       # batchLength runs past the record set
OLD_MAGIC = 4             # magic 0 or 1 (message sets)
BAD_MAGIC = 5             # any other magic
BAD_CRC = 6               # value: the CRC computed
BAD_CODEC = 7             # codec 5..7
CONTROL_BATCH = 8
TRANSACTIONAL_BATCH = 9
BAD_COUNT = 10            # recordCount <= 0
BAD_LAST_DELTA = 11       # lastOffsetDelta != recordCount - 1
COUNT_PAST_BYTES = 12     # recordCount larger than the records' bytes can hold
VARINT_TRUNCATED = 13     # value: which field
VARINT_TOO_LONG = 14      # value: which field
BAD_RECORD_LENGTH = 15    # value: the length
BAD_OFFSET_DELTA = 16     # value: the delta found
BAD_KEY_LENGTH = 17
BAD_VALUE_LENGTH = 18
BAD_HEADER_COUNT = 19
BAD_HEADER_KEY_LENGTH = 20
BAD_HEADER_VALUE_LENGTH = 21
RECORD_SIZE_MISMATCH = 22  # value: bytes the fields used
TRAILING_BYTES = 23        # value: how many bytes follow the last record
COLUMN_OUT_OF_RANGE = 24   # encoding: a key/value/header range outside the data buffer
HEADER_KEY_NOT_UTF8 = 25   # value: the offending byte's position in the key

# Which field a varint error is about (err[4] for VARINT_*).
F_LENGTH, F_TIMESTAMP, F_OFFSET_DELTA, F_KEY_LENGTH, F_VALUE_LENGTH, F_HEADER_COUNT, \
    F_HEADER_KEY_LENGTH, F_HEADER_VALUE_LENGTH = range(8)


# --------------------------------------------------------------------------- big-endian


@njit(cache=True, nogil=True, inline="always")
def _be(addr, n):
    """The big-endian unsigned integer of ``n`` bytes at ``addr``."""
    v = np.uint64(0)
    for i in range(n):
        v = (v << np.uint64(8)) | np.uint64(load_u8(addr + i))
    return v


@njit(cache=True, nogil=True, inline="always")
def _be_i16(addr):
    return np.int64(np.int16(np.uint16(_be(addr, 2))))


@njit(cache=True, nogil=True, inline="always")
def _be_i32(addr):
    return np.int64(np.int32(np.uint32(_be(addr, 4))))


@njit(cache=True, nogil=True, inline="always")
def _be_i64(addr):
    return np.int64(_be(addr, 8))


@njit(cache=True, nogil=True, inline="always")
def _put_be(out, p, value, n):
    """Store the low ``n`` bytes of ``value`` big-endian at ``out[p:p + n]``."""
    v = np.uint64(value)
    for i in range(n - 1, -1, -1):
        out[p + i] = np.uint8(v & np.uint64(0xFF))
        v >>= np.uint64(8)


# --------------------------------------------------------------------------- varints


@njit(cache=True, nogil=True, inline="always")
def _varint(addr, p, end, max_bytes):
    """The zigzag varint at byte ``p`` (bytes below ``end``), of at most ``max_bytes`` bytes
    (5: 32 bits, 10: 64 bits). Returns (value, next position); the position is -1 when the
    varint runs past ``end`` and -2 when it is too long or out of range."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for i in range(max_bytes):
        if p >= end:
            return np.int64(0), np.int64(-1)
        b = np.uint64(load_u8(addr + p))
        p += 1
        if i == max_bytes - 1:
            # the last byte may carry only the bits that are left (4 of 32, 1 of 64)
            if b > (np.uint64(0x0F) if max_bytes == 5 else np.uint64(0x01)):
                return np.int64(0), np.int64(-2)
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return value, np.int64(p)
        shift += np.uint64(7)
    return np.int64(0), np.int64(-2)


@njit(cache=True, nogil=True, inline="always")
def _varint_size(value):
    """Bytes of ``value`` as a zigzag varint/varlong."""
    raw = (np.uint64(value) << np.uint64(1)) ^ np.uint64(value >> 63)
    n = 1
    while raw >= np.uint64(0x80):
        raw >>= np.uint64(7)
        n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _put_varint(out, p, value):
    """Write ``value`` zigzag-encoded at ``out[p:]``; returns the next position."""
    raw = (np.uint64(value) << np.uint64(1)) ^ np.uint64(value >> 63)
    while raw >= np.uint64(0x80):
        out[p] = np.uint8((raw & np.uint64(0x7F)) | np.uint64(0x80))
        raw >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(raw)
    return p + 1


@njit(cache=True, nogil=True, inline="always")
def _fail(err, reason, batch, record, pos, value):
    err[0] = reason
    err[1] = batch
    err[2] = record
    err[3] = pos
    err[4] = value
    return reason
