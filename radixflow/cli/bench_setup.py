"""Turning `radixflow bench` flags into engine options, a workload and an engine setup, and
refusing, before any work, what cannot run."""

from __future__ import annotations

import argparse
import math
import sys

from radixflow.cli.bench_flags import WORKLOAD_FLAGS
from radixflow.cli.command import UsageError
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.options import EnginePlan
from radixflow.options.sim_choice import SimChoice
from radixflow.options.sim_shape import model_context
from radixflow.problems import flag
from radixflow.scheduler.config import SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec
from radixflow.workloads.jsonl_trace import TraceError, read_trace
from radixflow.workloads.workload import Workload


def workload_spec(args: argparse.Namespace, vocab_size: int) -> WorkloadSpec:
    """The generated workload: given flags over `WorkloadSpec`'s defaults (the seed is the run's)."""
    w = WorkloadSpec()
    pick = lambda value, default: default if value is None else value  # noqa: E731
    spec = WorkloadSpec(
        groups=pick(args.groups, w.groups),
        candidates=pick(args.candidates, w.candidates),
        context_len=pick(args.context_len, w.context_len),
        candidate_len=pick(args.candidate_len, w.candidate_len),
        order=pick(args.order, w.order),
        arrival=pick(args.arrival, w.arrival),
        rate=pick(args.rate, w.rate),
        independent=pick(args.independent, w.independent),
        namespaces=pick(args.namespaces, w.namespaces),
        vocab_size=vocab_size,
        seed=pick(args.seed, w.seed),
    )
    # sizes are checked here, before a single token is drawn; a message adds up the flags typed
    problem = spec.problem(lambda key: flag(key) if flag(key) in WORKLOAD_FLAGS else None)
    if problem is not None:
        # the seed is the run's (--seed), the workload's too
        raise UsageError(problem.render(lambda p: flag(p) if flag(p) in (*WORKLOAD_FLAGS, "--seed") else p))
    return spec


Loaded = tuple[Workload, dict[str, object]]  # the workload, and how `--json` describes it


def load_trace(args: argparse.Namespace) -> Loaded | None:
    """The ``--trace`` workload (None: a generated one), read before the model is resolved: a bad
    line is bad input, refused before any work (a zoo model built, a checkpoint read)."""
    if args.trace is None:
        return None
    try:
        return read_trace(args.trace), {"trace": str(args.trace)}
    except TraceError as e:  # the reader names the file; the flag is this command's to name
        raise UsageError(f"--trace {e}") from None


def load_workload(args: argparse.Namespace, vocab_size: int, trace: Loaded | None = None) -> Loaded:
    """The run's workload: ``trace`` (`load_trace`'s), or one generated below ``vocab_size``."""
    if trace is None:
        trace = load_trace(args)
    if trace is not None:
        return trace
    spec = workload_spec(args, vocab_size)
    return build_workload(spec), spec.to_dict()


def check_generated_fits(spec: WorkloadSpec, sched: SchedulerConfig) -> None:
    """Generated prompts all have one length: if one cannot fit the KV cache, or run without a state
    slot, none can."""
    blocks = math.ceil(spec.prompt_len / sched.block_size)
    if blocks > sched.num_blocks:
        raise UsageError(
            f"a prompt of {spec.prompt_len} tokens (--context-len + --candidate-len) needs {blocks} KV "
            f"blocks of {sched.block_size} tokens; the cache has {sched.num_blocks} (--kv-blocks)"
        )
    if sched.stateless_rounds(spec.prompt_len):
        raise UsageError(
            f"a prompt of {spec.prompt_len} tokens (--context-len + --candidate-len) spans several "
            f"rounds (--token-budget {sched.token_budget}) and needs a state slot; the cache has none "
            "(--state-slots)"
        )


def check_generated_context(spec: WorkloadSpec, model: str, context: int) -> None:
    if spec.prompt_len >= context:
        raise UsageError(
            f"a prompt of {spec.prompt_len} tokens (--context-len + --candidate-len) does not fit "
            f"{model}'s context of {context} tokens (one more is generated)"
        )


def check_generated(args: argparse.Namespace, plan: EnginePlan) -> WorkloadSpec | None:
    """A generated workload that can never fit the cache, or whose prompts pass the model's
    context where that is known before the runner is built, is refused before a token is drawn."""
    if args.trace is not None:
        return None
    spec = workload_spec(args, plan.choice.vocab_size)
    check_generated_fits(spec, plan.scheduler_config([spec.prompt_len] * spec.requests))
    context = model_context(plan.choice.label)
    if context is not None:
        check_generated_context(spec, plan.choice.label, context)
    return spec


def warn_unfit(plan: EnginePlan) -> None:
    """`radixflow cost`'s warning for a sim model that fits on no GPU count of its hardware: its
    figures are of a machine that cannot hold it."""
    choice = plan.choice
    if not isinstance(choice, SimChoice):
        return
    model = round_cost_model(choice.spec, choice.hardware)
    if not model.breakdown(()).fits:
        print(
            f"radixflow: warning: {choice.spec.name} does not fit even on {model.tp} GPUs of "
            f"{choice.hardware.name}",
            file=sys.stderr,
        )
