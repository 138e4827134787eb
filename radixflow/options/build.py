"""`build_engine(options)`: the one way from options to a runner, a cache and a scheduler.

In two steps where a door needs the model before its workload (a generated workload draws token
ids below the model's vocabulary): `plan_engine` resolves the runner and model, `EnginePlan.build`
sizes the cache and builds the runner; `EngineSetup.engine` then makes engines over that runner
(a benchmark makes one per policy).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.engine.engine import Engine
from radixflow.engine.events import EngineEvents
from radixflow.engine.runner import Runner
from radixflow.engine.trace_file import CLOCKS, TraceFile
from radixflow.options.budget import budget_caps, working_set_problem
from radixflow.options.choice import RunnerChoice
from radixflow.options.engine_options import EngineOptions
from radixflow.options.machine import no_memory
from radixflow.options.runners import choose_runner, name_problem
from radixflow.options.spec import in_bytes
from radixflow.problems import Problem, ProblemError
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.request import Request


def new_engine(
    runner: Runner,
    scheduler: SchedulerConfig,
    options: EngineOptions,
    policy: str | None = None,
    placement: str | None = None,
    round_history: int | None = None,
    events: EngineEvents | None = None,
) -> Engine:
    """The one place an `Engine` is assembled: its policy, placement, eviction and admission are the options'
    (``policy`` / ``placement``: a variant's own instead, as a benchmark compares several)."""
    return Engine(
        runner,
        scheduler,
        policy=policy or options.policy,
        placement=placement or options.placement,
        eviction=options.eviction,
        admission=options.admission,
        round_history=round_history,
        events=events,
    )


@dataclass(frozen=True)
class EngineSetup:
    options: EngineOptions
    choice: RunnerChoice
    scheduler: SchedulerConfig  # capacities resolved: what the runner's pools were sized to
    runner: Runner
    trace: TraceFile | None = None  # the dependency trace (``trace_out``), opened by `build`

    def engine(
        self,
        policy: str | None = None,
        placement: str | None = None,
        round_history: int | None = None,
        label: str | None = None,
    ) -> Engine:
        """A fresh engine (empty cache, idle scheduler) over this setup's runner. ``policy`` and
        ``placement`` default to the options'; ``round_history`` bounds the rounds it keeps; with
        a trace, the engine is a process of it named ``label`` (default: its policy)."""
        policy = policy or self.options.policy
        events = self.events(label or policy)
        return new_engine(self.runner, self.scheduler, self.options, policy, placement, round_history, events)

    def events(self, label: str) -> EngineEvents | None:
        """The trace's observer for one more engine, a process named ``label`` (None: no trace)."""
        return None if self.trace is None else self.trace.recorder(label)

    def flush_trace(self) -> None:
        """Write out the trace recorded so far; no-op without a trace. Raises OSError, also for a
        flush while the engines ran that failed (only logged then: the trace ends there), so a
        run's last flush never reports a trace cut short as written."""
        if self.trace is not None:
            self.trace.flush()
            if self.trace.failure is not None:
                raise self.trace.failure

    @contextlib.contextmanager
    def trace_kept(self) -> Iterator[None]:
        """Runs under it keep their trace when cut short (a Ctrl-C, a failure): it is written as
        they stop, down to the round rolled back, where it would otherwise wait for the next
        flush, seconds away. A disk that refuses it then is not reported over what stopped them."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(OSError):
                self.flush_trace()
            raise


@dataclass(frozen=True)
class EnginePlan:
    options: EngineOptions
    choice: RunnerChoice

    def scheduler_config(self, prompt_lengths: Sequence[int] | None = None) -> SchedulerConfig:
        """Budgets and capacities: given ones, else the runner's default for prompts of these
        lengths (None: an open-ended stream, as a server serves). A full-attention model gets no
        state slots. With ``cache_memory`` the capacities are caps within what the budget holds
        (`budget_caps`); `ProblemError` when it cannot hold one request."""
        o = self.options
        default = self.choice.capacity(prompt_lengths, o.block_size)
        slots = default.state_slots if o.state_slots is None else o.state_slots
        config = SchedulerConfig(
            token_budget=o.token_budget,
            max_requests=o.max_requests,
            block_size=o.block_size,
            num_blocks=o.kv_blocks or default.kv_blocks,
            num_state_slots=slots if self.choice.has_recurrent else 0,
            has_recurrent=self.choice.has_recurrent,  # as the engine will see it, for checks before it
        )
        if o.cache_memory is None:
            return config
        budget = in_bytes(o.cache_memory)  # bytes as given, or a size's text
        assert isinstance(budget, int), "cache_memory is validated with the options"
        entry = self.choice.entry_bytes(o.block_size)
        caps = budget_caps(budget, entry, o.kv_blocks, o.state_slots if self.choice.has_recurrent else 0)
        if isinstance(caps, Problem):
            raise ProblemError(caps)
        holds_state = self.choice.has_recurrent and caps.state_slots > 0  # else no request holds any
        problem = working_set_problem(budget, entry, prompt_lengths, o.block_size, holds_state)
        if problem is not None:
            raise ProblemError(problem)
        caps_given = {"num_blocks": caps.kv_blocks, "num_state_slots": caps.state_slots}
        return replace(config, **caps_given, cache_memory=budget)

    def build(self, prompt_lengths: Sequence[int] | None = None) -> EngineSetup:
        """Size the cache (for prompts of these lengths), build the runner and open the trace
        (``trace_out``: nothing is written to it until a run records an event, so a door may
        still refuse its work and leave an older trace as it was); `ProblemError` before any
        allocation when the runner's pools cannot fit this machine."""
        scheduler = self.scheduler_config(prompt_lengths)
        problem = self.choice.memory_problem(scheduler) or self._trace_problem()
        if problem is not None:
            raise ProblemError(problem)
        try:
            runner = self.choice.build(scheduler)
        except MemoryError:
            budgeted = scheduler.cache_memory is not None
            raise ProblemError(no_memory("out of memory building the runner", budgeted)) from None
        return EngineSetup(self.options, self.choice, scheduler, runner, self._open_trace(runner))

    def _trace_problem(self) -> Problem | None:
        """Why ``trace_out`` would be written over a file the engine reads (None: it would not),
        by any name: the profile (the command line and a TOML cell refuse it among their own
        files first; `LLM(...)` here), or a file of the model's directory (its config, weights,
        tokenizer: the trace written over them, the model loads no more), checked before the
        weights are read. Any file in that directory is refused: which ones a loader reads is
        the loader's to say."""
        path = self.options.trace_out
        if path is None:
            return None
        target = Path(os.path.realpath(path))
        hardware = self.options.hardware
        if hardware not in HARDWARE and target == Path(os.path.realpath(hardware)):
            return Problem("trace_out", f"{path}: the same file as hardware")
        folder = self._model_dir()
        if folder is not None and target.is_relative_to(os.path.realpath(folder)):
            why = f"inside the model's directory {folder}: write the trace elsewhere"
            return Problem("trace_out", f"{path}: {why}")
        return None

    def _model_dir(self) -> Path | None:
        """The directory the model is read from: a checkpoint's (the sim reads its config too);
        None for a sim shape."""
        if self.choice.checkpoint is not None:
            return self.choice.checkpoint
        model = self.options.model
        return Path(model) if model is not None and os.path.isdir(model) else None

    def _open_trace(self, runner: Runner) -> TraceFile | None:
        path = self.options.trace_out
        if path is None:
            return None
        clock = "sim" if self.choice.name == "sim" else self.options.clock
        metadata = {"clock": clock, "clock_means": CLOCKS[clock], "time_unit": "us"}
        metadata |= {"runner": self.choice.name, "model": runner.model.name}
        try:
            return TraceFile(Path(path), metadata)
        except OSError as e:
            raise ProblemError(Problem("trace_out", f"cannot write {path}: {e.strerror or e}")) from None


def plan_engine(options: EngineOptions, weights: bool = False) -> EnginePlan:
    """Validate ``options`` and resolve the runner and model (a zoo model is built on first use).
    ``weights``: the door needs a model with weights (`name_problem`).

    Raises `ProblemError` naming the option at fault.
    """
    options.check()
    problem = name_problem(options, weights)
    if problem is not None:
        raise ProblemError(problem)
    return EnginePlan(options, choose_runner(options))


def build_engine(
    options: EngineOptions, requests: list[Request] | None = None, round_history: int | None = None
) -> Engine:
    """An engine built from ``options`` alone (capacities sized for ``requests`` when given)."""
    lengths = None if requests is None else [len(r.prompt) for r in requests]
    return plan_engine(options).build(lengths).engine(round_history=round_history)
