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
    left = p.flush(30)
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
