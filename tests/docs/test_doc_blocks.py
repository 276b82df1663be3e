"""Every code block in README.md and docs/*.md runs as written, and every relative link leads
somewhere.

The blocks are found afresh on each run, so a section someone adds is tested too:

* ``python`` blocks run in a fresh temporary directory (so ``./data`` is a new store); a block
  that uses Spark (it names ``spark``, ``df`` or ``events``) runs under the ``spark`` mark in
  the suite's Spark session, with ``df`` a small DataFrame of ``id`` and ``payload``, ``events``
  a small streaming DataFrame of ``user`` and ``kind``, and the paths ``/data/store``,
  ``/out/...`` and ``/chk/...`` moved into a temporary directory (``/data/store`` a small store
  holding the topics ``orders`` and ``payments``);
* ``sh`` blocks run each ``strata ...`` line, in order, in a fresh temporary directory, and
  fail on a non-zero exit; any other command needs the marker below. ``strata serve`` (a server:
  it runs until stopped) must come up (on a free port instead of the one shown) and stop cleanly
  on SIGTERM;
* a ``python`` block that connects to a broker (it names ``"127.0.0.1:PORT"``) runs in a child
  process against a ``strata serve`` of a fresh store, on a free port in place of PORT;
* ``json`` blocks must parse;
* untagged and ``text`` blocks (usage synopses, file layouts, diagrams) are not code.

A block that truly cannot run says so right above its fence, with the reason:
``<!-- not run: make test runs this test itself -->`` (Sybil's ``skip`` convention).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import strata

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<reason>.*?)-->\s*$")
PYTHON, SHELL, JSON_LANGS, TEXT = {"python", "py"}, {"sh", "bash", "shell", "console"}, \
    {"json"}, {"", "text", "txt"}
SPARK_NAMES = re.compile(r"\b(spark|df|events)\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    body: str
    not_run: str | None     # the reason given by a "not run" marker, if any

    @property
    def name(self) -> str:
        where = self.path.relative_to(ROOT) if ROOT in self.path.parents else self.path.name
        return f"{where}:{self.line}"

    @property
    def spark(self) -> bool:
        return self.lang in PYTHON and bool(SPARK_NAMES.search(self.body))


def doc_blocks(path: Path) -> list[Block]:
    text = path.read_text("utf-8")
    blocks = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        body = "\n".join(line[len(m["indent"]):] for line in m["body"].splitlines())
        blocks.append(Block(path, text.count("\n", 0, m.start()) + 1,
                            m["info"].strip().split(" ")[0].lower(), body + "\n",
                            marker["reason"].strip() if marker else None))
    return blocks


BLOCKS = [b for p in DOCS for b in doc_blocks(p)]
RUN = [b for b in BLOCKS if b.not_run is None and b.lang not in TEXT]


def test_the_docs_have_blocks_and_every_marker_gives_a_reason():
    assert {b.path.name for b in BLOCKS} >= {"README.md", "spark.md", "refstore.md", "format.md"}
    assert sum(b.lang in PYTHON for b in RUN) >= 5
    for b in BLOCKS:
        assert b.not_run != "", f"{b.name}: a 'not run' marker must say why"
        assert b.lang in PYTHON | SHELL | JSON_LANGS | TEXT, \
            f"{b.name}: code block language {b.lang!r} is not one this test knows how to run"


def test_a_block_without_a_marker_is_run_and_a_marked_one_is_not(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("```python\nboom\n```\n\n<!-- not run: needs a cluster -->\n```sh\nmake x\n"
                   "```\n\n```\nsynopsis\n```\n", "utf-8")
    found = doc_blocks(doc)
    assert [(b.lang, b.not_run) for b in found] == [("python", None), ("sh", "needs a cluster"),
                                                    ("", None)]
    with pytest.raises(NameError):
        run_python(found[0], tmp_path, {})


def close_stores(namespace: dict) -> None:
    for v in namespace.values():
        if isinstance(v, strata.MessageStore) and not v.closed:
            v.close()


def run_python(block: Block, cwd: Path, namespace: dict, monkeypatch=None) -> dict:
    namespace.setdefault("__name__", "__doc_block__")
    if monkeypatch is not None:
        monkeypatch.chdir(cwd)
    try:
        exec(compile(block.body, block.name, "exec"), namespace)
    finally:
        close_stores(namespace)
    return namespace


BROKER_ADDRESS = re.compile(r'"(?:127\.0\.0\.1|localhost):(\d+)"')


class Serve:
    """``strata serve DIR [options]`` in the background, on a free port."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        args = list(args)
        if "--listen" in args:
            i = args.index("--listen") + 1
            args[i] = args[i].rsplit(":", 1)[0] + ":0"
        else:
            args += ["--listen", "127.0.0.1:0"]
        if "--kafka" in args:
            i = args.index("--kafka") + 1
            args[i] = args[i].rsplit(":", 1)[0] + ":0"
        self.proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", *args,
                                      "--exit-with-parent"], cwd=cwd, text=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.log = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            self.log.append(line)
            if not line:
                break
            m = re.search(r"listening on ([\d.]+:\d+)", line)
            if m:
                self.address = m[1]
                return
        self.stop()
        raise AssertionError(f"strata {shlex.join(args)} did not come up: {''.join(self.log)}")

    def stop(self) -> int:
        """SIGTERM; the exit code (a clean stop is 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
        return self.proc.returncode


@pytest.mark.parametrize("block", [b for b in RUN if b.lang in PYTHON and not b.spark],
                         ids=lambda b: b.name)
def test_python_block_runs(block, tmp_path, monkeypatch):
    if not BROKER_ADDRESS.search(block.body):
        run_python(block, tmp_path, {}, monkeypatch)
        return
    server = Serve(tmp_path, ["serve", "./data"])
    try:
        code = BROKER_ADDRESS.sub(json.dumps(server.address), block.body)
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, text=True, timeout=120,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=dict(os.environ, HOME=str(tmp_path)))  # the client logs to ~
    finally:
        stopped = server.stop()
    assert r.returncode == 0, f"{block.name} against {server.address}:\n{r.stderr}"
    assert stopped == 0, "".join(server.log)


def shell_commands(block: Block) -> list[list[str]]:
    """The block's commands (comments dropped); each must be a ``strata`` command."""
    out = []
    for line in block.body.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "strata", (f"{block.name}: {line!r} is not a strata command; run "
                                      "only those or mark the block <!-- not run: why -->")
        out.append(words[1:])
    return out


