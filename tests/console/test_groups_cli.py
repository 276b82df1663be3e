"""`strata groups DIR`: the groups page in the terminal, beside a running broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import strata
from strata.store.message_store import MessageStore

from broker_support import run_client
from console_support import serve_cmd, small_config


def _groups(d: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", "groups", str(d), *args],
                          capture_output=True, text=True, timeout=120)


def test_groups_shows_lag_and_in_flight_beside_the_broker(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("payments", queues=2)
    empty = _groups(d)
    assert empty.returncode == 0 and "no consumer group" in empty.stdout
    b = served(serve_cmd(d))
    run_client(tmp_path, b.endpoint, """
        p = producer("payments")
        for i in range(12):
            p.send(message("payments", f"pay-{i}"))
        c = consumer("billing", "payments")
        acked = 0
        while acked < 12:
            for m in c.receive(32, 30):
                c.ack(m)
                acked += 1
        for i in range(5):
            p.send(message("payments", f"late-{i}"))
        held = []
        while len(held) < 2:
            held += c.receive(2 - len(held), 60)
        out(ok=True)
    """)
    r = _groups(d, "--json")
    assert r.returncode == 0, r.stderr
    (g,) = json.loads(r.stdout)["groups"]
    assert (g["group"], g["topic"], g["lag"], g["in_flight"]) == ("billing", "payments", 5, 2)
    with MessageStore(d, readonly=True) as s:
        for q in g["queues"]:
            assert q["max_offset"] == s.max_offset("payments", q["queue"])
            assert q["lag"] == q["max_offset"] - q["committed"]
    table = _groups(d)
    assert table.returncode == 0 and "billing" in table.stdout and "payments" in table.stdout
    missing = _groups(tmp_path / "nothing")
    assert missing.returncode == 1 and "no such directory" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_topics_lists_the_consoles_columns(tmp_path: Path) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("orders", queues=2)
        s.put_batch([strata.Message("orders", b"x", queue_id=i % 2) for i in range(9)])
    r = subprocess.run([sys.executable, "-m", "strata.cli.main", "topics", str(d), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["topics"] == [{"topic": "orders", "queues": 2, "type": "normal",
                                               "messages": 9, "min_offset": 0, "max_offset": 9}]
    table = subprocess.run([sys.executable, "-m", "strata.cli.main", "topics", str(d)],
                           capture_output=True, text=True, timeout=120)
    assert "max offsets" in table.stdout and "orders" in table.stdout
