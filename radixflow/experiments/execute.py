"""Run an experiment's cells serially or as Ray tasks, skipping cells already finished (but for a
cell that writes a trace: only a run writes it).

Each finished cell is written at once to ``<out>/cells/<key>.json`` (key: a hash of the cell's
settings, what the files it reads hold, and the variants: `Cell.key`), so an interrupted run
loses at most the cells in flight and a re-run picks up where it stopped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from radixflow.experiments.cells import run_cell
from radixflow.experiments.config import Cell, ExperimentConfig, Variant
from radixflow.files import write_whole
from radixflow.jsonl import json_value
from radixflow.plugin_digest import code_digest
from radixflow.plugins import PluginError
from radixflow.problems import ProblemError
from radixflow.ray_start import LOCAL_RAY, unreachable, worker_env
from radixflow.sigterm_kept import sigterm_kept

CellResult = dict[str, Any]
T = TypeVar("T")
CELLS_DIR = "cells"  # under the output directory: one file per finished cell


class RayStartError(RuntimeError):
    """Ray refused the cluster it was asked for (one line, naming the flag)."""


class CellError(RuntimeError):
    """Cells that failed as they ran, for a reason their checks could not see (a trace file it cannot
    write, memory), raised once every other cell has run: one line naming the first and its key."""


class OutputWriteError(RuntimeError):
    """A file of the output directory could not be written (a full disk): one line, naming it."""


def write_output(path: Path, write: Callable[[Path], T]) -> T:
    """``write(path)``, its OSError made an `OutputWriteError` naming ``path``."""
    try:
        return write(path)
    except OSError as e:
        raise OutputWriteError(f"cannot write {path}: {e.strerror or e}") from None


@dataclass(frozen=True)
class Pending:
    key: str
    cell: Cell


class CellCache:
    def __init__(self, out: Path) -> None:
        self.dir = out / CELLS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str, labels: list[str]) -> CellResult | None:
        """The cached result of the cell ``key`` of the variants ``labels``; None where there is
        none to use (missing, half-written, or no result of each variant): run it again."""
        try:
            result = json_value(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not JSON, or not even UTF-8 (JSONDecodeError, UnicodeDecodeError)
            return None
        return result if _of_variants(result, labels) else None

    def put(self, key: str, result: CellResult) -> None:
        text = json.dumps(result, allow_nan=False)
        write_output(self.path(key), lambda path: write_whole(path, text))


def _of_variants(result: Any, labels: list[str]) -> bool:
    """Whether ``result`` is a cell's result with one per variant, in order, as its key names them
    (a JSON object without them, `{}`, was a traceback once the report read it)."""
    runs = result.get("results") if isinstance(result, dict) else None
    if not isinstance(runs, list):
        return False
    return [r.get("variant") if isinstance(r, dict) else None for r in runs] == labels


def _where(p: Pending) -> str:
    """The cell as a failure names it: its grid, model, seed and key."""
    return f"cell {p.cell.group!r} ({p.cell.settings['model']}, seed {p.cell.workload['seed']}, key {p.key})"


def _run_one(p: Pending, variants: list[Variant]) -> CellResult | str:
    """The cell's result, or why it failed as it ran: one line naming the cell (plain text, so it
    crosses from a Ray worker as it is)."""
    try:
        return run_cell(p.cell, variants)
    except ProblemError as e:  # the other cells run on, and are cached: a re-run runs only it
        # a setting by its key path, as the checks name it
        return f"{_where(p)}: {e.problem.render(p.cell.loc)}"
    except PluginError as e:  # a module a worker cannot import (not on that node's path): the user's
        return f"{_where(p)}: {e}"
    except Exception as e:
        if not _out_of_memory(e):
            e.add_note(f"in {_where(p)}")  # a crash (a bug): its traceback names the cell
            raise
        said = str(e).strip()  # torch's runs over lines (its allocator's advice)
        return f"{_where(p)}: out of memory: {said.splitlines()[0] if said else type(e).__name__}"


def _out_of_memory(e: Exception) -> bool:
    """Whether ``e`` is the machine's memory running out (the host's, or torch's device): a cell
    failure the checks cannot see, not a bug, so the cells after it still run. Torch is asked only
    where a cell has imported it (a sim-only run never does)."""
    torch = sys.modules.get("torch")
    device = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return isinstance(e, MemoryError) or (isinstance(device, type) and isinstance(e, device))


def _serial(pending: list[Pending], variants: list[Variant]) -> Iterator[tuple[Pending, CellResult | str]]:
    for p in pending:
        yield p, _run_one(p, variants)


def _ray(
    pending: list[Pending], variants: list[Variant], address: str | None, torch_cpus: int
) -> Iterator[tuple[Pending, CellResult | str]]:
    import ray

    env = {"env_vars": worker_env()}
    if address is not None and (why := unreachable(address)) is not None:
        raise RayStartError(f"--ray-address {address}: Ray did not start: {why}")
    try:
        with sigterm_kept():  # a SIGTERM still keeps the finished cells and says so (exit 143)
            ray.init(
                address=LOCAL_RAY if address is None else address,
                runtime_env=env,
                include_dashboard=False,
                log_to_driver=False,
            )
    except (ValueError, ConnectionError) as e:  # a malformed or unreachable address: the user's
        where = "--ray" if address is None else f"--ray-address {address}"
        raise RayStartError(f"{where}: Ray did not start: {e}") from None
    try:
        yield from _ray_cells(ray, pending, variants, torch_cpus)
    finally:
        ray.shutdown()


def _ray_cells(
    ray: Any, pending: list[Pending], variants: list[Variant], torch_cpus: int
) -> Iterator[tuple[Pending, CellResult | str]]:
    """Each pending cell as a Ray task, its outcome as it finishes. A cell whose own code raised
    is raised once the others are in: the cells beside it run on (they were dropped with the
    cluster, and those finished but not yet read were never cached)."""
    task = ray.remote(_run_one)
    largest = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]), default=0.0)
    refs = {}
    for p in pending:
        refs[task.options(num_cpus=cell_cpus(p.cell, torch_cpus, largest)).remote(p, variants)] = p
    crashed = None  # the first cell whose own code raised
    while refs:
        done, _ = ray.wait(list(refs), num_returns=1)
        for ref in done:
            p = refs.pop(ref)
            try:
                outcome = _ray_outcome(ray, ref, p)
            except ray.exceptions.RayTaskError as e:
                crashed = crashed or e
                continue
            yield p, outcome
    if crashed is not None:
        raise crashed


def _ray_outcome(ray: Any, ref: Any, p: Pending) -> CellResult | str:
    """The cell's result from Ray; a worker that died under it (the OOM killer, a lost node) fails
    that cell alone, in one line naming it, as a cell that fails as it runs does. A cell whose own
    code raised raises Ray's `RayTaskError`, its traceback as when run serially."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError:
        raise
    except ray.exceptions.RayError as e:
        said = str(e).strip()
        return f"{_where(p)}: its Ray worker died: {said.splitlines()[0] if said else type(e).__name__}"


