"""Sends that arrive within one gather interval (``--gather-ms``) share one put_batch, also
under async flush, where nothing else holds them back."""

import re

import pytest

from broker_support import run_client

pytestmark = pytest.mark.broker


def test_async_sends_within_the_gather_interval_share_put_batches(broker_factory, tmp_path):
    # a long interval, so that the outcome does not hang on how fast this machine is
    b = broker_factory("--gather-ms", "500")
    got = run_client(tmp_path, b.endpoint, '''
        p = producer("gather")
        futures = [p.send_async(message("gather", f"m{i}")) for i in range(64)]
        ids = [f.result(timeout=60).message_id for f in futures]
        p.shutdown()
        c = consumer("g", "gather")
        bodies = set()
        for _ in range(20):
            for m in c.receive(32, 10):
                bodies.add(m.body.decode())
                c.ack(m)
            if len(bodies) == 64:
                break
        c.shutdown()
        out(n=len(set(ids)), bodies=sorted(bodies))
    ''')
    assert got["n"] == 64
    assert got["bodies"] == sorted(f"m{i}" for i in range(64))
    assert b.stop() == 0
    m = re.search(r"([\d,]+) messages? stored in ([\d,]+) batch(?:es)?", b.log)
    messages, batches = (int(g.replace(",", "")) for g in m.groups())
    assert messages == 64
    assert batches <= 16          # one by one they would take about 60 put_batch calls


def test_gather_ms_must_be_a_non_negative_number(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "strata.cli.main", "serve", str(tmp_path / "s"),
                        "--listen", "127.0.0.1:0", "--gather-ms", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--gather-ms" in p.stderr
    assert not (tmp_path / "s").exists()          # refused before anything was created
