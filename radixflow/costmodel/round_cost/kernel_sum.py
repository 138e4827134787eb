"""The GPU cost of a worker call: the sum of the kernels it runs, each timed by a `KernelTimes`.

Per GPU (tensor parallelism splits every projection, head and expert ``tp`` ways):

- ``matmul``: every projection and dense MLP (or shared expert and router) as a GEMM at m = the
  round's tokens;
- ``attention``: the round's prefill chunks as one batched (varlen) call — timed as a batch of
  as many equal sequences of their mean length and context, scaled to their true FLOPs — and the
  decode steps batched into one decode-attention call (at their mean context);
- ``gdn`` / ``mamba2``: the prefill chunks' sequence mixing batched the same way, the decode
  steps batched;
  ``conv``: LFM2's short conv over the round's tokens;
- ``moe``: the routed experts (weights of the experts the round's tokens touch);
- ``allreduce``: with tp > 1, one after each layer's mixers and one after its MLP (Megatron);
- ``lm_head``: the output head at every sampled position and every prompt-logprob position;
- ``state_copy``: recurrent state restored from and saved to checkpoint slots, read and written
  at the memory bandwidth;

plus the fixed terms and the scheduler's time (`costmodel.round_cost.breakdown`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.kernel_times.contract import KernelTimes, TermCost
from radixflow.costmodel.round_cost.breakdown import RoundBreakdown, add, charge_scheduler, fixed_terms, times
from radixflow.costmodel.round_cost.tensor_parallel import Parallelism, choose_tp, share
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.mixer_shapes import (
    Attention,
    GatedDeltaNet,
    Mamba2,
    Mixer,
    Projection,
    ShortConv,
)
from radixflow.costmodel.shape.model_shape import Mlp, ModelShape

ACTIVATION_BYTES = 2  # bf16 activations: what an all-reduce moves per element


def _per_gpu(p: Projection, tp: int) -> tuple[int, int]:
    """(n, k) of one GPU's slice of a projection."""
    if p.split == "column":
        return share(p.n, tp), p.k
    if p.split == "row":
        return p.n, share(p.k, tp)
    return p.n, p.k


class _Round:
    """The chunks of one round, split the way the kernels see them."""

    def __init__(self, chunks: list[ChunkShape]) -> None:
        self.chunks = chunks
        self.tokens = sum(c.length for c in chunks)
        # a chunk in a later wave runs as a prefill row whatever its length (`ChunkShape.wave`)
        self.prefill = [c for c in chunks if not c.decode_step]
        self.decodes = len(chunks) - len(self.prefill)
        # the prefill chunks run as one batched (varlen) call: its typical sequence
        n = len(self.prefill)
        self.prefill_tokens = math.ceil(sum(c.length for c in self.prefill) / n) if n else 0
        self.prefill_context = (
            max(math.ceil(sum(c.end for c in self.prefill) / n), self.prefill_tokens) if n else 0
        )
        # decode attention is linear in the KV it reads: one call at the mean context
        decode_ends = sum(c.end for c in chunks if c.decode_step)
        self.decode_context = math.ceil(decode_ends / self.decodes) if self.decodes else 0

    @property
    def decode_chunks(self) -> list[ChunkShape]:
        return [c for c in self.chunks if c.decode_step]


def _waves(r: _Round) -> list[_Round]:
    """The round's prefill chunks split into the waves a recurrent layer runs one after another
    (one wave, the whole round, when no chunk follows another in the round)."""
    if not any(c.wave for c in r.prefill):
        return [r]
    # wave 0 runs the decode-length rows even where no longer chunk is in it (a one-token producer)
    waves = {c.wave for c in r.prefill} | ({0} if r.decodes else set())
    return [
        _Round([c for c in r.prefill if c.wave == wave] + (r.decode_chunks if wave == 0 else []))
        for wave in sorted(waves)
    ]


def _batched(call: TermCost, flops: float) -> TermCost:
    """One batched call of a round's prefill chunks: the time of a batch of equal sequences,
    scaled to the chunks' true work (so the batch's efficiency, not one sequence's, applies)."""
    if call.flops <= 0 or flops == call.flops:
        return call
    k = flops / call.flops
    return TermCost(call.seconds * k, flops, call.bytes * k, call.source)


def _attention(kt: KernelTimes, m: Attention, r: _Round, tp: int) -> Iterator[TermCost]:
    heads, kv = share(m.heads, tp), share(m.kv_heads, tp)
    if r.prefill:
        flops = sum(kt.prefill_attention(c.length, c.end, heads, kv, m.head_dim).flops for c in r.prefill)
        call = kt.prefill_attention(
            r.prefill_tokens, r.prefill_context, heads, kv, m.head_dim, len(r.prefill)
        )
        yield _batched(call, flops)
    if r.decodes:
        yield kt.decode_attention(r.decodes, r.decode_context, heads, kv, m.head_dim)


def _gdn(kt: KernelTimes, m: GatedDeltaNet, r: _Round, tp: int) -> Iterator[TermCost]:
    heads = (share(m.k_heads, tp), share(m.v_heads, tp), m.k_dim, m.v_dim, m.conv_kernel)
    if r.prefill:
        flops = sum(kt.gdn_prefill(c.length, *heads).flops for c in r.prefill)
        yield _batched(kt.gdn_prefill(r.prefill_tokens, *heads, len(r.prefill)), flops)
    if r.decodes:
        yield kt.gdn_decode(r.decodes, *heads)


