"""Shared fixtures; the helpers live in support.py so test modules can import them by a unique name."""
from hypothesis import settings

from support import *  # noqa: F401,F403

# No example database: a failing example seen once must not be replayed by every later run of
# this clone (hypothesis prints the seed and the example to reproduce a failure instead).
# `pytest --hypothesis-profile=default` brings the database back for a debugging session.
settings.register_profile("strata", database=None)
settings.load_profile("strata")
