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
