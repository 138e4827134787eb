"""The one rule for a path a user gives (a flag, a TOML key, an `LLM` option): a leading ``~``,
``-`` as standard output, a trailing separator, a missing directory (a leaf: any layer's door
may use it)."""

from __future__ import annotations

import os
from pathlib import Path

STDOUT = "-"  # standard output, wherever an output can go there; refused by one that cannot


def expand_home(text: str) -> str:
    """``text``, a path a user gave, with a leading ``~`` as the home directory: as the shell
    expands it (but not in ``--flag=~/x``, a TOML key or a Python option), and as a model path is
    read. Anything else as it is (a trailing separator kept, for `file_path_problem`)."""
    return os.path.expanduser(text)


def user_path(text: str) -> Path:
    """``text``, a path a user gave, as a `Path` (`expand_home`); ``./-`` (a file named ``-``)
    kept apart from `STDOUT`, which `Path`, dropping the ``./``, would make it."""
    path = Path(expand_home(text))
    return Path.cwd() / path if str(path) == STDOUT and text != STDOUT else path


def resolved_path(text: str) -> str:
    """``text``, a path a user gave, as the one absolute path every spelling of it names (``ck``,
    ``./ck``, ``~/ck``, a link to it): `user_path`, links followed. What a path is compared or
    keyed by; a relative one is the current directory's. A symlink loop (``ln -s ck ck``) is
    resolved as far as it goes, not raised (`Path.resolve`'s RuntimeError): the model's own load
    says, in one line, that it names no model."""
    return os.path.realpath(user_path(text))


def stdout_problem(text: str, holds: str) -> str | None:
    """Why ``text`` cannot be given to an output that cannot go to standard output (``holds``:
    what it holds, and why not): `STDOUT`, which the others take as standard output, never
    writes a file or directory of that name (None: it is not ``-``)."""
    if text != STDOUT:
        return None
    return f"- (standard output) cannot hold {holds}; give a path (./- for one named -)"


def stdin_problem(text: str) -> str | None:
    """Why ``text`` cannot be given for a file to read (None: it is not ``-``): no input reads
    standard input, so `STDOUT` there would be a missing file named -, the user's intent unsaid."""
    if text != STDOUT:
        return None
    return "- (standard input) is not read: give a path (./- for a file named -)"


def file_path_problem(text: str) -> str | None:
    """Why ``text``, a path a user gives (a flag, a TOML key, an option), cannot name a file to
    write (None: it can): one that ends in a separator, or in ``.`` or ``..``, names a directory,
    which `Path` would drop (``results/`` and ``results/.`` read as ``results``), writing a file
    of the directory's name. The one rule for every output file."""
    if os.path.basename(text) in ("", ".", ".."):  # the part after the last separator names no file
        return f"must be a file path, got {text!r} (a directory: name a file in it)"
    return None


def folder_problem(path: Path) -> str | None:
    """Why no file can be made at ``path`` for want of its directory (None: there is one): it
    does not exist, or it is a file (``notes.txt/out.json``), which "does not exist" misnamed."""
    folder = path.parent
    if folder.is_dir():
        return None
    if folder.exists():
        return f"{folder} is {'a file' if folder.is_file() else 'not a directory'}, not a directory"
    return f"directory {folder} does not exist"
