"""`radixflow bench`: scheduling policies side by side on one workload."""

from __future__ import annotations

import argparse
import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from radixflow.bench.harness import BenchReport, PolicyRun, Trials, config_dict, run_policies
from radixflow.bench.provenance import loaded_torch_threads, provenance
from radixflow.bench.report import render
from radixflow.bench.spread import Load, Spread, load_between, load_now, ratio_lines, spread_lines
from radixflow.cli.args import (
    check_output_paths,
    engine_inputs,
    note_trace_kept,
    refuse_runner_settings,
    warn_ineffective_for_model,
    warn_ineffective_options,
)
from radixflow.cli.bench_flags import warn_ineffective
from radixflow.cli.bench_outputs import (
    TableConsole,
    exit_code,
    finished,
    is_stdout,
    keep_finished,
    keep_outputs,
    table_code,
    to_stdout_flag,
    write_file,
    write_outputs,
    write_text,
)
from radixflow.cli.bench_setup import (
    check_generated,
    check_generated_context,
    load_trace,
    load_workload,
    warn_unfit,
    workload_spec,
)
from radixflow.cli.command import StdoutUnwritable, UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.engine.engine import Engine
from radixflow.engine.interrupts import HeldInterrupt
from radixflow.engine.records import RoundRecord
from radixflow.engine.run_setup import run_config
from radixflow.options import EngineOptions, EnginePlan, EngineSetup, plan_engine, runner_name
from radixflow.options.flags import from_args, policies
from radixflow.options.runners import name_problem
from radixflow.problems import ProblemError
from radixflow.progress import LoggedProgress
from radixflow.scheduler.policy import default_placement
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.workloads.jsonl_trace import trace_text

DEFAULT_POLICIES = ["native", "radixflow", "adaptive"]


def run(args: argparse.Namespace, console: Console) -> int:
    options = from_args(args, one_policy=False)  # budgets and limits refused before any model is built
    console = _checked_outputs(args, options, console)
    if runner_name(options) == "torch":
        require_torch_extra("--runner torch")
    refuse_runner_settings(options)  # before the model is resolved
    if args.trace is None:
        workload_spec(args, vocab_size=2)  # and absurd workload sizes (the vocabulary comes later)
    elif (problem := name_problem(options)) is not None:  # at once, not after a long trace is read
        raise ProblemError(problem)
    trace = load_trace(args)  # a malformed trace too, before the model is resolved (a zoo model built)
    plan = plan_engine(options)
    spec = check_generated(args, plan)
    # warnings are of a run that goes ahead: after what refuses it up front
    warn_ineffective(args, runner_name(options))
    warn_ineffective_options(args, options)
    work, workload = load_workload(args, plan.choice.vocab_size, trace)
    requests = work.requests
    setup = plan.build([len(r.prompt) for r in requests])
    made_by = provenance(
        ["radixflow", *getattr(args, "argv", [])], loaded_torch_threads()
    )  # torch loaded by now
    warn_ineffective_for_model(args, plan.choice.has_recurrent)
    warn_unfit(plan)
    if spec is not None:  # a context known only now (a checkpoint the cost model cannot read)
        check_generated_context(spec, setup.runner.model.name, setup.runner.model.max_context)
    if args.write_trace is not None:
        write_text("--write-trace", args.write_trace, trace_text(work))
    names = policies(args) or DEFAULT_POLICIES
    trials = Trials(names, args.repeat)
    noun = "request" if len(requests) == 1 else "requests"
    title = f"{setup.runner.model.name} · {len(requests)} {noun} · {plan.choice.name} runner"
    load_start = load_now()
    try:
        with setup.trace_kept():  # a Ctrl-C: the trace down to the round it rolled back
            runs = _run_all(args, setup, requests, trials)
    except (KeyboardInterrupt, Exception) as e:  # a Ctrl-C (or a SIGTERM taken as one), or a crash
        config, load = _config(args, plan, setup, names), load_between(load_start, load_now())
        report = BenchReport(workload, config, trials.runs(), trials.unfinished(), load, run=made_by)
        _cut_short(args, setup, report, e, lambda: _show(report.runs, title, config, console, load))
        raise
    load = load_between(load_start, load_now())
    report = BenchReport(workload, _config(args, plan, setup, names), runs, load=load, run=made_by)
    return _publish(args, setup, report, title, console)


