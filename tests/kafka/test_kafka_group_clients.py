"""Consumer groups and committed offsets with the real Kafka clients, each in its own
process, against `strata serve --kafka` in its own process: subscribe + commit + resume with
confluent-kafka, kafka-python and aiokafka; a mixed group of two confluent-kafka consumers
and one kafka-python consumer over six partitions; committed offsets surviving a SIGKILL."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_support import KafkaServer

pytestmark = pytest.mark.broker

SCRIPT = str(Path(__file__).with_name("group_client_script.py"))
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


def client(mode: str, name: str, server, topic: str, *rest: str, timeout: float = 90,
           extra: tuple[str, ...] = ()) -> dict:
    p = subprocess.run([sys.executable, SCRIPT, mode, name, server.bootstrap, topic, *rest,
                        *extra], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        raise AssertionError(f"{name} {mode} failed (exit {p.returncode}): {p.stdout[-2000:]}"
                             f"\n{p.stderr[-4000:]}")
    return lines[-1]


def create_topic(server, topic: str, partitions: int) -> None:
    assert client("create", "kafka-python", server, topic, str(partitions)) == \
        {"created": topic}


@pytest.fixture
def server(tmp_path):
    s = KafkaServer(tmp_path / "store").start()
    yield s
    s.stop()


@pytest.mark.parametrize("name", CLIENTS)
def test_subscribe_commit_and_resume(server, name):
    topic, group = f"sub-{name}", f"group-{name}"
    create_topic(server, topic, 3)
    assert client("produce", name, server, topic, "30") == {"produced": 30}
    first = client("consume", name, server, topic, group, "30")
    assert sorted(first["got"]) == sorted(f"m{i}" for i in range(30))
    committed = {int(p): o for p, o in first["committed"].items()}
    assert sum(committed.values()) == 30 and len(committed) == 3
    # a new consumer of the group resumes at the committed offsets: only the new messages
    client("produce", name, server, topic, "10", "--start", "30")
    second = client("consume", name, server, topic, group, "10")
    assert sorted(second["got"]) == sorted(f"m{i}" for i in range(30, 40))
    seen = client("committed", name, server, topic, group, "3")["committed"]
    assert sum(int(o) for o in seen.values()) == 40


def test_mixed_group_reads_every_message_once(server, tmp_path):
    topic, group = "mixed", "mixed-group"
    create_topic(server, topic, 6)
    stop = tmp_path / "stop"
    logs = [open(tmp_path / f"member{i}.log", "w") for i in range(3)]
    members = [subprocess.Popen([sys.executable, SCRIPT, "member", name, server.bootstrap,
                                 topic, group, "--stop", str(stop)],
                                stdout=subprocess.PIPE, stderr=logs[i], bufsize=0)
               for i, name in enumerate(("confluent", "confluent", "kafka-python"))]
    try:
        # wait until the three hold disjoint assignments covering the six partitions
        sel = selectors.DefaultSelector()
        for i, m in enumerate(members):
            sel.register(m.stdout, selectors.EVENT_READ, i)
        pending = [b"", b"", b""]      # raw reads: a buffered readline would hide lines
        assigned: dict[int, list[int]] = {}
        got: list[tuple[int, str]] = []

        def read_until(done, seconds: float) -> None:
            end = time.monotonic() + seconds
            while not done() and time.monotonic() < end:
                for key, _ in sel.select(timeout=max(0.0, end - time.monotonic())):
                    chunk = os.read(key.fileobj.fileno(), 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    *lines, pending[key.data] = (pending[key.data] + chunk).split(b"\n")
                    for line in lines:
                        if line.startswith(b"{"):
                            handle(key.data, json.loads(line))

        def handle(who: int, ev: dict) -> None:
            if "assigned" in ev:
                assigned[who] = ev["assigned"]
            elif "revoked" in ev:
                assigned.pop(who, None)
            elif "msg" in ev:
                got.append((who, ev["msg"]))
            elif "error" in ev:
                raise AssertionError(f"member {who}: {ev['error']}")

        def balanced() -> bool:
            parts = [p for ps in assigned.values() for p in ps]
            return (len(assigned) == 3 and sorted(parts) == list(range(6))
                    and all(len(ps) == 2 for ps in assigned.values()))

        read_until(balanced, 90)
        assert balanced(), f"assignments never settled: {assigned}"
        # operators see the group: ListGroups and DescribeGroups through kafka-python's admin
        seen = client("groups", "kafka-python", server, topic, group)
        assert group in seen["listed"] and seen["state"] == "Stable"
        assert seen["protocol"] == "range" and len(seen["members"]) == 3
        client("produce", "confluent", server, topic, "600")
        read_until(lambda: len(got) >= 600, 90)
        values = [v for _i, v in got]
        assert len(values) == 600 and sorted(set(values)) == sorted(f"m{i}" for i in range(600))
        assert {i for i, _v in got} == {0, 1, 2}           # each member read its share
    finally:
        stop.touch()
        for m in members:
            try:
                m.wait(timeout=30)
            except subprocess.TimeoutExpired:
                m.kill()
                m.wait()
        for f in logs:
            f.close()


def test_committed_offsets_survive_sigkill(tmp_path):
    s = KafkaServer(tmp_path / "store").start()
    try:
        create_topic(s, "durable", 2)
        client("produce", "kafka-python", s, "durable", "20")
        first = client("consume", "kafka-python", s, "durable", "dg", "20")
        assert sum(first["committed"].values()) == 20
        s.stop(signal.SIGKILL)
        s = KafkaServer(tmp_path / "store").start()
        seen = client("committed", "confluent", s, "durable", "dg", "2")["committed"]
        assert {int(p): o for p, o in seen.items()} == {int(p): o for p, o in
                                                      first["committed"].items()}
    finally:
        s.stop()
