"""Qwen3.5 (text) and Qwen3-Next: Gated DeltaNet linear attention mixed with gated full attention.

Both families share the layer stack: ``layer_types`` (or ``full_attention_interval``) decides per
layer whether the token mixer is a Gated DeltaNet (``linear_attn``) or a gated softmax attention
(``self_attn``). They differ in the DeltaNet input projections (Qwen3.5: separate ``in_proj_qkv``,
``in_proj_z``, ``in_proj_b``, ``in_proj_a``; Qwen3-Next: fused ``in_proj_qkvz``/``in_proj_ba``
grouped per key head) and in the MLP (Qwen3.5 dense; Qwen3-Next sparse MoE with a gated shared
expert). Parameter names follow transformers 5.24 (``Qwen3_5ForCausalLM`` and
``Qwen3NextForCausalLM``).

Recurrent state of a DeltaNet layer: ``(conv_state [conv_dim, kernel-1], recurrent [v_heads,
k_dim, v_dim])``. Prefill uses the chunked (WY / UT-transform) form of the gated delta rule, so a
long chunk costs a few batched matmuls and triangular solves plus one small loop over 64-token
chunks; recurrent state is carried exactly across segment boundaries (snapshots).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.batch import ForwardBatch, SeqSpec, paged_attention
from radixflow.models.layers import ACTIVATIONS, Config, GatedMLP, RMSNorm, Rotary, run_layers

CHUNK = 64  # chunk length of the matrix-form delta rule (as in the FLA kernels)


# --------------------------------------------------------------------------- config helpers


def layer_types(config: Config) -> list[str]:
    """Per-layer mixer kind: explicit ``layer_types``, else every ``interval``-th layer is full."""
    types = config.get("layer_types")
    if types:
        return list(types)
    interval = config.get("full_attention_interval", 4)
    n = config.num_hidden_layers
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]


def rope_settings(config: Config) -> tuple[float, float]:
    """``(rope_theta, partial_rotary_factor)`` from ``rope_parameters`` or legacy top-level fields.

    Qwen3.5's multimodal rope (``mrope_section``) reduces to plain rope for text-only positions,
    because all three position streams are equal.
    """
    rp = config.get("rope_parameters", {}) or {}
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type != "default":
        raise NotImplementedError(f"rope_type {rope_type!r} is not supported")
    theta = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    partial = rp.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.25))
    return float(theta), float(partial)


# --------------------------------------------------------------------------- gated delta rule


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """L2 normalisation with the FLA convention ``x / sqrt(sum(x^2) + eps)``."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


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
    """``(I + tril(a, -1))^-1`` by forward substitution (row ``i`` from rows ``< i``).

    On CPU this is several times faster than batched ``linalg.solve_triangular`` for 64x64
    systems, with the same float32 accuracy.
    """
    size = a.shape[-1]
    m = -a.tril(-1)
    for i in range(1, size):
        m[..., i, :i] += (m[..., i, :i, None] * m[..., :i, :i]).sum(-2)
    return m + torch.eye(size, dtype=a.dtype, device=a.device)


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


class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head (plain ``w``, not ``1 + w``) times ``silu(gate)``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = self.weight * h.to(dtype)
        return (h * F.silu(gate.float())).to(dtype)


