"""Token sampling for the torch runner: greedy, temperature, top-k, top-p, per-request seeds.

Every row of a round is sampled by inverse transform: the kept tokens are ranked by probability
(best first, ties by token id) and one uniform draw ``u`` picks the first token whose cumulative
probability exceeds ``u``. Only the best candidates are ranked, by a partial selection in
float32, never by a sort of the vocabulary; a row with no top-k or top-p cut walks the rest of
the vocabulary in token-id order after its best candidates (`radixflow.runners.draw`).

A seeded request draws ``u`` from a generator seeded by (seed, position of the token being
sampled), so its tokens depend only on the seed, the model and the sequence so far, never on
what else shares the round or on how many rounds ran before. Unseeded requests draw from the
sampler's own generator, in round order.

``Sample.logprob`` and ``Sample.top`` always describe the model's own distribution: the raw
``log_softmax`` of the logits, before logit bias, penalties, temperature, top-k or top-p (as vLLM
reports by default), so a sampled token's logprob does not depend on how it was sampled. The
token itself, greedy or drawn, is picked from the logits after a row's bias and penalties
(`adjusted`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixflow.runners.draw import draw
from radixflow.runners.token_rules import held_back, pickable
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.sampling import SPLITMIX_STEP, SamplingParams, mix64
from radixflow.scheduler.token_sequences import banned_next

MIN_TOP = 5  # alternatives always reported per sampled token (bench margins use the top 2)


@dataclass(frozen=True)
class SampleRow:
    """One row of a round's logits: how to sample it and the position of the token it picks."""

    params: SamplingParams
    position: int  # sequence position the sampled token will occupy
    tokens: tuple[int, ...] = ()  # the sequence so far: the prompt, then what was generated
    prompt_len: int = 0  # tokens[:prompt_len] are the prompt


def row_seed(seed: int, position: int) -> int:
    """A 63-bit generator seed from (seed, position): splitmix64 of the two mixed. Pure."""
    return mix64(seed * SPLITMIX_STEP + position + 1)


def adjusted(logits: torch.Tensor, rows: list[SampleRow], eos: tuple[int, ...] = ()) -> torch.Tensor:
    """``logits [len(rows), vocab]`` with each row's logit bias and penalties applied, its banned
    sequences' next tokens made the least likely, the tokens outside its allow-list or choices at
    -inf, and its stop and ``eos`` tokens held back before ``min_tokens``, in the order and by the
    rules `SamplingParams` gives: a copy when a row has any, else ``logits``."""
    marked = [i for i, r in enumerate(rows) if r.params.adjusts_logits]
    if not marked:
        return logits
    out = logits.clone()
    for i in marked:
        _adjust(out[i], rows[i])
    # an extreme penalty (1e-130) sends logits past float32's range: kept at its ends, as +inf
    # would leave the draw's ``logit - max`` undefined
    limit = torch.finfo(out.dtype)
    out[marked] = out[marked].clamp(limit.min, limit.max)
    for i in marked:
        generated = rows[i].tokens[rows[i].prompt_len :]
        only = pickable(rows[i].params, generated, eos)
        if only is not None:
            keep = torch.tensor(sorted(only), dtype=torch.long, device=out.device)
            kept = out[i, keep]
            out[i] = -torch.inf
            out[i, keep] = kept
        held = held_back(rows[i].params, len(generated), eos)
        if held and (only is None or not only <= held):  # something must stay pickable
            out[i, list(held)] = -torch.inf
    return out


def _adjust(row: torch.Tensor, sample: SampleRow) -> None:
    """One row's logits, adjusted in place."""
    p, device = sample.params, row.device
    if p.logit_bias:
        ids = torch.tensor([t for t, _ in p.logit_bias], dtype=torch.long, device=device)
        row.index_add_(0, ids, torch.tensor([b for _, b in p.logit_bias], dtype=row.dtype, device=device))
    if p.repetition_penalty != 1 and sample.tokens:
        seen = torch.tensor(sorted(set(sample.tokens)), dtype=torch.long, device=device)
        vals = row[seen]
        penalty = float(p.repetition_penalty)  # an integer past int64 is no torch scalar
        row[seen] = torch.where(vals > 0, vals / penalty, vals * penalty)
    generated = sample.tokens[sample.prompt_len :]
    if (p.frequency_penalty or p.presence_penalty) and generated:
        ids, counts = torch.tensor(generated, dtype=torch.long, device=device).unique(return_counts=True)
        row[ids] -= p.frequency_penalty * counts.to(row.dtype) + p.presence_penalty
    banned = banned_next(p.bad_token_sequences, generated)
    if banned:  # the clamp after this keeps them the least likely: a row never runs out of tokens
        row[sorted(banned)] = -torch.inf


def check_finite(logprobs: torch.Tensor, rows: str) -> None:
    """Raise ValueError where a row's logits were not finite, told by one logprob per row the
    caller has at hand: a row that held a NaN or a +inf, or only -inf, comes out of log_softmax
    all NaN (a finite row never does), and any token picked or logprob reported from it would be
    NaN. ``rows``: what the rows are, said after "in n of" (``the round's 3 rows``)."""
    bad = int(torch.isnan(logprobs).sum())
    if bad:
        raise ValueError(
            f"the model's logits are not finite in {bad} of {rows} "
            "(NaN or inf: an overflow of the model's dtype?): nothing can be sampled or scored from them"
        )


def top_count(params: SamplingParams) -> int:
    """Alternatives reported for a token sampled with ``params``."""
    return max(params.logprobs or 0, MIN_TOP)


class Sampler:
    """Picks one token per row of a round's logits (owns the generator of unseeded requests)."""

    def __init__(self, seed: int = 0, eos_token_ids: tuple[int, ...] = ()) -> None:
        """``eos_token_ids``: the model's end-of-sequence tokens (held back by ``min_tokens``)."""
        self.generator = torch.Generator().manual_seed(seed)
        self.eos_token_ids = eos_token_ids

    def sample(self, logits: torch.Tensor, rows: list[SampleRow]) -> list[Sample]:
        """``logits``: ``[len(rows), vocab]``. Advances the generator once per unseeded row."""
        if not rows:
            return []
        logits = logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)  # the model's own: reported
        k = min(max(top_count(r.params) for r in rows), logits.shape[-1])
        top_vals, top_ids = logprobs.topk(k, dim=-1)
        check_finite(top_vals[:, 0], f"the round's {len(rows)} rows")  # before any token is picked
        pick_from = adjusted(logits, rows, self.eos_token_ids)
        tokens = pick_from.argmax(dim=-1)
        random = [i for i, r in enumerate(rows) if not r.params.greedy]
        if random:
            picked = self._draw(pick_from[random], [rows[i] for i in random])
            tokens[random] = picked
        chosen = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
        ids, vals, toks = top_ids.tolist(), top_vals.tolist(), tokens.tolist()
        out = []
        for i, row in enumerate(rows):
            n = min(top_count(row.params), k)
            top = tuple(zip(ids[i][:n], vals[i][:n], strict=True))
            out.append(Sample(int(toks[i]), float(chosen[i]), top))
        return out

    def _draw(self, logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
        """Tokens drawn from the filtered, temperature-scaled distributions (one per row)."""
        u = torch.tensor([self._uniform(r) for r in rows], dtype=torch.float64, device=logits.device)
        return draw(logits, [r.params for r in rows], u)

    def _uniform(self, row: SampleRow) -> float:
        seed = row.params.seed
        gen = self.generator if seed is None else torch.Generator().manual_seed(row_seed(seed, row.position))
        return float(torch.rand((), generator=gen, dtype=torch.float64))
