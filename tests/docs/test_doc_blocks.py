"""Every code block in README.md and docs/*.md runs as written, and every relative link leads
somewhere.

The blocks are found afresh on each run, so a section someone adds is tested too:

* ``python`` blocks run in a fresh temporary directory (so ``./data`` is a new store); a block
  that uses Spark (it names ``spark``, ``df`` or ``events``) runs under the ``spark`` mark in
  the suite's Spark session, with ``df`` a small DataFrame of ``id`` and ``payload``, ``events``
  a small streaming DataFrame of ``user`` and ``kind``, and the paths ``./data`` (the quick
  start's store), ``/out/...`` and ``/chk/...`` moved into a temporary directory (``./data`` a
  small store holding the topics ``orders`` and ``payments``, as the demo's does);
* ``sh`` blocks run each ``strata ...`` line, in order, in a fresh temporary directory, and
  fail on a non-zero exit; any other command needs the marker below. ``strata serve`` and
  ``strata console`` (servers: they run until stopped) must come up (on free ports instead of
  the ones shown) and stop cleanly on SIGTERM;
* a ``python`` block that connects to a broker (it names ``"127.0.0.1:PORT"``) runs in a child
  process against a ``strata serve`` of a fresh store, on a free port in place of PORT;
* a ``python`` block whose first line is ``# with: strata serve DIR ...`` runs in a child
  process against that server (e.g. ``--kafka`` for a Kafka client), its ``"127.0.0.1:PORT"``
  the server's first listener on a free port;
* an ``sh`` line ending in ``# exit N: TEXT`` must exit N and print TEXT (stdout or stderr):
  the docs show an error as the user meets it, and the test keeps the words true;
* docs/guide.md is a walk-through: its blocks run only in order, in one directory
  (``test_the_guide_runs_in_order``), its Spark blocks in the suite's session like others;
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
GUIDE = ROOT / "docs" / "guide.md"
IN_ORDER_ONLY = [b for b in RUN if b.path == GUIDE and not b.spark]   # they build on each other
ALONE = [b for b in RUN if b not in IN_ORDER_ONLY]


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
        elif args[0] == "serve" and "--kafka" not in args:
            args += ["--listen", "127.0.0.1:0"]
        for flag in ("--http", "--kafka"):              # the console, Kafka: free ports too
            if flag in args:
                i = args.index(flag) + 1
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
            m = re.search(r"listening on (?:http://)?([\d.]+:\d+)", line)
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


WITH_SERVER = re.compile(r"\A#\s*with:\s*strata\s+(?P<args>serve\b[^\n]*)")


def run_against_server(block: Block, cwd: Path) -> subprocess.CompletedProcess:
    """A block that talks to a broker, in a child process against ``strata serve``: the one
    its ``# with: strata serve ...`` line names, else ``strata serve ./data`` (RocketMQ)."""
    m = WITH_SERVER.match(block.body)
    server = Serve(cwd, shlex.split(m["args"], comments=True) if m else ["serve", "./data"])
    try:
        code = BROKER_ADDRESS.sub(json.dumps(server.address), block.body)
        r = subprocess.run([sys.executable, "-c", code], cwd=cwd, text=True, timeout=120,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=dict(os.environ, HOME=str(cwd)))  # the client logs to ~
    finally:
        stopped = server.stop()
    assert r.returncode == 0, f"{block.name} against {server.address}:\n{r.stderr}"
    assert stopped == 0, "".join(server.log)
    return r


@pytest.mark.parametrize("block", [b for b in ALONE if b.lang in PYTHON and not b.spark],
                         ids=lambda b: b.name)
def test_python_block_runs(block, tmp_path, monkeypatch):
    if BROKER_ADDRESS.search(block.body):
        run_against_server(block, tmp_path)
    else:
        run_python(block, tmp_path, {}, monkeypatch)


EXPECT_EXIT = re.compile(r"#\s*exit (?P<code>\d+):\s*(?P<text>.*?)\s*$")


def shell_commands(block: Block) -> list[tuple[list[str], int, str]]:
    """The block's commands (comments dropped), each a ``strata`` command, with the exit code
    and words its ``# exit N: TEXT`` comment expects (0 and "" without one)."""
    out = []
    for line in block.body.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "strata", (f"{block.name}: {line!r} is not a strata command; run "
                                      "only those or mark the block <!-- not run: why -->")
        m = EXPECT_EXIT.search(line)
        out.append((words[1:], int(m["code"]) if m else 0, m["text"] if m else ""))
    return out


def test_an_expected_exit_comment_is_read():
    block = Block(ROOT / "x.md", 1, "sh", "strata info ./nope   # exit 1: no such directory\n"
                  "strata info ./data # the store\n", None)
    assert shell_commands(block) == [(["info", "./nope"], 1, "no such directory"),
                                     (["info", "./data"], 0, "")]


