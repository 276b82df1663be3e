"""The short torture run for CI (issue 17): SIGKILLs under sync and async flush, a power loss
per flush mode, single-bit flips in every file kind, a full disk, deleted and zeroed
consume-queue and key-index files (each must be reported as repaired) and 512-byte-sector
tearing of units and index entries, each checked against a
model of every acknowledged message. The harness is bench/torture.py (the long run's command
is in the README's "Testing" section); this test imports it and asserts that nothing
acknowledged was lost or came back wrong, and that nothing raised an error outside strata's
hierarchy."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "bench" / "torture.py"


def load_harness():
    spec = importlib.util.spec_from_file_location("strata_torture", HARNESS)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


torture = load_harness()
SHORT = dict(kills=10, flips=100, power=2, disk=1, tailflips=16, lostseg=4, derived=20, torn=4,
             seconds=100)
CI_SEED = 17
ARGS = " ".join(f"--{k} {v}" for k, v in SHORT.items())


@pytest.mark.slow
def test_torture_short(tmp_path):
    # CI repeats one fixed seed (a red run is reproducible, not a roll of the dice); set
    # STRATA_TORTURE_SEED to an int, or to "random" to hunt with a new one each run
    wanted = os.environ.get("STRATA_TORTURE_SEED", str(CI_SEED))
    seed = int.from_bytes(os.urandom(4), "little") if wanted == "random" else int(wanted)
    lines: list[str] = []
    s = torture.run(**SHORT, seed=seed, directory=tmp_path, emit=lines.append)
    sc = s["scenarios"]
    failures = [line for line in lines if '"event": "failure"' in line]
    report = "\n".join([json.dumps({name: sc[name]["signatures"] for name in sc})]
                       + [line[:700] for line in failures[:12]])
    # the budget may cut rounds on a loaded machine, never a whole scenario or flush mode
    assert sc["kills"]["by_mode"]["sync"] >= 1 and sc["kills"]["by_mode"]["async"] >= 1
    assert sc["kills"]["kills_mid_write"] >= 1 and sc["kills"]["acked"] > 0
    assert sc["power"]["by_mode"] == {"sync": 1, "async": 1}
    assert s["flips"] >= len(torture.FLIP_KINDS)
    assert s["disk_rounds"] == 1 and sc["disk"]["disk_full_errors"] >= 1
    # issue 22: flips in records written after the last checkpoint, a deleted last segment
    assert sc["tailflips"]["after_checkpoint"] >= 1 and sc["tailflips"]["before_checkpoint"] >= 1
    assert sc["lostseg"]["by_stop"] == {"clean": 2, "unclean": 2}
    # deleted / zeroed derived files (every kind) and torn sectors of units and entries
    assert s["derived_damaged"] >= len(torture.DERIVED_KINDS) and s["torn_rounds"] >= 1
    assert s["silent"] == 0, f"rerun: bench/torture.py {ARGS} --seed {seed}\n{report}"
    counts = {k: s[k] for k in ("lost", "wrong", "tracebacks", "errors")}
    assert counts == dict.fromkeys(counts, 0), \
        f"rerun: bench/torture.py {ARGS} --seed {seed}\n{json.dumps(counts)}\n{report}"


def test_harness_counts_a_served_corrupt_body(tmp_path, monkeypatch):
    """The checker itself: a message whose bytes are not what was acknowledged is counted as
    wrong, a missing one as lost (so a green short run means something)."""
    import random

    import strata
    monkeypatch.setattr(torture, "LINES_PER_ROUND", 100)
    rng = random.Random(1)
    seqs = iter(range(1000))
    with strata.open(tmp_path / "s", torture.store_config()) as store:
        acks = {}
        for _ in range(10):
            for a in torture.put_random(store, rng, lambda: next(seqs)):
                acks[a.seq] = a
        store.wait_dispatched(10)
        tally = torture.Tally()
        torture.check_store(store, acks, tally, {})
        assert tally.ok() and tally.checks == 4 * len(acks) > 10
        # a model that expects one message more, and one other message in another's place
        ghost = torture.Ack(5000, "t0", 0, 10_000, 1 << 40, 100, "00" * 16)
        some = next(iter(acks.values()))
        swapped = torture.Ack(some.seq + 1000, some.topic, some.queue_id, some.queue_offset,
                              some.offset, some.size, some.msg_id)
        model = {k: v for k, v in acks.items() if k != some.seq}
        model[ghost.seq] = ghost
        model[swapped.seq] = swapped
        tally = torture.Tally()
        torture.check_store(store, model, tally, {})
        # the ghost is lost four ways; read_at and get_by_id return another message for the
        # swapped one (wrong), get and query do not find it (lost)
        assert (tally.lost, tally.wrong, tally.tracebacks, tally.errors) == (6, 2, 0, 0)
        assert {(f["problem"], f["via"]) for f in tally.failures if f["seq"] == swapped.seq} \
            == {("wrong", "read_at"), ("wrong", "get_by_id"), ("lost", "get"), ("lost", "query")}
