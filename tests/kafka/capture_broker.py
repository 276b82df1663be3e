"""A listener on 127.0.0.1 that answers just enough of the Kafka protocol (ApiVersions,
Metadata, InitProducerId, Produce) for a real producer to send its batches, and keeps each
Produce partition's record set as the bytes the client sent: the record-batch tests decode
what librdkafka and aiokafka really write, every codec. Not a broker (nothing is stored, no
Fetch is answered; Fetch is advertised only because librdkafka picks the v2 batch format by
it, FindCoordinator because librdkafka's "LZ4" feature, without which it sends lz4 batches
uncompressed, requires it), and the clients under test run unchanged in their own processes.

``RECORDS`` are the records the client scripts send (``produce_script``), so the tests know
what each captured batch must hold.
"""

from __future__ import annotations

import socket
import struct
import threading

from strata.broker.kafka.api import (encode_response, parse_header, request_class,
                                     response_class)

T0 = 1_700_000_000_000
# (timestamp, key, value, headers): nulls and empties apart, timestamps out of order, values
# long enough that every codec pays (so the clients really compress); never both null
# (aiokafka refuses that)
RECORDS = [(T0 + (i * 7919) % 1000, None if i % 5 == 0 else b"" if i % 5 == 1 else b"key-%d" % i,
            None if i % 11 == 0 and i % 5 else b"" if i % 11 == 1 else
            b"value %d " % i * (1 + i % 40),
            [] if i % 3 else [("trace", b"t%d" % i), ("empty", b""), ("null", None)])
           for i in range(400)]

class Capture:
    """The listener: ``port``, ``record_sets`` (bytes, in arrival order), ``close()``."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.record_sets: list[bytes] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            f = conn.makefile("rb")
            while True:
                head = f.read(4)
                if len(head) < 4:
                    return
                frame = memoryview(f.read(struct.unpack(">i", head)[0]))
                h = parse_header(frame)
                req = request_class(h.api_key).decode(frame[h.body_at:], version=h.api_version)
                resp = self._answer(h, req)
                if resp is not None:
                    conn.sendall(encode_response(resp, h.api_version, h.correlation_id))

    def _answer(self, h, req):
        R = response_class(h.api_key)
        v = h.api_version
        if h.api_key == 18:     # ApiVersions
            keys = [R.ApiVersion(api_key=k, min_version=lo, max_version=hi, version=v)
                    for k, lo, hi in ((0, 3, 7), (1, 4, 11), (3, 0, 5), (10, 0, 2), (18, 0, 3),
                                      (22, 0, 1))]
            return R(version=v, error_code=0, api_keys=keys, throttle_time_ms=0)
        if h.api_key == 3:      # Metadata: every topic asked for has partition 0 here
            T = R.MetadataResponseTopic
            P = T.MetadataResponsePartition
            topics = [T(version=v, error_code=0, name=t.name, is_internal=False, partitions=[
                P(version=v, error_code=0, partition_index=0, leader_id=0, replica_nodes=[0],
                  isr_nodes=[0], offline_replicas=[])]) for t in (req.topics or [])]
            broker = R.MetadataResponseBroker(version=v, node_id=0, host="127.0.0.1",
                                              port=self.port, rack=None)
            return R(version=v, throttle_time_ms=0, brokers=[broker], cluster_id="capture",
                     controller_id=0, topics=topics)
        if h.api_key == 22:     # InitProducerId
            return R(version=v, throttle_time_ms=0, error_code=0, producer_id=4242,
                     producer_epoch=0)
        if h.api_key == 0:      # Produce: keep the bytes, answer success
            PR = R.TopicProduceResponse.PartitionProduceResponse
            topics = []
            for t in req.topic_data:
                parts = []
                for p in t.partition_data:
                    with self.lock:
                        self.record_sets.append(bytes(p.records))
                    parts.append(PR(version=v, index=p.index, error_code=0, base_offset=0,
                                    log_append_time_ms=-1, log_start_offset=0))
                topics.append(R.TopicProduceResponse(version=v, name=t.name,
                                                     partition_responses=parts))
            return None if req.acks == 0 else R(version=v, responses=topics, throttle_time_ms=0)
        raise AssertionError(f"capture broker: api {h.api_key} was not expected")

    def close(self) -> None:
        self.sock.close()


def produce_script(client: str, port: int, codec: str) -> str:
    """Python source that sends RECORDS to topic ``t`` with ``client`` (confluent-kafka or
    aiokafka), compressed with ``codec``, and waits until all are acknowledged."""
    head = f"import sys; sys.path.insert(0, {__file__.rsplit('/', 1)[0]!r})\n" \
        "from capture_broker import RECORDS\n"
    if client == "confluent-kafka":
        return head + f"""
from confluent_kafka import Producer
p = Producer({{"bootstrap.servers": "127.0.0.1:{port}", "compression.type": "{codec}",
              "linger.ms": 50, "enable.idempotence": True}})
for ts, k, v, h in RECORDS:
    p.produce("t", key=k, value=v, headers=h, timestamp=ts, partition=0)
assert p.flush(30) == 0
"""
    return head + f"""
import asyncio
from aiokafka import AIOKafkaProducer
async def main():
    p = AIOKafkaProducer(bootstrap_servers="127.0.0.1:{port}",
                         compression_type={None if codec == "none" else repr(codec)},
                         linger_ms=50)
    await p.start()
    try:
        futs = [await p.send("t", key=k, value=v, headers=h, timestamp_ms=ts, partition=0)
                for ts, k, v, h in RECORDS]
        await asyncio.gather(*futs)
    finally:
        await p.stop()
asyncio.run(main())
"""
