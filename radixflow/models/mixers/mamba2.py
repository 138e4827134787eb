"""The Mamba2 mixer shared by the Mamba2 hybrids (Nemotron-H, Falcon-H1).

    in_proj -> (z, xBC, dt) -> causal depthwise conv1d + act over xBC -> (x, B, C)
    dt = clamp(softplus(dt + dt_bias), limits);  A = -exp(A_log)
    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T;   y_t = h_t C_t + D x_t
    y -> gate with z (grouped gated RMSNorm or plain ``y * silu(z)``) -> out_proj

The recurrent state of one Mamba2 layer is ``(conv window [conv_dim, d_conv - 1], ssm state
[heads, head_dim, d_state])``. The math lives in `radixflow.models.kernels.ssd`; this module runs
it over packed batches: the one-token rows of a round in one batched step, the others wave by
wave (the conv of a whole wave in one call of the batch's kernels, then the scan of every
sequence's segments between snapshot points in another), so a snapshot holds exactly the state a
full uninterrupted prefill has at that position. Each family describes
its mixer with a `Mamba2Spec` built from its own config fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.batch import ForwardBatch
from radixflow.models.decode_rows import DecodeRows
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.ssd import Mamba2Step
from radixflow.models.layers import ACTIVATIONS, Config
from radixflow.models.seq_spec import wave_segments

# ---------------------------------------------------------------------------------------------
# Config helpers (used by the families' spec builders)


def as_float(value: Any) -> float:
    """A float from config.json, including transformers' ``{"__float__": "Infinity"}`` form."""
    if isinstance(value, dict) and "__float__" in value:
        return float(value["__float__"])
    return float(value)


