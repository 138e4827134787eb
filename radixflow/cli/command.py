"""What a command module provides, and the user-mistake exception every command raises."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console


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
    # SIGTERM is the command's own to handle (`serve`: uvicorn drains); any other takes it as a
    # Ctrl-C (`cli.app.main`)
    handles_sigterm: bool = False


def with_notes(message: str, error: BaseException) -> str:
    """``message`` and the notes ``error`` gathered on its way out (where the rows of a run cut
    short are), in one line."""
    return "; ".join([message, *getattr(error, "__notes__", [])])
