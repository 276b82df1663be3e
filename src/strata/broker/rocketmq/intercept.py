"""Looking at every RPC's request and reply without the service knowing: layers that wrap the
servicer's methods before they are registered with the gRPC server. ``strata.broker.rocketmq.authorize``
(the ACL) and ``strata.broker.metrics`` are such layers; without ``--acl`` and ``--metrics``
the service is registered as it is.

The methods are wrapped once, at start, rather than by a grpc.aio server interceptor, which
runs its chain (a coroutine that looks the handler up) again for every call.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from strata.broker.rocketmq.protocol import svc

Unary = Callable[[Any, Any], Awaitable[Any]]            # (request, context) -> reply
UnaryStream = Callable[[Any, Any], AsyncIterator[Any]]  # (request, context) -> replies
StreamStream = Callable[[AsyncIterator[Any], Any], AsyncIterator[Any]]

_METHODS = svc.DESCRIPTOR.services_by_name["MessagingService"].methods


def reply_class(method: str) -> type | None:
    """The protocol's reply message of an RPC (``SendMessage`` -> SendMessageResponse)."""
    if method == "Telemetry":
        return svc.TelemetryCommand
    return getattr(svc, f"{method}Response", None)


class RpcLayer:
    """Wraps RPC behaviours; a subclass overrides the ``wrap_*`` methods, which by default
    return the behaviour unchanged."""

    def wrap_unary(self, name: str, inner: Unary) -> Unary:
        return inner

    def wrap_unary_stream(self, name: str, inner: UnaryStream) -> UnaryStream:
        return inner

    def wrap_stream_stream(self, name: str, inner: StreamStream) -> StreamStream:
        return inner


def layered(servicer: Any, layers: Sequence[RpcLayer]) -> Any:
    """An object with the servicer's RPC methods wrapped by ``layers`` (the first one
    outermost), to register in the servicer's place. Methods the servicer does not implement
    (the generated base's, which answer UNIMPLEMENTED) are left as they are."""
    if not layers:
        return servicer
    out = types.SimpleNamespace()
    for m in _METHODS:
        behaviour = getattr(servicer, m.name)
        implemented = inspect.iscoroutinefunction(behaviour) or \
            inspect.isasyncgenfunction(behaviour)
        for layer in reversed(layers) if implemented else ():
            if m.client_streaming and m.server_streaming:
                behaviour = layer.wrap_stream_stream(m.name, behaviour)
            elif m.server_streaming:
                behaviour = layer.wrap_unary_stream(m.name, behaviour)
            elif not m.client_streaming:
                behaviour = layer.wrap_unary(m.name, behaviour)
        setattr(out, m.name, behaviour)
    return out
