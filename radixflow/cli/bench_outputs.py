"""Where `radixflow bench` writes what it measured: ``--json``, ``--round-trace`` and
``--write-trace`` files or standard output (``-``), each write that fails one line naming its
flag, and each output tried whatever befell the one before."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from radixflow.bench.harness import BenchReport, PolicyRun
from radixflow.bench.metrics import Failure
from radixflow.bench.report import group_failures
from radixflow.cli.command import UsageError, write_stdout
from radixflow.files import write_whole
from radixflow.problems import counted


def write_file(flag: str, path: Path, write: object) -> None:
    """Write ``flag``'s output file; a failure this late (disk full, file removed) is one line
    naming the flag and the path, not a traceback."""
    try:
        write(path)  # type: ignore[operator]
    except BrokenPipeError:  # the reader of /dev/stdout left early: as with stdout, not an error
        raise
    except OSError as e:
        raise UsageError(f"cannot write {flag} {path}: {e.strerror or e}") from None


def is_stdout(path: Path | None) -> bool:
    return path is not None and str(path) == "-"


def to_stdout_flag(outputs: dict[str, Path | None]) -> str | None:
    """The output flag given ``-`` (standard output), if one is; a `UsageError` for two."""
    flags = [flag for flag, path in outputs.items() if is_stdout(path)]
    if len(flags) > 1:
        raise UsageError(f"{flags[1]} -: standard output already takes {flags[0]}; give one a file")
    return flags[0] if flags else None


class TableConsole(Console):
    """The table's console where standard output holds an output (``-``): standard error. One
    that refuses a write loses the table, not that output: rich's own pointed standard output at
    /dev/null and exited 1 where standard error's reader had left (the JSON lost, without a
    word), and let a full disk's error (``2> log``) out as a traceback. `lost` keeps the failure
    for `table_code`; standard error then points at /dev/null (nothing more can be said there)."""

    def __init__(self) -> None:
        super().__init__(stderr=True)
        self.lost: OSError | None = None

    def _check_buffer(self) -> None:
        if self.lost is None and not self.quiet:
            try:
                self._write_buffer()
            except OSError as e:  # BrokenPipeError too: its reader left
                self.lost = e
                _to_devnull(sys.stderr)
        del self._buffer[:]  # written, or never to be


def _to_devnull(stream: object) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a descriptor
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())  # type: ignore[attr-defined]
        finally:
            os.close(null)


def table_code(console: Console, code: int) -> int:
    """The run's exit ``code``, once its outputs are out, unless standard error refused the table
    (`TableConsole`): then 141 where its reader left (as one of standard output), a `UsageError`
    (exit 2) for a write that failed."""
    lost = getattr(console, "lost", None)
    if isinstance(lost, BrokenPipeError):
        return 128 + signal.SIGPIPE
    if lost is not None:
        raise UsageError(f"cannot write standard error: {lost.strerror or lost}")
    return code


def write_text(flag: str, path: Path, text: str) -> None:
    """``text`` to standard output for ``-``, else written whole to ``flag``'s file at ``path``."""
    if is_stdout(path):
        write_stdout(text)
    else:
        write_file(flag, path, lambda p: write_whole(p, text))


def write_outputs(args: argparse.Namespace, report: BenchReport, to_stdout: bool = True) -> list[str]:
    """Write ``--json`` and ``--round-trace``; where each went (``-``: standard output, left out
    when not ``to_stdout``: its reader has left)."""
    written, failed = try_outputs(args, report, to_stdout)
    if failed:  # the first failure, once both were tried
        raise failed[0]
    return written


def try_outputs(
    args: argparse.Namespace, report: BenchReport, to_stdout: bool = True
) -> tuple[list[str], list[UsageError]]:
    """`write_outputs`, each output tried whatever befell the one before (a file the disk
    refused, another may still take): where each written one went, and each failure."""
    written: list[str] = []
    failed: list[UsageError] = []
    for flag, path, text in outputs(args, report, to_stdout):
        try:
            write_text(flag, path, text())
        except UsageError as e:
            failed.append(e)
        else:
            written.append(where(path))
    return written, failed


