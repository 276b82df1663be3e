"""Many topics and groups: /topics and /groups render one page at a time, filtered and
sorted on the server over all of them; the API answers stay whole."""

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
    api = c.api("/api/groups")["groups"]              # the API is not paged
    assert len(api) == N_GROUPS
    (g7,) = [x for x in api if x["group"] == "g-07"]
    assert g7["lag"] == 9                             # t-007 holds 9 messages, from offset 0
