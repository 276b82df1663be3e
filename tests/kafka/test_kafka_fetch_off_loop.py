"""A Fetch whose store read is slow (a read that reaches S3 through the tier) does not hold
up the listener: the read runs on the connection's read lane (``read_lanes``), so while it
waits another connection's ApiVersions and Metadata are answered, another consumer's Fetch
of another topic gets its messages (its read runs on another of the lanes' threads), and
then the held Fetch gets its messages. The read is held on purpose (tests/kafka/
held_read.py) until the test has asked the other connection, so that moment comes on every
run."""

import subprocess
import sys

import pytest

from kafka_support import CONSUME, HeldReadServer, run_client



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
    of them is in the held read; yields (server, consumer); lets the read go and stops both
    at the end, whatever the test did."""
    server = HeldReadServer(tmp_path / "store", tmp_path).start()
    consumer = None
    try:
        assert run_client(PRODUCE, server.bootstrap, {"n": 10, "topic": "held"}) == {"left": 0}
        consumer = subprocess.Popen([sys.executable, "-c", CONSUME, server.bootstrap,
                                     '{"n": 10, "topic": "held"}'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        server.wait_held()                      # the consumer's Fetch is in the held read
        yield server, consumer
    finally:
        server.let_go()
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
        assert server.stop() == 0


def _let_go(server: HeldReadServer, consumer: subprocess.Popen) -> None:
    """Let the held read go; the held consumer then gets all of "held"."""
    server.let_go()
    stdout, stderr = consumer.communicate(timeout=120)
    got = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert got, stderr[-3000:]
    assert got[0] == TEN


def test_a_held_store_read_leaves_other_connections_answered(held):
    server, consumer = held
    server.assert_others_answered()
    assert consumer.poll() is None              # the Fetch is still waiting on its read
    _let_go(server, consumer)


def test_a_held_store_read_leaves_another_consumers_fetch_served(held):
    """Fetch reads are not on one shared thread: while one consumer's read waits, another
    consumer (another connection, another topic) is served all it asks for."""
    server, consumer = held
    assert run_client(PRODUCE, server.bootstrap, {"n": 10, "topic": "free"}) == {"left": 0}
    other = run_client(CONSUME, server.bootstrap, {"n": 10, "topic": "free"})
    assert other == {"got": [f"m{i}" for i in range(10)]}
    assert consumer.poll() is None              # the held Fetch is still in its read
    _let_go(server, consumer)
