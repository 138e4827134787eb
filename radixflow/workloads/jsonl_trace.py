"""JSONL traces: one request per line, written and read back exactly."""

from __future__ import annotations

import gc
import io
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from radixflow.jsonl import STRAY_BOM, first_line_kind, json_object
from radixflow.scheduler.request import Request
from radixflow.workloads.candidates import MAX_ARRIVAL_S, MAX_WORKLOAD_REQUESTS, MAX_WORKLOAD_TOKENS
from radixflow.workloads.workload import CANDIDATE, RequestTag, Workload


class TraceError(ValueError):
    pass


def write_trace(path: str | Path, workload: Workload) -> None:
    with open(path, "w") as f:
        f.write(trace_text(workload))


def trace_text(workload: Workload) -> str:
    """The trace of ``workload``: one JSON line per request."""
    rows = []
    for r in workload.requests:
        tag = workload.tag(r)
        row = {
            "id": r.id,
            "namespace": r.namespace,
            "arrival_s": r.arrival_s,
            "group": tag.group,
            "kind": tag.kind,
            "prompt": list(r.prompt),
        }
        rows.append(json.dumps(row) + "\n")
    return "".join(rows)


FIELDS = ("id", "namespace", "arrival_s", "group", "kind", "prompt")
REQUIRED = ("id", "prompt")
ROUND_TRACE_FIELDS = {"policy", "trial", "index", "chunks"}  # a `bench --round-trace` row holds these


def read_trace(
    path: str | Path, max_tokens: int = MAX_WORKLOAD_TOKENS, max_requests: int = MAX_WORKLOAD_REQUESTS
) -> Workload:
    """Parse a UTF-8 JSONL trace, line by line; a line without ``group`` or ``kind`` is tagged as
    a candidate in no group.

    A malformed line raises `TraceError` naming the file and line number; so does a trace whose
    prompts hold more than ``max_tokens`` tokens together, or that holds more than
    ``max_requests`` requests (a generated workload's limit: the token limit alone let through
    33M one-token requests, tens of GB of objects), each found without reading the rest.
    """
    with _no_cycle_collection():
        return _read(path, max_tokens, max_requests)


