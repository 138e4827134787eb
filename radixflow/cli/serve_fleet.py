"""`radixflow serve --replicas N` (or ``--ray-address``): the fleet of engines on Ray Serve behind
one ingress, refused in one line before Ray starts where it cannot run."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from rich.console import Console

from radixflow.cli.args import warn, warn_ineffective_options
from radixflow.cli.command import UsageError
from radixflow.cli.serve_setup import refuse_setup, require_serve_extra, server_settings, warn_unused_lane
from radixflow.cli.sigterm import TAKEN
from radixflow.fleet import DEFAULT_ROUTER
from radixflow.options import EngineOptions
from radixflow.options.flags import from_args
from radixflow.options.machine import cpu_count
from radixflow.problems import Problem, ProblemError, counted
from radixflow.server.config import Listen, ServerConfig
from radixflow.server.listen import base_url, bind, bound_port

if TYPE_CHECKING:  # the cluster package needs the serve and cluster extras: only a fleet imports it
    from radixflow.cluster.fleet_metrics import FleetFigures
    from radixflow.cluster.launch import FleetSpec


def require_cluster_extra() -> None:
    try:
        importlib.import_module("ray.serve")
    except ImportError as e:
        raise UsageError(
            f"radixflow serve --replicas needs the cluster extra ({e}): pip install -e '.[cluster]'"
        ) from None


def run_fleet(args: argparse.Namespace, console: Console) -> int:
    """Replicas on Ray Serve, each with one torch thread per CPU it is given (one by default)."""
    options = from_args(args, local=args.ray_address is None)  # a cluster's replicas: its nodes' CPUs
    _refuse_fleet(args, options)
    from radixflow.cluster.fleet_metrics import FleetFigures
    from radixflow.cluster.launch import (
        FleetSpec,
        RayStartError,
        ReplicaStartError,
        cpu_shortfall,
        local_contention,
        ray_serve,
    )

    listen, config = server_settings(args)
    if options.torch_threads is None:
        options = options.replace(torch_threads=1)  # a replica per CPU: its forward passes get one
    # a CPU for each of a replica's torch threads: Ray places (and a local instance counts) them so
    gpus = 1.0 if options.device.startswith("cuda") else 0.0  # a GPU of its own for each replica
    spec = FleetSpec(
        args.replicas, args.router or DEFAULT_ROUTER, args.ray_address, options.torch_threads, gpus
    )
    if (contention := local_contention(spec, cpu_count())) is not None:
        warn(contention)
    sock = bind(listen.host, listen.port)  # before any replica loads its model
    # of a fleet that goes ahead: after its address is bound, as one server warns
    warn_unused_lane(args, config)
    warn_ineffective_options(args, options, local=args.ray_address is None)
    try:
        with hangup_exits(), ray_serve(spec):
            shortfall = cpu_shortfall(spec)
            if shortfall is not None:
                warn(shortfall)
            figures = FleetFigures()  # the replicas' engine figures, for the ingress's /metrics
            try:
                serve_fleet(args.model, options, spec, config, listen, sock, figures)
            finally:  # drained or refused: Serve stops the replicas next, which is no fleet going down
                figures.stop()
    except RayStartError as e:  # a bad --ray-address: one line, as every flag's error
        raise UsageError(str(e)) from None
    except ReplicaStartError as e:  # Ray and Serve are shut down by now: nothing is left running
        raise UsageError(f"--replicas {spec.replicas}: {e}") from None
    except SystemExit as e:
        return _signal_exit(e)
    return 0


def _signal_exit(e: SystemExit) -> int:
    """ray.init's SIGTERM handler (sys.exit(15)), kept so that its exit runs the fleet's teardown,
    or `hangup_exits`'; past the drain and that teardown the command ends as one server's SIGTERM
    or SIGHUP does: 143 or 129. Any other exit goes on."""
    sig = signal.SIGHUP if isinstance(e, HungUp) else e.code
    if sig not in TAKEN:
        raise e
    with contextlib.suppress(OSError):  # stderr gone with the terminal: the code still says it
        print(f"radixflow: {TAKEN[signal.Signals(sig)]}", file=sys.stderr, flush=True)
    return 128 + sig


class HungUp(SystemExit):
    """A SIGHUP, exiting as Ray's SIGTERM handler exits (its code: the exit status)."""


