"""Shared fixtures; the helpers live in support.py so test modules can import them by a unique name."""
from support import *  # noqa: F401,F403
