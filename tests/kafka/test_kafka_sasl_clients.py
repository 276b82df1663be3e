"""SASL and ACL on the Kafka listener with the real clients, each in its own process, against
`strata serve --kafka --acl FILE`: PLAIN and SCRAM-SHA-256 with confluent-kafka and
kafka-python, a wrong password refused, topic and group rights enforced, and nothing but
ApiVersions and SASL answered before authentication."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_support import KafkaServer, run_client

pytestmark = pytest.mark.broker

SCRIPT = str(Path(__file__).with_name("group_client_script.py"))

ACL = """\
accounts:
  - accessKey: admin1
    secretKey: admin-secret
    admin: true
  - accessKey: bob123
    secretKey: bob-secret
    topicPerms:
      - open=PUB|SUB
      - readonly=SUB
    groupPerms:
      - bobs=SUB
"""


def run(mode: str, name: str, server, topic: str, *rest: str, sasl=None,
        deadline: float = 60) -> tuple[int, dict]:
    extra = (["--sasl", *sasl] if sasl else []) + ["--deadline", str(deadline)]
    p = subprocess.run([sys.executable, SCRIPT, mode, name, server.bootstrap, topic, *rest,
                        *extra], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise AssertionError(f"{name} {mode}: no output (exit {p.returncode})\n"
                             f"{p.stderr[-4000:]}")
    return p.returncode, lines[-1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("sasl")
    (d / "acl.yml").write_text(ACL)
    s = KafkaServer(d / "store", "--acl", str(d / "acl.yml")).start()
    admin = ("SCRAM-SHA-256", "admin1", "admin-secret")
    for topic in ("open", "readonly", "secret"):
        code, out = run("create", "kafka-python", s, topic, "2", sasl=admin)
        assert code == 0, out
    yield s
    s.stop()


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("name", ["confluent", "kafka-python"])
def test_authenticated_produce_subscribe_commit(server, name, mech):
    bob = (mech, "bob123", "bob-secret")
    code, out = run("produce", name, server, "open", "5", "--start", "0", sasl=bob)
    assert (code, out) == (0, {"produced": 5})
    code, out = run("consume", name, server, "open", "bobs", "5", sasl=bob)
    assert code == 0, out
    assert len(out["got"]) >= 5 and set(out["got"]) <= {f"m{i}" for i in range(5)}
    assert sum(int(o) for o in out["committed"].values()) >= 5


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("name", ["confluent", "kafka-python"])
def test_wrong_password_is_refused(server, name, mech):
    code, out = run("produce", name, server, "open", "1", sasl=(mech, "bob123", "wrong!"))
    assert code == 3
    error = out["error"].lower()
    if name == "kafka-python" and "unable to bootstrap" in error:
        # kafka-python's bootstrap loop reports the SASL failure or, when it reads the closed
        # connection first (timing), only that it could not bootstrap: refused either way
        return
    assert "auth" in error, out


@pytest.mark.parametrize("name", ["confluent", "kafka-python"])
def test_topic_and_group_rights(server, name):
    bob = ("PLAIN", "bob123", "bob-secret")
    code, out = run("produce", name, server, "readonly", "1", sasl=bob)     # SUB only
    assert code == 3 and "authoriz" in out["error"].lower(), out
    code, out = run("consume", name, server, "open", "not-bobs", "1", sasl=bob)
    assert code == 3 and "group" in out["error"].lower() and "authoriz" in out["error"].lower()
    code, out = run("consume", name, server, "secret", "bobs", "1", sasl=bob, deadline=8)
    if code == 0:       # kafka-python logs the refused topic and stays subscribed to nothing
        assert out["got"] == [] and any("not authorized" in t for t in out["logged"]), out
    else:
        assert code == 3 and "authoriz" in out["error"].lower(), out


def _request(sock: socket.socket, key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", key, version, 1, 4) + b"test"
    sock.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
    size = sock.recv(4)
    if len(size) < 4:
        return b""
    (n,) = struct.unpack(">i", size)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_requests_before_authentication_close_the_connection(server):
    host, port = server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        assert _request(s, 18, 0, b"")                    # ApiVersions v0 is answered
        # Metadata v1 for all topics (null array) before SASL: the connection is closed
        assert _request(s, 3, 1, struct.pack(">i", -1)) == b""


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _partitions_of_fetch_v4(data: bytes) -> dict:
    """{topic: (error code, record bytes)} of a Fetch v4 answer (one partition each)."""
    at = 4 + 4                                      # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", data, at)
    at += 4
    got = {}
    for _ in range(topics):
        (n,) = struct.unpack_from(">h", data, at)
        name = data[at + 2:at + 2 + n].decode()
        at += 2 + n + 4                             # one partition
        _p, code, _hw, _ls, aborted = struct.unpack_from(">ihqqi", data, at)
        at += 26 + 12 * max(0, aborted)
        (size,) = struct.unpack_from(">i", data, at)
        at += 4
        got[name] = (code, max(0, size))
        at += max(0, size)
    return got


def test_a_fetch_of_an_allowed_and_a_refused_topic_serves_the_allowed_one(server):
    """One Fetch asks for a topic the account may read and one it may not: the first's
    records come, the second answers TOPIC_AUTHORIZATION_FAILED, the connection stays."""
    sent = run_client('''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "bob123",
              "sasl.password": "bob-secret"})
for i in range(5):
    p.produce("open", b"mixed-%d" % i, partition=1)
out(left=p.flush(30))
''', server.bootstrap)
    assert sent == {"left": 0}
    host, port = server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        assert _request(s, 17, 1, _str("PLAIN"))[4:6] == b"\0\0"          # handshake
        token = b"\0bob123\0bob-secret"
        assert _request(s, 36, 0, struct.pack(">i", len(token)) + token)[4:6] == b"\0\0"
        part = struct.pack(">iiqi", 1, 1, 0, 1 << 20)          # one partition: 1, offset 0
        body = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0) + struct.pack(">i", 2) + \
            _str("open") + part + _str("secret") + part
        got = _partitions_of_fetch_v4(_request(s, 1, 4, body))
        assert got["secret"] == (29, 0)              # TOPIC_AUTHORIZATION_FAILED, no records
        assert got["open"][0] == 0 and got["open"][1] > 5 * len(b"mixed-0")
        assert _request(s, 18, 0, b"")               # the connection still answers
