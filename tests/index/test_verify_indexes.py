"""``strata verify`` checks consume queues and key index against the log (the checks of
``strata spark verify``, in one process): a unit that does not lead to its own record, a hole,
and a key-index entry that no key of its record hashes to are listed with file, offset and
kind, and the command exits 1."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from click.testing import CliRunner

import strata
from strata.cli.main import cli
from strata.testing.faults import zero_range
from strata.format import key_index as kfmt
from strata.format.consume_queue import UNIT_SIZE
from strata.format.segment import HEADER_AREA

from support import small_store_config


def make_store(path: Path) -> None:
    with strata.open(path, small_store_config()) as store:
        for t in ("pay", "orders"):
            store.create_topic(t, 1)
        for i in range(40):
            r = store.put(strata.Message(("pay", "orders")[i % 2], b"m%d" % i, keys=(f"k{i}",)))
            assert r.ok


def run_verify(path: Path) -> tuple[int, dict, str]:
    res = CliRunner().invoke(cli, ["verify", str(path)])
    return res.exit_code, json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


def unit_at(n: int) -> int:
    return HEADER_AREA + n * UNIT_SIZE


def test_a_sound_store_passes(tmp_path):
    make_store(tmp_path / "s")
    code, out, _err = run_verify(tmp_path / "s")
    assert (code, out["problems"], out["index_problems"]) == (0, 0, 0)
    assert out["queues"] == 2 and out["index_files"] == 1


def test_wrong_units_and_holes_are_listed(tmp_path):
    make_store(tmp_path / "s")
    qfile = next((tmp_path / "s" / "consumequeue" / "pay" / "0").iterdir())
    zero_range(qfile, unit_at(5), unit_at(5) + 8)      # offset lost, size kept
    zero_range(qfile, unit_at(7), unit_at(8))          # a hole
    code, out, err = run_verify(tmp_path / "s")
    assert code == 1 and out["problems"] == 0 and out["index_problems"] >= 2
    name = f"consumequeue/pay/0/{qfile.name}"
    assert f"{name} offset 5: cq-mismatch" in err
    assert "which holds pay/0 offset 0" in " ".join(err.split())   # the record at offset 0
    assert f"{name} offset 7: cq-" in err               # a hole: the record has no unit


def test_an_index_entry_of_another_key_is_listed(tmp_path):
    make_store(tmp_path / "s")
    (ifile,) = [p for p in (tmp_path / "s" / "index").iterdir() if p.name.isdigit()]
    raw = bytearray(ifile.read_bytes())
    header = kfmt.KeyIndexHeader.decode(bytes(raw[:kfmt.HEADER_BYTES]))
    at = kfmt.entries_position(header.slots) + 3 * kfmt.ENTRY_BYTES   # entry 3
    (h,) = struct.unpack_from("<I", raw, at)
    struct.pack_into("<I", raw, at, h ^ 0x10)
    ifile.write_bytes(bytes(raw))
    code, out, err = run_verify(tmp_path / "s")
    assert code == 1 and out["index_problems"] >= 1
    assert f"index/{ifile.name} offset 3: index-extra" in err
