"""`strata serve` whose store reads of the topic "held" wait, as a read through a slow tier
(S3) would, until the test lets them go. Test support only: run as
``python held_read.py ENTERED_FIFO RELEASE_FIFO serve DIR ...`` (then the arguments of
``strata``). The first read of "held" writes one byte to ENTERED_FIFO (the test, reading
it, knows a read is held), then waits to read one byte from RELEASE_FIFO; every read of
"held" after that passes at once. Named pipes: both sides wake on the bytes, no polling."""

import sys
import threading

from strata.cli.main import main
from strata.store.message_store import MessageStore

TOPIC = "held"
_get = MessageStore.get
_released = threading.Event()
_lock = threading.Lock()


def held_get(self, topic, *args, **kwargs):
    if topic == TOPIC and not _released.is_set():
        with _lock:
            if not _released.is_set():
                with open(ENTERED, "wb") as f:
                    f.write(b"1")
                with open(RELEASE, "rb") as f:
                    f.read(1)
                _released.set()
    return _get(self, topic, *args, **kwargs)


if __name__ == "__main__":
    ENTERED, RELEASE = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    MessageStore.get = held_get
    sys.argv[0] = "strata"
    main()
