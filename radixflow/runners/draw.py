"""Drawing tokens by inverse transform without sorting the vocabulary.

A row's tokens are ranked by logit (best first, ties by token id) and a uniform draw ``u`` picks
the first token whose cumulative probability exceeds ``u`` times the kept mass. Only the best
candidates are ever ranked, by a partial selection (`torch.topk`) in float32:

* a row with ``top_k`` ranks its ``top_k`` best tokens (the kept set cannot be larger);
* a row with only ``top_p`` ranks `HEAD` candidates; when their mass falls short of ``top_p``
  (a flat distribution), one pass over the vocabulary sums its mass into value bins, which says
  how many it must rank (`GROWTH` times more at least) before ranking them, by a sort when
  that is past half the vocabulary;
* a row with no cut (no ``top_p``, and no ``top_k`` or one of the whole vocabulary) keeps every
  token: its `HEAD` best are ranked, and a draw past their mass lands in the rest of the
  vocabulary, walked in token-id order by blocks of `BLOCK` tokens.

Everything that touches every token (scaling, ``exp``, the partial selection, the block sums) is
float32; the short cumulative sums over candidates and block sums are float64, so probabilities
resolve to about 1e-7 of their block's mass. Every step works row by row: a row's token depends
only on its logits, its parameters and ``u``, never on the rows beside it.

Against the float64 full sort this replaces, a seeded request keeps its distribution but not
every token: a row with a cut draws the same token for the same ``u`` unless ``u`` lies within
about 1e-7 of a boundary; a row without one draws the same token when ``u`` lands among its
`HEAD` best, and past them another token of the same distribution (token-id order, not rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from radixflow.scheduler.sampling import SamplingParams

HEAD = 64  # candidates ranked first (a top-p row grows from here)
GROWTH = 8  # a top-p row whose ranked mass falls short ranks this many times more
BLOCK = 1024  # tokens per block of the unranked rest (no-cut rows)
BINS = 1024  # value bins of a top-p row's mass, to size its selection when HEAD falls short
_TINY = torch.finfo(torch.float32).tiny  # temperatures below this scale as this (no 0/0)
# and those above this as this: float32's inf made a token of no probability -inf / inf, and
# past ~1e36 even a banned token's lowest finite logit scaled into exp's range. Nothing else
# moves: at 1e30 a logit gap under 1e20 scales under 1e-10, the kept tokens already even.
_HUGE = 1e30
_FLOOR = -104.0  # exp() of anything below is 0 in float32


def draw(logits: torch.Tensor, params: Sequence[SamplingParams], u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``logits`` ([rows, vocab], float32), drawn with ``u`` ([rows],
    float64 in [0, 1)) from the temperature-scaled distribution cut by top-k and top-p."""
    scaled = _scale(logits, params)
    tokens = torch.empty(len(params), dtype=torch.long, device=logits.device)
    vocab = logits.shape[-1]
    full = [i for i, p in enumerate(params) if _no_cut(p, vocab)]
    cut = [i for i, p in enumerate(params) if not _no_cut(p, vocab)]
    if full:
        tokens[full] = _draw_full(scaled[full], u[full])
    if cut:
        tokens[cut] = _draw_cut(scaled[cut], [params[i] for i in cut], u[cut])
    return tokens


def _no_cut(p: SamplingParams, vocab: int) -> bool:
    """Whether a row keeps every token. A ``top_k`` of the whole vocabulary or more cuts nothing,
    as 0 does: the cut path would rank only `HEAD` candidates for it and keep no others."""
    return (p.top_k == 0 or p.top_k >= vocab) and p.top_p >= 1


def _scale(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """``(logits - max) / temperature``: every row's best token at 0, the rest at or below it;
    with ``min_p``, -inf (no probability) below ``log(min_p)``, where a token's probability is
    under ``min_p`` times the best one's."""
    temps = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=logits.device)
    shifted = logits - logits.max(dim=-1, keepdim=True).values
    scaled = shifted / temps.clamp(min=_TINY, max=_HUGE)[:, None]
    floors = [(i, math.log(p.min_p)) for i, p in enumerate(params) if p.min_p > 0]
    for i, floor in floors:
        scaled[i].masked_fill_(scaled[i] < floor, -torch.inf)
    return scaled