def keep_outputs(args: argparse.Namespace, report: BenchReport, stopped: BaseException) -> list[str]:
    """A run cut short writes ``--json`` and ``--round-trace`` with the trials it finished (the
    JSON says ``"interrupted"`` and which did not): an older file there is not left looking like
    this run's. ``stopped`` gets a note saying where they are, or why one could not be written.
    Where they went (`where`)."""
    try:
        written, failed = try_outputs(args, report)
    except BrokenPipeError:  # the interrupt still ends the run, not this
        stopped.add_note("standard output closed")
        return []
    if failed:  # the other output may still have been written: said after it
        stopped.add_note(str(failed[0]))
    if written:
        done, total = finished(report)
        kept = f"{done} of {total} policy runs finished, written to {' and '.join(written)}"
        marked = "marked interrupted; " if args.json is not None and where(args.json) in written else ""
        stopped.add_note(f"{kept} ({marked}the same command runs them all again)")
    return written


def finished(report: BenchReport) -> tuple[int, int]:
    """The policy runs (trials) a report holds, and how many were to run."""
    done = sum(len(run.trial_runs()) for run in report.runs)
    return done, done + len(report.unfinished or [])


def keep_finished(args: argparse.Namespace, report: BenchReport, stopped: BaseException) -> None:
    """A finished run ``stopped`` as its results went out (the table, a file) writes its files
    whole (standard output's left out: its reader may have half of it already); ``stopped``
    gets a note saying where they are, or why one could not be written."""
    written, failed = try_outputs(args, report, to_stdout=False)
    if failed:
        stopped.add_note(str(failed[0]))
    if written:
        stopped.add_note(f"every policy run had finished, written to {' and '.join(written)}")


def outputs(
    args: argparse.Namespace, report: BenchReport, to_stdout: bool
) -> list[tuple[str, Path, Callable[[], str]]]:
    """``--json`` and ``--round-trace`` where given (``-`` left out when not ``to_stdout``): each
    flag, path and its text."""
    given = [
        ("--json", args.json, lambda: json_text(report)),
        ("--round-trace", args.round_trace, lambda: rounds_text(report)),
    ]
    return [(f, p, t) for f, p, t in given if p is not None and (to_stdout or not is_stdout(p))]


def json_text(report: BenchReport) -> str:
    # strict JSON: an undefined figure is null; a NaN here would be a bug, so refuse it
    return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"


def rounds_text(report: BenchReport) -> str:
    # rolled-back rounds too: their "error" says why they failed
    lines = [
        json.dumps({"policy": run.result.policy, "trial": trial, **asdict(rec)}, allow_nan=False)
        for run in report.runs
        for trial, t in enumerate(run.trial_runs(), 1)
        for rec in t.every_round()
    ]
    return "".join(line + "\n" for line in lines)


def where(path: Path) -> str:
    return "standard output" if is_stdout(path) else str(path)


def exit_code(runs: list[PolicyRun]) -> int:
    """1 when some policy completed no request at all, in its trial that failed most (the reasons
    are in the table's failed rows)."""
    empty = [r for r in runs if r.result.completed == 0]
    if not empty:
        return 0
    names = ", ".join(_empty_in(r) for r in empty)
    first = empty[0].result
    print(
        f"radixflow: error: no request completed under {names} "
        f"({first.failed} of {first.requests} failed: {chief_reason(first.failures)})",
        file=sys.stderr,
    )
    return 1


def chief_reason(failures: tuple[Failure, ...]) -> str:
    """The reason most of ``failures`` failed for, whole (the table cuts a reason short), and how
    many other reasons the table lists."""
    groups = group_failures(failures)
    if not groups:
        return "reasons in the table"
    chief = max(groups, key=lambda reason: len(groups[reason]))
    others = len(groups) - 1
    return chief if not others else f"{chief}; {counted(others, 'other reason')} in the table"


def _empty_in(run: PolicyRun) -> str:
    """The policy, and how many of its trials completed nothing where others did (the table shows
    the latencies of those)."""
    trials = run.trial_runs()
    empty = sum(t.result.completed == 0 for t in trials)
    return (
        run.result.policy
        if empty == len(trials)
        else f"{run.result.policy} in {empty} of its {len(trials)} trials"
    )
