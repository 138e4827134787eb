"""Mamba2 hybrids: Nemotron-H and Falcon-H1 (Hugging Face parameter layout, transformers 5.24).

Both families share one Mamba2 mixer (`Mamba2Mixer`):

    in_proj -> (z, xBC, dt) -> causal depthwise conv1d + act over xBC -> (x, B, C)
    dt = clamp(softplus(dt + dt_bias), limits);  A = -exp(A_log)
    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T;   y_t = h_t C_t + D x_t
    y -> gate with z (grouped gated RMSNorm or plain ``y * silu(z)``) -> out_proj

The recurrent state of one Mamba2 layer is ``(conv window [conv_dim, d_conv - 1], ssm state
[heads, head_dim, d_state])``. Long segments use the chunked SSD (matrix) form: quadratic
attention-like work inside chunks, a linear recurrence of the small state across chunks; single
tokens use the plain recurrence. Segments between snapshot points are processed one after
another, so a snapshot holds exactly the state a full uninterrupted prefill has at that position.

* **Nemotron-H** (``model_type`` "nemotron_h"): a stack of blocks ``x + mixer(norm(x))`` whose
  mixer is Mamba2 ("M"), attention without rotary ("*"), a relu2 MLP ("-") or a routed MoE with
  a shared expert ("E"). Checkpoints (NVIDIA's, and what transformers' ``save_pretrained``
  writes) name the body ``backbone.*`` and store experts one module each
  (``experts.{j}.up_proj.weight``); transformers renames these at load time, so this module uses
  the on-disk names directly. transformers never ties its embeddings, whatever the config says.
* **Falcon-H1** (``model_type`` "falcon_h1"): every layer runs Mamba2 and RoPE attention in
  parallel on the same normed input and adds both, then a SwiGLU MLP; muP multipliers scale the
  embeddings, the lm_head, the attention input/output and keys, the SSM input/output, each
  part of the in_proj output (z, x, B, C, dt) and the MLP gate/down projections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.batch import ForwardBatch, SeqSpec, paged_attention
from radixflow.models.layers import ACTIVATIONS, Config, RMSNorm, run_layers
from radixflow.models.llama import build_rotary

# ---------------------------------------------------------------------------------------------
# Config helpers


def _as_float(value: Any) -> float:
    """A float from config.json, including transformers' ``{"__float__": "Infinity"}`` form."""
    if isinstance(value, dict) and "__float__" in value:
        return float(value["__float__"])
    return float(value)


def _first(config: Config, names: tuple[str, ...], default: Any = None) -> Any:
    """The first of ``names`` the config sets (current name first, legacy aliases after)."""
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return default


# ---------------------------------------------------------------------------------------------
# Mamba2 math (pure functions on one segment of one sequence)


