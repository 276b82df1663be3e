"""Many topics and groups: /topics and /groups render one page at a time, filtered and
sorted on the server over all of them; /api/topics and /api/groups take the same filter and
sort parameters and page when asked to (whole answers otherwise, as before)."""

from __future__ import annotations

import re
from pathlib import Path

import strata
from strata.broker.group_state import ConsumerGroups

from console_support import console_cmd, small_config

N_TOPICS = 230          # more than one page (200 rows)
N_GROUPS = 25           # more than one page (20 sections)


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-name="([^"]+)">', html)


def test_topics_and_groups_pages_are_paged_filtered_and_sorted(tmp_path: Path,
                                                               served) -> None:
    d = tmp_path / "store"
    with strata.open(d, small_config()) as s:
        for i in range(N_TOPICS):
            s.create_topic(f"t-{i:03d}", queues=1)
        # t-007 gets the most messages, t-100 the second most
        s.put_batch([strata.Message("t-007", b"x") for _ in range(9)] +
                    [strata.Message("t-100", b"y") for _ in range(5)] +
                    [strata.Message(f"t-{i:03d}", b"z") for i in range(0, N_TOPICS, 3)])
    g = ConsumerGroups(d / "broker")
    for i in range(N_GROUPS):
        g.reset_offset(f"g-{i:02d}", f"t-{i:03d}", 0, 0)
    g.close()
    c = served(console_cmd(d))

    status, first = c.get("/topics")
    assert status == 200
    assert _rows(first) == [f"t-{i:03d}" for i in range(200)]
    assert 'id="next" href="/topics?page=1"' in first and 'id="prev"' not in first
    _, second = c.get("/topics?page=1")
    assert _rows(second) == [f"t-{i:03d}" for i in range(200, N_TOPICS)]
    assert 'id="next"' not in second
    _, found = c.get("/topics?q=T-1")                  # case-insensitive, over all pages
    assert _rows(found) == [f"t-{i:03d}" for i in range(100, 200)]
    _, by_count = c.get("/topics?sort=messages&order=desc")
    assert _rows(by_count)[:2] == ["t-007", "t-100"]
    _, junk = c.get("/topics?sort=nonsense&page=99")  # ignored / clamped, never an error
    assert _rows(junk) == [f"t-{i:03d}" for i in range(200, N_TOPICS)]

    _, groups = c.get("/groups")
    assert re.findall(r'<section class="group rocketmq" id="([^"]+)"', groups) == \
        [f"g-{i:02d}" for i in range(20)]
    assert 'class="next" href="/groups?page=1"' in groups
    _, rest = c.get("/groups?page=1")
    assert re.findall(r'<section class="group rocketmq" id="([^"]+)"', rest) == \
        [f"g-{i:02d}" for i in range(20, N_GROUPS)]
    _, one = c.get("/groups?q=t-007")
    assert re.findall(r'<section class="group rocketmq" id="([^"]+)"', one) == ["g-07"]
    api = c.api("/api/groups")["groups"]              # the API pages only when asked
    assert len(api) == N_GROUPS
    (g7,) = [x for x in api if x["group"] == "g-07"]
    assert g7["lag"] == 9                             # t-007 holds 9 messages, from offset 0


def test_api_topics_and_groups_are_filtered_sorted_and_paged(tmp_path: Path, served) -> None:
    d = tmp_path / "store"
    names = [f"t-{i:02d}" for i in range(12)]
    with strata.open(d, small_config()) as s:
        for n in reversed(names):                     # created out of name order
            s.create_topic(n, queues=1)
        s.create_topic("%DLQ%g-00", queues=1)
        s.put_batch([strata.Message(f"t-{i:02d}", b"m") for i in range(12) for _ in range(i % 5)])
    g = ConsumerGroups(d / "broker")
    for i in range(7):
        g.reset_offset(f"g-{i}", f"t-{i:02d}", 0, 0)
    g.close()
    c = served(console_cmd(d))

    whole = c.api("/api/topics")                      # no parameter: every topic, as before
    assert [t["topic"] for t in whole["topics"]] == ["%DLQ%g-00", *names]
    assert whole["total"] == 13 and "page" not in whole
    assert [t["topic"] for t in c.api("/api/topics?internal=0")["topics"]] == names

    p1 = c.api("/api/topics?internal=0&per_page=5&page=1")
    assert [t["topic"] for t in p1["topics"]] == names[5:10]
    assert (p1["total"], p1["page"], p1["pages"], p1["per_page"]) == (12, 1, 3, 5)
    assert [t["topic"] for t in c.api("/api/topics?internal=0&per_page=5&page=2")["topics"]] \
        == names[10:]
    assert c.api("/api/topics?per_page=5&page=9")["topics"] == []     # past the end: empty
    first = c.api("/api/topics?page=0")                                 # default page size
    assert (len(first["topics"]), first["per_page"], first["pages"]) == (13, 200, 1)

    by_count = c.api("/api/topics?sort=messages&order=desc&internal=0&per_page=4")
    counts = [(t["messages"], t["topic"]) for t in by_count["topics"]]
    assert counts == [(4, "t-09"), (4, "t-04"), (3, "t-08"), (3, "t-03")]
    assert [t["topic"] for t in c.api("/api/topics?q=T-1")["topics"]] == \
        ["t-10", "t-11"]                                                # any case, every page
    asc = c.api("/api/topics?sort=topic&order=desc&internal=0")["topics"]
    assert [t["topic"] for t in asc] == names[::-1]

    for bad, word in [("page=-1", "page=-1 is out of range"),
                      ("per_page=0", "per_page=0 is out of range (1..1000)"),
                      ("per_page=1001", "per_page=1001 is out of range"),
                      ("page=two", "page='two' is not an integer"),
                      ("sort=nonsense", "sort='nonsense' is not one of"),
                      ("order=up", "order='up' is not one of asc, desc"),
                      ("internal=yes", "internal='yes' is not one of 0, 1")]:
        status, got = c.get("/api/topics?" + bad)
        assert status == 400 and got["error"].startswith("InvalidInputError: " + word), got

    groups = c.api("/api/groups")
    assert [x["group"] for x in groups["groups"]] == [f"g-{i}" for i in range(7)]
    assert groups["total"] == 7 and "history" in groups and "page" not in groups
    gp = c.api("/api/groups?per_page=3&page=2")
    assert [x["group"] for x in gp["groups"]] == ["g-6"]
    assert (gp["total"], gp["pages"], gp["per_page"]) == (7, 3, 3) and "history" in gp
    assert c.api("/api/groups?page=0")["per_page"] == 20
    one = c.api("/api/groups?q=T-04")["groups"]              # the topic's name, any case
    assert [(x["group"], x["lag"]) for x in one] == [("g-4", 4)]
    assert [x["group"] for x in c.api("/api/groups?q=g-5")["groups"]] == ["g-5"]
    status, got = c.get("/api/groups?per_page=x")
    assert status == 400 and "per_page='x' is not an integer" in got["error"]
