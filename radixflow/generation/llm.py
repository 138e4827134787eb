"""The offline API: ``LLM(model).generate(prompts, SamplingParams(...))``, batched in one engine."""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from radixflow.engine.engine import Engine
from radixflow.engine.trace_file import NOT_WRITTEN
from radixflow.generation.call_builder import CallBuilder
from radixflow.generation.calls import (
    Call,
    Progress,
    answer,
    outputs,
    outputs_to,
    refuse,
)
from radixflow.generation.detokenize import NoText
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.params import SamplingParams
from radixflow.generation.prompts import Messages, Prompt, PromptReader, truncates
from radixflow.generation.score_many import ContextsHeard, check_score_many, context_jobs, scores_by_context
from radixflow.generation.scoring import SCORING, CandidateScore, ScoringJob, candidate_scores, scoring_job
from radixflow.generation.setup import LoadedModel, load_model
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.options import EngineOptions
from radixflow.options.flags import clock_warnings, ineffective, ineffective_for_model
from radixflow.package import missing_torch_extra

ROUND_HISTORY = 256  # rounds the engine keeps (`Engine.rounds`): a long-lived LLM's stay bounded
CLOSED = "this LLM is closed: its engine was let go (make a new LLM)"


class LLM:
    """A model in an engine of its own. Requests of one `generate` call share its rounds, and the
    prefix cache persists across calls (a follow-up turn reuses the previous one). One call runs at
    a time: another meanwhile (from a second thread, or a progress hook) raises RuntimeError.

    ``model`` is a zoo name or a checkpoint directory; ``options`` are `EngineOptions` fields
    (``policy``, ``device``, ``kv_blocks``, ``state_slots``, ``token_budget``, ``seed``, ...), checked
    as every other door checks them: a bad one raises `ProblemError` (a ValueError) naming it.
    ``torch_threads`` sets torch's one intra-op pool for the whole process, and is not restored.

    `close` (or leaving a ``with LLM(...) as llm:`` block) lets go of the engine: the weights, the
    KV and state pools and the cache are freed once nothing else holds them, and a closed LLM
    refuses every further call with RuntimeError.
    """

    def __init__(self, model: str, **options: Any) -> None:
        self._open(EngineOptions.from_mapping(options, model=model))
        # None is an optional option's default, not a value given (as a flag left out)
        given = [name for name, value in options.items() if value is not None]
        recurrent = self.model.setup.choice.has_recurrent
        messages = ineffective(self.options, given, str) + ineffective_for_model(given, recurrent, str)
        messages += clock_warnings(self.options, "torch_threads=1")
        for message in messages:
            warnings.warn(message, UserWarning, stacklevel=2)  # as the command line warns of its flags

    def _open(self, options: EngineOptions) -> None:
        # named as the command line names it, not torch's bare "No module named 'torch'" from deep
        # in the options (every model the API loads has weights: the torch extra reads them)
        missing = missing_torch_extra("radixflow.LLM")
        if missing is not None:
            raise missing
        self.options = options
        self._model: LoadedModel | None = load_model(self.options)
        self._limited: TextTokenizer | None = None  # built on first use (it reads the vocabulary)
        self._engine: Engine | None = self._model.engine(round_history=ROUND_HISTORY)
        self._ids = itertools.count()
        # held while a call steps the engine: a second call meanwhile (another thread, or a
        # progress hook) would step it too, running the first call's requests unobserved
        self._busy = threading.Lock()

    @classmethod
    def from_options(cls, options: EngineOptions) -> LLM:
        """An LLM built from options made elsewhere (e.g. from command-line flags; that door warns
        of the ones that cannot change the engine)."""
        llm = cls.__new__(cls)
        llm._open(options)  # noqa: SLF001 (its own class; __init__ would warn again)
        return llm

    @property
    def model(self) -> LoadedModel:
        """The model, its tokenizer and engine setup; RuntimeError once closed."""
        if self._model is None:
            raise RuntimeError(CLOSED)
        return self._model

    @property
    def engine(self) -> Engine:
        """The engine every call steps; RuntimeError once closed."""
        if self._engine is None:
            raise RuntimeError(CLOSED)
        return self._engine

    def close(self) -> None:
        """Let go of the engine and the model (their memory is freed once nothing else holds
        them; torch keeps freed GPU memory cached for reuse until `torch.cuda.empty_cache`) and
        write the trace. Closing twice does nothing; RuntimeError while a call runs (its requests
        would lose their engine)."""
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this LLM is running a call: close it once the call returns")
        try:
            if self._engine is not None:
                self._flush_trace()
            self._engine = self._model = self._limited = None
        finally:
            self._busy.release()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tokenizer(self) -> TextTokenizer:
        """The model's tokenizer; ValueError for a checkpoint without one (prompts as token ids)."""
        if self.model.tokenizer is None:
            raise ValueError(
                f"{self.model.name} has no tokenizer.json: text prompts, chat and stop strings need "
                "the model's tokenizer; give prompts as lists of token ids"
            )
        return self.model.tokenizer

    @property
    def _read(self) -> PromptReader:
        """A reader of this call's prompts, made per call: one kept on the LLM would refer back
        to it (a cycle), and an LLM dropped without `close` would then hold its engine until the
        cycle collector ran."""
        return PromptReader(lambda: self.tokenizer, self._prompt_tokenizer)

    def _reader(self, params: object) -> PromptReader:
        """`_read`, or for a call whose ``params`` truncate prompts (``truncate_prompt_tokens``)
        one that tokenizes a text of any length: its end runs, as a token-id prompt's does (and
        the server's). A prompt of such a call whose params do not truncate is tokenized in full
        before the engine refuses it."""
        if not truncates(params):
            return self._read
        return PromptReader(lambda: self.tokenizer)

    def _prompt_tokenizer(self) -> TextTokenizer:
        """The tokenizer that reads prompts: it refuses a text whose length proves it too long for
        the model before tokenizing it (a huge text would take seconds), as the server's does."""
        tokenizer = self.tokenizer  # RuntimeError once closed, ValueError without one
        if self._limited is None:
            self._limited = tokenizer.limited(self.engine.runner.model.max_context)
        return self._limited

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        namespace: str = "default",
        progress: Progress | None = None,
        *,
        fit: bool = False,
    ) -> list[GenerationOutput]:
        """One output per prompt and choice, in order: each prompt's ``n`` choices
        (`SamplingParams.n`, default 1) one after another, ``choice`` saying which. A prompt is
        text or a list of token ids (or vLLM's ``{"prompt": text}`` / ``{"prompt_token_ids":
        ids}``); ``sampling_params`` (vLLM's name) is one for all prompts or one per prompt
        (default: one greedy token). A prompt's choices share its prompt in the cache.
        ``progress`` hears of each request that ends (a progress bar's hook). ``fit``: each
        ``max_tokens`` is a default the caller never gave, capped to the room its prompt leaves
        (`SamplingParams.fitted`), as the server caps its default.

        Raises ValueError (naming the prompt) for a request that cannot run, before any runs.
        """
        token_prompts = self._reader(sampling_params).prompts(prompts)
        return self._generate(token_prompts, sampling_params, namespace, progress, "prompt", fit)

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
    ) -> list[CandidateScore]:
        """Each candidate's logprob given ``context``, in order (`generation.scoring`): text is
        tokenized alone (the context as a prompt, with the tokenizer's special tokens; candidates
        without), token ids are used as they are, and a conversation (a list of messages) is
        rendered by the chat template up to the assistant's turn, so the candidates are replies.
        One batch: the cache computes the context once.

        Raises ValueError for a context or candidate of another type, an empty one, or one that
        cannot run."""
        ctx, prompts = self._scoring_job(context, candidates)
        outputs = self._generate(prompts, SCORING, namespace, progress, "candidate")
        return candidate_scores(len(ctx), outputs)

    def score_many(
        self,
        contexts: Sequence[Prompt | Messages],
        candidates: Sequence[Sequence[Prompt]],
        namespace: str = "default",
        progress: Progress | None = None,
        on_context: Callable[[int, list[CandidateScore]], None] | None = None,
    ) -> list[list[CandidateScore]]:
        """`score` for each context and its own candidates (``candidates[i]`` follow
        ``contexts[i]``), all in one batch: the scheduler fills its rounds across contexts, each
        context computed once. One list of scores per context, in order. ``on_context`` hears
        each context's index and scores (those returned) as soon as its candidates are all
        answered, in the order they finish (a context without candidates once the batch ends), so a caller can
        keep what finished when the call is cut short.

        Raises what `score` raises for a context that cannot run (a ValueError of the same
        class and fields), named by the context (and candidate), before any runs."""
        check_score_many(contexts, candidates, on_context)
        jobs, prompts, labels = context_jobs(self._scoring_job, contexts, candidates)
        heard = None if on_context is None else ContextsHeard([(len(c), len(j)) for c, j in jobs], on_context)
        outputs = self._generate(prompts, SCORING, namespace, progress, labels, on_output=heard)
        if heard is not None:
            heard.without_candidates()
        return scores_by_context(jobs, outputs)

    def scoring_problem(
        self, context: Prompt | Messages, candidates: Sequence[Prompt], namespace: str = "default"
    ) -> str | None:
        """Why `score` (and `score_many`, for this context) would refuse ``context`` with
        ``candidates`` (`score`'s ValueError text: "candidate 2: ..." or one about the context),
        or None when they can run. Nothing runs: a caller with many contexts sets the refused
        ones aside before its batch."""
        try:
            _, prompts = self._scoring_job(context, candidates)
            refuse(self.engine, *self._calls(prompts, SCORING, namespace, "candidate"))
        except ValueError as e:
            return str(e)
        return None

    def _scoring_job(self, context: Prompt | Messages, candidates: Sequence[Prompt]) -> ScoringJob:
        """`scoring_job` against this LLM's engine (asked only once the input is read)."""
        return scoring_job(self._read, lambda request: self.engine.problem(request), context, candidates)

    def chat(
        self,
        conversations: Messages | Sequence[Messages],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        namespace: str = "default",
        progress: Progress | None = None,
        *,
        fit: bool = False,
    ) -> list[GenerationOutput]:
        """The assistant's reply to each conversation, rendered with the model's chat template
        (``fit``: as `generate`'s)."""
        prompts = self._reader(sampling_params).conversations(conversations)
        return self.generate(prompts, sampling_params, namespace, progress, fit=fit)

    def _flush_trace(self) -> None:
        """The trace (``trace_out``) holds every call so far: valid JSON after each one."""
        try:
            self.engine.flush_events()
        except OSError as e:
            warnings.warn(f"{NOT_WRITTEN}: {e.strerror or e}", RuntimeWarning, stacklevel=3)

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
