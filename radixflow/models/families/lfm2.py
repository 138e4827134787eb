"""LFM2 (Liquid AI): gated short-convolution blocks mixed with GQA attention.

Parameter names follow ``transformers.Lfm2ForCausalLM`` exactly. Each decoder layer is either a
*conv* block (``in_proj`` -> B, C, x gates; depthwise causal conv over ``B * x`` with kernel
``conv_L_cache``; ``C *`` conv output; ``out_proj``) or an attention block (q/k RMSNorm per head,
rotary, paged causal attention). Every layer ends with a SwiGLU feed-forward
(``feed_forward.w1/w3/w2``). The final norm is called ``embedding_norm`` in the checkpoint.

Recurrent state of a conv layer is its conv window: the last ``conv_L_cache - 1`` values of
``B * x``, stored channel-major as ``[hidden, conv_L_cache - 1]`` (the layout of transformers'
conv cache). The one-token rows of a round shift their windows in one batched step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch
from radixflow.models.decode_rows import DecodeRows
from radixflow.models.families import layer_patterns, schemas
from radixflow.models.layers import (
    Config,
    RMSNorm,
    Rotary,
    attention_heads,
    lm_head,
    rope_parameters,
    run_layers,
)
from radixflow.models.presets.lfm2 import ATTENTION
from radixflow.models.presets.lfm2 import PRESETS as PRESETS  # the zoo reads them here


def layer_types(config: Config) -> list[str]:
    """Per-layer kind, from ``layer_types`` or else ``full_attn_idxs`` (all attention if neither),
    read as the schema's checks read them (`layer_patterns.lfm2_kinds`)."""
    return layer_patterns.lfm2_kinds(config.to_dict())


