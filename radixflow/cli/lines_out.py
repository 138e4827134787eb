"""Where a file command's JSON Lines come from (`read_input`) and its results go (`score --input`,
`run-batch`): standard output (no ``--output``, or ``-``), a device or pipe written in place
(``/dev/stdout``), or a file that the results replace only when the run completes
(`PartialLines`): until then they stream into ``OUTPUT.partial``, so a Ctrl-C or a failure
leaves the previous ``OUTPUT`` as it was, and the same command run again goes on from the rows
that file holds (`cli/kept_rows.py`) unless told to ``--restart``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from radixflow.cli.command import UsageError
from radixflow.cli.kept_rows import KeptRows
from radixflow.files import WholeLineFile, written_in_place
from radixflow.jsonl import read_text
from radixflow.partial_lines import PartialHeld, PartialLines, PartialLock, record_path

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


# what the note of a run cut short ends with: how to go on from the rows it kept (the same
# command, given --restart, would remove them)
GO_ON = " (the same command run again goes on from where it stopped)"
GO_ON_WITHOUT_RESTART = " (the same command without --restart goes on from where it stopped)"


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
