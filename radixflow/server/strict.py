"""How request bodies are checked: strict types, valid Unicode, and known fields the server refuses.

Strict types: a JSON string is not a number, ``true`` is not 1, and ``1.0`` is not an integer
(pydantic's strict mode); an integer is still a number (``"temperature": 1``). Non-finite numbers
(``NaN``, ``Infinity``, ``1e999``, which Python's JSON parser accepts) are refused.

Valid Unicode: JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); such a string has no UTF-8
form, so the tokenizer cannot take it. Every field is checked, nested ones included, and so are
the fields nobody declared (ignored, but not their Unicode). The body itself must be UTF-8
(`encoding_problem`): Python's JSON parser would take UTF-16 and UTF-32 as well.

Refused fields: a known OpenAI or vLLM field asking for something the server does not do is a 400
naming it, unless its value asks for nothing (its default, or a listed no-op such as ``tools: []``).
Fields nobody declared are ignored, as OpenAI clients send many; on a route of RadixFlow's own
(``UNKNOWN_REFUSED``: /v1/score, which no OpenAI client sends to) they are a 400 naming them, as a
``score --input`` line's are: a misspelt ``cache_salt`` would share a namespace unsaid.

Each failure is a pydantic error located at its field, so the 400's ``param`` is that field.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

SURROGATE = "surrogate"  # pydantic error types raised here (errors.py turns them into one line)
UNSUPPORTED = "unsupported"
INVALID = "invalid"  # a value a field's own check refuses: the message follows the field's name
UNKNOWN = "unknown_field"  # a field nobody declared, on a body that refuses them (`UNKNOWN_REFUSED`)


@dataclass(frozen=True)
class Refused:
    """A field the server knows and does not implement: why (one line that reads after the field's
    name), and the values that ask for nothing (null always does)."""

    why: str
    no_ops: tuple[Any, ...] = ()

    def accepts(self, value: Any) -> bool:
        return value is None or any(same_json(value, ok) for ok in self.no_ops)


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: ``false`` is not ``0`` (as Python's ``==`` has it), ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class StrictBody(BaseModel):
    """A request body: strict types, finite numbers, valid Unicode; ``REFUSED`` fields refused."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore")
    REFUSED: ClassVar[dict[str, Refused]] = {}
    UNKNOWN_REFUSED: ClassVar[bool] = False  # True: a field nobody declared is a 400, not ignored

    @model_validator(mode="before")
    @classmethod
    def _check_undeclared(cls, data: Any) -> Any:
        """A lone surrogate in a field nobody declared is refused too (declared ones: `_check`)."""
        if not isinstance(data, dict):
            return data
        for key, value in data.items():
            if key in cls.model_fields:
                continue
            bad_name = _first_surrogate(key)
            if bad_name is not None:  # not named in the answer: it has no UTF-8 form
                raise _surrogate_error("a field name", None, bad_name)
            where = surrogate_at(value)
            if where is not None:
                raise _surrogate_error(f"{key}{where[0]}", key, where[1])
            if cls.UNKNOWN_REFUSED:
                known = ", ".join(f for f in cls.model_fields if f not in cls.REFUSED)
                why = f"unknown field {key!r} (known: {known})"  # a `score --input` line's words
                raise PydanticCustomError(UNKNOWN, "{why}", {"why": why, "param": key})
        return data

    @field_validator("*", mode="after")
    @classmethod
    def _check(cls, value: Any, info: ValidationInfo) -> Any:
        refused = cls.REFUSED.get(info.field_name or "")
        if refused is not None and not refused.accepts(value):
            raise PydanticCustomError(UNSUPPORTED, "{why}", {"why": refused.why})
        where = surrogate_at(value)
        if where is not None:
            path, char = where
            # errors.py adds ``path`` (where inside the field) to the field's name
            raise PydanticCustomError(
                SURROGATE,
                "contains a lone UTF-16 surrogate ({char}), which is not valid Unicode",
                {"path": path, "char": f"\\u{ord(char):04x}"},
            )
        return value


