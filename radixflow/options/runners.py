"""Which runner an engine gets: small classes behind one protocol, chosen by name.

A choice resolves its model before anything is allocated (a zoo model is built on first use), so
the vocabulary, the default capacity and the memory the pools need are known up front.
"""

from __future__ import annotations

from pathlib import Path

from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.options.choice import RunnerChoice
from radixflow.options.engine_options import EngineOptions
from radixflow.options.sim_choice import SimChoice
from radixflow.options.sim_shape import sim_name_problem
from radixflow.options.torch_choice import TorchChoice, resolved_dtype
from radixflow.problems import Problem, ProblemError
from radixflow.user_paths import expand_home


def torch_settings_problem(options: EngineOptions, local: bool = True) -> Problem | None:
    """What the torch runner refuses of ``dtype``, ``matmul`` and ``kernels`` on the device, in its
    own words, without building or reading the model (None: nothing, or not the torch runner).
    ``local``: the device is this machine's (checked already), and native kernels asked for are
    built (or found) here as a replica builds them; else the refusals that hold on any machine
    (``auto`` on a GPU is that GPU's dtype: left to the replica)."""
    if runner_name(options) != "torch":
        return None
    try:
        from radixflow.runners.torch_runner import native_problem
        from radixflow.runners.torch_settings import settings_problem
    except ImportError:  # an ingress without torch, its replicas elsewhere: they say it
        return None
    if not local and options.dtype == "auto" and options.device.split(":")[0] != "cpu":
        return None
    try:
        dtype = resolved_dtype(options.dtype, options.device)
    except ProblemError as e:
        return e.problem
    problem = settings_problem(options.matmul, options.kernels, options.device, dtype, local)
    if problem is None and local and options.kernels == "native":  # built here as a replica would
        problem = native_problem(options.device, dtype)
    return problem


RUNNER_CHOICES: dict[str, type[SimChoice] | type[TorchChoice]] = {"sim": SimChoice, "torch": TorchChoice}


def runner_name(options: EngineOptions) -> str:
    """The runner the options ask for: given, else sim for a sim shape (or no model), else torch."""
    if options.runner is not None:
        return options.runner
    return "sim" if options.model is None or options.model in SIM_MODELS else "torch"


def name_problem(options: EngineOptions, weights: bool = False) -> Problem | None:
    """Why ``options.model`` names no model the runner can have (None: it may). Cheap: nothing is
    built or read, so a config of many cells is checked before any runs. ``weights``: the door
    generates or scores, so an unknown name is not offered the sim shapes, which it refuses."""
    name, runner = options.model, runner_name(options)
    if name is None:
        return None
    if runner == "sim":
        return sim_name_problem(name)
    from radixflow.models.zoo import file_problem
    from radixflow.models.zoo_catalogue import model_names

    path = Path(expand_home(name))  # "~/ck", as the loader reads it
    if name in model_names() or path.is_dir():
        return None
    known = f"zoo names: {', '.join(model_names())}"
    if options.runner is None and not weights:
        known += f"; sim shapes: {', '.join(SIM_MODELS)}"
    # a file of a checkpoint (its config.json) says which directory was meant, not "unknown"
    return Problem("model", file_problem(path) or f"unknown {runner} model {name!r} ({known})")


def choose_runner(options: EngineOptions) -> RunnerChoice:
    """The runner choice for ``options`` (resolves, and for a zoo name builds, the model)."""
    return RUNNER_CHOICES[runner_name(options)](options)
