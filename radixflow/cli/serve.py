"""`radixflow serve MODEL`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from rich.console import Console

from radixflow.cli.args import (
    check_output_paths,
    engine_inputs,
    int_arg,
    warn,
    warn_ineffective_for_model,
    warn_ineffective_options,
)
from radixflow.cli.command import ENGINE_LEFT
from radixflow.cli.extras import require_torch_extra
from radixflow.cli.serve_fleet import run_fleet
from radixflow.cli.serve_setup import (
    refuse_setup,
    require_serve_extra,
    server_settings,
    threads,
    warn_unused_lane,
)
from radixflow.fleet import DEFAULT_ROUTER, MAX_REPLICAS, ROUTERS, router_problem
from radixflow.options.flags import add_engine_flags, add_option_flags, from_args
from radixflow.options.machine import cpu_count
from radixflow.problems import counted
from radixflow.server.config import Listen, ServerConfig
from radixflow.server.listen import base_url, bind, bound_port


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model_required=True)
    add_option_flags(p, Listen, "server")
    add_option_flags(p, ServerConfig, "server limits and threads")
    f = p.add_argument_group("fleet (Ray Serve)")
    f.add_argument(
        "--replicas",
        type=int_arg(1, MAX_REPLICAS),
        default=1,
        help="engine replicas; more than one runs them as a Ray Serve deployment behind this "
        "server (needs the cluster extra: pip install -e '.[cluster]'); 1: one engine here, no Ray "
        "(unless --ray-address)",
    )
    f.add_argument(
        "--router",
        type=router_arg,
        default=None,
        metavar=f"{{{','.join(ROUTERS)}}}",
        help="which replica serves a request: pow2 (the shorter of two random queues), prefix "
        "(where its prompt prefix went), checkpoint (the deepest READY state checkpoint) "
        f"(default: {DEFAULT_ROUTER})",
    )
    f.add_argument(
        "--ray-address", help="join this Ray cluster (e.g. ray://head:10001 or auto) instead of starting one"
    )


def router_arg(text: str) -> str:
    """argparse type: a router's name, refused as an experiment's ``router`` key refuses it."""
    problem = router_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem.message)
    return text


def fleet_wanted(args: argparse.Namespace) -> bool:
    return args.replicas > 1 or args.ray_address is not None


def run(args: argparse.Namespace, console: Console) -> int:
    if args.router is not None and args.replicas == 1:  # here or on a cluster: it gets every request
        warn("--router has no effect with one replica (see --replicas)")
    if fleet_wanted(args):
        return run_fleet(args, console)
    require_torch_extra("radixflow serve")
    require_serve_extra()
    from radixflow.generation.setup import load_model
    from radixflow.server.serve import build_server

    options = from_args(args)
    listen, config = server_settings(args)
    if options.trace_out is not None:
        check_output_paths({"--trace-out": Path(options.trace_out)}, engine_inputs(options))
    options, tokenizer_threads = threads(options, args.tokenizer_threads, cpu_count())
    config = replace(config, tokenizer_threads=tokenizer_threads)
    refuse_setup(options)  # before the port: a mistyped model is named, not another server's port
    sock = bind(listen.host, listen.port)  # before the model loads: a bad address is one line
    # of a server that goes ahead, after the thread plan: the clock's warning counts its threads
    warn_ineffective_options(args, options)
    warn_unused_lane(args, config)
    model = load_model(options)
    warn_ineffective_for_model(args, model.setup.choice.has_recurrent)
    port = bound_port(sock)
    server = build_server(model, config, listen.host, port, listen.log_level)
    prior = model.setup.choice.describe(model.setup.runner).get("round_predictor")
    print(
        f"radixflow: serving {args.model} on {base_url(listen.host, port)} "
        f"({counted(options.torch_threads, 'torch thread')}, "
        f"{counted(config.tokenizer_threads, 'tokenizer thread')}; "
        f"round predictor from {prior or 'nothing'})",
        file=sys.stderr,
    )
    return serve_until_stopped(server, sock)


class Stoppable(Protocol):
    """What `serve_until_stopped` runs: `radixflow.server.serve.Server`."""

    engine_left: bool

    def run(self, sockets: list[socket.socket] | None = None) -> None: ...


def serve_until_stopped(server: Stoppable, sock: socket.socket) -> int:
    """Run ``server`` until it is stopped; 0. A Ctrl-C, SIGTERM or SIGHUP it drained on is raised
    again as it ends (a KeyboardInterrupt: the CLI's one line and the signal's exit code).

    Unless it left its engine thread behind, stuck in a round (`Server.engine_left`): its clients
    have their answers, and the process ends without the interpreter's shutdown, which would wait
    on that thread or abort under it (a torch call returning into a finalizing interpreter): the
    interrupt carries `ENGINE_LEFT` (the CLI ends the process with its line), or, stopped without
    one, the process ends here with its line."""
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt as e:
        if server.engine_left:
            e.add_note(ENGINE_LEFT)
        raise
    if not server.engine_left:
        return 0
    print(f"radixflow: stopped; {ENGINE_LEFT}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(0)
