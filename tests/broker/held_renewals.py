"""`strata serve` whose renew loop (push consumers' invisible times) is held back until the
test lets it go (SIGUSR1): the loop runs late, as a loaded machine can make it, on every run.
Test support only: run as ``python held_renewals.py serve DIR ...`` (the arguments of
``strata``)."""

import asyncio
import signal
import sys

from strata.broker.rocketmq import renewal
from strata.cli.main import main

HELD = "strata-test: renewals are held"

_renew_loop = renewal.Renewal._renew_loop


async def held_renew_loop(self):
    go = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, go.set)
    print(HELD, file=sys.stderr, flush=True)
    await go.wait()
    await _renew_loop(self)


renewal.Renewal._renew_loop = held_renew_loop

if __name__ == "__main__":
    sys.argv[0] = "strata"
    main()
