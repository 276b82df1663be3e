"""The Kafka options' defaults live in one light module (strata.broker.kafka.defaults) that
the CLI, ServeConfig and the coordinator share; ServeConfig refuses out-of-range values with
an error naming the option, as the CLI does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from strata.broker.kafka import defaults
from strata.broker.kafka.groups import Coordinator
from strata.broker.kafka.read_lanes import ReadLanes
from strata.broker.process import ServeConfig
from strata.errors import InvalidConfigError


def test_one_default_for_the_cli_the_config_and_the_coordinator():
    from strata.cli.serve import serve_command
    opts = {p.name: p.default for p in serve_command.params}
    cfg = ServeConfig(Path("x"), None, 0)
    assert (opts["kafka_initial_delay_ms"] == cfg.kafka_initial_rebalance_delay_ms
            == Coordinator().initial_rebalance_delay_ms == defaults.INITIAL_REBALANCE_DELAY_MS)
    assert opts["kafka_read_threads"] == cfg.kafka_read_threads == ReadLanes().threads \
        == defaults.READ_THREADS


@pytest.mark.parametrize("field,value", [("kafka_read_threads", 0),
                                         ("kafka_read_threads", defaults.MAX_READ_THREADS + 1),
                                         ("kafka_read_threads", True),
                                         ("kafka_initial_rebalance_delay_ms", -1)])
def test_serve_config_refuses_out_of_range_kafka_options(field, value):
    option = "--" + field.replace("_", "-")
    with pytest.raises(InvalidConfigError, match=option):
        ServeConfig(Path("x"), None, 0, **{field: value})


def test_the_cli_does_not_import_the_kafka_listener():
    """The defaults module is what lets the CLI name the defaults without importing the
    coordinator or the listener (which cost over a second at every ``strata`` start)."""
    code = ("import json, sys, strata.cli.main; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('strata.broker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    loaded = json.loads(out)
    assert "strata.broker.kafka.defaults" in loaded
    assert not [m for m in loaded if m.startswith(("strata.broker.kafka.groups",
                                                   "strata.broker.kafka.server",
                                                   "strata.broker.process"))], loaded
