"""The round journal: what a producer's round published, handed back once when the round closes."""

from __future__ import annotations

import pytest

from radixflow.cache.node import Node
from radixflow.cache.rounds import RoundJournal


def nodes(n: int) -> list[Node]:
    return [Node(id=i, key=(i,), parent=None, end=i + 1) for i in range(n)]


def test_close_hands_back_the_round_once_and_clears_published_by():
    journal, (a, b, c) = RoundJournal(), nodes(3)
    journal.adopt("p", a)
    journal.adopt("q", b)
    journal.add_pending("p", c)
    assert a.published_by == "p" and b.published_by == "q"
    closed = journal.close("p")
    assert closed.adopted == [a] and closed.pending == [c] and a.published_by is None
    assert b.published_by == "q"  # another producer's round is untouched
    again = journal.close("p")
    assert again.adopted == [] and again.pending == []


def test_a_split_journals_the_upper_half_only_of_a_published_node():
    journal, (upper, lower, other_upper, other_lower) = RoundJournal(), nodes(4)
    journal.adopt("p", lower)
    journal.on_split(upper, lower)
    journal.on_split(other_upper, other_lower)  # never published: nothing to journal
    assert upper.published_by == "p" and other_upper.published_by is None
    assert journal.adopted_by_producer() == {"p": (lower, upper)}


def test_the_journal_views_are_read_only_snapshots():
    journal, (a, b) = RoundJournal(), nodes(2)
    journal.add_pending("p", a)
    pending = journal.pending_by_producer()
    with pytest.raises(TypeError):
        pending["q"] = (b,)  # type: ignore[index]
    journal.add_pending("p", b)
    assert pending == {"p": (a,)}  # a snapshot: later entries do not show
    assert journal.pending_by_producer() == {"p": (a, b)} and journal.adopted_by_producer() == {}