def causal_conv(
    xbc: torch.Tensor, window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv over ``xbc [L, C]`` continuing from ``window [C, K-1]``.

    ``weight`` is ``[C, K]``. Returns the conv output ``[L, C]`` (before the activation) and the
    new window: the last ``K-1`` inputs, which may reach back into the old window when ``L`` is
    shorter than it.
    """
    length, k = xbc.shape[0], weight.shape[1]
    full = torch.cat([window.transpose(0, 1).to(xbc.dtype), xbc], dim=0)  # [K-1+L, C]
    w = weight.to(xbc.dtype)
    out = full[0:length] * w[:, 0]
    for j in range(1, k):
        out = out + full[j : j + length] * w[:, j]
    if bias is not None:
        out = out + bias.to(xbc.dtype)
    new_window = full[full.shape[0] - (k - 1) :].transpose(0, 1)
    return out, new_window


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """``out[..., l, s] = a[..., s+1] + ... + a[..., l]`` for ``l >= s``, ``-inf`` above.

    Summing the masked increments (instead of subtracting two cumulative sums) keeps the
    exponent exact even when the cumulative log-decay of a chunk is large.
    """
    q = a.shape[-1]
    strict = torch.ones(q, q, dtype=torch.bool, device=a.device).tril(-1)
    inc = a.unsqueeze(-1).expand(*a.shape, q).masked_fill(~strict, 0.0)  # inc[..., k, s] = a[k], k > s
    out = inc.cumsum(dim=-2)
    lower = torch.ones(q, q, dtype=torch.bool, device=a.device).tril(0)
    return out.masked_fill(~lower, float("-inf"))


def ssd_chunked(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    h0: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selective-state-space scan in chunked matrix form (float32 in, float32 out).

    ``x [L, H, P]``, ``dt [L, H]``, ``a [H]`` (negative), ``b``/``c [L, G, N]`` (head ``h`` reads
    group ``h // (H // G)``), ``h0 [H, P, N]``. Returns ``y [L, H, P]`` (without the D skip) and
    the state after the last token.
    """
    length, heads, p = x.shape
    groups, n = b.shape[1], b.shape[2]
    r = heads // groups
    q = min(chunk, length)
    nc = -(-length // q)
    pad = nc * q - length
    log_decay = dt * a  # [L, H]
    xdt = x * dt.unsqueeze(-1)
    if pad:
        # Padding tokens have dt = 0: no decay (exp(0) = 1) and no input, so the final state is
        # the state after the last real token.
        log_decay = F.pad(log_decay, (0, 0, 0, pad))
        xdt, b, c = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (xdt, b, c))
    log_decay = log_decay.view(nc, q, groups, r)
    xdt = xdt.view(nc, q, groups, r, p)
    b = b.view(nc, q, groups, n)
    c = c.view(nc, q, groups, n)
    cum = log_decay.cumsum(dim=1)  # [nc, Q, G, R]

    # Inside each chunk: y_l = sum_{s<=l} (C_l . B_s) exp(sum_{s<k<=l} a_k) dt_s x_s.
    decay = torch.exp(_segsum(log_decay.permute(0, 2, 3, 1)))  # [nc, G, R, l, s]
    scores = torch.einsum("clgn,csgn->cgls", c, b).unsqueeze(2) * decay
    y = torch.einsum("cgrls,csgrp->clgrp", scores, xdt)

    # State contributed by each chunk alone, then carried across chunks.
    to_end = torch.exp(cum[:, -1:] - cum)  # decay from each token to its chunk's end
    chunk_states = torch.einsum("csgn,csgrp->cgrpn", b, xdt * to_end.unsqueeze(-1))
    chunk_decay = torch.exp(cum[:, -1])  # [nc, G, R]
    h = h0.reshape(groups, r, p, n)
    starts = []
    for i in range(nc):
        starts.append(h)
        h = chunk_decay[i][..., None, None] * h + chunk_states[i]
    start = torch.stack(starts)  # [nc, G, R, P, N]: state entering each chunk
    y = y + torch.einsum("clgn,cgrpn->clgrp", c, start) * torch.exp(cum).unsqueeze(-1)
    return y.reshape(nc * q, heads, p)[:length], h.reshape(heads, p, n)


def ssd_step(
    x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrence step for a batch: ``x [S, H, P]``, ``dt [S, H]``, ``b``/``c [S, G, N]``,
    ``h [S, H, P, N]`` -> ``y [S, H, P]`` (without the D skip) and the new state."""
    s, heads, p = x.shape
    groups, n = b.shape[1], b.shape[2]
    r = heads // groups
    decay = torch.exp(dt * a).view(s, groups, r, 1, 1)
    xdt = (x * dt.unsqueeze(-1)).view(s, groups, r, p, 1)
    h = h.view(s, groups, r, p, n) * decay + xdt * b.view(s, groups, 1, 1, n)
    y = (h * c.view(s, groups, 1, 1, n)).sum(-1)
    return y.reshape(s, heads, p), h.reshape(s, heads, p, n)


def gated_rms_norm(
    y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float, norm_before_gate: bool
) -> torch.Tensor:
    """RMSNorm over ``groups`` equal slices of the last dim, gated by ``silu(z)`` before or after.

    Computed in float32 (``y`` is the float32 scan output in both reference implementations).
    """
    gate = F.silu(z.float())
    y = y.float()
    if not norm_before_gate:
        y = y * gate
    shape = y.shape
    yg = y.reshape(*shape[:-1], groups, shape[-1] // groups)
    yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + eps)
    y = yg.reshape(shape) * weight.float()
    if norm_before_gate:
        y = y * gate
    return y


# ---------------------------------------------------------------------------------------------
# The shared mixer


@dataclass(frozen=True)
class Mamba2Spec:
    """Family-independent description of one Mamba2 mixer."""

    hidden: int
    heads: int
    head_dim: int
    d_state: int
    groups: int
    d_conv: int
    conv_bias: bool
    in_bias: bool
    out_bias: bool
    act: str
    dt_min: float  # dt clamp
    dt_max: float
    norm: str  # "nemotron" (gate, then grouped norm), "falcon" (grouped, config order) or "none"
    norm_groups: int
    norm_before_gate: bool
    eps: float
    in_multiplier: float = 1.0
    zxbcdt_multipliers: tuple[float, ...] | None = None  # Falcon-H1 muP on the in_proj output

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.inner + 2 * self.groups * self.d_state


class Mamba2Mixer(nn.Module):
    """Mamba2 over packed batches with per-sequence state restore and snapshots."""

    # Chunk length of the SSD matrix form. The result does not depend on it (the checkpoint's
    # chunk_size is a kernel tuning knob too); 64 measured fastest on CPU for 64-dim heads.
    SSD_CHUNK = 64

    def __init__(self, spec: Mamba2Spec, layer_idx: int) -> None:
        super().__init__()
        self.spec = spec
        self.layer_idx = layer_idx
        inner, conv_dim = spec.inner, spec.conv_dim
        self.in_proj = nn.Linear(spec.hidden, inner + conv_dim + spec.heads, bias=spec.in_bias)
        self.conv1d = nn.Conv1d(
            conv_dim, conv_dim, spec.d_conv, groups=conv_dim, padding=spec.d_conv - 1, bias=spec.conv_bias
        )
        self.dt_bias = nn.Parameter(torch.ones(spec.heads))
        self.A_log = nn.Parameter(torch.zeros(spec.heads))
        self.D = nn.Parameter(torch.ones(spec.heads))
        if spec.norm != "none":
            self.norm = _WeightOnly(inner)
        self.out_proj = nn.Linear(inner, spec.hidden, bias=spec.out_bias)
        self.act = ACTIVATIONS[spec.act]
        if spec.zxbcdt_multipliers is not None:
            self.register_buffer("mup_vector", self._mup_vector(spec), persistent=False)
        else:
            self.mup_vector = None

    @staticmethod
    def _mup_vector(spec: Mamba2Spec) -> torch.Tensor:
        m = spec.zxbcdt_multipliers
        assert m is not None and len(m) == 5
        gn = spec.groups * spec.d_state
        sizes = [spec.inner, spec.inner, gn, gn, spec.heads]
        return torch.cat([torch.full((size,), float(v)) for size, v in zip(sizes, m, strict=True)])

    def state_shapes(self) -> tuple[tuple[int, ...], ...]:
        s = self.spec
        return ((s.conv_dim, s.d_conv - 1), (s.heads, s.head_dim, s.d_state))

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        s = self.spec
        if s.in_multiplier != 1.0:
            x = x * s.in_multiplier
        proj = self.in_proj(x)
        if self.mup_vector is not None:
            proj = proj * self.mup_vector
        z, xbc, dt = proj.split([s.inner, s.conv_dim, s.heads], dim=-1)
        y = torch.empty(x.shape[0], s.inner, dtype=torch.float32, device=x.device)
        offs = batch.offsets
        decode = [i for i, seq in enumerate(batch.seqs) if seq.length == 1]
        if len(decode) > 1:
            self._decode(batch, decode, xbc, dt, y)
        for i, seq in enumerate(batch.seqs):
            if len(decode) > 1 and seq.length == 1:
                continue
            self._sequence(batch, seq, offs[i], xbc, dt, y)
        if s.norm == "nemotron":
            y = gated_rms_norm(y, z, self.norm.weight, s.norm_groups, s.eps, norm_before_gate=False)
        elif s.norm == "falcon":
            y = gated_rms_norm(y, z, self.norm.weight, s.norm_groups, s.eps, s.norm_before_gate)
        else:
            y = y * F.silu(z.float())
        return self.out_proj(y.to(x.dtype))

    # -- per sequence ------------------------------------------------------------------------

    def _initial_state(
        self, batch: ForwardBatch, slot: int | None, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(conv window in the activation dtype, float32 SSM state) restored from ``slot``."""
        state = batch.state.load(self.layer_idx, slot)
        if state is None:
            shapes = self.state_shapes()
            return (
                torch.zeros(shapes[0], dtype=like.dtype, device=like.device),
                torch.zeros(shapes[1], dtype=torch.float32, device=like.device),
            )
        return state[0].to(like.dtype), state[1].float()

    def _sequence(
        self,
        batch: ForwardBatch,
        seq: SeqSpec,
        off: int,
        xbc: torch.Tensor,
        dt: torch.Tensor,
        y: torch.Tensor,
    ) -> None:
        """One sequence, segment by segment, saving the state at each snapshot; writes into ``y``."""
        window, h = self._initial_state(batch, seq.restore_slot, xbc)
        for lo, hi, slot in seq.segments():
            part = slice(off + lo, off + hi)
            y[part], window, h = self._segment(xbc[part], dt[part], window, h)
            if slot is not None:
                batch.state.save(self.layer_idx, slot, (window, h))

    def _conv_act(self, xbc: torch.Tensor, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, window = causal_conv(xbc, window, self.conv1d.weight[:, 0], self.conv1d.bias)
        return self.act(out), window

    def _dt(self, dt: torch.Tensor) -> torch.Tensor:
        dt = F.softplus(dt.float() + self.dt_bias.float())
        return dt.clamp(min=self.spec.dt_min, max=self.spec.dt_max)

    def _split_xbc(self, xbc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.spec
        xs, b, c = xbc.float().split([s.inner, s.groups * s.d_state, s.groups * s.d_state], dim=-1)
        lead = xbc.shape[:-1]
        return (
            xs.reshape(*lead, s.heads, s.head_dim),
            b.reshape(*lead, s.groups, s.d_state),
            c.reshape(*lead, s.groups, s.d_state),
        )

    def _segment(
        self, xbc: torch.Tensor, dt: torch.Tensor, window: torch.Tensor, h: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens of one segment: ``xbc [L, conv_dim]``, ``dt [L, heads]`` (raw in_proj output)."""
        length = xbc.shape[0]
        conv, window = self._conv_act(xbc, window)
        xs, b, c = self._split_xbc(conv)
        dt = self._dt(dt)
        a = -torch.exp(self.A_log.float())
        if length == 1:
            out, h1 = ssd_step(xs, dt, a, b, c, h.unsqueeze(0))
            h = h1[0]
        else:
            out, h = ssd_chunked(xs, dt, a, b, c, h, self.SSD_CHUNK)
        out = out + self.D.float()[:, None] * xs
        return out.reshape(length, -1), window, h

    def _decode(
        self, batch: ForwardBatch, rows: list[int], xbc: torch.Tensor, dt: torch.Tensor, y: torch.Tensor
    ) -> None:
        """All one-token sequences of the batch in one vectorised step."""
        offs = batch.offsets
        idx = torch.tensor([offs[i] for i in rows], device=xbc.device)
        states = [self._initial_state(batch, batch.seqs[i].restore_slot, xbc) for i in rows]
        window = torch.stack([st[0] for st in states])  # [S, C, K-1]
        h = torch.stack([st[1] for st in states])
        step = xbc[idx]  # [S, C]
        full = torch.cat([window, step.unsqueeze(-1)], dim=-1)  # [S, C, K]
        conv = (full * self.conv1d.weight[:, 0].to(full.dtype)).sum(-1)
        if self.conv1d.bias is not None:
            conv = conv + self.conv1d.bias.to(full.dtype)
        xs, b, c = self._split_xbc(self.act(conv))
        out, h = ssd_step(xs, self._dt(dt[idx]), -torch.exp(self.A_log.float()), b, c, h)
        out = out + self.D.float()[:, None] * xs
        y[idx] = out.reshape(len(rows), -1)
        for j, i in enumerate(rows):
            for _, _, slot in batch.seqs[i].segments():
                if slot is not None:
                    batch.state.save(self.layer_idx, slot, (full[j, :, 1:], h[j]))


class _WeightOnly(nn.Module):
    """Holds the gated norm's ``weight`` under the checkpoint name ``mixer.norm.weight``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


# ---------------------------------------------------------------------------------------------
# Nemotron-H


def nemotron_layer_types(config: Config) -> list[str]:
    """Per-layer kinds: "linear_attention" (Mamba2), "full_attention", "mlp" or "moe"."""
    types = config.get("layers_block_type") or config.get("layer_types")
    if types:
        legacy = {"mamba": "linear_attention", "attention": "full_attention"}
        return [legacy.get(t, t) for t in types]
    pattern = config.get("hybrid_override_pattern")
    if pattern is None:
        raise ValueError("nemotron_h config needs layers_block_type or hybrid_override_pattern")
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    return [kinds[ch] for ch in pattern]


def nemotron_mamba_spec(config: Config) -> Mamba2Spec:
    heads, head_dim = config.mamba_num_heads, config.mamba_head_dim
    groups = _first(config, ("n_groups", "mamba_n_groups"), 8)
    return Mamba2Spec(
        hidden=config.hidden_size,
        heads=heads,
        head_dim=head_dim,
        d_state=config.get("ssm_state_size", 128),
        groups=groups,
        d_conv=_first(config, ("conv_kernel", "mamba_d_conv"), 4),
        conv_bias=bool(_first(config, ("use_conv_bias", "mamba_conv_bias"), True)),
        in_bias=bool(config.get("use_bias", False)),
        out_bias=bool(config.get("use_bias", False)),
        act=config.get("mamba_hidden_act", "silu"),
        # transformers' Nemotron-H mixer clamps dt from below at time_step_min (no upper limit)
        # and ignores time_step_limit.
        dt_min=_as_float(_first(config, ("time_step_min", "mamba_dt_min"), 0.001)),
        dt_max=float("inf"),
        norm="nemotron",
        norm_groups=groups,
        norm_before_gate=False,
        eps=config.get("layer_norm_epsilon", 1e-5),
    )


class NemotronHAttention(nn.Module):
    """GQA attention without positional encoding (position comes from the Mamba2 layers)."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.get("num_key_value_heads", self.num_heads)
        self.head_dim = config.get("head_dim", hidden // self.num_heads)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.head_dim**-0.5)
        return self.o_proj(out.reshape(t, -1))


class NemotronHMLP(nn.Module):
    """Non-gated MLP: ``down(act(up(x)))`` (relu2 in the released models)."""

    def __init__(self, hidden: int, intermediate: int, bias: bool, act: str) -> None:
        super().__init__()
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


class NemotronHRouter(nn.Module):
    """Sigmoid top-k router with a score-correction bias and group-limited selection.

    Both tensors are parameters (not buffers) so `save_model` writes the bias, as checkpoints do.
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.num_experts = config.n_routed_experts
        self.top_k = config.num_experts_per_tok
        self.n_group = config.get("n_group", 1)
        self.topk_group = config.get("topk_group", 1)
        self.norm_topk_prob = bool(config.get("norm_topk_prob", True))
        self.scaling = float(config.get("routed_scaling_factor", 1.0))
        self.weight = nn.Parameter(torch.zeros(self.num_experts, config.hidden_size))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(self.num_experts), requires_grad=False)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        """Follow device moves but stay float32 (as transformers keeps ``gate.*`` in fp32):
        expert selection in bf16 would flip near-tied choices."""
        originals = {name: p.data for name, p in self.named_parameters(recurse=False)}
        super()._apply(fn, recurse)
        for name, p in self.named_parameters(recurse=False):
            if p.dtype != originals[name].dtype:
                p.data = originals[name].to(device=p.device)
        return self

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, hidden]`` -> (expert ids ``[T, k]``, float32 weights ``[T, k]``)."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.e_score_correction_bias.float()
        per_group = self.num_experts // self.n_group
        grouped = choice.view(-1, self.n_group, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_scores)
        keep.scatter_(1, group_scores.topk(self.topk_group, dim=-1).indices, 1.0)
        mask = keep.bool().unsqueeze(-1).expand_as(grouped).reshape(-1, self.num_experts)
        ids = choice.masked_fill(~mask, float("-inf")).topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * self.scaling


class NemotronHMoE(nn.Module):
    """Routed relu2 experts (optionally in a latent space) plus one always-on shared expert."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        latent = config.get("moe_latent_size")
        bias = bool(config.get("mlp_bias", False))
        act = config.get("mlp_hidden_act", "relu2")
        inner = latent or hidden
        self.experts = nn.ModuleList(
            NemotronHMLP(inner, config.moe_intermediate_size, bias=False, act=act)
            for _ in range(config.n_routed_experts)
        )
        self.gate = NemotronHRouter(config)
        self.shared_experts = NemotronHMLP(
            hidden, config.moe_shared_expert_intermediate_size, bias=bias, act=act
        )
        if latent:
            self.fc1_latent_proj = nn.Linear(hidden, latent, bias=bias)
            self.fc2_latent_proj = nn.Linear(latent, hidden, bias=bias)
        else:
            self.fc1_latent_proj = self.fc2_latent_proj = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids, weights = self.gate(x)
        h = self.fc1_latent_proj(x) if self.fc1_latent_proj is not None else x
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for e in ids.unique().tolist():
            tok, pos = torch.where(ids == e)
            y = self.experts[e](h[tok]) * weights[tok, pos, None]
            out.index_add_(0, tok, y.float())
        out = out.to(x.dtype)
        if self.fc2_latent_proj is not None:
            out = self.fc2_latent_proj(out)
        return out + self.shared_experts(x)


class NemotronHBlock(nn.Module):
    """``x + mixer(norm(x))`` with one mixer kind per block."""

    def __init__(self, config: Config, layer_idx: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.norm = RMSNorm(config.hidden_size, config.get("layer_norm_epsilon", 1e-5))
        if kind == "linear_attention":
            self.mixer: nn.Module = Mamba2Mixer(nemotron_mamba_spec(config), layer_idx)
        elif kind == "full_attention":
            self.mixer = NemotronHAttention(config, layer_idx)
        elif kind == "mlp":
            self.mixer = NemotronHMLP(
                config.hidden_size,
                config.intermediate_size,
                bias=bool(config.get("mlp_bias", False)),
                act=config.get("mlp_hidden_act", "relu2"),
            )
        elif kind == "moe":
            self.mixer = NemotronHMoE(config)
        else:
            raise ValueError(f"unknown nemotron_h layer kind {kind!r}")

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        h = self.norm(x)
        if self.kind in ("linear_attention", "full_attention"):
            return x + self.mixer(h, batch)
        return x + self.mixer(h)


class NemotronHBackbone(nn.Module):
    """``backbone.*`` of the checkpoint."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            NemotronHBlock(config, i, kind) for i, kind in enumerate(nemotron_layer_types(config))
        )
        self.norm_f = RMSNorm(config.hidden_size, config.get("layer_norm_epsilon", 1e-5))

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return run_layers(self.embeddings(batch.input_ids), self.layers, self.norm_f, batch)


class NemotronHForCausalLM(nn.Module):
    """Nemotron-H: a pattern of Mamba2, attention, MLP and MoE blocks."""

    PRESETS: dict[str, dict[str, Any]]  # set below

    def __init__(self, config: Config) -> None:
        super().__init__()
        # Multi-token-prediction heads (mtp.*), if any, are extra tensors the loader skips.
        self.config = config
        self.backbone = NemotronHBackbone(config)
        # No tying: transformers' NemotronHForCausalLM keeps lm_head separate even when the
        # config says tie_word_embeddings.
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.mixer.num_kv_heads, layer.mixer.head_dim)
            for i, layer in enumerate(self.backbone.layers)
            if layer.kind == "full_attention"
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {
            i: layer.mixer.state_shapes()
            for i, layer in enumerate(self.backbone.layers)
            if layer.kind == "linear_attention"
        }

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.backbone(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


# ---------------------------------------------------------------------------------------------
# Falcon-H1


class FalconRMSNorm(RMSNorm):
    """Falcon-H1 casts the normalised input back to its dtype before the weight multiply."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def falcon_mamba_spec(config: Config) -> Mamba2Spec:
    hidden = config.hidden_size
    inner = config.get("mamba_d_ssm") or int(config.get("mamba_expand", 2) * hidden)
    heads = config.get("mamba_n_heads", 128)
    head_dim = config.get("mamba_d_head", "auto")
    if head_dim == "auto":
        head_dim = inner // heads
    if heads * head_dim != inner:
        raise ValueError("falcon_h1: mamba_n_heads * mamba_d_head must equal the SSM inner size")
    limit = config.get("time_step_limit") or (0.0, float("inf"))
    groups = config.get("mamba_n_groups", 1)
    rms_norm = bool(config.get("mamba_rms_norm", False))
    return Mamba2Spec(
        hidden=hidden,
        heads=heads,
        head_dim=head_dim,
        d_state=config.get("mamba_d_state", 256),
        groups=groups,
        d_conv=config.get("mamba_d_conv", 4),
        conv_bias=bool(config.get("mamba_conv_bias", True)),
        in_bias=bool(config.get("mamba_proj_bias", False)),
        out_bias=bool(config.get("projectors_bias", False)),
        act=config.get("hidden_act", "silu"),
        dt_min=_as_float(limit[0]),
        dt_max=_as_float(limit[1]),
        norm="falcon" if rms_norm else "none",
        norm_groups=groups,
        norm_before_gate=bool(config.get("mamba_norm_before_gate", True)),
        eps=config.get("rms_norm_eps", 1e-5),
        in_multiplier=float(config.get("ssm_in_multiplier", 1.0)),
        zxbcdt_multipliers=tuple(float(v) for v in config.get("ssm_multipliers", [1.0] * 5)),
    )


class FalconH1Attention(nn.Module):
    """GQA attention with RoPE and a muP key multiplier."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        bias = bool(config.get("attention_bias", False))
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.get("num_key_value_heads", self.num_heads)
        self.head_dim = config.get("head_dim", hidden // self.num_heads)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.key_multiplier = float(config.get("key_multiplier", 1.0))
        self.rotary = build_rotary(config, self.head_dim)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim) * self.key_multiplier
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        q = self.rotary(q, batch.positions)
        k = self.rotary(k, batch.positions)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.head_dim**-0.5)
        return self.o_proj(out.reshape(t, -1))


class FalconH1MLP(nn.Module):
    """SwiGLU with muP multipliers on the gate input and the down projection output."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        bias = bool(config.get("mlp_bias", False))
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        self.act = ACTIVATIONS[config.get("hidden_act", "silu")]
        gate_mult, down_mult = config.get("mlp_multipliers", [1.0, 1.0])
        self.gate_multiplier, self.down_multiplier = float(gate_mult), float(down_mult)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up_proj(x) * self.act(self.gate_proj(x) * self.gate_multiplier)
        return self.down_proj(y) * self.down_multiplier


class FalconH1DecoderLayer(nn.Module):
    """Mamba2 and attention side by side on one normed input, then the MLP."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-5)
        self.feed_forward = FalconH1MLP(config)
        self.mamba = Mamba2Mixer(falcon_mamba_spec(config), layer_idx)
        self.self_attn = FalconH1Attention(config, layer_idx)
        self.input_layernorm = FalconRMSNorm(config.hidden_size, eps)
        self.pre_ff_layernorm = FalconRMSNorm(config.hidden_size, eps)
        self.attn_in = float(config.get("attention_in_multiplier", 1.0))
        self.attn_out = float(config.get("attention_out_multiplier", 1.0))
        self.ssm_out = float(config.get("ssm_out_multiplier", 1.0))

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        h = self.input_layernorm(x)
        mixed = self.mamba(h, batch) * self.ssm_out
        mixed = mixed + self.self_attn(h * self.attn_in, batch) * self.attn_out
        x = x + mixed
        return x + self.feed_forward(self.pre_ff_layernorm(x))


class FalconH1Model(nn.Module):
    """``model.*`` of the checkpoint."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(FalconH1DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_layernorm = FalconRMSNorm(config.hidden_size, config.get("rms_norm_eps", 1e-5))
        self.embedding_multiplier = float(config.get("embedding_multiplier", 1.0))

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        x = self.embed_tokens(batch.input_ids) * self.embedding_multiplier
        return run_layers(x, self.layers, self.final_layernorm, batch)


class FalconH1ForCausalLM(nn.Module):
    """Falcon-H1: parallel Mamba2 + attention in every layer, muP multipliers throughout."""

    PRESETS: dict[str, dict[str, Any]]  # set below

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = FalconH1Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.lm_head_multiplier = float(config.get("lm_head_multiplier", 1.0))

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {i: layer.mamba.state_shapes() for i, layer in enumerate(self.model.layers)}

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.model(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (self.lm_head(hidden) * self.lm_head_multiplier).float()


# ---------------------------------------------------------------------------------------------
# Presets


def _common(model_type: str, arch: str) -> dict[str, Any]:
    return {
        "model_type": model_type,
        "architectures": [arch],
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": True,
        # Special ids follow the zoo tokenizer (radixflow.models.tokenizer): 0 is <|endoftext|>.
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
    }


def _nemotron(layers: str, **fields: Any) -> dict[str, Any]:
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    base = _common("nemotron_h", "NemotronHForCausalLM")
    base.update(
        layers_block_type=[kinds[ch] for ch in layers],
        num_hidden_layers=len(layers),
        mlp_hidden_act="relu2",
        mamba_hidden_act="silu",
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
        use_bias=False,
        use_conv_bias=True,
        conv_kernel=4,
        expand=2,
        time_step_min=0.001,
        time_step_max=0.1,
        time_step_floor=1e-4,
        layer_norm_epsilon=1e-5,
        residual_in_fp32=False,
        rescale_prenorm_residual=True,
        sliding_window=None,
        num_logits_to_keep=1,
    )
    base.update(fields)
    return base


# MoE fields of a preset without "E" layers: unused, spelled out so the config is complete.
_NEMOTRON_MOE_UNUSED: dict[str, Any] = {
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "moe_shared_expert_intermediate_size": 256,
    "moe_latent_size": None,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
}

PRESETS_NEMOTRON: dict[str, dict[str, Any]] = {
    "tiny": _nemotron(
        "M-*ME*M",
        vocab_size=512,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        mamba_num_heads=8,
        mamba_head_dim=16,
        ssm_state_size=16,
        n_groups=2,
        chunk_size=32,
        max_position_embeddings=4096,
        # MoE: 8 experts in 2 groups, routing limited to the best group, latent projections.
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=64,
        moe_latent_size=32,
        n_group=2,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    ),
    "small": _nemotron(
        "M-M-M*-M-M-M*-M-M-M*-M-",
        vocab_size=8192,
        hidden_size=512,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=2048,
        mamba_num_heads=16,
        mamba_head_dim=64,
        ssm_state_size=64,
        n_groups=4,
        chunk_size=128,
        max_position_embeddings=8192,
        **_NEMOTRON_MOE_UNUSED,
    ),
}


def _falcon(**fields: Any) -> dict[str, Any]:
    base = _common("falcon_h1", "FalconH1ForCausalLM")
    base.update(
        hidden_act="silu",
        rms_norm_eps=1e-5,
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_conv_bias=True,
        mamba_proj_bias=False,
        projectors_bias=False,
        num_logits_to_keep=1,
        # muP multipliers in the style of the released Falcon-H1 configs (all != 1 so that the
        # reference comparison checks each of them).
        embedding_multiplier=2.0,
        lm_head_multiplier=0.25,
        key_multiplier=0.5,
        attention_in_multiplier=0.8,
        attention_out_multiplier=0.9,
        ssm_in_multiplier=1.25,
        ssm_out_multiplier=0.5,
        ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35],
        mlp_multipliers=[0.9, 0.6],
    )
    base.update(fields)
    return base


PRESETS_FALCON: dict[str, dict[str, Any]] = {
    "tiny": _falcon(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        mamba_d_ssm=128,
        mamba_n_heads=8,
        mamba_d_head=16,
        mamba_n_groups=2,
        mamba_d_state=16,
        mamba_chunk_size=32,
        mamba_rms_norm=True,
        mamba_norm_before_gate=True,
        # Both clamps bind for some tokens under init_weights (dt spans about 1e-3..1e-1).
        time_step_limit=[0.002, 0.08],
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "small": _falcon(
        vocab_size=8192,
        hidden_size=512,
        num_hidden_layers=10,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=1536,
        mamba_d_ssm=1024,
        mamba_n_heads=16,
        mamba_d_head=64,
        mamba_n_groups=1,
        mamba_d_state=64,
        mamba_chunk_size=128,
        mamba_rms_norm=False,
        mamba_norm_before_gate=False,
        time_step_limit=[0.0, 1e4],
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    ),
}

NemotronHForCausalLM.PRESETS = PRESETS_NEMOTRON
FalconH1ForCausalLM.PRESETS = PRESETS_FALCON
# The zoo looks for ``PRESETS`` by default; this module serves two families.
PRESETS = PRESETS_NEMOTRON
PRESETS_BY_TYPE: dict[str, dict[str, dict[str, Any]]] = {
    "nemotron_h": PRESETS_NEMOTRON,
    "falcon_h1": PRESETS_FALCON,
}


# ---------------------------------------------------------------------------------------------
# Init


_OUTPUT_PROJECTIONS = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "fc2_latent_proj.weight")


def init_weights(model: nn.Module, generator: torch.Generator, logit_std: float = 4.0) -> None:
    """Deterministic init for either family, with peaked next-token distributions.

    Embeddings get std 1 and linear layers std ``1/sqrt(fan_in)`` (output projections halved) so
    every sublayer adds O(1) to the residual stream and recurrent/attention paths visibly shape
    the logits. The lm_head gets std ``logit_std / sqrt(hidden)`` (divided by Falcon's
    lm_head_multiplier), so logits have std ~``logit_std`` and top-1 margins are O(1). Mamba2
    parameters follow the published init: ``A = 1..16`` (log-spaced), ``dt = softplus(dt_bias)``
    log-uniform in [time_step_min, time_step_max] as drawn from the generator, ``D`` near 1.
    Norm weights are ``1 + N(0, 0.1)`` so a missed weight multiply shows up in the comparison.
    """
    config: Config = model.config  # type: ignore[assignment]
    hidden = config.hidden_size
    lm_std = logit_std / math.sqrt(hidden) / float(config.get("lm_head_multiplier", 1.0))
    dt_lo = _as_float(config.get("time_step_min", 0.001))
    dt_hi = _as_float(config.get("time_step_max", 0.1))

    def randn(shape: torch.Size, std: float) -> torch.Tensor:
        return torch.randn(shape, generator=generator) * std

    def rand(shape: torch.Size) -> torch.Tensor:
        return torch.rand(shape, generator=generator)

    with torch.no_grad():
        for name, p in model.named_parameters():  # tied aliases are visited once
            if name == "lm_head.weight":
                value = randn(p.shape, lm_std)
            elif name.endswith(("embeddings.weight", "embed_tokens.weight")):
                value = randn(p.shape, 1.0)
            elif name.endswith("A_log"):
                value = torch.log(1.0 + 15.0 * rand(p.shape))
            elif name.endswith("dt_bias"):
                dt = torch.exp(math.log(dt_lo) + rand(p.shape) * (math.log(dt_hi) - math.log(dt_lo)))
                value = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
            elif name.endswith(".D"):
                value = 0.5 + rand(p.shape)
            elif name.endswith("conv1d.weight"):
                value = randn(p.shape, 1.0 / math.sqrt(p.shape[-1]))
            elif name.endswith("e_score_correction_bias"):
                value = randn(p.shape, 0.05)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                value = 1.0 + randn(p.shape, 0.1)
            elif name.endswith(".bias"):
                value = randn(p.shape, 0.02)
            else:
                std = 1.0 / math.sqrt(p.shape[-1])
                if name.endswith(_OUTPUT_PROJECTIONS):
                    std *= 0.5
                value = randn(p.shape, std)
            p.copy_(value.to(p.dtype))
