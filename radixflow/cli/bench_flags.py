"""The flags of `radixflow bench`, their limits, and warnings for flags that have no effect.

Flags whose effect depends on other flags default to None ("not given") and are resolved later,
so a warning can tell a given flag that does nothing from a default.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from radixflow.cli.args import int_arg, warn
from radixflow.options.flag_warnings import ONE_TOKEN
from radixflow.options.flags import add_engine_flags, file_path_arg, not_stdin, parse_float, parse_int
from radixflow.options.numerals import typed
from radixflow.workloads.candidates import ARRIVALS, ORDERS, WorkloadSpec, value_rule

MAX_REPEAT = 1000

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
)


# what a trace replaces: the workload's flags, and the seed it is drawn from (bench's requests
# are greedy, so the seed is the sampler's for nothing)
TRACE_REPLACES = (*WORKLOAD_FLAGS, "--seed")


def add_arguments(b: argparse.ArgumentParser) -> None:
    add_engine_flags(b)
    _workload_flags(b.add_argument_group("workload (ignored with --trace)"))
    io = b.add_argument_group("input and output")
    io.add_argument(
        "--repeat",
        type=int_arg(1, MAX_REPEAT),
        default=1,
        metavar="N",
        help=f"runs per policy, at most {MAX_REPEAT}, interleaved (a, b, a, b); timings are medians, "
        "and each policy's change from the first is shown trial by trial",
    )
    io.add_argument(
        "--trace",
        type=not_stdin,
        metavar="PATH",
        help="read the workload from this JSONL trace (default: a generated workload)",
    )
    io.add_argument(
        "--write-trace",
        type=file_path_arg,
        metavar="PATH",
        help="write the workload to this JSONL trace (-: standard output; default: not written)",
    )
    io.add_argument(
        "--json",
        type=file_path_arg,
        metavar="PATH",
        help="write the results as strict JSON here (-: standard output, the table then going to "
        "standard error; default: not written)",
    )
    io.add_argument(
        "--round-trace",
        type=file_path_arg,
        metavar="PATH",
        help="write every round of every policy and trial (--repeat), a rolled-back one with its error, as "
        "JSONL here (-: standard output; default: not written)",
    )


def _workload_flags(g: argparse._ArgumentGroup) -> None:
    w = WorkloadSpec()
    g.add_argument(
        "--groups", type=workload_arg("groups"), metavar="N", help=f"shared contexts (default: {w.groups})"
    )
    g.add_argument(
        "--candidates",
        type=workload_arg("candidates"),
        metavar="N",
        help=f"candidates per context (default: {w.candidates})",
    )
    g.add_argument(
        "--context-len",
        type=workload_arg("context_len"),
        metavar="N",
        help=f"tokens per shared context (default: {w.context_len})",
    )
    g.add_argument(
        "--candidate-len",
        type=workload_arg("candidate_len"),
        metavar="N",
        help=f"tokens per candidate (default: {w.candidate_len})",
    )
    g.add_argument(
        "--independent",
        type=workload_arg("independent"),
        metavar="N",
        help=f"unrelated requests mixed in (default: {w.independent})",
    )
    g.add_argument(
        "--namespaces",
        type=workload_arg("namespaces"),
        metavar="N",
        help=f"groups spread over this many namespaces (default: {w.namespaces})",
    )
    g.add_argument("--order", choices=ORDERS, help=f"queue order of the candidates (default: {w.order})")
    bursts = f"bursty: {w.burst_size} at a time, a burst every {w.burst_size}/--rate s"
    g.add_argument(
        "--arrival",
        choices=ARRIVALS,
        help=f"arrival process (batch: every request at t=0; poisson: exponential gaps at --rate; "
        f"{bursts}; default: {w.arrival})",
    )
    g.add_argument(
        "--rate",
        metavar="PER_S",
        type=workload_arg("rate"),  # its least value named at once: 0 is below it, not "not positive"
        help=f"requests/s for poisson and bursty arrivals (default: {w.rate:g})",
    )


def workload_arg(key: str) -> Callable[[str], float]:
    """argparse type of the flag setting the workload key ``key``: `WorkloadSpec`'s own rule for
    it, read as the flag is (before the model loads), in the TOML key's words."""
    parse = parse_float if isinstance(getattr(WorkloadSpec(), key), float) else parse_int

    def parse_checked(text: str) -> float:
        value = parse(text)
        if (rule := value_rule(key, value)) is not None:
            raise argparse.ArgumentTypeError(f"{rule}, got {typed(text)}")
        return value

    return parse_checked


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def given(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    """The flags among ``flags`` that the user gave (their value is not None)."""
    return [f for f in flags if getattr(args, _dest(f)) is not None]


def warn_ineffective(args: argparse.Namespace, runner: str) -> None:
    """Warn (stderr) about given flags that cannot change this run on ``runner``."""
    if args.trace is not None and (flags := given(args, TRACE_REPLACES)):
        warn(f"{', '.join(flags)} {_have(flags)} no effect with --trace (the trace is the workload)")
    elif args.rate is not None and args.arrival in (None, "batch"):
        warn("--rate has no effect with --arrival batch (every request arrives at t=0)")
    if args.trace is None and args.namespaces is not None and args.groups in (0, 1):
        why = "the groups go round-robin over the namespaces; independent requests are in ns0"
        warn(f"--namespaces has no effect with --groups {args.groups} ({why})")
    if runner == "sim" and args.decode_fixed_cost_ms is not None:
        warn(f"--decode-fixed-cost-ms has no effect on the sim runner: {ONE_TOKEN}")


def _have(flags: list[str]) -> str:
    return "has" if len(flags) == 1 else "have"
