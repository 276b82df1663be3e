"""OffsetCommit on a full disk, with confluent-kafka in its own process against `strata
serve --kafka` whose directory is on a small tmpfs (the tests run as root; as
tests/store/test_full_disk.py does): the commit the group journal cannot take is answered
with an error, OffsetFetch keeps answering the last durable commit, and once there is room
again commits work and are durable (a SIGKILL keeps them)."""

from __future__ import annotations

import errno
import re
import signal
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from kafka_support import KafkaServer, run_client
from test_kafka_group_clients import client, create_topic

pytestmark = pytest.mark.broker

COMMIT = '''
from confluent_kafka import Consumer, KafkaException, TopicPartition
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": ARGS["group"],
              "enable.auto.commit": False, "broker.address.family": "v4"})
result = {}
if ARGS.get("offset") is not None:
    try:
        c.commit(offsets=[TopicPartition(ARGS["topic"], p, ARGS["offset"],
                                         metadata=ARGS["metadata"])
                          for p in range(ARGS["partitions"])], asynchronous=False)
        result["commit"] = "ok"
    except KafkaException as exc:
        result["commit"] = exc.args[0].name()
got = c.committed([TopicPartition(ARGS["topic"], p) for p in range(ARGS["partitions"])],
                  timeout=10)
result["committed"] = [tp.offset for tp in got]
if ARGS.get("ends"):
    result["ends"] = [c.get_watermark_offsets(TopicPartition(ARGS["topic"], p), timeout=10)[1]
                      for p in range(ARGS["partitions"])]
c.close()
out(**result)
'''


def _mount(root: Path) -> Path | None:
    mnt = root / f"mnt-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                        capture_output=True).returncode == 0
    return mnt if ok else None


def _fill(mnt: Path) -> None:
    try:
        with open(mnt / "ballast", "ab") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC


def _lag(server) -> float:
    """The group's committed lag on the topic, scraped from --metrics."""
    url = re.search(r"metrics (http://[\d.:]+/metrics)", server.log)[1]
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(r'strata_group_committed_lag\{group="g",topic="t"\} (\S+)', text)
    assert m, text
    return float(m[1])


def test_a_commit_the_full_disk_refuses_is_an_error_and_never_fetched(tmp_path):
    mnt = _mount(tmp_path)
    if mnt is None:                  # pragma: no cover - the CI runs as root
        pytest.fail("this test needs to mount a tmpfs (run as root)")
    directory = mnt / "store"
    s = KafkaServer(directory, "--store-option", "preallocate=false",
                    "--metrics", "127.0.0.1:0").start()
    try:
        create_topic(s, "t", 3)
        client("produce", "confluent", s, "t", "30")
        args = dict(group="g", topic="t", partitions=3, metadata="m" * 3000)
        ends = run_client(COMMIT, s.bootstrap, {**args, "ends": True})["ends"]
        assert sum(ends) == 30

        def lag(c: int) -> int:
            return sum(max(0, e - c) for e in ends)
        assert run_client(COMMIT, s.bootstrap, {**args, "offset": 4}) == \
            {"commit": "ok", "committed": [4, 4, 4]}
        assert _lag(s) == lag(4)                              # per-group lag in --metrics
        _fill(mnt)
        refused = run_client(COMMIT, s.bootstrap, {**args, "offset": 9})
        assert refused["commit"] == "COORDINATOR_NOT_AVAILABLE", refused
        assert refused["committed"] == [4, 4, 4]          # never the refused one
        assert _lag(s) == lag(4)                              # nor in the lag
        (mnt / "ballast").unlink()                          # room again
        assert run_client(COMMIT, s.bootstrap, {**args, "offset": 9}) == \
            {"commit": "ok", "committed": [9, 9, 9]}
        assert _lag(s) == lag(9)
        port = s.port
        s.stop(signal.SIGKILL)
        assert "committed offsets not stored" in s.log and "No space left" in s.log
        s = KafkaServer(directory, "--store-option", "preallocate=false").start(port=port)
        assert run_client(COMMIT, s.bootstrap, args)["committed"] == [9, 9, 9]
    finally:
        s.stop()
        subprocess.run(["umount", "-l", str(mnt)], check=False)
