"""Kafka record batches (magic 2) as numpy columns, both ways, for Produce and Fetch.

``decode_record_set`` turns the record set of one Produce partition (one or more v2 batches,
any codec) into a ``RecordColumns``: int64 column tables of the batches, the records and their
headers, plus the byte buffer their positions index (the input itself, or its decompressed
records). ``encode_batches`` writes uncompressed v2 batches from such columns for a Fetch,
straight into one preallocated buffer. The loops over records run compiled
(``batch_kernels``); Python runs once per batch (decompression) and per call.

Every violation -- length, magic, CRC-32C, codec, varint, record count, offset delta -- raises
``RecordBatchError``, which carries the Kafka error code to answer with and a sentence naming
what was wrong and where. Pure functions: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

import cramjam
import numpy as np
from crc32c import crc32c

from strata.broker.kafka import batch_kernels as bk
from strata.errors import InvalidInputError

# Kafka error codes this module answers with (the protocol's numbers).
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_TXN_STATE = 48
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# Up to this many batches their CRC-32Cs are computed by the
# crc32c package, one Python call per batch (about 3x the compiled loop's bytes/s); more,
# smaller batches are checked in the compiled scan.
_FEW_BATCHES = 16

#: Default bound on the bytes one record set may decompress to (a zip bomb gets an error).
MAX_DECOMPRESSED = 64 << 20

_CRC = struct.Struct(">I")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16   # magic, version i32, compatible version i32


class RecordBatchError(InvalidInputError):
    """A record set Kafka's rules refuse; ``error_code`` is the Kafka error code to answer."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


_FIELD_NAMES = ("record length", "timestamp delta", "offset delta", "key length",
                "value length", "header count", "header key length", "header value length")


