"""The Kafka listener's handler registry and the context each handler gets.

A handler is ``async def handle(ctx: RequestContext, request) -> response | None`` (None:
send no response, as for Produce with acks=0), registered with
``@handles(api_key, min_version, max_version, flexible_from=...)``. Requests and responses
are kafka-python's ``kafka.protocol`` classes (generated from Kafka's JSON schemas, every
version, flexible ones too); ``request_class(key)`` / ``response_class(key)`` find them.
``flexible_from`` is checked against the schema's own flexibleVersions at registration, so
a handler's idea of the encoding cannot drift from the classes that do the encoding.

The modules holding handlers are listed in ``HANDLER_MODULES``; ``load_handlers()`` imports
them once (the listener calls it at start).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pkgutil
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

import kafka.protocol
from kafka.protocol.api_message import ApiMessage

from strata.errors import InvalidInputError

if TYPE_CHECKING:
    from strata.broker.kafka.server import KafkaBroker, KafkaConnection

log = logging.getLogger(__name__)

Handler = Callable[["RequestContext", Any], Awaitable[Any]]

# the modules of strata.broker.kafka that register handlers; a module of a part not merged
# yet is skipped (and logged) by load_handlers
HANDLER_MODULES = ("versions", "metadata", "produce", "fetch", "offsets", "admin",
                   "idempotence", "group_handlers", "sasl")

_HEAD = struct.Struct(">hhi")       # request_api_key, request_api_version, correlation_id
_I16 = struct.Struct(">h")


class BadRequestError(InvalidInputError):
    """A request frame that cannot be decoded: the message says where and why."""


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str                        # "host:port" of the client, for logs
    principal: str | None            # authenticated account (SASL), None without --acl
    connection: "KafkaConnection"    # per-connection state (SASL progress, etc.)
    broker: "KafkaBroker"            # the listener's shared state: store, core, config
    # a Fetch's topics that --acl refused (authorize), for the handler to answer as such
    refused_topics: Sequence = ()

    @property
    def flexible(self) -> bool:
        return HANDLERS[self.api_key].flexible(self.api_version)


@dataclass(frozen=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request: type                    # kafka.protocol request class (unversioned)
    response: type                   # kafka.protocol response class (unversioned)
    flexible_from: int | None = None

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


HANDLERS: dict[int, Registration] = {}
_REQUESTS: dict[int, type] = {}
_RESPONSES: dict[int, type] = {}
_loaded = False


def _index_classes() -> None:
    if _REQUESTS:
        return
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or ".schemas" in info.name or "generate" in info.name:
            continue
        importlib.import_module(info.name)
    todo = list(ApiMessage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None:
            continue
        table = _REQUESTS if cls.is_request() else _RESPONSES
        table.setdefault(cls.API_KEY, cls)


def request_class(api_key: int) -> type:
    _index_classes()
    return _REQUESTS[api_key]


def response_class(api_key: int) -> type:
    _index_classes()
    return _RESPONSES[api_key]


def handles(api_key: int, min_version: int, max_version: int, *,
            flexible_from: int | None = None) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of ``api_key`` for these versions."""
    req, resp = request_class(api_key), response_class(api_key)
    if max_version > req.max_version:
        raise ValueError(f"api {api_key}: kafka.protocol knows versions up to "
                         f"{req.max_version}, not {max_version}")
    # a schema with flexibleVersions "none" (SaslHandshake) reads as (-1, -1)
    schema_flex = req._flexible_versions[0] if req._flexible_versions and \
        req._flexible_versions[0] >= 0 else None
    if schema_flex is not None and schema_flex > max_version:
        schema_flex = None
    if schema_flex != flexible_from:
        raise ValueError(f"api {api_key}: flexible_from={flexible_from} but the schema's "
                         f"flexible versions start at {schema_flex}")

    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise ValueError(f"api {api_key} has two handlers: {HANDLERS[api_key].handler} "
                             f"and {fn}")
        HANDLERS[api_key] = Registration(api_key, min_version, max_version, fn, req, resp,
                                         flexible_from)
        return fn
    return register


def load_handlers() -> dict[int, Registration]:
    """Import every module of HANDLER_MODULES (once) and return the registry."""
    global _loaded
    if not _loaded:
        for name in HANDLER_MODULES:
            full = f"{__package__}.{name}"
            if importlib.util.find_spec(full) is None:
                log.info("kafka: no module %s (its part is not merged); its APIs are not "
                         "advertised", full)
                continue
            importlib.import_module(full)
        _loaded = True
    return HANDLERS


@dataclass
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_at: int = field(default=0)      # where the body starts in the frame


def _uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise BadRequestError("bad unsigned varint in the request header's tagged fields")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def header_flexible(api_key: int, version: int) -> bool:
    """Whether a request of this API and version has the flexible header (v2, tagged
    fields), by the schema; a version above the schema's (an ApiVersions request newer than
    this broker, KIP-511) counts as flexible when the schema's newest is."""
    _index_classes()
    req = _REQUESTS.get(api_key)
    # flexibleVersions "none" (SaslHandshake) reads as (-1, -1)
    if req is None or req._flexible_versions is None or req._flexible_versions[0] < 0:
        return False
    return req._flexible_versions[0] <= version


def parse_header(frame: memoryview) -> RequestHeader:
    """The request header (v1, or v2 for a flexible version) of a frame (without its 4-byte
    size); BadRequestError when it is short."""
    if len(frame) < 10:
        raise BadRequestError(f"request of {len(frame)} bytes: shorter than a header")
    key, version, corr = _HEAD.unpack_from(frame, 0)
    n = _I16.unpack_from(frame, 8)[0]
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise BadRequestError("client_id runs past the end of the request")
        client_id = bytes(frame[pos:pos + n]).decode("utf-8", "replace")
        pos += n
    if header_flexible(key, version):
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise BadRequestError("tagged fields run past the end of the request header")
    return RequestHeader(key, version, corr, client_id, pos)


def decode_body(reg: Registration, header: RequestHeader, frame: memoryview) -> Any:
    """The request body as a kafka.protocol object; BadRequestError when it does not decode."""
    try:
        return reg.request.decode(frame[header.body_at:], version=header.api_version)
    except Exception as exc:     # the generated decoders raise many kinds; all mean "bad bytes"
        raise BadRequestError(f"cannot decode {reg.request.__name__} v{header.api_version}: "
                              f"{type(exc).__name__}: {exc}") from None


def encode_response(response: Any, version: int, correlation_id: int) -> bytes | memoryview:
    """The framed response (size, header, body) for a request of ``version``: a response
    with an ``encode_framed(version, correlation_id)`` method (the Fetch answer) encodes
    itself; any other is a kafka.protocol object."""
    own = getattr(response, "encode_framed", None)
    if own is not None:
        return own(version, correlation_id)
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return response.encode(header=True, framed=True)
