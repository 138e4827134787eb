"""Request bodies parsed with pydantic-core's JSON parser, on the event loop, falling back to Python's.

FastAPI parses a JSON body with Python's ``json`` module on the event loop, before validation. A
body near ``--max-body-bytes`` then holds the loop several times longer than pydantic-core's
parser needs, and every other client waits behind it (a thread would not help: both parsers hold
the GIL for the whole body). pydantic-core's parser builds the same Python values for every body
it accepts; it refuses some that Python's takes (a lone UTF-16 surrogate escape, a leading BOM),
and for those, as for malformed JSON, Python's parser decides: so every body parses, or fails
with the same ``json.JSONDecodeError`` FastAPI turns into a 400, exactly as before.

The body is taken as `BodyLimit` hands it on (whole, in one message), not copied again: Starlette
joins a body's pieces and the empty one that ends them into a new object, a copy of megabytes
for a long body, on the event loop, that every other client waits behind.
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from fastapi.routing import APIRoute
from pydantic_core import from_json
from starlette.requests import Request
from starlette.responses import Response

from radixflow.jsonl import TOO_DEEP
from radixflow.options.numerals import Written, written_float

TOO_LONG_INTEGER = "an integer has more than {} digits"
BODY = "radixflow.json_body"  # the scope key a parsed body's bytes are kept under (`as_typed`)


def parse_json(body: bytes) -> Any:
    """``body``'s value, as ``json.loads`` gives it; raises what ``json.loads`` raises (a
    `json.JSONDecodeError` too for a body nested past Python's recursion limit, or holding an
    integer of more digits than Python reads, 4300: no field takes one near that long)."""
    try:
        return from_json(body, allow_inf_nan=True)  # NaN is the strict checks' to refuse, by field
    except ValueError:
        pass
    try:
        return json.loads(body)
    except RecursionError:  # FastAPI would answer "There was an error parsing the body"
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer past the digits Python reads: FastAPI's "error parsing the body"
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError(TOO_LONG_INTEGER.format(sys.get_int_max_str_digits()), text, 0) from None


class FastJsonRequest(Request):
    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            async with aclosing(self.stream()) as stream:
                pieces = [piece async for piece in stream if piece]
            self._body = pieces[0] if len(pieces) == 1 else b"".join(pieces)  # one piece: not copied
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self.scope[BODY] = body  # the error handler's own Request shares the scope, not this
            self._json = parse_json(body)
        return self._json


def as_typed(scope: Mapping[str, Any], loc: Sequence[Any], value: Any) -> Any:
    """``value``, found at ``loc`` in the request's body, as the client typed it where it is a
    number no float holds (``1e400``, which the parser reads as inf): a `Written`, so a refusal
    quotes it as a flag's or a TOML cell's does, not as ``Infinity``. The body is parsed again
    for it, on a refusal only; ``value`` itself where it is anything else."""
    if not (isinstance(value, float) and math.isinf(value)) or BODY not in scope:
        return value
    try:
        found = json.loads(scope[BODY], parse_float=written_float)
        for key in loc:
            found = found[key]
    except (ValueError, RecursionError, LookupError, TypeError):
        return value
    return found if isinstance(found, Written) else value


class FastJsonRoute(APIRoute):
    """A route whose JSON body is parsed by `parse_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(FastJsonRequest(request.scope, request.receive))

        return route


def typed_numbers(body: Any, dumps: Callable[[Any], bytes]) -> bytes:
    """``body`` encoded by ``dumps``, with each number no float holds written as it was typed
    (``1e400``, a `Written`: run-batch reads a line so), where Python's encoder writes
    ``Infinity``: the route then quotes it as it quotes one posted to serve. Each is encoded as
    a mark no text holds, then put back as typed."""
    marks: dict[str, str] = {}
    try:
        marked = _marked(body, marks, uuid.uuid4().hex)
    except RecursionError:  # a body nested near the limit: as Python writes it
        marked, marks = body, {}
    text = dumps(marked)
    for mark, typed in marks.items():
        text = text.replace(json.dumps(mark).encode(), typed.encode())
    return text


def _marked(value: Any, marks: dict[str, str], salt: str) -> Any:
    """``value`` with each `Written` in it replaced by a mark of its own (``marks``: mark -> text)."""
    if isinstance(value, Written):
        mark = f"written-{salt}-{len(marks)}"
        marks[mark] = value.text
        return mark
    if isinstance(value, dict):
        return {k: _marked(v, marks, salt) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, marks, salt) for v in value]
    return value
