"""What an operator can do from the console: create a topic, add queues, delete a topic,
send a test message, reset a group's offsets (to an offset or a time) and resend a
dead-letter message to its topic.

Each is a POST from a form on the page it concerns, refused unless the session is an
administrator's (under ``--acl``), the form carries the session's CSRF token and its
"confirm" box is ticked; each is logged (``strata console: action ...`` on stderr). They
need the store's writer: the console inside ``strata serve``, or ``strata console`` on a
store no broker holds. Store calls run on the console's thread; a group's offsets change on
the event loop, where the broker changes them too.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from functools import partial
from urllib.parse import quote

from aiohttp import web

from strata.broker.dead_letter import (DLQ_PREFIX, PROP_ORIGIN_OFFSET, PROP_ORIGIN_QUEUE,
                                       PROP_ORIGIN_TOPIC)
from strata.console.views import ConsoleData
from strata.errors import InvalidInputError, StrataError
from strata.format.record import encode_topic
from strata.store.message import Message

log = logging.getLogger(__name__)
PROP_RESENT_FROM = "RESENT_FROM_DLQ"


class ActionRefused(StrataError):
    """An action the console cannot or may not do (read-only store, not an admin, no
    confirmation)."""


def _say(line: str) -> None:
    print(f"strata console: {line}", file=sys.stderr, flush=True)


class Actions:
    def __init__(self, data: ConsoleData, open_groups=None) -> None:
        self.data = data
        # standalone writer: opens the group journal on the first reset (None inside serve)
        self.open_groups = open_groups

    async def run(self, request: web.Request, what: str, fn, *args, back: str) -> web.Response:
        s = request["session"]
        if not s.admin:
            raise web.HTTPForbidden(text=f"{s.user} is not an administrator: {what} refused")
        form = await request.post()
        if form.get("confirm") != "yes":
            raise ActionRefused(f"{what}: tick the confirm box to do it")
        if self.data.store.readonly:
            raise ActionRefused(
                f"{what}: this console opened the store read-only beside its writer (strata "
                "serve); act through the console that `strata serve --http` runs")
        try:
            if asyncio.iscoroutinefunction(fn):
                done = await fn(*args)
            else:
                done = await asyncio.get_running_loop().run_in_executor(
                    self.data.executor, partial(fn, *args))
        except StrataError as exc:
            _say(f"action by {s.user} failed: {what}: {type(exc).__name__}: {exc}")
            s.flash.append(("error", f"{what}: {type(exc).__name__}: {exc}"))
            raise web.HTTPSeeOther(back) from None
        _say(f"action by {s.user}: {what}: {done}")
        s.flash.append(("ok", f"{what}: {done}"))
        raise web.HTTPSeeOther(back)

    # ------------------------------------------------------------------ store actions

    def _create(self, topic: str, queues: int | None) -> str:
        made = self.data.store.create_topic(topic, queues)
        n = self.data.store.queue_count(topic)
        return f"created with {n} queues" if made else f"exists with {n} queues"

    def _add_queues(self, topic: str, queues: int) -> str:
        s = self.data.store
        if s.queue_count(topic) == 0:
            raise InvalidInputError(f"no topic {topic!r}")
        s.set_queue_count(topic, queues)
        return f"{s.queue_count(topic)} queues now"

    def _delete(self, topic: str) -> str:
        return "deleted" if self.data.store.delete_topic(topic) else "there was no such topic"

    def _send(self, topic: str, body: str, key: str, tag: str) -> str:
        import time
        r = self.data.store.put(Message(topic, body.encode("utf-8"), keys=[key] if key else (),
                                        tags=tag or None,
                                        born_timestamp=time.time_ns() // 1_000_000))
        return f"stored as {r.msg_id} (queue {r.queue_id}, offset {r.queue_offset})"

    def _resend(self, msg_id: str) -> str:
        import time
        m = self.data.store.get_by_id(msg_id)
        if m is None:
            raise InvalidInputError(f"no message {msg_id}")
        props = m.properties
        origin = props.get(PROP_ORIGIN_TOPIC)
        if not m.topic.startswith(DLQ_PREFIX) or not origin:
            raise InvalidInputError(f"message {msg_id} is not a dead letter (topic {m.topic})")
        for k in (PROP_ORIGIN_TOPIC, PROP_ORIGIN_QUEUE, PROP_ORIGIN_OFFSET):
            props.pop(k, None)
        props[PROP_RESENT_FROM] = msg_id
        r = self.data.store.put(Message(origin, bytes(m.body), keys=m.keys, tags=m.tags,
                                        properties=props,
                                        born_timestamp=time.time_ns() // 1_000_000))
        return f"resent to {origin} as {r.msg_id}"

    async def _reset(self, group: str, topic: str, offset: int | None,
                     time_ms: int | None) -> str:
        """The broker's admin operation (strata.broker.admin): RocketMQ groups' queues and
        Kafka groups' committed offsets start over (a Kafka group with members is refused)."""
        from strata.broker.admin import AdminOps, AdminTarget
        loop = asyncio.get_running_loop()
        groups = self.data.groups.live
        if groups is None:      # strata console as the writer: no broker holds the journal
            groups = self.data.groups.live = await loop.run_in_executor(None, self.open_groups)
        ops = AdminOps(AdminTarget(self.data.store, groups, self.data.groups.kafka_live,
                                   self.data.groups.worker))
        got = await ops.reset_offsets({"group": group, "topic": topic, "offset": offset,
                                       "time_ms": time_ms})
        return "queues start over at " + ", ".join(f"{q}: {o}" for q, o in
                                                   got["queues"].items())


