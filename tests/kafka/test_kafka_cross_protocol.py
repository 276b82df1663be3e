"""One store, two protocols: what a Kafka producer stores, a RocketMQ 5 consumer receives
(key -> keys, headers -> properties) and ``store.get``/``store.query`` read; what a RocketMQ
producer stores, a Kafka consumer fetches (keys -> key, tag and properties -> headers)."""

from __future__ import annotations

import pytest

from kafka_support import run_client
from strata import MessageStore

pytestmark = pytest.mark.kafka

ROCKETMQ = '''
import json, sys
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)
ENDPOINT = ARGS["endpoint"]
def config():
    return ClientConfiguration(ENDPOINT, Credentials(), request_timeout=5)
'''

KAFKA_TO_ROCKETMQ = ROCKETMQ + '''
from confluent_kafka import Producer as KProducer
p = KProducer({"bootstrap.servers": BOOTSTRAP})
p.produce("k2r", value=b"from kafka", key=b"order-1", headers=[("color", b"red")],
          timestamp=1700000000123)
assert p.flush(120) == 0            # a deadline that decides nothing
c = SimpleConsumer(config(), "g-k2r", {"k2r": FilterExpression("*")}, await_duration=2)
c.startup()
seen = []
for _ in range(10):
    for m in c.receive(16, 10):
        seen.append(dict(body=m.body.decode(), keys=sorted(m.keys), props=m.properties))
        c.ack(m)
    if seen:
        break
c.shutdown()
out(seen=seen)
'''

ROCKETMQ_TO_KAFKA = ROCKETMQ + '''
p = Producer(config(), ("r2k",))
p.startup()
m = Message()
m.topic = "r2k"
m.body = b"from rocketmq"
m.tag = "TagA"
m.keys = "k1"
m.add_property("region", "eu")
p.send(m)
p.shutdown()
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
parts = [TopicPartition("r2k", q) for q in sorted(c.partitions_for_topic("r2k"))]
c.assign(parts)
c.seek_to_beginning()
got = []
deadline = time.time() + 30
while not got and time.time() < deadline:
    for batch in c.poll(timeout_ms=1000).values():
        for r in batch:
            got.append(dict(key=r.key.decode(), value=r.value.decode(),
                            headers={k: v.decode() for k, v in r.headers}))
out(got=got)
'''


def test_kafka_to_rocketmq_and_back(kafka_factory, tmp_path):
    s = kafka_factory(directory=tmp_path / "store", grpc=True)
    home = tmp_path / "home"
    home.mkdir()
    got = run_client(KAFKA_TO_ROCKETMQ, s.bootstrap, dict(endpoint=s.endpoint), home=home)
    assert got["seen"] == [dict(body="from kafka", keys=["order-1"], props={"color": "red"})]
    back = run_client(ROCKETMQ_TO_KAFKA, s.bootstrap, dict(endpoint=s.endpoint), home=home)
    assert len(back["got"]) == 1
    r = back["got"][0]
    assert (r["key"], r["value"]) == ("k1", "from rocketmq")
    assert r["headers"]["TAGS"] == "TagA" and r["headers"]["region"] == "eu"
    assert "UNIQ_KEY" in r["headers"]          # the RocketMQ message id travels along
    assert s.stop() == 0
    store = MessageStore(tmp_path / "store")
    try:
        found = store.query("k2r", "order-1")
        assert [m.body for m in found] == [b"from kafka"]
        m = found[0]
        assert m.born_timestamp == 1700000000123 and m.properties == {"color": "red"}
        got = store.get("k2r", m.queue_id, m.queue_offset, 1).messages
        assert got[0].body == b"from kafka"
    finally:
        store.close()
