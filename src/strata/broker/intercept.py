"""Looking at every RPC's request and reply without the service knowing: a grpc.aio server
interceptor that wraps the servicer's method handlers. ``strata.broker.authorize`` (the ACL)
and ``strata.broker.metrics`` build on it; without ``--acl`` and ``--metrics`` no
interceptor is installed and calls reach the service directly.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from strata.broker.protocol import svc

Unary = Callable[[Any, Any], Awaitable[Any]]            # (request, context) -> reply
UnaryStream = Callable[[Any, Any], AsyncIterator[Any]]  # (request, context) -> replies
StreamStream = Callable[[AsyncIterator[Any], Any], AsyncIterator[Any]]


def reply_class(method: str) -> type | None:
    """The protocol's reply message of an RPC (``SendMessage`` -> SendMessageResponse)."""
    if method == "Telemetry":
        return svc.TelemetryCommand
    return getattr(svc, f"{method}Response", None)


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each RPC's handler once (per method name) with the ``wrap_*`` methods, which a
    subclass overrides; by default they return the handler's behaviour unchanged."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = self._wrap(method.rsplit("/", 1)[-1], handler)
        return wrapped

    def _wrap(self, name: str, h: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        io = dict(request_deserializer=h.request_deserializer,
                  response_serializer=h.response_serializer)
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self.wrap_unary(name, h.unary_unary),
                                                       **io)
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self.wrap_unary_stream(name, h.unary_stream), **io)
        if h.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self.wrap_stream_stream(name, h.stream_stream), **io)
        return h        # client-streaming: the protocol has none

    def wrap_unary(self, name: str, inner: Unary) -> Unary:
        return inner

    def wrap_unary_stream(self, name: str, inner: UnaryStream) -> UnaryStream:
        return inner

    def wrap_stream_stream(self, name: str, inner: StreamStream) -> StreamStream:
        return inner
