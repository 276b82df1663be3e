"""Running the console: alone over a store directory (``strata console DIR --http``), or
on the broker's event loop beside ``strata serve`` (``start_embedded``)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Callable

from aiohttp import web

import strata
from strata.console.actions import Actions
from strata.console.app import make_app, say as _say
from strata.console.groups_view import BROKER_DIR, GroupSource
from strata.console.views import ConsoleData
from strata.errors import StoreLockedError
from strata.store.message_store import MessageStore, writer_alive


async def _watch_parent(stop: asyncio.Event) -> None:
    """Set ``stop`` when the parent process exits: its pidfd turns readable then (Linux
    5.3+); where there is none, a look at the parent's pid every half second."""
    parent = os.getppid()
    try:
        fd = os.pidfd_open(parent)
    except (AttributeError, OSError):
        fd = None
    if fd is not None and os.getppid() == parent:     # (not gone before the pidfd was made)
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()
        loop.add_reader(fd, gone.set)
        try:
            await gone.wait()
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    else:
        if fd is not None:
            os.close(fd)
        while os.getppid() == parent:
            await asyncio.sleep(0.5)
    _say("parent process exited; stopping")
    stop.set()


def open_for_console(directory: Path) -> MessageStore:
    """Read-only beside a running writer, else as the writer (as issue 25 fixes it)."""
    if writer_alive(directory):
        return strata.open(directory, readonly=True)
    try:
        return strata.open(directory, create=False)
    except StoreLockedError:        # a writer started meanwhile
        return strata.open(directory, readonly=True)


class BrokerKafkaGroups:
    """Beside a running broker: its Kafka groups' live state (members), asked of its admin
    API (strata.broker.admin) on the console's thread; empty when no broker answers, and no
    longer asked once it refused (under --acl this console holds no administrator's keys)."""

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.refused = False

    def __call__(self) -> dict:
        from strata.broker.admin import AdminApiError, call, find_admin
        endpoint = None if self.refused else find_admin(self.store_dir)
        if endpoint is None:
            return {}
        try:
            return call(endpoint, "/groups/kafka", {})
        except AdminApiError as exc:
            self.refused = "refused" in str(exc)
            return {}


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port (0: a free port); returns the runner and the bound port."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(f"cannot listen on {host}:{port} (--http): {exc.strerror or exc}") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, bound


async def start_embedded(store: MessageStore, groups, host: str, port: int,
                         listeners: Callable[[], dict] | None = None, acl=None,
                         kafka_live: Callable[[], dict] | None = None, worker=None,
                         ) -> tuple[web.AppRunner, int]:
    """The console on the running loop of ``strata serve``, over its store and live groups
    (``acl``: the broker's ``AccessList``, whose accounts log in to the console;
    ``kafka_live``: the Kafka listener's groups, state and members; ``worker``: the
    broker's GroupWorker, which changes ``groups``: the console copies them there and
    resets offsets there)."""
    data = ConsoleData(store, GroupSource(store.path, live=groups, kafka_live=kafka_live,
                                          worker=worker), listeners)
    app = make_app(data, acl=acl, actions=Actions(data))
    app.on_cleanup.append(lambda _app: _shutdown(data))
    return await start_site(app, host, port)


async def _shutdown(data: ConsoleData) -> None:
    data.executor.shutdown(wait=True)


async def serve_console(directory: Path, host: str, port: int,
                        acl_file: Path | None = None, exit_with_parent: bool = False) -> None:
    """Run until SIGTERM/SIGINT; the store is opened and closed off the event loop."""
    loop = asyncio.get_running_loop()
    acl = None
    if acl_file is not None:        # checked before the store opens
        from strata.broker.acl import load_acl
        acl = load_acl(acl_file)
    store = await loop.run_in_executor(None, open_for_console, directory)
    kafka_live = BrokerKafkaGroups(store.path) if store.readonly else None
    data = ConsoleData(store, GroupSource(store.path, kafka_live=kafka_live))
    opened: list = []

    def open_groups():
        from strata.broker.group_state import ConsumerGroups
        opened.append(ConsumerGroups(store.path / BROKER_DIR))
        return opened[-1]

    try:
        app = make_app(data, acl=acl, actions=Actions(data, open_groups))
        runner, bound = await start_site(app, host, port)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        watcher = loop.create_task(_watch_parent(stop)) if exit_with_parent else None
        _say(f"listening on http://{host}:{bound}/ (store {store.path}, "
             f"{'read-only beside a running writer' if store.readonly else 'opened as the writer'}"
             f"{f', acl {acl_file} ({len(acl.accounts)} accounts)' if acl else ''})")
        await stop.wait()
        if watcher is not None:
            watcher.cancel()
        _say("stopping")
        await runner.cleanup()
    finally:
        data.executor.shutdown(wait=True)
        for g in opened:
            await loop.run_in_executor(None, g.close)
        await loop.run_in_executor(None, store.close)
    _say("stopped")
