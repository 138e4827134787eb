"""The runner interface: the one place the engine meets an executor (simulated or real)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from radixflow.problems import Problem, counted, shown
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.samples import PromptLogprobs, Sample
from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.sampling_checks import banned_alone
from radixflow.scheduler.scan import RoundPredictor


@dataclass(frozen=True)
class ModelInfo:
    name: str
    has_recurrent: bool  # any non-attention sequence mixer (its state needs checkpoints)
    vocab_size: int
    max_context: int
    eos_token_ids: tuple[int, ...] = ()  # end generation (unless the request ignores EOS)
    # each request's own cost before it can be scheduled (tokenization, API), modelled: the engine
    # admits a request this long after its arrival, so it is in the request's latency, in no round
    request_overhead_s: float = 0.0
    # restores recurrent state saved earlier in the same round (`SchedulerConfig.same_round_state`)
    same_round_state: bool = False
    # what one token's KV and one checkpoint take in the runner's pools (0: not known), for an
    # eviction policy that weighs entries by size (`radixflow.cache.eviction.EntrySizes`)
    kv_bytes_per_token: int = 0
    checkpoint_bytes: int = 0


@dataclass
class RoundResult:
    samples: dict[str, Sample]  # request id -> the token sampled, for every chunk with sample=True
    duration_s: float  # how far the round advances the engine clock
    worker_call_s: float  # time spent in the worker call itself (modelled or measured)
    # request id -> logprobs of the prompt positions this round reports (chunks that ask for them)
    prompt_logprobs: dict[str, PromptLogprobs] = field(default_factory=dict)
    # the runner's own prediction of ``worker_call_s``, made before the call (None: it predicts
    # nothing, or its prediction is the charge itself, as the sim's)
    predicted_s: float | None = None
    predicted_from: int = 0  # measured rounds the predictor had learned from when it predicted
    # the call's measured wall time where the engine clock is another (`engine.clocks`: cpu);
    # None where ``duration_s`` is the wall time or is modelled
    wall_s: float | None = None

    @property
    def tokens(self) -> dict[str, int]:
        return {rid: s.token for rid, s in self.samples.items()}


class Runner(Protocol):
    name: str
    model: ModelInfo

    @property
    def round_predictor(self) -> RoundPredictor | None:
        """A pure predictor of a round's time (None: this runner predicts nothing). The engine
        hands it to the scheduler; a runner without this attribute counts as None."""
        ...

    def validate(self, request: Request) -> Problem | None:
        """Why the request cannot run on this model (None if it can). Pure."""
        ...

    def run(self, batch: SchedulerOutput) -> RoundResult:
        """Execute one round: compute every chunk, write KV and snapshots into the pools."""
        ...

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        """Each request's token from a run without any cache (None: no independent reference)."""
        ...


def result_problem(batch: SchedulerOutput, result: RoundResult) -> str | None:
    """How ``result`` breaks the `Runner` protocol as the answer to ``batch`` (None: it does not):
    a sampled chunk with no sample, or a round duration that is no finite time >= 0. Taken as it
    is, the first raised a bare KeyError out of the engine's update with the round half applied
    (its checkpoints PENDING for ever), the second moved the engine clock to NaN or backwards.
    Pure."""
    sampled = (c.request_id for c in batch.chunks if c.sample)
    missing = next((rid for rid in sampled if rid not in result.samples), None)
    if missing is not None:
        return f"returned no sample for request {missing!r}"
    duration = result.duration_s
    if not (isinstance(duration, int | float) and 0 <= duration < math.inf):
        return f"returned a round duration of {shown(duration)}, not a finite number of seconds >= 0"
    return None


def generation_room(prompt_len: int, model: ModelInfo, config: SchedulerConfig) -> int:
    """The most tokens a prompt of ``prompt_len`` tokens may generate here, within the model
    context and alone on an empty cache (0: the prompt itself cannot run). Pure. What a request
    that names no ``max_tokens`` is capped to, so its default never fails where the prompt fits."""
    return max(0, min(model.max_context - prompt_len, config.room(prompt_len)))


def ending_allow_list_problem(params: SamplingParams, eos: tuple[int, ...]) -> Problem | None:
    """Why an allow-list of only tokens that end the output (stop tokens, and ``eos`` unless
    ignored) cannot meet ``min_tokens`` (None: it can). The sampler may not hold them all back, so
    the first token ended the request: min_tokens broken unsaid (vLLM would sample from nothing)."""
    allowed = params.allowed_token_ids
    if not params.min_tokens or allowed is None:
        return None
    ending = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos))
    # a token banned on its own is no way on either: the sampler would pick it, a bad word
    left = set(allowed) - banned_alone(params.bad_token_sequences)
    if not left <= ending:
        return None
    which = "every allowed token" if left == set(allowed) else "every allowed token that is not banned"
    return Problem(
        "allowed_token_ids",
        f"{which} ends the output (a stop or end-of-sequence token id), so "
        f"min_tokens {params.min_tokens} cannot be met",
        ("min_tokens",),
    )


def validate_prompt(request: Request, model: ModelInfo) -> Problem | None:
    """Checks every runner applies before a request is queued. A prompt may fill the model context
    only when nothing is generated (``max_tokens`` 0: scoring, prompt logprobs)."""
    if not request.prompt:
        return Problem("prompt", "is empty")
    if len(request.prompt) > model.max_context:
        return Problem(
            "prompt", f"has {len(request.prompt)} tokens; the model context is {model.max_context}"
        )
    if len(request.prompt) == model.max_context and request.sampling.max_tokens != 0:  # 0: scored only
        return Problem(
            "prompt", f"has {model.max_context} tokens, the whole model context: no room to generate"
        )
    # one pass; a float would run as its integer part (cached as itself), a bool as 0 or 1
    bad = next(((t,) for t in request.prompt if type(t) is not int or not 0 <= t < model.vocab_size), None)
    if bad is not None and type(bad[0]) is not int:
        return Problem("prompt", f"token {shown(bad[0])} is not a token id (an integer)")
    if bad is not None:
        return Problem("prompt", outside_vocabulary(bad[0], model.vocab_size))
    problem = request.sampling.problem()
    if problem is not None:
        return problem
    for param, ids in (
        ("stop_token_ids", request.sampling.stop_token_ids),
        ("logit_bias", [t for t, _ in request.sampling.logit_bias]),
        ("allowed_token_ids", request.sampling.allowed_token_ids or ()),
        ("token_choices", [t for c in request.sampling.token_choices or () for t in c]),
        ("bad_token_sequences", [t for c in request.sampling.bad_token_sequences for t in c]),
    ):
        bad = next((t for t in ids if not 0 <= t < model.vocab_size), None)
        if bad is not None:
            return Problem(param, outside_vocabulary(bad, model.vocab_size))
    problem = ending_allow_list_problem(request.sampling, model.eos_token_ids)
    if problem is not None:
        return problem
    if len(request.prompt) + request.sampling.max_tokens > model.max_context:
        return Problem(
            "max_tokens",
            f"prompt of {counted(len(request.prompt), 'token')} plus max_tokens "
            f"{request.sampling.max_tokens} exceeds the model context of {model.max_context}",
            ("max_tokens",),
        )
    return None


def outside_vocabulary(token: int, vocab_size: int) -> str:
    """A token id past the vocabulary, said back (cut where it is huge). Pure."""
    return f"token id {shown(token)} is outside the vocabulary (0..{vocab_size - 1})"
