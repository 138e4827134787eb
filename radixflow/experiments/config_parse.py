"""Reading an experiment config (TOML) into an `ExperimentConfig`: defaults plus grids whose
list-valued keys expand into cells, each checked as the engine's options are. Every mistake is
one line naming the key (`ExperimentConfigError`)."""

from __future__ import annotations

import functools
import itertools
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from radixflow.cache.eviction import EVICTION_POLICIES
from radixflow.experiments import config_checks as checks
from radixflow.experiments import config_paths
from radixflow.experiments.cell_fit import fit_problem, planned
from radixflow.experiments.config import (
    CELL_KEYS,
    ENGINE_KEYS,
    EXPERIMENT_KEYS,
    OUTPUT_KEYS,
    SEED_FROM,
    SEEDS_WHERE,
    TOP_KEYS,
    UNCAPPED,
    WORKLOAD_KEYS,
    Cell,
    ExperimentConfig,
    KeyPaths,
    Variant,
)
from radixflow.experiments.config_checks import MAX_CELLS, ExperimentConfigError, fail
from radixflow.experiments.ineffective import Unused, clock_notes, ineffective, replaced
from radixflow.options import EngineOptions, EnginePlan, runner_name
from radixflow.options.runners import name_problem
from radixflow.options.spec import check_value
from radixflow.options.torch_choice import device_problem
from radixflow.problems import ProblemError
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.workloads.candidates import ARRIVALS, KINDS, ORDERS, WorkloadSpec


def _variant(text: Any, origin: str) -> Variant:
    if not isinstance(text, str):
        raise fail(origin, "policies", f"each entry must be a string, got {text!r}")
    head, *cache = text.split("+")
    if len(cache) > 2:
        raise fail(origin, "policies", f"{text!r}: at most policy@placement+eviction+admission")
    eviction, admission = (cache + [None, None])[:2]
    for part, value, known in (
        ("eviction", eviction, EVICTION_POLICIES),
        ("admission", admission, ADMISSIONS),
    ):
        if value is not None and value not in known:
            raise fail(origin, "policies", f"unknown {part} {value!r} (known: {', '.join(known)})")
    policy, _, placement = head.partition("@")
    if policy not in SCHEDULING_POLICIES:
        known = ", ".join(SCHEDULING_POLICIES)
        raise fail(origin, "policies", f"unknown policy {policy!r} (known: {known})")
    if placement and placement not in PLACEMENTS:
        raise fail(origin, "policies", f"unknown placement {placement!r} (known: {', '.join(PLACEMENTS)})")
    return Variant(policy, placement or None, eviction, admission)


def _values(value: Any, origin: str, key: str, sweeps: bool = True) -> list[Any]:
    """A setting's values, one cell each; ``sweeps`` False: an output setting, which takes one
    (cells differing only in where they write would be one cell under one cache key)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise fail(origin, key, "an empty list expands to no cells")
    if not sweeps and len(values) > 1:
        why = "takes one value, not a list: cells that differ only in where they write are one cell"
        raise fail(origin, key, why)
    checks.no_repeats(values, origin, key)  # each value once: a repeat is the same cell again
    return values


def _section(table: Any, where: str, origin: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cell keys, workload keys) of a [defaults] or [[grid]] table, every value as a list."""
    if not isinstance(table, dict):
        raise fail(origin, where, "must be a table")
    cell: dict[str, Any] = {}
    workload: dict[str, Any] = {}
    for key, value in table.items():
        if key == "workload":
            workload.update(_workload_section(value, where, origin))
        elif key == "seed":  # an engine option, but a cell's seed is its workload's
            raise fail(origin, f"{where}.seed", SEED_FROM)
        elif key in CELL_KEYS:
            cell[key] = _values(value, origin, f"{where}.{key}", sweeps=key not in OUTPUT_KEYS)
        elif key == "seeds" and where == "defaults":  # a key, but of the config or of a grid
            raise fail(origin, "defaults.seeds", SEEDS_WHERE)
        elif key not in ("name", "seeds") or where == "defaults":
            known = ", ".join(k for k in CELL_KEYS if k != "seed")  # a cell's seed is its workload's
            raise fail(origin, f"{where}.{key}", f"unknown key (known: {known}, workload)")
    return cell, workload


def _workload_section(table: Any, where: str, origin: str) -> dict[str, Any]:
    """The workload keys of the ``workload`` table of ``where``, every value as a list."""
    if not isinstance(table, dict):
        raise fail(origin, f"{where}.workload", "must be a table")
    workload: dict[str, Any] = {}
    for key, value in table.items():
        if key == "seed":  # a workload's field, but a cell's seed comes from `seeds`
            raise fail(origin, f"{where}.workload.seed", SEED_FROM)
        if key not in WORKLOAD_KEYS:
            known = ", ".join(WORKLOAD_KEYS)
            raise fail(origin, f"{where}.workload.{key}", f"unknown key (known: {known})")
        workload[key] = _values(value, origin, f"{where}.workload.{key}")
    return workload


