"""SetView: reads follow the set it views; nothing changes the set through it."""

from __future__ import annotations

from radixflow.cache.views import SetView


def test_reads_follow_the_underlying_set():
    items: set[int] = set()
    view = SetView(items)
    assert len(view) == 0 and 3 not in view and view == set()
    items.update({3, 5})
    assert 3 in view and len(view) == 2 and sorted(view) == [3, 5] and view == {3, 5}


def test_nothing_changes_the_set_through_the_view():
    items = {1, 2}
    view = SetView(items)
    for method in ("add", "discard", "remove", "pop", "clear", "update"):
        assert not hasattr(view, method)
    grown = view
    grown |= {9}  # rebinds the name to a new set: the view and the set are untouched
    assert items == {1, 2} and view == {1, 2} and grown == {1, 2, 9}


def test_set_operations_return_frozensets_in_either_order():
    view = SetView({1, 2, 3})
    assert view & {2, 9} == frozenset({2}) and isinstance(view & {2}, frozenset)
    assert {2, 9} & view == {2}  # a plain set on the left works too
    assert {0} | view == {0, 1, 2, 3} and view - {1} == {2, 3}
    assert not {7} & view
