"""`radixflow calibrate`: fit a cost-model hardware profile to timed worker calls of the torch runner."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from radixflow.calibration import command as calibration
from radixflow.calibration.command import CalibrationUsageError, default_out
from radixflow.cli.args import check_output_paths
from radixflow.cli.command import UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.models.zoo import ZOO
from radixflow.options.engine_options import EngineOptions
from radixflow.options.flags import add_engine_flags, from_args
from radixflow.options.model_arg import add_model_argument, model_spelling
from radixflow.options.runners import name_problem
from radixflow.options.torch_choice import device_problem, resolved_dtype
from radixflow.problems import ProblemError
from radixflow.user_paths import expand_home

# the engine options calibration uses: declared, checked and defaulted as every command does
# (the kernels and matmul routes too: the profile stored is keyed by what they resolve to)
ENGINE_OPTIONS = ("device", "torch_threads", "dtype", "kernels", "matmul")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # named --model where none is given, as when the flag was calibrate's only spelling
    add_model_argument(parser, "zoo model or checkpoint dir", missing="--model", repeatable=True)
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
    refuse_unknown_models(args.model, options)
    args.device = options.device
    args.dtype = calibration_dtype(options)  # auto resolved on the device, as the runner resolves it
    args.threads = options.torch_threads or 1  # one thread unless told: stable timings on a shared machine
    args.kernels, args.matmul = options.kernels, options.matmul
    out = args.out or default_out(options.device)
    check_output_paths({"--out": out}, {})  # before minutes of timing
    refuse_out_in_checkpoint(out, args.model, model_spelling(args))
    started = time.time()
    try:
        return calibration.run(args, console)
    except CalibrationUsageError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt as e:  # once the fit is done: --out written whole, the timing not lost
        if _written_since(out, started):
            e.add_note(f"the fitted profile was written to {out} before it stopped")
        raise


def _written_since(path: Path, started: float) -> bool:
    """Whether ``path`` was written at ``started`` or since (this run wrote it)."""
    try:
        return path.stat().st_mtime >= started
    except OSError:  # not there
        return False


def refuse_unknown_models(models: list[str], options: EngineOptions) -> None:
    """`ProblemError` on the first model the torch runner has not, in the words every door
    uses for it (the one check of a model name; an empty one, not the current directory), before
    any model is built."""
    for model in models:
        asked = replace(options, model=model, runner="torch")
        if (problem := asked.validate() or name_problem(asked)) is not None:
            raise ProblemError(problem)


def refuse_out_in_checkpoint(out: Path, models: list[str], said: str) -> None:
    """`UsageError` where ``out`` (its links followed) is a file of a model's checkpoint
    directory, or the path given as one: the profile, written once the timing is done, would
    replace a file the model may be read from (which of them it reads is the loader's to say;
    a new file there is no loss)."""
    real = Path(os.path.realpath(out))
    for model in models:
        if model in ZOO or not real.exists():  # a zoo name is built in its own cache, never a path here
            continue
        if real.is_relative_to(os.path.realpath(expand_home(model))):
            where = f"a file of the checkpoint {said} {model}, which the profile would replace"
            raise UsageError(f"--out {out}: {where}; write it elsewhere")