def _validate_cell(
    cell: Cell,
    origin: str,
    loc: Callable[[str], str],
    base: Path,
    plans: Callable[[EngineOptions], tuple[EnginePlan, int | None]],
    device: str | None,
) -> tuple[Cell, bool]:
    """Check a resolved cell; ``loc`` names the config key a setting came from, ``plans`` gives a
    cell's engine plan and its model's context (one per distinct options); ``device``, given,
    replaces a torch cell's (before it is checked). With the cell: whether its model has
    recurrent state."""
    s = dict(cell.settings)
    for key in ("hardware", "cost_profile"):  # a built-in name or a profile file, relative to the config
        s[key] = config_paths.profile_path(s[key], origin, loc(key), base)
    # a checkpoint directory: relative to the config too
    s["model"] = config_paths.model_path(s["model"], base)
    s["trace_out"] = config_paths.output_path(s["trace_out"], base)  # and a file it writes
    for key, (spec, default) in EXPERIMENT_KEYS.items():
        problem = check_value(key, s[key], spec, default is None)
        if problem is not None:
            raise fail(origin, loc(key), problem.message)
    if s["independent_share"] is not None and s["independent_share"] >= 1:
        raise fail(origin, loc("independent_share"), f"must be below 1, got {s['independent_share']}")
    if s["model"] is None:
        raise fail(origin, loc("model"), "missing (a sim shape or a zoo model)")
    try:
        options = EngineOptions.from_mapping({k: s[k] for k in ENGINE_KEYS})
    except ProblemError as e:
        raise fail(origin, loc(e.problem.param or "model"), e.problem.message) from None
    problem = name_problem(options)
    if problem is not None:
        raise fail(origin, loc("model"), problem.message)
    s["runner"] = runner_name(options)
    if device is not None and s["runner"] == "torch":
        s["device"], options = device, options.replace(device=device)
    problem = device_problem(s["device"]) if s["runner"] == "torch" else None
    if problem is not None:  # the torch runner's own check, before any cell runs
        raise fail(origin, loc("device"), problem.message)
    if s["replicas"] > 1 and s["runner"] != "sim":  # replicas would share one runner's state slots
        raise fail(origin, loc("replicas"), f"a fleet of {s['replicas']} replicas needs the sim runner")
    _validate_workload(cell, origin, loc)
    try:  # the budget against the model's sizes, the prompts against the cache and the context
        plan, context = plans(options if s["capacity"] is None else options.replace(**UNCAPPED))
        problem = fit_problem(WorkloadSpec(**cell.run_workload()), plan, context)
    except ProblemError as e:
        raise fail(origin, loc(e.problem.param or "cache_memory"), e.problem.message) from None
    if problem is not None:
        raise fail(origin, loc(problem.param or "cache_memory"), problem.message)
    return replace(cell, settings=s), plan.choice.has_recurrent


def _validate_workload(cell: Cell, origin: str, loc: Callable[[str], str]) -> None:
    for key, value in cell.workload.items():
        if key == "seed":
            continue  # checked with `seeds`
        kind = type(WORKLOAD_KEYS[key])
        checks.workload_value(origin, loc(f"workload.{key}"), value, (int, float) if kind is float else kind)
    for key, choices in (("order", ORDERS), ("arrival", ARRIVALS), ("kind", KINDS)):
        if cell.workload[key] not in choices:
            known = ", ".join(choices)
            raise fail(
                origin, loc(f"workload.{key}"), f"unknown {key} {cell.workload[key]!r} (known: {known})"
            )
    share = cell.settings["independent_share"]
    if share is not None and cell.workload["independent"]:
        why = "sets the count of independent requests: give it or workload.independent, not both"
        raise fail(origin, loc("independent_share"), why)
    problem = WorkloadSpec(**cell.run_workload()).problem()
    if problem is not None:
        key = "workload" if problem.param is None else f"workload.{problem.param}"
        key = "independent_share" if share is not None and problem.param == "independent" else key
        raise fail(origin, loc(key), problem.message)


