"""`bench --json -`: the table goes to standard error, and one that cannot take it (its reader
gone, a full disk behind ``2> log``) costs the run none of the JSON on standard output."""

from __future__ import annotations

import errno
import io
import json
import sys

import pytest

from radixflow.cli import main

BENCH = ["bench", "--runner", "sim", "--groups", "2", "--candidates", "2", "--context-len", "32"]


class Refusing(io.StringIO):
    """A standard error whose every write fails with ``error``."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error


@pytest.mark.parametrize(
    ("error", "code"),
    [(BrokenPipeError(errno.EPIPE, "Broken pipe"), 141), (OSError(errno.ENOSPC, "No space left"), 2)],
    ids=["reader-left", "full-disk"],
)
def test_a_stderr_that_refuses_the_table_keeps_the_json_on_stdout(monkeypatch, error, code):
    """rich's console on standard error exited 1 where its reader had left, pointing standard
    output at /dev/null first (the JSON lost, without a word), and a full disk's error was a
    traceback. Now the JSON is written whole, and the exit says the table was not: 141 as for a
    reader that left, 2 for an output that cannot be written."""
    whole = io.StringIO()
    monkeypatch.setattr(sys, "stdout", whole)
    assert main([*BENCH, "--json", "-"]) == 0
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", Refusing(error))
    assert main([*BENCH, "--json", "-"]) == code
    assert json.loads(out.getvalue())["results"] == json.loads(whole.getvalue())["results"]


def test_a_run_that_completed_nothing_names_its_chief_reason_whole_and_counts_the_others():
    from radixflow.bench.metrics import Failure
    from radixflow.cli.bench_outputs import chief_reason

    long = "prompt has 9000 tokens; the model's context is 8192"  # past the table's 30 characters
    failures = (Failure("a", "device lost"), Failure("b", long), Failure("c", long))
    assert chief_reason(failures) == f"{long}; 1 other reason in the table"
    assert chief_reason(failures[1:]) == long
    assert chief_reason(()) == "reasons in the table"
