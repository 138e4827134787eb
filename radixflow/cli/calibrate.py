"""`radixflow calibrate`: fit a cost-model hardware profile to timed worker calls of the torch runner."""

from __future__ import annotations

import argparse

from rich.console import Console

from radixflow.calibration.command import HELP, CalibrationUsageError, add_arguments
from radixflow.calibration.command import run as calibrate
from radixflow.cli.command import Command, UsageError
from radixflow.cli.extras import require_torch_extra


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow calibrate")
    try:
        return calibrate(args, console)
    except CalibrationUsageError as e:
        raise UsageError(str(e)) from None


COMMAND = Command("calibrate", HELP, add_arguments, run)
