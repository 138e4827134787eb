"""Experiment configs (TOML): defaults plus grids whose list-valued keys expand into cells.

A cell is one frozen setting (runner, model, hardware, budgets, workload, seed); every policy
variant of the experiment runs on that cell's identical requests. Every mistake is reported as
one line naming the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from radixflow.experiments import MAX_CELLS, cell_digests
from radixflow.experiments import config_checks as checks
from radixflow.experiments.config_checks import ExperimentConfigError
from radixflow.fleet import DEFAULT_ROUTER, MAX_REPLICAS, ROUTERS
from radixflow.options import option_fields
from radixflow.options.sizes import parse_size
from radixflow.options.spec import OptionSpec, spec_of
from radixflow.workloads.candidates import WorkloadSpec

SCHEMA = 2  # bump when a cell's meaning changes: cached cell results are keyed by it

MAX_REPETITIONS = 1000
# A cell's engine settings are `EngineOptions` fields (their defaults, types and limits; the
# policy comes from the experiment's `policies`); these keys are the experiment's own.
EXPERIMENT_KEYS: dict[str, tuple[OptionSpec, Any]] = {
    "repetitions": (
        OptionSpec(
            "runs per variant; timings, goodput and the pressure figures are medians over them (counts "
            "the first run's), the latency list every run's",
            int,
            1,
            MAX_REPETITIONS,
        ),
        1,
    ),
    # goodput counts requests finishing within this latency
    "slo_ms": (OptionSpec("latency objective in ms", float, 0.0, 3_600_000.0), None),
    # share of independent requests in the queue
    "independent_share": (OptionSpec("share of independent requests", float, 0.0), None),
    # torch cells: predict their worker time with this profile (a check)
    "cost_profile": (OptionSpec("profile that predicts a torch cell's worker time", str), None),
    # a fleet: this many engines (same settings) behind the router, on one shared modelled clock
    "replicas": (OptionSpec("engine replicas behind the router", int, 1, MAX_REPLICAS), 1),
    "router": (OptionSpec("router over the replicas", str, choices=lambda: tuple(ROUTERS)), DEFAULT_ROUTER),
    # memory pressure: the cache capped at this share of the workload's working set (what an
    # unbounded cache holds at its fullest; `radixflow.bench.pressure`); None: the engine's own sizes
    "capacity": (OptionSpec("cache capacity as a share of the working set", float, 0.01, 1.0), None),
}
# keys added after results were cached: left out of a cell's cache key at their default, so the
# cells that existed before them keep their keys (and their cached results)
# bump when a fleet cell's results change (5 Dec: each variant's own eviction and admission, the
# pressure figures, per-replica figures after a death; 6 Dec: the rounds lower bound summed over
# the replicas, as the rounds are): only fleet cells' cached results go stale
# 6 Dec: a cell naming no router is routed by DEFAULT_ROUTER, no longer pow2; then an
# attention-only model's digest names every block of its KV, not only where each run ends; then
# the checkpoint router's spill counts a match under the threshold as none; then the policy
# counters are the replicas' summed (they were none); then a replica mid-round is routed by as
# that round began, not as it ends
FLEET_REVISION = 8
# bump when the pressure figures change (6 Dec: TTFT p95 interpolated, as every percentile is):
# only cells with a ``capacity`` go stale
PRESSURE_REVISION = 1
# (the router's is the default one cell keys left out before it became serve's, which one-replica
# cells still name: with the revision above, no fleet cell reuses another router's results)
LATE_KEYS = {"replicas": 1, "router": DEFAULT_ROUTER, "kind": "candidates", "skew": 0.0, "capacity": None}
ENGINE_KEYS = {f.name: f.default for f in option_fields() if f.name != "policy"}
CELL_KEYS: dict[str, Any] = {**ENGINE_KEYS, **{k: default for k, (_, default) in EXPERIMENT_KEYS.items()}}
# the seed comes from `seeds` (top level or per grid); the vocabulary from the model
WORKLOAD_KEYS = {f.name: f.default for f in fields(WorkloadSpec) if f.name not in ("vocab_size", "seed")}
# what `capacity` replaces: the cache is capped at its share of the working set (`under_pressure`)
UNCAPPED = {"kv_blocks": None, "state_slots": None, "cache_memory": None}
# settings and workload keys whose values are numbers of any kind (``100`` and ``100.0`` one value),
# and the byte size written as text (``1GiB`` and ``1024MiB`` one size): a key reads them as they run
FLOAT_KEYS = frozenset(
    [f.name for f in option_fields() if spec_of(f).kind is float]
    + [k for k, (spec, _) in EXPERIMENT_KEYS.items() if spec.kind is float]
    + [f.name for f in fields(WorkloadSpec) if isinstance(f.default, float)]
)
SIZE_KEYS = ("cache_memory",)
OUTPUT_KEYS = ("trace_out",)  # settings that change what a cell writes, not its results
TOP_KEYS = {"name", "description", "policies", "seeds", "defaults", "grid"}
SEEDS_WHERE = "seeds are set at the top level (every grid's) or in a [[grid]] (its own), not in [defaults]"
SEED_FROM = "a cell's seed comes from `seeds` (a list, top level or in a grid)"  # `seed` anywhere in a cell
# `policy` anywhere: an engine option at every other door, but each cell runs every variant
POLICY_FROM = 'a cell runs every variant of `policies` (a top-level list, e.g. ["native", "radixflow"])'


@dataclass(frozen=True)
class Variant:
    """One column of the side-by-side comparison: a scheduling policy, where it checkpoints, and
    the cache's eviction policy and checkpoint admission (written ``policy@placement+eviction+
    admission``; each part after the policy optional)."""

    policy: str
    placement: str | None  # None: the cell's placement
    eviction: str | None = None  # None: the cell's eviction policy
    admission: str | None = None  # None: the cell's admission

    @property
    def label(self) -> str:
        label = self.policy if self.placement is None else f"{self.policy}@{self.placement}"
        return "+".join([label, *(part for part in (self.eviction, self.admission) if part is not None)])


@dataclass(frozen=True)
class KeyPaths:
    """Where a grid's settings are set in the config: its own ``[[grid]]`` table or ``[defaults]``."""

    where: str  # grid[i]
    # keys set by [defaults] and not by the grid ("workload.<key>" too); every key where the config
    # has no [[grid]]: its one grid is [defaults]'
    from_defaults: frozenset[str]

    def loc(self, key: str) -> str:
        """The config key a setting came from."""
        return f"defaults.{key}" if key in self.from_defaults else f"{self.where}.{key}"


