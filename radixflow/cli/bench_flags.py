"""The flags of `radixflow bench`, their limits, and warnings for flags that have no effect.

Flags whose effect depends on other flags default to None ("not given") and are resolved later,
so a warning can tell a given flag that does nothing from a default.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from radixflow.bench.runner_choice import RUNNER_CHOICES
from radixflow.cli.args import float_arg, int_arg, non_negative_int, positive_int, warn
from radixflow.runners.sim import DEFAULT_SIM_MODEL, HARDWARE, SIM_MODELS
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.candidates import ARRIVALS, MIN_RATE, ORDERS, WorkloadSpec

# Cache capacities: every block and slot is bookkept in Python (tens of bytes each) and, on the
# torch runner, allocated as real tensors up front.
MAX_KV_BLOCKS = 1 << 22
MAX_STATE_SLOTS = 1 << 20
MAX_REPEAT = 1000
MAX_COST_MS = 3_600_000.0  # one hour per round or per chunk
TFLOPS_RANGE = (1e-3, 1e6)
DEFAULT_HARDWARE, DEFAULT_DEVICE, DEFAULT_PLACEMENT = "h100", "cpu", "branch"

WORKLOAD_FLAGS = (
    "--groups",
    "--candidates",
    "--context-len",
    "--candidate-len",
    "--independent",
    "--namespaces",
    "--order",
    "--arrival",
    "--rate",
    "--seed",
)
SIM_FLAGS = ("--hardware", "--round-overhead-ms", "--per-request-ms", "--tflops")


def add_arguments(b: argparse.ArgumentParser) -> None:
    _runner_flags(b.add_argument_group("runner and model"))
    _workload_flags(b.add_argument_group("workload (ignored with --trace)"))
    _scheduler_flags(b.add_argument_group("scheduler and cache"))
    io = b.add_argument_group("input and output")
    io.add_argument(
        "--trace",
        type=Path,
        metavar="PATH",
        help="read the workload from this JSONL trace (default: a generated workload)",
    )
    io.add_argument(
        "--write-trace",
        type=Path,
        metavar="PATH",
        help="write the workload to this JSONL trace (default: not written)",
    )
    io.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="write the results as strict JSON here (default: not written)",
    )
    io.add_argument(
        "--round-trace",
        type=Path,
        metavar="PATH",
        help="write every round of every policy as JSONL here (default: not written)",
    )


def _runner_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--runner", choices=RUNNER_CHOICES, default="sim", help="sim: cost model; torch: real forward"
    )
    g.add_argument(
        "--model",
        help=f"sim shape ({', '.join(SIM_MODELS)}; default {DEFAULT_SIM_MODEL}) or, with --runner "
        "torch, a zoo name or a checkpoint directory (default qwen3_5-small)",
    )
    g.add_argument("--device", help=f"torch runner device, e.g. cpu or cuda (default: {DEFAULT_DEVICE})")
    g.add_argument(
        "--repeat",
        type=int_arg(1, MAX_REPEAT),
        default=1,
        metavar="N",
        help=f"runs per policy, at most {MAX_REPEAT}; timings are medians",
    )
    g.add_argument(
        "--hardware",
        metavar="NAME|FILE",
        help=f"sim cost profile: {', '.join(sorted(HARDWARE))} or a profile file written by "
        f"`radixflow calibrate` (default: {DEFAULT_HARDWARE})",
    )
    cost = float_arg(0.0, MAX_COST_MS)
    g.add_argument(
        "--round-overhead-ms",
        type=cost,
        metavar="MS",
        help=f"sim: the whole fixed cost of a worker call (replaces the profile's per-call and "
        f"per-layer parts), at most {MAX_COST_MS:.0f} (default: the profile's)",
    )
    g.add_argument(
        "--per-request-ms",
        type=cost,
        metavar="MS",
        help=f"sim: cost per scheduled chunk, at most {MAX_COST_MS:.0f} (default: the profile's)",
    )
    g.add_argument(
        "--tflops",
        type=float_arg(*TFLOPS_RANGE),
        metavar="X",
        help=f"sim: sustained TFLOP/s, {TFLOPS_RANGE[0]:g} to {TFLOPS_RANGE[1]:g} (default: the profile's)",
    )


def _workload_flags(g: argparse._ArgumentGroup) -> None:
    w = WorkloadSpec()
    g.add_argument(
        "--groups", type=non_negative_int, metavar="N", help=f"shared contexts (default: {w.groups})"
    )
    g.add_argument(
        "--candidates",
        type=non_negative_int,
        metavar="N",
        help=f"candidates per context (default: {w.candidates})",
    )
    g.add_argument(
        "--context-len",
        type=non_negative_int,
        metavar="N",
        help=f"tokens per shared context (default: {w.context_len})",
    )
    g.add_argument(
        "--candidate-len",
        type=positive_int,
        metavar="N",
        help=f"tokens per candidate (default: {w.candidate_len})",
    )
    g.add_argument(
        "--independent",
        type=non_negative_int,
        metavar="N",
        help=f"unrelated requests mixed in (default: {w.independent})",
    )
    g.add_argument(
        "--namespaces",
        type=positive_int,
        metavar="N",
        help=f"groups spread over this many namespaces (default: {w.namespaces})",
    )
    g.add_argument("--order", choices=ORDERS, help=f"queue order of the candidates (default: {w.order})")
    g.add_argument("--arrival", choices=ARRIVALS, help=f"arrival process (default: {w.arrival})")
    g.add_argument(
        "--rate",
        metavar="PER_S",
        type=float_arg(MIN_RATE, positive=True),
        help=f"requests/s for poisson and bursty arrivals (default: {w.rate:g})",
    )
    g.add_argument(
        "--seed", type=int, metavar="N", help=f"random seed of token ids and arrivals (default: {w.seed})"
    )


def _scheduler_flags(g: argparse._ArgumentGroup) -> None:
    s = SchedulerConfig()
    g.add_argument(
        "--policy",
        action="append",
        choices=sorted(SCHEDULING_POLICIES),
        dest="policies",
        help="a policy to run; repeat for several (default: native and radixflow)",
    )
    g.add_argument(
        "--placement",
        choices=sorted(PLACEMENTS),
        help=f"where recurrent-state checkpoints go (default: {DEFAULT_PLACEMENT})",
    )
    g.add_argument(
        "--token-budget",
        type=positive_int,
        metavar="N",
        default=s.token_budget,
        help="prompt tokens per round",
    )
    g.add_argument(
        "--max-requests", type=positive_int, metavar="N", default=s.max_requests, help="chunks per round"
    )
    g.add_argument(
        "--block-size", type=positive_int, metavar="N", default=s.block_size, help="tokens per KV block"
    )
    g.add_argument(
        "--kv-blocks",
        type=int_arg(1, MAX_KV_BLOCKS),
        metavar="N",
        help=f"KV capacity in blocks, at most {MAX_KV_BLOCKS} "
        f"(default: sim {s.num_blocks}; torch: sized to the workload)",
    )
    g.add_argument(
        "--state-slots",
        type=int_arg(1, MAX_STATE_SLOTS),
        metavar="N",
        help=f"recurrent-state checkpoint slots, at most {MAX_STATE_SLOTS} "
        f"(default: sim {s.num_state_slots}; torch 256)",
    )


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def given(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    """The flags among ``flags`` that the user gave (their value is not None)."""
    return [f for f in flags if getattr(args, _dest(f)) is not None]


def warn_ineffective(args: argparse.Namespace) -> None:
    """Warn (stderr) about given flags that cannot change this run."""
    if args.trace is not None and (flags := given(args, WORKLOAD_FLAGS)):
        warn(f"{', '.join(flags)} {_have(flags)} no effect with --trace (the trace is the workload)")
    elif args.rate is not None and args.arrival in (None, "batch"):
        warn("--rate has no effect with --arrival batch (every request arrives at t=0)")
    if args.runner == "sim" and args.device is not None:
        warn("--device has no effect with the sim runner")
    if args.runner == "torch" and (flags := given(args, SIM_FLAGS)):
        warn(f"{', '.join(flags)} {_have(flags)} no effect with --runner torch (they set the sim cost model)")


def _have(flags: list[str]) -> str:
    return "has" if len(flags) == 1 else "have"
