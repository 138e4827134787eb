"""What a command module provides, and the user-mistake exception every command raises."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rich.console import Console

from radixflow.engine.interrupts import HeldInterrupt


class UsageError(Exception):
    """A user mistake: reported as one line, exit code 2."""


class StdoutUnwritable(UsageError):
    """Standard output refused a write its reader did not leave (``> out.txt`` on a full disk):
    an output that cannot be written, one line and exit code 2 as for a file."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help, how it declares its flags, and what it runs."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console], int]  # returns the exit code


# the notes of a command that ended leaving its engine thread behind, in a round: serve's (its
# clients answered) and run-batch's (its requests aborted: stuck, or a second Ctrl-C not waiting)
ENGINE_LEFT = "the engine was stuck in a round: its requests were answered with 503 and it was left behind"
ROUND_LEFT = "the engine was left behind, still in a round"


def engine_left(error: BaseException) -> bool:
    """Whether ``error`` ended a command that left its engine thread behind (an `ENGINE_LEFT` or
    `ROUND_LEFT` note): the process must then end without the interpreter's shutdown, which would
    wait on that thread or abort under it (a torch call returning into a finalizing interpreter:
    exit 134)."""
    notes = getattr(error, "__notes__", [])
    return ENGINE_LEFT in notes or ROUND_LEFT in notes


def with_notes(message: str, error: BaseException) -> str:
    """``message`` and the notes ``error`` gathered on its way out (where the rows of a run cut
    short are), in one line."""
    return "; ".join([message, *getattr(error, "__notes__", [])])


@contextlib.contextmanager
def stdout_writes() -> Iterator[None]:
    """Writes to standard output inside it; one that fails otherwise than by the reader leaving
    (a full disk behind ``> out.txt``) is `StdoutUnwritable`. What stdout still buffers is
    dropped: the interpreter's last flush of it would fail again at exit (a second message, and
    status 120)."""
    try:
        yield
    except BrokenPipeError:  # the reader left early: `main` ends quietly
        raise
    except OSError as e:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a descriptor
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, sys.stdout.fileno())
            finally:
                os.close(null)
        raise StdoutUnwritable(f"cannot write standard output: {e.strerror or e}") from None


def write_stdout(text: str) -> None:
    """``text`` to standard output, flushed (`stdout_writes` says how a failed write ends)."""
    with stdout_writes():
        sys.stdout.write(text)
        sys.stdout.flush()


def print_finished(stopped: BaseException, show: Callable[[], None], said: str) -> None:
    """Print what finished of a run cut short (``show``), a second Ctrl-C held meanwhile (it would
    lose them as they go out); ``stopped`` gets the note ``said``, or why they could not be."""
    with HeldInterrupt():
        try:
            show()
        except BrokenPipeError:  # the interrupt, or the failure, still ends the run, not this
            stopped.add_note("standard output closed")
            return
        except StdoutUnwritable as e:
            stopped.add_note(str(e))
            return
    stopped.add_note(said)


def not_utf8(text: str) -> str | None:
    """Why ``text`` has no UTF-8 form (None: it has one): Python holds a command line's byte that is
    not UTF-8 as a lone surrogate, U+DC80..U+DCFF (``surrogateescape``), named here as the byte."""
    bad = None if text.isascii() else next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if bad is None:
        return None
    code = ord(text[bad])
    what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a lone surrogate"
    return f"not UTF-8 text ({what} at character {bad + 1})"