class GatedDeltaNet(nn.Module):
    """Shared Gated DeltaNet mixer; subclasses define the input projections (``project``)."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.kernel = config.get("linear_conv_kernel_dim", 4)
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            self.kernel,
            groups=self.conv_dim,
            bias=False,
            padding=self.kernel - 1,
        )
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.get("rms_norm_eps", 1e-6))
        self.out_proj = nn.Linear(self.value_dim, config.hidden_size, bias=False)

    def state_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.conv_dim, self.kernel - 1), (self.num_v_heads, self.head_k_dim, self.head_v_dim)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``x [T, H] -> (qkv [T, conv_dim], z [T, v_heads, dv], b [T, v_heads], a [T, v_heads])``."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        qkv, z, b, a = self.project(x)
        beta = torch.sigmoid(b.float())
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        out = torch.empty(x.shape[0], self.num_v_heads, self.head_v_dim, dtype=torch.float32, device=x.device)
        offs = batch.offsets
        for i, seq in enumerate(batch.seqs):
            sl = slice(offs[i], offs[i + 1])
            out[sl] = self._sequence(qkv[sl], g[sl], beta[sl], seq, batch)
        y = self.norm(out.to(x.dtype), z)
        return self.out_proj(y.reshape(x.shape[0], self.value_dim))

    def _sequence(
        self, qkv: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, seq: SeqSpec, batch: ForwardBatch
    ) -> torch.Tensor:
        """Conv + delta rule for one sequence's chunk, segment by segment (saving snapshots)."""
        loaded = batch.state.load(self.layer_idx, seq.restore_slot)
        if loaded is None:
            shapes = self.state_shapes()
            loaded = tuple(torch.zeros(s, dtype=torch.float32, device=qkv.device) for s in shapes)
        conv_state, rec = loaded[0], loaded[1].float()
        mixed, padded = causal_conv(qkv, conv_state, self.conv1d.weight.squeeze(1))
        q, k, v = self._split_heads(mixed)
        out = torch.empty(
            qkv.shape[0], self.num_v_heads, self.head_v_dim, dtype=torch.float32, device=qkv.device
        )
        for lo, hi, slot in seq.segments():
            out[lo:hi], rec = chunked_gated_delta_rule(
                q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], rec
            )
            if slot is not None:
                batch.state.save(self.layer_idx, slot, (padded[:, hi : hi + self.kernel - 1], rec))
        return out

    def _split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Post-conv ``[L, conv_dim]`` -> float32 q, k (normalised, expanded to v heads), v."""
        length = mixed.shape[0]
        q, k, v = mixed.float().split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2norm(q.reshape(length, self.num_k_heads, self.head_k_dim)) * self.head_k_dim**-0.5
        k = l2norm(k.reshape(length, self.num_k_heads, self.head_k_dim))
        groups = self.num_v_heads // self.num_k_heads
        if groups > 1:  # each key head serves `groups` consecutive value heads
            q, k = q.repeat_interleave(groups, dim=1), k.repeat_interleave(groups, dim=1)
        return q, k, v.reshape(length, self.num_v_heads, self.head_v_dim)


class Qwen35GatedDeltaNet(GatedDeltaNet):
    """Qwen3.5 projections: one linear per stream."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        hidden = config.hidden_size
        self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = self.in_proj_z(x).view(x.shape[0], self.num_v_heads, self.head_v_dim)
        return self.in_proj_qkv(x), z, self.in_proj_b(x), self.in_proj_a(x)


class Qwen3NextGatedDeltaNet(GatedDeltaNet):
    """Qwen3-Next projections: fused, laid out per key head as ``[q, k, v-group, z-group]``."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        hidden = config.hidden_size
        self.in_proj_qkvz = nn.Linear(hidden, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(hidden, 2 * self.num_v_heads, bias=False)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t, nk, dk = x.shape[0], self.num_k_heads, self.head_k_dim
        r = self.num_v_heads // nk
        qkvz = self.in_proj_qkvz(x).view(t, nk, 2 * dk + 2 * r * self.head_v_dim)
        q, k, v, z = qkvz.split([dk, dk, r * self.head_v_dim, r * self.head_v_dim], dim=-1)
        b, a = self.in_proj_ba(x).view(t, nk, 2 * r).split([r, r], dim=-1)
        qkv = torch.cat([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], dim=-1)
        z = z.reshape(t, self.num_v_heads, self.head_v_dim)
        return qkv, z, b.reshape(t, self.num_v_heads), a.reshape(t, self.num_v_heads)


# --------------------------------------------------------------------------- gated attention


class GatedAttention(nn.Module):
    """Softmax attention with a sigmoid output gate (packed into ``q_proj``), ``1 + w`` q/k norms
    and partial rotary embedding."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.get("head_dim", hidden // self.num_heads)
        bias = config.get("attention_bias", False)
        eps = config.get("rms_norm_eps", 1e-6)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim * 2, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, eps, offset=1.0)
        self.k_norm = RMSNorm(self.head_dim, eps, offset=1.0)
        theta, partial = rope_settings(config)
        self.rotary = Rotary(self.head_dim, theta, partial)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t, hd = x.shape[0], self.head_dim
        q, gate = self.q_proj(x).view(t, self.num_heads, 2 * hd).split(hd, dim=-1)
        q = self.rotary(self.q_norm(q), batch.positions)
        k = self.rotary(self.k_norm(self.k_proj(x).view(t, self.num_kv_heads, hd)), batch.positions)
        v = self.v_proj(x).view(t, self.num_kv_heads, hd)
        o = paged_attention(self.layer_idx, q, k, v, batch, hd**-0.5)
        o = o.reshape(t, -1) * torch.sigmoid(gate.reshape(t, -1))
        return self.o_proj(o)