@pytest.mark.parametrize("block", [b for b in ALONE if b.lang in SHELL], ids=lambda b: b.name)
def test_shell_block_runs(block, tmp_path):
    for args, code, text in shell_commands(block):
        if args[:1] in (["serve"], ["console"]) and not code:   # a server: up, then stopped
            assert Serve(tmp_path, args).stop() == 0, f"{block.name}: strata {shlex.join(args)}"
            continue
        r = subprocess.run([sys.executable, "-m", "strata.cli.main", *args], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        said = f"{block.name}: strata {shlex.join(args)}\n{r.stdout}{r.stderr}"
        assert r.returncode == code, said
        assert text in r.stdout + r.stderr and "Traceback" not in r.stderr, said


@pytest.mark.parametrize("block", [b for b in RUN if b.lang in JSON_LANGS], ids=lambda b: b.name)
def test_json_block_parses(block):
    json.loads(block.body)


# --------------------------------------------------------------------------- Spark blocks


def spark_store(path: Path) -> None:
    """``./data`` of the Spark examples: orders (2 queues, 1,200 each) and payments."""
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
    # "./data" (the quick start's store) as an absolute path: Spark's Python workers do not
    # share the test's working directory
    body = (block.body.replace('"./data"', json.dumps(str(store)))
            .replace('"./shop"', json.dumps(str(store)))      # docs/guide.md's store
            .replace('"/out/', json.dumps(str(tmp_path / "out"))[:-1] + "/")
            .replace('"./out/', json.dumps(str(tmp_path / "out"))[:-1] + "/")
            .replace('"/chk/', json.dumps(str(tmp_path / "chk"))[:-1] + "/")
            .replace('"./chk/', json.dumps(str(tmp_path / "chk"))[:-1] + "/"))
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


DOC_PATH = re.compile(r"\b(?:docs|bench)/[\w./-]*\w\.md\b")


def named_doc_paths(root: Path) -> list[tuple[str, str]]:
    """(where, path) for every ``docs/....md`` or ``bench/....md`` a source file names."""
    found = []
    for f in sorted([*(root / "src").rglob("*.py"), *(root / "bench").glob("*.py"),
                     *(root / "tests").rglob("*.py"), root / "Makefile", root / "pyproject.toml"]):
        for i, line in enumerate(f.read_text("utf-8").splitlines(), 1):
            for m in DOC_PATH.finditer(line):
                found.append((f"{f.relative_to(root)}:{i}", m[0]))
    return found


def test_every_doc_a_source_file_names_exists():
    """A docstring or message that sends a reader to a doc under docs/ sends them somewhere
    (issues 24 and 26: two format files for the key index and the refstore were named in
    docstrings but never written; their layouts are sections of docs/format.md)."""
    named = named_doc_paths(ROOT)
    assert len(named) > 10                                 # the walk found the references
    missing = [f"{where}: {path}" for where, path in named
               if not (ROOT / path).is_file()]
    assert not missing, "\n".join(missing)


# --------------------------------------------------------------------------- in order


def test_the_readme_runs_in_order_after_the_quick_start(tmp_path, monkeypatch):
    """Issue 26: a newcomer pastes the README's blocks in order into the checkout after
    `make run`, so each must fit the demo's store in ./data and the blocks before it. Here
    ./data is a small demo store (`strata demo ./data --messages 2000 --no-spark`) and the
    README's Python and shell blocks run one after another in one directory; a block that
    connects to a broker runs against `strata serve ./data`. (The Spark blocks run against a
    demo-shaped ./data in the suite's Spark session, test_spark_block_runs.)"""
    r = subprocess.run([sys.executable, "-m", "strata.cli.main", "demo", "./data",
                        "--messages", "2000", "--no-spark"], cwd=tmp_path, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert r.returncode == 0 and "all checks passed" in r.stdout, r.stdout + r.stderr
    readme = [b for b in RUN if b.path.name == "README.md" and not b.spark]
    assert [b.lang in SHELL for b in readme].count(True) >= 2 and len(readme) >= 5
    for block in readme:
        if block.lang in SHELL:
            test_shell_block_runs(block, tmp_path)
        elif BROKER_ADDRESS.search(block.body):
            r = run_against_server(block, tmp_path)
            if "received" in block.body:       # it says what it did, and got its own message
                assert "received [b'hello from the README']" in r.stdout, r.stdout
        elif block.lang in PYTHON:
            run_python(block, tmp_path, {}, monkeypatch)


def test_the_guide_runs_in_order(tmp_path, monkeypatch):
    """docs/guide.md, "Your second hour", is one walk-through: its blocks build on each other
    (the store ./shop of the first is served, consumed, broken), so they run one after another
    in one directory, as a reader pastes them (its Spark blocks: test_spark_block_runs)."""
    assert GUIDE.is_file()
    assert [b.lang in SHELL for b in IN_ORDER_ONLY].count(True) >= 3 and len(IN_ORDER_ONLY) >= 6
    for block in IN_ORDER_ONLY:
        if block.lang in SHELL:
            test_shell_block_runs(block, tmp_path)
        elif BROKER_ADDRESS.search(block.body):
            run_against_server(block, tmp_path)
        elif block.lang in PYTHON:
            run_python(block, tmp_path, {}, monkeypatch)
        else:
            json.loads(block.body)
