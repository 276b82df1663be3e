"""The Kafka listener of ``strata serve --kafka HOST:PORT``: an asyncio server speaking
Kafka's framing (a big-endian i32 size, then the request) over TCP or TLS.

Each connection reads requests as they come and runs each one's handler as soon as it is
read (so a client's pipelined Produce requests share group commits), but writes the
responses in request order, as Kafka requires. A request whose bytes do not decode closes
the connection with a log line naming the peer and the problem; nothing is stored from it.
``KafkaBroker`` is the state every connection shares: the store, the core's services, the
configuration, and the wake-up of long-polling Fetches when new messages are dispatched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.broker.arrivals import Arrivals
from strata.broker.kafka import api, authorize
from strata.broker.kafka import errors as ke
from strata.broker.kafka.read_lanes import ReadLanes
from strata.broker.warm import quietly
from strata.store.message_store import MessageStore

if TYPE_CHECKING:
    from strata.broker.process import Node, ServeConfig

log = logging.getLogger(__name__)
# every group-membership request and its answer, per connection (off unless DEBUG is on for
# this logger; ``STRATA_KAFKA_TRACE=FILE`` turns it on into FILE): what a coordinator
# problem is diagnosed from
trace = logging.getLogger("strata.broker.kafka.trace")
# Metadata, FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup
TRACED = frozenset((3, 10, 11, 12, 13, 14))

MAX_FRAME = 100 << 20          # a request larger than this closes the connection
MAX_IN_FLIGHT = 32             # requests read ahead of their responses, per connection
STOP_GRACE_S = 5.0
_SIZE = struct.Struct(">i")
CLUSTER_ID = "strata"
NODE_ID = 0


@dataclass(eq=False)          # compared and hashed by identity (kept in a set)
class KafkaConnection:
    """Per-connection state: the peer, SASL progress (h/kgroups' handlers keep theirs in
    ``state``), the principal once authenticated."""

    peer: str
    principal: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    requests: int = 0
    closing: bool = False
    reader: asyncio.Task | None = None     # the task reading its requests


class KafkaBroker:
    """What every Kafka connection of the process shares."""

    def __init__(self, cfg: "ServeConfig", node: "Node") -> None:
        self.cfg = cfg
        self.node = node
        self.store: MessageStore = node.store
        self.batcher = node.batcher
        self.groups = node.groups
        self.metrics = node.metrics
        self.acl = node.acl
        self.auto_create = cfg.auto_create
        self.flush_sync = cfg.flush == "sync"
        self.host = cfg.kafka[0] if cfg.kafka else "127.0.0.1"
        self.port = 0
        self.node_id = NODE_ID
        self.cluster_id = CLUSTER_ID
        self.stopping = False
        self.state: dict[str, Any] = {}        # per-part state (idempotence, groups, ...)
        self.arrivals = Arrivals(self.store)   # set when dispatch made new messages visible
        self.requests = 0
        self.connections = 0
        self.live: set[KafkaConnection] = set()
        self.puts = 0                    # put_columns calls of produces (async flush)
        self.put_messages = 0
        # the store reads of Fetch (which can reach S3 through the tier) and their encoding:
        # off the event loop, on a small pool, one lane per connection (read_lanes: its reads
        # in order, on one thread at a time; a slow read holds its own connection only)
        self.reader = ReadLanes(cfg.kafka_read_threads)
        self.fetch_ahead_served = 0      # Fetches answered by an answer prepared ahead
        self.fetch_ahead_dropped = 0     # prepared answers the next Fetch did not match

    # ------------------------------------------------------------------ arrivals

    def start(self) -> None:
        self.arrivals.start()

    def close(self) -> None:
        self.arrivals.close()
        self.reader.shutdown()

    @property
    def dispatched(self) -> int:
        """The commit-log offset the store has dispatched up to (fetches see up to there)."""
        return self.arrivals.dispatched

    def notify(self) -> None:
        """Wake every Fetch waiting for new messages (or the stop)."""
        self.arrivals.notify()

    def arrival(self) -> asyncio.Event:
        """The event the next dispatch sets; take it before looking at the store, then
        ``wait_on`` it or ``release`` it."""
        return self.arrivals.take()

    def release(self) -> None:
        """An ``arrival()`` taken and not waited on after all."""
        self.arrivals.release()

    async def wait_on(self, event: asyncio.Event, timeout: float) -> None:
        await self.arrivals.wait(event, timeout)

    async def until_dispatched(self, target: int) -> None:
        """Until the store dispatched every record before commit-log offset ``target`` (a
        produce is answered only when a fetch can see it: read-your-writes, as in Kafka)."""
        while self.dispatched < target and not self.stopping:
            event = self.arrival()
            if self.dispatched >= target:
                self.release()
                return
            await self.wait_on(event, 1.0)

    def count(self, api_name: str, code: str) -> None:
        if self.metrics is not None:
            m = self.metrics
            m.child(m.requests, f"kafka.{api_name}", code).inc()


class KafkaListener:
    """``--kafka HOST:PORT`` of ``strata serve``."""

    name = "kafka"

    def __init__(self, cfg: "ServeConfig", node: "Node") -> None:
        self.cfg = cfg
        self.broker = KafkaBroker(cfg, node)
        self.ssl = node.tls_context
        self.port = cfg.kafka[1]
        self._sock: socket.socket | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()
        self.fsyncs = 0              # the store's sync-flush fsyncs, counted at stop
        api.load_handlers()
        _trace_to_file(os.environ.get("STRATA_KAFKA_TRACE"))

    def bind(self) -> int:
        host, port = self.cfg.kafka
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            family, kind, proto, _name, addr = infos[0]
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(addr)
                sock.listen(512)
            except BaseException:
                sock.close()
                raise
        except OSError as exc:
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise OSError(f"cannot listen on {shown} (--kafka): "
                          f"{exc.strerror or exc}") from None
        self._sock = sock
        self.port = sock.getsockname()[1]
        self.broker.port = self.port
        return self.port

    async def start(self) -> None:
        from strata.broker.kafka.idempotence import sequences
        # the producer table is loaded and the log after its snapshot replayed (a store.scan,
        # which can reach S3 through the tier) before this listener serves, on a thread: the
        # loop may already serve the other listener's clients and the store's own work
        await asyncio.get_running_loop().run_in_executor(None, sequences, self.broker)
        self.broker.start()
        # the compiled record-batch codec and Fetch loops load off the loop meanwhile (a
        # request that arrives first waits for them inside numba, as it would have loaded
        # them itself)
        from strata.broker.kafka.fetch_read import warm
        self._warm = asyncio.get_running_loop().run_in_executor(
            None, quietly, warm, "the Kafka listener's compiled codec and Fetch loops")
        self._server = await asyncio.start_server(self._accept, sock=self._sock,
                                                  ssl=self.ssl, limit=1 << 20)

    def begin_stop(self) -> None:
        """Accept no connection and read no request more; requests read are answered."""
        self.broker.stopping = self.broker.arrivals.stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.broker.live):
            if conn.reader is not None:
                conn.reader.cancel()
        self.broker.notify()

    async def stop(self) -> None:
        if self._conns:
            _done, pending = await asyncio.wait(set(self._conns), timeout=STOP_GRACE_S)
            for t in pending:
                t.cancel()
        groups = self.broker.state.get("groups")
        if groups is not None:       # memberships and commits still being written land first
            await groups.close()
        seqs = self.broker.state.get("sequences")
        if seqs is not None:
            seqs.close()
            seqs.snapshot()          # a clean stop: the next start replays nothing
        self.fsyncs = self.broker.store.fsyncs     # for summary(), after the store closed
        self.broker.close()

    def summary(self) -> str:
        b = self.broker
        return (f"kafka: {b.requests} requests on {b.connections} connections, "
                f"{b.put_messages} messages in {b.puts} direct puts, "
                f"{self.fsyncs} fsyncs, {b.fetch_ahead_served} fetches answered ahead "
                f"({b.fetch_ahead_dropped} prepared answers dropped)")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        self._conns.add(task)
        self.broker.connections += 1
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = writer.get_extra_info("peername")
            name = f"{peer[0]}:{peer[1]}" if peer else "?"
            conn = KafkaConnection(name)
            self.broker.live.add(conn)
            trace.debug("%s connected", name)
            try:
                await serve_connection(self.broker, conn, reader, writer)
            finally:
                self.broker.live.discard(conn)
                trace.debug("%s closed", name)
        finally:
            self._conns.discard(task)


def _trace_to_file(path: str | None) -> None:
    """``STRATA_KAFKA_TRACE=FILE``: the trace logger at DEBUG, into FILE (appended)."""
    if not path or trace.handlers:
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(message)s", "%H:%M:%S"))
    trace.addHandler(handler)
    trace.setLevel(logging.DEBUG)
    trace.propagate = False


async def _read_frames(broker: KafkaBroker, conn: KafkaConnection,
                       reader: asyncio.StreamReader, queue: asyncio.Queue,
                       writer: asyncio.StreamWriter) -> None:
    handlers = api.HANDLERS
    while not broker.stopping:
        try:
            head = await reader.readexactly(4)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        (size,) = _SIZE.unpack(head)
        if not 0 < size <= MAX_FRAME:
            log.warning("kafka %s: request size %d outside 1..%d; closing", conn.peer, size,
                        MAX_FRAME)
            return
        try:
            frame = memoryview(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        try:
            header = api.parse_header(frame)
        except api.BadRequestError as exc:
            log.warning("kafka %s: %s; closing", conn.peer, exc)
            return
        reg = handlers.get(header.api_key)
        if reg is None or not reg.min_version <= header.api_version <= reg.max_version:
            if header.api_key == 18:    # KIP-511: answer with the ranges, in v0's format
                await queue.put((None, _unsupported_versions(header)))
                continue
            log.warning("kafka %s: api %d v%d is not supported (see ApiVersions); closing",
                        conn.peer, header.api_key, header.api_version)
            return
        try:
            request = api.decode_body(reg, header, frame)
        except api.BadRequestError as exc:
            log.warning("kafka %s: %s; closing", conn.peer, exc)
            return
        conn.requests += 1
        broker.requests += 1
        if header.api_key in TRACED and trace.isEnabledFor(logging.DEBUG):
            trace.debug("%s <- #%d %s v%d %r", conn.peer, header.correlation_id,
                        reg.request.name, header.api_version, request)
        ctx = api.RequestContext(header.api_key, header.api_version, header.correlation_id,
                                 header.client_id, conn.peer, conn.principal, conn, broker)
        # authorize.call: the handler, as --acl allows (the gate before SASL, topic rights)
        task = asyncio.ensure_future(authorize.call(ctx, reg, request))
        await queue.put((ctx, task))


def _unsupported_versions(header: api.RequestHeader) -> bytes:
    from strata.broker.kafka.versions import version_ranges
    resp = api.response_class(18)[0](error_code=ke.UNSUPPORTED_VERSION,
                                      api_keys=version_ranges())
    return api.encode_response(resp, 0, header.correlation_id)


async def serve_connection(broker: KafkaBroker, conn: KafkaConnection,
                           reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read requests, run their handlers, write their responses in order."""
    queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
    read = conn.reader = asyncio.ensure_future(_read_frames(broker, conn, reader, queue,
                                                            writer))
    done = object()
    read.add_done_callback(lambda _t: queue.put_nowait((None, done))
                           if not queue.full() else None)
    try:
        while True:
            if read.done() and queue.empty():
                break
            ctx, item = await queue.get()
            if item is done:
                if queue.empty():
                    break
                continue
            if ctx is None:                    # bytes already encoded
                writer.write(item)
                continue
            name = api.HANDLERS[ctx.api_key].request.name.removesuffix("Request")
            try:
                response = await item
            except api.BadRequestError as exc:     # e.g. a request before SASL with --acl
                log.warning("kafka %s (%s): %s; closing", conn.peer, ctx.client_id, exc)
                broker.count(name, "REFUSED")
                break
            except Exception:   # noqa: BLE001 - a handler's bug closes this connection only
                log.exception("kafka %s: %s v%d failed; closing the connection", conn.peer,
                              name, ctx.api_version)
                broker.count(name, "ERROR")
                break
            broker.count(name, "OK")
            if ctx.api_key in TRACED and trace.isEnabledFor(logging.DEBUG):
                trace.debug("%s -> #%d %r", conn.peer, ctx.correlation_id, response)
            if response is not None:
                writer.write(api.encode_response(response, ctx.api_version,
                                                 ctx.correlation_id))
                after = getattr(response, "after_sent", None)
                if after is not None:        # a Fetch prepares its next answer, once this
                    response.after_sent = None       # one is (nearly all) in the socket
                    await writer.drain()
                    after()
            if conn.closing:                   # e.g. a failed SASL authentication
                await writer.drain()
                break
            if writer.transport.get_write_buffer_size() > (1 << 20):
                await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        read.cancel()
        while not queue.empty():
            _ctx, item = queue.get_nowait()
            if isinstance(item, asyncio.Future):
                item.cancel()
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - the peer may be gone already
            pass
