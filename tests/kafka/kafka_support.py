"""Starting `strata serve --kafka` as its own process, and running Kafka client scripts
(confluent-kafka, kafka-python, aiokafka, kcat) in processes of their own.

``KafkaServer(directory, *args).start()`` waits for the start line and reads the Kafka port
from it (``HOST:PORT (kafka)``); ``stop(sig)`` returns the exit code and keeps the log.
``run_client(code, bootstrap, args)`` runs ``code`` after PRELUDE and returns the dict the
script passed to ``out(...)``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from support import StrataProcess

import pytest

SMALL_STORE = ("segment_size=4194304", "index_slots=4096", "index_entries=16384",
               "prefault=false")

PRELUDE = '''
import json, sys, time
BOOTSTRAP = sys.argv[1]
ARGS = json.loads(sys.argv[2])

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
'''


# the initial rebalance delay of the tests' servers: a third of Kafka's 3000 ms (strata's
# default), which keeps group tests quick and is still far above the time kafka-python takes to
# learn a topic's partitions after it joins (tens of ms, some hundreds on a loaded machine;
# docs/kafka.md says why that matters)
GROUP_DELAY_MS = 1000


class KafkaServer(StrataProcess):
    """A running `strata serve --kafka` process (and gRPC too with ``grpc=True``);
    ``group_delay_ms`` is its ``--kafka-initial-rebalance-delay-ms``."""

    def __init__(self, directory: Path, *args: str, grpc: bool = False,
                 group_delay_ms: int = GROUP_DELAY_MS) -> None:
        super().__init__()
        self.directory = directory
        self.args = args
        self.grpc = grpc
        self.group_delay_ms = group_delay_ms
        self.bootstrap = ""
        self.endpoint = ""          # the gRPC endpoint, with grpc=True

    def start(self, port: int = 0) -> "KafkaServer":
        cmd = [sys.executable, "-X", "faulthandler", "-m", "strata.cli.main", "serve",
               str(self.directory),
               "--kafka", f"127.0.0.1:{port}", "--exit-with-parent",
               "--kafka-initial-rebalance-delay-ms", str(self.group_delay_ms), *self.args]
        if self.grpc:
            cmd += ["--listen", "127.0.0.1:0"]
        for opt in SMALL_STORE:
            cmd += ["--store-option", opt]
        m = self._spawn(cmd, r"([\d.]+):(\d+) \(kafka\)", 60, "strata serve")
        self.bootstrap = f"{m.group(1)}:{m.group(2)}"
        g = re.search(r"listening on ([\d.]+):(\d+)[,( ]", m.string)
        if self.grpc and g:
            self.endpoint = f"{g.group(1)}:{g.group(2)}"
        return self

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        return super().stop(sig, timeout)


def run_client(code: str, bootstrap: str, args: object = None, *, timeout: float = 120,
               home: Path | None = None) -> dict:
    """Run ``code`` (after PRELUDE) in its own Python process; the dict it passed to
    ``out``. ``args`` reaches it as ``ARGS``."""
    env = dict(os.environ)
    if home is not None:
        env["HOME"] = str(home)
    script = PRELUDE + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", script, bootstrap, json.dumps(args)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"client failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n"
                         f"{p.stderr[-5000:]}")


@pytest.fixture(scope="module")
def kafka_server(tmp_path_factory):
    """One `strata serve --kafka` (with gRPC too) for a test module."""
    s = KafkaServer(tmp_path_factory.mktemp("kafka") / "store", grpc=True).start()
    yield s
    s.stop()


@pytest.fixture
def kafka_factory(tmp_path: Path):
    started: list[KafkaServer] = []

    def make(*args: str, directory: Path | None = None, grpc: bool = False) -> KafkaServer:
        s = KafkaServer(directory or tmp_path / "store", *args, grpc=grpc).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop(signal.SIGTERM)


# a confluent-kafka consumer reading ARGS["n"] messages of partition 0 of ARGS["topic"]
# from its start (assign, no group membership); prints {"got": [values]} (fewer if 90 s pass)
CONSUME = PRELUDE + '''
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "partition-reader",
              "enable.auto.commit": False})
c.assign([TopicPartition(ARGS["topic"], 0, 0)])
got = []
deadline = time.time() + 90
while len(got) < ARGS["n"] and time.time() < deadline:
    m = c.poll(1.0)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
out(got=got)
'''


class HeldReadServer(KafkaServer):
    """`strata serve --kafka` through held_read.py: its store reads of "held" (or, with
    ``held_put=True``, its puts of "held") wait until the test lets them go. The two named
    pipes it tells on are made in ``fifo_dir``."""

    def __init__(self, directory: Path, fifo_dir: Path, held_put: bool = False) -> None:
        super().__init__(directory)
        self.entered, self.release = fifo_dir / "entered", fifo_dir / "release"
        os.mkfifo(self.entered)
        os.mkfifo(self.release)
        self.fifos = (str(self.entered), str(self.release)) + (
            ("--held-put",) if held_put else ())

    def start(self, port: int = 0) -> "HeldReadServer":
        cmd = [sys.executable, str(Path(__file__).parent / "held_read.py"), *self.fifos,
               "serve", str(self.directory), "--kafka", "127.0.0.1:0", "--exit-with-parent"]
        for opt in SMALL_STORE:
            cmd += ["--store-option", opt]
        m = self._spawn(cmd, r"([\d.]+):(\d+) \(kafka\)", 60, "strata serve")
        self.bootstrap = f"{m.group(1)}:{m.group(2)}"
        return self

    def wait_held(self) -> None:
        """Until a call is held (the wrapper's byte on the entered pipe: no polling)."""
        with open(self.entered, "rb") as f:
            assert f.read(1) == b"1"

    def let_go(self) -> None:
        """Let the held call go on (also when nothing is held yet: never blocks)."""
        fd = os.open(self.release, os.O_RDWR | os.O_NONBLOCK)
        os.write(fd, b"1")
        os.close(fd)

    def assert_others_answered(self) -> None:
        """Another connection's ApiVersions and Metadata are answered (a listener whose loop
        the held call blocked would leave list_topics to time out)."""
        meta = run_client('''
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": BOOTSTRAP})
md = a.list_topics(timeout=20)
out(topics=sorted(md.topics), partitions=len(md.topics["held"].partitions))
''', self.bootstrap)
        assert "held" in meta["topics"]
        assert meta["partitions"] >= 1
