"""A Produce whose store put is slow (a pwrite held in the kernel's dirty-page throttling)
does not hold up the listener: under ``--flush async`` the put runs on the send batcher's
writer thread (``SendBatcher.put_soon``), never on the event loop, so while it waits another
connection's ApiVersions and Metadata are answered, and then the Produce is acknowledged and
its messages are stored. The put is held on purpose (tests/kafka/held_read.py --held-put)
until the test has asked the other connection, so that moment comes on every run."""

import subprocess
import sys

from kafka_support import CONSUME, PRELUDE, HeldReadServer, run_client

PRODUCE = PRELUDE + '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 0})
for i in range(ARGS["n"]):
    p.produce("held", ("m%d" % i).encode(), partition=0)
out(left=p.flush(90))
'''


def test_a_held_put_leaves_other_connections_answered(tmp_path):
    server = HeldReadServer(tmp_path / "store", tmp_path, held_put=True).start()
    producer = None
    try:
        producer = subprocess.Popen([sys.executable, "-c", PRODUCE, server.bootstrap,
                                     '{"n": 10}'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        server.wait_held()                      # the producer's put is held
        server.assert_others_answered()
        assert producer.poll() is None          # the Produce still waits on its put
        server.let_go()
        stdout, stderr = producer.communicate(timeout=120)
        assert 'RESULT {"left": 0}' in stdout, stderr[-3000:]
        got = run_client(CONSUME, server.bootstrap, {"n": 10, "topic": "held"})
        assert got == {"got": [f"m{i}" for i in range(10)]}
    finally:
        server.let_go()
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.communicate()
        assert server.stop() == 0
