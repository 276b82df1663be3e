"""`strata serve` that says on stderr when a receive starts to wait (a long poll), so a test
can act while one is waiting instead of sleeping and hoping it is. Test support only: run as
``python traced_serve.py serve DIR ...`` (the arguments of ``strata``)."""

import sys

from strata.broker import arrivals
from strata.cli.main import main

WAITING = "strata-test: a long poll waits"

_wait = arrivals.Arrivals.wait


async def traced_wait(self, event, timeout):
    print(WAITING, file=sys.stderr, flush=True)
    return await _wait(self, event, timeout)


arrivals.Arrivals.wait = traced_wait

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
