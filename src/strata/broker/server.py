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

from strata.broker.group_state import ConsumerGroups
from strata.broker.protocol import svc_grpc
from strata.broker.receipt import ReceiptSigner, load_or_create_secret
from strata.broker.service import BrokerOptions, MessagingService
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
    gather_ms: float = 2.0


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
    store = MessageStore(cfg.directory, StoreConfig(flush=cfg.flush, **cfg.store_options))
    try:
        broker_dir = store.path / BROKER_DIR
        signer = ReceiptSigner(load_or_create_secret(broker_dir / SECRET_NAME))
        groups = ConsumerGroups(broker_dir)
    except BaseException:
        store.close()
        raise
    limit = store.config.max_body_size + (1 << 20)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit)])
    service = MessagingService(store, groups, signer, (cfg.host, cfg.port),
                               BrokerOptions(auto_create=cfg.auto_create,
                                             max_delivery_attempts=cfg.max_delivery_attempts,
                                             gather_s=cfg.gather_ms / 1000))
    svc_grpc.add_MessagingServiceServicer_to_server(service, server)
    address = f"[{cfg.host}]:{cfg.port}" if ":" in cfg.host else f"{cfg.host}:{cfg.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        groups.close()
        store.close()
        raise OSError(f"cannot listen on {address}: {exc}") from None
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
            await loop.run_in_executor(None, groups.journal.sync)

    tasks = [loop.create_task(sync_journal())]
    if cfg.exit_with_parent:
        tasks.append(loop.create_task(watch_parent()))
    _say(f"listening on {cfg.host}:{port} (store {store.path}, flush {cfg.flush}, "
         f"auto-create {'on' if cfg.auto_create else 'off'})")
    try:
        await stop.wait()
    finally:
        _say("stopping: finishing in-flight calls")
        service.stopping = True
        service.wake_polls()
        await server.stop(STOP_GRACE_S)
        await service.close()
        for t in tasks:
            t.cancel()
        groups.close()
        store.close()
        _say(f"stopped cleanly ({service.batcher.messages} messages stored in "
             f"{service.batcher.batches} batches)")


def run(cfg: ServeConfig) -> None:
    # uvloop: grpc.aio's per-call work is most of the broker's CPU, and on uvloop's event
    # loop a one-message send costs about a sixth less of it than on asyncio's (bench/README.md)
    uvloop.run(serve(cfg))
