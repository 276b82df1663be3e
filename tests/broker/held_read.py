"""`strata serve` whose store reads of the topic ``held-read`` wait until the test lets them
go (SIGUSR1): a read as slow as one that goes to S3 through the tier, on every run. The first
held read says so by writing a line to the named pipe ``$STRATA_TEST_HELD_FIFO`` if one is
named (the test reads it: an event, not a sleep). Test support only: run as ``python held_read.py serve DIR
...`` (the arguments of ``strata``).

With ``$STRATA_TEST_HOLD_POPS=N`` the first read of each of N pops is held instead, each
until its own SIGUSR1, and each held read and each give-back of a late pop
(``ConsumerGroups.give_back``) writes a line to the pipe ("held", "given back K"): the next
pop's read is held only once the previous pop was given back, so every held pop is one the
test can count."""

import os
import signal
import sys
import threading

from strata.broker import group_state
from strata.cli.main import main
from strata.store import message_store

TOPIC = "held-read"
HOLD_S = 60.0                       # never hold forever, whatever the test does
_go = threading.Event()
_told = threading.Event()
_get = message_store.MessageStore.get
_give_back = group_state.ConsumerGroups.give_back
_pops = {"left": int(os.environ.get("STRATA_TEST_HOLD_POPS", "0")), "armed": True}


def _tell(line: str) -> None:
    fifo = os.environ.get("STRATA_TEST_HELD_FIFO")
    if fifo:
        with open(fifo, "w") as f:
            f.write(line + "\n")


def held_get(self, topic, *args, **kwargs):
    if topic == TOPIC and _pops["left"] and _pops["armed"]:     # each pop in turn
        _pops["left"] -= 1
        _pops["armed"] = False
        _tell("held")
        _go.wait(HOLD_S)
        _go.clear()
    elif topic == TOPIC and not _pops["left"] and not _go.is_set() and \
            "STRATA_TEST_HOLD_POPS" not in os.environ:          # the first reads, once
        if not _told.is_set():
            _told.set()
            _tell("a read is held")
        _go.wait(HOLD_S)
    return _get(self, topic, *args, **kwargs)


def counted_give_back(self, receipts, now_ms):
    n = _give_back(self, receipts, now_ms)
    if "STRATA_TEST_HOLD_POPS" in os.environ:
        _tell(f"given back {n}")
        _pops["armed"] = True
    return n


message_store.MessageStore.get = held_get
group_state.ConsumerGroups.give_back = counted_give_back
signal.signal(signal.SIGUSR1, lambda *_a: _go.set())

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
