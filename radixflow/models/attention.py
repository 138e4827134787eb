"""Causal attention over the paged KV cache of a packed batch.

Attention layers write the K/V of *every* token of the batch before any sequence reads, so a
sequence may attend to KV written by another sequence of the same round (full-attention reuse
within a round). Decode rows attend in one fused call over their padded contexts (one per group
of similar context length); the other rows one by one, each with its own causal mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixflow.models.batch import ForwardBatch
from radixflow.models.decode_rows import DecodeContext


def paged_attention(
    layer: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: ForwardBatch,
    scale: float,
) -> torch.Tensor:
    """Causal attention over the paged KV cache for every sequence of ``batch``.

    ``q``: ``[T, heads, dim]``; ``k``/``v``: ``[T, kv_heads, dim]`` for the batch's new tokens.
    First writes all new K/V into the pool (mutates ``batch.kv``), then lets each sequence attend
    to positions ``[0, end)`` of its block table: the decode rows in one call, the others one by
    one. Returns ``[T, heads, dim]``.
    """
    kc, vc = batch.kv.k[layer], batch.kv.v[layer]
    offs = batch.offsets
    batch.kernels.kv_write(kc, vc, batch.new_slots, k, v)
    groups = batch.decode_context if batch.decode_seqs else []
    if len(groups) == 1 and groups[0].covers(q.shape[0]):  # every row, in order: its output is ours
        return _decode_attention(q, layer, batch, groups[0], scale)
    out = torch.empty_like(q)
    for group in groups:
        group.put(out, _decode_attention(group.take(q), layer, batch, group, scale))
    heads, kv_heads = q.shape[1], k.shape[1]
    for i in batch.others:
        s, ctx, mask = batch.seqs[i], batch.context_slots[i], batch.masks[i]
        keys = kc.index_select(0, ctx).to(q.dtype).transpose(0, 1)  # [kv_heads, end, dim]
        vals = vc.index_select(0, ctx).to(q.dtype).transpose(0, 1)
        if kv_heads != heads:
            keys = keys.repeat_interleave(heads // kv_heads, dim=0)
            vals = vals.repeat_interleave(heads // kv_heads, dim=0)
        qi = q[offs[i] : offs[i + 1]].transpose(0, 1)  # [heads, len, dim]
        # 4-D inputs select the fused (flash) CPU kernel; 3-D ones fall back to the math path.
        # From position 0 the causal mask is the plain lower triangle, so is_causal suffices.
        o = F.scaled_dot_product_attention(
            qi[None], keys[None], vals[None], attn_mask=mask, is_causal=s.start == 0, scale=scale
        )[0]
        out[offs[i] : offs[i + 1]] = o.transpose(0, 1)
    return out


def _decode_attention(
    q: torch.Tensor, layer: int, batch: ForwardBatch, context: DecodeContext, scale: float
) -> torch.Tensor:
    """One query token per row over its padded context: ``q [G, heads, dim]`` -> same shape, run by
    the batch's kernels (the eager ones gather the context into the pool's reused buffers; the
    native ones read it where it lies). Each row's softmax runs over exactly its own context."""
    kv = batch.kv
    return batch.kernels.decode_attention(q, kv.k[layer], kv.v[layer], context, scale, kv.gather)