def _mamba2(kt: KernelTimes, m: Mamba2, r: _Round, tp: int) -> Iterator[TermCost]:
    heads = (share(m.heads, tp), m.head_dim, m.d_state, share(m.groups, tp), m.conv_kernel)
    if r.prefill:
        flops = sum(kt.mamba2_prefill(c.length, *heads).flops for c in r.prefill)
        yield _batched(kt.mamba2_prefill(r.prefill_tokens, *heads, len(r.prefill)), flops)
    if r.decodes:
        yield kt.mamba2_decode(r.decodes, *heads)


def _short_conv(kt: KernelTimes, m: ShortConv, r: _Round, tp: int) -> Iterator[TermCost]:
    yield kt.short_conv(r.tokens, share(m.channels, tp), m.kernel)


# mixer type -> the kernel calls of its sequence mixing in one layer (charged to ``mixer.kind``)
MIXING: dict[type, Callable[[KernelTimes, Any, _Round, int], Iterator[TermCost]]] = {
    Attention: _attention,
    GatedDeltaNet: _gdn,
    Mamba2: _mamba2,
    ShortConv: _short_conv,
}


class KernelCostModel:
    """Round times of ``shape`` on ``hardware`` from ``kernels`` (one GPU's kernel times)."""

    def __init__(self, shape: ModelShape, hardware: HardwareProfile, kernels: KernelTimes) -> None:
        self.shape, self.hardware, self.kernels = shape, hardware, kernels
        self.parallel: Parallelism = choose_tp(shape, kernels.memory_bytes, hardware.weight_bytes)
        tp = self.parallel.tp
        # the per-round walk needs only how many layers share each shape: count them once
        self._gemms: Counter[tuple[int, int]] = Counter()
        self._mixers: Counter[Mixer] = Counter()
        self._experts: Counter[Mlp] = Counter()
        self._allreduces = 0
        for layer in shape.layers:
            for mixer in layer.mixers:
                self._gemms.update(_per_gpu(p, tp) for p in mixer.projections(shape.hidden))
                self._mixers[mixer] += 1
            if layer.mlp is not None:
                self._gemms.update(_per_gpu(p, tp) for p in layer.mlp.dense_projections(shape.hidden))
                if layer.mlp.experts:
                    self._experts[layer.mlp] += 1
            self._allreduces += bool(layer.mixers) + (layer.mlp is not None)

    @property
    def tp(self) -> int:
        return self.parallel.tp

    def breakdown(self, chunks: Iterable[ChunkShape]) -> RoundBreakdown:
        """Every term of the round computing ``chunks`` (their seconds sum to the round). Pure."""
        r = _Round(list(chunks))
        terms = fixed_terms(self.hardware, r.chunks, self.shape.layer_calls(r.chunks))
        if r.tokens:
            self._layers(r, terms)
        self._head(r, terms)
        self._state_copies(r, terms)
        charge_scheduler(self.hardware, r.chunks, terms)
        return RoundBreakdown(terms, self.tp, self.parallel.fits)

    def round_seconds(self, chunks: Iterable[ChunkShape]) -> float:
        return self.breakdown(chunks).seconds

    def _layers(self, r: _Round, terms: dict[str, TermCost]) -> None:
        kt, tp, hidden = self.kernels, self.tp, self.shape.hidden
        for (n, k), count in self._gemms.items():
            add(terms, "matmul", times(kt.gemm(r.tokens, n, k), count))
        waves = _waves(r)  # once per round, not per mixer
        for mixer, count in self._mixers.items():
            # attention reads KV every chunk of the round wrote: one call; a recurrent layer runs
            # its kernels once per wave (`ChunkShape.wave`)
            for part in [r] if isinstance(mixer, Attention) else waves:
                for cost in MIXING[type(mixer)](kt, mixer, part, tp):
                    add(terms, mixer.kind, times(cost, count))
        for mlp, count in self._experts.items():
            inter = share(mlp.intermediate, tp)
            if not mlp.gated:  # the kernel class is SwiGLU's 3 matrices; relu2 experts have 2
                inter = max(1, round(inter * 2 / 3))
            width = mlp.latent or hidden  # the experts' own input width (a latent MoE's is smaller)
            add(terms, "moe", times(kt.moe(r.tokens, width, inter, mlp.experts, mlp.top_k), count))
        if tp > 1:
            message = r.tokens * hidden * ACTIVATION_BYTES
            add(terms, "allreduce", times(kt.allreduce(message, tp), self._allreduces))

    def _head(self, r: _Round, terms: dict[str, TermCost]) -> None:
        rows = sum(c.logit_rows for c in r.chunks)
        if rows:
            vocab = share(self.shape.vocab_size, self.tp)
            add(terms, "lm_head", self.kernels.gemm(rows, vocab, self.shape.hidden))

    def _state_copies(self, r: _Round, terms: dict[str, TermCost]) -> None:
        copies = sum(int(c.restores) + c.snapshots for c in r.chunks)
        state = self.shape.state_bytes() / self.tp
        if not copies or not state:
            return
        moved = 2.0 * copies * state  # each copy reads one slot and writes another
        why = (
            f"roofline: {copies} restore/snapshot copies of {state / 1e6:.3g} MB of recurrent state "
            "(from the shape) per GPU, read and written at the memory bandwidth"
        )
        terms["state_copy"] = TermCost(moved / self.kernels.bandwidth, 0.0, moved, why)
