"""The second real client: the official RocketMQ Node.js client (`rocketmq-client-nodejs`,
pinned by tests/broker/node/package-lock.json) sends to and receives from `strata serve`.

The node dependencies are installed by the first test that needs them (`npm ci` into the
git-ignored tests/broker/node/node_modules), so a clean checkout needs only node and npm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import strata

pytestmark = pytest.mark.broker

NODE_DIR = Path(__file__).parent / "node"
CLIENT = "rocketmq-client-nodejs"


def _installed_version() -> str | None:
    try:
        manifest = NODE_DIR / "node_modules" / CLIENT / "package.json"
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def node_client() -> Path:
    """The node directory with the pinned client installed (npm ci when it is missing or
    not the locked version). Without node/npm the test fails, naming what to install."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the Node.js client test (not found on PATH; "
                    "Debian: apt-get install nodejs npm)")
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    locked = lock["packages"][f"node_modules/{CLIENT}"]["version"]
    if _installed_version() != locked:
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(NODE_DIR)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"npm ci failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        assert _installed_version() == locked
    return NODE_DIR


def run_node(node_dir: Path, tmp_path: Path, *args: str, timeout: float = 120) -> dict:
    """Run roundtrip.js (the client logs under $HOME, so it gets a temporary one)."""
    home = tmp_path / "node-home"
    home.mkdir(exist_ok=True)
    p = subprocess.run(["node", str(node_dir / "roundtrip.js"), *args], capture_output=True,
                       text=True, timeout=timeout, cwd=node_dir, env=dict(os.environ, HOME=str(home)))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"node client failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n"
                         f"{p.stderr[-5000:]}")


def test_node_client_sends_with_keys_tags_properties_and_receives_and_acks(
        node_client, broker, tmp_path):
    n = 6
    got = run_node(node_client, tmp_path, broker.endpoint, "node-orders", "node-group", str(n))

    # the node producer was answered with one id per message; its consumer got each once
    ids = [s["id"] for s in got["sent"]]
    assert len(set(ids)) == n
    received = sorted(got["received"], key=lambda r: int(r["properties"]["seq"]))
    assert [r["id"] for r in received] == ids
    for i, r in enumerate(received):
        assert r["topic"] == "node-orders" and r["body"] == f"node-body-{i}"
        assert r["tag"] == ("even" if i % 2 == 0 else "odd")
        assert r["keys"] == sorted([f"node-key-{i}", f"order-{i}"])
        assert r["properties"] == {"lang": "node", "seq": str(i)}
        assert r["attempt"] == 1
    assert got["again"] == 0          # all acked: nothing comes back

    # what the store holds, read after a clean stop
    assert broker.stop() == 0
    with strata.open(broker.directory, readonly=True) as store:
        stored = [m for q in range(store.queue_count("node-orders"))
                  for m in store.get("node-orders", q, 0, 32).messages]
        assert [m.topic for m in store.query("node-orders", "order-3")] == ["node-orders"]
    by_body = {m.body: m for m in stored}
    assert sorted(by_body) == sorted(f"node-body-{i}".encode() for i in range(n))
    for i, sent in enumerate(got["sent"]):
        m = by_body[f"node-body-{i}".encode()]
        assert m.tags == ("even" if i % 2 == 0 else "odd")
        assert sorted(m.keys) == sorted([f"node-key-{i}", f"order-{i}"])
        assert m.properties["lang"] == "node" and m.properties["seq"] == str(i)
        assert m.properties["UNIQ_KEY"] == sent["id"]       # the client's id, kept
        assert m.queue_offset == sent["offset"]             # the offset it was answered
