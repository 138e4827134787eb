"""`radixflow bench`: scheduling policies side by side on one workload."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from radixflow.bench.harness import BenchReport, config_dict, run_policies
from radixflow.bench.report import render
from radixflow.bench.runner_choice import (
    RUNNER_CHOICES,
    Capacity,
    RunnerChoice,
    RunnerSetupError,
    SimChoice,
    TorchChoice,
)
from radixflow.cli.args import (
    check_output_paths,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from radixflow.cli.command import Command, UsageError
from radixflow.engine.engine import RoundRecord
from radixflow.runners.sim import HARDWARE, SIM_MODELS, HardwareProfile
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.candidates import ARRIVALS, ORDERS, WorkloadSpec, build_workload
from radixflow.workloads.trace import TraceError, read_trace, write_trace


def add_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("--runner", choices=RUNNER_CHOICES, default="sim")
    b.add_argument("--model", default=None, help=f"sim: {', '.join(SIM_MODELS)}; torch: a zoo name or path")
    b.add_argument("--hardware", choices=sorted(HARDWARE), default="h100", help="sim cost profile")
    b.add_argument("--round-overhead-ms", type=non_negative_float, help="sim: override fixed cost per round")
    b.add_argument(
        "--per-request-ms", type=non_negative_float, help="sim: override cost per scheduled chunk"
    )
    b.add_argument("--tflops", type=positive_float, help="sim: override sustained TFLOP/s")
    b.add_argument("--policy", action="append", choices=sorted(SCHEDULING_POLICIES), dest="policies")
    b.add_argument("--placement", choices=sorted(PLACEMENTS), default="branch")
    w = WorkloadSpec()
    b.add_argument("--groups", type=non_negative_int, default=w.groups)
    b.add_argument("--candidates", type=non_negative_int, default=w.candidates)
    b.add_argument("--context-len", type=non_negative_int, default=w.context_len)
    b.add_argument("--candidate-len", type=positive_int, default=w.candidate_len)
    b.add_argument("--independent", type=non_negative_int, default=w.independent)
    b.add_argument("--namespaces", type=positive_int, default=w.namespaces)
    b.add_argument("--order", choices=ORDERS, default=w.order)
    b.add_argument("--arrival", choices=ARRIVALS, default=w.arrival)
    b.add_argument("--rate", type=positive_float, default=w.rate, help="requests/s (poisson, bursty)")
    b.add_argument("--seed", type=int, default=w.seed)
    s = SchedulerConfig()
    b.add_argument("--token-budget", type=positive_int, default=s.token_budget)
    b.add_argument("--max-requests", type=positive_int, default=s.max_requests)
    b.add_argument("--block-size", type=positive_int, default=s.block_size)
    b.add_argument(
        "--kv-blocks",
        type=positive_int,
        help=f"KV capacity (sim default {s.num_blocks}; torch: sized to the workload)",
    )
    b.add_argument(
        "--state-slots",
        type=positive_int,
        help=f"state capacity (sim default {s.num_state_slots}; torch 256)",
    )
    b.add_argument("--device", default="cpu", help="torch runner device (cpu, cuda)")
    b.add_argument("--repeat", type=positive_int, default=1, help="runs per policy; timings are medians")
    b.add_argument("--trace", type=Path, help="read the workload from this JSONL trace")
    b.add_argument("--write-trace", type=Path, help="write the workload to this JSONL trace")
    b.add_argument("--json", type=Path, help="write results as JSON here")
    b.add_argument("--round-trace", type=Path, help="write every round of every policy as JSONL")


def _hardware(args: argparse.Namespace) -> HardwareProfile:
    hw = HARDWARE[args.hardware]
    if args.round_overhead_ms is not None:
        hw = replace(hw, round_overhead_s=args.round_overhead_ms / 1e3)
    if args.per_request_ms is not None:
        hw = replace(hw, per_request_s=args.per_request_ms / 1e3)
    if args.tflops is not None:
        hw = replace(hw, flops=args.tflops * 1e12)
    return hw


RUNNERS: dict[str, Callable[[argparse.Namespace], RunnerChoice]] = {
    "sim": lambda args: SimChoice(args.model, _hardware(args)),
    "torch": lambda args: TorchChoice(args.model, args.device),
}


def _workload(args: argparse.Namespace, vocab_size: int) -> tuple[list[Request], dict[str, object]]:
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
        vocab_size=vocab_size,
        seed=args.seed,
    )
    try:
        return build_workload(spec), spec.to_dict()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _scheduler_config(args: argparse.Namespace, capacity: Capacity | None = None) -> SchedulerConfig:
    default = SchedulerConfig()
    capacity = capacity or Capacity(default.num_blocks, default.num_state_slots)
    sched = SchedulerConfig(
        token_budget=args.token_budget,
        max_requests=args.max_requests,
        block_size=args.block_size,
        num_blocks=args.kv_blocks or capacity.kv_blocks,
        num_state_slots=args.state_slots or capacity.state_slots,
    )
    try:
        sched.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return sched


def run(args: argparse.Namespace, console: Console) -> int:
    check_output_paths(args.json, args.round_trace, args.write_trace)
    _scheduler_config(args)  # reject impossible budgets before any model is built
    try:
        choice = RUNNERS[args.runner](args)
        requests, workload = _workload(args, choice.vocab_size())
        sched = _scheduler_config(args, choice.capacity(requests, args.block_size))
        runner = choice.build(sched)
    except RunnerSetupError as e:
        raise UsageError(str(e)) from None
    if args.write_trace is not None:
        write_trace(args.write_trace, requests)
    policies = args.policies or ["native", "radixflow"]
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("starting", total=len(requests) * len(policies) * args.repeat)

        def on_round(policy: str, record: RoundRecord, engine: object) -> None:
            done = sum(1 for c in record.chunks if c[2] == len(by_id[c[0]].prompt))
            progress.update(task, advance=done, description=f"{policy}: round {record.index + 1}")

        by_id = {r.id: r for r in requests}
        runs = run_policies(requests, runner, sched, policies, args.placement, on_round, args.repeat)
    config = config_dict(
        sched, runner=args.runner, model=runner.model.name, placement=args.placement, repeats=args.repeat
    )
    config.update(choice.describe())
    report = BenchReport(workload, config, runs)
    title = f"{runner.model.name} · {len(requests)} requests · {args.runner} runner"
    render([r.result for r in runs], title, console)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2))
    if args.round_trace is not None:
        with open(args.round_trace, "w") as f:
            for policy_run in runs:
                for rec in policy_run.rounds:
                    f.write(json.dumps({"policy": policy_run.result.policy, **asdict(rec)}) + "\n")
    return 0


COMMAND = Command("bench", "run scheduling policies side by side on one workload", add_arguments, run)
