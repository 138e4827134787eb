"""Reading an experiment config (TOML) into an `ExperimentConfig`: its policies, and defaults
plus grids (`config_grids`) whose list-valued keys expand into cells, each checked as the engine's
options are (`cell_checks`). Every mistake is one line naming the key (`ExperimentConfigError`)."""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radixflow.experiments import MAX_CELLS, config_paths
from radixflow.experiments import config_checks as checks
from radixflow.experiments.cell_checks import validate_cell
from radixflow.experiments.cell_fit import planned
from radixflow.experiments.config import (
    CELL_KEYS,
    ENGINE_KEYS,
    POLICY_FROM,
    SEED_FROM,
    TOP_KEYS,
    Cell,
    ExperimentConfig,
    Variant,
    as_run,
)
from radixflow.experiments.config_checks import ExperimentConfigError, fail
from radixflow.experiments.config_grids import parse_grids
from radixflow.experiments.ineffective import Unused, clock_notes, ineffective, replaced
from radixflow.options import EngineOptions, option_problem
from radixflow.options.numerals import written_float
from radixflow.problems import shown


def _variant(text: Any, origin: str) -> Variant:
    if not isinstance(text, str):
        raise fail(origin, "policies", f"each entry must be a string, got {shown(text)}")
    head, *cache = text.split("+")
    if len(cache) > 2:
        raise fail(origin, "policies", f"{shown(text)}: at most policy@placement+eviction+admission")
    eviction, admission = (cache + [None, None])[:2]
    policy, at, given = head.partition("@")
    placement = given if at else None  # "native@" names an empty placement, refused below
    parts = {"policy": policy, "placement": placement, "eviction": eviction, "admission": admission}
    for option, value in parts.items():  # each part checked as the option it sets, in its words
        if value == "":  # "native@" ran as "native"; "native+" said only "must not be empty"
            why = "policy@placement+eviction+admission: each part after the policy optional, none empty"
            raise fail(origin, "policies", f"{shown(text)}: an empty {option} ({why})")
        problem = None if value is None else option_problem(option, value)
        if problem is not None:
            raise fail(origin, "policies", problem.message)
    return Variant(policy, placement, eviction, admission)


def _variants(data: dict[str, Any], origin: str) -> list[Variant]:
    policies = data.get("policies", ["native", "radixflow"])
    if not isinstance(policies, list) or len(policies) < 1:
        raise fail(origin, "policies", "must be a non-empty list")
    variants = [_variant(p, origin) for p in policies]
    checks.no_repeats([v.label for v in variants], origin, "policies")
    return variants


def _once(given: Cell, checked: Cell, seen: dict[str, Cell], origin: str, loc: Callable[[str], str]) -> None:
    """Refuse a cell that is an earlier one of its grid once resolved (``p.json`` and ``./p.json``,
    devices that ``--device`` replaces, a size in two spellings: `as_run`): one key, so it ran once
    yet was reported twice (and a fresh run said one was cached). ``seen`` gains it."""
    settings = {k: as_run(k, v) for k, v in checked.settings.items()}
    workload = {k: as_run(k, v) for k, v in checked.workload.items()}
    resolved = json.dumps([settings, workload], sort_keys=True, default=str)
    earlier = seen.setdefault(resolved, given)
    if earlier is given:
        return
    pairs = [(k, earlier.settings[k], given.settings[k]) for k in given.settings]
    pairs += [(f"workload.{k}", earlier.workload[k], given.workload[k]) for k in given.workload]
    key, first, second = next((k, a, b) for k, a, b in pairs if a != b)
    why = "give one cell (the same settings once resolved), which would run once and be reported twice"
    raise fail(origin, loc(key), f"{shown(first)} and {shown(second)} {why}: keep one")


def _top_keys(data: dict[str, Any], origin: str) -> None:
    """Refuse a top-level key the config does not take, saying where it belongs if anywhere."""
    unknown = sorted(set(data) - TOP_KEYS)
    if not unknown:
        return
    if unknown[0] == "seed":
        raise fail(origin, "seed", SEED_FROM)
    if unknown[0] == "policy":
        raise fail(origin, "policy", POLICY_FROM)
    if unknown[0] in (*CELL_KEYS, "workload"):  # a cell's key, where every grid's are
        raise fail(origin, unknown[0], "a cell's key: set it in [defaults] (every grid's) or in a [[grid]]")
    raise fail(origin, unknown[0], f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")


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
    _top_keys(data, origin)
    name, description = checks.experiment_name(data, origin), checks.description(data, origin)
    variants = _variants(data, origin)
    grids = parse_grids(data, origin, checks.seeds(data.get("seeds", [0]), origin, "seeds"))
    # the cells checked (the config's own seeds: within the default limit, at least) and run
    checks.grid_sizes(
        {g.where: g.size for g in grids}, max_cells if seeds is None else max(max_cells, MAX_CELLS), origin
    )
    if seeds is not None:  # each distinct cell on the given seeds (at most this many: grids may share cells)
        checks.seeded_size(sum(g.size // len(g.seeds) for g in grids), seeds, max_cells)
    total, cells, files = sum(g.size for g in grids), [], config_paths.CellFiles(origin)
    plans = functools.cache(planned)  # this config's: cells share a few distinct settings
    unused = Unused()
    parts = ("placement", "eviction", "admission")
    overridden = replaced((p for p in parts if all(getattr(v, p) is not None for v in variants)), device)
    for grid in grids:
        seen: dict[str, Cell] = {}  # this grid's cells as checked (paths resolved), to the cell as given
        for cell in grid.cells():
            checked, has_recurrent = validate_cell(cell, origin, grid.loc, base, plans, device)
            _once(cell, checked, seen, origin, grid.loc)
            cells.append(checked)
            files.note(checked.settings, grid.loc)
            idle = ineffective(checked.settings, checked.workload, has_recurrent, overridden)
            unused.note({key: grid.loc(key) for key in grid.given}, idle)
            if progress is not None:
                progress(len(cells), total)
    files.check()
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
        data = tomllib.loads(path.read_text(), parse_float=written_float)  # 1e400 refused as written
    except OSError as e:
        raise ExperimentConfigError(f"cannot read config {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError) as e:  # TOMLDecodeError; an integer past Python's 4300 digits
        raise ExperimentConfigError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses per bracket: a garbled or generated file
        raise ExperimentConfigError(f"{path}: not valid TOML: nested too deeply") from None
    return parse_config(data, str(path), path.parent, max_cells, progress, device, seeds)