# --------------------------------------------------------------------------- sparse MoE


class Experts(nn.Module):
    """Routed experts stored as 3-D tensors (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``)."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(num_experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.zeros(num_experts, hidden, intermediate))
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Tokens sorted by expert, one matmul pair per expert that received tokens."""
        top_k = index.shape[1]
        flat = index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // top_k
        counts = torch.bincount(flat, minlength=self.gate_up_proj.shape[0]).tolist()
        xs = x[token]
        ys = torch.empty_like(xs)
        start = 0
        for e, n in enumerate(counts):
            if n:
                gate, up = F.linear(xs[start : start + n], self.gate_up_proj[e]).chunk(2, dim=-1)
                ys[start : start + n] = F.linear(self.act(gate) * up, self.down_proj[e])
                start += n
        ys = ys * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add_(0, token, ys)


class SparseMoeBlock(nn.Module):
    """Top-k softmax router over routed experts plus a sigmoid-gated shared expert."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden, act = config.hidden_size, config.get("hidden_act", "silu")
        self.top_k = config.num_experts_per_tok
        self.norm_topk = config.get("norm_topk_prob", True)
        self.gate = nn.Linear(hidden, config.num_experts, bias=False)
        self.experts = Experts(config.num_experts, hidden, config.moe_intermediate_size, act)
        self.shared_expert = GatedMLP(hidden, config.shared_expert_intermediate_size, act=act)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(-1, keepdim=True)
        routed = self.experts(x, index, weights.to(x.dtype))
        return routed + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)


# --------------------------------------------------------------------------- model


def _is_moe_layer(config: Config, idx: int) -> bool:
    """Qwen3-Next rule: MoE unless listed in ``mlp_only_layers`` or off the sparse step."""
    if config.get("num_experts", 0) <= 0 or idx in config.get("mlp_only_layers", []):
        return False
    return (idx + 1) % config.get("decoder_sparse_step", 1) == 0


class DecoderLayer(nn.Module):
    """Pre-norm residual block: (DeltaNet | gated attention) then (dense MLP | sparse MoE)."""

    def __init__(self, config: Config, idx: int, kind: str, next_style: bool) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-6)
        hidden, act = config.hidden_size, config.get("hidden_act", "silu")
        self.is_linear = kind == "linear_attention"
        if self.is_linear:
            cls = Qwen3NextGatedDeltaNet if next_style else Qwen35GatedDeltaNet
            self.linear_attn = cls(config, idx)
        else:
            self.self_attn = GatedAttention(config, idx)
        if next_style and _is_moe_layer(config, idx):
            self.mlp: nn.Module = SparseMoeBlock(config)
        else:
            self.mlp = GatedMLP(hidden, config.intermediate_size, act=act)
        self.input_layernorm = RMSNorm(hidden, eps, offset=1.0)
        self.post_attention_layernorm = RMSNorm(hidden, eps, offset=1.0)

    def forward(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        mixer = self.linear_attn if self.is_linear else self.self_attn
        h = h + mixer(self.input_layernorm(h), batch)
        return h + self.mlp(self.post_attention_layernorm(h))


class HybridModel(nn.Module):
    """The ``model.*`` submodule: embeddings, decoder layers, final norm."""

    def __init__(self, config: Config, next_style: bool) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        kinds = layer_types(config)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, kind, next_style)
            for i, kind in enumerate(kinds[: config.num_hidden_layers])
        )
        self.norm = RMSNorm(config.hidden_size, config.get("rms_norm_eps", 1e-6), offset=1.0)


class _HybridForCausalLM(nn.Module):
    """CausalLM protocol over the shared hybrid stack."""

    next_style = False

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = HybridModel(config, self.next_style)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
            if not layer.is_linear
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {
            i: layer.linear_attn.state_shapes()
            for i, layer in enumerate(self.model.layers)
            if layer.is_linear
        }

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return run_layers(self.model.embed_tokens(batch.input_ids), self.model.layers, self.model.norm, batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


class Qwen35ForCausalLM(_HybridForCausalLM):
    """``model_type: qwen3_5_text`` (transformers ``Qwen3_5ForCausalLM``), dense MLP."""

    next_style = False


class Qwen3NextForCausalLM(_HybridForCausalLM):
    """``model_type: qwen3_next`` (transformers ``Qwen3NextForCausalLM``), sparse MoE MLP."""

    next_style = True


# --------------------------------------------------------------------------- init and presets


def _init_tensor(name: str, p: torch.Tensor, gen: torch.Generator, hidden: int) -> torch.Tensor:
    """Deterministic value for one parameter, chosen by its Hugging Face name."""
    shape = p.shape

    def randn(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    def uniform(lo: float, hi: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen) * (hi - lo) + lo

    if name.endswith("A_log"):  # decay rates A in [0.05, 4] (log-uniform): short and long memories
        return uniform(math.log(0.05), math.log(4.0))
    if name.endswith("dt_bias"):  # inverse softplus of dt in [1e-3, 0.1], as Mamba does
        dt = uniform(math.log(1e-3), math.log(0.1)).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if name.endswith("conv1d.weight"):
        return randn(shape[-1] ** -0.5)
    if name.endswith("linear_attn.norm.weight"):  # plain-weight gated norm, centred on 1
        return 1.0 + randn(0.1)
    if "norm" in name:  # zero-centred (1 + w) norms
        return randn(0.1)
    if name.endswith("embed_tokens.weight"):
        return randn(1.0)
    if name.startswith("lm_head"):  # logit std ~4 over the unit-rms final hidden: peaked outputs
        return randn(4.0 / math.sqrt(hidden))
    if name.endswith("bias"):
        return randn(0.02)
    return randn(shape[-1] ** -0.5)  # Linear-like [.., out, in]: variance-preserving


def init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Fill every parameter of a Qwen3.5 / Qwen3-Next model deterministically from ``generator``.

    Tied embeddings get the lm_head scale (the shared tensor is both), so logits stay peaked.
    """
    hidden = model.config.hidden_size
    tied = model.config.get("tie_word_embeddings", False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = "lm_head.weight" if tied and name == "model.embed_tokens.weight" else name
            p.copy_(_init_tensor(key, p, generator, hidden).to(p.dtype))


def _base(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vocab: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


def _hybrid_types(layers: int, interval: int) -> list[str]:
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]


def _linear(k_heads: int, v_heads: int, k_dim: int, v_dim: int) -> dict[str, int]:
    return {
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": k_dim,
        "linear_value_head_dim": v_dim,
    }


_QWEN35 = {"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"]}
_NEXT = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}

