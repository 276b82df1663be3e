"""A stop of `strata serve --kafka --http` while the console's charts are open: the long
poll a chart keeps waiting (``?after=SEQ``) answers at once instead of holding the stop
for its 30 s, and the store closes cleanly."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import strata

from console_support import serve_cmd, small_config


def _long_poll(url: str, seq: int) -> socket.socket:
    """Send a chart's long poll for the sample after ``seq``; the open socket to read from."""
    u = urlsplit(url)
    sock = socket.create_connection((u.hostname, u.port), timeout=60)
    sock.sendall(f"GET /api/overview?after={seq} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                 "Connection: close\r\n\r\n".encode())
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        got = sock.recv(65536)
        if not got:
            return b"".join(chunks)
        chunks.append(got)


def test_sigterm_answers_waiting_long_poll_and_closes_store(tmp_path, served):
    d = tmp_path / "store"
    s = served(serve_cmd(d, "--kafka", "127.0.0.1:0"))
    seq = s.api("/api/overview")["rates"]["seq"]
    # a sample far ahead: this poll would wait its whole LONG_POLL_S for it
    sock = _long_poll(s.url, seq + 1_000_000)
    try:
        # wait (on answers, not a clock) until the server holds the poll
        while s.api("/api/overview")["console"]["long_polls"] < 1:
            pass
        assert s.stop() == 0, s.log
        head, _, body = _read_all(sock).partition(b"\r\n\r\n")
    finally:
        sock.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert "seq" in json.loads(body)["rates"]
    # the stop woke the poll (it did not wait it out), then the broker stopped cleanly
    assert "1 long poll answered at once" in s.log, s.log
    assert "stopped cleanly" in s.log, s.log
    with strata.open(d, small_config()) as store:
        assert store.recovery_report.clean and not store.recovery_report.lost_anything
