"""`radixflow calibrate`: fit a cost-model hardware profile to timed worker calls of the torch runner."""

from __future__ import annotations

import argparse

from rich.console import Console

from radixflow.calibration import command as calibration
from radixflow.calibration.command import HELP, CalibrationUsageError, default_out
from radixflow.cli.args import check_output_paths
from radixflow.cli.command import Command, UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.options.engine_options import EngineOptions
from radixflow.options.flags import add_engine_flags, from_args
from radixflow.options.torch_choice import device_problem, resolved_dtype
from radixflow.problems import ProblemError

# the engine options calibration uses: declared, checked and defaulted as every command does
ENGINE_OPTIONS = ("device", "torch_threads", "dtype")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    calibration.add_arguments(parser)
    add_engine_flags(parser, only=ENGINE_OPTIONS)


def calibration_dtype(options: EngineOptions) -> str:
    """The dtype name the runner computes in (``auto``: float32 on a CPU, CUDA's own half type)."""
    return str(resolved_dtype(options.dtype, options.device)).removeprefix("torch.")


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow calibrate")
    options = from_args(args, only=ENGINE_OPTIONS)
    if (problem := device_problem(options.device)) is not None:  # before any model is built
        raise ProblemError(problem)
    args.device = options.device
    args.dtype = calibration_dtype(options)  # auto resolved on the device, as the runner resolves it
    args.threads = options.torch_threads or 1  # one thread unless told: stable timings on a shared machine
    check_output_paths({"--out": args.out or default_out(options.device)}, {})  # before minutes of timing
    try:
        return calibration.run(args, console)
    except CalibrationUsageError as e:
        raise UsageError(str(e)) from None


COMMAND = Command("calibrate", HELP, add_arguments, run)