def cell_cpus(cell: Cell, torch_cpus: int, largest: float) -> float:
    """CPUs a cell's task asks Ray for: a torch cell times real forward passes, so it gets the
    CPUs its threads use (its ``torch_threads``, else ``torch_cpus``: Ray sets a task's thread
    count to what it asked for), but never more than the largest node has (``largest``; 0: none
    has joined yet, an autoscaler's to bring): Ray would wait forever to place it. Pure."""
    want = (cell.settings["torch_threads"] or torch_cpus) if cell.settings["runner"] == "torch" else 1
    return min(want, largest) if largest > 0 else want


@dataclass(frozen=True)
class ExecutionOptions:
    ray: bool = False
    ray_address: str | None = None
    torch_cpus: int = 2


def _failures(failed: list[str], ran: int) -> str:
    """One line for the cells that failed as they ran: the first one's reason, and how many more."""
    more = f"; {len(failed) - 1} more of the {ran} cells failed too" if len(failed) > 1 else ""
    return f"{failed[0]}{more} (the others finished and are cached: a re-run runs only the cells that failed)"


def to_run(cell: Cell, key: str, cache: CellCache, labels: list[str]) -> bool:
    """Whether the cell runs: it is not cached, or it writes a trace, which only a run writes (its
    ``trace_out`` is left out of its key: a trace changes none of its figures)."""
    return cell.settings["trace_out"] is not None or cache.get(key, labels) is None


def execute(
    config: ExperimentConfig,
    out: Path,
    options: ExecutionOptions,
    on_start: Callable[[int, int], None] | None = None,
    on_cell: Callable[[Pending, CellResult], None] | None = None,
    code: str | None = None,
) -> list[CellResult]:
    """Results of every cell in config order; finished cells come from the cache (``on_start`` is
    told how many listings it answers and how many cells run). Each cell run
    is stamped with ``code``, what computed it (`code_digest`; None: this package's and its plugins'), since a
    cell's key leaves the code out: a re-run tells cells cached by other code from its own."""
    code = code_digest() if code is None else code
    cache = CellCache(out)
    keys, labels = [c.key(config.variants) for c in config.cells], [v.label for v in config.variants]
    cells = zip(keys, config.cells, strict=True)
    pending = [Pending(k, c) for k, c in cells if to_run(c, k, cache, labels)]
    # a cell listed twice (grids sharing it) runs once; but once per trace it writes, as only a run writes one
    pending = list({(p.key, p.cell.settings["trace_out"]): p for p in pending}.values())
    if on_start is not None:  # listings of a cell run now (two grids share it) are not cached
        run_now = {p.key for p in pending}
        on_start(sum(k not in run_now for k in keys), len(pending))
    if pending:
        stream = (
            _ray(pending, config.variants, options.ray_address, options.torch_cpus)
            if options.ray
            else _serial(pending, config.variants)
        )
        failed = []
        for p, outcome in stream:
            if isinstance(outcome, str):  # why it failed: the cells after it run all the same
                failed.append(outcome)
                continue
            result = {**outcome, "code": code}
            cache.put(p.key, result)
            if on_cell is not None:
                on_cell(p, result)
        if failed:
            raise CellError(_failures(failed, len(pending)))
    results = []
    for key, cell in zip(keys, config.cells, strict=True):
        result = cache.get(key, labels)
        if result is None:
            raise RuntimeError(f"cell {key} finished but its result cannot be read back from {cache.dir}")
        results.append({**_as_written(result, cell), "key": key})
    return results


def _as_written(result: CellResult, cell: Cell) -> CellResult:
    """The result as this config names its cell: its grid, its files where they lie now and its
    ``trace_out`` (none of them in its key), not as the run that cached it named them; the model
    too where the runner named it by the path it was given (a checkpoint directory)."""
    cached = result.get("cell")
    model = result.get("model")
    if isinstance(cached, dict) and model == cached.get("model"):
        model = cell.settings["model"]
    return {**result, "cell": cell.to_dict(), "model": model}
