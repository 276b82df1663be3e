"""Client scripts for tests/kafka: each runs in its own process (kafka_support.run_client)
with the real client library. Records travel as JSON with bytes in hex (None stays null)."""

from __future__ import annotations

COMMON = '''
def hx(b):
    return None if b is None else bytes(b).hex()

def unhex(x):
    return None if x is None else bytes.fromhex(x)
'''

CONFLUENT_ROUND_TRIP = COMMON + '''
from confluent_kafka import Consumer, Producer, TopicPartition

def run(topic, codec, recs, extra):
    conf = {"bootstrap.servers": BOOTSTRAP, "compression.type": codec, "linger.ms": 20,
            "acks": "all"}
    conf.update(extra)
    p = Producer(conf)
    errs, offsets = [], []
    def done(e, m):
        if e:
            errs.append(str(e))
        else:
            offsets.append(m.offset())
    for r in recs:
        p.produce(topic, value=unhex(r["value"]), key=unhex(r["key"]), partition=0,
                  timestamp=r["ts"], headers=[(k, unhex(v)) for k, v in r["headers"]],
                  on_delivery=done)
    left = p.flush(120)
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "rt", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < len(recs) and time.time() < deadline:
        m = c.poll(1)
        if m is None or m.error():
            continue
        got.append(dict(offset=m.offset(), key=hx(m.key()), value=hx(m.value()),
                        ts=m.timestamp()[1],
                        headers=[[k, hx(v)] for k, v in (m.headers() or [])]))
    c.close()
    return dict(left=left, errs=errs, offsets=sorted(offsets), got=got)

out(**{codec: run(f"{ARGS['prefix']}-{codec}", codec, ARGS["records"], ARGS.get("conf", {}))
       for codec in ARGS["codecs"]})
'''

KAFKA_PYTHON_ROUND_TRIP = COMMON + '''
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

def run(topic, codec, recs):
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks=ARGS.get("acks", "all"),
                      compression_type=None if codec == "none" else codec, linger_ms=20)
    futs = [p.send(topic, value=unhex(r["value"]), key=unhex(r["key"]), partition=0,
                   timestamp_ms=r["ts"], headers=[(k, unhex(v)) for k, v in r["headers"]])
            for r in recs]
    offsets = sorted(f.get(timeout=30).offset for f in futs)
    p.close()
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = []
    deadline = time.time() + 30
    while len(got) < len(recs) and time.time() < deadline:
        for batch in c.poll(timeout_ms=1000).values():
            for m in batch:
                got.append(dict(offset=m.offset, key=hx(m.key), value=hx(m.value),
                                ts=m.timestamp,
                                headers=[[k, hx(v)] for k, v in (m.headers or [])]))
    c.close()
    return dict(left=0, errs=[], offsets=offsets, got=got)

out(**{codec: run(f"{ARGS['prefix']}-{codec}", codec, ARGS["records"])
       for codec in ARGS["codecs"]})
'''

AIOKAFKA_ROUND_TRIP = COMMON + '''
import asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

async def run(topic, codec, recs):
    p = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all",
                         compression_type=None if codec == "none" else codec, linger_ms=20)
    await p.start()
    futs = [await p.send(topic, value=unhex(r["value"]), key=unhex(r["key"]), partition=0,
                         timestamp_ms=r["ts"],
                         headers=[(k, unhex(v)) for k, v in r["headers"]]) for r in recs]
    offsets = sorted([(await f).offset for f in futs])
    await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    await c.start()
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = []
    deadline = time.time() + 30
    while len(got) < len(recs) and time.time() < deadline:
        data = await c.getmany(tp, timeout_ms=1000)
        for m in data.get(tp, []):
            got.append(dict(offset=m.offset, key=hx(m.key), value=hx(m.value), ts=m.timestamp,
                            headers=[[k, hx(v)] for k, v in (m.headers or [])]))
    await c.stop()
    return dict(left=0, errs=[], offsets=offsets, got=got)

async def main():
    return {codec: await run(f"{ARGS['prefix']}-{codec}", codec, ARGS["records"])
            for codec in ARGS["codecs"]}

out(**asyncio.run(main()))
'''

# A raw Kafka client built on kafka-python's protocol classes (kafka.protocol, the schemas
# the broker uses too) and its record batch builder: for requests the client libraries only
# send in situations a test cannot arrange (a resent batch, a sequence gap, a bad frame).
RAW = '''
import socket, struct
from kafka.protocol.api_message import ApiMessage
import kafka.protocol.producer, kafka.protocol.consumer, kafka.protocol.metadata
from kafka.record.default_records import DefaultRecordBatchBuilder

def _classes():
    req, resp = {}, {}
    todo = list(ApiMessage.__subclasses__())
    while todo:
        c = todo.pop()
        todo.extend(c.__subclasses__())
        if getattr(c, "_class_version", None) is None:
            (req if c.is_request() else resp).setdefault(c.API_KEY, c)
    return req, resp

REQ, RESP = _classes()

class Raw:
    def __init__(self, address):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.corr = 0

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed by the broker")
            buf += chunk
        return buf

    def call(self, key, version, **fields):
        self.corr += 1
        r = REQ[key][version](**fields)
        r.with_header(correlation_id=self.corr, client_id="raw")
        self.sock.sendall(r.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", self._recv(4))
        data = self._recv(size)
        return RESP[key].decode(data, version=version, header=True)

    def send_bytes(self, b):
        self.sock.sendall(b)

def batch(pid, epoch, seq, values, ts=1700000000000):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=ts + i, key=None, value=v, headers=[])
    return bytes(b.build())

def produce(raw, topic, part, records, acks=-1):
    P = REQ[0]
    r = raw.call(0, 7, transactional_id=None, acks=acks, timeout_ms=10000,
                 topic_data=[P.TopicProduceData(name=topic, partition_data=[
                     P.TopicProduceData.PartitionProduceData(index=part, records=records)])])
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset

def fetch(raw, topic, part, offset, max_wait_ms=0):
    F = REQ[1]
    r = raw.call(1, 11, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                 max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                 topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                     partition=part, current_leader_epoch=-1, fetch_offset=offset,
                     log_start_offset=-1, partition_max_bytes=1 << 20)])],
                 forgotten_topics_data=[], rack_id="")
    p = r.responses[0].partitions[0]
    return p.error_code, p.high_watermark, p.records
'''
