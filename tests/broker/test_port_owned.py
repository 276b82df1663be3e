"""A listener owns its port (issue 22.7): ``strata serve`` refuses to start when its address is
in use, names the address, and opens (or creates) no store. grpc's default SO_REUSEPORT would
otherwise let a second server share the port and split the clients' sends between stores."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.broker


def _holder(reuseport: bool) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuseport:      # as a grpc server (or a second strata serve) holds its port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("reuseport", [True, False], ids=["reuseport-holder", "plain-holder"])
def test_serve_refuses_a_port_in_use_and_opens_no_store(tmp_path, reuseport):
    holder = _holder(reuseport)
    try:
        address = "127.0.0.1:%d" % holder.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "strata.cli.main", "serve",
                            str(tmp_path / "store"), "--listen", address,
                            "--exit-with-parent"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    finally:
        holder.close()
    assert r.returncode == 1, r.stderr
    assert "listening on" not in r.stderr and "Traceback" not in r.stderr
    assert f"cannot listen on {address}" in r.stderr
    assert not (tmp_path / "store").exists()


def test_a_second_serve_on_the_same_port_is_refused(broker_factory, tmp_path):
    first = broker_factory()
    r = subprocess.run([sys.executable, "-m", "strata.cli.main", "serve",
                        str(tmp_path / "other"), "--listen", first.endpoint,
                        "--exit-with-parent"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1 and f"cannot listen on {first.endpoint}" in r.stderr, r.stderr
    assert not (tmp_path / "other").exists()
    assert first.proc.poll() is None          # the first keeps serving
    assert first.stop() == 0
