"""Where a file command's JSON Lines come from (`read_input`) and its results go (`score --input`,
`run-batch`): standard output (no ``--output``, or ``-``), a device or pipe written in place
(``/dev/stdout``), or a file that the results replace only when the run completes
(`PartialLines`): until then they stream into ``OUTPUT.partial``, so a Ctrl-C or a failure
leaves the previous ``OUTPUT`` as it was, and the same command run again goes on from the rows
that file holds (`kept_rows`) unless told to ``--restart``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from radixflow.cli.args import warn
from radixflow.cli.command import UsageError
from radixflow.files import WholeLineFile, written_in_place
from radixflow.jsonl import json_object, read_text
from radixflow.options.engine_options import EngineOptions
from radixflow.options.flags import flag_spellings
from radixflow.partial_lines import (
    KeptLines,
    PartialHeld,
    PartialLines,
    PartialLock,
    kept_lines,
    record_path,
    recorded,
)
from radixflow.problems import counted

T = TypeVar("T")


def read_input(path: Path) -> str:
    """``--input``'s text (`jsonl.read_text`), its line ends read as text mode reads them (a lone
    carriage return too: in JSON one can only stand between values); a file that cannot be read,
    or holds a byte that is not UTF-8, is one line naming it (and the line and column of the byte)."""
    try:
        return read_text(path).replace("\r\n", "\n").replace("\r", "\n")
    except OSError as e:
        raise UsageError(f"--input: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"--input {path}: {e}") from None


def output_path(path: Path | None) -> Path | None:
    """``--output`` as given; None for standard output (none given, or ``-``)."""
    return None if path is None or str(path) == "-" else path


def check_partial(flag: str, path: Path | None, others: dict[str, Path | None]) -> None:
    """Fail before a long run, not after it, when ``path``'s partial file cannot be made fresh,
    or it or its record (`record_path`) is the file of one of the ``others`` (flag -> path): an
    input, which making it fresh would remove, or another output, which would be written into it
    and renamed away with it (``path`` itself is checked by `check_output_paths`)."""
    if path is None or written_in_place(path):
        return
    partial = PartialLines(path).partial
    why = None
    real = os.path.realpath  # Path.resolve raises RuntimeError on a symlink loop
    # its record is written and removed with it (`PartialLines`)
    ours = {real(partial): "its partial file", real(record_path(partial)): "its partial file's record"}
    for named, other in others.items():
        if other is not None and real(other) in ours:
            said = f"{ours[real(other)]} {other}"
            raise UsageError(f"cannot write {flag} {path}: {said}: the same file as {named}")
    if partial.is_dir():
        why = "it is a directory"
    elif partial.exists() or partial.is_symlink():  # an earlier run's (a link, even a broken one,
        # is itself removed): removed first, which its directory must allow
        why = None if os.access(partial.parent, os.W_OK | os.X_OK) else "Permission denied"
    else:
        try:
            with open(partial, "a"):
                pass
        except OSError as e:
            why = e.strerror or str(e)
        partial.unlink(missing_ok=True)
    if why is not None:
        raise UsageError(f"cannot write {flag} {path}: its partial file {partial}: {why}")


@contextlib.contextmanager
def claimed(flag: str, path: Path | None) -> Iterator[None]:
    """``path``'s partial file held for this run while the block runs (`PartialLock`), so that
    two runs for one output do not read and write one partial file: a run that finds it held is
    one line. Where the lines have no partial file (stdout, a device), there is nothing to hold."""
    if path is None or written_in_place(path):
        yield
        return
    lock = PartialLock(PartialLines(path).partial)
    try:
        lock.__enter__()
    except PartialHeld:
        raise UsageError(
            f"{flag} {path}: another run is writing it (it holds {lock.path} locked); "
            f"wait for it to end, or give another {flag}"
        ) from None
    except OSError as e:  # a directory in its place, a directory that cannot be written
        raise UsageError(
            f"cannot write {flag} {path}: its partial file's record {lock.path}: {e.strerror or e}"
        ) from None
    try:
        yield
    finally:
        lock.__exit__()


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
        flags = [keep(row) for row in self.rows]
        rows = [row for row, kept in zip(self.rows, flags, strict=True) if kept]
        return KeptRows(self.partial, self.lines.only(flags), rows, self.record)


# The engine options that change what a run computes (its rows), not only how fast: the model
# and its numerics. A partial file records them, by flag, so a run that goes on from it under
# others is refused (the cache, the scheduler and the thread plan never change a row).
ROW_OPTIONS = ("runner", "device", "dtype", "matmul", "kernels")


def row_options(options: EngineOptions, names: tuple[str, ...] = ROW_OPTIONS) -> dict[str, Any]:
    """``MODEL`` and the ``names`` of ``options``, by flag (`run_record`'s ``options``)."""
    spell = flag_spellings(EngineOptions)
    return {"MODEL": options.model} | {spell[name]: getattr(options, name) for name in names}


def run_record(command: str, inputs: Iterable[Any], options: dict[str, Any]) -> str:
    """What a run's rows are computed under, as its partial file records it (`PartialLines`):
    the command, a digest of its input as read (``inputs``, each JSON-ready: hashed one at a
    time, not as one string the size of the file), and the ``options`` that change its rows
    (by flag, as a user gives them)."""
    digest = hashlib.sha256()
    for item in inputs:
        digest.update(json.dumps(item).encode("utf-8", "surrogatepass") + b"\n")
    return json.dumps({"command": command, "input": digest.hexdigest(), "options": options})


def _unlike(partial: Path, record: str) -> str | None:
    """Why the rows of ``partial`` are not what a run under ``record`` computes, by what its
    record says (None: they are)."""
    try:
        before = json.loads(recorded(partial) or "")
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


def go_on_from(
    output: Path, kept: KeptRows, left: Callable[[], list[T]], failed: int, dropped: int = 0
) -> list[T]:
    """``left()``: the inputs the ``kept`` rows do not answer (a ValueError when the rows are not
    this input's answers, refused as `refuse_partial`, as are rows computed under another record
    than ``kept.record``: another input, model or option that changes them), said on stderr with
    ``failed``, the kept rows that are a line's failure, and ``dropped``, the rows of a server
    error among ``kept`` that the command drops (`KeptRows.only`) and runs again."""
    try:
        rest = left()
    except ValueError as e:
        raise refuse_partial("--output", output, str(e)) from None
    why = _unlike(kept.partial, kept.record)  # rows of this input, computed under other options?
    if why is not None:
        raise refuse_partial("--output", output, why)
    say_kept(kept, len(rest), failed, dropped)
    return rest


def say_kept(kept: KeptRows, to_run: int, failed: int, dropped: int = 0) -> None:
    """One line on stderr: how many rows the run keeps (``failed`` of them a line's failure,
    which the exit status counts as a new one; ``dropped`` rows of a server error not), and how
    many lines it runs."""
    failures = f" ({failed} failed)" if failed else ""
    torn = " (a last line cut short is dropped, and run again)" if kept.lines.torn else ""
    errors = f", {counted(dropped, 'answer')} of a server error (5xx) dropped" if dropped else ""
    print(
        f"radixflow: going on from {kept.partial}: {counted(len(kept.rows) - dropped, 'row')} kept"
        f"{failures}{torn}{errors}, {counted(to_run, 'line')} to run",
        file=sys.stderr,
    )


# what the note of a run cut short ends with: how to go on from the rows it kept (the same
# command, given --restart, would remove them)
GO_ON = " (the same command run again goes on from them)"
GO_ON_WITHOUT_RESTART = " (the same command without --restart goes on from them)"


def write_lines(
    flag: str,
    path: Path | None,
    run: Callable[[IO[str]], T],
    kept: KeptRows | None = None,
    record: str = "",
    restart: bool = False,
) -> T:
    """``run`` given where ``flag``'s lines go (`output_path`'s ``path``), after the ``kept``
    rows of its partial file, which records ``record`` (`run_record`); a write that fails
    (a full disk) is one line naming the flag. An error or Ctrl-C that cuts the run short carries
    a note saying where the rows written so far are, and how to go on from them (``restart``:
    the command was given ``--restart``, which the run that goes on must drop)."""
    if path is None:
        return _to_stdout(flag, run)
    try:
        # in place: appended to, as the shell's `>>` behind /dev/stdout asks (its `>` truncated already)
        keep = None if kept is None else kept.lines
        opened = (
            WholeLineFile(path, append=True)
            if written_in_place(path)
            else PartialLines(path, keep, GO_ON_WITHOUT_RESTART if restart else GO_ON, record)
        )
        with opened as out:  # a full disk cuts it back to its last whole line
            return run(out)
    except BrokenPipeError:  # the reader of /dev/stdout left early: as with `-`, not an error
        raise
    except OSError as e:  # a disk that fills mid-run: one line, as bench says it
        error = UsageError(f"cannot write {flag} {path}: {e.strerror or e}")
        for note in getattr(e, "__notes__", []):
            error.add_note(note)
        raise error from None


def _to_stdout(flag: str, run: Callable[[IO[str]], T]) -> T:
    """``run`` given standard output; a write that fails (``> out.jsonl`` on a full disk) is one
    line, as for a path. What stdout still buffers is dropped: the interpreter's last flush of it
    would fail again at exit (a second message, and status 120)."""
    try:
        return run(sys.stdout)
    except BrokenPipeError:  # the reader left early: `main` ends quietly
        raise
    except OSError as e:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a descriptor
            _to_devnull(sys.stdout.fileno())
        raise UsageError(f"cannot write {flag} (standard output): {e.strerror or e}") from None


def _to_devnull(fd: int) -> None:
    """Point ``fd`` at /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
