"""The S3 backend retries 5xx answers with backoff (botocore's standard mode) and reports
a clear TierUnavailableError once its attempts are used up. A small proxy on 127.0.0.1 answers
the first requests with 503 and forwards the rest to moto's server."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from strata.tiered.errors import TierUnavailableError
from strata.tiered.s3 import S3Backend
from tier_helpers import new_bucket

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
             b'<Message>injected 503</Message></Error>')


class FlakyProxy:
    """Answers ``fail`` requests with 503, then forwards every request to ``target``."""

    def __init__(self, target: str, fail: int) -> None:
        self.fail = fail
        self.failed = 0
        up = urlsplit(target)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.failed < proxy.fail:
                    proxy.failed += 1
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
                conn.request(self.command, self.path, body, dict(self.headers))
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky(s3_endpoint):
    proxies = []

    def make(fail: int) -> FlakyProxy:
        proxies.append(FlakyProxy(s3_endpoint, fail))
        return proxies[-1]
    yield make
    for p in proxies:
        p.close()


def test_5xx_answers_are_retried(s3_endpoint, flaky):
    bucket = new_bucket(s3_endpoint)
    proxy = flaky(fail=2)
    b = S3Backend(bucket, "p", endpoint_url=proxy.url, max_attempts=4)
    b.put("x", b"payload")
    assert proxy.failed == 2
    assert b.read("x") == b"payload"


def test_attempts_used_up_is_a_clear_error(s3_endpoint, flaky):
    bucket = new_bucket(s3_endpoint)
    proxy = flaky(fail=10)
    b = S3Backend(bucket, "p", endpoint_url=proxy.url, max_attempts=2)
    with pytest.raises(TierUnavailableError, match="ServiceUnavailable"):
        b.put("x", b"payload")
    assert proxy.failed >= 2          # it did retry before giving up
