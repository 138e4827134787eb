"""Drawing without a full sort: the partial selection against a full float64 sort, row by row."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from radixflow.runners.draw import BLOCK, HEAD, draw, ranked
from radixflow.scheduler.sampling import SamplingParams

HOT = SamplingParams(temperature=1.0)


def reference(logits: torch.Tensor, p: SamplingParams, u: float) -> tuple[int, float]:
    """The draw of the full-sort sampler (before partial selection), float64 throughout, and
    how far ``u`` lies from the nearest boundary of the cumulative distribution (as a share of
    the kept mass): where that is below float32's resolution, a float32 draw may differ."""
    vocab = logits.shape[-1]
    scaled = logits.double() / p.temperature
    vals, order = scaled.sort(descending=True, stable=True)
    probs = torch.softmax(vals, dim=-1)
    keep = torch.arange(vocab) < min(p.top_k or vocab, vocab)
    kept = probs * keep / (probs * keep).sum()
    before = kept.cumsum(-1) - kept
    keep &= (before < p.top_p) | (p.top_p >= 1)
    keep[0] = True
    cdf = (probs * keep).cumsum(-1)
    cdf = cdf / cdf[-1]
    idx = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)[0])
    idx = min(idx, int(keep.sum()) - 1)
    # the kept set itself has a boundary too: the top-p cut
    margin = float((cdf - u).abs().min())
    if p.top_p < 1:
        margin = min(margin, float((before - p.top_p).abs().min()))
    return int(order[idx]), margin


def mixed_params() -> list[SamplingParams]:
    return [
        replace(HOT, top_k=1),
        replace(HOT, top_k=7),
        replace(HOT, top_k=HEAD + 3, temperature=0.7),
        replace(HOT, top_p=0.5),
        replace(HOT, top_p=0.95, temperature=1.3),
        replace(HOT, top_p=0.999, temperature=3.0),  # a flat distribution: the selection grows
        replace(HOT, top_k=20, top_p=0.6),
        replace(HOT, top_k=10**9),  # past the vocabulary: no cut
        HOT,
        replace(HOT, temperature=4.0),  # most of the mass past the head: the block walk
    ]


@pytest.mark.parametrize("vocab", [40, 3000, 4096])
def test_every_draw_is_the_full_sort_draw_for_cut_rows(vocab):
    g = torch.Generator().manual_seed(vocab)
    params = [p for p in mixed_params() if not (p.top_k in (0, 10**9) and p.top_p >= 1)]
    logits = torch.randn(len(params), vocab, generator=g) * 3
    checked = 0
    for _ in range(40):
        u = torch.rand(len(params), generator=g, dtype=torch.float64)
        tokens = draw(logits, params, u).tolist()
        for i, p in enumerate(params):
            want, margin = reference(logits[i], p, float(u[i]))
            if margin > 1e-6:  # float32 cannot tell closer calls apart
                assert tokens[i] == want, (p, float(u[i]))
                checked += 1
    assert checked > 0.9 * 40 * len(params)


def test_ranked_is_a_stable_sort_prefix_whatever_the_batch():
    # integer logits: many ties, some across the cut
    g = torch.Generator().manual_seed(1)
    logits = torch.randint(0, 6, (5, 300), generator=g).float()
    for width in (1, 17, HEAD, 299, 300):
        vals, ids = ranked(logits, width)
        for row in range(5):
            want_vals, want_ids = logits[row].sort(descending=True, stable=True)
            assert ids[row].tolist() == want_ids[:width].tolist()
            assert vals[row].tolist() == want_vals[:width].tolist()
            _, alone_ids = ranked(logits[row : row + 1], width)
            assert alone_ids[0].tolist() == ids[row].tolist()


def full_mapping(logits: torch.Tensor, temperature: float, u: float) -> int:
    """Where a no-cut row's draw lands: its HEAD best ranked first, then every other token in
    token-id order (float64)."""
    scaled = logits.double() / temperature
    _, head = scaled.sort(descending=True, stable=True)
    head = head[:HEAD].tolist()
    order = head + sorted(set(range(len(logits))) - set(head))
    probs = torch.softmax(scaled, -1)[order]
    cdf = probs.cumsum(-1) / probs.sum()
    return order[int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)[0])]


