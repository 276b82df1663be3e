"""Admin commands on a store a running broker holds: they go through its admin API.

``strata topics create|add-queues|delete`` and ``strata groups reset`` open the store as its
writer when no process holds it. When `strata serve` holds it (the writer lock is taken),
they read the broker's admin endpoint from ``<store>/broker.admin`` (strata.broker.admin)
and ask the broker to do it; a store held by a process that serves no admin API is a clear
error, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

from strata.broker.admin import AdminApiError, call, find_admin
from strata.store.read_path import writer_alive

ACL_OPTIONS = [
    click.option("--access-key", envvar="STRATA_ACCESS_KEY", default=None, metavar="AK",
                 help="Through a broker running with --acl: an administrator's accessKey "
                      "(or STRATA_ACCESS_KEY)."),
    click.option("--secret-key", envvar="STRATA_SECRET_KEY", default=None, metavar="SK",
                 help="That account's secretKey (or STRATA_SECRET_KEY)."),
]


def acl_options(fn: Callable) -> Callable:
    for opt in reversed(ACL_OPTIONS):
        fn = opt(fn)
    return fn


def through_broker(directory: str, op: str, body: dict, access_key: str | None,
                   secret_key: str | None) -> dict | None:
    """The broker's answer if a running broker holds the store at ``directory``; None if no
    process holds it (the caller opens the store itself)."""
    if not writer_alive(Path(directory)):
        return None
    endpoint = find_admin(Path(directory))
    if endpoint is None:
        raise click.ClickException(
            f"{directory} is held by another writer that serves no admin API (no live "
            "broker.admin in it): stop that process, or run `strata serve` on the store")
    try:
        return call(endpoint, op, body, access_key, secret_key)
    except AdminApiError as exc:
        raise click.ClickException(str(exc)) from None
