"""`radixflow score --input FILE`'s lines, read and checked before the model loads: one
``{"context": ..., "candidates": [...]}`` per line (a context is text, token ids or a list of chat
messages, which may come as ``"messages"`` instead, as /v1/score takes them; a candidate is text
or token ids), plus an optional ``"id"`` echoed back and ``"add_special_tokens"``. A line of
another shape is refused naming it, in /v1/score's words for the same body."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from radixflow.cli.command import UsageError
from radixflow.cli.lines_out import read_input
from radixflow.generation.scoring import specials_asked
from radixflow.jsonl import json_object, numbered_lines
from radixflow.problems import SHOWN_CHARS

FIELDS = ("id", "context", "messages", "candidates", "add_special_tokens")  # of an input line


@dataclass(frozen=True)
class ScoreJob:
    """One input line: where it was, its id (if any), its context and candidates as given."""

    line: int  # 1-based line number in the file
    id: Any
    context: Any
    candidates: list[Any]
    add_special_tokens: bool | None = None  # None: not given (a text context gets them)


def read_jobs(path: Path) -> list[ScoreJob]:
    """Every non-blank line of ``path`` as a `ScoreJob`; `UsageError` naming the file and the
    line for one that is not a JSON object with a ``context`` and a non-empty list of
    ``candidates`` (as run-batch and the reader's own errors name them)."""
    try:
        jobs = [_job(n, line) for n, line in numbered_lines(read_input(path))]
    except ValueError as e:
        raise UsageError(f"--input {path}: {e}") from None
    if not jobs:
        raise UsageError(f"--input {path}: no lines to score")
    return jobs


def _job(n: int, line: str) -> ScoreJob:
    """Line ``n`` as a `ScoreJob`; ValueError naming the line where it is none."""
    try:
        row = json_object(line, "context, candidates", unique=True)  # JSON keeps a key's last value
    except ValueError as e:
        raise ValueError(f"line {n}: {e}") from None
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise ValueError(f"line {n}: unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    try:
        context = _context(row)
        special = _specials(row, context)
    except ValueError as e:
        raise ValueError(f"line {n}: {e}") from None
    candidates = row.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise ValueError(f"line {n}: {_candidates_problem(row)}")
    if not _is_json(row.get("id")):
        raise ValueError(f"line {n}: id: NaN and Infinity are not JSON (the id is echoed back)")
    return ScoreJob(n, row.get("id"), context, candidates, special)


def _specials(row: dict[str, Any], context: Any) -> bool | None:
    """A line's ``add_special_tokens`` (None: not given), refused as /v1/score refuses it: a
    value that is no bool (null too), or true beside a conversation (`specials_asked`)."""
    if "add_special_tokens" not in row:
        return None
    given = row["add_special_tokens"]
    if given is None:
        raise ValueError("add_special_tokens: must be true or false, got null")
    specials_asked(context, given, show=_json_shown)
    return given


def _json_shown(value: Any) -> str:
    """``value`` as JSON spells it, cut where it is long (a line's value quoted back)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def job_record(job: ScoreJob) -> dict[str, Any]:
    """What a partial file's record holds of ``job`` (`run_record`): its fields, but an
    ``add_special_tokens`` not given, so a file without one is recorded as before it was read."""
    fields = asdict(job)
    if job.add_special_tokens is None:
        del fields["add_special_tokens"]
    return fields


def _is_json(value: Any) -> bool:
    """Whether ``value`` can be written back as JSON: Python's reader takes NaN and Infinity,
    which its writer then puts in the output line, and a strict reader refuses that line."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def _context(row: dict[str, Any]) -> Any:
    """A line's context: its ``context``, or its ``messages`` (a conversation, as /v1/score takes
    it); ValueError for neither or both (null is neither), or a value of another shape, in
    /v1/score's words for the same body."""
    given = [key for key in ("context", "messages") if row.get(key) is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of context and messages")
    if "messages" in given:  # a list of token ids there would be scored as ids: refused by name
        return _messages(row["messages"])
    # a lone message or a number, alone in its call, would read to score_many as all the contexts
    # at once (one conversation, one token-id list); the rest of a context's shape is its to check
    if not isinstance(row["context"], str | list):
        shape = "a string, a list of token ids or a list of messages"  # `LLM.score`'s words
        raise ValueError(f"context must be {shape}, got {_json_shown(row['context'])}")
    return row["context"]


def _messages(messages: Any) -> list[Any]:
    """A line's ``messages``, a non-empty list of objects; ValueError as /v1/score says it."""
    if not isinstance(messages, list):
        raise ValueError(f"messages: must be a list, got {_json_shown(messages)}")
    if not messages:
        raise ValueError("messages must not be empty")
    bad = next((i for i, m in enumerate(messages) if not isinstance(m, dict)), None)
    if bad is not None:
        raise ValueError(f"messages[{bad}]: must be an object, got {_json_shown(messages[bad])}")
    return messages


def _candidates_problem(row: dict[str, Any]) -> str:
    """Why a line's ``candidates`` are no non-empty list, as /v1/score says it."""
    if "candidates" not in row:
        return "missing required parameter: candidates"
    if row["candidates"] == []:
        return "candidates: none given"
    return f"candidates must be a list of strings or token-id lists, got {_json_shown(row['candidates'])}"
