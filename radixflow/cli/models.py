"""`radixflow models`: list the built-in model zoo."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from radixflow.cli.command import Command, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        from radixflow.models.zoo import list_models
    except ImportError as e:
        raise UsageError(f"the model zoo needs the torch extra: pip install -e '.[torch]' ({e})") from None
    infos = list_models()
    if args.json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return 0
    table = Table(title="RadixFlow model zoo")
    for col in ("name", "family", "model_type", "params", "hybrid", "layers"):
        table.add_column(col, justify="right" if col == "params" else "left")
    for i in infos:
        table.add_row(i.name, i.family, i.model_type, f"{i.params / 1e6:.1f}M", str(i.hybrid), i.layer_kinds)
    console.print(table)
    return 0


COMMAND = Command("models", "list the built-in model zoo", add_arguments, run)
