"""`strata serve` whose store reads — or, with ``--held-put``, whose puts — of the topic
"held" wait, as a read through a slow tier (S3) or a write into a throttled page cache
would, until the test lets them go. Test support only: run as
``python held_read.py ENTERED_FIFO RELEASE_FIFO [--held-put] serve DIR ...`` (then the
arguments of ``strata``). The first such call writes one byte to ENTERED_FIFO (the test,
reading it, knows a call is held), then waits to read one byte from RELEASE_FIFO; every
call after that passes at once. Named pipes: both sides wake on the bytes, no polling."""

import sys
import threading

from strata.cli.main import main
from strata.store.message_store import MessageStore

TOPIC = "held"
_get = MessageStore.get
_put_many = MessageStore.put_many
_released = threading.Event()
_lock = threading.Lock()


def _hold() -> None:
    """The first caller waits for the test's release; the others pass."""
    if not _released.is_set():
        with _lock:
            if not _released.is_set():
                with open(ENTERED, "wb") as f:
                    f.write(b"1")
                with open(RELEASE, "rb") as f:
                    f.read(1)
                _released.set()


def held_get(self, topic, *args, **kwargs):
    if topic == TOPIC:
        _hold()
    return _get(self, topic, *args, **kwargs)


def _topic_of(item) -> str | None:
    if isinstance(item, list):
        return item[0].topic if item else None
    return getattr(item, "topic", None)


def held_put_many(self, items, *args, **kwargs):
    if any(_topic_of(i) == TOPIC for i in items):
        _hold()
    return _put_many(self, items, *args, **kwargs)


if __name__ == "__main__":
    ENTERED, RELEASE = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    if sys.argv[1:2] == ["--held-put"]:
        del sys.argv[1]
        MessageStore.put_many = held_put_many
    else:
        MessageStore.get = held_get
    sys.argv[0] = "strata"
    main()
