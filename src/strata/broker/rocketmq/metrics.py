"""The gRPC side of ``--metrics``: a layer around the RPCs that counts each request by method
and status code, and the messages that SendMessage stored, ReceiveMessage delivered and
AckMessage acknowledged, into the broker's ``BrokerMetrics``."""

from __future__ import annotations

from strata.broker.metrics import BrokerMetrics
from strata.broker.rocketmq.intercept import RpcLayer, Unary, UnaryStream
from strata.broker.rocketmq.protocol import Code

OK = Code.OK
CODE_NAMES = {v: k for k, v in Code.items()}


class RpcMetrics(RpcLayer):
    """Counts what the RPCs did into ``metrics``."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.m = metrics

    # ------------------------------------------------------------------ the RPCs

    def _count(self, name: str, request, reply) -> None:
        code = reply.status.code
        self.m.child(self.m.requests, name, CODE_NAMES.get(code) or str(code)).inc()
        if name == "SendMessage":
            for m, e in zip(request.messages, reply.entries):
                if e.status.code == OK:
                    self.m.child(self.m.sent, m.topic.name).inc()
                    self.m.child(self.m.sent_bytes, m.topic.name).inc(len(m.body))
        elif name == "AckMessage":
            n = sum(1 for e in reply.entries if e.status.code == OK)
            if n:
                self.m.child(self.m.acked, request.topic.name, request.group.name).inc(n)

    def wrap_unary(self, name: str, inner: Unary) -> Unary:
        async def counted(request, context):
            reply = await inner(request, context)
            if reply is not None:
                self._count(name, request, reply)
            return reply
        return counted

    def wrap_unary_stream(self, name: str, inner: UnaryStream) -> UnaryStream:
        async def counted(request, context):
            n = size = 0
            first = True
            try:
                async for reply in inner(request, context):
                    if first and reply.HasField("status"):
                        self._count(name, request, reply)
                        first = False
                    if reply.HasField("message"):
                        n += 1
                        size += len(reply.message.body)
                    yield reply
            finally:
                if n and name == "ReceiveMessage":
                    labels = (request.message_queue.topic.name, request.group.name)
                    self.m.child(self.m.received, *labels).inc(n)
                    self.m.child(self.m.received_bytes, *labels).inc(size)
        return counted
