"""Admin requests (create/delete topics, create partitions) from confluent-kafka's and
kafka-python's admin clients, offsets_for_times over out-of-order producer timestamps, and
watermarks; each client in its own process."""

from __future__ import annotations

import pytest

from kafka_support import run_client

pytestmark = pytest.mark.kafka

CONFLUENT_ADMIN = '''
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
a = AdminClient({"bootstrap.servers": BOOTSTRAP})
def wait(fs):
    res = {}
    for k, f in fs.items():
        try:
            f.result(20)
            res[k] = "ok"
        except Exception as e:
            res[k] = e.args[0].name() if hasattr(e.args[0], "name") else str(e)
    return res
created = wait(a.create_topics([NewTopic("adm-a", 3, 1), NewTopic("adm-b", 2, 1),
                                NewTopic("adm-bad", 1, 3)]))
again = wait(a.create_topics([NewTopic("adm-a", 3, 1)]))
grown = wait(a.create_partitions([NewPartitions("adm-a", 5)]))
shrink = wait(a.create_partitions([NewPartitions("adm-a", 2)]))
parts = len(a.list_topics(timeout=10).topics["adm-a"].partitions)
deleted = wait(a.delete_topics(["adm-b"]))
left = sorted(t for t in a.list_topics(timeout=10).topics if t.startswith("adm"))
out(created=created, again=again, grown=grown, shrink=shrink, parts=parts, deleted=deleted,
    left=left)
'''


def test_confluent_admin_topics_and_partitions(kafka_server):
    got = run_client(CONFLUENT_ADMIN, kafka_server.bootstrap)
    assert got["created"] == {"adm-a": "ok", "adm-b": "ok",
                              "adm-bad": "INVALID_REPLICATION_FACTOR"}
    assert got["again"] == {"adm-a": "TOPIC_ALREADY_EXISTS"}
    assert got["grown"] == {"adm-a": "ok"}
    assert got["shrink"] == {"adm-a": "INVALID_PARTITIONS"}
    assert got["parts"] == 5
    assert got["deleted"] == {"adm-b": "ok"}
    assert got["left"] == ["adm-a"]


KAFKA_PYTHON_ADMIN = '''
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka import KafkaConsumer
a = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
r = a.create_topics([NewTopic("kp-adm", 4, 1)])
a.create_partitions({"kp-adm": NewPartitions(6)})
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP)
parts = sorted(c.partitions_for_topic("kp-adm"))
a.delete_topics(["kp-adm"])
c.close()
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP)
out(parts=parts, after=sorted(t for t in c.topics() if t.startswith("kp-adm")))
'''


def test_kafka_python_admin(kafka_server):
    got = run_client(KAFKA_PYTHON_ADMIN, kafka_server.bootstrap)
    assert got["parts"] == [0, 1, 2, 3, 4, 5]
    assert got["after"] == []


OFFSETS_FOR_TIMES = '''
from confluent_kafka import Consumer, Producer, TopicPartition
T0 = 1_700_000_000_000
stamps = [T0 + 10, T0 + 5, T0 + 20, T0 + 15, T0 + 30]
p = Producer({"bootstrap.servers": BOOTSTRAP})
for i, t in enumerate(stamps):
    p.produce("times", value=b"%d" % i, partition=0, timestamp=t)
assert p.flush(120) == 0            # a deadline that decides nothing
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "times"})
asked = [T0, T0 + 5, T0 + 11, T0 + 16, T0 + 21, T0 + 30, T0 + 31]
got = [c.offsets_for_times([TopicPartition("times", 0, t)], timeout=10)[0].offset
       for t in asked]
low, high = c.get_watermark_offsets(TopicPartition("times", 0), timeout=10)
out(got=got, low=low, high=high)
'''


def test_offsets_for_times_uses_producer_timestamps_in_offset_order(kafka_server):
    got = run_client(OFFSETS_FOR_TIMES, kafka_server.bootstrap)
    # the first offset whose timestamp is at or after the one asked for (Kafka's CreateTime
    # lookup); past every timestamp: -1 (the client's "end")
    assert got["got"] == [0, 0, 2, 2, 4, 4, -1]
    assert (got["low"], got["high"]) == (0, 5)
