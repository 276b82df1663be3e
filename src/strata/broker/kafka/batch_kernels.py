"""Compiled loops over Kafka record batches v2 (numba): check batch headers, parse the records
and their headers into int64 column tables, and write uncompressed batches from such tables.

The byte layout (big-endian header of 61 bytes, records of zigzag varints) is described in
``docs/kafka_records.md``; ``record_batch`` is the Python face of these loops. Every position and
length read from the input is checked against the bytes it must lie in before a byte is read,
so a damaged or hostile record set is reported (a reason code and where), never read out of
bounds. Varints are bounded: at most 5 bytes holding 32 bits (``varint``) or 10 bytes holding
64 bits (``varlong``), as Kafka's own reader requires.

The tables are column-major like the store's field table (``table[ROW, i]``): one column per
batch, record or header. Loops run once per batch and once per record in compiled code; no
Python runs per record. The CRC-32C of a batch runs here on the CPU's instruction
(``record_kernels.crc32c_at``, about 10 GB/s); ``record_batch`` hands the CRCs of a few large
batches to the ``crc32c`` package instead, which interleaves three streams (about 28 GB/s).
Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format.record_kernels import crc32c_at, load_u8, memcpy

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


@njit(cache=True, nogil=True)
def utf8_error(addr, n):
    """-1 if the ``n`` bytes at ``addr`` are well-formed UTF-8 (no overlong forms, no
    surrogates, nothing past U+10FFFF: what Python's decoder accepts), else the position of
    the first byte of the bad sequence."""
    i = 0
    while i < n:
        c = load_u8(addr + i)
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return i
        lo = 0x80
        hi = 0xBF
        if c < 0xE0:
            need = 1
        elif c < 0xF0:
            need = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        else:
            need = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        if i + need >= n:
            return i
        c1 = load_u8(addr + i + 1)
        if c1 < lo or c1 > hi:
            return i
        for k in range(2, need + 1):
            ck = load_u8(addr + i + k)
            if ck < 0x80 or ck > 0xBF:
                return i
        i += need + 1
    return -1


# --------------------------------------------------------------------------- decoding


@njit(cache=True, nogil=True)
def scan_batches(data, batches, err):
    """Walk the batches of the record set ``data`` (uint8 array) one after another: each
    must have a whole header, magic 2 and a length within the record set. Fills
    ``batches[:, i]`` (B_* rows; B_RECORDS_AT/END are positions in ``data``, B_CRC the stored
    CRC); ``check_batches`` judges the rest. Returns the number of batches, or -1 with ``err``
    saying why and where."""
    addr = data.ctypes.data
    size = len(data)
    p = 0
    n = 0
    while p < size:
        a = addr + p
        if size - p < HEADER_SIZE:
            if size - p >= P_MAGIC + 1:
                magic = load_u8(a + P_MAGIC)
                if magic < 2:
                    _fail(err, OLD_MAGIC, n, -1, p, magic)
                    return -1
            _fail(err, SHORT_HEADER, n, -1, p, size - p)
            return -1
        length = _be_i32(a + P_LENGTH)
        magic = load_u8(a + P_MAGIC)
        if magic != 2:
            _fail(err, OLD_MAGIC if magic < 2 else BAD_MAGIC, n, -1, p, magic)
            return -1
        if length < HEADER_SIZE - LOG_OVERHEAD:
            _fail(err, BAD_BATCH_LENGTH, n, -1, p, length)
            return -1
        total = length + LOG_OVERHEAD
        if total > size - p:
            _fail(err, TRUNCATED_BATCH, n, -1, p, length)
            return -1
        batches[B_BASE_OFFSET, n] = _be_i64(a)
        batches[B_CRC, n] = np.int64(_be(a + P_CRC, 4))
        batches[B_LEADER_EPOCH, n] = _be_i32(a + P_LEADER_EPOCH)
        batches[B_ATTRIBUTES, n] = _be_i16(a + P_ATTRIBUTES)
        batches[B_LAST_DELTA, n] = _be_i32(a + P_LAST_DELTA)
        batches[B_BASE_TS, n] = _be_i64(a + P_BASE_TS)
        batches[B_MAX_TS, n] = _be_i64(a + P_MAX_TS)
        batches[B_PRODUCER_ID, n] = _be_i64(a + P_PRODUCER_ID)
        batches[B_PRODUCER_EPOCH, n] = _be_i16(a + P_PRODUCER_EPOCH)
        batches[B_BASE_SEQUENCE, n] = _be_i32(a + P_BASE_SEQUENCE)
        batches[B_COUNT, n] = _be_i32(a + P_COUNT)
        batches[B_FIRST_RECORD, n] = 0
        batches[B_AT, n] = p
        batches[B_SIZE, n] = total
        batches[B_RECORDS_AT, n] = p + HEADER_SIZE
        batches[B_RECORDS_END, n] = p + total
        n += 1
        p += total
    return n


@njit(cache=True, nogil=True)
def check_batches(data, batches, nbatches, check_crc, err):
    """Judge the batches ``scan_batches`` found, in order: the CRC-32C of attributes..end
    (with ``check_crc``; else the caller checked it), codec 0-4, neither control nor
    transactional, recordCount >= 1 and lastOffsetDelta = recordCount - 1. Returns how many
    are compressed, or -1 with ``err`` set."""
    addr = data.ctypes.data
    compressed = 0
    for n in range(nbatches):
        p = batches[B_AT, n]
        if check_crc:
            crc = np.int64(crc32c_at(addr + p + P_ATTRIBUTES, batches[B_SIZE, n] - P_ATTRIBUTES))
            if crc != batches[B_CRC, n]:
                _fail(err, BAD_CRC, n, -1, p, crc)
                return -1
        attributes = batches[B_ATTRIBUTES, n]
        if (attributes & CODEC_MASK) > 4:
            _fail(err, BAD_CODEC, n, -1, p, attributes & CODEC_MASK)
            return -1
        if attributes & CONTROL_BIT:
            _fail(err, CONTROL_BATCH, n, -1, p, attributes)
            return -1
        if attributes & TRANSACTIONAL_BIT:
            _fail(err, TRANSACTIONAL_BATCH, n, -1, p, attributes)
            return -1
        count = batches[B_COUNT, n]
        if count <= 0:
            _fail(err, BAD_COUNT, n, -1, p, count)
            return -1
        if batches[B_LAST_DELTA, n] != count - 1:
            _fail(err, BAD_LAST_DELTA, n, -1, p, batches[B_LAST_DELTA, n])
            return -1
        if attributes & CODEC_MASK:
            compressed += 1
    return compressed


@njit(cache=True, nogil=True)
def record_total(batches, nbatches, err):
    """The records the batches hold, once each batch's count is checked against its
    (decompressed) bytes: a record takes at least MIN_RECORD. Returns -1 with ``err`` set
    (COUNT_PAST_BYTES) otherwise, before anything is sized by a hostile count."""
    total = 0
    for n in range(nbatches):
        count = batches[B_COUNT, n]
        if count * MIN_RECORD > batches[B_RECORDS_END, n] - batches[B_RECORDS_AT, n]:
            _fail(err, COUNT_PAST_BYTES, n, -1, batches[B_AT, n], count)
            return -1
        total += count
    return total


@njit(cache=True, nogil=True)
def parse_records(buf, batches, nbatches, records, err):
    """Parse the records of the ``nbatches`` checked batches (their records lie in
    ``buf[B_RECORDS_AT:B_RECORDS_END]``, decompressed) into ``records[:, r]`` (R_* rows,
    positions in ``buf``, absolute timestamps) and set each batch's B_FIRST_RECORD. Every
    varint, length and offset delta is checked, and a batch's records must fill its bytes
    exactly. Header keys must be UTF-8 (Kafka's clients read them as strings). Headers are
    checked and counted, not yet stored (``fill_headers``). The caller
    sized ``records`` to the batches' counts and checked each count against its bytes.
    Returns (records, headers), or (-1, -1) with ``err`` set."""
    addr = buf.ctypes.data
    r = 0
    nh = 0
    for b in range(nbatches):
        p = batches[B_RECORDS_AT, b]
        end = batches[B_RECORDS_END, b]
        base_ts = batches[B_BASE_TS, b]
        batches[B_FIRST_RECORD, b] = r
        for i in range(batches[B_COUNT, b]):
            length, q = _varint(addr, p, end, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p, F_LENGTH)
                return -1, -1
            if length < MIN_RECORD - 1 or length > end - q:
                _fail(err, BAD_RECORD_LENGTH, b, i, p, length)
                return -1, -1
            rend = q + length
            p = q + 1                      # the record's attributes byte: unused
            delta, q = _varint(addr, p, rend, 10)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_TIMESTAMP)
                return -1, -1
            p = q
            off, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_OFFSET_DELTA)
                return -1, -1
            if off != i:
                _fail(err, BAD_OFFSET_DELTA, b, i, p, off)
                return -1, -1
            p = q
            klen, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_KEY_LENGTH)
                return -1, -1
            if klen < -1 or klen > rend - q:
                _fail(err, BAD_KEY_LENGTH, b, i, p, klen)
                return -1, -1
            key_at = q
            p = q + max(klen, 0)
            vlen, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_VALUE_LENGTH)
                return -1, -1
            if vlen < -1 or vlen > rend - q:
                _fail(err, BAD_VALUE_LENGTH, b, i, p, vlen)
                return -1, -1
            value_at = q
            p = q + max(vlen, 0)
            hc, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_HEADER_COUNT)
                return -1, -1
            if hc < 0 or 2 * hc > rend - q:   # a header takes at least 2 bytes
                _fail(err, BAD_HEADER_COUNT, b, i, p, hc)
                return -1, -1
            p = q
            headers_at = p
            for h in range(hc):
                hk, q = _varint(addr, p, rend, 5)
                if q < 0:
                    _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                          F_HEADER_KEY_LENGTH)
                    return -1, -1
                if hk < 0 or hk > rend - q:
                    _fail(err, BAD_HEADER_KEY_LENGTH, b, i, p, hk)
                    return -1, -1
                bad = utf8_error(addr + q, hk)
                if bad >= 0:
                    _fail(err, HEADER_KEY_NOT_UTF8, b, i, q, bad)
                    return -1, -1
                p = q + hk
                hv, q = _varint(addr, p, rend, 5)
                if q < 0:
                    _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                          F_HEADER_VALUE_LENGTH)
                    return -1, -1
                if hv < -1 or hv > rend - q:
                    _fail(err, BAD_HEADER_VALUE_LENGTH, b, i, p, hv)
                    return -1, -1
                p = q + max(hv, 0)
            if p != rend:
                _fail(err, RECORD_SIZE_MISMATCH, b, i, rend - length, p - (rend - length))
                return -1, -1
            records[R_TIMESTAMP, r] = base_ts + delta
            records[R_OFFSET_DELTA, r] = off
            records[R_KEY_AT, r] = key_at
            records[R_KEY_LEN, r] = klen
            records[R_VALUE_AT, r] = value_at
            records[R_VALUE_LEN, r] = vlen
            records[R_HEADER_FIRST, r] = nh
            records[R_HEADER_COUNT, r] = hc
            records[R_HEADERS_AT, r] = headers_at
            nh += hc
            r += 1
        if p != end:
            _fail(err, TRAILING_BYTES, b, -1, p, end - p)
            return -1, -1
    return r, nh


@njit(cache=True, nogil=True)
def fill_headers(buf, records, nrecords, headers):
    """Store the headers of the records that ``parse_records`` checked into ``headers[:, h]``
    (H_* rows, positions in ``buf``), in record order."""
    addr = buf.ctypes.data
    for r in range(nrecords):
        hc = records[R_HEADER_COUNT, r]
        if hc == 0:
            continue
        p = records[R_HEADERS_AT, r]
        h = records[R_HEADER_FIRST, r]
        end = len(buf)
        for k in range(hc):
            hk, p = _varint(addr, p, end, 5)
            headers[H_KEY_AT, h + k] = p
            headers[H_KEY_LEN, h + k] = hk
            p += hk
            hv, p = _varint(addr, p, end, 5)
            headers[H_VALUE_AT, h + k] = p
            headers[H_VALUE_LEN, h + k] = hv
            p += max(hv, 0)


# --------------------------------------------------------------------------- encoding


@njit(cache=True, nogil=True, inline="always")
def _body_size(records, headers, r, delta, off):
    """Bytes of record ``r``'s body (after its length varint)."""
    klen = records[R_KEY_LEN, r]
    vlen = records[R_VALUE_LEN, r]
    hc = records[R_HEADER_COUNT, r]
    n = 1 + _varint_size(delta) + _varint_size(off) + _varint_size(klen) + max(klen, 0) + \
        _varint_size(vlen) + max(vlen, 0) + _varint_size(hc)
    h0 = records[R_HEADER_FIRST, r]
    for h in range(h0, h0 + hc):
        hk = headers[H_KEY_LEN, h]
        hv = headers[H_VALUE_LEN, h]
        n += _varint_size(hk) + hk + _varint_size(hv) + max(hv, 0)
    return n


@njit(cache=True, nogil=True)
def batch_sizes(size, records, headers, firsts, counts, sizes, err):
    """The encoded size of each batch (records ``firsts[b] .. firsts[b] + counts[b]`` of the
    R_* table; R_TIMESTAMP, R_KEY_*, R_VALUE_*, R_HEADER_FIRST/COUNT are read) into
    ``sizes``. Every key, value and header range must lie within a data buffer of ``size``
    bytes (and the header rows within ``headers``), lengths >= -1 (header keys >= 0). Returns
    the total, or -1 with ``err`` set (COLUMN_OUT_OF_RANGE, the record)."""
    total = 0
    nh = headers.shape[1]
    nr = records.shape[1]
    for b in range(len(firsts)):
        f = firsts[b]
        c = counts[b]
        if f < 0 or c <= 0 or f + c > nr:
            _fail(err, COLUMN_OUT_OF_RANGE, b, -1, f, c)
            return -1
        base_ts = records[R_TIMESTAMP, f]
        n = HEADER_SIZE
        for i in range(c):
            r = f + i
            for at_row, len_row in ((R_KEY_AT, R_KEY_LEN), (R_VALUE_AT, R_VALUE_LEN)):
                at = records[at_row, r]
                ln = records[len_row, r]
                if ln < -1 or (ln > 0 and (at < 0 or at + ln > size)):
                    _fail(err, COLUMN_OUT_OF_RANGE, b, r, at, ln)
                    return -1
            h0 = records[R_HEADER_FIRST, r]
            hc = records[R_HEADER_COUNT, r]
            if hc < 0 or (hc > 0 and (h0 < 0 or h0 + hc > nh)):
                _fail(err, COLUMN_OUT_OF_RANGE, b, r, h0, hc)
                return -1
            for h in range(h0, h0 + hc):
                hk = headers[H_KEY_LEN, h]
                hv = headers[H_VALUE_LEN, h]
                ka = headers[H_KEY_AT, h]
                va = headers[H_VALUE_AT, h]
                if hk < 0 or (hk > 0 and (ka < 0 or ka + hk > size)) or hv < -1 or \
                        (hv > 0 and (va < 0 or va + hv > size)):
                    _fail(err, COLUMN_OUT_OF_RANGE, b, r, h, hk)
                    return -1
            body = _body_size(records, headers, r, records[R_TIMESTAMP, r] - base_ts, i)
            n += _varint_size(body) + body
        sizes[b] = n
        total += n
    return total


@njit(cache=True, nogil=True)
def write_batches(out, at, data, records, headers, firsts, counts, base_offsets,
                  leader_epoch, producer_id, producer_epoch, base_sequences, crc):
    """Write one uncompressed v2 batch per entry of ``firsts``/``counts`` (checked by
    ``batch_sizes``) back to back into ``out`` from byte ``at``: records as in ``records``
    (keys, values and header bytes copied from ``data``), offsets ``base_offsets[b] + i``,
    CreateTime, base timestamp the first record's, max timestamp the largest, CRC-32C over
    attributes..end (with ``crc``; else the caller stores it). Returns the position after the
    last batch."""
    src = data.ctypes.data
    dst = out.ctypes.data
    p = at
    for b in range(len(firsts)):
        f = firsts[b]
        c = counts[b]
        start = p
        base_ts = records[R_TIMESTAMP, f]
        max_ts = base_ts
        p += HEADER_SIZE
        for i in range(c):
            r = f + i
            ts = records[R_TIMESTAMP, r]
            if ts > max_ts:
                max_ts = ts
            body = _body_size(records, headers, r, ts - base_ts, i)
            p = _put_varint(out, p, body)
            out[p] = 0
            p = _put_varint(out, p + 1, ts - base_ts)
            p = _put_varint(out, p, i)
            klen = records[R_KEY_LEN, r]
            p = _put_varint(out, p, klen)
            if klen > 0:
                memcpy(dst + p, src + records[R_KEY_AT, r], klen)
                p += klen
            vlen = records[R_VALUE_LEN, r]
            p = _put_varint(out, p, vlen)
            if vlen > 0:
                memcpy(dst + p, src + records[R_VALUE_AT, r], vlen)
                p += vlen
            hc = records[R_HEADER_COUNT, r]
            p = _put_varint(out, p, hc)
            h0 = records[R_HEADER_FIRST, r]
            for h in range(h0, h0 + hc):
                hk = headers[H_KEY_LEN, h]
                p = _put_varint(out, p, hk)
                if hk > 0:
                    memcpy(dst + p, src + headers[H_KEY_AT, h], hk)
                    p += hk
                hv = headers[H_VALUE_LEN, h]
                p = _put_varint(out, p, hv)
                if hv > 0:
                    memcpy(dst + p, src + headers[H_VALUE_AT, h], hv)
                    p += hv
        _put_be(out, start, base_offsets[b], 8)
        _put_be(out, start + P_LENGTH, p - start - LOG_OVERHEAD, 4)
        _put_be(out, start + P_LEADER_EPOCH, leader_epoch, 4)
        out[start + P_MAGIC] = 2
        _put_be(out, start + P_ATTRIBUTES, 0, 2)
        _put_be(out, start + P_LAST_DELTA, c - 1, 4)
        _put_be(out, start + P_BASE_TS, base_ts, 8)
        _put_be(out, start + P_MAX_TS, max_ts, 8)
        _put_be(out, start + P_PRODUCER_ID, producer_id, 8)
        _put_be(out, start + P_PRODUCER_EPOCH, producer_epoch, 2)
        _put_be(out, start + P_BASE_SEQUENCE, base_sequences[b], 4)
        _put_be(out, start + P_COUNT, c, 4)
        if crc:
            _put_be(out, start + P_CRC,
                    crc32c_at(dst + start + P_ATTRIBUTES, p - start - P_ATTRIBUTES), 4)
    return p


@njit(cache=True, nogil=True)
def gather_values(data, records, out):
    """Every record's value (``R_VALUE_AT`` / ``R_VALUE_LEN`` in ``data``; none may be
    null) back to back into ``out``: the bodies of a produce as one BytesColumn buffer,
    without a bytes object per record."""
    src = data.ctypes.data
    dst = out.ctypes.data
    p = 0
    for r in range(records.shape[1]):
        n = records[R_VALUE_LEN, r]
        if n > 0:
            memcpy(dst + p, src + records[R_VALUE_AT, r], n)
            p += n
    return p
