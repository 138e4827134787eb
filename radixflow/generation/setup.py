"""A model with weights, its tokenizer and the engine setup around it (offline API and server)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from radixflow.engine.engine import Engine
from radixflow.engine.runner import Runner
from radixflow.generation.tokenizer import TextTokenizer, TokenizerError
from radixflow.models.registry import UnknownModelError
from radixflow.models.zoo import ensure_model
from radixflow.models.zoo_catalogue import model_names
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.options.runners import name_problem, runner_name, torch_settings_problem
from radixflow.options.torch_choice import device_problem
from radixflow.problems import Problem, ProblemError


@dataclass(frozen=True)
class LoadedModel:
    name: str  # as the user named it (zoo name or path): what the server reports as its model id
    path: Path
    setup: EngineSetup  # the runner (weights loaded, pools allocated) and the resolved budgets
    tokenizer: TextTokenizer | None  # None: the checkpoint has no tokenizer.json (token-id prompts only)

    @property
    def runner(self) -> Runner:
        return self.setup.runner

    def engine(self, round_history: int | None = None) -> Engine:
        """A fresh engine over this model's runner, as the options say."""
        return self.setup.engine(round_history=round_history)


# no model named: the options' default is a sim shape, which has no weights to generate with
NO_MODEL = Problem(
    "model", "must be given (a zoo name, see `radixflow models`, or a checkpoint directory), got None"
)


def no_weights(label: str) -> Problem:
    return Problem(
        "model",
        f"{label!r} on the sim runner has no weights: generation needs the torch runner and a model "
        "with weights (a zoo name, see `radixflow models`, or a checkpoint directory)",
    )


def sim_runner_problem(options: EngineOptions, label: str) -> Problem:
    """Why the sim runner cannot generate: a sim shape has no weights; a model that has them (a zoo
    name, a directory: the torch runner's when no runner is given) was given the sim runner, and
    the runner given is the mistake, not the model."""
    if runner_name(replace(options, runner=None)) != "torch":
        return no_weights(label)
    return Problem(
        "runner",
        f"sim runs no weights: generating and scoring with {label!r} need the torch runner, its "
        "default (leave the runner out)",
    )


def weights_problem(options: EngineOptions, local: bool = True) -> Problem | None:
    """What `load_model` would refuse that shows without building or reading a model (bad options,
    a model the runner has not, a directory without config.json, the sim runner, the torch runner's
    refusals of its dtype, matmul plan and kernels; ``local``: a device this machine lacks, threads
    or cache bookkeeping past its CPUs or memory): a fleet's ingress checks this before its
    replicas load the model."""
    problem = options.validate(local) or name_problem(options, weights=True)
    if problem is None and options.model is None:
        return NO_MODEL
    if problem is None and runner_name(options) == "sim":
        return sim_runner_problem(options, str(options.model))
    if problem is None and options.model not in model_names():
        problem = _directory_problem(str(options.model))
    if problem is None:
        problem = device_problem(options.device, local)
    return problem or torch_settings_problem(options, local)


def _directory_problem(path: str) -> Problem | None:
    try:
        ensure_model(path)  # a directory (not a zoo name): only its config.json is looked for
    except UnknownModelError as e:
        return Problem("model", str(e))
    return None


def load_model(options: EngineOptions) -> LoadedModel:
    """Build (zoo name, first time) or read the model named by ``options.model``, its tokenizer and
    a torch runner sized by ``options``. Raises `ProblemError` naming the option at fault."""
    if options.model is None:
        raise ProblemError(NO_MODEL)
    plan = plan_engine(options, weights=True)
    path = plan.choice.checkpoint
    if path is None:
        raise ProblemError(sim_runner_problem(options, plan.choice.label))
    try:
        tokenizer = TextTokenizer.load(path) if (path / "tokenizer.json").is_file() else None
    except TokenizerError as e:  # there is one, and it is broken
        raise ProblemError(Problem("model", str(e))) from None
    if tokenizer is not None:  # from the config, before the weights are read
        _check_vocabulary(path, tokenizer, plan.choice.vocab_size)
    return LoadedModel(plan.choice.label, path, plan.build(), tokenizer)


def _check_vocabulary(path: Path, tokenizer: TextTokenizer, vocab_size: int) -> None:
    """A tokenizer that gives ids past the model's vocabulary is another model's: text encoding to
    one of them would fail as a prompt's fault (or index past the embedding). A model wider than
    its tokenizer is common (the embedding padded to a round size) and fine."""
    largest = tokenizer.largest_id()
    if largest is not None and largest >= vocab_size:
        raise ProblemError(
            Problem(
                "model",
                f"{path / 'tokenizer.json'} has token ids up to {largest}, but {path / 'config.json'} "
                f"has vocab_size {vocab_size}: the tokenizer is not this model's",
            )
        )
