"""``strata serve DIR --listen HOST:PORT [--kafka HOST:PORT]``: the RocketMQ 5 gRPC broker
(docs/broker.md) and/or the Kafka wire protocol listener (docs/kafka.md) on one store."""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path

import click

from strata.broker.kafka import defaults as kafka_defaults
from strata.store.config import StoreConfig


_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}
_BOOLS = {"1": True, "true": True, "yes": True, "on": True,
          "0": False, "false": False, "no": False, "off": False}


def _store_options(pairs: tuple[str, ...]) -> dict:
    """``--store-option NAME=VALUE`` pairs as StoreConfig keyword arguments; a name that is
    no field is refused with the nearest field's name, a value not of the field's type (a
    bool that is not one of true/false/yes/no/on/off/1/0 too) naming the type."""
    types = {f.name: f.type for f in fields(StoreConfig) if f.name != "flush"}
    out: dict = {}
    for p in pairs:
        name, sep, value = p.partition("=")
        if not sep or name not in types:
            near = difflib.get_close_matches(name, types, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near and sep else ""
            raise click.BadParameter(f"{p!r}: expected NAME=VALUE with NAME a StoreConfig "
                                     f"field other than flush{hint}",
                                     param_hint="--store-option")
        kind = types[name].removesuffix(" | None")    # max_body_size: None is its default
        try:
            if kind == "bool" and value.lower() not in _BOOLS:
                raise ValueError(value)
            out[name] = (int(value) if kind == "int" else float(value) if kind == "float"
                         else _BOOLS[value.lower()] if kind == "bool" else value)
        except ValueError:
            raise click.BadParameter(f"{p!r}: {name} takes {_KINDS.get(kind, kind)}",
                                     param_hint="--store-option") from None
    return out


@click.command("serve")
@click.argument("directory", metavar="DIR")
@click.option("--listen", metavar="HOST:PORT",
              help="Address to serve RocketMQ 5 gRPC on (port 0: any free port, printed at "
                   "start). --listen, --kafka or both.")
@click.option("--kafka", metavar="HOST:PORT",
              help="Address to serve the Kafka wire protocol on (port 0: any free port, "
                   "printed at start); TLS and --acl (SASL) apply to it too.")
@click.option("--kafka-initial-rebalance-delay-ms", "kafka_initial_delay_ms",
              type=click.IntRange(0, kafka_defaults.MAX_INITIAL_REBALANCE_DELAY_MS),
              default=kafka_defaults.INITIAL_REBALANCE_DELAY_MS, show_default=True,
              metavar="MS",
              help="A Kafka consumer group forming from empty waits this long (more for each "
                   "member arriving meanwhile, within the rebalance timeout) before its "
                   "first generation, so members starting together join it together "
                   "(Kafka's group.initial.rebalance.delay.ms).")
@click.option("--kafka-read-threads", "kafka_read_threads",
              type=click.IntRange(1, kafka_defaults.MAX_READ_THREADS),
              default=kafka_defaults.READ_THREADS, show_default=True, metavar="N",
              help="Threads for the Kafka listener's Fetch reads: up to N connections' reads "
                   "may wait at once (on a cold or tiered segment) before the others' wait "
                   "too; each connection's reads run one at a time.")
@click.option("--flush", type=click.Choice(["async", "sync"]), default="async",
              show_default=True, help="sync: a send is acknowledged after an fsync covers it.")
@click.option("--no-auto-create", is_flag=True,
              help="Refuse sends to topics that do not exist (TOPIC_NOT_FOUND).")
@click.option("--exit-with-parent", is_flag=True,
              help="Stop (cleanly) when the process that started this one exits.")
@click.option("--max-delivery-attempts", type=click.IntRange(1, 1000), default=16,
              show_default=True,
              help="Deliveries of a message to a group before it goes to %DLQ%<group>.")
@click.option("--transaction-check-interval", type=click.FloatRange(0.1, 86400), default=60.0,
              show_default=True, metavar="SECONDS",
              help="An unresolved half message is checked back this long after its send, "
                   "then as often.")
@click.option("--transaction-max-checks", type=click.IntRange(1, 1000), default=15,
              show_default=True,
              help="Checks of an unresolved half message before it is dropped.")
@click.option("--renew-slice", type=click.FloatRange(1, 43200), default=60.0,
              show_default=True, metavar="SECONDS",
              help="A push consumer's receive (auto_renew) is invisible this long, renewed "
                   "by as much while its client stays connected.")
@click.option("--renew-max", type=click.FloatRange(1, 7 * 86400), default=10800.0,
              show_default=True, metavar="SECONDS",
              help="A push consumer's delivery is renewed for at most this long; then it "
                   "comes back at the end of its invisible time.")
@click.option("--gather-ms", type=click.FloatRange(0, 1000), default=2.0, show_default=True,
              help="Puts start at most once per this many ms; sends arriving meanwhile share one.")
@click.option("--store-option", "store_options", multiple=True, metavar="NAME=VALUE",
              help="A StoreConfig field, e.g. segment_size=67108864 (repeatable).")
@click.option("--acl", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Require AK/SK-signed requests and check rights per topic and group, "
                   "from RocketMQ's plain_acl.yml format (accounts: accessKey, secretKey, "
                   "admin, topicPerms, groupPerms, defaultTopicPerm, defaultGroupPerm).")
@click.option("--acl-time-window", "acl_window_s", type=click.IntRange(1, 86400),
              default=300, show_default=True, metavar="SECONDS",
              help="With --acl: refuse a signature whose x-mq-date-time is further than this "
                   "from the broker's clock (UTC), so a captured one cannot be replayed.")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Serve gRPC over TLS with this PEM certificate (chain); needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The certificate's unencrypted PEM private key; needs --tls-cert.")
@click.option("--metrics", metavar="HOST:PORT",
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free "
                   "port, printed at start).")
@click.option("--http", metavar="HOST:PORT",
              help="Serve the web console at http://HOST:PORT/ (docs/console.md; port 0: any "
                   "free port, printed at start).")
def serve_command(directory: str, listen: str | None, kafka: str | None,
                  kafka_initial_delay_ms: int, kafka_read_threads: int, flush: str,
                  no_auto_create: bool, exit_with_parent: bool, max_delivery_attempts: int,
                  transaction_check_interval: float, transaction_max_checks: int,
                  renew_slice: float, renew_max: float,
                  gather_ms: float, store_options: tuple[str, ...], acl: Path | None,
                  acl_window_s: int, tls_cert: Path | None, tls_key: Path | None,
                  metrics: str | None, http: str | None) -> None:
    """Serve the store in DIR to RocketMQ 5 clients over gRPC and/or to Kafka clients
    (plaintext, or TLS with --tls-cert/--tls-key), with the web console on --http."""
    from strata.broker.process import ServeConfig, parse_listen, run
    if listen is None and kafka is None:
        raise click.UsageError("give --listen HOST:PORT (RocketMQ gRPC), --kafka HOST:PORT "
                               "(Kafka), or both")
    host, port = None, 0
    try:
        if listen is not None:
            host, port = parse_listen(listen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    try:
        kafka_at = parse_listen(kafka) if kafka is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--listen", "--kafka"),
                                 param_hint="--kafka") from None
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together: give both or neither")
    try:
        metrics_at = parse_listen(metrics) if metrics is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--listen", "--metrics"),
                                 param_hint="--metrics") from None
    try:
        http_at = parse_listen(http) if http is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--listen", "--http"),
                                 param_hint="--http") from None
    run(ServeConfig(Path(directory), host, port, flush, not no_auto_create, exit_with_parent,
                    max_delivery_attempts, _store_options(store_options), acl, acl_window_s,
                    tls_cert, tls_key, metrics_at,
                    transaction_check_interval_s=transaction_check_interval,
                    transaction_max_checks=transaction_max_checks, gather_ms=gather_ms,
                    renew_slice_s=renew_slice, renew_max_s=renew_max, kafka=kafka_at,
                    kafka_initial_rebalance_delay_ms=kafka_initial_delay_ms,
                    kafka_read_threads=kafka_read_threads, http=http_at))