def _expand(values: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """Every combination of the values, one at a time (a large grid is counted as it expands)."""
    keys = list(values)
    for combo in itertools.product(*(values[k] for k in keys)):
        yield dict(zip(keys, combo, strict=True))


@dataclass(frozen=True)
class _Grid:
    """One [[grid]] table over the defaults: every key's list of values, and the grid's seeds."""

    paths: KeyPaths  # where its settings are set: grid[i], or [defaults]
    name: str
    cell: dict[str, list[Any]]  # CELL_KEYS
    workload: dict[str, list[Any]]  # WORKLOAD_KEYS
    seeds: list[int]
    given: frozenset[str]  # keys set by [defaults] or the grid ("workload.<key>" too)

    @property
    def where(self) -> str:
        return self.paths.where

    @property
    def size(self) -> int:
        return checks.grid_size([*self.cell.values(), *self.workload.values(), self.seeds])

    def loc(self, key: str) -> str:
        """The config key a setting came from."""
        return self.paths.loc(key)

    def cells(self) -> Iterator[Cell]:
        for settings in _expand(self.cell):
            for workload in _expand(self.workload):
                for seed in self.seeds:
                    yield Cell(self.name, settings, {**workload, "seed": seed}, self.paths)


def _grids(data: dict[str, Any], origin: str, seeds: list[int]) -> list[_Grid]:
    d_cell, d_work = _section(data.get("defaults", {}), "defaults", origin)
    tables = data.get("grid", [{"name": "main"}])
    if not isinstance(tables, list) or not tables:
        raise fail(origin, "grid", "must be a non-empty array of tables ([[grid]])")
    grids, taken = [], {}
    for i, table in enumerate(tables):
        where = f"grid[{i}]"
        g_cell, g_work = _section(table, where, origin)
        if not table:
            raise fail(origin, where, "an empty table: a grid sets the keys it sweeps (or a name)")
        name = checks.grid_name(table, where, origin, taken)
        own = checks.seeds(table["seeds"], origin, f"{where}.seeds") if "seeds" in table else seeds
        from_defaults = {k for k in d_cell if k not in g_cell}
        from_defaults |= {f"workload.{k}" for k in d_work if k not in g_work}
        cell = {**{k: [v] for k, v in CELL_KEYS.items()}, **d_cell, **g_cell}
        work = {**{k: [v] for k, v in WORKLOAD_KEYS.items()}, **d_work, **g_work}
        given = {*d_cell, *g_cell, *(f"workload.{k}" for k in (*d_work, *g_work))}
        paths = KeyPaths(where, frozenset(from_defaults))
        grids.append(_Grid(paths, name, cell, work, own, frozenset(given)))
    return grids


def _variants(data: dict[str, Any], origin: str) -> list[Variant]:
    policies = data.get("policies", ["native", "radixflow"])
    if not isinstance(policies, list) or len(policies) < 1:
        raise fail(origin, "policies", "must be a non-empty list")
    variants = [_variant(p, origin) for p in policies]
    checks.no_repeats([v.label for v in variants], origin, "policies")
    return variants


def parse_config(
    data: dict[str, Any],
    origin: str,
    base: Path,
    max_cells: int = MAX_CELLS,
    progress: Callable[[int, int], None] | None = None,
    device: str | None = None,
    seeds: int | None = None,
) -> ExperimentConfig:
    """Every check of the config, then its cells, each validated; ``progress(done, total)`` is
    told after each cell. A grid of more than ``max_cells`` cells is refused before it expands.
    ``device``, given, replaces every torch-runner cell's device (`--device`); ``seeds``, given,
    is how many seeds each cell will run on (`--seeds`, `with_seeds`), counted in the size check
    in place of the grids' own."""
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise fail(origin, unknown[0], f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
    name, description = checks.experiment_name(data, origin), checks.description(data, origin)
    variants = _variants(data, origin)
    grids = _grids(data, origin, checks.seeds(data.get("seeds", [0]), origin, "seeds"))
    # the cells checked (the config's own seeds: within the default limit, at least) and run
    checks.grid_sizes(
        {g.where: g.size for g in grids}, max_cells if seeds is None else max(max_cells, MAX_CELLS), origin
    )
    if seeds is not None:  # each distinct cell on the given seeds (at most this many: grids may share cells)
        checks.seeded_size(sum(g.size // len(g.seeds) for g in grids), seeds, max_cells)
    total, cells, traces = sum(g.size for g in grids), [], {}
    plans = functools.cache(planned)  # this config's: cells share a few distinct settings
    unused = Unused()
    parts = ("placement", "eviction", "admission")
    overridden = replaced((p for p in parts if all(getattr(v, p) is not None for v in variants)), device)
    for grid in grids:
        for cell in grid.cells():
            checked, has_recurrent = _validate_cell(cell, origin, grid.loc, base, plans, device)
            cells.append(checked)
            reads = config_paths.cell_reads(checked.settings, origin)
            trace = checked.settings["trace_out"]
            config_paths.trace_once(trace, origin, grid.loc("trace_out"), traces, reads)
            idle = ineffective(checked.settings, checked.workload, has_recurrent, overridden)
            unused.note({key: grid.loc(key) for key in grid.given}, idle)
            if progress is not None:
                progress(len(cells), total)
    torch = [
        EngineOptions.from_mapping({k: c.settings[k] for k in ENGINE_KEYS})
        for c in cells
        if c.settings["runner"] == "torch"
    ]
    warnings = unused.warnings(origin) + clock_notes(torch, origin)
    return ExperimentConfig(name, description, variants, cells, Path(origin), warnings)


def load_config(
    path: str | Path,
    max_cells: int = MAX_CELLS,
    progress: Callable[[int, int], None] | None = None,
    device: str | None = None,
    seeds: int | None = None,
) -> ExperimentConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ExperimentConfigError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ExperimentConfigError(f"{path}: not valid TOML: {e}") from None
    return parse_config(data, str(path), path.parent, max_cells, progress, device, seeds)
