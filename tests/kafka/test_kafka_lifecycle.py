"""Durability and the process: with --flush sync an acknowledged batch survives SIGKILL;
acks=0 stores without answering; kcat (librdkafka's CLI) produces and consumes; a port in
use is refused naming it; SIGTERM stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from kafka_support import SMALL_STORE, run_client

pytestmark = pytest.mark.kafka

PRODUCE = '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 2})
acked = []
for i in range(ARGS["n"]):
    p.produce("durable", value=b"m%05d" % i, partition=i % 2,
              on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
left = p.flush(120)
out(left=left, acked=len(acked))
'''

CONSUME = '''
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
parts = [TopicPartition(ARGS["topic"], p) for p in ARGS["parts"]]
c.assign(parts)
c.seek_to_beginning()
got = {}
deadline = time.time() + 30
while sum(map(len, got.values())) < ARGS["n"] and time.time() < deadline:
    for tp, batch in c.poll(timeout_ms=500).items():
        got.setdefault(tp.partition, []).extend((r.offset, r.value.decode()) for r in batch)
out(got={str(k): v for k, v in got.items()})
'''


def test_sync_flush_acknowledged_messages_survive_sigkill(kafka_factory, tmp_path):
    s = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    r = run_client(PRODUCE, s.bootstrap, dict(n=400))
    assert r == dict(left=0, acked=400)
    s.stop(signal.SIGKILL)
    s2 = kafka_factory("--flush", "sync", directory=tmp_path / "store")
    got = run_client(CONSUME, s2.bootstrap, dict(topic="durable", parts=[0, 1], n=400))["got"]
    for part in (0, 1):
        assert [o for o, _v in got[str(part)]] == list(range(200))
        assert [v for _o, v in got[str(part)]] == [f"m{i:05d}" for i in range(part, 400, 2)]
    assert s2.stop() == 0
    assert "stopped cleanly" in s2.log and "kafka: " in s2.log


ACKS_ZERO = '''
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks=0)
for i in range(50):
    p.send("acks0", value=b"z%d" % i, partition=0)
p.flush(120)                        # (kafka-python's raises past it; it decides nothing)
p.close()
out(sent=50)
'''


def test_acks_zero_stores_without_answering(kafka_server):
    assert run_client(ACKS_ZERO, kafka_server.bootstrap)["sent"] == 50
    got = run_client(CONSUME, kafka_server.bootstrap, dict(topic="acks0", parts=[0], n=50))
    assert [v for _o, v in got["got"]["0"]] == [f"z{i}" for i in range(50)]


def test_kcat_produces_and_consumes(kafka_server):
    b = kafka_server.bootstrap
    lines = "".join(f"key{i}:value {i}\n" for i in range(20))
    p = subprocess.run(["kcat", "-b", b, "-P", "-t", "kcat", "-p", "0", "-K:", "-z", "gzip"],
                       input=lines, text=True, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    c = subprocess.run(["kcat", "-b", b, "-C", "-t", "kcat", "-p", "0", "-o", "beginning",
                        "-e", "-f", "%o %k=%s\n"], text=True, capture_output=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert c.stdout.splitlines() == [f"{i} key{i}=value {i}" for i in range(20)]


def test_a_port_in_use_is_refused_naming_it(kafka_server, tmp_path):
    cmd = [sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "other"),
           "--kafka", kafka_server.bootstrap]
    for opt in SMALL_STORE:
        cmd += ["--store-option", opt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"cannot listen on {kafka_server.bootstrap} (--kafka)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
