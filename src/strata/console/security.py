"""Who may use the console: sessions, the ``--acl`` login and CSRF checks.

Without ``--acl`` (a console bound to loopback) every visitor gets a session of its own on
the first request, as an administrator. With ``--acl`` nothing but the login page and the
static files answers until a login with an account's accessKey / secretKey; only accounts
with ``admin: true`` may act. The session is a random id in an HttpOnly, SameSite=Strict
cookie; every POST must carry the session's CSRF token (a form field or the
``X-CSRF-Token`` header) and, where the browser sends one, an Origin of this console.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from strata.broker.acl import AccessList

COOKIE = "strata_console"
SESSION_S = 8 * 3600
OPEN_PATHS = ("/login", "/static/")


@dataclass
class Session:
    user: str
    admin: bool
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    expires: float = field(default_factory=lambda: time.monotonic() + SESSION_S)
    flash: list[tuple[str, str]] = field(default_factory=list)   # (kind, text) to show once


class Sessions:
    def __init__(self, acl: AccessList | None) -> None:
        self.acl = acl
        self.by_id: dict[str, Session] = {}

    def get(self, sid: str | None) -> Session | None:
        s = self.by_id.get(sid or "")
        if s is not None and s.expires < time.monotonic():
            del self.by_id[sid]
            return None
        return s

    def new(self, user: str, admin: bool) -> tuple[str, Session]:
        now = time.monotonic()
        for sid in [k for k, v in self.by_id.items() if v.expires < now]:
            del self.by_id[sid]
        sid = secrets.token_urlsafe(32)
        s = self.by_id[sid] = Session(user, admin)
        return sid, s

    def login(self, access_key: str, secret_key: str) -> tuple[str, Session] | None:
        acc = self.acl.accounts.get(access_key) if self.acl is not None else None
        if acc is None or not hmac.compare_digest(acc.secret_key.encode(), secret_key.encode()):
            return None
        return self.new(acc.access_key, acc.admin)


SESSIONS_KEY = web.AppKey("sessions", Sessions)


def set_cookie(resp: web.StreamResponse, sid: str) -> None:
    resp.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/",
                    max_age=SESSION_S)


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.host


@web.middleware
async def guard(request: web.Request, handler) -> web.StreamResponse:
    sessions = request.app[SESSIONS_KEY]
    path = request.path
    if path.startswith(OPEN_PATHS):
        if request.method == "POST" and not _same_origin(request):
            raise web.HTTPForbidden(text="cross-site request refused (Origin)")
        return await handler(request)
    sid = request.cookies.get(COOKIE)
    s = sessions.get(sid)
    fresh = None
    if s is None:
        if sessions.acl is not None:
            if path.startswith("/api/"):
                return web.json_response({"error": "log in first (the console runs with "
                                                   "--acl)"}, status=401)
            raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
        fresh, s = sessions.new("local", True)
    request["session"] = s
    if request.method == "POST":
        token = request.headers.get("X-CSRF-Token")
        if token is None:
            token = (await request.post()).get("csrf", "")
        if fresh is not None or not hmac.compare_digest(str(token), s.csrf) \
                or not _same_origin(request):
            raise web.HTTPForbidden(text="refused: the form's CSRF token is missing or stale "
                                         "(reload the page and try again)")
    resp = await handler(request)
    if fresh is not None:
        set_cookie(resp, fresh)
    return resp


async def login_page(request: web.Request) -> web.Response:
    from strata.console.app import _page
    return _page(request, "login.html", title="Log in", nav="login",
                 next=request.query.get("next", "/"), error=None, session=None)


async def login_post(request: web.Request) -> web.StreamResponse:
    from strata.console.app import _page
    form = await request.post()
    nxt = str(form.get("next", "/"))
    if not nxt.startswith("/") or nxt.startswith("//"):
        nxt = "/"
    got = request.app[SESSIONS_KEY].login(str(form.get("accessKey", "")),
                                           str(form.get("secretKey", "")))
    if got is None:
        return _page(request, "login.html", status=401, title="Log in", nav="login",
                     next=nxt, error="unknown accessKey or wrong secretKey", session=None)
    sid, _s = got
    resp = web.HTTPSeeOther(nxt)
    set_cookie(resp, sid)
    raise resp


async def logout_post(request: web.Request) -> web.StreamResponse:
    sessions = request.app[SESSIONS_KEY]
    sessions.by_id.pop(request.cookies.get(COOKIE, ""), None)
    resp = web.HTTPSeeOther("/login" if sessions.acl is not None else "/")
    resp.del_cookie(COOKIE, path="/")
    raise resp


def add_routes(app: web.Application, acl: AccessList | None) -> None:
    app[SESSIONS_KEY] = Sessions(acl)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login_post)
    app.router.add_post("/logout", logout_post)
