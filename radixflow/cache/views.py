"""Read-only views the cache hands its neighbours, so they can read its accounting but not change it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Set
from typing import TypeVar

T = TypeVar("T")


class SetView(Set[T]):
    """A live, read-only view of a set: reads follow the set; nothing can change it through the view.

    Set operations (``&``, ``|``, ``-``) return new frozensets.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Set[T]) -> None:
        self._items = items

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"SetView({set(self._items)!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable[T]) -> frozenset[T]:
        return frozenset(it)
