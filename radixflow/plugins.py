"""Entries added from outside the package (docs/extending.md): `Registry`, the dict each option's
entries are found in by name, whose `register` refuses a name it has (assigning one replaces the
built-in entry without a word)."""

from __future__ import annotations

from typing import ClassVar, TypeVar

V = TypeVar("V")

# an experiment's variant is `policy@placement+eviction+admission`: a name holding one of these
# could never be named there
SEPARATORS = ("@", "+")


class Registry(dict[str, V]):
    """A plain dict of ``what``'s entries by name (read, iterated and assigned as any dict);
    `register` adds one under a name of its own. Every registry made is in `Registry.made`."""

    made: ClassVar[list[Registry[object]]] = []

    def __init__(self, what: str, entries: dict[str, V]) -> None:
        super().__init__(entries)
        self.what = what
        Registry.made.append(self)  # type: ignore[arg-type]

    def register(self, name: str, entry: V) -> V:
        """Adds ``entry`` as ``name`` and returns it; a ValueError, the registry unchanged, for a
        name it has already or one no door can spell."""
        why = self._refused(name)
        if why is not None:
            raise ValueError(f"{self.what} {name!r}{why}")
        self[name] = entry
        return entry

    def _refused(self, name: object) -> str | None:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            return ": a name is a non-empty string without spaces at its ends"
        if any(s in name for s in SEPARATORS):
            return ": a name holds no '@' nor '+' (an experiment's variant splits on them)"
        if name in self:
            was = self[name]
            called = getattr(was, "__qualname__", was if isinstance(was, str) else type(was).__qualname__)
            return f" is registered already ({called}): register yours under another name"
        return None
