"""``strata serve``: one process, one store, one or two listeners on it (RocketMQ 5 gRPC with
``--listen``, the Kafka wire protocol with ``--kafka``).

This is the top of the broker: it opens the store and the protocol-neutral core's state
(consumer groups, held messages, the shared send batcher, metrics, ACL, TLS) and hands them
to each listener; it is the one module outside the protocol packages that imports them. It
prints one start line naming every listener, and on SIGTERM/SIGINT stops them (in-flight
requests finish, pending sends are stored) before it closes the group journal and the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import uvloop

import strata
from strata.broker.acl import DEFAULT_WINDOW_S, AccessList, load_acl
from strata.broker.allocator import keep_freed_memory
from strata.broker.group_state import ConsumerGroups
from strata.broker.group_worker import GroupWorker
from strata.broker.warm import warm_quietly
from strata.broker.held import HeldMessages
from strata.broker.kafka import defaults as kafka_defaults
from strata.broker.metrics import BrokerMetrics
from strata.broker.receipt import ReceiptSigner, load_or_create_secret
from strata.broker.send import SendBatcher
from strata.files.layout import BROKER_DIR
from strata.store.config import StoreConfig
from strata.store.message_store import MessageStore
from strata.words import count

log = logging.getLogger(__name__)

SECRET_NAME = "receipt.key"
JOURNAL_SYNC_S = 1.0


@dataclass
class ServeConfig:
    directory: Path
    host: str | None                           # --listen (gRPC); None: no gRPC listener
    port: int
    flush: str = "async"
    auto_create: bool = True
    exit_with_parent: bool = False
    max_delivery_attempts: int = 16
    store_options: dict = field(default_factory=dict)
    acl: Path | None = None                    # plain_acl.yml (strata.broker.acl)
    acl_window_s: int = DEFAULT_WINDOW_S       # how old or new a signature may be
    tls_cert: Path | None = None               # PEM certificate chain and key: serve TLS
    tls_key: Path | None = None
    metrics: tuple[str, int] | None = None     # serve Prometheus metrics here
    transaction_check_interval_s: float = 60.0    # first check of a half message, then as often
    transaction_max_checks: int = 15              # checks before it is dropped
    gather_ms: float = 2.0                     # puts start at most once per this interval
    renew_slice_s: float = 60.0                # auto_renew: invisible time per renewal
    renew_max_s: float = 10800.0               # auto_renew: renewed for at most this long
    kafka: tuple[str, int] | None = None       # --kafka HOST:PORT: the Kafka listener
    # --kafka-initial-rebalance-delay-ms: a new Kafka group's first join waits this long
    kafka_initial_rebalance_delay_ms: int = kafka_defaults.INITIAL_REBALANCE_DELAY_MS
    # --kafka-read-threads: the Kafka listener's Fetch read threads (broker/kafka/read_lanes)
    kafka_read_threads: int = kafka_defaults.READ_THREADS
    http: tuple[str, int] | None = None        # --http HOST:PORT: the web console (strata.console)

    def __post_init__(self) -> None:
        # the CLI checks these too; a config built in code gets the same clear error
        kafka_defaults.check_range("--kafka-initial-rebalance-delay-ms",
                                   self.kafka_initial_rebalance_delay_ms, 0,
                                   kafka_defaults.MAX_INITIAL_REBALANCE_DELAY_MS)
        kafka_defaults.check_range("--kafka-read-threads", self.kafka_read_threads, 1,
                                   kafka_defaults.MAX_READ_THREADS)


@dataclass
class Node:
    """What every listener of the process shares."""

    store: MessageStore
    groups: ConsumerGroups
    held: HeldMessages
    signer: ReceiptSigner
    batcher: SendBatcher
    metrics: BrokerMetrics | None
    acl: AccessList | None
    tls_pems: tuple[bytes, bytes] | None       # (certificate PEM, key PEM)
    tls_context: object | None                 # ssl.SSLContext for listeners doing TLS
    # the thread every change to the groups' deliveries runs on (off the event loop)
    worker: GroupWorker = field(default_factory=GroupWorker)


class Listener(Protocol):
    name: str
    port: int

    def bind(self) -> int: ...
    async def start(self) -> None: ...
    def begin_stop(self) -> None: ...
    async def stop(self) -> None: ...
    def summary(self) -> str: ...


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT with a port 0-65535")
    return host.strip("[]"), int(port)


def _say(line: str) -> None:
    print(f"strata serve: {line}", file=sys.stderr, flush=True)


def _open(cfg: ServeConfig) -> Node:
    # checked before the store opens: a bad file changes nothing on disk
    acl = load_acl(cfg.acl, window_s=cfg.acl_window_s) if cfg.acl is not None else None
    pems = context = None
    if cfg.tls_cert is not None:
        from strata.broker.tls import check_pair, server_context
        pems = check_pair(cfg.tls_cert, cfg.tls_key)
        context = server_context(cfg.tls_cert, cfg.tls_key)
    store = strata.open(cfg.directory, StoreConfig(flush=cfg.flush, **cfg.store_options))
    try:
        broker_dir = store.path / BROKER_DIR
        signer = ReceiptSigner(load_or_create_secret(broker_dir / SECRET_NAME))
        groups = ConsumerGroups(broker_dir)
        try:
            held = HeldMessages(broker_dir, store, None, sync=cfg.flush == "sync")
        except BaseException:
            groups.close()
            raise
    except BaseException:
        store.close()
        raise
    metrics = BrokerMetrics(store, groups) if cfg.metrics is not None else None
    return Node(store, groups, held, signer, SendBatcher(store, cfg.gather_ms / 1000),
                metrics, acl, pems, context)


def _listeners(cfg: ServeConfig, node: Node) -> list[Listener]:
    out: list[Listener] = []
    if cfg.host is not None:
        from strata.broker.rocketmq.server import GrpcListener
        out.append(GrpcListener(cfg, node))
    if cfg.kafka is not None:
        from strata.broker.kafka.server import KafkaListener
        out.append(KafkaListener(cfg, node))
    return out


def _close(node: Node) -> None:
    node.worker.shutdown()
    node.held.close()
    node.groups.close()
    node.store.close()


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_free(cfg: ServeConfig) -> None:
    """Refuse an address that is in use before the store opens, so a refused start creates
    and changes no file. The probe binds without SO_REUSEPORT: a port another server holds
    (with or without that option) is refused. The listeners bind for real after the open
    (grpc with SO_REUSEPORT off), so a port taken in between is refused there too."""
    wanted = [(cfg.host, cfg.port, "--listen")] if cfg.host is not None else []
    wanted += [(*cfg.kafka, "--kafka")] if cfg.kafka is not None else []
    wanted += [(*cfg.http, "--http")] if cfg.http is not None else []
    for host, port, option in wanted:
        if not port:
            continue                                    # port 0: any free port
        try:
            family, kind, proto, _name, addr = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(addr)
        except OSError as exc:
            raise OSError(f"cannot listen on {_shown(host, port)} ({option}): "
                          f"{exc.strerror or exc} (is another server using it?)") from None


async def _start_console(cfg: ServeConfig, node: Node, listeners: list[Listener],
                         metrics_port: int | None):
    """The web console on this loop (``--http``); returns (runner, port)."""
    from strata.console.server import start_embedded
    grpc = next((lst for lst in listeners if lst.name == "grpc"), None)
    port_box: list[int] = []

    def info() -> dict:
        out = {_label(lst): _address(cfg, lst) for lst in listeners}
        out["Prometheus metrics"] = (f"{cfg.metrics[0]}:{metrics_port}"
                                     if metrics_port is not None else "off")
        out["web console"] = f"{cfg.http[0]}:{port_box[0]}" if port_box else "starting"
        if grpc is not None:
            out["connected clients"] = len(grpc.service.clients)
        return out

    try:
        runner, port = await start_embedded(node.store, node.groups, *cfg.http, info,
                                            acl=node.acl,
                                            kafka_live=lambda: kafka_group_states(listeners),
                                            worker=node.worker)
    except OSError as exc:
        raise OSError(f"cannot listen on {_shown(*cfg.http)} (--http): "
                      f"{exc.strerror or exc}") from None
    port_box.append(port)
    return runner, port


def kafka_group_states(listeners: list) -> dict[str, dict]:
    """Kafka groups the coordinator knows (members now or before): group id -> {state,
    protocol_type, protocol (the assignor), members: [{member_id, instance_id, client_id,
    client_host}]}; empty without a Kafka listener or before its first group request."""
    kafka = next((lst for lst in listeners if lst.name == "kafka"), None)
    svc = kafka.broker.state.get("groups") if kafka is not None else None
    if svc is None:
        return {}
    for _attempt in range(3):      # read from the console's thread: the loop may change it
        try:
            return _kafka_groups(svc.coord)
        except RuntimeError:        # a dict changed size while it was read: read again
            continue
    return {}


def _kafka_groups(coord) -> dict[str, dict]:
    out = {}
    for gid, ptype, state in coord.listing():
        view = coord.describe(gid)
        out[gid] = {"state": state.value, "protocol_type": ptype,
                    "protocol": view.protocol_name,
                    "members": [{"member_id": m.member_id, "instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host}
                                for m in view.members]}
    return out


async def _start_admin(node: Node, listeners: list[Listener]):
    """The admin API (strata.broker.admin) that `strata topics create` and friends use while
    this process holds the store; its endpoint goes to ``<store>/broker.admin``."""
    from strata.broker.admin import AdminServer, AdminTarget
    admin = AdminServer(AdminTarget(node.store, node.groups,
                                    lambda: kafka_group_states(listeners), node.worker),
                        acl=node.acl)
    await admin.start()
    return admin


def _label(lst: Listener) -> str:
    return {"grpc": "RocketMQ gRPC", "kafka": "Kafka"}.get(lst.name, lst.name)


async def serve(cfg: ServeConfig) -> None:
    """Run until SIGTERM/SIGINT (or the parent's death with ``exit_with_parent``)."""
    parent = os.getppid()
    _check_free(cfg)
    node = _open(cfg)
    try:
        listeners = _listeners(cfg, node)
        metrics_port = None
        for lst in listeners:
            lst.bind()
        if node.metrics is not None:
            try:
                metrics_port = node.metrics.serve(*cfg.metrics)
            except OSError as exc:
                raise OSError(f"cannot listen on {cfg.metrics[0]}:{cfg.metrics[1]} "
                              f"(--metrics): {exc}") from None
            node.batcher.on_stored = node.metrics.stored
    except BaseException:
        _close(node)
        raise
    # as the store held them at open: once the listeners run, the timer may move due ones
    held_at_open = len(node.held.entries)
    node.batcher.start()
    # the store's compiled kernels load (or, with a cold cache, compile) off the loop now,
    # not inside the first clients' calls (strata.broker.warm); a daemon thread: a stop
    # never waits for a compile that no client needs any more
    global _warming
    _warming = threading.Thread(target=warm_quietly, name="strata-warm", daemon=True)
    _warming.start()
    for lst in listeners:
        await lst.start()
    admin = console = http_port = None
    try:
        admin = await _start_admin(node, listeners)
        if cfg.http is not None:
            console, http_port = await _start_console(cfg, node, listeners, metrics_port)
    except BaseException:
        if admin is not None:
            await admin.close()
        for lst in listeners:         # they run: stop them as a clean stop does
            lst.begin_stop()
        for lst in listeners:
            await lst.stop()
        await node.batcher.close()
        if node.metrics is not None:
            node.metrics.close()
        _close(node)
        raise
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def watch_parent() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(0.5)
        _say("parent process exited; stopping")
        stop.set()

    groups = node.groups

    async def sync_journal() -> None:
        while True:
            await asyncio.sleep(JOURNAL_SYNC_S)
            try:
                await loop.run_in_executor(None, groups.journal.sync)
            except OSError:     # say so, and keep syncing (an ended task would sync no more)
                log.exception("fsync of %s failed", groups.journal.path)

    tasks = [loop.create_task(sync_journal())]
    if cfg.exit_with_parent:
        tasks.append(loop.create_task(watch_parent()))
    store, acl = node.store, node.acl
    extras = "".join([", tls" if node.tls_pems is not None else "",
                      f", acl {cfg.acl} ({len(acl.accounts)} accounts)" if acl else "",
                      f", metrics http://{cfg.metrics[0]}:{metrics_port}/metrics"
                      if node.metrics is not None else "",
                      f", console http://{cfg.http[0]}:{http_port}/" if console else "",
                      *(f", kafka read threads {lst.broker.reader.threads}"
                        for lst in listeners if lst.name == "kafka")])
    where = ", ".join(_address(cfg, lst) for lst in listeners)
    report = store.recovery_report      # a mistyped DIR makes a new, empty store: say so
    new = ", a NEW store: there was none" if report is not None and report.new_store else ""
    _say(f"listening on {where} (store {store.path}{new}, flush {cfg.flush}, "
         f"auto-create {'on' if cfg.auto_create else 'off'}, "
         f"{count(held_at_open, 'message')} held{extras})")
    try:
        await stop.wait()
    finally:
        _say("stopping: finishing in-flight calls")
        await admin.close()         # first: an admin command now finds no stale endpoint
        for lst in listeners:
            lst.begin_stop()
        for lst in listeners:
            await lst.stop()
        if console is not None:
            await console.cleanup()
        await node.batcher.close()
        if node.metrics is not None:
            node.metrics.close()
        for t in tasks:
            t.cancel()
        _close(node)
        summaries = "; ".join(s for s in (lst.summary() for lst in listeners) if s)
        _say(f"stopped cleanly ({count(node.batcher.messages, 'message')} stored in "
             f"{count(node.batcher.batches, 'batch')}; {summaries}; "
             f"{count(len(node.held.entries), 'message')} still held)")


def _address(cfg: ServeConfig, lst: Listener) -> str:
    """``host:port`` of the gRPC listener (first, as before --kafka existed), and
    ``host:port (kafka)`` of the Kafka one."""
    if lst.name == "grpc":
        return f"{cfg.host}:{lst.port}"
    return f"{cfg.kafka[0]}:{lst.port} ({lst.name})"


# the warm-up thread of this process's broker (``serve``), if one started
_warming: threading.Thread | None = None


def run(cfg: ServeConfig) -> None:
    # freed buffers stay in the process for the next request (strata.broker.allocator)
    keep_freed_memory()
    # uvloop: grpc.aio's per-call work is most of the broker's CPU, and on uvloop's event
    # loop a one-message send costs about a sixth less of it than on asyncio's (bench/README.md)
    uvloop.run(serve(cfg))
    if _warming is not None and _warming.is_alive():
        # Stopped cleanly (the store is closed) while the warm-up still runs kernels on its
        # throwaway store. Letting the interpreter finalize under it aborted the process now
        # and then ("terminate called without an active exception": C++ destructors at exit
        # while that thread was inside numba's or pyarrow's code), so end here instead.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