def _publish(
    args: argparse.Namespace, setup: EngineSetup, report: BenchReport, title: str, console: Console
) -> int:
    """Show the finished run's table and write its files and trace (each kept where another
    fails or a Ctrl-C lands): the command's exit code."""
    runs, config, load = report.runs, report.config, report.load
    try:
        _show(runs, title, config, console, load)
        write_outputs(args, report)
    except KeyboardInterrupt as e:  # a Ctrl-C as the finished run's results go out: its files still go
        with HeldInterrupt():  # the run is stopping already: a second Ctrl-C changes nothing
            keep_finished(args, report, e)
            with contextlib.suppress(UsageError):  # the trace's failure: one line is the interrupt's
                _write_trace(setup)
        note_trace_kept(setup, e)
        raise
    except (BrokenPipeError, StdoutUnwritable):  # `bench ... | head`: the finished run's files still go
        write_outputs(args, report, to_stdout=False)
        _write_trace(setup)
        raise
    except UsageError:  # an output the disk refused: the trace still goes, the first failure is said
        with contextlib.suppress(UsageError):
            _write_trace(setup)
        raise
    code = exit_code(runs)
    _write_trace(setup)  # last: a trace that cannot be written costs the run none of its other results
    return table_code(console, code)


def _checked_outputs(args: argparse.Namespace, options: EngineOptions, console: Console) -> Console:
    """Every output path checked writable (and none an input) before any work; the console the
    table goes to: stderr where standard output holds an output (`-`) alone."""
    outputs = {"--json": args.json, "--round-trace": args.round_trace, "--write-trace": args.write_trace}
    if to_stdout_flag(outputs) is not None:
        console = TableConsole()
    outputs = {flag: None if is_stdout(p) else p for flag, p in outputs.items()}
    outputs["--trace-out"] = None if options.trace_out is None else Path(options.trace_out)
    check_output_paths(outputs, {"--trace": args.trace, **engine_inputs(options)})
    return console


def _show(
    runs: list[PolicyRun], title: str, config: dict[str, object], console: Console, load: Load | None
) -> None:
    """The table; under it, with ``--repeat``, the trials' spread the medians are read against, each
    policy against the first trial by trial (the spread of the table's "vs" column) and the
    machine's load, and the round predictor's prior where the runner has one."""
    render([r.result for r in runs], title, console)
    latency, makespan = [_spread(r, "mean_latency_s") for r in runs], [_spread(r, "makespan_s") for r in runs]
    lines = [*spread_lines("mean latency", latency, "s"), *spread_lines("makespan", makespan, "s")]
    lines += [*ratio_lines("mean latency", latency), *ratio_lines("makespan", makespan)]  # the "vs" column's
    if lines and load is not None:
        lines.append(load.text())
    for line in lines:  # a policy's name is not markup
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if config.get("round_predictor") is not None:  # the rows above are its error from this prior
        prior = f"round predictor's prior: {config['round_predictor']}"  # a profile's name is not markup
        console.print(prior, highlight=False, markup=False, soft_wrap=True)


def _spread(run: PolicyRun, name: str) -> Spread:
    return Spread(run.result.policy, tuple(getattr(t.result, name) for t in run.trial_runs()))


def _config(
    args: argparse.Namespace, plan: EnginePlan, setup: EngineSetup, names: list[str]
) -> dict[str, object]:
    """What the engines ran with, for ``--json``: the cache's eviction and admission (what a
    cache under pressure keeps) and the seed (the sampler's, a replayed trace's only record of it)
    too, or two runs that differed there would read alike."""
    o = setup.options
    config = config_dict(
        run_config(setup.scheduler, setup.runner.model),  # as the engines ran it, not as planned
        runner=plan.choice.name,
        model=setup.runner.model.name,
        placement=_placements(o.placement, names, plan.choice.has_recurrent),
        eviction=o.eviction,
        admission=o.admission,
        seed=o.seed,
        repeats=args.repeat,
    )
    config.update(plan.choice.describe(setup.runner))
    return config


