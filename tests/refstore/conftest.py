"""Ref-store fixtures; helpers live in refstore_support.py (a unique module name)."""
from refstore_support import *  # noqa: F401,F403
