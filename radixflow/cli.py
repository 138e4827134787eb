"""`radixflow` command line: bench (policies side by side) and models (the zoo)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from radixflow.bench.harness import BenchReport, config_dict, run_policies
from radixflow.bench.report import render
from radixflow.engine.runner import Runner
from radixflow.runners.sim import DEFAULT_SIM_MODEL, HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.candidates import ARRIVALS, ORDERS, WorkloadSpec, build_workload
from radixflow.workloads.trace import TraceError, read_trace, write_trace


class UsageError(Exception):
    """A user mistake: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixflow", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("bench", help="run scheduling policies side by side on one workload")
    b.add_argument("--runner", choices=["sim", "torch"], default="sim")
    b.add_argument("--model", default=None, help=f"sim: {', '.join(SIM_MODELS)}; torch: a zoo name or path")
    b.add_argument("--hardware", choices=sorted(HARDWARE), default="h100", help="sim cost profile")
    b.add_argument("--policy", action="append", choices=sorted(SCHEDULING_POLICIES), dest="policies")
    b.add_argument("--placement", choices=sorted(PLACEMENTS), default="branch")
    w = WorkloadSpec()
    b.add_argument("--groups", type=_non_negative_int, default=w.groups)
    b.add_argument("--candidates", type=_non_negative_int, default=w.candidates)
    b.add_argument("--context-len", type=_non_negative_int, default=w.context_len)
    b.add_argument("--candidate-len", type=_positive(int), default=w.candidate_len)
    b.add_argument("--independent", type=_non_negative_int, default=w.independent)
    b.add_argument("--namespaces", type=_positive(int), default=w.namespaces)
    b.add_argument("--order", choices=ORDERS, default=w.order)
    b.add_argument("--arrival", choices=ARRIVALS, default=w.arrival)
    b.add_argument("--rate", type=_positive(float), default=w.rate, help="requests/s (poisson, bursty)")
    b.add_argument("--seed", type=int, default=w.seed)
    s = SchedulerConfig()
    b.add_argument("--token-budget", type=_positive(int), default=s.token_budget)
    b.add_argument("--max-requests", type=_positive(int), default=s.max_requests)
    b.add_argument("--block-size", type=_positive(int), default=s.block_size)
    b.add_argument("--kv-blocks", type=_positive(int), default=s.num_blocks)
    b.add_argument("--state-slots", type=_positive(int), default=s.num_state_slots)
    b.add_argument("--trace", type=Path, help="read the workload from this JSONL trace")
    b.add_argument("--write-trace", type=Path, help="write the workload to this JSONL trace")
    b.add_argument("--json", type=Path, help="write results as JSON here")
    b.add_argument("--round-trace", type=Path, help="write every round of every policy as JSONL")
    return p


def _sim_runner(args: argparse.Namespace) -> Runner:
    name = args.model or DEFAULT_SIM_MODEL
    if name not in SIM_MODELS:
        raise UsageError(f"unknown sim model {name!r} (known: {', '.join(SIM_MODELS)})")
    return SimRunner(SIM_MODELS[name], HARDWARE[args.hardware])


def _make_runner(args: argparse.Namespace) -> Runner:
    if args.runner == "sim":
        return _sim_runner(args)
    raise UsageError("the torch runner is not available in this build")


def _workload(args: argparse.Namespace, runner: Runner) -> tuple[list[Request], dict[str, object]]:
    if args.trace is not None:
        try:
            return read_trace(args.trace), {"trace": str(args.trace)}
        except TraceError as e:
            raise UsageError(str(e)) from None
    spec = WorkloadSpec(
        groups=args.groups,
        candidates=args.candidates,
        context_len=args.context_len,
        candidate_len=args.candidate_len,
        order=args.order,
        arrival=args.arrival,
        rate=args.rate,
        independent=args.independent,
        namespaces=args.namespaces,
        vocab_size=runner.model.vocab_size,
        seed=args.seed,
    )
    try:
        return build_workload(spec), spec.to_dict()
    except ValueError as e:
        raise UsageError(str(e)) from None


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    sched = SchedulerConfig(
        token_budget=args.token_budget,
        max_requests=args.max_requests,
        block_size=args.block_size,
        num_blocks=args.kv_blocks,
        num_state_slots=args.state_slots,
    )
    try:
        sched.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    runner = _make_runner(args)
    requests, workload = _workload(args, runner)
    if args.write_trace is not None:
        write_trace(args.write_trace, requests)
    policies = args.policies or ["native", "radixflow"]
    runs = run_policies(requests, runner, sched, policies, args.placement)
    config = config_dict(sched, runner=args.runner, model=runner.model.name, placement=args.placement)
    if args.runner == "sim":
        config["hardware"] = args.hardware
    report = BenchReport(workload, config, runs)
    title = f"{runner.model.name} · {len(requests)} requests · {args.runner} runner"
    render([run.result for run in runs], title, console)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2))
    if args.round_trace is not None:
        with open(args.round_trace, "w") as f:
            for run in runs:
                for rec in run.rounds:
                    f.write(json.dumps({"policy": run.result.policy, **asdict(rec)}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    console = Console()
    try:
        args = build_parser().parse_args(argv)
        return cmd_bench(args, console)
    except UsageError as e:
        print(f"radixflow: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
