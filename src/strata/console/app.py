"""The console's aiohttp application: the JSON API under ``/api/`` and the pages at ``/``.

Handlers only await: every store read runs on ``ConsoleData.executor`` (one thread), so the
event loop it shares with the broker never waits on a disk or the tier. Pages are rendered by
Jinja2 with autoescape on (every stored field is text to it), scripts come only from
``/static/`` (a Content-Security-Policy says so to the browser as a second fence).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import sys
import time
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from strata.console.views import ConsoleData, is_internal
from strata.errors import InvalidInputError, StrataError

log = logging.getLogger(__name__)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

DATA_KEY = web.AppKey("data", ConsoleData)
ENV_KEY = web.AppKey("env", jinja2.Environment)
ACTIONS_ON_KEY = web.AppKey("actions_on", bool)


class Samples:
    """Tells long polls (``?after=SEQ`` on /api/overview and /api/groups) that the
    sampler took a sample: an event per sample, set by the sampler on the event loop. At a
    stop (``close``) every waiting poll answers at once: a stop waits for the answers under
    way, and a poll would otherwise hold it up to LONG_POLL_S."""

    LONG_POLL_S = 30.0      # a long poll answers at the latest after this, sample or not

    def __init__(self) -> None:
        self._taken = asyncio.Event()
        self._looked = asyncio.Event()   # a page began to watch: the interval shortens
        self.closed = False
        self.waiting = 0        # long polls waiting for a sample now

    def taken(self) -> None:
        self._taken.set()
        self._taken = asyncio.Event()

    def looked(self) -> None:
        """A request came while nobody watched: the sampler's wait recomputes its interval."""
        self._looked.set()

    async def until_next(self, data: ConsoleData, took: float) -> None:
        """Return when the sample after the one taken at ``took`` (loop time) is due:
        ``data.sample_interval()`` later, an interval that shortens when a page starts to
        watch (``looked`` wakes this wait to recompute it)."""
        loop = asyncio.get_running_loop()
        while (left := took + data.sample_interval() - loop.time()) > 0:
            self._looked.clear()
            try:
                await asyncio.wait_for(self._looked.wait(), left)
            except asyncio.TimeoutError:
                return

    def close(self) -> int:
        """Wake every waiting long poll and answer later ones at once; how many woke."""
        self.closed = True
        woken = self.waiting
        self.taken()
        return woken

    async def after(self, data: ConsoleData, seq: int) -> None:
        """Return once ``data`` holds a sample numbered above ``seq`` (at most
        LONG_POLL_S later, at once after ``close``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.LONG_POLL_S
        self.waiting += 1
        try:
            while data.samples <= seq and not self.closed:
                left = deadline - loop.time()
                if left <= 0:
                    return
                try:
                    await asyncio.wait_for(self._taken.wait(), left)
                except asyncio.TimeoutError:
                    return
        finally:
            self.waiting -= 1


SAMPLES_KEY = web.AppKey("samples", Samples)

TOPIC_PAGE = 200      # topic rows a page renders: 1,000 rows cost ~50 ms to render, ~1 s to load
GROUP_PAGE = 20       # (group, topic) sections a page renders, each a table of its queues
TOPIC_SORTS = {"topic", "type", "queues", "messages", "min_offset", "max_offset", "rate_in"}


def _fmt_ms(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _fmt_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def qs(**kw) -> str:
    """A query string of the arguments that are not None."""
    return urlencode({k: v for k, v in kw.items() if v is not None})


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("strata.console", "templates"),
        autoescape=True, trim_blocks=True,
        lstrip_blocks=True)
    env.filters["ms"] = _fmt_ms
    env.filters["bytes"] = _fmt_bytes
    env.globals["qs"] = qs
    return env


async def _off_loop(request: web.Request, fn: Callable, *args, groups: bool = False) -> Any:
    """``fn(*args)`` on the console's thread; ``groups``: it shows live groups, whose copy
    is taken first (``GroupSource.refresh``)."""
    data = request.app[DATA_KEY]
    if groups:
        await data.groups.refresh()
    return await asyncio.get_running_loop().run_in_executor(data.executor, partial(fn, *args))


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=partial(json.dumps, default=str))


@web.middleware
async def errors_and_headers(request: web.Request, handler) -> web.StreamResponse:
    """Strata's errors become a 400 naming the problem (JSON for the API, a page otherwise);
    every answer carries the security headers and its server time (``Server-Timing``)."""
    started = time.perf_counter()
    d = request.app[DATA_KEY]
    if not d.watched():                 # someone looks again: sample for them
        request.app[SAMPLES_KEY].looked()
    d.watched_at = time.monotonic()
    try:
        resp = await handler(request)
    except StrataError as exc:
        msg = f"{type(exc).__name__}: {exc}"
        if request.path.startswith("/api/"):
            resp = _json({"error": msg}, 400)
        else:
            resp = _page(request, "error.html", status=400, title="Error", message=msg)
    except web.HTTPNotFound as exc:
        if request.path.startswith("/api/"):
            resp = _json({"error": exc.text or "not found"}, 404)
        else:
            resp = _page(request, "error.html", status=404, title="Not found",
                         message=exc.text or "not found")
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    resp.headers.setdefault("Cache-Control", "no-store")
    resp.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
    return resp


def _page(request: web.Request, template: str, status: int = 200, **ctx) -> web.Response:
    env = request.app[ENV_KEY]
    ctx.setdefault("nav", template.split(".")[0])
    session = request.get("session")
    ctx.setdefault("session", session)
    ctx.setdefault("actions_on", request.app.get(ACTIONS_ON_KEY, False)
                   and session is not None and session.admin)
    ctx["flash"] = []
    if session is not None:     # messages of the last action, shown once
        ctx["flash"], session.flash[:] = list(session.flash), []
    html = env.get_template(template).render(**ctx)
    return web.Response(text=html, content_type="text/html", status=status)


# ---------------------------------------------------------------------- JSON API


async def _after_sample(request: web.Request) -> bool:
    """``?after=SEQ``: wait (a long poll) until the sampler took a sample numbered above
    SEQ (the ``seq`` of an answer's ``rates`` or ``history``), so a caller waits for the
    charts' next point on the sample itself instead of polling for it. Such an answer
    shows that sample's reading of the queues (the page's charts poll so: they cost the
    store no reading of their own). Returns whether the answer should read afresh."""
    seq = _api_int(request.query, "after", 0, 1 << 62)
    if seq is None:
        return True
    await request.app[SAMPLES_KEY].after(request.app[DATA_KEY], seq)
    return False


async def api_overview(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    fresh = await _after_sample(request)
    ov = await _off_loop(request, d.overview, fresh, groups=True)
    ov["console"] = {**d.costs(), "long_polls": request.app[SAMPLES_KEY].waiting}
    return _json(ov)


API_MAX_PER_PAGE = 1000   # rows one API answer holds at most when paged


def _api_int(query, name: str, lo: int, hi: int) -> int | None:
    """``query[name]`` as an int in ``lo..hi``, None when absent; InvalidInputError (a 400
    naming the parameter) otherwise: the API says what is wrong where a page would clamp."""
    raw = query.get(name)
    if raw is None:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise InvalidInputError(f"{name}={raw[:40]!r} is not an integer") from None
    if not lo <= v <= hi:
        raise InvalidInputError(f"{name}={v} is out of range ({lo}..{hi})")
    return v


def _api_choice(query, name: str, allowed, default: str) -> str:
    raw = query.get(name, default)
    if raw not in allowed:
        raise InvalidInputError(f"{name}={raw[:40]!r} is not one of {', '.join(sorted(allowed))}")
    return raw


def _api_page(rows: list, query, default_size: int) -> dict:
    """The API's paging: every row when neither ``page`` nor ``per_page`` is given (the
    answer callers had before paging existed), else page ``page`` (from 0, default 0) of
    ``per_page`` rows (1..API_MAX_PER_PAGE, default ``default_size``); a page past the last
    is empty. ``total`` counts the rows after filtering."""
    page = _api_int(query, "page", 0, 1 << 31)
    size = _api_int(query, "per_page", 1, API_MAX_PER_PAGE)
    if page is None and size is None:
        return {"rows": rows, "total": len(rows)}
    page, size = page or 0, size or default_size
    return {"rows": rows[page * size:(page + 1) * size], "total": len(rows), "page": page,
            "per_page": size, "pages": max(1, -(-len(rows) // size))}


async def api_topics(request: web.Request) -> web.Response:
    """Topics filtered, sorted and paged like /topics, with strict parameters; internal
    topics are in by default (``internal=0`` leaves them out)."""
    d = request.app[DATA_KEY]
    query = request.query
    internal = _api_choice(query, "internal", {"0", "1"}, "1") == "1"
    sort = _api_choice(query, "sort", TOPIC_SORTS, "topic")
    desc = _api_choice(query, "order", {"asc", "desc"}, "asc") == "desc"
    topics = _select_topics(await _off_loop(request, d.topics), query.get("q", "").strip(),
                            internal, sort, desc)
    got = _api_page(topics, query, TOPIC_PAGE)
    return _json({"topics": got.pop("rows"), **got})


async def api_topic(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    name = request.match_info["topic"]
    got = await _off_loop(request, d.topic, name, groups=True)
    if got is None:
        raise web.HTTPNotFound(text=f"no topic {name!r}")
    return _json(got)


async def api_groups(request: web.Request) -> web.Response:
    """Groups filtered (``q``) and paged like /groups; ``history`` covers every group."""
    d = request.app[DATA_KEY]
    fresh = await _after_sample(request)
    groups = _select_groups(await _off_loop(request, d.groups_list, None, fresh, groups=True),
                            request.query.get("q", "").strip())
    got = _api_page(groups, request.query, GROUP_PAGE)
    return _json({"groups": got.pop("rows"), **got, "history": d.group_history()})


async def api_messages(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    return _json(await _off_loop(request, d.messages, dict(request.query)))


async def api_message(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    msg_id = request.match_info["msg_id"]
    m = await _off_loop(request, d.message, msg_id)
    if m is None:
        raise web.HTTPNotFound(text=f"no message {msg_id}")
    return _json(m)


# ---------------------------------------------------------------------- pages


async def page_overview(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    ov = await _off_loop(request, d.overview, groups=True)
    return _page(request, "overview.html", title="Overview", ov=ov)




def _select_topics(topics: list[dict], q: str, internal: bool, sort: str,
                   desc: bool) -> list[dict]:
    """The topic rows /topics and /api/topics show: internal ones only with ``internal``,
    names holding ``q`` (any case), sorted by ``sort`` (then name), descending with ``desc``."""
    if not internal:
        topics = [t for t in topics if not is_internal(t["topic"])]
    if q:
        needle = q.lower()
        topics = [t for t in topics if needle in t["topic"].lower()]
    if sort != "topic" or desc:
        topics = sorted(topics, key=lambda t: (t[sort], t["topic"]), reverse=desc)
    return topics


def _select_groups(groups: list[dict], q: str) -> list[dict]:
    """The (group, topic) rows whose group or topic name holds ``q`` (any case)."""
    if not q:
        return groups
    needle = q.lower()
    return [g for g in groups if needle in g["group"].lower() or needle in g["topic"].lower()]


def _page_of(rows: list, size: int, query) -> tuple[list, dict]:
    """One page of ``rows`` (``page`` in the query, from 0) and the pager's numbers."""
    total = len(rows)
    pages = max(1, -(-total // size))
    try:
        at = min(max(0, int(query.get("page", 0))), pages - 1)
    except ValueError:
        at = 0
    return rows[at * size:(at + 1) * size], {"page": at, "pages": pages, "total": total,
                                             "first": at * size + 1 if total else 0,
                                             "last": min(total, (at + 1) * size)}


async def page_topics(request: web.Request) -> web.Response:
    """Every topic, filtered (``q``: part of the name) and sorted (``sort``, ``order``) on
    the server over all of them, TOPIC_PAGE rows a page; when they fit on one page, the
    page's script sorts and filters them in place as well."""
    d = request.app[DATA_KEY]
    show_internal = request.query.get("internal") == "1"
    q = request.query.get("q", "").strip()
    sort = request.query.get("sort", "topic")
    sort = sort if sort in TOPIC_SORTS else "topic"
    desc = request.query.get("order") == "desc"
    topics = _select_topics(await _off_loop(request, d.topics), q, show_internal, sort, desc)
    shown, pager = _page_of(topics, TOPIC_PAGE, request.query)
    keep = {"q": q or None, "internal": "1" if show_internal else None}
    links = {col: qs(**keep, sort=col,
                     order="asc" if sort == col and desc else "desc" if sort == col else
                     ("asc" if col == "topic" else "desc"))
             for col in TOPIC_SORTS}
    here = {**keep, "sort": sort if sort != "topic" else None, "order": "desc" if desc else None}
    return _page(request, "topics.html", title="Topics", topics=shown, show_internal=show_internal,
                 q=q, sort=sort, desc=desc, pager=pager, sort_links=links,
                 prev=qs(**here, page=pager["page"] - 1) if pager["page"] > 0 else None,
                 next=qs(**here, page=pager["page"] + 1)
                 if pager["page"] + 1 < pager["pages"] else None)


async def page_topic(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    name = request.match_info["topic"]
    t = await _off_loop(request, d.topic, name, groups=True)
    if t is None:
        raise web.HTTPNotFound(text=f"no topic {name!r} in this store")
    q = dict(request.query)
    q["topic"] = name
    q.setdefault("queue", "0")
    browse = await _off_loop(request, d.messages, q)
    return _page(request, "topic.html", title=f"Topic {name}", nav="topics", t=t, b=browse,
                 limit=q.get("limit", "50"), pages=_pager(browse, int(q.get("limit", 50))))


def _pager(b: dict, limit: int) -> dict[str, str]:
    """Query strings of the message browser's older / newer pages."""
    out = {}
    base = {"queue": b["queue"], "order": b["order"], "limit": limit}
    if b["order"] == "newest":
        if b["newer"] is not None:
            out["newer"] = urlencode({**base, "to": min(b["to"] + limit, b["max_offset"])})
        if b["older"] is not None:
            out["older"] = urlencode({**base, "to": b["from"]})
    else:
        if b["older"] is not None:
            out["older"] = urlencode({**base, "from": max(b["from"] - limit, b["min_offset"])})
        if b["newer"] is not None:
            out["newer"] = urlencode({**base, "from": b["to"]})
    return out


async def page_groups(request: web.Request) -> web.Response:
    """Groups (both protocols), filtered by ``q`` (part of the group's or topic's name),
    GROUP_PAGE (group, topic) sections a page; the lag chart covers every group."""
    d = request.app[DATA_KEY]
    q = request.query.get("q", "").strip()
    groups = _select_groups(await _off_loop(request, d.groups_list, groups=True), q)
    shown, pager = _page_of(groups, GROUP_PAGE, request.query)
    keep = {"q": q or None}
    return _page(request, "groups.html", title="Consumer groups", groups=shown, q=q,
                 pager=pager,
                 prev=qs(**keep, page=pager["page"] - 1) if pager["page"] > 0 else None,
                 next=qs(**keep, page=pager["page"] + 1)
                 if pager["page"] + 1 < pager["pages"] else None)


async def page_messages(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    q = {k: v for k, v in request.query.items() if v != ""}
    found, error = None, None
    if q:
        try:
            found = await _off_loop(request, d.messages, q)
        except StrataError as exc:
            error = f"{type(exc).__name__}: {exc}"
    return _page(request, "messages.html", title="Find messages", q=q, found=found,
                 error=error)


async def page_message(request: web.Request) -> web.Response:
    d = request.app[DATA_KEY]
    msg_id = request.match_info["msg_id"]
    m = await _off_loop(request, d.message, msg_id)
    if m is None:
        raise web.HTTPNotFound(text=f"no message {msg_id} in this store")
    return _page(request, "message.html", title=f"Message {m['msg_id']}", nav="messages", m=m)


# ---------------------------------------------------------------------- the application


async def _no_content() -> web.Response:
    return web.Response(status=204)


async def _sampler(app: web.Application) -> None:
    """Read the counters for the rate and lag charts (``ConsoleData.sample_interval``)."""
    d = app[DATA_KEY]
    loop = asyncio.get_running_loop()
    while True:
        try:
            await d.groups.refresh()
            await loop.run_in_executor(d.executor, d.sample)
        except StrataError as exc:
            log.warning("console sample failed: %s", exc)
        app[SAMPLES_KEY].taken()
        await app[SAMPLES_KEY].until_next(d, loop.time())


def say(line: str) -> None:
    """A line of the console's own log (stderr, as the broker's)."""
    print(f"strata console: {line}", file=sys.stderr, flush=True)


async def _wake_long_polls(app: web.Application) -> None:
    """At a stop, before aiohttp waits for the answers under way: the long polls answer
    now (from the last sample) instead of holding the stop until their LONG_POLL_S."""
    woken = app[SAMPLES_KEY].close()
    if woken:
        say(f"stopping: {woken} long poll{'s' if woken != 1 else ''} answered at once")


async def _background(app: web.Application):
    task = asyncio.get_running_loop().create_task(_sampler(app))
    yield
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def make_app(data: ConsoleData, acl=None, actions=None) -> web.Application:
    """The console over ``data``; ``acl`` (a ``strata.broker.acl.AccessList``) requires a
    login; ``actions`` (``strata.console.actions.Actions``) adds the operator's actions."""
    from strata.console import actions as act
    from strata.console import security
    app = web.Application(middlewares=[errors_and_headers, security.guard],
                          client_max_size=8 << 20)
    security.add_routes(app, acl)
    if actions is not None:
        act.add_routes(app, actions)
    app[ACTIONS_ON_KEY] = actions is not None and not data.store.readonly
    app[DATA_KEY] = data
    app[SAMPLES_KEY] = Samples()
    app[ENV_KEY] = make_env()
    r = app.router
    r.add_get("/api/overview", api_overview)
    r.add_get("/api/topics", api_topics)
    r.add_get("/api/topics/{topic}", api_topic)
    r.add_get("/api/groups", api_groups)
    r.add_get("/api/messages", api_messages)
    r.add_get("/api/messages/{msg_id}", api_message)
    r.add_get("/favicon.ico", lambda _r: _no_content())
    r.add_get("/", page_overview)
    r.add_get("/topics", page_topics)
    r.add_get("/topics/{topic}", page_topic)
    r.add_get("/groups", page_groups)
    r.add_get("/messages", page_messages)
    r.add_get("/messages/{msg_id}", page_message)
    static = Path(str(resources.files("strata.console") / "static"))
    r.add_static("/static/", static)
    app.cleanup_ctx.append(_background)
    app.on_shutdown.append(_wake_long_polls)
    return app
