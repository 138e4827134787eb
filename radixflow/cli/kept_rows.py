"""Going on from the rows a file command's earlier run left in ``OUTPUT.partial`` (``score
--input``, ``run-batch``): `kept_rows` reads them, `run_record` says what a run's rows are computed
under (its input and the options that change a row, `ROW_OPTIONS`), and `go_on_from` keeps them
only when they were computed under this run's record; otherwise `refuse_partial` names
``--restart``. Where the lines go is `cli/lines_out.py`'s job."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from radixflow.cli.args import warn
from radixflow.cli.command import UsageError
from radixflow.files import written_in_place
from radixflow.jsonl import json_object, json_value
from radixflow.models.zoo import model_key
from radixflow.options.engine_options import EngineOptions
from radixflow.options.flags import flag_spellings
from radixflow.partial_lines import KeptLines, PartialLines, kept_lines, record_path, recorded
from radixflow.problems import counted

T = TypeVar("T")


@dataclass(frozen=True)
class KeptRows:
    """The rows an earlier run of the command left in ``OUTPUT.partial``: its whole lines
    (`KeptLines`, for `write_lines` to go on after) and each as read."""

    partial: Path
    lines: KeptLines
    rows: list[dict[str, Any]]
    record: str  # what this run computes its rows under (`run_record`): theirs must be the same

    def only(self, keep: Callable[[dict[str, Any]], bool]) -> KeptRows:
        """The rows ``keep`` keeps (the others run again), their lines written anew."""
        return self._flagged([keep(row) for row in self.rows])

    def first(self, n: int) -> KeptRows:
        """The first ``n`` rows (the others run again), their lines written anew."""
        return self._flagged([i < n for i in range(len(self.rows))])

    def _flagged(self, flags: list[bool]) -> KeptRows:
        rows = [row for row, kept in zip(self.rows, flags, strict=True) if kept]
        return KeptRows(self.partial, self.lines.only(flags), rows, self.record)


# The engine options that change what a run computes (its rows), not only how fast: the model
# and its numerics. A partial file records them, by flag, so a run that goes on from it under
# others is refused (the cache, the scheduler and the thread plan never change a row).
ROW_OPTIONS = ("runner", "device", "dtype", "matmul", "kernels")


# The engine options that size the cache and a round: they change no computed row, but whether a
# line fits at all ('does not fit in the KV cache: ... (kv_blocks)'), so a refusal kept from a run
# under others may not be this run's (`same_limits`)
ROW_LIMITS = ("token_budget", "block_size", "kv_blocks", "state_slots", "cache_memory")


def row_options(options: EngineOptions, names: tuple[str, ...] = ROW_OPTIONS) -> dict[str, Any]:
    """``MODEL`` (a local checkpoint by its resolved path: ``./ck`` goes on from ``ck``'s rows)
    and the ``names`` of ``options``, by flag (`run_record`'s ``options``)."""
    spell = flag_spellings(EngineOptions)
    return {"MODEL": model_key(options.model)} | {spell[name]: getattr(options, name) for name in names}


def run_record(
    command: str, inputs: Iterable[Any], options: dict[str, Any], limits: dict[str, Any] | None = None
) -> str:
    """What a run's rows are computed under, as its partial file records it (`PartialLines`):
    the command, a digest of its input as read (``inputs``, each JSON-ready: hashed one at a
    time, not as one string the size of the file), the ``options`` that change its rows and the
    ``limits`` that decide whether a line fits (`ROW_LIMITS`; by flag, as a user gives them)."""
    digest = hashlib.sha256()
    for item in inputs:
        digest.update(json.dumps(item).encode("utf-8", "surrogatepass") + b"\n")
    record = {"command": command, "input": digest.hexdigest(), "options": options, "limits": limits}
    return json.dumps(record)


def row_limits(options: EngineOptions) -> dict[str, Any]:
    """`ROW_LIMITS` of ``options``, by flag (`run_record`'s ``limits``)."""
    spell = flag_spellings(EngineOptions)
    return {spell[name]: getattr(options, name) for name in ROW_LIMITS}


def same_limits(kept: KeptRows) -> bool:
    """Whether the ``kept`` rows were computed under this run's `ROW_LIMITS` (False where their
    record does not say: a refusal among them is then not known to be this run's)."""
    try:
        before = json_value(recorded(kept.partial) or "")
    except ValueError:
        return False
    return isinstance(before, dict) and before.get("limits") == json.loads(kept.record)["limits"]


def _unlike(partial: Path, record: str) -> str | None:
    """Why the rows of ``partial`` are not what a run under ``record`` computes, by what its
    record says (None: they are)."""
    try:
        before = json_value(recorded(partial) or "")
    except ValueError:
        before = None
    if not isinstance(before, dict) or not isinstance(before.get("options"), dict):
        where = record_path(partial).name
        return f"what its rows were computed under is not recorded ({where} is missing or unreadable)"
    now = json.loads(record)
    if before.get("command") != now["command"]:
        return f"it was written by radixflow {before.get('command')}, not {now['command']}"
    if before.get("input") != now["input"]:
        return "it was computed from another --input (the file has changed since, or is another one)"
    for name, value in now["options"].items():
        if name not in before["options"] or before["options"][name] != value:
            return f"it was computed with {name} {_shown(before['options'].get(name))}, not {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    """An option's value as a user types it (a string unquoted; not given: its default)."""
    return "(default)" if value is None else value if isinstance(value, str) else json.dumps(value)


def kept_rows(flag: str, path: Path | None, restart: bool, record: str) -> KeptRows | None:
    """The rows of ``path``'s partial file, which a run cut short left there, for the command
    to keep (None: there are none, or ``restart``, and the partial file is made fresh). A
    partial file that cannot be read, holds a line that is not a JSON object, or was computed
    under another ``record`` (`run_record`: another input, model or option that changes the
    rows) is one line naming it and ``--restart`` (`refuse_partial`). ``--restart`` where the
    lines have no partial file is a warning."""
    if path is None or written_in_place(path):
        if restart:  # the flag was given for something: say that it did nothing
            where = "without --output PATH" if path is None else f"--output {path} is written in place:"
            warn(f"--restart: no effect: {where} there is no partial file")
        return None
    if restart:
        return None
    partial = PartialLines(path).partial
    if partial.is_symlink() or not partial.is_file():  # not one a run left: made fresh as before
        return None
    try:
        lines = kept_lines(partial)
    except OSError as e:
        raise refuse_partial(flag, path, f"cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise refuse_partial(flag, path, "is not UTF-8 text: not this command's output") from None
    if not lines.lines:
        return None
    if not os.access(partial, os.W_OK):
        raise refuse_partial(flag, path, "cannot be written to (Permission denied)")
    rows = []
    for n, line in enumerate(lines.lines, 1):
        try:
            rows.append(json_object(line, "an output row"))
        except ValueError as e:
            raise refuse_partial(flag, path, f"line {n}: {e}") from None
    return KeptRows(partial, lines, rows, record)


def refuse_partial(flag: str, path: Path, why: str) -> UsageError:
    """The one line for a partial file whose rows cannot be kept: its name, why, and how to
    start over instead."""
    partial = PartialLines(path).partial
    return UsageError(
        f"{flag} {path}: cannot go on from its partial file {partial}: {why}; "
        "give --restart to start over (it removes that file)"
    )


SERVER_ERRORS = "of a server error (5xx)"  # the rows `go_on_from` drops, by default


def go_on_from(
    output: Path,
    kept: KeptRows,
    left: Callable[[], list[T]],
    failed: int,
    dropped: int = 0,
    dropped_as: str = SERVER_ERRORS,
) -> list[T]:
    """``left()``: the inputs the ``kept`` rows do not answer, said on stderr with
    ``failed``, the kept rows that are a line's failure, and ``dropped``, the rows among ``kept``
    that the command drops (`KeptRows.only`) and runs again (``dropped_as``: what they are).
    Rows computed under another record than ``kept.record`` (another command, input, model or
    option that changes them) are refused as `refuse_partial`, and then rows that are not this
    input's answers (``left()``'s ValueError)."""
    # the record first: it says why the rows differ (another command, input or option), where
    # a row of another command's file or an edited input said only "row 1: ... not in --input"
    why = _unlike(kept.partial, kept.record)
    if why is not None:
        raise refuse_partial("--output", output, why)
    try:
        rest = left()
    except ValueError as e:
        raise refuse_partial("--output", output, str(e)) from None
    say_kept(kept, len(rest), failed, dropped, dropped_as)
    return rest


def say_kept(
    kept: KeptRows, to_run: int, failed: int, dropped: int = 0, dropped_as: str = SERVER_ERRORS
) -> None:
    """One line on stderr: how many rows the run keeps (``failed`` of them a line's failure,
    which the exit status counts as a new one; ``dropped`` rows, ``dropped_as``, not), and how
    many lines it runs."""
    failures = f" ({failed} failed)" if failed else ""
    torn = " (a last line cut short is dropped, and run again)" if kept.lines.torn else ""
    errors = f", {counted(dropped, 'answer')} {dropped_as} dropped" if dropped else ""
    print(
        f"radixflow: going on from {kept.partial}: {counted(len(kept.rows) - dropped, 'row')} kept"
        f"{failures}{torn}{errors}, {counted(to_run, 'line')} to run",
        file=sys.stderr,
    )
