"""One `LLM` call's engine requests run to the end: refused first where they cannot run, stepped
until each is answered, none left in the engine afterwards (a Ctrl-C included)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from radixflow.engine.engine import Engine
from radixflow.engine.interrupts import HeldInterrupt
from radixflow.generation.detokenize import Decoder
from radixflow.generation.output_processor import Done, EngineDriver, Failure, FailureKind, OutputProcessor
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.tracker import RequestTracker
from radixflow.problems import Problem
from radixflow.scheduler.request import Request

Progress = Callable[[int, int], None]  # called with (requests answered, requests) as each ends


class GenerationError(RuntimeError):
    """A request failed while it ran (its round's worker call raised)."""


class PromptError(ValueError):
    """A request that cannot run, said of its prompt's ``label`` (None: a lone prompt, not
    named). Keeps the `Problem`, for a door that spells parameters its own way (the command
    line's flags)."""

    def __init__(self, problem: Problem, label: str | None) -> None:
        self.problem, self.label = problem, label
        super().__init__(self.render())

    def render(self, spell: Callable[[str], str] | None = None) -> str:
        """The one line, each parameter spelled as ``spell`` says (default: as it is)."""
        return self.problem.render(spell) if self.label is None else self.problem.of_item(self.label, spell)


@dataclass(frozen=True)
class Call:
    """One engine request of a `generate` call: which prompt it answers, and which choice."""

    request: Request
    prompt: int
    choice: int


def refuse(engine: Engine, calls: list[Call], labels: list[str] | None) -> None:
    """`PromptError` for the first of ``calls`` the engine cannot run, named by its prompt's label
    (None: a lone prompt). A prompt's choices differ only in their seeds, so its first choice's
    check (a pass over the prompt) stands for all."""
    for call in (c for c in calls if c.choice == 0):
        problem = engine.problem(call.request)
        if problem is not None:
            raise PromptError(problem, None if labels is None else labels[call.prompt])


def answer(
    engine: Engine,
    decoder: Decoder,
    calls: list[Call],
    progress: Progress | None,
    flush: Callable[[], None],
    on_done: Callable[[Done], None] | None = None,
) -> dict[str, Done]:
    """Submit ``calls`` and step ``engine`` until each is answered (its id's `Done`, handed to
    ``on_done`` as it comes, before ``progress`` hears of it); then ``flush`` (the trace),
    whatever happened."""
    processor = OutputProcessor(engine)
    answers: dict[str, Done] = {}
    try:
        refused = [e for c in calls for e in processor.submit(RequestTracker(c.request, decoder, c.choice))]
        events = itertools.chain(refused, EngineDriver(engine, processor).run())
        for done in (e for e in events if isinstance(e, Done)):
            answers[done.request_id] = done
            if on_done is not None:
                on_done(done)
            if progress is not None:
                progress(len(answers), len(calls))
    finally:
        _end(engine, calls, processor, answers, flush)
    return answers


def outputs(calls: list[Call], answers: dict[str, Done], labels: list[str] | None) -> list[GenerationOutput]:
    """Each call's output, in order; `GenerationError` for the first that has none, named by its
    prompt's label and choice (None: a lone prompt, not named) beside its request id (the trace's)."""
    out = []
    for call in calls:
        done = answers[call.request.id]
        if done.output is None:
            why = done.failure or Failure(FailureKind.FAILED, "no output")
            raise GenerationError(f"{_named(call, calls, labels)} {why.kind.value}: {why.reason}")
        out.append(done.output)
    return out


def outputs_to(
    calls: list[Call], on_output: Callable[[int, GenerationOutput], None] | None
) -> Callable[[Done], None] | None:
    """``on_output`` as `answer`'s ``on_done``: a call answered with an output, by its index."""
    if on_output is None:
        return None
    index = {call.request.id: i for i, call in enumerate(calls)}

    def done(event: Done) -> None:
        if event.output is not None:
            on_output(index[event.request_id], event.output)

    return done


def _named(call: Call, calls: list[Call], labels: list[str] | None) -> str:
    """``call`` as an error names it: "prompt 2, choice 1 (request gen-9)", "choice 1 (request
    gen-9)" of a lone prompt, or "request gen-9" for a lone prompt's lone choice; the id alone is
    a count across calls, naming no prompt."""
    label = None if labels is None else labels[call.prompt]
    if any(c.choice > 0 for c in calls if c.prompt == call.prompt):
        label = f"choice {call.choice}" if label is None else f"{label}, choice {call.choice}"
    return f"request {call.request.id}" if label is None else f"{label} (request {call.request.id})"


def _end(
    engine: Engine,
    calls: list[Call],
    processor: OutputProcessor,
    answers: dict[str, Done],
    flush: Callable[[], None],
) -> None:
    """Leave no request of ``calls`` running (after an exception or a Ctrl-C), then ``flush``. A
    Ctrl-C meanwhile (pressed twice) is held until every request is let go and the trace
    written, then raised: stopping part way would leave the rest to run in the next call."""
    with HeldInterrupt() as held:
        for call in calls:
            aborted = processor.abort(call.request.id)
            if aborted is not None:
                answers[call.request.id] = aborted
            _let_go(engine, call.request)
    flush()
    if held.came:
        raise KeyboardInterrupt


def _let_go(engine: Engine, request: Request) -> None:
    """Abort and forget ``request`` if the engine still holds it: a Ctrl-C between the engine
    taking it and the processor following it (or between its answer and the engine forgetting
    it) leaves it there, unfollowed, to run in the next call and stay forever."""
    if engine.get(request.id) is request:
        engine.abort(request.id)
        engine.forget(request.id)
