"""`strata serve` whose store reads of the topic ``held-read`` wait until the test lets them
go (SIGUSR1): a read as slow as one that goes to S3 through the tier, on every run. The first
held read says so by writing a line to the named pipe ``$STRATA_TEST_HELD_FIFO`` if one is
named (the test reads it: an event, not a sleep). Test support only: run as ``python held_read.py serve DIR
...`` (the arguments of ``strata``)."""

import os
import signal
import sys
import threading

from strata.cli.main import main
from strata.store import message_store

TOPIC = "held-read"
HOLD_S = 60.0                       # never hold forever, whatever the test does
_go = threading.Event()
_told = threading.Event()
_get = message_store.MessageStore.get


def held_get(self, topic, *args, **kwargs):
    if topic == TOPIC and not _go.is_set():
        fifo = os.environ.get("STRATA_TEST_HELD_FIFO")
        if fifo and not _told.is_set():
            _told.set()
            with open(fifo, "w") as f:
                f.write("a read is held\n")
        _go.wait(HOLD_S)
    return _get(self, topic, *args, **kwargs)


message_store.MessageStore.get = held_get
signal.signal(signal.SIGUSR1, lambda *_a: _go.set())

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
