"""An experiment config's ``[defaults]`` and ``[[grid]]`` tables as grids (`grids`): each key's
list of values (one cell each), the grid's name and seeds, where each setting was set; a grid
expands into its cells one at a time (`Grid.cells`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from radixflow.experiments import config_checks as checks
from radixflow.experiments.config import (
    CELL_KEYS,
    OUTPUT_KEYS,
    POLICY_FROM,
    SEED_FROM,
    SEEDS_WHERE,
    TOP_KEYS,
    WORKLOAD_KEYS,
    Cell,
    KeyPaths,
)
from radixflow.experiments.config_checks import fail

GRID_OWN = ("name", "seeds")  # a grid's own keys beside its cell keys
TOP_WHERE = (
    "a top-level key of the config, not of this table: set it at the top level, before the first table "
    "(TOML reads a key written below a [table] header into that table)"
)


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
        elif key == "policy":  # an engine option, but a cell's policies are the experiment's
            raise fail(origin, f"{where}.policy", POLICY_FROM)
        elif key in CELL_KEYS:
            cell[key] = _values(value, origin, f"{where}.{key}", sweeps=key not in OUTPUT_KEYS)
        elif key == "seeds" and where == "defaults":  # a key, but of the config or of a grid
            raise fail(origin, "defaults.seeds", SEEDS_WHERE)
        elif key in TOP_KEYS and (key not in GRID_OWN or where == "defaults"):  # below a [table] header
            raise fail(origin, f"{where}.{key}", TOP_WHERE)
        elif key in WORKLOAD_KEYS:  # a workload's key, written in its table's own
            raise fail(origin, f"{where}.{key}", f"a workload key: set it under {_header(where)[1]}")
        elif key not in GRID_OWN or where == "defaults":
            known = ", ".join(k for k in CELL_KEYS if k != "seed")  # a cell's key, not the workload's seed
            raise fail(origin, f"{where}.{key}", f"unknown key (known: {known}, workload)")
    return cell, workload


def _header(where: str) -> tuple[str, str]:
    """How the config writes the headers of ``where`` (``defaults`` or ``grid[i]``) and of its
    workload table, for a message saying where a key goes."""
    if where == "defaults":
        return "[defaults]", "[defaults.workload]"
    return "its [[grid]]", "[grid.workload]"


def _not_workload(key: str, where: str) -> str | None:
    """Why ``key``, written in the workload table of ``where``, belongs to the table above it (a
    cell's key or a grid's own): TOML reads every key below a [x.workload] header into it, so a
    grid's ``model`` written after its workload's keys lands there. None: it belongs nowhere."""
    if key not in CELL_KEYS and (key not in GRID_OWN or where == "defaults"):
        return None
    table, workload = _header(where)
    why = "TOML reads a key below a header into its table"
    return f"not a workload key: set it in {table}, above {workload} ({why})"


def _workload_section(table: Any, where: str, origin: str) -> dict[str, Any]:
    """The workload keys of the ``workload`` table of ``where``, every value as a list."""
    if not isinstance(table, dict):
        raise fail(origin, f"{where}.workload", "must be a table")
    workload: dict[str, Any] = {}
    for key, value in table.items():
        if key == "seed":  # a workload's field, but a cell's seed comes from `seeds`
            raise fail(origin, f"{where}.workload.seed", SEED_FROM)
        if key not in WORKLOAD_KEYS and (why := _not_workload(key, where)) is not None:
            raise fail(origin, f"{where}.workload.{key}", why)
        if key not in WORKLOAD_KEYS:
            known = ", ".join(WORKLOAD_KEYS)
            raise fail(origin, f"{where}.workload.{key}", f"unknown key (known: {known})")
        workload[key] = _values(value, origin, f"{where}.workload.{key}")
    return workload


def _expand(values: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """Every combination of the values, one at a time (a large grid is counted as it expands)."""
    keys = list(values)
    for combo in itertools.product(*(values[k] for k in keys)):
        yield dict(zip(keys, combo, strict=True))


@dataclass(frozen=True)
class Grid:
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


def parse_grids(data: dict[str, Any], origin: str, seeds: list[int]) -> list[Grid]:
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
        if "grid" not in data:  # the one grid of [defaults] alone: a key unset is the defaults' to set
            from_defaults |= {*CELL_KEYS, *(f"workload.{k}" for k in WORKLOAD_KEYS)}
        cell = {**{k: [v] for k, v in CELL_KEYS.items()}, **d_cell, **g_cell}
        work = {**{k: [v] for k, v in WORKLOAD_KEYS.items()}, **d_work, **g_work}
        given = {*d_cell, *g_cell, *(f"workload.{k}" for k in (*d_work, *g_work))}
        paths = KeyPaths(where, frozenset(from_defaults))
        grids.append(Grid(paths, name, cell, work, own, frozenset(given)))
    return grids
