"""Kafka classic groups on the console's groups page, in chromium: confluent-kafka in processes
of their own commits offsets and stays a member; the page shows the group beside the RocketMQ
ones with its protocol, state, members, per-partition committed offset and lag, and the
numbers match the store's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import strata
from strata.store.message_store import MessageStore

from broker_support import run_client
from console_support import SMALL_STORE, Served, console_cmd, small_config

SHOTS = Path(os.environ.get("STRATA_CONSOLE_SHOTS")
             or Path(tempfile.gettempdir()) / "strata-console-shots")

PRELUDE = """
import json, os, sys
from confluent_kafka import Consumer, Producer
BOOT = sys.argv[1]
def consumer(**extra):
    return Consumer({"bootstrap.servers": BOOT, "group.id": "analytics",
                     "client.id": "analytics-worker", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "broker.address.family": "v4",
                     **extra})
"""

CONSUME_ALL = """
c = consumer()
c.subscribe(["clicks"])
n = 0
while n < 20:
    m = c.poll(30)
    assert m is not None and not m.error(), m and m.error()
    n += 1
c.commit(asynchronous=False)
c.close()
p = Producer({"bootstrap.servers": BOOT, "broker.address.family": "v4"})
for i in range(6):
    p.produce("clicks", f"late-{i}".encode(), partition=0 if i < 4 else 1)
p.flush(30)
print(json.dumps({"done": n}), flush=True)
"""

MEMBER = """
c = consumer(**{"session.timeout.ms": 30000})
c.subscribe(["clicks"], on_assign=lambda _c, ps: print(
    json.dumps({"assigned": sorted(p.partition for p in ps)}), flush=True))
while not os.path.exists(sys.argv[2]):
    c.poll(0.2)                   # reads, never commits: the lag stays
c.close()
"""


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", PRELUDE + textwrap.dedent(code)]


def test_kafka_group_on_the_groups_page(tmp_path: Path, served, page) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("clicks", queues=2)
        s.create_topic("payments", queues=1)
        s.put_batch([strata.Message("clicks", f"c{i}".encode(), queue_id=i % 2)
                     for i in range(20)])
    opts = [a for o in SMALL_STORE for a in ("--store-option", o)]
    b = served(Served("serve", str(d), "--listen", "127.0.0.1:0", "--kafka", "127.0.0.1:0",
                      "--http", "127.0.0.1:0", "--exit-with-parent", *opts))
    boot = re.search(r"([\d.]+:\d+) \(kafka\)", b.log).group(1)
    b.endpoint = re.search(r"listening on ([\d.]+:\d+)[, ]", b.log).group(1)
    run_client(tmp_path, b.endpoint, """        # a RocketMQ group beside it
        p = producer("payments")
        p.send(message("payments", "pay-0"))
        c = consumer("billing", "payments")
        got = []
        while not got:
            got = c.receive(1, 30)
        c.ack(got[0])
        c.shutdown()
        out(ok=True)
    """)
    done = subprocess.run([*_script(CONSUME_ALL), boot], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    stop = tmp_path / "stop-member"
    member = subprocess.Popen([*_script(MEMBER), boot, str(stop)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = member.stdout.readline()          # the member has its partitions
        assert json.loads(line) == {"assigned": [0, 1]}, (line, member.stderr.read()
                                                          if not line else "")
        page.goto(b.url + "/groups")
        kafka = page.locator("section.group.kafka")
        assert kafka.count() == 1
        assert page.locator("section.group.rocketmq").count() == 1
        assert "analytics" in kafka.locator("h2").text_content()
        assert "kafka" in kafka.locator("h2").text_content()
        assert kafka.locator(".state").text_content() == "Stable"
        assert kafka.locator(".members").first.text_content() == "1"
        assert "analytics-worker" in kafka.locator("ul.members").text_content()
        rows = kafka.locator("tbody tr")
        with MessageStore(d, readonly=True) as s:
            highs = [s.max_offset("clicks", q) for q in (0, 1)]
        assert highs == [14, 12]
        shown = [[c.strip() for c in rows.nth(i).locator("td").all_text_contents()]
                 for i in range(rows.count())]
        # queue, committed, next to deliver (none for Kafka), max offset, lag, ...
        assert [r[:5] for r in shown] == [["0", "10", "-", "14", "4"], ["1", "10", "-", "12", "2"]]
        assert kafka.locator(".lag").text_content() == "6"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "groups-kafka.png"), full_page=False)

        api = b.api("/api/groups")
        (k,) = [g for g in api["groups"] if g["protocol"] == "kafka"]
        assert (k["group"], k["topic"], k["state"], k["lag"]) == ("analytics", "clicks",
                                                                  "Stable", 6)
        assert [m["client_id"] for m in k["members"]] == ["analytics-worker"]
        assert k["assignor"] in ("range", "roundrobin", "cooperative-sticky")
        # `strata console` beside the broker (read-only) asks its admin API for the members
        alone = served(console_cmd(d))
        (k2,) = [g for g in alone.api("/api/groups")["groups"] if g["protocol"] == "kafka"]
        assert (k2["state"], k2["lag"]) == ("Stable", 6)
        assert [m["client_id"] for m in k2["members"]] == ["analytics-worker"]
    finally:
        stop.touch()
        member.wait(60)
    # the member left: the group is Empty, its committed offsets stay
    page.goto(b.url + "/groups")
    kafka = page.locator("section.group.kafka")
    assert kafka.locator(".state").text_content() == "Empty"
    assert kafka.locator(".members").first.text_content() == "0"
    cli = subprocess.run([sys.executable, "-m", "strata.cli.main", "groups", str(d), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    by = {g["protocol"]: g for g in json.loads(cli.stdout)["groups"]}
    assert by["kafka"]["state"] == "Empty" and by["kafka"]["lag"] == 6
    assert [q["committed"] for q in by["kafka"]["queues"]] == [10, 10]
    assert by["rocketmq"]["group"] == "billing"
