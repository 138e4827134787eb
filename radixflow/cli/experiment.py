"""`radixflow experiment CONFIG.toml`: a frozen experiment → results.json, report.md and plots."""

from __future__ import annotations

import argparse

from rich.console import Console

from radixflow.cli.command import UsageError
from radixflow.experiments.command import ExperimentUsageError
from radixflow.experiments.command import run as run_experiment


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        return run_experiment(args, console)
    except ExperimentUsageError as e:
        raise UsageError(str(e)) from None
