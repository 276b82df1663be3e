"""Starting `strata serve` as its own process and driving it with the official RocketMQ
client (rocketmq-python-client) in client processes of their own (importing the client writes
logs under $HOME, so each client process gets a temporary HOME)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import StrataProcess

SMALL_STORE = ("segment_size=4194304", "index_slots=4096", "index_entries=16384",
               "prefault=false")

# Helpers every client script starts with: the official client's API, nothing else.
PRELUDE = '''
import json, sys, time
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as svc
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
import grpc

ENDPOINT = sys.argv[1]

def config():
    return ClientConfiguration(ENDPOINT, Credentials(), request_timeout=5)

def producer(*topics):
    p = Producer(config(), topics)
    p.startup()
    return p

def message(topic, body, tag=None, keys=(), props=None, group=None):
    m = Message()
    m.topic = topic
    m.body = body.encode() if isinstance(body, str) else body
    if tag:
        m.tag = tag
    for k in keys:
        m.keys = k
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    return m

def consumer(group, topic, expr="*", await_s=2):
    c = SimpleConsumer(config(), group, {topic: FilterExpression(expr)}, await_duration=await_s)
    c.startup()
    return c

def stub():
    return MessagingServiceStub(grpc.insecure_channel(ENDPOINT))

def meta():
    return [("x-mq-client-id", "raw-test-client")]

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
'''


class Broker(StrataProcess):
    """A running `strata serve` process."""

    # how the `strata` command is run (a test may run it through a wrapper of its own)
    command = (sys.executable, "-X", "faulthandler", "-m", "strata.cli.main")

    def __init__(self, directory: Path, *args: str) -> None:
        super().__init__()
        self.directory = directory
        self.args = args
        self.endpoint = ""

    def start(self, port: int = 0) -> "Broker":
        cmd = [*self.command, "serve", str(self.directory),
               "--listen", f"127.0.0.1:{port}", "--exit-with-parent"]
        for opt in SMALL_STORE:
            cmd += ["--store-option", opt]
        cmd += self.args       # after the small store's options: a test's own option wins
        m = self._spawn(cmd, r"listening on ([\d.]+):(\d+)", 30, "strata serve")
        self.endpoint = f"{m.group(1)}:{m.group(2)}"
        return self

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])


def run_client(tmp_path: Path, endpoint: str, code: str, timeout: float = 90,
               args: object = None) -> dict:
    """Run ``code`` (after PRELUDE) in a client process; the dict it passed to ``out``.
    ``args`` reaches it as JSON in ``sys.argv[2]``."""
    home = tmp_path / "client-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home))
    script = PRELUDE + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", script, endpoint, json.dumps(args)],
                       capture_output=True,
                       text=True, timeout=timeout, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"client failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n"
                         f"{p.stderr[-5000:]}")


@pytest.fixture
def broker_factory(tmp_path: Path):
    started: list[Broker] = []

    def make(*args: str, directory: Path | None = None) -> Broker:
        b = Broker(directory or tmp_path / "store", *args).start()
        started.append(b)
        return b

    yield make
    for b in started:     # never leave a server running (they also watch their parent)
        b.stop(signal.SIGTERM)


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()
