"""Record sets written by real Kafka producers decode to what they sent.

confluent-kafka (librdkafka) and aiokafka (its C record builder), each in its own process and
unchanged, send the same records (null and empty keys and values, headers with null values,
timestamps out of order) with every codec to a capturing listener (``capture_broker``); the
bytes each Produce carried must decode (strata.broker.kafka.record_batch) to exactly those
records, agree with kafka-python's reader, and encode again to batches kafka-python reads as
the same records.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from kafka.record.memory_records import MemoryRecords

from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import record_batch as rb

from capture_broker import RECORDS, Capture, produce_script

pytestmark = pytest.mark.kafka

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("client", ["confluent-kafka", "aiokafka"])
@pytest.mark.parametrize("codec", sorted(CODECS))
def test_client_batches_decode_to_what_was_sent(client, codec):
    cap = Capture()
    try:
        subprocess.run([sys.executable, "-c", produce_script(client, cap.port, codec)],
                       check=True, timeout=120)
    finally:
        cap.close()
    assert cap.record_sets
    got = []
    for data in cap.record_sets:
        cols = rb.decode_record_set(data)
        for b in range(cols.batch_count):
            assert cols.codec(b) == CODECS[codec]
            if client == "confluent-kafka":      # idempotent: the id handed out, sequences
                assert cols.batches[bk.B_PRODUCER_ID, b] == 4242
                assert cols.batches[bk.B_BASE_SEQUENCE, b] == len(got) + sum(
                    int(c) for c in cols.batches[bk.B_COUNT, :b])
        mine = [(int(cols.timestamps[i]), cols.key(i), cols.value(i), cols.record_headers(i))
                for i in range(len(cols))]
        reader = []
        mr = MemoryRecords(data)
        while mr.has_next():
            reader += [(r.timestamp, r.key, r.value, [(k.encode(), v) for k, v in r.headers])
                       for r in mr.next_batch()]
        assert mine == reader
        again = rb.encode_batches(cols, cols.batches[bk.B_FIRST_RECORD],
                                  cols.batches[bk.B_COUNT], cols.batches[bk.B_BASE_OFFSET])
        back = []
        mr = MemoryRecords(again)
        while mr.has_next():
            back += [(r.timestamp, r.key, r.value, [(k.encode(), v) for k, v in r.headers])
                     for r in mr.next_batch()]
        assert back == mine
        got += mine
    assert got == [(ts, k, v, [(hk.encode(), hv) for hk, hv in h]) for ts, k, v, h in RECORDS]
