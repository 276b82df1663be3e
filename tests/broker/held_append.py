"""`strata serve` whose first append to the held-message journal (``broker/held.journal``:
a delay message's HOLD) waits until the test lets it go (SIGUSR1): a write as slow as one a
busy disk holds up, on every run. It says so by writing a line to the named pipe
``$STRATA_TEST_HELD_FIFO`` (the test reads it: an event, not a sleep). Test support only:
run as ``python held_append.py serve DIR ...`` (the arguments of ``strata``)."""

import os
import signal
import sys
import threading

from strata.broker import held_journal as hj
from strata.broker.journal import Journal
from strata.cli.main import main

HOLD_S = 60.0                       # never hold forever, whatever the test does
_go = threading.Event()
_held = threading.Event()
_append = Journal.append


def held_append(self, data):
    if self.magic == hj.MAGIC and not _held.is_set():
        _held.set()
        with open(os.environ["STRATA_TEST_HELD_FIFO"], "w") as f:
            f.write("an append is held\n")
        _go.wait(HOLD_S)
    return _append(self, data)


Journal.append = held_append
signal.signal(signal.SIGUSR1, lambda *_a: _go.set())

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