@dataclass(frozen=True)
class Cell:
    group: str  # the grid it came from
    settings: dict[str, Any]  # CELL_KEYS, resolved
    workload: dict[str, Any]  # WORKLOAD_KEYS, resolved
    paths: KeyPaths | None = field(default=None, compare=False, repr=False)  # None: keys as they are

    def loc(self, param: str) -> str:
        """A problem's parameter as this cell's config spells it: a setting by its key path
        (``defaults.kernels``, ``grid[2].kv_blocks``); anything else as it is."""
        setting = param in CELL_KEYS or param.startswith("workload.")
        return self.paths.loc(param) if setting and self.paths is not None else param

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, **self.settings, "workload": self.workload}

    def run_workload(self) -> dict[str, Any]:
        """The workload the cell runs: ``independent_share`` (of the whole queue) sets the count
        of independent requests. The one place it is applied, so the check sees what runs."""
        share = self.settings.get("independent_share")
        if share is None:
            return self.workload
        grouped = WorkloadSpec(**{**self.workload, "independent": 0})
        # refused for its groups alone (empty, too large, too slow): no count to derive, and a
        # float of a count past 1e308 overflowed
        if grouped.problem() is not None:
            return {**self.workload, "independent": 0}
        # a skewed workload's groups are sized by popularity, at least one request each: its
        # queue may hold more than groups x candidates
        return {**self.workload, "independent": round(share * grouped.requests / (1 - share))}

    def key(self, variants: list[Variant]) -> str:
        """The cell's result cache key: what determines its results. Its settings and workload as
        they run (`as_run`, `run_workload`: an ``independent_share`` as the count it gives; no rate
        its arrivals never read), what its profile files, its checkpoint directory and the round
        profiles stored for its model hold, and the variants; not its grid's name, where its files
        lie, nor where it writes a trace: a cell two grids share is one cell, and a checkout moved
        or a grid renamed keeps its cells' keys."""
        labels = [v.label for v in variants]
        # none for built-in profiles, zoo names and sim shapes: their cells keep their keys
        files = cell_digests.profile_digests(self.settings) | cell_digests.model_digests(self.settings)
        files |= cell_digests.stored_profile_digests(self.settings)
        # the share is applied to the workload (`run_workload`): a cell keyed by the count it gives
        given = {k: v for k, v in self.settings.items() if k not in OUTPUT_KEYS}
        settings = {k: as_run(k, v) for k, v in {**given, "independent_share": None}.items()}
        cell: dict[str, Any] = {k: v for k, v in settings.items() if not _late_default(k, v)}
        for name in files.keys() & cell.keys():  # a file read: by what it holds (unread: by its path)
            cell[name] = cell[name] if files[name] == cell_digests.UNREADABLE else "file"
        run = self.run_workload()
        workload = {k: as_run(k, v) for k, v in run.items() if k not in _unread(run)}
        cell["workload"] = {k: v for k, v in workload.items() if not _late_default(k, v)}
        key = {"schema": SCHEMA, "cell": cell, "variants": labels, **({"files": files} if files else {})}
        if self.settings.get("replicas", 1) > 1:
            key["fleet_revision"] = FLEET_REVISION
        if self.settings.get("capacity") is not None:
            key["pressure_revision"] = PRESSURE_REVISION
        blob = json.dumps(key, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def as_run(key: str, value: Any) -> Any:
    """A checked setting or workload value in the one form it runs as, for a key: a number of a
    float key as a float (``100`` is ``100.0``, ``-0.0`` is ``0.0``), a size as bytes; anything
    else as it is. Pure."""
    if key in FLOAT_KEYS and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value) + 0.0
        except OverflowError:  # an integer past any float: the checks refuse it, as it is here
            return value
    if key in SIZE_KEYS and isinstance(value, str):
        size = parse_size(value)
        return size if isinstance(size, int) else value
    return value