def declaring(name: str, base: type[StrictBody], fields: dict[str, Refused]) -> type[StrictBody]:
    """``base`` plus each refused field as an optional field of any type: declared, so a request
    that sets it is seen (and refused) instead of having the field ignored."""
    return create_model(name, __base__=base, **{f: (Any, None) for f in fields})  # type: ignore[call-overload]


def _surrogate_error(path: str, param: str | None, char: str) -> PydanticCustomError:
    """The error for a lone surrogate in a field nobody declared: at the body's top level, so the
    path (``extra[0].x``) and the param (``extra``) travel in its context for errors.py."""
    return PydanticCustomError(
        SURROGATE,
        "contains a lone UTF-16 surrogate ({char}), which is not valid Unicode",
        {"path": path, "param": param, "char": f"\\u{ord(char):04x}"},
    )


def encoding_problem(body: bytes) -> str | None:
    """Why ``body`` is not JSON in UTF-8 (RFC 8259 asks for UTF-8; a NUL byte is never in UTF-8
    JSON but always in UTF-16 or UTF-32 JSON); None when it is. Pure."""
    if b"\x00" in body:
        return "the request body must be JSON in UTF-8; it holds NUL bytes (UTF-16 or UTF-32?)"
    if body.isascii():  # the common case, without decoding a 4 MB body twice
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"the request body must be JSON in UTF-8; byte {e.start} is not UTF-8"
    return None


def surrogate_at(value: Any, path: str = "") -> tuple[str, str] | None:
    """Where the first lone surrogate in ``value`` (strings, dict keys, nested lists) is: its path
    inside the field (``[0].content``) and the character; None when there is none.

    Walked with a stack of the containers it is inside, not by recursion: Python's JSON parser
    takes a body nested nearly as deep as the recursion limit, and this runs deeper in the stack.
    Each item comes with its label (a list's index, a dict's key, None for ``value`` itself); the
    path is spelled from the labels on the stack only for the surrogate found."""
    walks: list[tuple[Any, Iterator[tuple[Any, Any]]]] = [(None, iter([(None, value)]))]
    while walks:
        for label, item in walks[-1][1]:
            found = _surrogate_in(path, walks, label, item)
            if found is not None:
                return found
            inside = _items(item) if isinstance(item, dict | list | tuple | BaseModel) else None
            if inside is not None:
                walks.append((label, inside))
                break  # the container first; this one's items resume after it
        else:
            walks.pop()
    return None


def _surrogate_in(path: str, walks: list[tuple[Any, Any]], label: Any, item: Any) -> tuple[str, str] | None:
    """`surrogate_at`'s answer where ``label`` or the string ``item`` holds a lone surrogate
    (inside ``walks``); None where neither does, or ``item`` is not a string."""
    if isinstance(label, str):  # a dict's key, at the dict's own path
        bad = _first_surrogate(label)
        if bad is not None:
            return _spelled(path, walks), bad
    if isinstance(item, str):
        bad = _first_surrogate(item)
        if bad is not None:
            return _spelled(path, walks, label), bad
    return None


def _items(value: Any) -> Iterator[tuple[Any, Any]] | None:
    """What ``value`` holds, with their labels: a dict's keys, a list's indices; None for a list
    of numbers (token ids: nothing to walk)."""
    if isinstance(value, BaseModel):
        value = value.__dict__
    if isinstance(value, dict):
        return iter(value.items())
    return None if _all_numbers(value) else enumerate(value)


def _spelled(path: str, walks: list[tuple[Any, Any]], label: Any = None) -> str:
    """``path`` followed by the labels of the containers walked into, then ``label``: ``[0]``
    for an index, ``.key`` for a key."""
    labels = [at for at, _ in walks[1:]] + [label]
    return path + "".join(f"[{at}]" if isinstance(at, int) else f".{at}" for at in labels if at is not None)


def _first_surrogate(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return text[e.start]
    return None


def _all_numbers(items: Sequence[Any]) -> bool:
    # token-id lists can be a million long: skip them in one pass
    return all(type(x) is int or type(x) is float for x in items)
