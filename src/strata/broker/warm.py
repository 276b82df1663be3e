"""Loading the store's compiled kernels (numba) before the first client needs them.

numba keeps the machine code of the store's kernels in a cache on disk; where that cache is
cold (a fresh checkout or install, a kernel's source changed) the first call of each kernel
compiles it: measured on this 2-core machine, idle, 5.8 s for the dispatch of the first put
and 7.8 s for the first read. The first receive of a fresh broker paid the read's share
inside its own call — longer than the RocketMQ client's whole receive deadline (its request
timeout, 5 s, plus its long-polling time) — and, while the read ran on the event loop, every
other client's heartbeat timed out with it (the CI flake of test_admin_cli's
``test_topics_and_reset_through_the_running_broker``). ``strata serve`` runs ``warm_store``
on a thread as it starts: a throwaway store in a temporary directory takes the store steps of
``strata warm`` (``strata.warm.STORE_STEPS``: plain and rich puts, their dispatch, reads), so
every kernel those reach is compiled (or, with a warm cache, loaded, which the first put and
read would do anyway) before or while the first clients connect. It runs on a daemon
thread, so a broker stopped during a cold compile does not wait for it (``process.run``
then ends the process without finalizing the interpreter under it); its temporary
directory (``strata-warm-<pid>-*``, ``strata.warm.warm_directory``) may then stay behind,
and the next warm-up removes it once its process is gone.
"""

from __future__ import annotations

import logging
from typing import Callable

from strata.warm import exercise_store, warm_directory

log = logging.getLogger(__name__)


def warm_store() -> None:
    """Run each store kernel a broker's clients reach once, on a throwaway store."""
    with warm_directory() as d:
        exercise_store(d)


def quietly(load: Callable[[], object], what: str) -> None:
    """``load()``, logging (not raising) what went wrong: loading ahead is only a head start
    (the clients' calls load the kernels anyway)."""
    try:
        load()
    except Exception:  # noqa: BLE001
        log.warning("loading %s ahead failed", what, exc_info=True)


def warm_quietly() -> None:
    """``warm_store``, quietly."""
    quietly(warm_store, "the store's compiled kernels")
