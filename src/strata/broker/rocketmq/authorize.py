"""The ACL applied to the RPCs (``strata serve --acl``): every call must be signed by a known
account, and each RPC needs rights on the topics and groups it names. A refused call is
answered with the protocol's UNAUTHORIZED (no or bad signature) or FORBIDDEN (a right
missing) status and never reaches the service, so it neither stores nor returns anything.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import grpc

from strata.broker.acl import AccessList, Kind, Perm, Refusal
from strata.broker.rocketmq.intercept import RpcLayer, StreamStream, Unary, UnaryStream, reply_class
from strata.broker.rocketmq.protocol import Code, pb

Need = tuple[Kind, str, Perm]
Rule = Callable[[Any], Iterable[Need]]


def _topic(resource, perm: Perm) -> Need:
    return (Kind.TOPIC, resource.name, perm)


def _group(resource, perm: Perm = Perm.SUB) -> Need:
    return (Kind.GROUP, resource.name, perm)


def _consume(r) -> list[Need]:            # requests with `topic` and `group`
    return [_topic(r.topic, Perm.SUB), _group(r.group)]


def _consume_queue(r) -> list[Need]:      # requests with `message_queue` and `group`
    return [_topic(r.message_queue.topic, Perm.SUB), _group(r.group)]


def _optional_group(r) -> list[Need]:
    return [_group(r.group)] if r.HasField("group") and r.group.name else []


# What each RPC of the protocol needs (besides a valid signature). An RPC missing here (one a
# later protocol version adds) needs an admin account.
RULES: dict[str, Rule] = {
    "QueryRoute": lambda r: [_topic(r.topic, Perm.ANY)],
    "Heartbeat": _optional_group,
    "NotifyClientTermination": _optional_group,
    "Telemetry": lambda r: [],
    "SendMessage": lambda r: [_topic(m.topic, Perm.PUB) for m in r.messages],
    "EndTransaction": lambda r: [_topic(r.topic, Perm.PUB)],
    "RecallMessage": lambda r: [_topic(r.topic, Perm.PUB)],
    "QueryAssignment": _consume,
    "AckMessage": _consume,
    "ChangeInvisibleDuration": _consume,
    "ForwardMessageToDeadLetterQueue": _consume,
    "SyncLiteSubscription": _consume,
    "ReceiveMessage": _consume_queue,
    "PullMessage": _consume_queue,
    "UpdateOffset": _consume_queue,
    "GetOffset": _consume_queue,
    "QueryOffset": lambda r: [_topic(r.message_queue.topic, Perm.SUB)],
}


class AclLayer(RpcLayer):
    """Checks each call against an AccessList before the service sees it."""

    def __init__(self, acl: AccessList) -> None:
        self.acl = acl

    def check(self, name: str, request, metadata) -> None:
        """Refusal if the call is not signed by a known account or lacks a right."""
        account = self.acl.authenticate(metadata)
        rule = RULES.get(name)
        if rule is None:
            if not account.admin:
                raise Refusal(f"{name} needs an admin account", forbidden=True)
            return
        if request is not None:
            self.acl.authorize(account, rule(request))

    @staticmethod
    def _refusal(name: str, r: Refusal):
        cls = reply_class(name)
        code = Code.FORBIDDEN if r.forbidden else Code.UNAUTHORIZED
        return None if cls is None else cls(status=pb.Status(code=code, message=str(r)))

    @staticmethod
    async def _abort(context, r: Refusal) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED if r.forbidden
                            else grpc.StatusCode.UNAUTHENTICATED, str(r))

    def wrap_unary(self, name: str, inner: Unary) -> Unary:
        async def checked(request, context):
            try:
                self.check(name, request, context.invocation_metadata())
            except Refusal as r:
                reply = self._refusal(name, r)
                if reply is None:
                    await self._abort(context, r)
                return reply
            return await inner(request, context)
        return checked

    def _wrap_stream(self, name: str, inner, request_of):
        """A streaming handler checked before its first reply (``request_of(request)``: what
        the rule looks at; a stream's requests are not known when it opens, its headers are
        signed)."""
        async def checked(request, context):
            try:
                self.check(name, request_of(request), context.invocation_metadata())
            except Refusal as r:
                reply = self._refusal(name, r)
                if reply is None:
                    await self._abort(context, r)
                yield reply
                return
            async for reply in inner(request, context):
                yield reply
        return checked

    def wrap_unary_stream(self, name: str, inner: UnaryStream) -> UnaryStream:
        return self._wrap_stream(name, inner, lambda request: request)

    def wrap_stream_stream(self, name: str, inner: StreamStream) -> StreamStream:
        return self._wrap_stream(name, inner, lambda requests: None)
