"""What `radixflow serve` (one server or a fleet) and `radixflow run-batch` share before a model
loads: the serve extra required, the server's settings and thread plan from the flags, and the
model's setup refused in one line where it cannot run (`refuse_setup`, which `generate` and
`score` call too: a refused run is its one error line, with no warning of the run before it)."""

from __future__ import annotations

import argparse
import importlib
import sys

from radixflow.cli.command import UsageError
from radixflow.options import EngineOptions, plan_engine
from radixflow.options.flags import flag_spellings, given_values
from radixflow.options.machine import server_thread_plan
from radixflow.options.sizes import exact_size
from radixflow.options.spec import checked
from radixflow.problems import ProblemError
from radixflow.server.config import Listen, ServerConfig

# what `pip install -e '.[serve]'` brings that a command imports (httpx: run-batch's in-process client)
SERVE_EXTRA = ("fastapi", "uvicorn", "prometheus_client")
BATCH_EXTRA = (*SERVE_EXTRA, "httpx")


def require_serve_extra(what: str = "radixflow serve", packages: tuple[str, ...] = SERVE_EXTRA) -> None:
    for name in packages:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f"{what} needs the serve extra (package {name!r} is missing): pip install -e '.[serve]'"
            ) from None


def threads(options: EngineOptions, tokenizer_threads: int | None, cpus: int) -> tuple[EngineOptions, int]:
    """The options (their ``torch_threads``) and the tokenizer threads the server runs with on
    ``cpus`` CPUs: what the user gave, else the server's thread plan. Pure."""
    plan = server_thread_plan(cpus)
    if options.torch_threads is None:
        options = options.replace(torch_threads=plan.torch_threads)
    return options, tokenizer_threads or plan.tokenizer_threads


def server_settings(args: argparse.Namespace) -> tuple[Listen, ServerConfig]:
    """Where to listen and the server's limits: the flags given, the declared defaults for the rest
    (`ProblemError` naming the flag at fault)."""
    return checked(Listen, given_values(args, Listen)), checked(
        ServerConfig, given_values(args, ServerConfig)
    )


LANE_OPTIONS = ("long_body_bytes", "long_text_threads")  # what only the long-text lane reads


def unused_lane(config: ServerConfig, given_names: list[str]) -> str | None:
    """Why the long-text lane options given cannot change a run (None: they can, or none is
    given): a body is read in the lane when it is over ``long_body_bytes`` and within
    ``max_body_bytes``, so with the first not below the second no body ever is. Pure."""
    names = [flag_spellings(ServerConfig)[n] for n in LANE_OPTIONS if n in given_names]
    if not names or config.long_body_bytes < config.max_body_bytes:
        return None
    long, most = exact_size(config.long_body_bytes), exact_size(config.max_body_bytes)
    limits = f"--long-body-bytes {long} and within --max-body-bytes {most}"
    return f"{', '.join(names)} {'has' if len(names) == 1 else 'have'} no effect: no body is over {limits}"


def warn_unused_lane(args: argparse.Namespace, config: ServerConfig) -> None:
    if (message := unused_lane(config, list(given_values(args, ServerConfig)))) is not None:
        print(f"radixflow: warning: {message}", file=sys.stderr)


def refuse_setup(options: EngineOptions, local: bool = True) -> None:
    """Raise `ProblemError` for what the model's setup refuses without loading its weights (a
    model the runner has not, bad torch settings, a ``--cache-memory`` budget below one entry;
    ``local``: the model is built on this machine, so its entry sizes can be read here)."""
    from radixflow.generation.setup import weights_problem

    problem = weights_problem(options, local=local)
    if problem is not None:
        raise ProblemError(problem)
    if options.cache_memory is not None and local:
        plan_engine(options).scheduler_config()  # the budget against the model's entry sizes
