"""One expanded cell of an experiment config checked before any cell runs, as the engine's options
are (`validate_cell`): its files read relative to the config, its engine options, model, device
and replicas, its workload, and its budget against the model's sizes and context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from radixflow.experiments import config_checks as checks
from radixflow.experiments import config_paths
from radixflow.experiments.cell_fit import fit_problem
from radixflow.experiments.config import ENGINE_KEYS, EXPERIMENT_KEYS, UNCAPPED, WORKLOAD_KEYS, Cell
from radixflow.experiments.config_checks import fail
from radixflow.options import EngineOptions, EnginePlan, runner_name
from radixflow.options.runners import name_problem, torch_settings_problem
from radixflow.options.spec import check_value
from radixflow.options.torch_choice import device_problem
from radixflow.problems import ProblemError, shown
from radixflow.workloads.candidates import ARRIVALS, KINDS, ORDERS, WorkloadSpec


def validate_cell(
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
    if s["runner"] == "torch":
        options = _check_torch(s, options, device, origin, loc)
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


def _check_torch(
    s: dict, options: EngineOptions, device: str | None, origin: str, loc: Callable[[str], str]
) -> EngineOptions:
    """A torch cell's device (``device``, given, replaces it in ``s`` and in the options returned)
    and its dtype, matmul and kernels there: the torch runner's own refusals, made before any
    cell runs as the other doors make them up front (found when the cell's runner was built,
    they came after the cells before it had run)."""
    if device is not None:
        s["device"], options = device, options.replace(device=device)
    problem = device_problem(s["device"])
    if problem is not None:
        raise fail(origin, loc("device"), problem.message)
    problem = torch_settings_problem(options)
    if problem is not None:
        raise fail(origin, loc(problem.param or "dtype"), problem.message)
    return options


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
                origin, loc(f"workload.{key}"), f"unknown {key} {shown(cell.workload[key])} (known: {known})"
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
