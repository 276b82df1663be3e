"""``strata serve``: the gRPC server on a store, its start line, and a clean stop on SIGTERM
(in-flight calls finish, pending sends are stored, the group journal and the store are
closed cleanly)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import uvloop

from strata.broker.acl import DEFAULT_WINDOW_S, load_acl
from strata.broker.group_state import ConsumerGroups
from strata.broker.held import HeldMessages
from strata.broker.rocketmq.intercept import layered
from strata.broker.rocketmq.protocol import svc_grpc
from strata.broker.receipt import ReceiptSigner, load_or_create_secret
from strata.broker.rocketmq.service import BrokerOptions, MessagingService
from strata.store.config import StoreConfig
from strata.store.message_store import MessageStore

log = logging.getLogger(__name__)

BROKER_DIR = "broker"
SECRET_NAME = "receipt.key"
STOP_GRACE_S = 5.0
JOURNAL_SYNC_S = 1.0


@dataclass
class ServeConfig:
    directory: Path
    host: str
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


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT with a port 0-65535")
    return host.strip("[]"), int(port)


def _say(line: str) -> None:
    print(f"strata serve: {line}", file=sys.stderr, flush=True)


async def serve(cfg: ServeConfig) -> None:
    """Run until SIGTERM/SIGINT (or the parent's death with ``exit_with_parent``)."""
    parent = os.getppid()
    # checked before the store opens: a bad file changes nothing on disk
    acl = load_acl(cfg.acl, window_s=cfg.acl_window_s) if cfg.acl is not None else None
    creds = None
    if cfg.tls_cert is not None:
        from strata.broker.tls import check_pair
        cert_pem, key_pem = check_pair(cfg.tls_cert, cfg.tls_key)
        creds = grpc.ssl_server_credentials([(key_pem, cert_pem)])
    store = MessageStore(cfg.directory, StoreConfig(flush=cfg.flush, **cfg.store_options))
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
    limit = store.config.max_body_size + (1 << 20)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit)])
    service = MessagingService(store, groups, signer, (cfg.host, cfg.port),
                               BrokerOptions(auto_create=cfg.auto_create,
                                             max_delivery_attempts=cfg.max_delivery_attempts,
                                             transaction_check_interval_ms=int(
                                                 cfg.transaction_check_interval_s * 1000),
                                             transaction_max_checks=cfg.transaction_max_checks,
                                             gather_s=cfg.gather_ms / 1000,
                                             renew_slice_ms=int(cfg.renew_slice_s * 1000),
                                             renew_max_ms=int(cfg.renew_max_s * 1000)),
                               held)
    layers = []      # outermost first: metrics count what the ACL refuses too
    metrics = None
    if cfg.metrics is not None:
        from strata.broker.metrics import BrokerMetrics
        from strata.broker.rocketmq.metrics import RpcMetrics
        metrics = BrokerMetrics(store, groups)
        layers.append(RpcMetrics(metrics))
    if acl is not None:
        from strata.broker.rocketmq.authorize import AclLayer
        layers.append(AclLayer(acl))
    svc_grpc.add_MessagingServiceServicer_to_server(layered(service, layers), server)
    address = f"[{cfg.host}]:{cfg.port}" if ":" in cfg.host else f"{cfg.host}:{cfg.port}"
    listening = address
    try:
        port = (server.add_secure_port(address, creds) if creds is not None
                else server.add_insecure_port(address))
        if metrics is not None:
            listening = f"{cfg.metrics[0]}:{cfg.metrics[1]} (--metrics)"
            metrics_port = metrics.serve(*cfg.metrics)
            service.batcher.on_stored = metrics.stored
    except (RuntimeError, OSError) as exc:
        held.close()
        groups.close()
        store.close()
        raise OSError(f"cannot listen on {listening}: {exc}") from None
    service.endpoint = (cfg.host, port)
    service.start()
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def watch_parent() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(0.5)
        _say("parent process exited; stopping")
        stop.set()

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
    extras = "".join([", tls" if creds is not None else "",
                      f", acl {cfg.acl} ({len(acl.accounts)} accounts)" if acl else "",
                      f", metrics http://{cfg.metrics[0]}:{metrics_port}/metrics"
                      if metrics is not None else ""])
    _say(f"listening on {cfg.host}:{port} (store {store.path}, flush {cfg.flush}, "
         f"auto-create {'on' if cfg.auto_create else 'off'}, {len(held.entries)} messages "
         f"held{extras})")
    try:
        await stop.wait()
    finally:
        _say("stopping: finishing in-flight calls")
        service.stopping = True
        service.wake_polls()
        await server.stop(STOP_GRACE_S)
        await service.close()
        if metrics is not None:
            metrics.close()
        for t in tasks:
            t.cancel()
        held.close()
        groups.close()
        store.close()
        _say(f"stopped cleanly ({service.batcher.messages} messages stored in "
             f"{service.batcher.batches} batches; {service.timer.moved} delay messages moved "
             f"in {service.timer.batches} batches; transactions: "
             f"{service.transactions.committed} committed, "
             f"{service.transactions.rolled_back} rolled back, "
             f"{service.transactions.dropped} dropped, "
             f"{service.transactions.checks_sent} checks sent; "
             f"{service.renewed} invisible times renewed, {service.released} messages of "
             f"gone push consumers released; "
             f"{len(held.entries)} messages still held)")


def run(cfg: ServeConfig) -> None:
    # uvloop: grpc.aio's per-call work is most of the broker's CPU, and on uvloop's event
    # loop a one-message send costs about a sixth less of it than on asyncio's (bench/README.md)
    uvloop.run(serve(cfg))
