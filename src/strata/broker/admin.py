"""The broker's admin API: what `strata topics create`, `strata topics add-queues`,
`strata topics delete` and `strata groups reset` do to a store that `strata serve` holds.

A store has one writer. While `strata serve` holds it, the admin commands cannot open it; they
ask the running broker instead, over HTTP/JSON on loopback. The broker writes where to ask
into ``<store>/broker.admin`` (one JSON object: ``pid``, ``url``, ``token``; file mode 0600,
so only the store's owner reads the token) when it starts and removes it on a clean exit; a
file whose pid is dead is stale and ignored. Every request carries the token in the
``X-Strata-Admin-Token`` header; under ``--acl`` it also names an administrator account
(``X-Strata-Access-Key`` / ``X-Strata-Secret-Key``), as every action of the console needs one.

The server is a few dozen lines on asyncio streams (one request per connection, JSON body,
``Content-Length`` framing): the broker needs no HTTP library for it. Store calls run on a
worker thread; a group's offsets change on the event loop, where the broker changes them.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Awaitable, Callable

from strata.broker.group_state import Committed, ConsumerGroups
from strata.errors import InvalidInputError, StrataError
from strata.files.io import file_ops
from strata.format.record import encode_topic

log = logging.getLogger(__name__)

ADMIN_FILE = "broker.admin"
TOKEN_HEADER = "X-Strata-Admin-Token"
AK_HEADER = "X-Strata-Access-Key"
SK_HEADER = "X-Strata-Secret-Key"
MAX_BODY = 64 << 10
TIMEOUT_S = 30.0


class AdminApiError(StrataError):
    """The running broker refused an admin request, or could not be reached."""


def _say(line: str) -> None:
    print(f"strata serve: {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- what the API does


@dataclass
class AdminTarget:
    """What the admin API acts on: the broker's store and groups, and the Kafka groups'
    live membership (``kafka_groups()``: group id -> {"state": name, ...}) so a reset of a
    Kafka group with members is refused, as Kafka refuses it."""

    store: Any
    groups: ConsumerGroups
    kafka_groups: Callable[[], dict[str, dict]] = lambda: {}
    # a serving broker's group worker (strata.broker.group_worker): a reset of deliveries
    # runs there, in turn with the pops and acks; None: no server runs, reset here
    worker: Any = None


def _int(body: dict, name: str, required: bool = True) -> int | None:
    v = body.get(name)
    if v is None:
        if required:
            raise InvalidInputError(f"{name} is required")
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise InvalidInputError(f"{name}={v!r} is not an integer")
    return v


def _topic(body: dict) -> str:
    name = body.get("topic")
    if not isinstance(name, str):
        raise InvalidInputError("topic is required (a string)")
    encode_topic(name)          # InvalidInputError naming what is wrong with it
    return name


class AdminOps:
    """The operations, each taking the request's JSON body and returning the answer's."""

    def __init__(self, target: AdminTarget) -> None:
        self.t = target

    async def _off(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))

    async def create_topic(self, body: dict) -> dict:
        from strata.store.topics import check_new_topic
        name = _topic(body)
        queues = _int(body, "queues", required=False)
        kind = body.get("type", "normal")
        check_new_topic(name, 1 if queues is None else queues, kind)
        s = self.t.store

        def run() -> dict:
            created = s.create_topic(name, queues, message_type=kind)
            return {"topic": name, "created": created, "queues": s.queue_count(name),
                    "type": s.topic_type(name).value}
        return await self._off(run)

    async def set_queues(self, body: dict) -> dict:
        name, queues = _topic(body), _int(body, "queues")
        s = self.t.store

        def run() -> dict:
            if s.queue_count(name) == 0:
                raise InvalidInputError(f"no topic {name!r} in this store")
            s.set_queue_count(name, queues)
            return {"topic": name, "queues": s.queue_count(name)}
        return await self._off(run)

    async def delete_topic(self, body: dict) -> dict:
        name = _topic(body)
        return {"topic": name, "deleted": await self._off(self.t.store.delete_topic, name)}

    async def kafka_groups(self, body: dict) -> dict:
        """The Kafka groups' live state: group id -> {state, protocol_type, protocol,
        members} (what `strata groups DIR` shows beside the journal's committed offsets)."""
        return self.t.kafka_groups()

    async def reset_offsets(self, body: dict) -> dict:
        """Every queue of ``topic`` that ``group`` reads (RocketMQ) or committed (Kafka)
        starts over at ``offset`` (clamped to the queue's bounds) or at the first message
        stored at or after ``time_ms``."""
        group = body.get("group")
        if not isinstance(group, str) or not group:
            raise InvalidInputError("group is required (a string)")
        topic = _topic(body)
        offset, time_ms = _int(body, "offset", False), _int(body, "time_ms", False)
        if (offset is None) == (time_ms is None):
            raise InvalidInputError("give an offset or a time (ms), one of them")
        g = self.t.groups
        rocket = sorted(q for (gg, t, q) in list(g.queues) if gg == group and t == topic)
        kafka = sorted(q for (t, q) in g.committed_offsets(group) if t == topic)
        if not rocket and not kafka:
            raise InvalidInputError(f"group {group!r} has not read topic {topic!r}")
        if kafka:
            live = self.t.kafka_groups().get(group)
            if live is not None and live["state"] not in ("Empty", "Dead"):
                raise InvalidInputError(
                    f"Kafka group {group!r} is {live['state']} (it has members): stop its "
                    "consumers first, as Kafka's own offset reset requires")
        s = self.t.store

        def targets() -> dict[int, int]:
            out = {}
            for q in sorted(set(rocket) | set(kafka)):
                lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                if time_ms is not None:
                    out[q] = s.offset_for_time(topic, q, time_ms, "lower") if hi > lo else hi
                else:
                    out[q] = min(max(offset, lo), hi)
            return out
        got = await self._off(targets)

        def reset() -> None:
            for q in rocket:
                g.reset_offset(group, topic, q, got[q])
        if self.t.worker is not None:
            await self.t.worker.call(reset)
        else:
            reset()
        if kafka:
            rec = g.commit(group, [(topic, q, Committed(got[q])) for q in kafka])
            await self._off(g.journal.append, rec)
        return {"group": group, "topic": topic,
                "protocols": (["rocketmq"] if rocket else []) + (["kafka"] if kafka else []),
                "queues": {str(q): o for q, o in got.items()}}


# ---------------------------------------------------------------------- the server


Handler = Callable[[dict], Awaitable[dict]]


class AdminServer:
    """The admin API on loopback; ``start()`` binds a free port and writes the admin file."""

    def __init__(self, target: AdminTarget, acl=None, host: str = "127.0.0.1") -> None:
        self.ops = AdminOps(target)
        self.acl = acl
        self.host = host
        self.token = secrets.token_hex(32)
        self.path = Path(target.store.path) / ADMIN_FILE
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self.routes: dict[str, Handler] = {
            "/topics/create": self.ops.create_topic,
            "/topics/queues": self.ops.set_queues,
            "/topics/delete": self.ops.delete_topic,
            "/groups/reset": self.ops.reset_offsets,
            "/groups/kafka": self.ops.kafka_groups,
        }

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        doc = {"pid": os.getpid(), "url": f"http://{self.host}:{self.port}", "token": self.token}
        tmp = self.path.with_name(ADMIN_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        file_ops().replace(tmp, self.path)   # readers see the whole file or none

    async def close(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _authorized(self, headers: dict[str, str]) -> str | None:
        """None if allowed, else why not."""
        if not hmac.compare_digest(headers.get(TOKEN_HEADER.lower(), ""), self.token):
            return "wrong or missing admin token (read it from the store's broker.admin)"
        if self.acl is not None:
            ak = headers.get(AK_HEADER.lower(), "")
            acc = self.acl.accounts.get(ak)
            if acc is None or not hmac.compare_digest(
                    acc.secret_key, headers.get(SK_HEADER.lower(), "")):
                return ("the broker runs with --acl: give an administrator's accessKey and "
                        "secretKey (--access-key/--secret-key or STRATA_ACCESS_KEY/"
                        "STRATA_SECRET_KEY)")
            if not acc.admin:
                return f"account {ak} is not an administrator (admin: true in the ACL)"
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, answer = await asyncio.wait_for(self._one(reader), TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError, ValueError) as exc:
            status, answer = 400, {"error": f"bad request: {type(exc).__name__}"}
        data = json.dumps(answer).encode()
        reason = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found"}[status]
        try:
            writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                         .encode() + data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader) -> tuple[int, dict]:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > 16 << 10:
            raise ValueError("headers too long")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        size = int(headers.get("content-length", "0"))
        if not 0 <= size <= MAX_BODY:
            raise ValueError("body too large")
        raw = await reader.readexactly(size)
        why = self._authorized(headers)
        if why is not None:
            _say(f"admin request {path} refused: {why}")
            return 403, {"error": why}
        handler = self.routes.get(path)
        if handler is None or method != "POST":
            return 404, {"error": f"no admin operation {method} {path}"}
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise InvalidInputError("the request body must be a JSON object")
            answer = await handler(body)
        except json.JSONDecodeError as exc:
            return 400, {"error": f"InvalidInputError: the body is not JSON ({exc})"}
        except StrataError as exc:
            _say(f"admin {path} failed: {type(exc).__name__}: {exc}")
            return 400, {"error": f"{type(exc).__name__}: {exc}"}
        if path != "/groups/kafka":     # a read: not logged
            _say(f"admin {path}: {json.dumps(answer)}")
        return 200, answer


# ---------------------------------------------------------------------- the client


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_admin(store_dir: Path) -> dict | None:
    """The running broker's admin endpoint from ``<store>/broker.admin``; None if there is no
    such file, or it is stale (its pid is dead) or unreadable."""
    try:
        doc = json.loads((Path(store_dir) / ADMIN_FILE).read_text())
        pid, url, token = int(doc["pid"]), str(doc["url"]), str(doc["token"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _pid_alive(pid):
        return None
    return {"pid": pid, "url": url, "token": token}


def call(endpoint: dict, op: str, body: dict, access_key: str | None = None,
         secret_key: str | None = None) -> dict:
    """POST ``body`` to the admin operation ``op`` (e.g. ``/topics/create``); the answer, or
    AdminApiError with the broker's reason."""
    headers = {TOKEN_HEADER: endpoint["token"], "Content-Type": "application/json"}
    if access_key is not None:
        headers[AK_HEADER] = access_key
        headers[SK_HEADER] = secret_key or ""
    req = urllib.request.Request(endpoint["url"] + op, data=json.dumps(body).encode(),
                                 headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            why = exc.reason
        raise AdminApiError(f"the running broker (pid {endpoint['pid']}) refused: {why}") \
            from None
    except (urllib.error.URLError, OSError) as exc:
        raise AdminApiError(f"cannot reach the running broker's admin API at "
                            f"{endpoint['url']}: {exc}") from None
