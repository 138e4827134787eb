"""The gated delta rule as pure functions on one segment of one sequence (float32).

Per head and token: ``S <- exp(g) S``; ``u = beta (v - S^T k)``; ``S <- S + k u^T``;
``o = S^T q``. Prefill uses the chunked (WY / UT-transform) form, so a long segment costs a few
batched matmuls and unit-lower-triangular solves plus one small loop over 64-token chunks. Also
here: the depthwise causal conv and the L2 norm in front of the rule.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from radixflow.models.kernels.chunks import ChunkPlan

CHUNK = 64  # chunk length of the matrix-form delta rule (as in the FLA kernels)
CHUNK_SIZES = (16, 32, 64)  # the chunk lengths `pick_chunk` chooses from on the CPU
# One carry step of `gated_delta_rule_chunks` (a few small matmuls and their dispatch) costs
# about as much as this many multiply-adds of per-row work. Fitted, not derived: thread-CPU
# times of the kernel over 15 mixes of segment lengths (one long prompt to 30 short suffixes)
# with 8 heads of 64 x 64, one torch thread, on the 2-core Sapphire Rapids machine this was
# written on gave ~0.30 ms per step against ~72 fs per multiply-add
# (`python benchmarks/delta_rule_chunks.py` reprints the measurement beside each pick).
STEP_COST = 4.2e6
# Chunks whose chunk-local work runs together: their temporaries (decays, systems, scores; ~1 MB
# at 8 heads) stay in cache; all of a round's chunks at once ran slower when measured.
LOCAL_BLOCK = 8


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """L2 normalisation with the FLA convention ``x / sqrt(sum(x^2) + eps)``."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def expand_key_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[L, key_heads, d]`` -> ``[L, heads, d]``: each key head repeated for its value heads."""
    return x if heads == x.shape[1] else x.repeat_interleave(heads // x.shape[1], dim=1)


def causal_conv(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv over one sequence's new inputs, continuing from ``conv_state``.

    ``x``: ``[L, C]``; ``conv_state``: ``[C, K-1]`` (the previous K-1 inputs, oldest first);
    ``weight``: ``[C, K]``. Returns ``(silu(conv(x)) [L, C], padded [C, K-1+L])``: the padded
    input lets callers read the conv state after any prefix ``p`` as ``padded[:, p : p+K-1]``.
    """
    padded = torch.cat([conv_state.to(x.dtype), x.t()], dim=1)
    out = F.conv1d(padded.unsqueeze(0), weight.unsqueeze(1), groups=weight.shape[0])
    return F.silu(out[0].t()), padded


def pick_chunk(lengths: list[list[int]], heads: int, dk: int, dv: int) -> int:
    """The chunk length in `CHUNK_SIZES` with the least estimated work for segments of these
    lengths (one list per sequence), laid out as `ChunkPlan.build` lays them out. Pure.

    Every segment is zero-padded to a whole number of chunks, so a round of short suffixes
    beside one longer prompt wastes most of its rows at 64 (13 segments of 11 tokens and one of
    70 pad 202 rows to 896). A row costs its carry product (3 dk dv) and its share of the
    chunk-local systems (about size * (3 dk + dv) + size^2); a step of the carry loop costs
    `STEP_COST`, so long prompts still take long chunks.
    """
    longest = max((n for segs in lengths for n in segs), default=1)
    best, best_cost = CHUNK, float("inf")
    for chunk in CHUNK_SIZES:
        size = min(chunk, longest)
        rows = sum(-(-n // size) * size for segs in lengths for n in segs)
        steps = max(sum(-(-n // size) for n in segs) for segs in lengths)
        cost = heads * rows * (3 * dk * dv + size * (3 * dk + dv) + size * size) + steps * STEP_COST
        if cost < best_cost:
            best, best_cost = chunk, cost
    return best


def _to_chunks(x: torch.Tensor, size: int) -> torch.Tensor:
    """``[L, H, *d] -> [H, N, size, *d]``, zero-padding L up to a multiple of ``size``.

    Zero padding is inert for the delta rule: beta = 0 writes nothing and g = 0 decays nothing.
    """
    pad = (-x.shape[0]) % size
    if pad:
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
    x = x.reshape(-1, size, *x.shape[1:])
    return x.movedim(2, 0)


def _unit_lower_inverse(a: torch.Tensor) -> torch.Tensor:
    """``(I + tril(a, -1))^-1`` by block doubling: the inverses of the diagonal blocks of size
    ``s`` give those of size ``2s`` through ``[[A, 0], [C, B]]^-1 = [[A^-1, 0], [-B^-1 C A^-1,
    B^-1]]``, so a 64x64 system costs six levels of batched matmuls.

    On CPU this is several times faster than batched ``linalg.solve_triangular`` for 64x64
    systems, and than row-by-row forward substitution (63 dependent steps of elementwise work),
    with the same float32 accuracy. Sizes that are not a power of two are padded with identity.
    """
    n = a.shape[-1]
    size = 1 << max(n - 1, 0).bit_length()
    low = a.tril(-1)
    if size != n:
        low = F.pad(low, (0, size - n, 0, size - n))
    lead = low.shape[:-2]
    inv = torch.zeros(*lead, size, size, dtype=a.dtype, device=a.device)
    inv.diagonal(dim1=-2, dim2=-1).fill_(1.0)  # the 1x1 diagonal blocks are their own inverse
    s = 1
    while s < size:
        x, c = _diagonal_blocks(inv, 2 * s), _diagonal_blocks(low, 2 * s)[..., s:, :s]
        x[..., s:, :s] = -(x[..., s:, s:] @ c @ x[..., :s, :s])  # writes into inv (a view)
        s *= 2
    return inv[..., :n, :n]


def _diagonal_blocks(t: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width``-wide diagonal blocks of ``t [..., n, n]`` as a view ``[..., n/width, width, width]``."""
    nb = t.shape[-1] // width
    blocks = t.view(*t.shape[:-2], nb, width, nb, width).diagonal(dim1=-4, dim2=-2)
    return blocks.movedim(-1, -3)


def unit_lower_solve(a: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve ``(I + tril(a, -1)) x = rhs`` (the diagonal of ``a`` is ignored)."""
    if a.device.type == "cpu":
        return _unit_lower_inverse(a) @ rhs
    return torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)


def chunked_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated delta rule over one segment, in float32.

    Per head and token: ``S <- exp(g) S``; ``u = beta (v - S^T k)``; ``S <- S + k u^T``;
    ``o = S^T q``. ``q``/``k``: ``[L, H, dk]`` (normalised, q already scaled), ``v``: ``[L, H, dv]``,
    ``g``/``beta``: ``[L, H]``, ``state``: ``[H, dk, dv]``. Returns ``(o [L, H, dv], state)``.

    Within a chunk the updates are solved jointly: with ``G`` the in-chunk cumulative log decay,
    ``(I + A) U = beta V - beta exp(G) K S0`` where ``A_ij = beta_i k_i.k_j exp(G_i - G_j)``
    for ``j < i``, which is one unit-lower-triangular solve per chunk.
    """
    length = q.shape[0]
    if length == 0:  # no tokens: no output, state unchanged (callers never split off empty segments)
        return v.new_zeros(0, *v.shape[1:]), state
    size = min(chunk, length)
    qc, kc, vc = (_to_chunks(t, size) for t in (q, k, v))  # [H, N, C, d]
    gc, bc = (_to_chunks(t, size) for t in (g, beta))  # [H, N, C]
    cum = gc.cumsum(-1)
    lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    # exp(G_i - G_j) on and below the diagonal; masked before exp so nothing overflows
    decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()
    kb = kc * bc.unsqueeze(-1)
    a = (kb @ kc.transpose(-1, -2)) * decay
    rhs = torch.cat([vc * bc.unsqueeze(-1), kb * cum.exp().unsqueeze(-1)], dim=-1)
    solved = unit_lower_solve(a, rhs)
    u_base, w = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
    intra = (qc @ kc.transpose(-1, -2)) * decay
    q_dec = qc * cum.exp().unsqueeze(-1)
    k_dec = kc * (cum[..., -1:] - cum).exp().unsqueeze(-1)
    chunk_decay = cum[..., -1].exp()  # [H, N]
    out = torch.empty_like(u_base)
    for n in range(qc.shape[1]):
        u = u_base[:, n] - w[:, n] @ state
        out[:, n] = q_dec[:, n] @ state + intra[:, n] @ u
        state = state * chunk_decay[:, n, None, None] + k_dec[:, n].transpose(-1, -2) @ u
    out = out.reshape(out.shape[0], -1, out.shape[-1])[:, :length]
    return out.transpose(0, 1), state


# token rows (lo, hi) of one sequence's segment and the key its state is saved under, or None
Segments = list[list[tuple[int, int, int | None]]]


def gated_delta_rule_segments(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    states: torch.Tensor,
    segs: Segments,
    on_save: Callable[[int, torch.Tensor], None],
) -> torch.Tensor:
    """The eager prefill of the gated delta rule over a round's segments (the reference the
    native scan is tested against): ``q``, ``k [R, key_heads, dk]``, ``v [R, heads, dv]``, ``g``,
    ``beta [R, heads]``; ``states [B, heads, dk, dv]``, sequence ``b``'s initial state at ``b``
    (the call's own: used as scratch); ``segs[b]``: sequence b's segments ``(lo, hi, key)`` in
    order, over the rows of q. Calls ``on_save(key, state)`` where a segment has a key; returns
    ``o [R, heads, dv]``. The chunk length is chosen by the padded work on a CPU (`pick_chunk`),
    the FLA length elsewhere (a GPU pays per launch, not per padded row)."""
    heads, dk, dv = v.shape[1], k.shape[-1], v.shape[-1]
    if q.device.type == "cpu":
        chunk = pick_chunk([[hi - lo for lo, hi, _ in mine] for mine in segs], heads, dk, dv)
    else:
        chunk = CHUNK
    plan = ChunkPlan.build(segs, q.shape[0], chunk, q.device)
    order = list(plan.order)
    if order != list(range(len(order))):
        states = states[order]
    q, k = expand_key_heads(q, heads), expand_key_heads(k, heads)
    return gated_delta_rule_chunks(q, k, v, g, beta, states, plan, on_save, in_place=True)


def gated_delta_rule_chunks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    states: torch.Tensor,
    plan: ChunkPlan,
    on_save: Callable[[int, torch.Tensor], None],
    *,
    in_place: bool = False,
) -> torch.Tensor:
    """The gated delta rule over the segments of several sequences at once, in float32.

    ``q``/``k``: ``[R, H, dk]``, ``v``: ``[R, H, dv]``, ``g``/``beta``: ``[R, H]`` over all token
    rows ``plan`` reads; ``states``: ``[B, H, dk, dv]``, each sequence's initial state in plan
    order (left alone unless ``in_place``: then it is the carry's running state, for states the
    caller owns, such as a gathered copy). The chunk-local work (decays, the triangular solves,
    intra-chunk scores) runs for the chunks of every sequence together, `LOCAL_BLOCK` chunks per
    set of batched ops; the carry then steps through the chunks with the sequences still running
    side by side, calling ``on_save(key, state [H, dk, dv])`` where a segment ends on a save. Returns
    ``o [R, H, dv]``. Same math as `chunked_gated_delta_rule` per segment (a segment's zero
    padding writes and decays nothing).
    """
    # chunk-major [NC, H, C, ...]: a step's chunks (and a block of chunks) are one contiguous slice
    qc, kc, vc, gc, bc = (plan.gather(t).movedim(2, 1).contiguous() for t in (q, k, v, g, beta))
    chunks, heads, size = qc.shape[:3]
    dk, dv = k.shape[-1], v.shape[-1]
    new = qc.new_empty  # the chunk-local results, filled a block of chunks at a time
    u_base, w = new(chunks, heads, size, dv), new(chunks, heads, size, dk)
    intra = new(chunks, heads, size, size)
    q_dec, k_dec = new(chunks, heads, size, dk), new(chunks, heads, dk, size)
    chunk_decay = new(chunks, heads, 1, 1)
    lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    for lo in range(0, chunks, LOCAL_BLOCK):
        part = slice(lo, lo + LOCAL_BLOCK)
        qb, kb_, vb, bb = qc[part], kc[part], vc[part], bc[part]
        cum = gc[part].cumsum(-1)
        decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()
        kb = kb_ * bb.unsqueeze(-1)
        a = (kb @ kb_.transpose(-1, -2)) * decay
        rhs = torch.cat([vb * bb.unsqueeze(-1), kb * cum.exp().unsqueeze(-1)], dim=-1)
        u_base[part], w[part] = unit_lower_solve(a, rhs).split([dv, dk], dim=-1)
        torch.mul(qb @ kb_.transpose(-1, -2), decay, out=intra[part])
        torch.mul(qb, cum.exp().unsqueeze(-1), out=q_dec[part])
        k_dec[part] = (kb_ * (cum[..., -1:] - cum).exp().unsqueeze(-1)).transpose(-1, -2)
        chunk_decay[part] = cum[..., -1].exp()[..., None, None]
    state = states if in_place else states.clone()  # [B, H, dk, dv]: the running sequences are a prefix
    out = torch.empty_like(u_base)
    saves = list(plan.saves)
    for j, sl in enumerate(plan.step_slices()):
        s = state[: sl.stop - sl.start]
        u = u_base[sl] - w[sl] @ s
        out[sl] = q_dec[sl] @ s + intra[sl] @ u
        s.copy_(s * chunk_decay[sl] + k_dec[sl] @ u)
        while saves and saves[0].step == j:
            save = saves.pop(0)
            on_save(save.key, state[save.seq])
    return plan.scatter(out.movedim(1, 2), q.shape[0])
