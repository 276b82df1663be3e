"""The console's pages in Debian's chromium (Playwright) against `strata serve --http`, filled
through the embedded API and the official RocketMQ client. Each page's screenshot is saved:
to a scratch folder by default, so a test run leaves the checkout as it was, and to
docs/console/ (which the README and docs/console.md show) with
``STRATA_CONSOLE_SHOTS=docs/console``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import strata
from strata.store.message_store import MessageStore

from broker_support import run_client
from console_support import serve_cmd, small_config

SHOTS = Path(os.environ.get("STRATA_CONSOLE_SHOTS")
             or Path(tempfile.gettempdir()) / "strata-console-shots")


def _fill(d: Path) -> None:
    with strata.open(d, small_config()) as s:
        s.create_topic("orders", queues=4)
        s.put_batch([strata.Message("orders", json.dumps({"order": i, "total": i * 3.5}).encode(),
                                    keys=[f"order-{i}"], tags="created",
                                    properties={"region": "eu", "channel": "web"})
                     for i in range(120)])
        for i in range(30):
            s.create_topic(f"topic-{i:02d}", queues=2)
        s.put_batch([strata.Message(f"topic-{i % 30:02d}", b"x" * (i % 50)) for i in range(300)])


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def test_pages_show_the_store_and_the_groups(tmp_path: Path, served, page) -> None:
    d = tmp_path / "store"
    _fill(d)
    b = served(serve_cmd(d))
    # group "billing" reads every message of "payments" and acks them; then 7 more arrive,
    # and it receives 3 of them without acking: lag 7, in flight 3
    got = run_client(tmp_path, b.endpoint, """
        p = producer("payments")
        for i in range(20):
            p.send(message("payments", json.dumps({"payment": i}), tag="paid", keys=[f"pay-{i}"]))
        c = consumer("billing", "payments")
        acked = 0
        while acked < 20:
            for m in c.receive(32, 30):
                c.ack(m)
                acked += 1
        for i in range(7):
            p.send(message("payments", json.dumps({"payment": 100 + i}), tag="paid"))
        held = []
        while len(held) < 3:
            held += c.receive(3 - len(held), 60)
        p.shutdown()
        c.shutdown()
        out(acked=acked, held=len(held))
    """)
    assert got == {"acked": 20, "held": 3}
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # overview: numbers, and the live charts fill with samples
    page.goto(b.url + "/")
    page.wait_for_function("Number(document.getElementById('chart-messages').dataset.points)"
                           " >= 3", timeout=30_000)
    assert page.locator("#chart-messages canvas").count() == 1
    reader = MessageStore(d, readonly=True)
    try:
        total = sum(reader.max_offset(t, q) - reader.min_offset(t, q)
                    for t in reader.topics() for q in range(reader.queue_count(t)))
        assert int(page.text_content("#ov-messages")) == total == 120 + 300 + 27
        assert page.text_content("#ov-topics") == str(len(reader.topics())) == "32"
        assert b.endpoint in page.text_content("#listeners")
        _shot(page, "overview")

        # topics: all there, filter and sort in the page
        page.click("text=Topics")
        assert page.locator("#topics tbody tr").count() == 32
        page.fill("#filter", "topic-1")
        assert page.text_content("#shown") == "10"
        page.fill("#filter", "")
        page.click("#topics th:has-text('Messages')")
        page.click("#topics th:has-text('Messages')")      # descending
        assert page.text_content("#topics tbody tr:first-child td:first-child") == "orders"
        _shot(page, "topics")

        # a topic: per-queue max offsets as the store has them, its group and lag
        page.click("#topics a:text-is('payments')")
        page.wait_for_selector("#queues")
        shown = [int(x) for x in page.locator("#queues td.max").all_text_contents()]
        assert shown == [reader.max_offset("payments", q)
                         for q in range(reader.queue_count("payments"))]
        row = page.locator("#topic-groups tbody tr").first
        assert row.locator("td").nth(0).text_content() == "billing"
        assert row.locator("td").nth(1).text_content() == "7"       # lag
        assert row.locator("td").nth(2).text_content() == "3"       # in flight
        page.goto(b.url + "/topics/orders")
        _shot(page, "topic")

        # the message browser pages through queue 0 newest first
        top = int(page.locator("#message-list tbody tr:first-child td").nth(1).text_content())
        assert top == reader.max_offset("orders", 0) - 1 == 29
        page.fill("input[name=limit]", "10")
        page.click("form.tools button")
        assert page.locator("#message-list tbody tr").count() == 10
        page.click("#older")
        offsets = [int(x) for x in page.locator("#message-list tbody tr td:nth-child(2)")
                   .all_text_contents()]
        assert offsets == list(range(19, 9, -1))
        page.goto(b.url + "/topics/orders")
        msg_id = page.locator("#message-list a.msg").first.text_content()
        page.locator("#message-list a.msg").first.click()
        page.wait_for_selector("#message")
        m = reader.get_by_id(msg_id)
        assert page.text_content("#m-commitlog") == str(m.commitlog_offset)
        assert page.text_content("#m-size") == str(m.size)
        assert json.loads(page.text_content("#body-json")) == json.loads(m.body)
        assert page.locator("#m-props").text_content().count("eu") == 1
        page.click("button[data-show=body-hex]")
        assert page.is_visible("#body-hex") and not page.is_visible("#body-json")
        assert page.text_content("#body-hex") == bytes(m.body).hex()
        page.click("button[data-show=body-json]")
        _shot(page, "message")

        # groups: per-queue committed offset and lag against the store's max offsets
        page.goto(b.url + "/groups")
        page.wait_for_function("Number(document.getElementById('chart-lag').dataset.points)"
                               " >= 2", timeout=30_000)
        sec = page.locator("section#billing")
        assert sec.locator(".lag").text_content() == "7"
        rows = sec.locator("tbody tr")
        lag_sum = 0
        for i in range(rows.count()):
            cells = rows.nth(i).locator("td").all_text_contents()
            q, committed, lag = int(cells[0]), int(cells[1]), int(cells[4])
            assert int(cells[3]) == reader.max_offset("payments", q)
            assert lag == reader.max_offset("payments", q) - committed
            lag_sum += lag
        assert lag_sum == 7
        _shot(page, "groups")

        # the finder: by key, then follow the link
        page.goto(b.url + "/messages")
        page.fill("#by-key input[name=topic]", "payments")
        page.fill("#by-key input[name=key]", "pay-4")
        page.click("#by-key button")
        page.wait_for_selector("#message-list")
        assert page.locator("#message-list a.msg").count() == 1
        _shot(page, "messages")
        page.locator("#message-list a.msg").first.click()
        assert json.loads(page.text_content("#body-json")) == {"payment": 4}
    finally:
        reader.close()
    assert errors == []
