"""The Fetch answer's own encoder (strata.broker.kafka.fetch.FetchAnswer) against
kafka-python's generated decoder: for every version the listener serves (4-12, flexible
from 12), a frame with several topics, partitions with records (several store reads, runs
of non-consecutive offsets), empty records, null records with error codes and non-ASCII
topic names must decode to exactly those fields, and the record set to the same records
through kafka-python's own record reader."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka import record_batch as rb
from strata.broker.kafka.fetch_answer import FetchAnswer, PartitionAnswer
from strata.broker.kafka.record_batch import RecordColumns

FetchResponse = api.response_class(1)


def _piece(offsets: list[int], values: list[bytes | None], keys=None):
    cols = RecordColumns.from_lists([1000 + o for o in offsets],
                                    keys or [None] * len(offsets), values,
                                    [[(b"h", b"v")] if o % 3 == 0 else [] for o in offsets])
    offs = np.array(offsets, np.int64)
    breaks = np.flatnonzero(np.diff(offs) != 1) + 1
    firsts = np.concatenate(([0], breaks)).astype(np.int64)
    counts = np.diff(np.concatenate((firsts, [len(offs)]))).astype(np.int64)
    return cols, rb._plan(cols, firsts, counts), offs[firsts]


def _answer():
    p0 = [_piece([5, 6, 7], [b"a", b"", None], [b"k", None, b""]),
          _piece([8, 10, 11], [b"x" * 300, b"y", b"z"])]
    big = [_piece(list(range(200)), [bytes([i % 251]) * 50 for i in range(200)])]
    return FetchAnswer([
        ("t\u00e9st", [PartitionAnswer(0, ke.NONE, 12, 5, p0),
                       PartitionAnswer(1, ke.NONE, 0, 0, []),
                       PartitionAnswer(7, ke.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("other", [PartitionAnswer(2, ke.OFFSET_OUT_OF_RANGE, 40, 3, []),
                   PartitionAnswer(3, ke.NONE, 300, 0, big)]),
        ("empty", []),
    ]), {(0, "t\u00e9st"): [(5, b"k", b"a"), (6, None, b""), (7, b"", None),
                            (8, None, b"x" * 300), (10, None, b"y"), (11, None, b"z")],
         (3, "other"): [(i, None, bytes([i % 251]) * 50) for i in range(200)]}


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_answer_decodes_as_kafka_reads_it(version: int) -> None:
    answer, expected = _answer()
    frame = bytes(answer.encode_framed(version, 4242))
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    assert struct.unpack_from(">i", frame, 4)[0] == 4242
    header_end = 8 + (1 if version >= 12 else 0)
    resp = FetchResponse[version].decode(frame[header_end:])
    assert resp.throttle_time_ms == 0
    if version >= 7:
        assert resp.error_code == 0 and resp.session_id == 0
    assert [t.topic for t in resp.responses] == ["t\u00e9st", "other", "empty"]
    got = {}
    for t, (_name, parts) in zip(resp.responses, answer.topics):
        assert [p.partition_index for p in t.partitions] == [p.partition_index for p in parts]
        for p, want in zip(t.partitions, parts):
            assert p.error_code == want.error_code
            assert p.high_watermark == want.high_watermark
            assert p.last_stable_offset == want.high_watermark
            if version >= 5:
                assert p.log_start_offset == want.log_start_offset
            assert p.aborted_transactions is None
            if version >= 11:
                assert p.preferred_read_replica == -1
            if want.pieces is None:
                assert p.records is None
                continue
            data = p.records if isinstance(p.records, bytes) else p.records._buffer \
                if hasattr(p.records, "_buffer") else bytes(p.records)
            assert len(data) == want.size
            recs = []
            mr = MemoryRecords(bytes(data))
            while (batch := mr.next_batch()) is not None:
                assert batch.validate_crc()
                recs.extend((r.offset, r.key, r.value) for r in batch)
            if recs:
                got[(p.partition_index, t.topic)] = recs
            else:
                assert want.size == 0
    assert got == expected


def test_fetch_answer_refuses_a_version_it_does_not_write() -> None:
    answer, _ = _answer()
    with pytest.raises(ValueError, match="v13"):
        answer.encode_framed(13, 1)
