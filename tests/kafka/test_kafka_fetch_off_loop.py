"""A Fetch whose store read is slow (a read that reaches S3 through the tier) does not hold
up the listener: the read runs on the reader thread, so while it waits another
connection's ApiVersions and Metadata are answered, and then the Fetch gets its messages.
The read is held on purpose (tests/kafka/held_read.py) until the test has asked the other
connection, so that moment comes on every run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_support import PRELUDE, KafkaServer, SMALL_STORE, run_client

HERE = Path(__file__).parent


class HeldReadServer(KafkaServer):
    """`strata serve --kafka` through held_read.py (its reads of "held" wait for the test)."""

    def __init__(self, directory: Path, entered: Path, release: Path) -> None:
        super().__init__(directory)
        self.fifos = (str(entered), str(release))

    def start(self, port: int = 0) -> "HeldReadServer":
        cmd = [sys.executable, str(HERE / "held_read.py"), *self.fifos, "serve",
               str(self.directory), "--kafka", "127.0.0.1:0", "--exit-with-parent"]
        for opt in SMALL_STORE:
            cmd += ["--store-option", opt]
        m = self._spawn(cmd, r"([\d.]+):(\d+) \(kafka\)", 60, "strata serve")
        self.bootstrap = f"{m.group(1)}:{m.group(2)}"
        return self


CONSUME = PRELUDE + '''
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "off-loop",
              "enable.auto.commit": False})
c.assign([TopicPartition("held", 0, 0)])
got = []
deadline = time.time() + 90
while len(got) < ARGS["n"] and time.time() < deadline:
    m = c.poll(1.0)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
out(got=got)
'''


def test_a_held_store_read_leaves_other_connections_answered(tmp_path):
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    server = HeldReadServer(tmp_path / "store", entered, release).start()
    consumer = None
    released = False
    try:
        sent = run_client('''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP})
for i in range(ARGS["n"]):
    p.produce("held", ("m%d" % i).encode(), partition=0)
out(left=p.flush(30))
''', server.bootstrap, {"n": 10})
        assert sent == {"left": 0}
        consumer = subprocess.Popen([sys.executable, "-c", CONSUME, server.bootstrap,
                                     '{"n": 10}'], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        with open(entered, "rb") as f:          # the consumer's Fetch is in the held read
            assert f.read(1) == b"1"
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
        with open(release, "wb") as f:
            f.write(b"1")
        released = True
        stdout, stderr = consumer.communicate(timeout=120)
        got = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        assert got, stderr[-3000:]
        assert got[0] == 'RESULT {"got": [%s]}' % ", ".join(f'"m{i}"' for i in range(10))
    finally:
        if not released:
            fd = os.open(release, os.O_RDWR | os.O_NONBLOCK)   # never blocks on no reader
            os.write(fd, b"1")
            os.close(fd)
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
        assert server.stop() == 0
