"""Load a config, run its cells (with progress and ETA), write results.json, report.md and plots."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from radixflow.experiments.config import SCHEMA, ExperimentConfig
from radixflow.experiments.config_parse import load_config
from radixflow.experiments.execute import CellError, ExecutionOptions, Pending, execute, write_output
from radixflow.experiments.plots import PLOTS, write_plots
from radixflow.experiments.report import render_report
from radixflow.files import write_whole
from radixflow.plugin_digest import code_digest
from radixflow.progress import LoggedProgress

RESULTS, REPORT = "results.json", "report.md"
WRITTEN = (RESULTS, REPORT)  # written into the output directory once every cell has run


@dataclass(frozen=True)
class ExperimentOutput:
    out: Path
    results: list[dict[str, Any]]
    ran: int  # cells (each grid's listing) computed in this run (the rest came from the cache)
    wall_s: float
    plots: list[str]
    code: str  # what computed the cells run now (`code_digest`); each cell names its own


def default_out(config: ExperimentConfig) -> Path:
    return Path("results") / config.name


def progress_bar(console: Console) -> LoggedProgress:
    """The bar (a line per 5% where the output is not a terminal) that cells are counted on."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    return LoggedProgress(*columns, console=console)


def run_experiment(
    path: str | Path,
    out: Path | None,
    options: ExecutionOptions,
    command: str,
    progress_console: Console | None = None,
    config: ExperimentConfig | None = None,
) -> ExperimentOutput:
    """Run (or pick up) every cell of the config at ``path`` (or of ``config``, already loaded)."""
    t0 = time.perf_counter()
    config = config or load_config(path)
    out = out or default_out(config)
    out.mkdir(parents=True, exist_ok=True)
    ran: set[str] = set()  # the keys computed now (a cell two grids list: one)
    code = code_digest()
    with progress_bar(progress_console or Console(stderr=True)) as progress:
        task = progress.add_task(config.name, total=None)

        def on_start(cached: int, pending: int) -> None:
            progress.update(task, total=pending, description=f"{config.name}: {cached} cached")

        def on_cell(p: Pending, result: dict[str, Any]) -> None:
            ran.add(p.key)
            progress.update(task, advance=1, description=f"{config.name}: {p.cell.group} {result['model']}")

        try:
            results = execute(config, out, options, on_start, on_cell, code)
        except CellError as e:
            raise CellError(f"{e}{_remove_earlier(out)}") from None
    plots = write_plots(results, out)
    meta = {
        "name": config.name,
        "description": config.description,
        # each cell run once, however many grids list it (`execute`: one key, one run)
        "cells_wall_s": sum(r.get("wall_s", 0.0) for r in {r["key"]: r for r in results}.values()),
        "command": command,
        "code": code,  # what computed the cells run now (`code_digest`); each cell names its own
    }
    document = {
        "schema": SCHEMA,
        **meta,
        "config": str(config.path),
        "variants": [v.label for v in config.variants],
        "cells": results,
    }
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    write_output(out / RESULTS, lambda path: write_whole(path, text))
    write_output(out / REPORT, lambda path: write_whole(path, render_report(meta, results, plots) + "\n"))
    wall_s = time.perf_counter() - t0
    return ExperimentOutput(out, results, sum(r["key"] in ran for r in results), wall_s, plots, code)


def _remove_earlier(out: Path) -> str:
    """An earlier run's results, report and plots removed from ``out`` (left there, they would read
    as this failed run's, perhaps of another config; its cells stay cached): what the error adds."""
    removed = [name for name in (*WRITTEN, *PLOTS) if write_output(out / name, _unlink)]
    return f"; removed the earlier run's {', '.join(removed)} from {out}: not this run's" if removed else ""


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
