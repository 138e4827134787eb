"""Simulated runner: the real scheduler and cache, with a cost model instead of a forward pass.

Its "model" puts all its probability on one token, `sim_token` (a hash of the sequence so far):
temperature, top-k, top-p, min-p, seeds, finite logit biases and penalties cannot move a point
mass, so they change nothing, as on such a model. The rules that forbid tokens do (`sim_pick`):
an allow-list, guided token choices, banned sequences, stop tokens held back by ``min_tokens``.
It computes no logits, so it refuses ``logprobs`` and ``prompt_logprobs``.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Sequence

from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.costmodel.round_cost.by_profile import RoundCostModel, round_cost_model
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.costmodel.shape.sim_catalogue import DEFAULT_SIM_MODEL, SIM_MODELS
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.problems import Problem
from radixflow.runners.sim_hash import PrefixHashes
from radixflow.runners.token_rules import token_rules
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, waves
from radixflow.scheduler.request import Request
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.scan import RoundPredictor

# The cost model lives in radixflow.costmodel (no torch); these names are re-exported for callers.
__all__ = [
    "DEFAULT_SIM_MODEL",
    "HARDWARE",
    "SIM_MODELS",
    "HardwareProfile",
    "SimRunner",
    "sim_pick",
    "sim_token",
]


def chunk_shapes(chunks: Sequence[ScheduledChunk]) -> list[ChunkShape]:
    """The round's chunks as the cost model sees them, each in its wave (`output.waves`)."""
    return [chunk_shape(c, w) for c, w in zip(chunks, waves(chunks), strict=True)]


def chunk_shape(chunk: ScheduledChunk, wave: int = 0) -> ChunkShape:
    return ChunkShape(
        start=chunk.start,
        length=chunk.length,
        sample=chunk.sample,
        restores=chunk.restore_slot is not None,
        snapshots=len(chunk.snapshots),
        head_rows=prompt_logit_rows(chunk),
        wave=wave,
    )


def prompt_logit_rows(chunk: ScheduledChunk) -> int:
    """Prompt positions whose logits the chunk computes for prompt logprobs: the logprob of each
    reported position ``p`` in ``[prompt_logprobs_from, end)`` (``p >= 1``) reads the logits at
    ``p - 1``, cached positions included (see runners.prompt_logprobs)."""
    if chunk.prompt_logprobs_from is None:
        return 0
    return max(0, chunk.end - max(chunk.prompt_logprobs_from, 1))


def sim_token(namespace: str, prompt: tuple[int, ...], vocab_size: int) -> int:
    """The 'generated' token: a deterministic hash of namespace and the sequence so far.

    The sim's model puts probability 1 on this token (`sim_pick` is what it samples); there are
    no logits. The runner computes it from cached states of the sequence's prefixes
    (`sim_hash.PrefixHashes`, the same bytes hashed); this is its definition.
    """
    digest = hashlib.sha256(f"{namespace}|{','.join(map(str, prompt))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % vocab_size


def sim_pick(chunk: ScheduledChunk, vocab_size: int, eos: tuple[int, ...] = ()) -> int:
    """The sim's token for a sampled chunk: `sim_token`, unless the request's rules forbid it
    (`token_rules`); then the first token they allow in the sim's fixed order, its own token and
    the ids after it, wrapping round the vocabulary (a banned token only where no other is left,
    as the torch sampler has it). Pure."""
    return sim_sample(chunk, vocab_size, eos).token


def sim_sample(
    chunk: ScheduledChunk, vocab_size: int, eos: tuple[int, ...] = (), hashes: PrefixHashes | None = None
) -> Sample:
    """`sim_pick`'s token with its logprob under the sim's model: 0 for its own token, -inf for
    one the rules forced instead (the model gives it no probability). Pure but for ``hashes``,
    a runner's cache of `sim_token`'s prefix states (the same token, its prefixes hashed once)."""
    seq = chunk.tokens
    first = (
        sim_token(chunk.namespace, seq, vocab_size)
        if hashes is None
        else hashes.token(chunk.namespace, seq, vocab_size)
    )
    if not chunk.sampling.adjusts_logits:
        return Sample(first, 0.0)  # no rule forbids a token (every bench request): the hash
    rules = token_rules(chunk.sampling, chunk.tokens[chunk.prompt_len :], eos)
    for avoid in (rules.held | rules.banned, rules.held):
        token = _next_allowed(first, vocab_size, rules.only, avoid)
        if token is not None:
            return Sample(token, 0.0 if token == first else -math.inf)
    return Sample(first, 0.0)  # the rules hold back every token: no torch row could pick one either


def _next_allowed(first: int, vocab: int, only: frozenset[int] | None, avoid: frozenset[int]) -> int | None:
    """The first token from ``first`` on (wrapping) that is in ``only`` (None: any) and not in
    ``avoid`` (None: there is none)."""
    if only is None:
        ids = ((first + i) % vocab for i in range(min(len(avoid) + 1, vocab)))
        return next((t for t in ids if t not in avoid), None)
    left = sorted(only - avoid)
    return left[bisect_left(left, first) % len(left)] if left else None


class SimRunner:
    name = "sim"

    def __init__(self, spec: ModelShape, hardware: HardwareProfile) -> None:
        self.spec = spec
        self.cost: RoundCostModel = round_cost_model(spec, hardware)
        self.model = ModelInfo(
            spec.name,
            spec.has_recurrent,
            spec.vocab_size,
            spec.max_context,
            request_overhead_s=hardware.request_overhead_s,
            same_round_state=True,  # a round's cost is priced per wave (`ChunkShape.wave`)
            kv_bytes_per_token=spec.cache_bytes_per_token(hardware.weight_bytes),
            checkpoint_bytes=spec.state_bytes(),
        )
        self.hashes = PrefixHashes()  # its sequences' prefix states: each sampled token hashes what is new

    def validate(self, request: Request) -> Problem | None:
        # no logits, so no logprob to report: its sample's logprob 0 is no answer to ``logprobs``
        # (it returned 0 and no alternatives, whatever k asked for). After the checks every
        # runner makes: a bad value is said as the torch runner would say it, not sent there.
        problem = validate_prompt(request, self.model)
        if problem is not None:
            return problem
        for param in ("prompt_logprobs", "logprobs"):
            if getattr(request.sampling, param) is not None:
                return Problem(param, "the sim runner computes no logits: they need the torch runner")
        return None

    @property
    def round_predictor(self) -> RoundPredictor:
        return self.predict_round

    def predict_round(self, chunks: Sequence[ScheduledChunk]) -> float:
        """The time a round of ``chunks`` takes: exactly what `run` charges for them. Pure."""
        return self.cost.round_seconds(chunk_shapes(chunks))

    def run(self, batch: SchedulerOutput) -> RoundResult:
        cost = self.cost.breakdown(chunk_shapes(batch.chunks))
        samples = {
            c.request_id: sim_sample(c, self.spec.vocab_size, self.model.eos_token_ids, self.hashes)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=cost.seconds, worker_call_s=cost.worker_call_s)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None  # the sim token is a function of the prompt alone: nothing to compare