@pytest.mark.parametrize("vocab", [HEAD // 2, 2 * BLOCK, 2 * BLOCK + 300])
def test_no_cut_rows_walk_the_head_then_the_blocks(vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, vocab, generator=g) * torch.tensor([[0.5], [2.0], [6.0]])
    params = [replace(HOT, temperature=t) for t in (1.0, 2.0, 0.5)]
    for _ in range(60):
        u = torch.rand(3, generator=g, dtype=torch.float64)
        tokens = draw(logits, params, u).tolist()
        for i, p in enumerate(params):
            assert tokens[i] == full_mapping(logits[i], p.temperature, float(u[i]))


def chi_square_limit(df: int, z: float = 4.75) -> float:
    """The chi-square value exceeded with probability about 1e-6 (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize(
    "params",
    [
        HOT,
        replace(HOT, top_p=0.9),
        replace(HOT, top_k=30, temperature=2.0),
        replace(HOT, min_p=0.05),
        replace(HOT, min_p=0.02, top_p=0.9),
        replace(HOT, min_p=0.1, top_k=30, temperature=2.0),
    ],
)
def test_draws_follow_the_kept_distribution(params):
    """Chi-square over many draws against the exact (float64) kept distribution: min-p first
    (vLLM's order), then top-k and top-p over what is left."""
    vocab, n = 2 * BLOCK + 100, 20000
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(vocab, generator=g) * 1.5
    probs = torch.zeros(vocab, dtype=torch.float64)  # the kept distribution, as a full sort gives it
    scaled = logits.double() / params.temperature
    vals, order = scaled.sort(descending=True, stable=True)
    p = torch.softmax(vals, -1)
    p = p * (p >= params.min_p * p[0])
    p = p / p.sum()
    keep = (torch.arange(vocab) < (params.top_k or vocab)) & (p > 0)
    q = p * keep / (p * keep).sum()
    keep &= (q.cumsum(-1) - q < params.top_p) | (params.top_p >= 1)
    probs[order] = p * keep / (p * keep).sum()
    u = torch.rand(n, generator=g, dtype=torch.float64)
    tokens = draw(logits.expand(n, -1), [params] * n, u)
    counts = torch.bincount(tokens, minlength=vocab).double()
    assert counts[probs == 0].sum() == 0  # nothing outside the kept set
    # pool the rare tokens so every cell expects at least 5 draws
    expected = probs * n
    common = expected >= 5
    cells_obs = torch.cat([counts[common], counts[~common & (probs > 0)].sum()[None]])
    cells_exp = torch.cat([expected[common], expected[~common & (probs > 0)].sum()[None]])
    cells_obs, cells_exp = cells_obs[cells_exp > 0], cells_exp[cells_exp > 0]
    chi2 = float(((cells_obs - cells_exp) ** 2 / cells_exp).sum())
    assert chi2 < chi_square_limit(len(cells_exp) - 1)


def test_zero_probability_tokens_are_never_drawn_even_at_u_near_one():
    vocab = 3 * BLOCK
    logits = torch.full((4, vocab), -math.inf)
    logits[:, [5, 2000, 2900]] = torch.tensor([0.0, 1.0, -1.0])
    params = [HOT, replace(HOT, top_k=HEAD * 2), replace(HOT, top_p=0.9999), replace(HOT, temperature=9.0)]
    for u in (0.0, 0.5, 1 - 1e-16, 0.999999):
        tokens = draw(logits, params, torch.full((4,), u, dtype=torch.float64)).tolist()
        assert set(tokens) <= {5, 2000, 2900}


def test_extreme_temperatures_stay_finite():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 500, generator=g)
    best = int(logits[0].argmax())
    for t in (1e-45, 1e-30, 1e-8):
        params = [replace(HOT, temperature=t), replace(HOT, temperature=t, top_p=0.5)]
        u = torch.tensor([0.999, 0.3], dtype=torch.float64)
        assert draw(logits[:1].expand(2, -1), params, u).tolist() == [best, best]
    flat = draw(logits, [replace(HOT, temperature=1e30)] * 2, torch.tensor([0.0, 0.999], dtype=torch.float64))
    assert all(0 <= t < 500 for t in flat.tolist())


@pytest.mark.parametrize("temperature", [1e30, 1e39, 1e300])
def test_a_temperature_past_float32s_range_keeps_impossible_tokens_impossible(temperature):
    """A temperature float32 cannot hold (any finite number is valid) once became inf: a token
    of no probability (an allow-list's, a held-back end) scaled to -inf / inf = NaN, a top-p row
    failed its round on an index of -1 and a no-cut row drew only one of the kept tokens. Every
    such temperature flattens the kept tokens to even odds, as 1e30 does."""
    vocab, n = 3000, 400
    logits = torch.full((n, vocab), -math.inf)
    logits[:, [2, 5, 2900]] = torch.tensor([1.5, -0.7, 0.3])
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    for cut in ({}, {"top_p": 0.9}, {"top_k": 3}, {"min_p": 0.5}):
        tokens = draw(logits, [replace(HOT, temperature=temperature, **cut)] * n, u)
        counts = torch.bincount(tokens, minlength=vocab)
        assert counts[[2, 5, 2900]].sum() == n, cut
        assert all(abs(c - n / 3) <= 1 for c in counts[[2, 5, 2900]].tolist()), (cut, counts[[2, 5, 2900]])


def test_a_flat_top_p_row_ranks_enough_and_not_the_vocabulary(monkeypatch):
    """HEAD candidates hold too little mass: the value bins size one selection of a few hundred."""
    vocab = 4096
    logits = torch.full((1, vocab), -30.0)
    spread = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:500]
    logits[0, spread] = torch.linspace(0.0, -1.0, 500)
    params = [replace(HOT, top_p=0.9)]
    widths: list[int] = []
    real = ranked

    def spy(scaled: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        widths.append(width)
        return real(scaled, width)

    monkeypatch.setattr("radixflow.runners.draw.ranked", spy)
    g = torch.Generator().manual_seed(1)
    for _ in range(30):
        u = torch.rand(1, generator=g, dtype=torch.float64)
        want, margin = reference(logits[0], params[0], float(u[0]))
        got = int(draw(logits, params, u)[0])
        assert margin < 1e-6 or got == want
    assert widths[0] == HEAD and max(widths) < vocab // 2 and max(widths) >= 450


@pytest.mark.parametrize("top_k", [3 * HEAD, 3 * HEAD + 1, 10**9])
def test_a_top_k_of_the_whole_vocabulary_or_more_cuts_nothing(top_k):
    """``top_k`` at or past the vocabulary keeps every token, as vLLM and transformers do (and
    as ``top_k`` 0 does), not only the `HEAD` candidates ranked first: evenly spread draws give
    each token its softmax share."""
    vocab, n = 3 * HEAD, 3000
    logits = torch.linspace(0.0, -1.0, vocab)[None]  # flat: most of the mass lies past HEAD
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    tokens = draw(logits.expand(n, -1), [replace(HOT, top_k=top_k)] * n, u)
    shares = torch.bincount(tokens, minlength=vocab).double() / n
    assert torch.allclose(shares, torch.softmax(logits[0].double(), -1), atol=2 / n)