def first_of(config: Config, names: tuple[str, ...], default: Any = None) -> Any:
    """The first of ``names`` the config sets (current name first, legacy aliases after)."""
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return default


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
        # split_with_sizes: the same views as `split`, without its Python wrapper
        z, xbc, dt = proj.split_with_sizes([s.inner, s.conv_dim, s.heads], dim=-1)
        y = self.gate(self._mix(batch, xbc, dt), z, batch.kernels)
        return self.out_proj(y if y.dtype == x.dtype else y.to(x.dtype))

    def gate(self, y: torch.Tensor, z: torch.Tensor, kernels: Kernels) -> torch.Tensor:
        """The heads' output ``y`` (float32) gated by ``silu(z)``: through the grouped RMSNorm
        where the layer has one (nemotron: the gate first; falcon: as its config says), else
        times ``silu(z)`` taken in ``z``'s dtype, as transformers' Falcon-H1 takes it (one
        rounding apart below float32 from a silu in float32)."""
        s = self.spec
        if s.norm == "none":
            return y * F.silu(z)
        before = s.norm == "falcon" and s.norm_before_gate
        return kernels.group_gated_rms_norm(y, z, self.norm.weight, s.norm_groups, s.eps, before)

    def _mix(self, batch: ForwardBatch, xbc: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """The heads' output ``[T, inner]`` (float32) of every row: the one-token rows in batched
        steps, then the others wave by wave (a wave restores what the waves before it saved)."""
        if batch.whole_decode is not None:  # every row, in order: the step's output is ours
            return self._decode(batch, batch.whole_decode, xbc, dt)
        waves = batch.waves
        if not batch.decode_seqs and len(waves) == 1:  # one wave of every row, in order: its
            # output is ours, and its dt the layer's (no gather of it, no scatter back)
            rows, tokens = waves[0]
            return self._wave(batch, rows, tokens, xbc, dt)
        y = torch.empty(xbc.shape[0], self.spec.inner, dtype=torch.float32, device=xbc.device)
        for rows in batch.decode_parts:
            rows.put(y, self._decode(batch, rows, xbc, dt))
        for rows, tokens in waves:
            y[tokens] = self._wave(batch, rows, tokens, xbc, dt[tokens])
        return y

    # -- per sequence ------------------------------------------------------------------------

    def _wave(
        self,
        batch: ForwardBatch,
        rows: list[int],
        tokens: torch.Tensor,
        xbc: torch.Tensor,
        dt: torch.Tensor,
    ) -> torch.Tensor:
        """One wave of per-sequence rows (`batch.waves`: ``rows`` and their flat ``tokens``
        into ``xbc``; ``dt`` the wave's own, in ``tokens`` order): the conv + activation of all
        of them in one call, then the scan of every sequence's segments in one call (the batch's
        kernels), saving the state at each snapshot (mutates the pool); returns the wave's
        output ``[len(tokens), inner]`` (float32)."""
        seqs = [batch.seqs[i] for i in rows]
        segs, saves = wave_segments(seqs)
        # each SSM state read where it lies (no copy of a state per sequence), the small
        # windows stacked for the one conv call
        loaded = [batch.state.load(self.layer_idx, s.restore_slot) for s in seqs]
        windows = torch.stack([self._window(state, xbc) for state in loaded])
        silu = self.spec.act in ("silu", "swish")  # the kernels' own activation; others after it
        weight, bias, lengths = self.conv1d.weight[:, 0], self.conv1d.bias, [s.length for s in seqs]
        conv, window_after = batch.kernels.prefill_conv(xbc, tokens, lengths, windows, weight, bias, silu)
        if not silu:
            conv = self.act(conv)

        def save(key: int, h: torch.Tensor) -> None:
            n, before, slots = saves[key]
            window = window_after(n, before)
            for slot in slots:
                batch.state.save(self.layer_idx, slot, (window, h))

        starts = [None if state is None else state[1] for state in loaded]
        scan = batch.kernels.mamba2_prefill
        return scan(conv, dt, self._step_params(), starts, segs, save, self.SSD_CHUNK)

    def _window(self, state: tuple[torch.Tensor, ...] | None, like: torch.Tensor) -> torch.Tensor:
        """A sequence's conv window before its segments, in the activation dtype (zeros from
        scratch)."""
        if state is None:
            return torch.zeros(self.state_shapes()[0], dtype=like.dtype, device=like.device)
        return state[0].to(like.dtype)

    def _decode(
        self, batch: ForwardBatch, rows: DecodeRows, xbc: torch.Tensor, dt: torch.Tensor
    ) -> torch.Tensor:
        """The one-token rows of one part in one step: their states (gathered, or the pool's own
        rows for an in-place block), conv shift + recurrence, the new states to the rows'
        snapshot slots (mutates the pool); returns the rows' output ``[S, inner]``."""
        window, h = batch.state.gather(self.layer_idx, rows)  # [S, C, K-1], [S, H, P, N]
        # in place: the gathered state (or its float32 copy, or the block this step overwrites)
        # belongs to this step alone
        if h.dtype != torch.float32:  # `.float()` of a float32 tensor is itself, at an op's cost
            h = h.float()
        out, h = batch.kernels.mamba2_decode(rows.take(xbc), rows.take(dt), window, self._step_params(), h)
        batch.state.scatter(self.layer_idx, rows, (window, h))
        return out

    def _step_params(self) -> Mamba2Step:
        # the parameters read from the modules' own dicts, where `nn.Module.__getattr__` finds
        # them too: it costs ~0.7 us a name, seven names a layer in every decode round
        s, params = self.spec, self._parameters
        conv = self._modules["conv1d"]._parameters  # type: ignore[union-attr]  # noqa: SLF001
        return Mamba2Step(
            heads=s.heads,
            head_dim=s.head_dim,
            groups=s.groups,
            d_state=s.d_state,
            conv_weight=conv["weight"].select(1, 0),  # type: ignore[union-attr]
            conv_bias=conv["bias"],
            dt_bias=params["dt_bias"],  # type: ignore[arg-type]
            a_log=params["A_log"],  # type: ignore[arg-type]
            d=params["D"],  # type: ignore[arg-type]
            dt_min=s.dt_min,
            dt_max=s.dt_max,
            act=self.act,
            silu=s.act in ("silu", "swish"),
        )


class _WeightOnly(nn.Module):
    """Holds the gated norm's ``weight`` under the checkpoint name ``mixer.norm.weight``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