PRESETS: dict[str, dict[str, Any]] = {
    # 2 DeltaNet + 2 attention layers, tied embeddings, grouped value heads in the DeltaNet
    "tiny": {
        **_QWEN35,
        **_base(64, 4, 4, 2, 16, 512),
        **_linear(2, 4, 16, 16),
        "intermediate_size": 128,
        "layer_types": _hybrid_types(4, 2),
        "tie_word_embeddings": True,
    },
    # ~50M parameters, the real 3:1 DeltaNet:attention pattern
    "small": {
        **_QWEN35,
        **_base(512, 12, 8, 2, 64, 8192),
        **_linear(4, 8, 64, 64),
        "intermediate_size": 1536,
        "layer_types": _hybrid_types(12, 4),
        "tie_word_embeddings": False,
    },
}

PRESETS_NEXT: dict[str, dict[str, Any]] = {
    # layer 2 uses the dense MLP (mlp_only_layers) so both MLP kinds are covered
    "tiny": {
        **_NEXT,
        **_base(64, 4, 4, 2, 16, 512),
        **_linear(2, 4, 16, 16),
        "intermediate_size": 128,
        "layer_types": _hybrid_types(4, 2),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [2],
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    },
    "small": {
        **_NEXT,
        **_base(512, 8, 8, 2, 64, 8192),
        **_linear(4, 8, 64, 64),
        "intermediate_size": 1024,
        "layer_types": _hybrid_types(8, 4),
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 384,
        "shared_expert_intermediate_size": 384,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    },
}
