"""Byte layouts as pure functions and precompiled structs: no file I/O, no threads."""
