"""Tier fixtures: a real S3 endpoint (moto's server as its own process on 127.0.0.1, started
and stopped by the suite) and the POSIX backend, so every tier test runs against both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tier_helpers import S3_ENV, Tier, free_port, new_bucket

# Spark's Python workers get the environment the JVM started with: the fake S3 credentials
# must be there before any test starts a Spark session.
for _k, _v in S3_ENV.items():
    os.environ.setdefault(_k, _v)


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


@pytest.fixture(params=["posix", "s3"])
def tier(request, tmp_path: Path) -> Tier:
    """A fresh, empty tier of each kind."""
    if request.param == "posix":
        return Tier("posix", f"file://{tmp_path / 'tier'}", None)
    endpoint = request.getfixturevalue("s3_endpoint")
    return Tier("s3", f"s3://{new_bucket(endpoint)}/some/prefix", endpoint)