def intermediate_size(config: Config) -> int:
    """Feed-forward width, with LFM2's optional 2/3 shrink, multiplier and rounding."""
    # LFM2's own block_ff_dim decides where both are set (transformers' Lfm2Config reads it over
    # intermediate_size)
    size = config.get("block_ff_dim", config.get("intermediate_size"))
    if config.get("block_auto_adjust_ff_dim", True):
        # transformers' Lfm2Config defaults the multiplier to 1.0 (never None): a config without
        # it still rounds up to block_multiple_of
        multiplier = config.get("block_ffn_dim_multiplier", 1.0)
        multiple_of = config.get("block_multiple_of", 256)
        size = int(multiplier * int(2 * size / 3))
        size = multiple_of * ((size + multiple_of - 1) // multiple_of)
    return size


def rope_theta(config: Config) -> float:
    """Plain rope's theta as transformers reads it (`layers.rope_parameters`; LFM2's default 1e6)."""
    params = rope_parameters(config, default_theta=1_000_000.0)
    if params["rope_type"] != "default":
        raise NotImplementedError(f"lfm2: rope_type {params['rope_type']!r} is not supported")
    return float(params["rope_theta"])


class Lfm2MLP(nn.Module):
    """SwiGLU feed-forward under LFM2's names: ``w2(silu(w1(x)) * w3(x))``."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, inner, bias=False)
        self.w3 = nn.Linear(hidden, inner, bias=False)
        self.w2 = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x), inplace=True).mul_(self.w3(x)))  # into w1's own output


class Lfm2Attention(nn.Module):
    """GQA attention with per-head RMSNorm on q and k, over the paged KV cache."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = attention_heads(config)
        self.scaling = self.head_dim**-0.5
        eps = config.get("norm_eps", 1e-5)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.out_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        self.q_layernorm = RMSNorm(self.head_dim, eps=eps, cast_first=True)
        self.k_layernorm = RMSNorm(self.head_dim, eps=eps, cast_first=True)
        self.rotary = Rotary(self.head_dim, rope_theta(config))

    def forward(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = h.shape[0]
        q = self.q_layernorm(self.q_proj(h).view(t, self.num_heads, self.head_dim))
        k = self.k_layernorm(self.k_proj(h).view(t, self.num_kv_heads, self.head_dim))
        v = self.v_proj(h).view(t, self.num_kv_heads, self.head_dim)
        q = self.rotary(q, batch)
        k = self.rotary(k, batch)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.scaling)
        return self.out_proj(out.reshape(t, -1))


class Lfm2ShortConv(nn.Module):
    """Gated depthwise causal convolution: ``out_proj(C * conv(B * x))``."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        bias = bool(config.get("conv_bias", False))
        self.layer_idx = layer_idx
        self.kernel = config.get("conv_L_cache", 3)
        # nn.Conv1d only as a parameter holder, so the key is ``conv.conv.weight`` ([C, 1, L]).
        self.conv = nn.Conv1d(hidden, hidden, self.kernel, groups=hidden, bias=bias)
        self.in_proj = nn.Linear(hidden, 3 * hidden, bias=bias)
        self.out_proj = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        b, c, x = self.in_proj(h).chunk(3, dim=-1)
        bx = b * x
        waves = batch.waves
        if not batch.decode_seqs and len(waves) == 1:
            y = self._causal_conv(bx, batch, *waves[0])
        elif batch.whole_decode is not None:  # every row, in order: the step's output is ours
            y = self._decode(bx, batch.whole_decode, batch)
        else:
            y = torch.empty_like(bx)
            for rows in batch.decode_parts:
                rows.put(y, self._decode(bx, rows, batch))
            for seqs, tokens in waves:  # a wave restores the windows the waves before it saved
                y[tokens] = self._causal_conv(bx, batch, seqs, tokens)
        return self.out_proj(c * y)

    def _decode(self, bx: torch.Tensor, rows: DecodeRows, batch: ForwardBatch) -> torch.Tensor:
        """The one-token rows of one part in one step: their windows (gathered, or the pool's
        own rows for an in-place block), shift in the new input, the new windows to the rows'
        snapshot slots (mutates the pool). Returns ``[rows, C]``."""
        (window,) = batch.state.gather(self.layer_idx, rows)
        # in place: the gathered window (or the block of the pool this step shifts) is this step's
        weight, bias = self.conv.weight[:, 0], self.conv.bias
        out, window = batch.kernels.conv_step(rows.take(bx), window, weight, bias)
        batch.state.scatter(self.layer_idx, rows, (window,))
        return out

    def _causal_conv(
        self, bx: torch.Tensor, batch: ForwardBatch, rows: list[int], tokens: torch.Tensor
    ) -> torch.Tensor:
        """Depthwise causal conv of one wave of per-sequence rows (``rows`` and their flat
        ``tokens``, `batch.waves`) in ONE call of the batch's kernels, each sequence behind its
        restored window (zeros from scratch); saves the window at each snapshot (mutates the
        pool). Returns ``[len(tokens), C]``, in ``tokens`` order."""
        seqs = [batch.seqs[i] for i in rows]
        (windows,) = batch.state.load_many(self.layer_idx, [s.restore_slot for s in seqs])
        conv = self.conv
        y, window_after = batch.kernels.prefill_conv(
            bx, tokens, [s.length for s in seqs], windows, conv.weight[:, 0], conv.bias, False
        )
        for n, seq in enumerate(seqs):
            for snap in seq.snapshots:
                batch.state.save(self.layer_idx, snap.slot, (window_after(n, snap.position - seq.start),))
        return y


class Lfm2DecoderLayer(nn.Module):
    """Pre-norm block: operator (conv or attention) then SwiGLU, each with a residual."""

    def __init__(self, config: Config, layer_idx: int, kind: str) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.get("norm_eps", 1e-5)
        self.is_attention = kind == ATTENTION
        if self.is_attention:
            self.self_attn = Lfm2Attention(config, layer_idx)
        else:
            self.conv = Lfm2ShortConv(config, layer_idx)
        self.feed_forward = Lfm2MLP(hidden, intermediate_size(config))
        self.operator_norm = RMSNorm(hidden, eps=eps, cast_first=True)
        self.ffn_norm = RMSNorm(hidden, eps=eps, cast_first=True)

    def forward(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        op = self.self_attn if self.is_attention else self.conv
        h = h + op(self.operator_norm(h), batch)
        return h + self.feed_forward(self.ffn_norm(h))


class Lfm2Model(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.kinds = layer_types(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Lfm2DecoderLayer(config, i, kind) for i, kind in enumerate(self.kinds))
        self.embedding_norm = RMSNorm(config.hidden_size, eps=config.get("norm_eps", 1e-5), cast_first=True)

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return run_layers(self.embed_tokens(batch.input_ids), self.layers, self.embedding_norm, batch)


class Lfm2ForCausalLM(nn.Module):
    """LFM2 causal LM implementing the runner's ``CausalLM`` protocol."""

    config_schema = schemas.LFM2
    config_defaults = schemas.LFM2_DEFAULTS

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = Lfm2Model(config)
        # LFM2's own tie_embedding, where given, decides (transformers' Lfm2Config sets
        # tie_word_embeddings from it), so a config holding both disagreeing ties as there
        tie = config.get("tie_embedding", config.get("tie_word_embeddings", True))
        self.lm_head = lm_head(config, self.model.embed_tokens, tie)

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
            if layer.is_attention
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        window = (self.config.hidden_size, self.config.get("conv_L_cache", 3) - 1)
        return {i: (window,) for i, layer in enumerate(self.model.layers) if not layer.is_attention}

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.model(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


@torch.no_grad()
def init_weights(model: Lfm2ForCausalLM, generator: torch.Generator) -> None:
    """Deterministic init with peaked, context-dependent next-token distributions.

    Embeddings and lm_head (tied by default) get std ``3 / sqrt(hidden)`` so logits have std ~3
    and typical top-1 margins of order 1. Residual branches (``out_proj``, ``w2``) write ~unit
    RMS each, so the stream is dominated by the layers rather than the input embedding; with
    tied weights a dominant embedding would make every position predict its own input token.
    Norm weights are ~1 with a little noise so a missing or misplaced norm shows in comparisons.
    """
    hidden = model.config.hidden_size

    def normal(p: torch.Tensor, std: float, mean: float = 0.0) -> None:
        p.copy_(torch.randn(p.shape, generator=generator) * std + mean)

    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            normal(p, 0.1, mean=1.0)
        elif name.endswith(".bias"):
            normal(p, 0.02)
        elif "embed_tokens" in name or name == "lm_head.weight":
            normal(p, 3.0 / hidden**0.5)
        elif name.endswith("conv.conv.weight"):
            normal(p, 1.0 / p.shape[-1] ** 0.5)
        elif name.endswith(("out_proj.weight", "w2.weight")):
            normal(p, 1.5 / p.shape[1] ** 0.5)
        else:
            normal(p, 1.0 / p.shape[1] ** 0.5)