def _explain(err: np.ndarray) -> RecordBatchError:
    """The RecordBatchError for a kernel's stop reason ``err``."""
    reason, b, r, pos, value = (int(x) for x in err[:5])
    where = f"batch {b}" + (f", record {r}" if r >= 0 else "") + f" (byte {pos})"
    field = _FIELD_NAMES[value] if 0 <= value < len(_FIELD_NAMES) else "?"
    code, text = {
        bk.SHORT_HEADER: (CORRUPT_MESSAGE, f"only {value} bytes are left, fewer than the "
                          f"{bk.HEADER_SIZE} of a batch header"),
        bk.BAD_BATCH_LENGTH: (CORRUPT_MESSAGE, f"batch length {value} is below the header's "
                              f"{bk.HEADER_SIZE - bk.LOG_OVERHEAD} bytes"),
        bk.TRUNCATED_BATCH: (CORRUPT_MESSAGE, f"batch length {value} runs past the end of the "
                             "record set"),
        bk.OLD_MAGIC: (UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {value}: message sets v0/v1 are "
                       "not supported, only record batches v2"),
        bk.BAD_MAGIC: (CORRUPT_MESSAGE, f"magic {value} is not a record batch format"),
        bk.BAD_CRC: (CORRUPT_MESSAGE, f"CRC-32C mismatch (computed {value:#010x})"),
        bk.BAD_CODEC: (UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {value} is unknown"),
        bk.CONTROL_BATCH: (INVALID_RECORD, "control batches are written by brokers, not "
                           "producers"),
        bk.TRANSACTIONAL_BATCH: (INVALID_TXN_STATE, "transactional batches are not supported"),
        bk.BAD_COUNT: (INVALID_RECORD, f"record count {value} (a batch holds at least one)"),
        bk.BAD_LAST_DELTA: (INVALID_RECORD, f"last offset delta {value} does not match the "
                            "record count"),
        bk.COUNT_PAST_BYTES: (INVALID_RECORD, f"record count {value} is more than its bytes "
                              "can hold"),
        bk.VARINT_TRUNCATED: (INVALID_RECORD, f"the {field} varint runs past the "
                              + ("batch (fewer records than its count)"
                                 if value == bk.F_LENGTH else "record")),
        bk.VARINT_TOO_LONG: (INVALID_RECORD, f"the {field} varint is too long or out of range"),
        bk.BAD_RECORD_LENGTH: (INVALID_RECORD, f"record length {value} is below the minimum "
                               "or runs past the batch"),
        bk.BAD_OFFSET_DELTA: (INVALID_RECORD, f"offset delta {value} is not the record's "
                              "position in its batch"),
        bk.BAD_KEY_LENGTH: (INVALID_RECORD, f"key length {value} is negative or runs past the "
                            "record"),
        bk.BAD_VALUE_LENGTH: (INVALID_RECORD, f"value length {value} is negative or runs past "
                              "the record"),
        bk.BAD_HEADER_COUNT: (INVALID_RECORD, f"header count {value} is negative or more than "
                              "the record can hold"),
        bk.BAD_HEADER_KEY_LENGTH: (INVALID_RECORD, f"header key length {value} is negative "
                                   "(null) or runs past the record"),
        bk.BAD_HEADER_VALUE_LENGTH: (INVALID_RECORD, f"header value length {value} is "
                                     "negative or runs past the record"),
        bk.HEADER_KEY_NOT_UTF8: (INVALID_RECORD, f"a header key is not UTF-8 (its byte "
                                 f"{value})"),
        bk.RECORD_SIZE_MISMATCH: (INVALID_RECORD, f"the record's fields take {value} bytes, "
                                  "not its length"),
        bk.TRAILING_BYTES: (INVALID_RECORD, f"{value} bytes follow the batch's last record"),
        bk.COLUMN_OUT_OF_RANGE: (INVALID_RECORD, f"a key, value or header range ({pos}, "
                                 f"length {value}) lies outside the columns' buffer"),
    }.get(reason, (CORRUPT_MESSAGE, f"reason {reason}"))
    return RecordBatchError(code, f"invalid record set: {where}: {text}")


@dataclass
class RecordColumns:
    """Records as columns: ``batches[B_*, i]``, ``records[R_*, i]``, ``headers[H_*, i]``
    (int64 tables from ``batch_kernels``) whose positions index ``data`` (uint8). Lengths of
    -1 are null keys/values; a header's key is never null."""

    data: np.ndarray
    batches: np.ndarray
    records: np.ndarray
    headers: np.ndarray

    def __len__(self) -> int:
        return self.records.shape[1]

    # -- per-record columns (views)
    @property
    def timestamps(self) -> np.ndarray:
        return self.records[bk.R_TIMESTAMP]

    @property
    def key_lengths(self) -> np.ndarray:
        return self.records[bk.R_KEY_LEN]

    @property
    def value_lengths(self) -> np.ndarray:
        return self.records[bk.R_VALUE_LEN]

    def _bytes(self, at: int, n: int) -> bytes | None:
        return None if n < 0 else self.data[at:at + n].tobytes()

    def key(self, i: int) -> bytes | None:
        """The key of record ``i`` (None when null)."""
        return self._bytes(int(self.records[bk.R_KEY_AT, i]), int(self.records[bk.R_KEY_LEN, i]))

    def value(self, i: int) -> bytes | None:
        """The value of record ``i`` (None when null)."""
        return self._bytes(int(self.records[bk.R_VALUE_AT, i]),
                           int(self.records[bk.R_VALUE_LEN, i]))

    def record_headers(self, i: int) -> list[tuple[bytes, bytes | None]]:
        """The headers of record ``i`` as (key, value or None) pairs, in order."""
        h0 = int(self.records[bk.R_HEADER_FIRST, i])
        h = self.headers[:, h0:h0 + int(self.records[bk.R_HEADER_COUNT, i])]
        return [(self.data[ka:ka + kl].tobytes(), self._bytes(int(va), int(vl)))
                for ka, kl, va, vl in h.T.tolist()]

    @classmethod
    def from_lists(cls, timestamps: Sequence[int], keys: Sequence[bytes | None],
                   values: Sequence[bytes | None],
                   headers: Sequence[Sequence[tuple[bytes, bytes | None]]] | None = None,
                   ) -> "RecordColumns":
        """Columns of records given as Python objects (tests, tools: one Python step per
        record; the hot paths build the tables from stored messages' positions)."""
        n = len(values)
        if len(keys) != n or len(timestamps) != n or (headers is not None and len(headers) != n):
            raise InvalidInputError("timestamps, keys, values and headers differ in length")
        headers = headers if headers is not None else [()] * n
        pieces: list[bytes] = []
        at = 0
        rec = np.zeros((bk.R_FIELDS, n), np.int64)
        flat: list[tuple[int, int, int, int]] = []
        for i in range(n):
            for at_row, len_row, b in ((bk.R_KEY_AT, bk.R_KEY_LEN, keys[i]),
                                       (bk.R_VALUE_AT, bk.R_VALUE_LEN, values[i])):
                rec[at_row, i] = at
                if b is None:
                    rec[len_row, i] = -1
                else:
                    rec[len_row, i] = len(b)
                    pieces.append(bytes(b))
                    at += len(b)
            rec[bk.R_HEADER_FIRST, i] = len(flat)
            rec[bk.R_HEADER_COUNT, i] = len(headers[i])
            for hk, hv in headers[i]:
                if hk is None:
                    raise InvalidInputError(f"record {i}: a header key is null")
                ka = at
                pieces.append(bytes(hk))
                at += len(hk)
                va = at
                if hv is not None:
                    pieces.append(bytes(hv))
                    at += len(hv)
                flat.append((ka, len(hk), va, -1 if hv is None else len(hv)))
        rec[bk.R_TIMESTAMP] = np.asarray(timestamps, np.int64)
        rec[bk.R_OFFSET_DELTA] = np.arange(n)
        hdr = np.array(flat, np.int64).reshape(-1, bk.H_FIELDS).T.copy()
        data = np.frombuffer(b"".join(pieces), np.uint8)
        return cls(data, np.zeros((bk.B_FIELDS, 0), np.int64), rec, hdr)

    # -- per-batch views
    @property
    def batch_count(self) -> int:
        return self.batches.shape[1]

    def codec(self, b: int) -> int:
        """The compression codec batch ``b`` was sent with (CODEC_*)."""
        return int(self.batches[bk.B_ATTRIBUTES, b]) & bk.CODEC_MASK


# --------------------------------------------------------------------------- decoding


class _TooSmall(Exception):
    """The output buffer given to a decompressor was too small."""


def _decompress_into(codec: int, src: memoryview, out: np.ndarray, b: int) -> int:
    """Decompress ``src`` (batch ``b``'s records) into ``out``; returns the bytes written.
    Raises _TooSmall when ``out`` cannot hold them, CORRUPT_MESSAGE for undecodable bytes."""
    try:
        if codec == CODEC_GZIP:
            return cramjam.gzip.decompress_into(src, out)
        if codec == CODEC_LZ4:
            return cramjam.lz4.decompress_into(src, out)
        if codec == CODEC_ZSTD:
            return cramjam.zstd.decompress_into(src, out)
        if bytes(src[:len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
            return _snappy_raw(src, out)
        # xerial framing (the Java client): header, then blocks of i32 length + raw snappy
        if len(src) < _XERIAL_HEADER:
            raise cramjam.DecompressionError("xerial snappy header is truncated")
        p, n = _XERIAL_HEADER, 0
        while p < len(src):
            if p + 4 > len(src):
                raise cramjam.DecompressionError("xerial snappy block length is truncated")
            size = int.from_bytes(src[p:p + 4], "big")
            p += 4
            if size > len(src) - p:
                raise cramjam.DecompressionError(
                    f"xerial snappy block of {size} bytes runs past the data")
            n += _snappy_raw(src[p:p + size], out[n:])
            p += size
        return n
    except cramjam.DecompressionError as exc:
        text = str(exc)
        if "buffer" in text:   # cramjam's words for an output buffer too small
            raise _TooSmall from None
        raise RecordBatchError(CORRUPT_MESSAGE, f"invalid record set: batch {b}: its "
                               f"{CODEC_NAMES[codec]} records do not decompress ({text})"
                               ) from None


def _snappy_raw(src, out: np.ndarray) -> int:
    """One raw snappy block into ``out``: its declared length is checked first."""
    if cramjam.snappy.decompress_raw_len(src) > len(out):
        raise _TooSmall
    return cramjam.snappy.decompress_raw_into(src, out)


def _size_hint(codec: int, src: memoryview) -> int | None:
    """The decompressed size the data declares, where its format says it (gzip's ISIZE,
    zstd's and lz4's frame content size, raw snappy's preamble); None elsewhere. Only a
    hint for sizing the output: a lie costs a retry or an error, never memory."""
    try:
        if codec == CODEC_GZIP and len(src) >= 18:
            return int.from_bytes(src[-4:], "little")
        if codec == CODEC_ZSTD and len(src) >= 6 and bytes(src[:4]) == b"\x28\xb5\x2f\xfd":
            fhd = src[4]
            single = (fhd >> 5) & 1
            fcs = (0 if not single else 1, 2, 4, 8)[fhd >> 6]
            at = 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3]
            if fcs and len(src) >= at + fcs:
                return int.from_bytes(src[at:at + fcs], "little") + (256 if fcs == 2 else 0)
        if codec == CODEC_LZ4 and len(src) >= 15 and bytes(src[:4]) == b"\x04\x22\x4d\x18":
            if src[4] & 0x08:
                return int.from_bytes(src[6:14], "little")
        if codec == CODEC_SNAPPY and bytes(src[:len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
            return cramjam.snappy.decompress_raw_len(src)
    except cramjam.DecompressionError:
        return None
    return None


def _decompress(codec: int, src: memoryview, budget: int, b: int) -> np.ndarray:
    """Batch ``b``'s records decompressed, at most ``budget`` bytes (else MESSAGE_TOO_LARGE).
    The output is sized by the data's own hint (exact for every producer seen), else grown
    4x per try: a buffer sized to fit is reused by the allocator, where one sized to the
    limit would be fresh pages every time (3-4 us per 4 KiB on first touch)."""
    hint = _size_hint(codec, src)
    size = hint if hint is not None and hint <= budget else \
        min(budget, max(4 * len(src), 1 << 16))
    while True:
        out = np.empty(size, np.uint8)
        try:
            return out[:_decompress_into(codec, src, out, b)]
        except _TooSmall:
            if size >= budget:
                raise RecordBatchError(
                    MESSAGE_TOO_LARGE, f"invalid record set: batch {b}: its "
                    f"{CODEC_NAMES[codec]} records decompress to more than {budget} bytes "
                    "(the limit left for this record set)") from None
            size = min(budget, max(4 * size, 1 << 16))


def decode_record_set(data, *, max_decompressed: int = MAX_DECOMPRESSED) -> RecordColumns:
    """The records of a Produce partition's record set ``data`` (bytes-like: one or more v2
    batches) as columns. Compressed batches are decompressed (at most ``max_decompressed``
    bytes in all). Raises RecordBatchError for anything Kafka's rules refuse."""
    raw = np.frombuffer(data, np.uint8)
    err = np.zeros(5, np.int64)
    batches = np.empty((bk.B_FIELDS, len(raw) // bk.HEADER_SIZE + 1), np.int64)
    nb = bk.scan_batches(raw, batches, err)
    if nb < 0:
        raise _explain(err)
    if nb == 0:
        raise RecordBatchError(INVALID_RECORD, "invalid record set: it holds no batch")
    batches = batches[:, :nb]
    few = nb <= _FEW_BATCHES   # then the crc32c package, a call per batch
    if few:
        view = memoryview(raw)
        for b in range(nb):
            at = int(batches[bk.B_AT, b])
            crc = crc32c(view[at + bk.P_ATTRIBUTES:at + int(batches[bk.B_SIZE, b])])
            if crc != batches[bk.B_CRC, b]:
                err[:5] = (bk.BAD_CRC, b, -1, at, crc)
                raise _explain(err)
    compressed = bk.check_batches(raw, batches, nb, not few, err)
    if compressed < 0:
        raise _explain(err)
    buf = raw
    if compressed:
        codecs = batches[bk.B_ATTRIBUTES] & bk.CODEC_MASK
        # each compressed batch's records decompressed; with several batches, all records
        # (plain ones copied) in one buffer, which the positions then index
        src = memoryview(raw)
        parts = []
        budget = max_decompressed
        n = 0
        for b in range(nb):
            at, end = int(batches[bk.B_RECORDS_AT, b]), int(batches[bk.B_RECORDS_END, b])
            codec = int(codecs[b])
            if codec == CODEC_NONE:
                part = raw[at:end]
            else:
                part = _decompress(codec, src[at:end], budget, b)
                budget -= len(part)
            parts.append(part)
            batches[bk.B_RECORDS_AT, b] = n
            batches[bk.B_RECORDS_END, b] = n + len(part)
            n += len(part)
        buf = parts[0] if nb == 1 else np.concatenate(parts)
    total = bk.record_total(batches, nb, err)
    if total < 0:
        raise _explain(err)
    records = np.empty((bk.R_FIELDS, total), np.int64)
    nr, nh = bk.parse_records(buf, batches, nb, records, err)
    if nr < 0:
        raise _explain(err)
    headers = np.empty((bk.H_FIELDS, nh), np.int64)
    if nh:
        bk.fill_headers(buf, records, nr, headers)
    return RecordColumns(buf, batches, records, headers)


# --------------------------------------------------------------------------- encoding


def _plan(columns: RecordColumns, firsts, counts) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                           int]:
    firsts = np.ascontiguousarray(firsts, np.int64)
    counts = np.ascontiguousarray(counts, np.int64)
    if firsts.shape != counts.shape or firsts.ndim != 1:
        raise InvalidInputError("firsts and counts must be 1-d and of one length")
    sizes = np.empty(len(firsts), np.int64)
    err = np.zeros(5, np.int64)
    total = bk.batch_sizes(len(columns.data), columns.records, columns.headers, firsts,
                           counts, sizes, err)
    if total < 0:
        raise _explain(err)
    return firsts, counts, sizes, int(total)


def encoded_size(columns: RecordColumns, firsts, counts) -> int:
    """Bytes ``encode_batches_into`` writes for these batches (checks the columns)."""
    return _plan(columns, firsts, counts)[3]


def encode_batches_into(out: np.ndarray, at: int, columns: RecordColumns, firsts, counts,
                        base_offsets, **kw) -> int:
    """Write uncompressed v2 batches back to back into ``out`` (a writable uint8 array) from
    byte ``at``: batch ``b`` holds records ``firsts[b] .. firsts[b] + counts[b]`` of
    ``columns`` with offsets from ``base_offsets[b]``; keywords ``leader_epoch``,
    ``producer_id``, ``producer_epoch`` (-1 each by default) and ``base_sequences`` (one per
    batch, -1 by default). Returns the position after the last.
    Raises InvalidInputError when ``out`` is too small or a column points outside the data."""
    return _write(out, at, columns, _plan(columns, firsts, counts), base_offsets, **kw)


def _write(out: np.ndarray, at: int, columns: RecordColumns, plan, base_offsets, *,
           leader_epoch: int = -1, producer_id: int = -1, producer_epoch: int = -1,
           base_sequences=None) -> int:
    firsts, counts, sizes, total = plan
    base_offsets = np.ascontiguousarray(base_offsets, np.int64)
    seqs = (np.full(len(firsts), -1, np.int64) if base_sequences is None
            else np.ascontiguousarray(base_sequences, np.int64))
    if base_offsets.shape != firsts.shape or seqs.shape != firsts.shape:
        raise InvalidInputError("base_offsets and base_sequences need one entry per batch")
    if at < 0 or at + total > len(out):
        raise InvalidInputError(f"{total} bytes of batches do not fit at byte {at} of a "
                                f"{len(out)}-byte buffer")
    few = len(firsts) <= _FEW_BATCHES
    end = int(bk.write_batches(out, at, columns.data, columns.records, columns.headers,
                               firsts, counts, base_offsets, leader_epoch, producer_id,
                               producer_epoch, seqs, not few))
    if few:
        view = memoryview(out)
        p = at
        for size in sizes.tolist():
            _CRC.pack_into(out, p + bk.P_CRC, crc32c(view[p + bk.P_ATTRIBUTES:p + size]))
            p += size
    return end


def encode_batches(columns: RecordColumns, firsts, counts, base_offsets, **kw) -> bytes:
    """``encode_batches_into`` a buffer of its own; returns the batches' bytes."""
    plan = _plan(columns, firsts, counts)
    out = np.empty(plan[3], np.uint8)
    _write(out, 0, columns, plan, base_offsets, **kw)
    return out.tobytes()


def encode_batch(base_offset: int, timestamps: Sequence[int], keys: Sequence[bytes | None],
                 values: Sequence[bytes | None],
                 headers: Sequence[Sequence[tuple[bytes, bytes | None]]] | None = None,
                 **kw) -> bytes:
    """One uncompressed v2 batch of records given as Python objects, offsets from
    ``base_offset`` (keyword arguments as for ``encode_batches_into``)."""
    columns = RecordColumns.from_lists(timestamps, keys, values, headers)
    if len(columns) == 0:
        raise InvalidInputError("a batch holds at least one record")
    return encode_batches(columns, [0], [len(columns)], [base_offset], **kw)


def warm() -> None:
    """Load the compiled codec (numba's cached machine code: 0.1-0.3 s per kernel on first
    use) by encoding and decoding one small batch, so that the listener's first Produce and
    Fetch do not pay for it. The listener runs it on a worker thread as it starts."""
    from strata.broker.kafka import batch_kernels as bk
    cols = RecordColumns.from_lists([1, 2], [None, b"k"], [b"v", b"w"], [[], [(b"h", b"x")]])
    one = np.zeros(1, np.int64)
    data = encode_batches(cols, one, np.array([2], np.int64), one)
    got = decode_record_set(data)
    bk.gather_values(np.frombuffer(data, np.uint8), got.records,
                     np.empty(len(data), np.uint8))
