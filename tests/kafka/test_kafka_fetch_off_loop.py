"""A Fetch whose store read is slow (a read that reaches S3 through the tier) does not hold
up the listener: the read runs on the connection's read lane (``read_lanes``), so while it
waits another connection's ApiVersions and Metadata are answered, another consumer's Fetch
of another topic gets its messages (its read runs on another of the lanes' threads), and
then the held Fetch gets its messages. The read is held on purpose (tests/kafka/
held_read.py) until the test has asked the other connection, so that moment comes on every
run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_support import PRELUDE, HeldReadServer, run_client

CONSUME = PRELUDE + '''
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "off-loop",
              "enable.auto.commit": False})
c.assign([TopicPartition(ARGS.get("topic", "held"), 0, 0)])
got = []
deadline = time.time() + 90
while len(got) < ARGS["n"] and time.time() < deadline:
    m = c.poll(1.0)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
out(got=got)
'''


PRODUCE = '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP})
for i in range(ARGS["n"]):
    p.produce(ARGS["topic"], ("m%d" % i).encode(), partition=0)
out(left=p.flush(30))
'''

TEN = 'RESULT {"got": [%s]}' % ", ".join(f'"m{i}"' for i in range(10))


@pytest.fixture
def held(tmp_path):
    """A started HeldReadServer with 10 messages in "held" and a consumer process whose Fetch
    of them is in the held read; yields (server, consumer, release); lets the read go and
    stops both at the end, whatever the test did."""
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    server = HeldReadServer(tmp_path / "store", entered, release).start()
    consumer = None
    try:
        assert run_client(PRODUCE, server.bootstrap, {"n": 10, "topic": "held"}) == {"left": 0}
        consumer = subprocess.Popen([sys.executable, "-c", CONSUME, server.bootstrap,
                                     '{"n": 10}'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        with open(entered, "rb") as f:          # the consumer's Fetch is in the held read
            assert f.read(1) == b"1"
        yield server, consumer, release
    finally:
        fd = os.open(release, os.O_RDWR | os.O_NONBLOCK)   # never blocks on no reader
        os.write(fd, b"1")
        os.close(fd)
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
        assert server.stop() == 0


def _let_go(release: Path, consumer: subprocess.Popen) -> None:
    """Let the held read go; the held consumer then gets all of "held"."""
    with open(release, "wb") as f:
        f.write(b"1")
    stdout, stderr = consumer.communicate(timeout=120)
    got = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert got, stderr[-3000:]
    assert got[0] == TEN


def test_a_held_store_read_leaves_other_connections_answered(held):
    server, consumer, release = held
    # meanwhile another connection: ApiVersions and Metadata answered (a loop blocked
    # by the read would leave list_topics to time out)
    meta = run_client('''
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": BOOTSTRAP})
md = a.list_topics(timeout=20)
out(topics=sorted(md.topics), partitions=len(md.topics["held"].partitions))
''', server.bootstrap)
    assert "held" in meta["topics"]
    assert meta["partitions"] >= 1
    assert consumer.poll() is None           # the Fetch is still waiting on its read
    _let_go(release, consumer)


def test_a_held_store_read_leaves_another_consumers_fetch_served(held):
    """Fetch reads are not on one shared thread: while one consumer's read waits, another
    consumer (another connection, another topic) is served all it asks for."""
    server, consumer, release = held
    assert run_client(PRODUCE, server.bootstrap, {"n": 10, "topic": "free"}) == {"left": 0}
    other = run_client(CONSUME, server.bootstrap, {"n": 10, "topic": "free"})
    assert other == {"got": [f"m{i}" for i in range(10)]}
    assert consumer.poll() is None               # the held Fetch is still in its read
    _let_go(release, consumer)