@contextlib.contextmanager
def hangup_exits() -> Iterator[None]:
    """While entered, a SIGHUP raises `HungUp`, as Ray's SIGTERM handler raises SystemExit: the
    ingress drains on it and raises it again here, where the system's handler ended the process
    past the fleet's teardown (a cluster's application left running). One ignored (``nohup``'s)
    stays ignored."""

    def hung_up(signum: int, frame: FrameType | None) -> None:
        raise HungUp(128 + signal.SIGHUP)

    main = threading.current_thread() is threading.main_thread()  # none can be set elsewhere
    before = signal.getsignal(signal.SIGHUP)
    if not main or before is signal.SIG_IGN or before is None:  # ignored, or set outside Python
        yield
        return
    signal.signal(signal.SIGHUP, hung_up)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


def serve_fleet(
    model: str,
    options: EngineOptions,
    spec: FleetSpec,
    config: ServerConfig,
    listen: Listen,
    sock: socket.socket,
    figures: FleetFigures,
) -> None:
    """Deploy the replicas and serve them until stopped (inside `ray_serve`)."""
    from radixflow.cluster.launch import deploy, fleet_server

    handle = deploy(options, spec, config, figures)
    port = bound_port(sock)
    server = fleet_server(handle, config, listen.host, port, listen.log_level, figures)
    print(
        f"radixflow: serving {model} on {base_url(listen.host, port)} "
        f"({counted(spec.replicas, 'replica')} on Ray Serve, router {spec.router}, "
        f"{counted(options.torch_threads, 'torch thread')} each)",
        file=sys.stderr,
    )
    server.run(sockets=[sock])


def _refuse_fleet(args: argparse.Namespace, options: EngineOptions) -> None:
    """Refuse, before Ray starts, a fleet that ``options`` cannot serve: a `UsageError`, or the
    message of the extra that is missing."""
    if options.trace_out is not None:
        raise UsageError("--trace-out traces one engine; it cannot be used with --replicas")
    require_serve_extra()
    require_cluster_extra()
    # here, in one line: in a replica it fails the deployment (the device: replicas on this machine)
    refuse_setup(options, local=args.ray_address is None)
    _refuse_gpus(args, options.device)
    if args.ray_address is None:
        _refuse_memory(args.replicas, options)
    from radixflow.cluster.launch import ingress_tokenizer
    from radixflow.models.zoo_catalogue import model_names

    if args.ray_address is None and options.model not in model_names():  # a zoo model has one
        ingress_tokenizer(Path(options.model))  # the ingress tokenizes: checked before any replica loads


def _refuse_memory(replicas: int, options: EngineOptions) -> None:
    """`ProblemError` when the caches of ``replicas`` replicas on this machine do not fit its
    available memory together: each replica checks its own pools alone, so two that each fit
    started, then filled the memory together until one was killed (and restarted, and killed)."""
    from radixflow.options.build import plan_engine
    from radixflow.options.machine import pools_problem

    plan = plan_engine(options)
    scheduler = plan.scheduler_config()
    entry = plan.choice.entry_bytes(scheduler.block_size)
    each = entry.block * scheduler.num_blocks + entry.slot * scheduler.num_state_slots
    what = (
        f"{counted(replicas, 'replica')} of {scheduler.num_blocks} KV blocks of {scheduler.block_size} "
        f"tokens, {scheduler.num_state_slots} state slots each"
    )
    problem = pools_problem(each * replicas, options.device, what, scheduler.cache_memory is not None)
    if problem is not None:
        raise ProblemError(Problem(problem.param, f"{problem.message}, or run fewer replicas"))


def _refuse_gpus(args: argparse.Namespace, device: str) -> None:
    """On CUDA each replica is given a GPU of its own, which it sees as ``cuda``: a device index
    names a GPU it cannot see, and a machine with fewer GPUs than replicas would leave Serve
    waiting without a word. `UsageError` for either."""
    if not device.startswith("cuda"):
        return
    if device != "cuda":
        raise UsageError(
            f"--device {device}: with --replicas, Ray gives each replica a GPU of its own, which "
            "it sees as cuda; give --device cuda"
        )
    if args.ray_address is None:
        import torch

        count = torch.cuda.device_count()
        if args.replicas > count:
            raise UsageError(
                f"--replicas {args.replicas}: on --device cuda each replica takes a GPU of its own, "
                f"and this machine has {count}"
            )
