"""Argument types, help formatting and checks shared by the commands."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from radixflow.cli.command import UsageError
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.engine.trace_file import NOT_WRITTEN
from radixflow.files import temporary_beside, written_in_place
from radixflow.options import EngineOptions, EngineSetup
from radixflow.options.flag_warnings import clock_warnings, dtype_warnings, ineffective, ineffective_for_model
from radixflow.options.flags import given, parse_float, parse_int
from radixflow.options.numerals import typed
from radixflow.options.runners import runner_name, torch_settings_problem
from radixflow.options.torch_choice import device_problem
from radixflow.problems import Problem, ProblemError, warn
from radixflow.user_paths import folder_problem

if TYPE_CHECKING:
    from radixflow.generation import LLM


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to a flag's help unless it has no default (None, False, or the empty
    list a repeatable flag starts from) or says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        if action.help and "(default" in action.help:  # it says it in its own words
            return action.help
        return super()._get_help_string(action)


def _show(x: float) -> str:
    """A limit as a user types it: 3600000, not 3.6e+06; 1e-06 stays short."""
    return str(int(x)) if x == int(x) and abs(x) < 1e16 else f"{x:g}"


def _check_range(value: float, text: str, low: float, high: float | None, positive: bool) -> None:
    text = typed(text)  # as typed (1e-7, not 1e-07), cut where long
    if positive and value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    if value < low:  # as every option's check and a workload's bounds say it, 0 too
        raise argparse.ArgumentTypeError(f"must be at least {_show(low)}, got {text}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be at most {_show(high)}, got {text}")


def int_arg(low: int = 0, high: int | None = None, positive: bool = False) -> Callable[[str], int]:
    """argparse type: an integer in ``[low, high]`` (and > 0 when ``positive``)."""

    def parse(text: str) -> int:
        value = parse_int(text)
        _check_range(value, text, low, high, positive)
        return value

    return parse


def float_arg(low: float = 0.0, high: float | None = None, positive: bool = False) -> Callable[[str], float]:
    """argparse type: a finite float in ``[low, high]`` (and > 0 when ``positive``); nan/inf refused."""

    def parse(text: str) -> float:
        value = parse_float(text)
        _check_range(value, text, low, high, positive)
        return value

    return parse


positive_int, non_negative_int = int_arg(positive=True), int_arg()
positive_float, non_negative_float = float_arg(positive=True), float_arg()


def engine_inputs(options: EngineOptions) -> dict[str, Path | None]:
    """The files the engine options read, by flag, for `check_output_paths`'s inputs: a
    ``--hardware`` profile file (None: a built-in profile, or not given)."""
    hardware = options.hardware
    return {"--hardware": None if hardware is None or hardware in HARDWARE else Path(hardware)}


def check_output_paths(outputs: dict[str, Path | None], inputs: dict[str, Path | None]) -> None:
    """Fail before a long run, not after it, when a result file cannot be written.

    ``outputs`` and ``inputs`` map a flag to its path. Each output is opened for appending (so an
    existing file is not truncated yet); one this creates is removed again, so a run that fails
    later leaves nothing behind. Two outputs, or an output and an input, may not be one file.
    """
    seen = {_real(p): flag for flag, p in inputs.items() if p is not None}
    for flag, path in outputs.items():
        if path is None:
            continue
        resolved = _real(path)
        if resolved in seen:
            raise UsageError(f"{flag} {path}: the same file as {seen[resolved]}")
        seen[resolved] = flag
        _probe_writable(flag, path)


def _real(path: Path) -> Path:
    """``path`` with its links followed; a symlink loop is left for the file's own open to refuse
    in one line (`Path.resolve` raises RuntimeError on one)."""
    return Path(os.path.realpath(path))


def _probe_writable(flag: str, path: Path) -> None:
    if path.is_dir():
        raise UsageError(f"cannot write {flag} {path}: it is a directory")
    real = _real(path)  # a link's target is the file written (and its directory the one needed)
    if (problem := folder_problem(real)) is not None:
        raise UsageError(f"cannot write {flag} {path}: {problem}")
    # a pipe (mkfifo) is written in place: opening it to probe it blocks until a reader comes,
    # and closing it then hands that reader an end of file (it leaves before the run writes)
    if _is_pipe(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"cannot write {flag} {path}: Permission denied")
        return
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
        if existed and not written_in_place(path):
            _probe_beside(real)
    except OSError as e:
        raise UsageError(f"cannot write {flag} {path}: {e.strerror or e}") from None
    if not existed:  # the file made, not a link to it that the user made
        real.unlink(missing_ok=True)


def _probe_beside(target: Path) -> None:
    """OSError where no file can be made beside ``target``, an existing file: its results are
    written into one there and renamed over it (`files.write_whole`), which its directory must
    allow, though the file itself may be written (a directory closed to new files)."""
    probe = temporary_beside(target)
    with open(probe, "a"):
        pass
    probe.unlink()


def _is_pipe(path: Path) -> bool:
    """Whether ``path`` is a named pipe (``mkfifo``), or a descriptor of a pipe (``/dev/stdout``)."""
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:  # not there (yet): a file to make
        return False


def add_restart_flag(group: argparse._ArgumentGroup) -> None:
    """``--restart``, beside ``--output`` (`score --input`, `run-batch`): a run cut short left
    its rows in ``OUTPUT.partial``, and the same command goes on from them unless given this."""
    group.add_argument(
        "--restart",
        action="store_true",
        help="start over: remove OUTPUT.partial, which a run cut short left with the rows it "
        "finished (without it, those rows are kept and only the lines they lack are run; rows "
        "computed from another input, or under another model or option that changes them, are refused)",
    )


def refuse_runner_settings(options: EngineOptions, local: bool = True) -> None:
    """`ProblemError` for a device this machine lacks, or a dtype, matmul plan or kernels the torch
    runner refuses there (``local``: as `warn_ineffective_options`); nothing on the sim runner."""
    if runner_name(options) == "torch" and (problem := device_problem(options.device, local)) is not None:
        raise ProblemError(problem)
    if (problem := torch_settings_problem(options, local)) is not None:
        raise ProblemError(problem)


def warn_ineffective_options(args: argparse.Namespace, options: EngineOptions, local: bool = True) -> None:
    """Warn about engine flags the user gave that cannot change a run on the chosen runner, about
    a clock that would read load-dependent figures, and about a dtype that is not exact. A device
    this machine lacks, and a dtype, plan or kernels the runner refuses there, are the error they
    are, before any warning about running in them, as `LLM(...)` and a TOML cell say them alone
    (``local``: the engines run here, not on a Ray cluster's machines)."""
    refuse_runner_settings(options, local)
    for message in ineffective(options, given(args)) + clock_warnings(options) + dtype_warnings(options):
        warn(message)


def warn_ineffective_for_model(args: argparse.Namespace, has_recurrent: bool) -> None:
    """Warn about engine flags the user gave that cannot change a run on this model."""
    for message in ineffective_for_model(
        given(args), has_recurrent, state_slots=getattr(args, "state_slots", None)
    ):
        warn(message)


def note_trace_kept(setup: EngineSetup | None, stopped: BaseException) -> None:
    """Note on ``stopped`` (a Ctrl-C) where the trace (``--trace-out``) is: written as the runs
    stopped, down to the round they rolled back. None: no engine was built."""
    trace = None if setup is None else setup.trace
    # a trace whose last write failed is not kept; one that recorded nothing left the file as it was
    if trace is not None and trace.failure is None and trace.written:
        stopped.add_note(f"the trace, down to where the run stopped, is in {trace.path}")


@contextlib.contextmanager
def trace_failure_held() -> Iterator[None]:
    """The `LLM`'s warning of a trace it could not write held back: a Python warning pointing into
    radixflow's source, where the command says it in one line once its work is done (`write_trace`)."""
    with warnings.catch_warnings():
        held = f"radixflow: {NOT_WRITTEN}"  # the start of the message `ModelHolder` warns with
        warnings.filterwarnings("ignore", message=held, category=RuntimeWarning)
        yield


def write_trace(setup: EngineSetup) -> None:
    """The trace's last flush once a command's work is done and its results are out: one that
    cannot be written, now or at a flush while the work ran, is `UsageError` naming
    ``--trace-out`` (exit 2), as `bench` says it; no-op without a trace."""
    try:
        setup.flush_trace()
    except OSError as e:
        raise UsageError(f"cannot write --trace-out {setup.options.trace_out}: {e.strerror or e}") from None


def warn_trace_unwritten(setup: EngineSetup) -> None:
    """`write_trace` for a command that ends on an error of its own: the trace's failure as a
    warning line after it, not in its place."""
    try:
        write_trace(setup)
    except UsageError as e:
        warn(str(e))


def require_tokenizer(llm: LLM, text_flags: str, way_in: str) -> None:
    """A checkpoint without tokenizer.json runs token-id prompts only. The API's refusal says to
    give token ids, which a command's text flags cannot be, so this one names a way that can."""
    if llm.model.tokenizer is None:  # the model's problem: named as it was given, MODEL or --model
        why = f"{llm.model.name} has no tokenizer.json: {text_flags} the model's tokenizer; {way_in}"
        raise ProblemError(Problem("model", why))
