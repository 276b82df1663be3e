"""The three Python Kafka clients against `strata serve --kafka`, each in its own process:
produce (keys, headers, explicit timestamps, null and empty keys/values, binary bytes) with
every codec, then assign() + seek(0) and consume; what comes back is exactly what was sent."""

from __future__ import annotations

import pytest

from clients import AIOKAFKA_ROUND_TRIP, CONFLUENT_ROUND_TRIP, KAFKA_PYTHON_ROUND_TRIP
from kafka_support import run_client

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(null_header_values: bool = True) -> list[dict]:
    nul = None if null_header_values else ""
    return [
        dict(key=b"k1".hex(), value=b"v1".hex(), ts=T0 + 1, headers=[["h1", b"a".hex()]]),
        dict(key=None, value=b"no key".hex(), ts=T0 + 2, headers=[]),
        dict(key="", value="", ts=T0 + 3, headers=[["empty", ""]]),
        dict(key=b"\xff\x00bin".hex(), value=None, ts=T0 - 5000,
             headers=[["bin", b"\x00\xff".hex()], ["dup", b"1".hex()], ["dup", b"2".hex()]]),
        dict(key="ключ".encode().hex(), value=(b"x" * 1000).hex(), ts=T0 + 5,
             headers=[["nul", nul], ["TAGS", b"not a tag".hex()]]),
        dict(key=b"a b".hex(), value=b"\x00".hex(), ts=1, headers=[["ü", "ü".encode().hex()]]),
    ]


def _check(result: dict, records: list[dict]) -> None:
    for codec, r in result.items():
        assert r["left"] == 0 and not r["errs"], (codec, r)
        assert r["offsets"] == list(range(len(records))), (codec, r["offsets"])
        got = r["got"]
        assert [g["offset"] for g in got] == list(range(len(records))), codec
        for g, want in zip(got, records):
            assert (g["key"], g["value"], g["ts"], g["headers"]) == (
                want["key"], want["value"], want["ts"], want["headers"]), (codec, g, want)


def test_confluent_kafka_round_trip_every_codec(kafka_server):
    recs = _records()
    res = run_client(CONFLUENT_ROUND_TRIP, kafka_server.bootstrap,
                     dict(prefix="confluent", codecs=CODECS, records=recs))
    _check(res, recs)


def test_confluent_kafka_idempotent_producer(kafka_server):
    recs = _records()
    res = run_client(CONFLUENT_ROUND_TRIP, kafka_server.bootstrap,
                     dict(prefix="confluent-idem", codecs=["zstd"], records=recs,
                          conf={"enable.idempotence": True}))
    _check(res, recs)


def test_kafka_python_round_trip_every_codec(kafka_server):
    recs = _records(null_header_values=False)    # kafka-python refuses a null header value
    res = run_client(KAFKA_PYTHON_ROUND_TRIP, kafka_server.bootstrap,
                     dict(prefix="kafka-python", codecs=CODECS, records=recs))
    _check(res, recs)


def test_aiokafka_round_trip_every_codec(kafka_server):
    recs = _records()
    res = run_client(AIOKAFKA_ROUND_TRIP, kafka_server.bootstrap,
                     dict(prefix="aiokafka", codecs=CODECS, records=recs))
    _check(res, recs)
