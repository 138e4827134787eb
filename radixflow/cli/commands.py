"""Every subcommand: its name and help, in `--help` order, its module imported only once it runs.

`radixflow --help` lists these without importing any command's module, and `radixflow bench`
imports bench's alone: each module pulls in its own engine, server or experiment machinery,
which together took most of a sim bench's start. A new command is a new module with
``add_arguments`` and ``run``, and a line here.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Any

from radixflow.cli.command import Command
from radixflow.experiments import MAX_CELLS

if TYPE_CHECKING:
    from rich.console import Console

COST_HELP = (
    "the predicted time of one worker call of a sim model (a prefill chunk, a batch of decode "
    "steps or both) and its terms, each with its work and source"
)
CALIBRATE_HELP = (
    "time the torch runner's worker calls on a grid of batch shapes, fit the cost model's coefficients "
    "(non-negative least squares) and report the error on held-out shapes; writes a profile for --hardware. "
    "Timing uses one torch thread unless --torch-threads says otherwise"
)
EXPERIMENT_HELP = (
    "run every cell of an experiment config (TOML) with the policies side by side on identical inputs; "
    "writes results.json, report.md and plots; finished cells are cached, so a re-run skips them "
    "(but for a cell with a trace_out: only a run writes its trace). "
    "--device, when given, replaces the device of every torch-runner cell; --seeds the seeds of every cell; "
    f"a config of more than {MAX_CELLS:,} cells is refused unless --max-cells allows it"
)


def module_of(name: str) -> str:
    """The module of command ``name`` (``run-batch`` -> ``radixflow.cli.run_batch``)."""
    return f"radixflow.cli.{name.replace('-', '_')}"


class _Declare:
    """A command's ``add_arguments``, its module (``flags``: the module declaring them, where
    that is not the command's, lighter) imported on the call."""

    def __init__(self, name: str, flags: str | None = None) -> None:
        self.module = flags or module_of(name)

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        importlib.import_module(self.module).add_arguments(parser)


class _Run:
    """A command's ``run``, its module imported on the call."""

    def __init__(self, name: str) -> None:
        self.module = module_of(name)

    def __call__(self, args: argparse.Namespace, console: Console) -> Any:
        return importlib.import_module(self.module).run(args, console)


def _command(name: str, help: str, flags: str | None = None) -> Command:
    return Command(name, help, _Declare(name, flags), _Run(name))


COMMANDS: tuple[Command, ...] = (
    # `bench --help` and `generate --help` need not import the engine their runs use
    _command("bench", "run scheduling policies side by side on one workload", "radixflow.cli.bench_flags"),
    _command("models", "list the built-in model zoo"),
    _command("calibrate", CALIBRATE_HELP),
    _command("cost", COST_HELP),
    _command("experiment", EXPERIMENT_HELP, "radixflow.experiments.command"),
    _command("generate", "generate text with a model (offline, no server)", "radixflow.cli.generate_flags"),
    _command("score", "rank candidates by their logprob after one shared context (offline)"),
    _command("serve", "serve a model over an OpenAI-compatible HTTP API"),
    _command(
        "run-batch",
        "run an OpenAI batch file (completions, chat, score) through the server's routes, offline",
    ),
)
