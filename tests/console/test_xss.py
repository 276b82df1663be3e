"""Every stored field is text to the console: bodies, keys, tags and properties holding
markup and ``javascript:`` links are shown as written, and no script of theirs runs on any
page (checked in chromium with the CSP turned off, so escaping alone must hold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import strata
from strata.errors import InvalidTopicError

from console_support import console_cmd, small_config

PAYLOADS = ['<script>window.__xss = "script";</script>',
            '"><img src=x onerror="window.__xss = \'img\'">',
            "'><svg onload=\"window.__xss='svg'\">",
            'javascript:window.__xss="link"',
            '</pre><a href="javascript:window.__xss=1">click</a>']


def _fill(d: Path) -> list[str]:
    ids = []
    with strata.open(d, small_config()) as s:
        for p in PAYLOADS:          # topic (and group) names cannot carry markup at all
            with pytest.raises(InvalidTopicError):
                s.create_topic(p, queues=1)
        s.create_topic("evil", queues=2)
        for i, p in enumerate(PAYLOADS):
            r = s.put(strata.Message("evil", p.encode(), keys=[p, f"k{i}"], tags=p,
                                     properties={p: p, "note": p}, queue_id=i % 2))
            ids.append(r.msg_id)
        # a JSON body whose strings hold the payloads (shown pretty-printed)
        r = s.put(strata.Message("evil", json.dumps({"html": PAYLOADS}).encode(), keys=["json"],
                                 queue_id=0))
        ids.append(r.msg_id)
    return ids


def _no_script_ran(page) -> None:
    assert page.evaluate("window.__xss === undefined"), page.evaluate("window.__xss")
    # nothing the store holds became an element: only the console's own scripts are here
    srcs = page.eval_on_selector_all("script", "els => els.map(e => e.getAttribute('src'))")
    assert srcs == ["/static/uPlot.iife.min.js", "/static/console.js"]
    assert page.locator("img, svg[onload], [onerror], [onload]").count() == 0
    hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
    assert not [h for h in hrefs if h and h.strip().lower().startswith("javascript:")]


def test_stored_markup_is_shown_as_text_and_never_runs(tmp_path: Path, served, page) -> None:
    d = tmp_path / "store"
    ids = _fill(d)
    c = served(console_cmd(d))
    dialogs: list[str] = []
    page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
    pages = ["/", "/topics", "/topics/evil", "/topics/evil?queue=1", "/groups", "/messages",
             "/messages?topic=evil&key=" + "%3Cscript%3E", "/messages?topic=evil&time=1",
             "/messages?id=%3Cscript%3Ealert(1)%3C/script%3E",
             "/topics/%3Cscript%3E", "/nothing%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E"]
    pages += [f"/messages/{i}" for i in ids]
    for path in pages:
        page.goto(c.url + path)
        page.wait_for_load_state("load")
        _no_script_ran(page)
    # the payloads are there, as text
    page.goto(c.url + f"/messages/{ids[1]}")
    assert page.text_content("#body-text") == PAYLOADS[1]
    assert PAYLOADS[1] in page.text_content("#m-keys")
    assert page.text_content("#m-tags") == PAYLOADS[1]
    assert page.locator("#m-props th", has_text="onerror").count() == 1
    page.goto(c.url + f"/messages/{ids[-1]}")
    assert json.loads(page.text_content("#body-json")) == {"html": PAYLOADS}
    page.goto(c.url + "/topics/evil")
    assert PAYLOADS[0] in page.text_content("#message-list")
    page.goto(c.url + "/messages?topic=evil&key=" + PAYLOADS[0].replace("<", "%3C")
              .replace(">", "%3E").replace(" ", "%20").replace('"', "%22").replace(";", "%3B")
              .replace("=", "%3D"))
    assert page.locator("#message-list a.msg").count() == 1
    _no_script_ran(page)
    assert dialogs == []


def test_the_consoles_own_scripts_run_under_its_csp(tmp_path: Path, served, browser) -> None:
    """The CSP the console sends (no inline script) leaves its own charts and table working."""
    d = tmp_path / "store"
    _fill(d)
    c = served(console_cmd(d))
    ctx = browser.new_context()                  # the CSP in force
    try:
        page = ctx.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(c.url + "/")
        page.wait_for_selector("#chart-messages canvas")
        page.goto(c.url + "/topics")
        page.click("#topics th:has-text('Messages')")
        assert page.get_attribute("#topics th:has-text('Messages')", "data-dir") == "asc"
        assert problems == []
    finally:
        ctx.close()


KAFKA_MEMBERS = """
import json, os, sys
from confluent_kafka import Consumer
BOOT, STOP, SPEC = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
members = []
for group, client_id, instance_id in SPEC:
    conf = {"bootstrap.servers": BOOT, "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "broker.address.family": "v4", "session.timeout.ms": 30000}
    if instance_id:
        conf["group.instance.id"] = instance_id
    c = Consumer(conf)
    c.subscribe(["clicks"])
    members.append(c)
got = [0] * len(members)
while min(got) < 2:                       # each reads two messages, commits them
    for i, c in enumerate(members):
        if got[i] == 2:
            continue
        m = c.poll(0.2)
        if m is not None and not m.error():
            got[i] += 1
            if got[i] == 2:
                c.commit(m, asynchronous=False)
print(json.dumps({"committed": got}), flush=True)
while not os.path.exists(STOP):            # stay members (lag stays: 2 of 6 read)
    for c in members:
        c.poll(0.1)
for c in members:
    c.close()
"""


def test_kafka_group_member_and_client_names_are_shown_as_text(tmp_path: Path, served,
                                                               page) -> None:
    """Kafka lets a client name its group, client id and static instance id freely (the
    member id starts with the client id): all of them are text on every page that shows
    groups, in chromium, and no script of theirs runs."""
    import re
    import subprocess
    import sys

    from console_support import SMALL_STORE, Served

    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        s.create_topic("clicks", queues=1)
        s.put_batch([strata.Message("clicks", f"c{i}".encode()) for i in range(6)])
    opts = [a for o in SMALL_STORE for a in ("--store-option", o)]
    b = served(Served("serve", str(d), "--listen", "127.0.0.1:0", "--kafka", "127.0.0.1:0",
                      "--http", "127.0.0.1:0", "--exit-with-parent", *opts))
    boot = re.search(r"([\d.]+:\d+) \(kafka\)", b.log).group(1)
    spec = [[PAYLOADS[0], PAYLOADS[1], PAYLOADS[2]],     # group, client id, instance id
            [PAYLOADS[4], PAYLOADS[3], None]]
    stop = tmp_path / "stop-members"
    proc = subprocess.Popen([sys.executable, "-c", KAFKA_MEMBERS, boot, str(stop),
                             json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    dialogs: list[str] = []
    page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
    try:
        line = proc.stdout.readline()
        assert json.loads(line or "null") == {"committed": [2, 2]}, (
            line, proc.stderr.read() if not line else "")
        # the API has them as written: the page's text must be the same strings
        kafka = {g["group"]: g for g in b.api("/api/groups")["groups"]
                 if g["protocol"] == "kafka"}
        assert set(kafka) == {PAYLOADS[0], PAYLOADS[4]}
        (m0,) = kafka[PAYLOADS[0]]["members"]
        assert (m0["client_id"], m0["instance_id"]) == (PAYLOADS[1], PAYLOADS[2])
        assert m0["member_id"].startswith(PAYLOADS[2])     # a static member: its instance id
        (m1,) = kafka[PAYLOADS[4]]["members"]
        assert m1["client_id"] == PAYLOADS[3] and m1["member_id"].startswith(PAYLOADS[3])
        assert kafka[PAYLOADS[0]]["lag"] == kafka[PAYLOADS[4]]["lag"] == 4

        q = PAYLOADS[0].replace("<", "%3C").replace(">", "%3E").replace(" ", "%20") \
            .replace('"', "%22").replace(";", "%3B").replace("=", "%3D")
        for path in ["/groups", "/groups?q=" + q, "/topics/clicks", "/"]:
            page.goto(b.url + path)
            page.wait_for_load_state("load")
            _no_script_ran(page)
        page.goto(b.url + "/groups")
        sections = page.locator("section.group.kafka")
        assert sections.count() == 2
        heads = sections.locator("h2").all_text_contents()
        assert any(h.startswith(PAYLOADS[0]) for h in heads), heads
        assert any(h.startswith(PAYLOADS[4]) for h in heads), heads
        members = " ".join(sections.locator("ul.members").all_text_contents())
        for p in (PAYLOADS[1], m0["member_id"], PAYLOADS[2], PAYLOADS[3], m1["member_id"]):
            assert p in members
        # the lag chart names the groups too (its legend is built by the script) once the
        # console's sampler has seen both groups: the sample after the next one started
        # after the API showed them (a long poll answers once that sample is taken)
        seq = b.api("/api/groups?per_page=1")["history"]["seq"]
        lag = b.api(f"/api/groups?per_page=1&after={seq + 1}")["history"]["lag"]
        assert set(lag) == set(kafka)
        page.reload()
        page.wait_for_selector("#chart-lag canvas")
        legend = page.text_content("#chart-lag .u-legend")
        assert PAYLOADS[0] in legend and PAYLOADS[4] in legend
        _no_script_ran(page)
        page.goto(b.url + "/groups?q=" + q)          # one group's own section
        assert page.locator("section.group.kafka").count() == 1
        assert page.locator("section.group.kafka h2").text_content().startswith(PAYLOADS[0])
        page.goto(b.url + "/topics/clicks")          # the topic's groups table
        groups = page.text_content("#topic-groups")
        assert PAYLOADS[0] in groups and PAYLOADS[4] in groups
        _no_script_ran(page)
        # a group's link on the topic page leads to that group's section, name intact
        page.click(f"#topic-groups a.group:text-is('{PAYLOADS[4]}')")
        page.wait_for_selector("section.group.kafka")
        assert page.locator("section.group.kafka").count() == 1
        assert page.locator("section.group.kafka h2").text_content().startswith(PAYLOADS[4])
        assert page.input_value("#group-q") == PAYLOADS[4]
        _no_script_ran(page)
    finally:
        stop.touch()
        proc.wait(60)
    assert dialogs == []
