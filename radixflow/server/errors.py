"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the status code.

Every user mistake is a 400 with a one-line message, never a traceback; only a failure of the
server itself is a 500.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from radixflow.generation.params import STOP_SHAPE
from radixflow.generation.tokenizer import TextTooLong
from radixflow.options.numerals import Written
from radixflow.problems import NOT_A_NUMBER, NOT_AN_INTEGER, NOT_FINITE, Problem, shown
from radixflow.scheduler.sampling_checks import bias_name
from radixflow.server.json_body import as_typed
from radixflow.server.strict import INVALID, SURROGATE, UNKNOWN, UNSUPPORTED

log = logging.getLogger("radixflow.server")

_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
}

# the code of a refusal by the server, whatever refused it (the queue, the drain, a failed engine,
# one server or a fleet): a client that backs off and retries reads it, not the message
STATUS_CODES = {429: "queue_full", 503: "service_unavailable"}


# pydantic's type errors, said as the engine's own checks say them
_SAID = {
    "int_type": NOT_AN_INTEGER,
    "float_type": NOT_A_NUMBER,
    "finite_number": NOT_FINITE,
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",  # a nested body (stream_options) sent as a list, a number
}

# a logit_bias key: decimal ASCII digits, few enough for int() (a negative id is then refused as
# outside the vocabulary, as a long one would be)
TOKEN_ID_KEY = re.compile(r"-?[0-9]{1,18}")

# parameters that take several shapes, and how to say which
UNION_SHAPES = {
    "prompt": "a string, a list of token ids, a list of strings or a list of token-id lists",
    "context": "a string or a list of token ids",
    "candidates": "a list of strings or token-id lists",
}
# of those, a list whose items are each a union (pydantic's path names the item first)
ITEM_UNIONS = {"candidates"}
# sampling fields that take several shapes, said in `SamplingParams`' words (its check's)
SAMPLING_SHAPES = {"stop": STOP_SHAPE}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code = code if code is not None else STATUS_CODES.get(status)

    @classmethod
    def from_problem(cls, problem: Problem, item: str | None = None, status: int = 400) -> ApiError:
        """A problem found by the engine's own checks: its ``param`` goes into the body as it is;
        ``item`` names which of several (``prompt 1``)."""
        return cls(status, str(problem) if item is None else problem.of_item(item), problem.param)

    def respelled(self, param: str, sent: str) -> ApiError:
        """This error with ``param`` under the name the client ``sent`` for it, as its subject or
        named in its message (the engine's checks say ``max_tokens`` of what chat clients send as
        ``max_completion_tokens``, and ``min_tokens``' limit names it)."""
        if sent == param or not re.search(rf"\b{re.escape(param)}\b", self.message):
            return self
        message = re.sub(rf"\b{re.escape(param)}\b", sent, self.message)
        return ApiError(self.status, message, sent if self.param == param else self.param, self.code)

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = code if code is not None else STATUS_CODES.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def validation_message(
    exc: RequestValidationError, content_type: str | None = None, scope: Mapping[str, Any] | None = None
) -> tuple[str, str | None]:
    """One line for the first problem pydantic found, and the parameter it concerns;
    ``content_type``: the request's header (FastAPI parses a body as JSON only when it says so);
    ``scope``: the request's, where its body is kept (a number quoted as typed, `as_typed`)."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    if scope is not None and "input" in first:
        loc = [p for p in first.get("loc", ()) if p != "body"]
        first = {**first, "input": as_typed(scope, loc, first["input"])}
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return f"malformed JSON body: {detail}".rstrip(": "), None
    loc = [p for p in first.get("loc", ()) if p != "body"]
    kind = first.get("type")
    if not loc and kind == SURROGATE:  # in a field nobody declared: the path names it
        ctx = first.get("ctx", {})
        return f"{ctx.get('path')}: {first.get('msg')}", ctx.get("param")
    if not loc and kind == UNKNOWN:  # a field nobody declared, on a route that refuses them
        return str(first.get("msg")), first.get("ctx", {}).get("param")
    if not loc and isinstance(first.get("input"), bytes):  # left unparsed: not labelled JSON
        why = "the request body must be sent as JSON (Content-Type: application/json)"
        return f"{why}, got Content-Type: {content_type or 'none'}", None
    if not loc:
        return "the request body must be a JSON object", None
    param, where = str(loc[0]), _path(loc)
    if kind == "missing":
        return f"missing required parameter: {where}", param
    if kind in (SURROGATE, UNSUPPORTED, INVALID):  # our own checks: the message is written to follow the name
        return f"{where}{first.get('ctx', {}).get('path', '')}: {first.get('msg')}", param
    if param in SAMPLING_SHAPES:  # one line for the union, as the engine's check says it
        return f"{param}: {SAMPLING_SHAPES[param]}, got {_shown(_sent(exc, param, first))}", param
    # pydantic reports each branch of the union (its name next in the path); one line says it
    # better. The same name may be no union elsewhere (/tokenize's prompt is text only)
    if param in ITEM_UNIONS or (param in UNION_SHAPES and len(loc) > 1 and isinstance(loc[1], str)):
        return f"{param} must be {UNION_SHAPES[param]}, got {_shown(_sent(exc, param, first))}", param
    said, value = _SAID.get(str(kind), first.get("msg")), first.get("input")
    got = _shown(value)
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        # an integer past any float: said as every other door says it (`number_problem`)
        said, got = NOT_FINITE, shown(value)
    if param == "logit_bias" and len(loc) == 2 and TOKEN_ID_KEY.fullmatch(str(loc[1])):
        # one token's bias, named as `SamplingParams` (the Python API, the CLI) names it
        return f"logit_bias: {bias_name(int(loc[1]))} {said}, got {got}", param
    return f"{where}: {said}, got {got}", param


def _sent(exc: RequestValidationError, param: str, first: dict[str, Any]) -> Any:
    """The value the client sent for ``param``: a union's message says it of the whole field,
    where pydantic's first error may hold only the item it tripped on (``1`` of ``[1]``)."""
    body = exc.body
    return body[param] if isinstance(body, dict) and param in body else first.get("input")


