"""`strata serve` whose dispatch is held back: a put is acknowledged (it is in the commit log)
but its message does not reach the consume queue until a receive has looked for it once and
found nothing. This makes the moment "acknowledged, not yet dispatched" — which load makes
likely and an idle machine rare — happen on every run. Test support only: run as
``python held_dispatch.py serve DIR ...`` (the arguments of ``strata``)."""

import sys
import threading

from strata.broker import receive
from strata.cli.main import main
from strata.index import dispatch

HOLD_S = 60.0                       # never hold forever, whatever the test does
_looked = threading.Event()         # a receive looked at the store and found nothing

_dispatch_once = dispatch.ReputService.dispatch_once
_pop = receive.Popper.pop


def held_dispatch_once(self, limit=None):
    if not _looked.is_set() and self.confirmed() > self.reput_offset:
        _looked.wait(HOLD_S)
    return _dispatch_once(self, limit)


def pop_then_release(self, *args, **kwargs):
    got = _pop(self, *args, **kwargs)
    if not got:
        _looked.set()
    return got


dispatch.ReputService.dispatch_once = held_dispatch_once
receive.Popper.pop = pop_then_release

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