def _unread(workload: dict[str, Any]) -> set[str]:
    """The workload keys `build_workload` never reads for it: a rate with all arriving at t=0, a
    burst size without bursts, a skew or namespaces with one group (or none): no popularity to
    share out, no second namespace a group goes to (independent requests are in ns0). Pure."""
    arrival, one_group = workload["arrival"], workload["groups"] <= 1
    unread = (
        ("rate", arrival == "batch"),
        ("burst_size", arrival != "bursty"),
        ("skew", one_group),
        ("namespaces", one_group),
    )
    return {k for k, is_unread in unread if is_unread}


def _late_default(key: str, value: Any) -> bool:
    return key in LATE_KEYS and value == LATE_KEYS[key]


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    description: str
    variants: list[Variant]
    cells: list[Cell]
    path: Path
    warnings: tuple[str, ...] = ()  # keys that change none of the cells they set, one line each

    def with_seeds(self, seeds: list[int], max_cells: int = MAX_CELLS) -> ExperimentConfig:
        """The same experiment with ``seeds`` in place of every cell's seed: each distinct cell
        once per seed, in the config's order (an out-of-sample rerun of a grid). The description
        says so, since the config's may name its own seeds. More than ``max_cells`` cells are
        refused (`ExperimentConfigError`)."""
        distinct: dict[str, Cell] = {}
        for c in self.cells:
            unseeded = replace(c, workload={k: v for k, v in c.workload.items() if k != "seed"})
            distinct.setdefault(json.dumps(unseeded.to_dict(), sort_keys=True), unseeded)
        checks.seeded_size(len(distinct), len(seeds), max_cells)
        traced = [c.settings["trace_out"] for c in distinct.values() if c.settings["trace_out"] is not None]
        if traced and len(seeds) > 1:  # each seed's run of a cell would replace the last one's trace
            raise ExperimentConfigError(
                f"--seeds: {len(seeds)} seeds would write {len(seeds)} traces to one trace_out "
                f"({traced[0]!r}): one cell a path, so run a cell with a trace on one seed"
            )
        cells = [replace(c, workload={**c.workload, "seed": s}) for c in distinct.values() for s in seeds]
        shown = ", ".join(map(str, seeds[:12])) + (f" and {len(seeds) - 12} more" if len(seeds) > 12 else "")
        note = f"(Run on seeds {shown} instead.)"
        return replace(self, cells=cells, description=f"{self.description} {note}".strip())
