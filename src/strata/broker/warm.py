"""Loading the store's compiled kernels (numba) before the first client needs them.

numba keeps the machine code of the store's kernels in a cache on disk; where that cache is
cold (a fresh checkout or install, a kernel's source changed) the first call of each kernel
compiles it: measured on this 2-core machine, idle, 5.8 s for the dispatch of the first put
and 7.8 s for the first read. The first receive of a fresh broker paid the read's share
inside its own call — longer than the RocketMQ client's whole receive deadline (its request
timeout, 5 s, plus its long-polling time) — and, while the read ran on the event loop, every
other client's heartbeat timed out with it (the CI flake of test_admin_cli's
``test_topics_and_reset_through_the_running_broker``). ``strata serve`` runs ``warm_store``
on a thread as it starts: a throwaway store in a temporary directory takes one put, its
dispatch and a read (plain and by tag), so every kernel those reach is compiled (or, with a
warm cache, loaded, which the first put and read would do anyway) before or while the first
clients connect. It runs on a daemon thread, so a broker stopped during a cold compile does
not wait for it (its temporary directory may then stay behind, named ``strata-warm-*``).
"""

from __future__ import annotations

import logging
import tempfile
import threading

import strata
from strata.store.config import StoreConfig
from strata.store.message import Message

log = logging.getLogger(__name__)

DISPATCH_WAIT_S = 300.0       # a cold compile on a loaded machine; never wait forever
_SMALL = StoreConfig(segment_size=4 << 20, index_slots=4096, index_entries=16384,
                     prefault=False)


def warm_store() -> None:
    """Run each store kernel a broker's clients reach once, on a throwaway store."""
    with tempfile.TemporaryDirectory(prefix="strata-warm-") as d:
        store = strata.open(d, _SMALL)
        try:
            dispatched = threading.Event()
            store.dispatch_listeners.append(lambda _offset: dispatched.set())
            store.put_batch([Message("warm", b"w", tags="t", keys="k")])
            while store.dispatched_offset() < store.confirmed_offset():
                if not dispatched.wait(DISPATCH_WAIT_S):
                    return
                dispatched.clear()
            store.get("warm", 0, 0, 1)
            store.get("warm", 0, 0, 1, tags=frozenset({"t"}))
        finally:
            store.close()


def warm_quietly() -> None:
    """``warm_store``, logging (not raising) what went wrong: it is only a head start."""
    try:
        warm_store()
    except Exception:  # noqa: BLE001 - the clients' calls load the kernels anyway
        log.warning("loading the store's compiled kernels ahead failed", exc_info=True)
