"""`radixflow` command line: bench (policies side by side) and models (the zoo)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

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
from radixflow.engine.engine import RoundRecord
from radixflow.runners.sim import HARDWARE, SIM_MODELS, HardwareProfile
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


def _number(kind: type, positive: bool) -> Callable[[str], object]:
    """argparse type: a number of ``kind`` that is > 0 (``positive``) or >= 0."""

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a valid {kind.__name__}: {text!r}") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be {'positive' if positive else '>= 0'}, got {text}")
        return value

    return parse


_positive_int, _positive_float = _number(int, True), _number(float, True)
_non_negative_int, _non_negative_float = _number(int, False), _number(float, False)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixflow", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("bench", help="run scheduling policies side by side on one workload")
    b.add_argument("--runner", choices=RUNNER_CHOICES, default="sim")
    b.add_argument("--model", default=None, help=f"sim: {', '.join(SIM_MODELS)}; torch: a zoo name or path")
    b.add_argument("--hardware", choices=sorted(HARDWARE), default="h100", help="sim cost profile")
    b.add_argument("--round-overhead-ms", type=_non_negative_float, help="sim: override fixed cost per round")
    b.add_argument(
        "--per-request-ms", type=_non_negative_float, help="sim: override cost per scheduled chunk"
    )
    b.add_argument("--tflops", type=_positive_float, help="sim: override sustained TFLOP/s")
    b.add_argument("--policy", action="append", choices=sorted(SCHEDULING_POLICIES), dest="policies")
    b.add_argument("--placement", choices=sorted(PLACEMENTS), default="branch")
    w = WorkloadSpec()
    b.add_argument("--groups", type=_non_negative_int, default=w.groups)
    b.add_argument("--candidates", type=_non_negative_int, default=w.candidates)
    b.add_argument("--context-len", type=_non_negative_int, default=w.context_len)
    b.add_argument("--candidate-len", type=_positive_int, default=w.candidate_len)
    b.add_argument("--independent", type=_non_negative_int, default=w.independent)
    b.add_argument("--namespaces", type=_positive_int, default=w.namespaces)
    b.add_argument("--order", choices=ORDERS, default=w.order)
    b.add_argument("--arrival", choices=ARRIVALS, default=w.arrival)
    b.add_argument("--rate", type=_positive_float, default=w.rate, help="requests/s (poisson, bursty)")
    b.add_argument("--seed", type=int, default=w.seed)
    s = SchedulerConfig()
    b.add_argument("--token-budget", type=_positive_int, default=s.token_budget)
    b.add_argument("--max-requests", type=_positive_int, default=s.max_requests)
    b.add_argument("--block-size", type=_positive_int, default=s.block_size)
    b.add_argument(
        "--kv-blocks",
        type=_positive_int,
        help=f"KV capacity (sim default {s.num_blocks}; torch: sized to the workload)",
    )
    b.add_argument(
        "--state-slots",
        type=_positive_int,
        help=f"state capacity (sim default {s.num_state_slots}; torch 256)",
    )
    b.add_argument("--device", default="cpu", help="torch runner device (cpu, cuda)")
    b.add_argument("--repeat", type=_positive_int, default=1, help="runs per policy; timings are medians")
    b.add_argument("--trace", type=Path, help="read the workload from this JSONL trace")
    b.add_argument("--write-trace", type=Path, help="write the workload to this JSONL trace")
    b.add_argument("--json", type=Path, help="write results as JSON here")
    b.add_argument("--round-trace", type=Path, help="write every round of every policy as JSONL")
    m = sub.add_parser("models", help="list the built-in model zoo")
    m.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


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


def _check_output_paths(*paths: Path | None) -> None:
    """Fail before a long run, not after it, when a result file cannot be written."""
    for path in paths:
        if path is not None and not path.resolve().parent.is_dir():
            raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
        if path is not None and path.is_dir():
            raise UsageError(f"cannot write {path}: it is a directory")


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    _check_output_paths(args.json, args.round_trace, args.write_trace)
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
    render([run.result for run in runs], title, console)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2))
    if args.round_trace is not None:
        with open(args.round_trace, "w") as f:
            for run in runs:
                for rec in run.rounds:
                    f.write(json.dumps({"policy": run.result.policy, **asdict(rec)}) + "\n")
    return 0


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    try:
        from radixflow.models.zoo import list_models
    except ImportError as e:
        raise UsageError(f"the model zoo needs the torch extra: pip install -e '.[torch]' ({e})") from None
    infos = list_models()
    if args.json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return 0
    table = Table(title="RadixFlow model zoo")
    for col in ("name", "family", "model_type", "params", "hybrid", "layers"):
        table.add_column(col, justify="right" if col == "params" else "left")
    for i in infos:
        table.add_row(i.name, i.family, i.model_type, f"{i.params / 1e6:.1f}M", str(i.hybrid), i.layer_kinds)
    console.print(table)
    return 0


def main(argv: list[str] | None = None, console: Console | None = None) -> int:
    console = console or Console()
    try:
        args = build_parser().parse_args(argv)
        commands = {"bench": cmd_bench, "models": cmd_models}
        return commands[args.command](args, console)
    except UsageError as e:
        print(f"radixflow: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("radixflow: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
