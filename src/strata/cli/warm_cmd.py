"""``strata warm``: compile the numba kernels into their cache now (``make setup`` runs it)."""

from __future__ import annotations

import click


@click.command("warm")
@click.option("--json", "as_json", is_flag=True,
              help="Print what was compiled as one JSON object (per step: how many kernel "
                   "specializations; 0 everywhere on a warm cache).")
def warm_command(as_json: bool) -> None:
    """Run put, read, query, tier upload and Kafka batch paths once on a throwaway store, so
    that the first real call does not compile them. Quick (a second or two) when warm."""
    from strata.warm import main
    main(["--json"] if as_json else [])