def _read(path: str | Path, max_tokens: int, max_requests: int) -> Workload:
    out: list[Request] = []
    tags: dict[str, RequestTag] = {}
    tokens = 0
    try:
        for where, line in _lines(path):
            if not line.strip():
                continue
            if not out:
                _not_another_trace(line, where)
            if line.startswith("\ufeff"):  # the first line's is gone (`_decode`)
                raise TraceError(f"{where}: {STRAY_BOM}")
            req, tag = _parse(line, where)
            if req.id in tags:
                raise TraceError(f"{where}: duplicate request id {req.id!r}")
            tokens += len(req.prompt)
            if tokens > max_tokens:
                raise TraceError(f"{where}: the trace exceeds the limit of {max_tokens} prompt tokens")
            if len(out) >= max_requests:
                raise TraceError(f"{where}: the trace exceeds the limit of {max_requests} requests")
            tags[req.id] = tag
            out.append(req)
    except OSError as e:
        raise TraceError(f"{path}: cannot read trace ({e.strerror or e})") from None
    if not out:
        raise TraceError(f"{path}: trace has no requests")
    return Workload(out, tags)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cycle collector paused: each line's row, prompt and request set it off, and it walked
    every request read so far (a quarter of a 200k-line trace's load). Reading makes no cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _lines(path: str | Path) -> Iterator[tuple[str, str]]:
    """("file:line", text) for each line, decoded one line at a time (exact line numbers). A
    line ends as text mode ends it (and `cli.lines_out.read_input`, for the other JSONL inputs):
    at a newline, a carriage return and a newline, or a lone carriage return (in JSON one can
    only stand between values). The bytes are split as Latin-1 text, one character a byte, so
    that a lone carriage return ends a line as it is read (binary files split at newlines only:
    a trace of lone carriage returns was read whole into memory), and each line is then
    decoded as UTF-8 on its own."""
    with io.TextIOWrapper(open(path, "rb"), encoding="latin-1", newline="") as f:
        for lineno, line in enumerate(f, 1):
            raw = line.rstrip("\r\n").encode("latin-1")
            yield f"{path}:{lineno}", _decode(raw, path, lineno, first=lineno == 1)


def _decode(raw: bytes, path: str | Path, lineno: int, first: bool) -> str:
    """``raw``, line ``lineno`` without its line end, as text; a byte that is not UTF-8 is named
    by its line and column."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        kind = first_line_kind(raw) if first else None
        if kind is not None:
            raise TraceError(f"{path}:{lineno}: not UTF-8 text ({kind})") from None
        raise TraceError(
            f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
            "a trace is UTF-8 JSON Lines"
        ) from None
    return text.removeprefix("\ufeff") if first else text


def _string(row: dict[str, object], key: str, default: str | None, where: str) -> str:
    """A non-empty string of Unicode text: JSON's escapes can spell a lone surrogate, which is no
    character (it cannot be printed or written as UTF-8)."""
    value = row.get(key, default)
    if not isinstance(value, str) or not value:
        raise TraceError(f"{where}: {key!r} must be a non-empty string, got {json.dumps(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TraceError(f"{where}: {key!r} must be Unicode text, got {json.dumps(value)}") from None
    return value


def _arrival(value: object, where: str) -> float:
    """``arrival_s`` as a float: a number, finite, not negative, at most `MAX_ARRIVAL_S`. bool is
    an int in Python, NaN and Infinity parse as floats, and an integer past a float's range
    overflows: all are refused. -0.0 is read as 0.0 (it is not below 0, and was written back as
    -0.0)."""
    try:
        number = float(value) if type(value) in (int, float) else math.nan  # type: ignore[arg-type]
    except OverflowError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise TraceError(f"{where}: 'arrival_s' must be a finite number >= 0, got {json.dumps(value)}")
    if number > MAX_ARRIVAL_S:
        raise TraceError(
            f"{where}: 'arrival_s' must be at most {MAX_ARRIVAL_S} (seconds from the run's start), "
            f"got {json.dumps(value)}"
        )
    return number + 0.0  # -0.0 + 0.0 is 0.0


def _not_another_trace(first: str, where: str) -> None:
    """Refuse `bench`'s other outputs by their first non-blank line, saying what they are: the
    dependency trace and the ``--json`` results are JSON, not JSON Lines (their first line alone
    does not parse), as is an indented array of requests, and a round trace's rows have none of
    a request's fields."""
    if first.lstrip().startswith('{"displayTimeUnit"'):
        what = "a dependency trace (--trace-out)"
    elif first.strip() == "{":  # an indented document: its first line is its opening brace alone
        what = "a JSON document over several lines, as --json writes"
    elif first.strip() == "[":  # an indented list of requests (json.dump(rows, f, indent=2))
        what = "a JSON array over several lines"
    else:
        try:
            row = json_object(first, "")
        except ValueError:  # `_parse` says why
            return
        if not row.keys() >= ROUND_TRACE_FIELDS:
            return
        what = "a round trace (--round-trace)"
    raise TraceError(f"{where}: {what}, not a workload trace (one request a line, as --write-trace writes)")


def _parse(line: str, where: str) -> tuple[Request, RequestTag]:
    try:
        row = json_object(line, ", ".join(FIELDS), unique=True)
    except ValueError as e:
        raise TraceError(f"{where}: {e}") from None
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    missing = next((key for key in REQUIRED if key not in row), None)
    if missing is not None:  # not "got null": the line holds no such value
        raise TraceError(f"{where}: {missing!r} is missing (a request needs 'id' and 'prompt')")
    prompt = _prompt(row["prompt"], where)
    arrival = _arrival(row.get("arrival_s", 0.0), where)
    rid = _string(row, "id", None, where)
    group = row.get("group")
    if group is not None and type(group) is not int:
        raise TraceError(f"{where}: 'group' must be an integer or null, got {_shown(group)}")
    request = Request(
        id=rid,
        prompt=prompt,
        namespace=_string(row, "namespace", "default", where),
        arrival_s=arrival,
    )
    return request, RequestTag(group=group, kind=_string(row, "kind", CANDIDATE, where))


def _prompt(value: object, where: str) -> tuple[int, ...]:
    """The token ids; a value that is none says what it got: text where ids go, or the first
    token that is no integer and its index (in a prompt of thousands)."""
    needs = f"{where}: 'prompt' must be a non-empty list of integer token ids, got"
    if not isinstance(value, list) or not value:
        raise TraceError(f"{needs} {_shown(value)}")
    bad = next((i for i, t in enumerate(value) if type(t) is not int), None)  # bool is no token id
    if bad is not None:
        raise TraceError(f"{needs} {_shown(value[bad])} at index {bad}")
    return tuple(value)


def _shown(value: object) -> str:
    """``value`` as JSON for a message, cut to 40 characters: a prompt given as text may be a
    whole document."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:40] + "…"
