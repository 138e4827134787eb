"""The offline API: ``LLM(model).generate(prompts, SamplingParams(...))``, batched in one engine."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from radixflow.generation.call_builder import CallBuilder
from radixflow.generation.calls import Call, Progress, answer, outputs, outputs_to, refuse
from radixflow.generation.detokenize import NoText
from radixflow.generation.holder import ModelHolder
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.params import SamplingParams
from radixflow.generation.prompts import Messages, Prompt
from radixflow.generation.score_many import (
    ContextsHeard,
    candidate_heard,
    candidates_named,
    check_score_many,
    context_jobs,
    scores_by_context,
)
from radixflow.generation.scoring import (
    SCORING,
    CandidateScore,
    ScoringJob,
    candidate_scores,
    scoring_job,
    specials_asked,
)
from radixflow.options import EngineOptions
from radixflow.options.flag_warnings import clock_warnings, dtype_warnings, ineffective, ineffective_for_model
from radixflow.problems import Problem, ProblemError


class LLM(ModelHolder):
    """A model in an engine of its own. Requests of one `generate` call share its rounds, and the
    prefix cache persists across calls (a follow-up turn reuses the previous one). One call runs at
    a time: another meanwhile (from a second thread, or a progress hook) raises RuntimeError.
    An LLM is built, not copied: copying or pickling it raises TypeError (one per thread or process).

    ``model`` is a zoo name or a checkpoint directory (a string or a path); ``options`` are
    `EngineOptions` fields (``policy``, ``device``, ``kv_blocks``, ``state_slots``, ``token_budget``,
    ``seed``, ...), checked as every other door checks them: a bad one raises `ProblemError` (a
    ValueError) naming it.
    ``torch_threads`` sets torch's one intra-op pool for the whole process, and is not restored.
    Its idle threads spin unless ``OMP_WAIT_POLICY=passive`` is set before torch is imported (the
    `radixflow` command sets it; an LLM leaves your environment alone): docs/usage.md, "OpenMP waits".

    `close` (or leaving a ``with LLM(...) as llm:`` block) lets go of the engine: the weights, the
    KV and state pools and the cache are freed once nothing else holds them, and a closed LLM
    refuses every further call with RuntimeError.
    """

    def __init__(self, model: str | os.PathLike[str], **options: Any) -> None:
        # a path (a checkpoint directory, a trace file) as a pathlib.Path is the options' string:
        # they also come from TOML and flags, where a path is text
        options = {name: _plain_path(value) for name, value in options.items()}
        if isinstance(model, EngineOptions):  # else "must be a string, got EngineOptions(model=..., r..."
            said = "must be a string, got an EngineOptions: LLM.from_options(options)"
            raise ProblemError(Problem("model", said))
        self._open(EngineOptions.from_mapping(options, model=_plain_path(model)))
        # None is an optional option's default, not a value given (as a flag left out)
        given = [name for name, value in options.items() if value is not None]
        recurrent = self.model.setup.choice.has_recurrent
        messages = ineffective(self.options, given, str)
        messages += ineffective_for_model(given, recurrent, str, self.options.state_slots)
        messages += clock_warnings(self.options, "torch_threads=1")
        messages += dtype_warnings(self.options, 'dtype="float32"')
        for message in messages:
            # shown at the caller's line after its category ("UserWarning: radixflow: ..."), it names
            # its source; the command line's own lines read "radixflow: warning: ..."
            warnings.warn(f"radixflow: {message}", UserWarning, stacklevel=2)

    @classmethod
    def from_options(cls, options: EngineOptions) -> LLM:
        """An LLM built from options made elsewhere (e.g. from command-line flags; that door warns
        of the ones that cannot change the engine)."""
        if not isinstance(options, EngineOptions):  # else an AttributeError from deep inside
            said = f"must be an EngineOptions, got {type(options).__name__}: LLM(model, **options)"
            raise ProblemError(Problem("options", said))
        llm = cls.__new__(cls)
        llm._open(options)  # noqa: SLF001 (its own class; __init__ would warn again)
        return llm

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        namespace: str = "default",
        progress: Progress | None = None,
        *,
        fit: bool = False,
        on_output: Callable[[int, GenerationOutput], None] | None = None,
        add_special_tokens: bool | None = None,
    ) -> list[GenerationOutput]:
        """One output per prompt and choice, in order: each prompt's ``n`` choices
        (`SamplingParams.n`, default 1) one after another, ``choice`` saying which. A prompt is
        text or a list of token ids (or vLLM's ``{"prompt": text}`` / ``{"prompt_token_ids":
        ids}``); ``sampling_params`` (vLLM's name) is one for all prompts or one per prompt
        (default: one greedy token). A prompt's choices share its prompt in the cache.
        ``progress`` hears of each request that ends (a progress bar's hook). ``fit``: each
        ``max_tokens`` is a default the caller never gave, capped to the room its prompt leaves
        (`SamplingParams.fitted`), as the server caps its default. ``on_output`` hears each output
        as it finishes, with its place in the list returned, so a caller keeps what finished when
        the call is cut short (a Ctrl-C). ``add_special_tokens=False``: a text prompt without
        the tokenizer's special tokens (/v1/completions' field; None, not given: with them).

        Raises ValueError (naming the prompt) for a request that cannot run, before any runs.
        """
        special = specials_asked(None, add_special_tokens)  # refused by name where no bool
        token_prompts = self._reader(sampling_params).prompts(prompts, special)
        return self._generate(token_prompts, sampling_params, namespace, progress, "prompt", fit, on_output)

    def _generate(
        self,
        token_prompts: list[list[int]],
        params: SamplingParams | Sequence[SamplingParams] | None,
        namespace: str,
        progress: Progress | None,
        item: str | Sequence[str],
        fit: bool = False,
        on_output: Callable[[int, GenerationOutput], None] | None = None,
    ) -> list[GenerationOutput]:
        """`generate` over token prompts; an error calls prompt ``i`` "``item`` i", or
        ``item[i]`` when a label is given per prompt. ``on_output``: see `_run`."""
        calls, labels = self._calls(token_prompts, params, namespace, item, fit)
        return self._run(calls, labels, progress, on_output)

    def _calls(
        self,
        token_prompts: list[list[int]],
        params: SamplingParams | Sequence[SamplingParams] | None,
        namespace: str,
        item: str | Sequence[str],
        fit: bool = False,
    ) -> tuple[list[Call], list[str] | None]:
        """`_generate`'s engine requests and each prompt's label (`CallBuilder.build`)."""
        builder = CallBuilder(lambda: self.engine, self._read, lambda: self.tokenizer, self._ids)
        return builder.build(token_prompts, params, namespace, item, fit)

    def score(
        self,
        context: Prompt | Messages,
        candidates: Sequence[Prompt],
        namespace: str = "default",
        progress: Progress | None = None,
        on_candidate: Callable[[CandidateScore], None] | None = None,
        *,
        add_special_tokens: bool | None = None,
    ) -> list[CandidateScore]:
        """Each candidate's logprob given ``context``, in order (`generation.scoring`): text is
        tokenized alone (the context as a prompt, with the tokenizer's special tokens; candidates
        without), token ids are used as they are, and a conversation (a list of messages) is
        rendered by the chat template up to the assistant's turn, so the candidates are replies.
        One batch: the cache computes the context once. ``on_candidate`` hears each score (its
        ``index`` the candidate's place) as soon as it is answered, in the order they finish, so
        a caller can keep what finished when the call is cut short. ``add_special_tokens=False``:
        a text context without them (/v1/score's field; True is refused beside a conversation).

        Raises ValueError for a context or candidate of another type, an empty one, or one that
        cannot run."""
        if on_candidate is not None and not callable(on_candidate):
            raise ValueError(f"on_candidate: must be a function (score), got {on_candidate!r}")
        ctx, prompts = self._scoring_job(context, candidates, add_special_tokens)
        labels = [f"candidate {i}" for i in range(len(prompts))]
        with self._candidates_named(labels, [len(ctx)] * len(prompts), prompts):
            heard = None if on_candidate is None else partial(candidate_heard, on_candidate, len(ctx))
            outputs = self._generate(prompts, SCORING, namespace, progress, labels, on_output=heard)
        return candidate_scores(len(ctx), outputs)

    def score_many(
        self,
        contexts: Sequence[Prompt | Messages],
        candidates: Sequence[Sequence[Prompt]],
        namespace: str = "default",
        progress: Progress | None = None,
        on_context: Callable[[int, list[CandidateScore]], None] | None = None,
        *,
        add_special_tokens: bool | None = None,
    ) -> list[list[CandidateScore]]:
        """`score` for each context and its own candidates (``candidates[i]`` follow
        ``contexts[i]``), all in one batch: the scheduler fills its rounds across contexts, each
        context computed once. One list of scores per context, in order. ``on_context`` hears
        each context's index and scores (those returned) as soon as its candidates are all
        answered, in the order they finish (a context without candidates once the batch ends), so a caller can
        keep what finished when the call is cut short. ``add_special_tokens``: `score`'s.

        Raises what `score` raises for a context that cannot run (a ValueError of the same
        class and fields), named by the context (and candidate), before any runs."""
        check_score_many(contexts, candidates, on_context)
        job = partial(self._scoring_job, special=add_special_tokens)
        jobs, prompts, labels = context_jobs(job, contexts, candidates)
        heard = None if on_context is None else ContextsHeard([(len(c), len(j)) for c, j in jobs], on_context)
        with self._candidates_named(labels, [len(c) for c, job in jobs for _ in job], prompts):
            outputs = self._generate(prompts, SCORING, namespace, progress, labels, on_output=heard)
        if heard is not None:
            heard.without_candidates()
        return scores_by_context(jobs, outputs)

    def scoring_problem(
        self,
        context: Prompt | Messages,
        candidates: Sequence[Prompt],
        namespace: str = "default",
        *,
        add_special_tokens: bool | None = None,
    ) -> str | None:
        """Why `score` (and `score_many`, for this context) would refuse ``context`` with
        ``candidates`` (`score`'s ValueError text: "candidate 2: ..." or one about the context),
        or None when they can run. Nothing runs: a caller with many contexts sets the refused
        ones aside before its batch."""
        try:
            self.scoring_tokens(context, candidates, namespace, add_special_tokens=add_special_tokens)
        except ValueError as e:
            return str(e)
        return None

    def scoring_tokens(
        self,
        context: Prompt | Messages,
        candidates: Sequence[Prompt],
        namespace: str = "default",
        *,
        add_special_tokens: bool | None = None,
    ) -> tuple[list[int], list[list[int]]]:
        """The context's token ids and each candidate's, as `score` would run them; raises what
        `score` raises (`scoring_problem` says it). Nothing runs: a caller with many contexts
        checks each once and hands `score_many` the ids (a text read twice costs twice)."""
        ctx, prompts = self._scoring_job(context, candidates, add_special_tokens)
        labels = [f"candidate {i}" for i in range(len(prompts))]
        with self._candidates_named(labels, [len(ctx)] * len(prompts), prompts):
            refuse(self.engine, *self._calls(prompts, SCORING, namespace, labels))
        return ctx, [p[len(ctx) :] for p in prompts]

    def _candidates_named(
        self, labels: list[str], context_lens: list[int], prompts: list[list[int]]
    ) -> AbstractContextManager[None]:
        """`candidates_named` against this LLM's engine."""
        return candidates_named(lambda r: self.engine.problem(r), labels, context_lens, prompts)

    def _scoring_job(
        self, context: Prompt | Messages, candidates: Sequence[Prompt], special: bool | None = None
    ) -> ScoringJob:
        """`scoring_job` against this LLM's engine (asked only once the input is read)."""
        return scoring_job(self._read, lambda r: self.engine.problem(r), context, candidates, special)

    def chat(
        self,
        conversations: Messages | Sequence[Messages],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        namespace: str = "default",
        progress: Progress | None = None,
        *,
        fit: bool = False,
        on_output: Callable[[int, GenerationOutput], None] | None = None,
    ) -> list[GenerationOutput]:
        """The assistant's reply to each conversation, rendered with the model's chat template
        (``fit`` and ``on_output``: as `generate`'s)."""
        prompts = self._reader(sampling_params).conversations(conversations)
        return self.generate(prompts, sampling_params, namespace, progress, fit=fit, on_output=on_output)

    def _run(
        self,
        calls: list[Call],
        labels: list[str] | None,
        progress: Progress | None,
        on_output: Callable[[int, GenerationOutput], None] | None = None,
    ) -> list[GenerationOutput]:
        """Run ``calls`` to the end; a request that cannot run is refused first, named by its
        prompt's label (None: a lone prompt, not named). ``on_output`` hears each call answered
        with an output (its index in ``calls``) as it is."""
        if progress is not None and not callable(progress):  # else the first answer's call fails the batch
            raise ValueError(f"progress: must be a function (done, total), got {progress!r}")
        if on_output is not None and not callable(on_output):
            raise ValueError(f"on_output: must be a function (index, output), got {on_output!r}")
        refuse(self.engine, calls, labels)
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(
                "this LLM is already running a call (from another thread, or from a progress hook): "
                "one call at a time per LLM"
            )
        try:
            decoder = self.model.tokenizer or NoText()
            answers = answer(
                self.engine, decoder, calls, progress, self._flush_trace, outputs_to(calls, on_output)
            )
        finally:
            self._busy.release()
        return outputs(calls, answers, labels)


def _plain_path(value: object) -> object:
    """``value``, or the string of a path object (``os.PathLike``)."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value
