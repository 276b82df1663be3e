"""A Produce whose store put is slow (a pwrite held in the kernel's dirty-page throttling)
does not hold up the listener: under ``--flush async`` the put runs on the send batcher's
writer thread (``SendBatcher.put_soon``), never on the event loop, so while it waits another
connection's ApiVersions and Metadata are answered, and then the Produce is acknowledged and
its messages are stored. The put is held on purpose (tests/kafka/held_read.py --held-put)
until the test has asked the other connection, so that moment comes on every run."""

import os
import subprocess
import sys

from kafka_support import PRELUDE, HeldReadServer, run_client

PRODUCE = PRELUDE + '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 0})
for i in range(ARGS["n"]):
    p.produce("held", ("m%d" % i).encode(), partition=0)
out(left=p.flush(90))
'''


def test_a_held_put_leaves_other_connections_answered(tmp_path):
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    server = HeldReadServer(tmp_path / "store", entered, release, held_put=True).start()
    producer = None
    try:
        producer = subprocess.Popen([sys.executable, "-c", PRODUCE, server.bootstrap,
                                     '{"n": 10}'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        with open(entered, "rb") as f:          # the producer's put is held
            assert f.read(1) == b"1"
        # meanwhile another connection: ApiVersions and Metadata answered (a loop blocked
        # by the put would leave list_topics to time out)
        meta = run_client('''
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": BOOTSTRAP})
md = a.list_topics(timeout=20)
out(topics=sorted(md.topics), partitions=len(md.topics["held"].partitions))
''', server.bootstrap)
        assert "held" in meta["topics"]
        assert meta["partitions"] >= 1
        assert producer.poll() is None           # the Produce still waits on its put
        with open(release, "wb") as f:
            f.write(b"1")
        stdout, stderr = producer.communicate(timeout=120)
        assert 'RESULT {"left": 0}' in stdout, stderr[-3000:]
        got = run_client('''
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "check",
              "enable.auto.commit": False})
c.assign([TopicPartition("held", 0, 0)])
got = []
deadline = time.time() + 60
while len(got) < 10 and time.time() < deadline:
    m = c.poll(1.0)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
out(got=got)
''', server.bootstrap)
        assert got == {"got": [f"m{i}" for i in range(10)]}
    finally:
        fd = os.open(release, os.O_RDWR | os.O_NONBLOCK)   # never blocks on no reader
        os.write(fd, b"1")
        os.close(fd)
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.communicate()
        assert server.stop() == 0
