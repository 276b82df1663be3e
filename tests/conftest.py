"""Shared fixtures; the helpers live in support.py so test modules can import them by a unique name."""
from hypothesis import settings

from support import *  # noqa: F401,F403

# No example database: a failing example seen once must not be replayed by every later run of
# this clone (hypothesis prints the seed and the example to reproduce a failure instead).
# `pytest --hypothesis-profile=default` brings the database back for a debugging session.
settings.register_profile("strata", database=None)
settings.load_profile("strata")


# Parallel runs (pytest-xdist, `make test` runs `-n 2 --dist loadgroup`): tests that share a
# heavy session resource run on one worker, so each is set up once per run, not once per
# worker: the Spark session (a JVM of its own) and the Node.js client's `npm ci` (two workers
# installing into one directory would race), and the console's browser tests. Everything else is spread over the workers;
# servers bind free ports, stores live in each test's tmp_path.
_GROUPS = {"spark": "spark", "node_client": "node", "browser": "browser"}


def pytest_collection_modifyitems(config, items):
    import pytest
    for item in items:
        for fixture, group in _GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
                break


# A failure that passed on its rerun (`--reruns 1`, as `make test` and CI run) is still a bug:
# the run names each such test and shows its first failure at the end, so it gets fixed rather
# than forgotten. Works under xdist: the controller receives every worker's reports.
_RERUNS: list = []


def pytest_runtest_logreport(report):
    if report.outcome == "rerun":
        _RERUNS.append(report)


def pytest_terminal_summary(terminalreporter):
    if not _RERUNS:
        return
    tr = terminalreporter
    tr.section(f"tests that failed once and were rerun ({len(_RERUNS)}): fix each")
    for r in _RERUNS:
        text = str(r.longrepr) if r.longrepr is not None else ""
        lines = text.splitlines()
        first = next((ln[1:].strip() for ln in lines if ln.startswith("E ")), "")
        tr.write_line(f"rerun: {r.nodeid} ({r.when}) {first[:200]}")
    for r in _RERUNS:
        text = str(r.longrepr) if r.longrepr is not None else "(no failure text)"
        tr.write_sep("-", f"first failure of {r.nodeid}")
        tr.write_line("\n".join(text.splitlines()[-60:]))
