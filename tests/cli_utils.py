"""Running the command line as a user does: a subprocess that imports this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import radixflow


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH (installed or not)."""
    root = str(Path(radixflow.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def run_cli(
    argv: list[str], stdout: int | IO[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``radixflow ARGV`` in a subprocess of this checkout, its standard output to ``stdout``
    (a file descriptor or an open file), standard error captured."""
    return subprocess.run(
        [sys.executable, "-m", "radixflow.cli", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env=checkout_env() if env is None else env,
    )


def run_reader_gone(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``radixflow ARGV | head -c 0``: the command's stdout is a pipe whose reader has already
    closed its end, so its first write meets a broken pipe."""
    read, write = os.pipe()
    os.close(read)
    try:
        return run_cli(argv, write, env)
    finally:
        os.close(write)
