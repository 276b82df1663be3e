"""Counted nouns read right: "1 file", "2 files", "1 batch", "1,024 batches"."""

from strata.words import count


def test_one_is_singular_and_the_rest_plural():
    assert count(1, "file") == "1 file"
    assert [count(n, "file") for n in (0, 2)] == ["0 files", "2 files"]
    assert count(1, "batch") == "1 batch" and count(1024, "batch") == "1,024 batches"
    assert count(3, "entry") == "3 entries" and count(2, "key") == "2 keys"
    assert count(2, "datum", "data") == "2 data"