def _int(form, name: str, required: bool = True) -> int | None:
    raw = str(form.get(name, "")).strip()
    if not raw:
        if required:
            raise InvalidInputError(f"{name} is required")
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInputError(f"{name}={raw!r} is not an integer") from None


def add_routes(app: web.Application, actions: Actions) -> None:
    async def create(request: web.Request) -> web.Response:
        f = await request.post()
        topic = str(f.get("topic", ""))
        encode_topic(topic)
        queues = _int(f, "queues", required=False)
        return await actions.run(request, f"create topic {topic}", actions._create, topic,
                                 queues, back=f"/topics/{quote(topic)}"
                                 if topic else "/topics")

    async def add_queues(request: web.Request) -> web.Response:
        f = await request.post()
        topic = str(f.get("topic", ""))
        encode_topic(topic)
        return await actions.run(request, f"set queues of {topic}", actions._add_queues,
                                 topic, _int(f, "queues"), back=f"/topics/{quote(topic)}")

    async def delete(request: web.Request) -> web.Response:
        f = await request.post()
        topic = str(f.get("topic", ""))
        encode_topic(topic)
        if f.get("name") != topic:
            raise ActionRefused(f"delete topic {topic}: type the topic's name to confirm")
        return await actions.run(request, f"delete topic {topic}", actions._delete, topic,
                                 back="/topics")

    async def send(request: web.Request) -> web.Response:
        f = await request.post()
        topic = str(f.get("topic", ""))
        encode_topic(topic)
        return await actions.run(request, f"send a test message to {topic}", actions._send,
                                 topic, str(f.get("body", "")), str(f.get("key", "")),
                                 str(f.get("tag", "")), back=f"/topics/{quote(topic)}")

    async def resend(request: web.Request) -> web.Response:
        f = await request.post()
        msg_id = str(f.get("msg_id", ""))
        return await actions.run(request, f"resend dead letter {msg_id}", actions._resend,
                                 msg_id, back=f"/messages/{quote(msg_id)}")

    async def reset(request: web.Request) -> web.Response:
        f = await request.post()
        group, topic = str(f.get("group", "")), str(f.get("topic", ""))
        encode_topic(topic)
        offset, time_ms = _int(f, "offset", False), _int(f, "time", False)
        if (offset is None) == (time_ms is None):
            raise InvalidInputError("reset offsets: give an offset or a time (ms), one of them")
        return await actions.run(request, f"reset {group} on {topic}", actions._reset,
                                 group, topic, offset, time_ms, back="/groups")

    r = app.router
    r.add_post("/actions/create-topic", create)
    r.add_post("/actions/add-queues", add_queues)
    r.add_post("/actions/delete-topic", delete)
    r.add_post("/actions/send", send)
    r.add_post("/actions/resend", resend)
    r.add_post("/actions/reset-offsets", reset)
