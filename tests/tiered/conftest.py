"""Tier fixtures: a real S3 endpoint (moto's server as its own process on 127.0.0.1, started
and stopped by the suite) and the POSIX backend, so every tier test runs against both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

S3_ENV = {"AWS_ACCESS_KEY_ID": "strata-test", "AWS_SECRET_ACCESS_KEY": "strata-test",
          "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """``python -m moto.server`` on a free port of 127.0.0.1, for the whole session (its
    request log goes to a file: a pipe nobody reads would fill and stall the server)."""
    port = free_port()
    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "w+b")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log.seek(0)
                raise RuntimeError(f"moto server did not start: {log.read().decode()}")
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)
    log.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def new_bucket(endpoint: str) -> str:
    import boto3
    name = f"strata-{uuid.uuid4().hex[:12]}"
    c = boto3.client("s3", endpoint_url=endpoint)
    c.create_bucket(Bucket=name)
    c.close()
    return name


@dataclass
class Tier:
    """Where a test's tier lives: a URL, an endpoint (S3 only) and its kind."""

    kind: str
    url: str
    endpoint: str | None

    def backend(self, **options):
        from strata.tiered.connect import open_backend
        return open_backend(self.url, self.endpoint, **options)


@pytest.fixture(params=["posix", "s3"])
def tier(request, tmp_path: Path) -> Tier:
    """A fresh, empty tier of each kind."""
    if request.param == "posix":
        return Tier("posix", f"file://{tmp_path / 'tier'}", None)
    endpoint = request.getfixturevalue("s3_endpoint")
    return Tier("s3", f"s3://{new_bucket(endpoint)}/some/prefix", endpoint)
