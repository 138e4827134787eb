"""`radixflow serve MODEL`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine."""

from __future__ import annotations

import argparse
import importlib
import sys

from rich.console import Console

from radixflow.cli.args import int_arg, non_negative_float, non_negative_int, positive_int
from radixflow.cli.command import Command, UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES

SERVE_EXTRA = ("fastapi", "uvicorn", "prometheus_client")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="zoo name (see `radixflow models`) or checkpoint directory")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int_arg(0, 65535), default=8000, help="port to listen on")
    p.add_argument(
        "--policy", choices=sorted(SCHEDULING_POLICIES), default="radixflow", help="scheduling policy"
    )
    p.add_argument("--placement", choices=sorted(PLACEMENTS), default="branch", help="checkpoint placement")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--block-size", type=positive_int, default=16, help="tokens per KV block")
    p.add_argument(
        "--kv-blocks", type=int_arg(1, 4_194_304), default=1024, help="KV cache blocks (allocated up front)"
    )
    p.add_argument(
        "--state-slots", type=int_arg(0, 1_048_576), default=256, help="recurrent-state cache slots"
    )
    p.add_argument("--token-budget", type=positive_int, default=2048, help="tokens computed per round")
    p.add_argument("--max-requests", type=positive_int, default=32, help="requests per round")
    p.add_argument(
        "--max-pending", type=positive_int, default=256, help="accepted, unanswered requests before 429"
    )
    p.add_argument(
        "--default-max-tokens",
        type=positive_int,
        default=256,
        help="chat max_tokens when a request names none",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int_arg(1024, 2**40),
        default=4 * 1024 * 1024,  # ServerConfig's default (a test keeps them equal)
        help="larger request bodies get 413 before they are parsed",
    )
    p.add_argument(
        "--drain-timeout",
        type=non_negative_float,
        default=30.0,
        help="seconds to finish requests on shutdown",
    )
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.add_argument(
        "--torch-threads", type=non_negative_int, default=0, help="torch CPU threads (0: torch's default)"
    )


def require_serve_extra() -> None:
    for name in SERVE_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f"radixflow serve needs the serve extra (package {name!r} is missing): "
                "pip install -e '.[serve]'"
            ) from None


def run(args: argparse.Namespace, console: Console) -> int:
    require_torch_extra("radixflow serve")
    require_serve_extra()
    from radixflow.cli.bench_setup import check_torch_memory
    from radixflow.generation.setup import EngineOptions, ModelSetupError, load_model, model_path
    from radixflow.server.serve import build_server
    from radixflow.server.state import ServerConfig

    options = EngineOptions(
        policy=args.policy,
        placement=args.placement,
        device=args.device,
        block_size=args.block_size,
        kv_blocks=args.kv_blocks,
        state_slots=args.state_slots,
        token_budget=args.token_budget,
        max_requests=args.max_requests,
    )
    problem = options.problem()
    if problem is not None:
        raise UsageError(problem)
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    try:
        check_torch_memory(model_path(args.model), args.device, options.scheduler_config())
        model = load_model(args.model, options)
    except ModelSetupError as e:
        raise UsageError(str(e)) from None
    config = ServerConfig(args.max_pending, args.default_max_tokens, args.drain_timeout, args.max_body_bytes)
    server = build_server(model, options, config, args.host, args.port, args.log_level)
    print(f"radixflow: serving {args.model} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    server.run()
    return 0


COMMAND = Command("serve", "serve a model over an OpenAI-compatible HTTP API", add_arguments, run)