def _cut_short(
    args: argparse.Namespace,
    setup: EngineSetup,
    report: BenchReport,
    stopped: BaseException,
    show: Callable[[], None],
) -> None:
    """The run ``stopped`` cut short keeps the trials it finished (`keep_outputs`), ``show``s their
    table, and says where its trace is; an error (not a Ctrl-C) is written into the JSON in one
    line (mutates ``report``)."""
    if not isinstance(stopped, KeyboardInterrupt):
        report.error = f"{type(stopped).__name__}: {stopped}"
    # the run is stopping already: a second Ctrl-C (a double tap, or a SIGTERM taken as one) as
    # they go out, each a synced write, would lose the trials finished, the old files left
    with HeldInterrupt():
        written = keep_outputs(args, report, stopped)
        if report.runs and _shown(show) and not written:
            done, total = finished(report)
            again = "the same command runs them all again"
            stopped.add_note(f"{done} of {total} policy runs finished, shown above ({again})")
    note_trace_kept(setup, stopped)


def _shown(show: Callable[[], None]) -> bool:
    """Whether ``show`` could show the table (its stream may be gone: its reader left, a hangup
    took the terminal; the interrupt still ends the run, not this)."""
    try:
        show()
    except (OSError, StdoutUnwritable):
        return False
    return True


def _placements(given: str | None, names: list[str], recurrent: bool) -> str | dict[str, str]:
    """The checkpoint placement the policies' engines ran: none on a model without recurrent state
    (its engines place nothing), else the one given or each policy's own."""
    if not recurrent:
        return "none"
    return given or {n: default_placement(n) for n in names}


def _write_trace(setup: EngineSetup) -> None:
    """The trace's last flush; `UsageError` for it, or for a flush while the engines ran, that failed."""
    if setup.options.trace_out is not None:
        write_file("--trace-out", Path(setup.options.trace_out), lambda _: setup.flush_trace())


def _run_all(
    args: argparse.Namespace, setup: EngineSetup, requests: list[Request], trials: Trials
) -> list[PolicyRun]:
    names = trials.policies
    by_id = {r.id: r for r in requests}
    with LoggedProgress(console=Console(stderr=True)) as progress:
        task = progress.add_task("starting", total=len(requests) * len(names) * args.repeat)
        # the runner's no-cache reference (the torch runner's: a full prefill per request), shown
        # while it runs; its time is not the policies', so their clock (and ETA) starts after it
        reference = progress.add_task("no-cache reference", total=len(requests), visible=False)
        referenced = itertools.count(1)

        def on_reference() -> None:
            progress.update(reference, advance=1, visible=True)
            if next(referenced) == len(requests):
                progress.update(reference, visible=False)
                progress.reset(task)

        def on_round(policy: str, record: RoundRecord, engine: Engine) -> None:
            # a request ends with its prompt's last chunk, or fails with its round rolled back
            rolled_back = record.error is not None
            ended = {c[0] for c in record.chunks if rolled_back or c[2] == len(by_id[c[0]].prompt)}
            if record.index == 0:  # a request refused at submit runs no chunk: done all the same
                ended |= {r.id for r in engine.requests if r.status is RequestStatus.FAILED}
            progress.update(
                task, advance=len(ended), description=f"{_run_name(policy, trials)}: round {record.index + 1}"
            )

        o = setup.options
        runs = run_policies(requests, setup, names, o.placement, on_round, args.repeat, trials, on_reference)
        # every request of every run has now finished or failed (one failed in a run that never
        # ran a round, or at admission, ran no chunk): the bar ends at 100%
        progress.update(task, completed=len(requests) * len(names) * args.repeat)
    return runs


def _run_name(policy: str, trials: Trials) -> str:
    """``policy``'s run under way, with its trial (from 1) where there are several: a log of a
    long run says which trial it is in, as the trace's processes and ``--round-trace`` do."""
    return policy if trials.repeats == 1 else f"{policy} #{trials.count(policy) + 1}"
