"""`radixflow bench`: scheduling policies side by side on one workload."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from radixflow.bench.harness import BenchReport, PolicyRun, config_dict, run_policies
from radixflow.bench.report import render
from radixflow.bench.runner_choice import RunnerSetupError, TorchChoice
from radixflow.cli.args import check_output_paths, warn
from radixflow.cli.bench_flags import DEFAULT_PLACEMENT, add_arguments, warn_ineffective
from radixflow.cli.bench_setup import (
    RUNNERS,
    check_generated_context,
    check_generated_fits,
    check_torch_memory,
    load_workload,
    scheduler_config,
    workload_spec,
)
from radixflow.cli.command import Command, UsageError
from radixflow.engine.engine import RoundRecord
from radixflow.engine.runner import Runner
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.trace import write_trace
from radixflow.workloads.workload import Workload

DEFAULT_POLICIES = ["native", "radixflow"]


def run(args: argparse.Namespace, console: Console) -> int:
    outputs = {"--json": args.json, "--round-trace": args.round_trace, "--write-trace": args.write_trace}
    check_output_paths(outputs, {"--trace": args.trace})
    warn_ineffective(args)
    scheduler_config(args)  # reject impossible budgets before any model is built
    if args.trace is None:
        workload_spec(args, vocab_size=2)  # and absurd workload sizes (the vocabulary comes later)
    runner, sched, work, workload, describe = _setup(args)
    requests = work.requests
    if args.placement is not None and not runner.model.has_recurrent:
        warn(f"--placement has no effect on {runner.model.name}: a full-attention model has no checkpoints")
    if args.write_trace is not None:
        _write(args.write_trace, lambda path: write_trace(path, work))
    policies = args.policies or DEFAULT_POLICIES
    runs = _run(args, runner, sched, requests, policies)
    config = config_dict(
        sched,
        runner=args.runner,
        model=runner.model.name,
        placement=args.placement or DEFAULT_PLACEMENT,
        repeats=args.repeat,
    )
    config.update(describe)
    noun = "request" if len(requests) == 1 else "requests"
    title = f"{runner.model.name} · {len(requests)} {noun} · {args.runner} runner"
    render([r.result for r in runs], title, console)
    _write_outputs(args, BenchReport(workload, config, runs))
    return _exit_code(runs)


def _setup(
    args: argparse.Namespace,
) -> tuple[Runner, SchedulerConfig, Workload, dict[str, object], dict[str, object]]:
    try:
        choice = RUNNERS[args.runner](args)
        work, workload = load_workload(args, choice.vocab_size())
        sched = scheduler_config(args, choice.capacity(work.requests, args.block_size))
        spec = None if args.trace is not None else workload_spec(args, choice.vocab_size())
        if spec is not None:
            check_generated_fits(args, spec, sched)
        if isinstance(choice, TorchChoice):
            check_torch_memory(choice.path, choice.device, sched)
        runner = choice.build(sched)
    except RunnerSetupError as e:
        raise UsageError(str(e)) from None
    except MemoryError:
        raise UsageError("out of memory building the runner: lower --kv-blocks or --state-slots") from None
    if spec is not None:
        check_generated_context(spec, runner.model)
    return runner, sched, work, workload, choice.describe()


def _run(
    args: argparse.Namespace,
    runner: Runner,
    sched: SchedulerConfig,
    requests: list[Request],
    policies: list[str],
) -> list[PolicyRun]:
    by_id = {r.id: r for r in requests}
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("starting", total=len(requests) * len(policies) * args.repeat)

        def on_round(policy: str, record: RoundRecord, engine: object) -> None:
            done = sum(1 for c in record.chunks if c[2] == len(by_id[c[0]].prompt))
            progress.update(task, advance=done, description=f"{policy}: round {record.index + 1}")

        placement = args.placement or DEFAULT_PLACEMENT
        return run_policies(requests, runner, sched, policies, placement, on_round, args.repeat)


def _write(path: Path, write: object) -> None:
    """Write an output file; a failure this late (disk full, file removed) is one line, not a traceback."""
    try:
        write(path)  # type: ignore[operator]
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def _write_outputs(args: argparse.Namespace, report: BenchReport) -> None:
    if args.json is not None:
        # strict JSON: an undefined figure is null; a NaN here would be a bug, so refuse it
        text = json.dumps(report.to_json(), indent=2, allow_nan=False)
        _write(args.json, lambda path: path.write_text(text + "\n"))
    if args.round_trace is not None:
        lines = [
            json.dumps({"policy": run.result.policy, **asdict(rec)}, allow_nan=False)
            for run in report.runs
            for rec in run.rounds
        ]
        _write(args.round_trace, lambda path: path.write_text("".join(line + "\n" for line in lines)))


def _exit_code(runs: list[PolicyRun]) -> int:
    """1 when some policy completed no request at all (the reasons are in the table's failed rows)."""
    empty = [r.result for r in runs if r.result.completed == 0]
    if not empty:
        return 0
    names = ", ".join(r.policy for r in empty)
    print(
        f"radixflow: error: no request completed under {names} "
        f"({empty[0].failed} of {empty[0].requests} failed; reasons in the table)",
        file=sys.stderr,
    )
    return 1


COMMAND = Command("bench", "run scheduling policies side by side on one workload", add_arguments, run)