def _path(loc: list[Any]) -> str:
    """A field's location as the server's other messages spell it: ``messages[0].content``
    (pydantic's own is ``messages.0.content``)."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).removeprefix(".")


def _shown(value: Any) -> str:
    """The bad value as JSON, cut to a readable length (it may be a 4 MB prompt)."""
    if isinstance(value, list | dict) and len(value) > 8:
        return f"{'a list' if isinstance(value, list) else 'an object'} of {len(value)} items"
    if isinstance(value, str) and len(value) > 40:
        value = value[:40]
    if isinstance(value, Written):  # as typed (1e400): JSON spells it "Infinity"
        return repr(value)
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):  # not a JSON value after all
        text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


def routing_message(request: Request, exc: HTTPException) -> str | None:
    """What a 404 or 405 from routing says: the method and path asked for, and where the route
    is (an openai client whose ``base_url`` lacks ``/v1`` posts to ``/chat/completions``); None
    for any other status."""
    asked = f"{request.method} {request.url.path}"
    if exc.status_code == 405:
        return f"{asked}: this route takes {allowed_methods(request) or 'another method'}"
    if exc.status_code != 404:
        return None
    path = request.url.path
    # a slash too many (no redirect: `app.create_app`) or a base_url without /v1, or both
    tried = (path.rstrip("/"), f"/v1{path}", f"/v1{path}".rstrip("/"))
    there = next((p for p in tried if p and p != path and _routed(request, p)), None)
    hint = f"; did you mean {there}?" if there else ""
    return f"no route {asked}{hint}"


def _routed(request: Request, path: str) -> bool:
    """Whether some route of ``request``'s app takes ``path`` (with any method)."""
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] is not Match.NONE for route in request.app.router.routes)


# the methods a 405's Allow may list: what any route here takes
_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> str:
    """The methods the routes at ``request``'s path take, as a 405's ``Allow`` lists them.
    Starlette's names only the first route there, and a GET route's HEAD is a route of its own
    (`app.answer_head_as_get`): its 405 said ``Allow: GET`` of a path that answers HEAD. Each
    method is tried on the app's routes (included routers nest theirs, as FastAPI versions do)."""
    routes = request.app.router.routes
    taken = [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
    return ", ".join(taken)


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(TextTooLong)
    async def _too_long(_: Request, exc: TextTooLong) -> JSONResponse:
        return ApiError.from_problem(exc.problem).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc, request.headers.get("content-type"), request.scope)
        return ApiError(400, message, param).response()

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        message = routing_message(request, exc) or str(exc.detail)
        response = ApiError(exc.status_code, message).response()
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # as HTTP asks of a 405: every method the path takes
            response.headers["allow"] = allowed_methods(request) or response.headers.get("allow", "")
        return response

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return ApiError(500, f"internal server error: {type(exc).__name__}").response()
