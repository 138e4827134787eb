"""`radixflow serve MODEL`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from rich.console import Console

from radixflow.cli.args import (
    check_output_paths,
    int_arg,
    non_negative_float,
    positive_int,
    warn_ineffective_for_model,
    warn_ineffective_options,
)
from radixflow.cli.command import Command, UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.options import EngineOptions
from radixflow.options.flags import add_engine_flags, from_args
from radixflow.options.machine import cpu_count, server_thread_plan

SERVE_EXTRA = ("fastapi", "uvicorn", "prometheus_client")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model_positional=True)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on")
    g.add_argument("--port", type=int_arg(0, 65535), default=8000, help="port to listen on")
    g.add_argument(
        "--max-pending", type=positive_int, default=256, help="accepted, unanswered requests before 429"
    )
    g.add_argument(
        "--default-max-tokens",
        type=positive_int,
        default=256,
        help="chat max_tokens when a request names none",
    )
    g.add_argument(
        "--max-body-bytes",
        type=int_arg(1024, 2**40),
        default=4 * 1024 * 1024,  # ServerConfig's default (a test keeps them equal)
        help="larger request bodies get 413 before they are parsed",
    )
    g.add_argument(
        "--tokenizer-threads",
        type=positive_int,
        help="threads that tokenize prompts and build answers beside the event loop "
        "(default: the server's thread plan, 2 up to 23 CPUs)",
    )
    g.add_argument(
        "--drain-timeout",
        type=non_negative_float,
        default=30.0,
        help="seconds to finish requests on shutdown",
    )
    g.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")


def require_serve_extra() -> None:
    for name in SERVE_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f"radixflow serve needs the serve extra (package {name!r} is missing): "
                "pip install -e '.[serve]'"
            ) from None


def threads(options: EngineOptions, tokenizer_threads: int | None, cpus: int) -> tuple[EngineOptions, int]:
    """The options (their ``torch_threads``) and the tokenizer threads the server runs with on
    ``cpus`` CPUs: what the user gave, else the server's thread plan. Pure."""
    plan = server_thread_plan(cpus)
    if options.torch_threads is None:
        options = options.replace(torch_threads=plan.torch_threads)
    return options, tokenizer_threads or plan.tokenizer_threads


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow serve")
    require_serve_extra()
    from radixflow.generation.setup import load_model
    from radixflow.server.serve import build_server
    from radixflow.server.state import ServerConfig

    options = from_args(args)
    if options.trace_out is not None:
        check_output_paths({"--trace-out": Path(options.trace_out)}, {})
    warn_ineffective_options(args, options)
    options, tokenizer_threads = threads(options, args.tokenizer_threads, cpu_count())
    model = load_model(options)
    warn_ineffective_for_model(args, model.setup.choice.has_recurrent)
    config = ServerConfig(
        args.max_pending, args.default_max_tokens, args.drain_timeout, args.max_body_bytes, tokenizer_threads
    )
    server = build_server(model, config, args.host, args.port, args.log_level)
    print(
        f"radixflow: serving {args.model} on http://{args.host}:{args.port}/v1 "
        f"({options.torch_threads} torch threads, {tokenizer_threads} tokenizer threads)",
        file=sys.stderr,
    )
    server.run()
    return 0


COMMAND = Command("serve", "serve a model over an OpenAI-compatible HTTP API", add_arguments, run)