def ranked(scaled: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` best tokens of each row, best first, equal values in token-id order:
    ``(values, ids)``, each ``[rows, width]``. The same as the first ``width`` of a stable
    descending sort of the row (tokens of zero probability aside), whatever else the batch
    holds. Past half the vocabulary a sort is cheaper than a selection, and is used."""
    if 2 * width >= scaled.shape[-1]:
        vals, ids = scaled.sort(dim=-1, descending=True, stable=True)
        return vals[:, :width], ids[:, :width]
    vals, ids = scaled.topk(width, dim=-1)
    # topk orders equal values as it likes, and takes any of those tied with its last one:
    # settle the rows with a tie (rare with real logits), leaving ties of -inf (no probability)
    finite = vals > -torch.inf
    inside = ((vals[:, 1:] == vals[:, :-1]) & finite[:, 1:]).any(dim=-1)
    across = ((scaled >= vals[:, -1:]).sum(dim=-1) > width) & finite[:, -1]
    for row in (inside | across).nonzero()[:, 0].tolist():
        vals[row], ids[row] = _settled(scaled[row], vals[row, -1], width)
    return vals, ids


def _settled(row: torch.Tensor, last: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` best of one row, ties by token id, given the value of the last one."""
    above = (row > last).nonzero()[:, 0]
    ids = torch.cat([above, (row == last).nonzero()[:, 0][: width - len(above)]]).sort().values
    vals, order = row[ids].sort(descending=True, stable=True)
    return vals, ids[order]


def _pick(weights: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Index of the first weight whose cumulative sum exceeds ``target`` (per row), never one
    of zero weight: a target past the total (rounding) takes the last positive weight."""
    cdf = weights.double().cumsum(dim=-1)
    idx = torch.searchsorted(cdf, target[:, None], right=True)[:, 0]
    positions = torch.arange(weights.shape[-1], device=weights.device)
    last = torch.where(weights > 0, positions, -1).max(dim=-1).values
    return torch.minimum(idx, last)


# ------------------------------------------------------------------------ rows with a cut
def _draw_cut(scaled: torch.Tensor, params: list[SamplingParams], u: torch.Tensor) -> torch.Tensor:
    vocab, device = scaled.shape[-1], scaled.device
    top_k = torch.tensor([min(p.top_k or vocab, vocab) for p in params], device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float64, device=device)
    # a top-p-only row is cut against the whole row's mass (its best token weighs 1); a top-k
    # row against its top-k set's (0 here)
    mass = torch.exp(scaled).sum(dim=-1, dtype=torch.float64) * (top_k == vocab)
    width = torch.where(top_k == vocab, min(HEAD, vocab), top_k)
    tokens = torch.empty(len(params), dtype=torch.long, device=device)
    rows = torch.arange(len(params), device=device)
    while len(rows):
        vals, ids = ranked(scaled[rows], int(width[rows].max()))
        keep, short = _kept(vals, width[rows], top_p[rows], mass[rows])
        done = ~short | (width[rows] == vocab)
        w = torch.exp(vals[done]) * keep[done]
        target = u[rows[done]] * w.double().sum(dim=-1)
        tokens[rows[done]] = ids[done].gather(1, _pick(w, target)[:, None])[:, 0]
        rows = rows[~done]
        if len(rows):
            grown = torch.maximum(width[rows] * GROWTH, _enough(scaled[rows], top_p[rows] * mass[rows]))
            width[rows] = torch.where(2 * grown >= vocab, vocab, grown)  # that far: rank them all
    return tokens


def _enough(scaled: torch.Tensor, needed: torch.Tensor) -> torch.Tensor:
    """How many of each row's best tokens hold at least ``needed`` of its mass, or a few more:
    one pass that sums the mass into `BINS` bins of value, best bins first."""
    low = scaled.clamp(min=_FLOOR).min(dim=-1, keepdim=True).values
    span = (-low).clamp(min=_TINY)  # the best value is 0
    bins = ((scaled - low) / span * (BINS - 1)).clamp(min=0).long()  # -inf: bin 0, no mass
    mass = torch.zeros(len(scaled), BINS, dtype=torch.float64, device=scaled.device)
    mass.scatter_add_(1, bins, torch.exp(scaled).double())
    from_top = mass.flip(-1).cumsum(dim=-1)  # [:, j]: mass of the best j + 1 bins
    first = (from_top < needed[:, None]).sum(dim=-1).clamp(max=BINS - 1)
    return (bins >= BINS - 1 - first[:, None]).sum(dim=-1)


def _kept(
    vals: torch.Tensor, width: torch.Tensor, top_p: torch.Tensor, mass: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ranked tokens survive top-k (rank below ``width``) and then top-p (a token is kept
    while the mass before it is below ``top_p``; the best token always is), and which rows fall
    short: their kept set may go on past the ranked tokens. ``mass``: the row's whole mass, or
    0 to renormalise over the top-k set."""
    rank = torch.arange(vals.shape[-1], device=vals.device)[None, :]
    inside = rank < width[:, None]
    w = torch.exp(vals).double() * inside
    total = torch.where(mass > 0, mass, w.sum(dim=-1))[:, None]
    cum = w.cumsum(dim=-1) / total
    no_cut = top_p >= 1  # 1: no cut, whatever the rounding
    keep = inside & ((cum - w / total < top_p[:, None]) | no_cut[:, None])
    keep[:, 0] = True
    reached = cum.gather(1, (width - 1).clamp(max=vals.shape[-1] - 1)[:, None])[:, 0]
    return keep, (mass > 0) & (reached < top_p) & ~no_cut


# ------------------------------------------------------------------------ rows without a cut
def _draw_full(scaled: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Every token kept: the ranked head first, then the rest in token-id order by blocks."""
    rows, vocab = scaled.shape
    head_vals, head_ids = ranked(scaled, min(HEAD, vocab))
    head = torch.exp(head_vals)
    rest = torch.exp(scaled)
    rest.scatter_(1, head_ids, 0.0)
    blocks = -(-vocab // BLOCK)
    if blocks * BLOCK != vocab:
        rest = torch.nn.functional.pad(rest, (0, blocks * BLOCK - vocab))
    rest = rest.view(rows, blocks, BLOCK)
    block_mass = rest.sum(dim=-1, dtype=torch.float64)
    head_mass = head.sum(dim=-1, dtype=torch.float64)
    target = u * (head_mass + block_mass.sum(dim=-1))
    in_head = (target < head_mass) | (block_mass.sum(dim=-1) <= 0)
    tokens = torch.empty(rows, dtype=torch.long, device=scaled.device)
    if in_head.any():
        h = in_head.nonzero()[:, 0]
        tokens[h] = head_ids[h].gather(1, _pick(head[h], target[h])[:, None])[:, 0]
    t = (~in_head).nonzero()[:, 0]
    if len(t):
        past = target[t] - head_mass[t]
        mass = block_mass[t]
        b = _pick(mass, past)
        before = (mass.cumsum(dim=-1) - mass).gather(1, b[:, None])[:, 0]  # the blocks before b
        tokens[t] = b * BLOCK + _pick(rest[t, b], past - before)
    return tokens
