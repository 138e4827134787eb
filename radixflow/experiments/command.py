"""`radixflow experiment CONFIG.toml`: arguments, up-front checks, a summary of what was written."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import shlex
import sys
import time
from pathlib import Path

from rich.console import Console

from radixflow.experiments import MAX_CELLS
from radixflow.experiments.analysis import distinct
from radixflow.experiments.config import ExperimentConfig, ExperimentConfigError
from radixflow.experiments.config_checks import parse_seeds
from radixflow.experiments.config_parse import load_config
from radixflow.experiments.execute import (
    CELLS_DIR,
    CellCache,
    CellError,
    ExecutionOptions,
    OutputWriteError,
    RayStartError,
    to_run,
)
from radixflow.experiments.failures import uncompared
from radixflow.experiments.plots import PLOTS
from radixflow.experiments.report import other_code_note
from radixflow.experiments.run import WRITTEN, ExperimentOutput, default_out, progress_bar, run_experiment
from radixflow.options.flags import add_engine_flags, from_args, not_stdin, not_stdout, parse_int, path_arg
from radixflow.options.torch_choice import device_problem
from radixflow.problems import Problem, ProblemError, counted

EXTRA = "pip install -e '.[experiments]'"
OVERRIDES = ("device",)  # engine options the command line may set for every torch-runner cell
OVERRIDE_HELPS = {
    "device": "torch runner device of every torch-runner cell, e.g. cpu or cuda (default: each cell's own, "
    "the config's device, else cpu)"
}
PROGRESS_EVERY = 100  # cells checked between updates of the bar


class ExperimentUsageError(ValueError):
    """A user mistake (bad config, missing extra, unusable device): one line, exit 2."""


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("config", type=not_stdin, help="experiment config (TOML), e.g. experiments/paper.toml")
    e.add_argument(
        "--out",
        type=not_stdout(path_arg, "the results: --out is a directory"),
        help="output directory (default: results/<experiment name>)",
    )
    e.add_argument("--ray", action="store_true", help="run cells as Ray tasks (a local instance by default)")
    e.add_argument("--ray-address", help="address of an existing Ray cluster (implies --ray)")
    e.add_argument(
        "--seeds",
        help="run every cell with these seeds instead of the config's, e.g. 3-9 or 0,4,7 "
        "(an out-of-sample check of a grid chosen on other seeds)",
    )
    e.add_argument(
        "--max-cells",
        type=parse_int,
        default=MAX_CELLS,
        metavar="N",
        help=f"run a config of up to N cells (default: {MAX_CELLS}; a larger grid is refused before it "
        "is expanded, so a slip of a list does not start a run of days)",
    )
    add_engine_flags(e, only=OVERRIDES, helps=OVERRIDE_HELPS)  # given, it overrides the config's torch cells


def _device(args: argparse.Namespace) -> str | None:
    """``--device``, checked as the torch runner checks its own (None: not given)."""
    if args.device is None:
        return None
    device = from_args(args, only=OVERRIDES).device
    problem = device_problem(device)
    if problem is not None:  # the flag the user gave, whichever check refused it
        raise ProblemError(Problem("device", problem.message))
    return device


def _warn_unused_device(config: ExperimentConfig) -> None:
    if not any(c.settings["runner"] == "torch" for c in config.cells):
        print(
            "radixflow: warning: --device has no effect: no cell of this experiment runs on the torch runner",
            file=sys.stderr,
        )


def _load(args: argparse.Namespace, device: str | None, seeds: list[int] | None) -> ExperimentConfig:
    """The config with every cell checked (a torch cell on ``device``, given: `--device`), counted
    on a bar as they are (a large grid takes a while); every torch model is resolved (a zoo model
    built) before any cell runs. ``seeds`` (`--seeds`) are counted in its size, not its own."""
    with progress_bar(Console(stderr=True)) as progress:
        task = progress.add_task(f"{args.config.name}: checking cells", total=None)

        def checked(done: int, total: int) -> None:
            if done % PROGRESS_EVERY == 0 or done == total:
                progress.update(task, completed=done, total=total)

        try:
            return load_config(args.config, args.max_cells, checked, device, seeds and len(seeds))
        except ExperimentConfigError as e:
            raise ExperimentUsageError(str(e)) from None


def _check_out(out: Path) -> None:
    """Refuse, before any cell runs, an output directory the run cannot write: these failed as
    tracebacks, at its mkdir or at results.json once every cell had run."""
    if out.exists() and not out.is_dir():
        raise ExperimentUsageError(f"cannot write --out {out}: it is a file")
    if (out / CELLS_DIR).exists() and not (out / CELLS_DIR).is_dir():
        raise ExperimentUsageError(f"cannot write --out {out}: {CELLS_DIR} in it is a file")
    for name in WRITTEN:
        if (out / name).is_dir():
            raise ExperimentUsageError(f"cannot write --out {out}: {name} in it is a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExperimentUsageError(f"cannot write --out {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK):
        raise ExperimentUsageError(f"cannot write --out {out}: {os.strerror(errno.EACCES)}")


def _check_traces(config: ExperimentConfig, out: Path) -> None:
    """Refuse a cell's ``trace_out`` that is one of the files ``out`` holds (results.json,
    report.md, a plot, a cached cell): the run replaces or removes those, and with them the
    trace, without a word."""
    held = {(out / name).resolve(): name for name in (*WRITTEN, *PLOTS)}
    cells = (out / CELLS_DIR).resolve()
    for cell in config.cells:
        trace = cell.settings.get("trace_out")
        if trace is None:
            continue
        path = Path(trace).resolve()
        name = held.get(path) or (f"{CELLS_DIR}/{path.name}" if path.parent == cells else None)
        if name is not None:
            why = f"{name} of --out {out}, which this run replaces"
            raise ExperimentUsageError(f"trace_out {trace}: {why}; write the trace elsewhere")


def run(args: argparse.Namespace, console: Console) -> int:
    use_ray = args.ray or args.ray_address is not None
    for module in ("matplotlib", *(("ray",) if use_ray else ())):
        if importlib.util.find_spec(module) is None:
            raise ExperimentUsageError(f"{module} is not installed: {EXTRA}")
    if args.max_cells < 1:
        raise ExperimentUsageError(f"--max-cells: must be at least 1, got {args.max_cells}")
    device = _device(args)
    try:
        seeds = None if args.seeds is None else parse_seeds(args.seeds)
    except ValueError as e:
        raise ExperimentUsageError(str(e)) from None
    config = _load(args, device, seeds)
    for warning in config.warnings:  # keys that change none of their cells, as bench warns of flags
        print(f"radixflow: warning: {warning}", file=sys.stderr)
    if device is not None:
        _warn_unused_device(config)
    if seeds is not None:
        try:
            config = config.with_seeds(seeds, args.max_cells)
        except ValueError as e:
            raise ExperimentUsageError(str(e)) from None
    out = args.out or default_out(config)
    _check_out(out)
    _check_traces(config, out)
    command = _command_line(args)
    execution = ExecutionOptions(ray=use_ray, ray_address=args.ray_address)
    started = time.time()  # what --out holds from before is an earlier run's
    try:
        result = run_experiment(args.config, out, execution, command, config=config)
    except (RayStartError, CellError, OutputWriteError) as e:
        raise ExperimentUsageError(str(e)) from None
    except KeyboardInterrupt as e:  # a Ctrl-C, or a SIGTERM taken as one: the finished cells stay
        e.add_note(_kept(config, out, command) + _earlier(out, started))
        raise
    _print_result(console, config.name, result)
    return _exit_code(result.results)


def _command_line(args: argparse.Namespace) -> str:
    """The command that repeats this run, as report.md records it: the flags given, quoted."""
    flags = [
        ("--out", args.out),
        ("--ray-address", args.ray_address),
        ("--device", args.device),
        ("--seeds", args.seeds),
        ("--max-cells", args.max_cells if args.max_cells != MAX_CELLS else None),
    ]
    return " ".join(
        ["radixflow experiment", shlex.quote(str(args.config))]
        + [f"{k} {shlex.quote(str(v))}" for k, v in flags if v is not None]
        + (["--ray"] if args.ray else [])
    )


def _print_result(console: Console, name: str, result: ExperimentOutput) -> None:
    """One line of what ran and where it went; a warning where cells came from other code."""
    cached = len(result.results) - result.ran
    console.print(
        f"{name}: {counted(len(result.results), 'cell')} ({result.ran} run, {cached} from cache) in "
        f"{result.wall_s:.0f} s → {result.out / 'results.json'}, {result.out / 'report.md'}, "
        f"{counted(len(result.plots), 'plot')}",
        markup=False,  # the names are the user's (--out "o[red]" lost its brackets)
        soft_wrap=True,  # one line, so a path is never cut where a log is 80 columns wide
    )
    stale = other_code_note(result.results, result.code)
    if stale is not None:  # a cell's key leaves the code out: its cached figures are another code's
        print(f"radixflow: warning: {stale}", file=sys.stderr)


def _kept(config: ExperimentConfig, out: Path, command: str) -> str:
    """What a run cut short leaves: its finished cells, each cached as it ended, which the same
    command reads back instead of running them again."""
    cache, cells = CellCache(out), config.cells  # each grid's, as the run counts them (`execute`)
    labels = [v.label for v in config.variants]
    # what the re-run reads back: not a traced cell, which runs again whatever is cached (the
    # same cell another grid lists without a trace is read back)
    done = sum(not to_run(cell, cell.key(config.variants), cache, labels) for cell in cells)
    traced = sum(cell.settings["trace_out"] is not None for cell in cells)
    kept = f"{done} of {counted(len(cells), 'cell')} finished, kept in {cache.dir}"
    again = "" if not traced else " (the cell with a trace_out runs again)"
    if traced > 1:
        again = f" ({traced} cells with a trace_out run again)"
    return f"{kept}: {command} runs only the rest{again}"


def _earlier(out: Path, started: float) -> str:
    """What a run cut short adds of the results and report in ``out`` written before it
    ``started`` (kept whole, but not this run's: perhaps of another config)."""
    names = [name for name in WRITTEN if _written_before(out / name, started)]
    return f"; {', '.join(names)} in {out} are an earlier run's" if names else ""


def _written_before(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime < started
    except OSError:  # not there
        return False


def _exit_code(results: list[dict[str, object]]) -> int:
    """1 when no cell has anything to compare (in every one a variant completed nothing, or the
    variants completed different requests: `comparable`)."""
    empty = uncompared(results)
    if results and empty == len(distinct(results)):
        print(
            f"radixflow: error: no cell completed the same requests, some of them, under every variant "
            f"({empty} cells; reasons under 'Failed requests' in report.md)",
            file=sys.stderr,
        )
        return 1
    return 0
