"""The Gated DeltaNet mixer (``linear_attn``) of the Qwen3.5 and Qwen3-Next hybrids.

Recurrent state of a DeltaNet layer: ``(conv_state [conv_dim, kernel-1], recurrent [v_heads,
k_dim, v_dim])``, carried exactly across segment boundaries (snapshots). The math lives in
`radixflow.models.kernels.delta_rule` (chunked, the eager prefill), `radixflow.models.kernels.step`
(the one-token step every decode row of a round takes together) and the native library
(`radixflow.models.kernels.native`: both, the prefill token by token); the batch's kernels
choose. The families differ only in the input projections: Qwen3.5 has separate
``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``; Qwen3-Next fused
``in_proj_qkvz``/``in_proj_ba`` grouped per key head.
"""

from __future__ import annotations

import torch
from torch import nn

from radixflow.models.batch import ForwardBatch
from radixflow.models.decode_rows import DecodeRows
from radixflow.models.kernels.step import delta_gates, delta_key_heads, gated_rms_norm
from radixflow.models.layers import Config
from radixflow.models.seq_spec import wave_segments


class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head (plain ``w``, not ``1 + w``) times ``silu(gate)``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return gated_rms_norm(x, gate, self.weight, self.eps)


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
        out = self._mix(qkv, b, a, batch)
        y = batch.kernels.gated_rms_norm(out.to(x.dtype), z, self.norm.weight, self.norm.eps)
        return self.out_proj(y.reshape(x.shape[0], self.value_dim))

    def _mix(self, qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """The heads' readout ``[T, v_heads, dv]`` (float32) of every row: the one-token rows in
        batched steps (their gates formed inside the step), then the others wave by wave."""
        if batch.whole_decode is not None:  # every row, in order: the step's output is ours
            return self._decode(qkv, (b, a), batch.whole_decode, batch)
        waves = batch.waves
        if not batch.decode_seqs and len(waves) == 1:  # one wave of every row, in order: its
            # output is ours, and its gates are the layer's (no gather of them, no scatter back)
            beta, g = delta_gates(b, a, self.A_log, self.dt_bias)
            rows, tokens = waves[0]
            return self._prefill(qkv, g, beta, batch, rows, tokens)
        out = torch.empty(
            qkv.shape[0], self.num_v_heads, self.head_v_dim, dtype=torch.float32, device=qkv.device
        )
        for rows in batch.decode_parts:
            rows.put(out, self._decode(qkv, (b, a), rows, batch))
        if waves:
            beta, g = delta_gates(b, a, self.A_log, self.dt_bias)
            for rows, tokens in waves:
                out[tokens] = self._prefill(qkv, g[tokens], beta[tokens], batch, rows, tokens)
        return out

    def _decode(
        self,
        qkv: torch.Tensor,
        gates: tuple[torch.Tensor, torch.Tensor],
        rows: DecodeRows,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """The one-token rows of one part in one step: their states (gathered, or the pool's own
        rows for an in-place block), conv shift + delta rule, the new states to the rows'
        snapshot slots (mutates the pool); returns the rows' readout ``[S, v_heads, dv]``."""
        window, rec = batch.state.gather(self.layer_idx, rows)
        # in place: the gathered state (or its float32 copy, or the block this step overwrites)
        # belongs to this step alone
        o, rec = batch.kernels.deltanet_decode(
            rows.take(qkv),
            window,
            self.conv1d.weight[:, 0],
            self.num_k_heads,
            self.head_k_dim,
            (rows.take(gates[0]), rows.take(gates[1]), self.A_log, self.dt_bias),
            rec.float(),
        )
        batch.state.scatter(self.layer_idx, rows, (window, rec))
        return o

    def _prefill(
        self,
        qkv: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        batch: ForwardBatch,
        rows: list[int],
        tokens: torch.Tensor,
    ) -> torch.Tensor:
        """Conv + delta rule for one wave of per-sequence rows (`batch.waves`: ``rows`` and their
        flat ``tokens``; ``g``, ``beta`` the wave's own, in ``tokens`` order): one conv call and
        one delta-rule call (the batch's kernels) for all of them, saving each segment's state at
        its snapshots (mutates the pool); returns the wave's readout ``[len(tokens), v_heads, dv]``."""
        seqs = [batch.seqs[i] for i in rows]
        segs, saves = wave_segments(seqs)
        windows, states = batch.state.load_many(self.layer_idx, [s.restore_slot for s in seqs])
        weight, lengths = self.conv1d.weight.squeeze(1), [s.length for s in seqs]
        mixed, window_after = batch.kernels.prefill_conv_silu(qkv, tokens, lengths, windows, weight)

        def save(key: int, rec: torch.Tensor) -> None:
            n, before, slots = saves[key]
            window = window_after(n, before)
            for slot in slots:
                batch.state.save(self.layer_idx, slot, (window, rec))

        q, k, v = delta_key_heads(mixed, self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim)
        # `load_many` made the initial states this call's own
        rule = batch.kernels.delta_rule_prefill
        return rule(q, k, v, g, beta, states.float(), segs, save)


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
