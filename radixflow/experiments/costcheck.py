"""Torch cells: the worker time a cost-model profile predicts for the rounds the scheduler really ran,
beside the CPU time those worker calls took (a check of the cost model on unseen, real rounds)."""

from __future__ import annotations

import statistics
from typing import Any

from radixflow.bench.harness import PolicyRun
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.hf_config import shape_from_checkpoint
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.engine.records import RoundRecord
from radixflow.engine.runner import ModelInfo, RoundResult, Runner
from radixflow.experiments.config import Variant
from radixflow.options import RunnerChoice
from radixflow.problems import Problem
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request

CPU_CLOCK = ROUND_CLOCKS["cpu"]


class CpuTimedRunner:
    """A runner that also records the CPU time of each worker call, in call order.

    CPU time of the thread running the call (the engine's ``cpu`` clock; one intra-op thread) is
    what calibration fits, and other processes on a shared machine do not inflate it.
    """

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.name: str = inner.name
        self.model: ModelInfo = inner.model
        self.round_predictor = getattr(inner, "round_predictor", None)
        self.cpu_s: list[float] = []

    def validate(self, request: Request) -> Problem | None:
        return self.inner.validate(request)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return self.inner.reference_tokens(requests)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        t0 = CPU_CLOCK.read()
        try:
            return self.inner.run(batch)
        finally:
            self.cpu_s.append(CPU_CLOCK.read() - t0)


def round_chunks(record: RoundRecord, prompt_len: dict[str, int], hybrid: bool) -> list[ChunkShape]:
    """What the cost model needs from a recorded round, each chunk as the engine ran it: the
    output head runs at a prompt's last position and at every decode step past it (a request
    generates a token each; the scheduler's ``sample``), and a hybrid model's chunk past position 0
    reads its state from a slot (a cached checkpoint, or its working slot). Snapshots are not
    recorded: a fitted CPU profile charges no memory traffic, so they do not change its prediction."""
    return [
        ChunkShape(start, end - start, sample=end >= prompt_len[rid], restores=hybrid and start > 0)
        for rid, start, end in record.chunks
    ]


def predicted_worker_s(
    rounds: list[RoundRecord], prompt_len: dict[str, int], shape: ModelShape, profile: str
) -> float:
    model = round_cost_model(shape, resolve_hardware(profile))
    hybrid = shape.has_recurrent
    return sum(model.breakdown(round_chunks(r, prompt_len, hybrid)).worker_call_s for r in rounds)


def split_cpu(cpu_s: list[float], runs: list[list[RoundRecord]]) -> list[float] | None:
    """CPU time of each run's worker calls whose rounds stood (a rolled-back one's left out), where
    ``runs`` hold every round of each run in the order the calls were made, rolled-back ones
    included; None when the calls do not map one to one onto those rounds."""
    if sum(map(len, runs)) != len(cpu_s):
        return None
    out, i = [], 0
    for rounds in runs:
        calls = cpu_s[i : i + len(rounds)]
        out.append(sum(c for rd, c in zip(rounds, calls, strict=True) if rd.error is None))
        i += len(rounds)
    return out


def check_figures(measured: float | None, clock: str, predicted: float | None) -> dict[str, Any]:
    """``measured``: the run's worker time on ``clock`` ("cpu" on a CPU, "wall" on a GPU)."""
    error = (
        None if measured is None or predicted is None or measured <= 0 else (predicted - measured) / measured
    )
    return {
        "worker_measured_s": measured,
        "worker_clock": clock,
        "predicted_worker_s": predicted,
        "prediction_error": error,
    }


def _in_call_order(groups: list[list[tuple[Variant, PolicyRun]]]) -> list[tuple[Variant, PolicyRun]]:
    """Every trial's own run in the order its worker calls were made: group by group, and in a
    group repeat by repeat, variant by variant (`run_policies` interleaves the repeats)."""
    return [
        (v, run.trial_runs()[k])
        for group in groups
        for k in range(len(group[0][1].trial_runs()))
        for v, run in group
    ]


def cost_check(
    ran: list[list[tuple[Variant, PolicyRun]]],
    results: dict[str, dict[str, Any]],
    cpu_s: list[float],
    requests: list[Request],
    s: dict[str, Any],
    choice: RunnerChoice,
) -> None:
    """Beside each torch variant: its measured worker time (CPU time on a CPU, where calibration uses
    it; wall time on a GPU) and what ``cost_profile`` predicts for the rounds it ran, each the
    median over the variant's trials as the timings are."""
    on_cpu = s["device"].split(":")[0] == "cpu"
    order = _in_call_order(ran)
    split = split_cpu(cpu_s, [t.every_round() for _, t in order])
    cpu = {} if split is None else {id(t): c for (_, t), c in zip(order, split, strict=True)}
    prompt_len = {r.id: len(r.prompt) for r in requests}
    path = choice.checkpoint
    shape = shape_from_checkpoint(s["model"], path) if s.get("cost_profile") and path else None
    for v, run in (pair for group in ran for pair in group):
        trials = run.trial_runs()
        predicted = None
        if shape is not None:
            predicted = statistics.median(
                predicted_worker_s(t.rounds, prompt_len, shape, s["cost_profile"]) for t in trials
            )
        measured = run.result.worker_call_s  # the median over the trials
        if on_cpu:
            measured = statistics.median(cpu[id(t)] for t in trials) if split is not None else None
        results[v.label].update(check_figures(measured, "cpu" if on_cpu else "wall", predicted))
