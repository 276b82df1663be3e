"""The console's actions, run in chromium against `strata serve --http`, each checked in the
store (and for a group reset, by the RocketMQ client receiving the messages again); and the
`--acl` login, the admin-only rule and the CSRF check."""

from __future__ import annotations

import json
from pathlib import Path

import strata
from strata.store.message_store import MessageStore

from broker_support import run_client
from console_support import console_cmd, serve_cmd, small_config

ACL = """\
accounts:
  - accessKey: viewer1
    secretKey: vsecret12
    topicPerms: ["orders=SUB"]
  - accessKey: operator
    secretKey: osecret12
    admin: true
"""


def _submit(page, form: str, **fields) -> None:
    for name, value in fields.items():
        page.fill(f"{form} [name={name}]", str(value))
    page.check(f"{form} [name=confirm]")
    with page.expect_navigation():
        page.click(f"{form} button")


def test_actions_change_the_store_and_the_groups(tmp_path: Path, served, page) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("payments", queues=2)
        s.create_topic("jobs", queues=1)
    b = served(serve_cmd(d, "--max-delivery-attempts", "1"))
    got = run_client(tmp_path, b.endpoint, """
        p = producer("payments", "jobs")
        for i in range(10):
            p.send(message("payments", f"pay-{i}"))
        p.send(message("jobs", "job-1", keys=["job-1"], tag="nightly"))
        c = consumer("billing", "payments")
        acked = 0
        while acked < 10:
            for m in c.receive(32, 30):
                c.ack(m)
                acked += 1
        w = consumer("workers", "jobs")
        first = w.receive(1, 1)              # never acked: with one attempt allowed, it
        again = w.receive(1, 3)              # goes to %DLQ%workers when its time is over
        p.shutdown(); c.shutdown(); w.shutdown()
        out(acked=acked, first=len(first), again=len(again))
    """)
    assert got["acked"] == 10 and got["first"] == 1
    reader = MessageStore(d, readonly=True)
    try:
        assert reader.max_offset("%DLQ%workers", 0) == 1

        page.goto(b.url + "/topics")
        _submit(page, "#create-topic", topic="fresh", queues=3)
        assert page.url.endswith("/topics/fresh")
        assert "created with 3 queues" in page.text_content(".flash")
        assert reader.queue_count("fresh") == 3

        page.click("details.actions summary")
        _submit(page, "#send", body='{"hello": "console"}', key="test-1", tag="probe")
        assert "stored as" in page.text_content(".flash")
        found = reader.query("fresh", "test-1")
        assert [bytes(m.body) for m in found] == [b'{"hello": "console"}']
        assert found[0].tags == "probe"

        page.click("details.actions summary")
        _submit(page, "#add-queues", queues=5)
        assert reader.queue_count("fresh") == 5

        page.click("details.actions summary")
        _submit(page, "#delete-topic", name="fresh")
        assert page.url.endswith("/topics")
        assert "fresh" not in reader.topics()

        # reset billing on payments to offset 0: lag is all 10 again, and the client
        # receives all 10 again
        page.goto(b.url + "/groups")
        _submit(page, "section#billing form.reset", offset=0)
        assert "queues start over at 0: 0, 1: 0" in page.text_content(".flash")
        lag = page.text_content("section#billing .lag")
        assert lag == "10"
        again = run_client(tmp_path, b.endpoint, """
            c = consumer("billing", "payments")
            seen = set()
            while len(seen) < 10:
                for m in c.receive(32, 30):
                    seen.add(m.body.decode())
                    c.ack(m)
            c.shutdown()
            out(seen=sorted(seen))
        """)
        assert again["seen"] == sorted(f"pay-{i}" for i in range(10))

        # resend the dead letter to its topic
        dlq = reader.get("%DLQ%workers", 0, 0).messages[0]
        page.goto(b.url + f"/messages/{dlq.msg_id}")
        _submit(page, "#resend")
        assert "resent to jobs" in page.text_content(".flash")
        assert reader.max_offset("jobs", 0) == 2
        back = reader.get("jobs", 0, 1).messages[0]
        assert bytes(back.body) == b"job-1" and back.keys == ("job-1",) and back.tags == "nightly"
        assert back.properties["RESENT_FROM_DLQ"] == dlq.msg_id
    finally:
        reader.close()
    b.stop()
    for what in ("create topic fresh", "delete topic fresh", "reset billing on payments",
                 f"resend dead letter {dlq.msg_id}"):
        assert f"action by local: {what}" in b.log


def test_acl_login_admin_only_and_csrf(tmp_path: Path, served, page) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.put(strata.Message("orders", b"one"))
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    c = served(console_cmd(d, "--acl", str(acl)))
    status, got = c.get("/api/topics")
    assert status == 401 and "log in" in got["error"]
    page.goto(c.url + "/topics/orders")
    assert "/login" in page.url
    page.fill("[name=accessKey]", "operator")
    page.fill("[name=secretKey]", "wrong-secret")
    page.click("#login button")
    assert "wrong secretKey" in page.text_content("#error")

    page.fill("[name=accessKey]", "viewer1")
    page.fill("[name=secretKey]", "vsecret12")
    page.click("#login button")
    page.wait_for_url("**/topics/orders")
    assert page.text_content("#user") == "viewer1"
    assert page.locator("details.actions").count() == 0        # no action for a viewer
    cookie = next(k for k in page.context.cookies() if k["name"] == "strata_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    csrf = page.eval_on_selector(".user input[name=csrf]", "e => e.value")
    r = page.request.post(c.url + "/actions/create-topic",
                          form={"topic": "sneaky", "confirm": "yes", "csrf": csrf})
    assert r.status == 403 and "not an administrator" in r.text()

    page.context.clear_cookies()
    page.goto(c.url + "/topics")
    page.fill("[name=accessKey]", "operator")
    page.fill("[name=secretKey]", "osecret12")
    page.click("#login button")
    page.wait_for_url("**/topics")
    r = page.request.post(c.url + "/actions/create-topic",     # no CSRF token
                          form={"topic": "sneaky", "confirm": "yes"})
    assert r.status == 403 and "CSRF" in r.text()
    csrf = page.eval_on_selector(".user input[name=csrf]", "e => e.value")
    r = page.request.post(c.url + "/actions/create-topic", headers={"Origin": "http://evil.test"},
                          form={"topic": "sneaky", "confirm": "yes", "csrf": csrf})
    assert r.status == 403
    r = page.request.post(c.url + "/actions/create-topic",     # not confirmed
                          form={"topic": "sneaky", "csrf": csrf})
    assert r.status == 400 and "confirm" in r.text()
    _submit(page, "#create-topic", topic="made-by-operator", queues=2)
    assert "created with 2 queues" in page.text_content(".flash")
    c.stop()
    with MessageStore(d, readonly=True) as s:
        assert s.queue_count("made-by-operator") == 2
        assert s.queue_count("sneaky") == 0
    assert "action by operator: create topic made-by-operator" in c.log