@pytest.mark.parametrize("block", [b for b in RUN if b.lang in SHELL], ids=lambda b: b.name)
def test_shell_block_runs(block, tmp_path):
    for args in shell_commands(block):
        if args[:1] == ["serve"]:                      # a server: it must come up and stop
            assert Serve(tmp_path, args).stop() == 0, f"{block.name}: strata {shlex.join(args)}"
            continue
        r = subprocess.run([sys.executable, "-m", "strata.cli.main", *args], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        assert r.returncode == 0, f"{block.name}: strata {shlex.join(args)}\n{r.stderr}"


@pytest.mark.parametrize("block", [b for b in RUN if b.lang in JSON_LANGS], ids=lambda b: b.name)
def test_json_block_parses(block):
    json.loads(block.body)


# --------------------------------------------------------------------------- Spark blocks


def spark_store(path: Path) -> None:
    """``/data/store`` of the Spark examples: orders (2 queues, 1,200 each) and payments."""
    cfg = strata.StoreConfig(segment_size=1 << 20, prefault=False, consume_queue_units=4096,
                             index_slots=1024, index_entries=8192)
    with strata.open(path, cfg) as store:
        store.create_topic("orders", queues=2)
        store.create_topic("payments", queues=2)
        store.put_batch([strata.Message("orders", b'{"id": %d}' % i, keys=[f"o-{i}"],
                                        queue_id=i % 2, tags="created") for i in range(2400)])
        store.put_batch([strata.Message("payments", b"p%d" % i) for i in range(100)])


@pytest.mark.spark
@pytest.mark.parametrize("block", [b for b in RUN if b.spark], ids=lambda b: b.name)
def test_spark_block_runs(block, spark, tmp_path, monkeypatch):
    store = tmp_path / "data" / "store"
    spark_store(store)
    body = (block.body.replace('"/data/store"', json.dumps(str(store)))
            .replace('"/out/', json.dumps(str(tmp_path / "out"))[:-1] + "/")
            .replace('"/chk/', json.dumps(str(tmp_path / "chk"))[:-1] + "/"))
    events_in = tmp_path / "events-in"
    events_in.mkdir()
    (events_in / "part-0.json").write_text(
        "".join(json.dumps({"user": u, "kind": "click"}) + "\n" for u in range(20)), "utf-8")
    namespace = {
        "spark": spark,
        "df": spark.createDataFrame([(i, b"payload %d" % i) for i in range(50)],
                                    "id long, payload binary"),
        "events": spark.readStream.schema("user long, kind string").json(str(events_in)),
    }
    try:
        run_python(Block(block.path, block.line, block.lang, body, None), tmp_path, namespace,
                   monkeypatch)
        for q in spark.streams.active:
            q.processAllAvailable()
    finally:
        for q in spark.streams.active:
            q.stop()


# --------------------------------------------------------------------------- links

LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", [*DOCS, ROOT / "bench" / "README.md"], ids=lambda p: p.name)
def test_relative_links_lead_to_files_and_headings_that_exist(doc):
    text = FENCE.sub("", doc.read_text("utf-8"))
    for m in LINK.finditer(text):
        target = m["target"]
        if re.match(r"[a-z]+:", target):
            continue                                   # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        assert dest.exists(), f"{doc.name}: link {target!r} leads to no file"
        assert ROOT in dest.parents or dest == ROOT, f"{doc.name}: {target!r} leaves the repo"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{doc.name}: no heading #{anchor} in {file or doc.name}"
