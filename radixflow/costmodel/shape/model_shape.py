"""A hybrid model as the cost model sees it: its layers, their mixers and MLPs.

Pure arithmetic over shapes: no torch, no timing. A layer holds one or more sequence mixers
(`costmodel.shape.mixer_shapes`: attention, Gated DeltaNet, Mamba2, short conv; Falcon-H1 runs attention and
Mamba2 in parallel in every layer) and optionally an MLP (dense or mixture of experts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.mixer_shapes import Attention, Mixer, Projection, projection_params

# The context of a checkpoint whose config.json names no max_position_embeddings (or null): what
# the torch runner serves it with, and so what the sim and the cost model's config reader assume
# at that checkpoint's shape. One declaration for all of them (`limits` passes it on).
DEFAULT_CONTEXT = 4096


def expected_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct routed experts ``tokens`` tokens touch, expected under uniform routing:
    E·(1 − (1 − k/E)^tokens), which is ≈ min(E, tokens·k) at both ends."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(top_k, experts) / experts) ** tokens)


@dataclass(frozen=True)
class Mlp:
    """Dense MLP (``experts == 0``) or routed MoE with ``top_k`` of ``experts`` and a shared expert."""

    intermediate: int
    gated: bool = True  # SwiGLU (3 matrices) vs a plain up/down MLP (Nemotron-H's relu2)
    experts: int = 0
    top_k: int = 0
    shared_intermediate: int = 0
    # Qwen3-Next/Qwen3.5-MoE scale the shared expert by a sigmoid gate: one more row of weights
    shared_gate: bool = False
    # Nemotron-H's ``moe_latent_size``: the routed experts work in this width, between a projection
    # down from the hidden size and one back up that every token runs (0: in the hidden size)
    latent: int = 0

    def _matrices(self) -> int:
        return 3 if self.gated else 2

    def dense_projections(self, hidden: int) -> tuple[Projection, ...]:
        """The matrices every token goes through: the dense MLP, or an MoE's router (replicated
        under tensor parallelism), its shared expert's gate, its latent projections and its shared
        expert."""
        if not self.experts:
            return self._up_down(hidden, self.intermediate)
        router = (Projection(self.experts, hidden, "none"),)
        gate = (Projection(1, hidden, "none"),) if self.shared_gate else ()
        down_up = (Projection(self.latent, hidden, "none"), Projection(hidden, self.latent, "none"))
        latent = down_up if self.latent else ()
        return (*router, *gate, *latent, *self._up_down(hidden, self.shared_intermediate))

    def _up_down(self, hidden: int, width: int) -> tuple[Projection, ...]:
        """An MLP of ``width`` (none for 0): its up (and gate) and its down projection."""
        if not width:
            return ()
        return Projection((self._matrices() - 1) * width, hidden), Projection(hidden, width, "row")

    def expert_params(self, hidden: int) -> int:
        """Weights of one routed expert (0 for a dense MLP)."""
        return self._matrices() * (self.latent or hidden) * self.intermediate if self.experts else 0

    def touched_experts(self, tokens: int) -> float:
        """Routed experts a round of ``tokens`` tokens reads (`expected_experts`)."""
        return expected_experts(self.experts, self.top_k, tokens)

    def active_params(self, hidden: int) -> int:
        dense = projection_params(self.dense_projections(hidden))
        return dense + self.top_k * self.expert_params(hidden)

    def total_params(self, hidden: int) -> int:
        dense = projection_params(self.dense_projections(hidden))
        return dense + self.experts * self.expert_params(hidden)

    def touched_params(self, hidden: int, tokens: int) -> float:
        """Weights a round of ``tokens`` tokens reads: the dense part and the experts touched."""
        dense = projection_params(self.dense_projections(hidden))
        return dense + self.touched_experts(tokens) * self.expert_params(hidden)


@dataclass(frozen=True)
class Layer:
    mixers: tuple[Mixer, ...]
    mlp: Mlp | None = None

    @property
    def kind(self) -> str:
        names = [m.kind for m in self.mixers] or ["mlp"]
        return "+".join(names)

    @property
    def has_state(self) -> bool:
        return any(m.state_bytes() > 0 for m in self.mixers)

    @property
    def has_attention(self) -> bool:
        return any(isinstance(m, Attention) for m in self.mixers)


@dataclass(frozen=True)
class ModelShape:
    """A model as the cost model sees it: layers in order, embedding sizes, where it came from.

    What does not depend on a round (parameter counts, the mixers in order, layers with state) is
    computed once per shape (`cached_property`: the dataclass is frozen, so it never goes stale):
    the runner's round predictor costs several candidate rounds for every round it schedules.
    """

    name: str
    hidden: int
    vocab_size: int
    layers: tuple[Layer, ...]
    tied_embeddings: bool = False
    max_context: int = DEFAULT_CONTEXT
    source: str = ""  # the public config (or zoo preset) the figures were taken from
    # the runner keeps each cached position's final hidden state beside its KV (the torch runner
    # does, so a reused prefix's prompt logprobs need no layer re-run): cache bytes, read by no layer
    cached_hidden: bool = False

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return tuple(layer.kind for layer in self.layers)

    @property
    def has_recurrent(self) -> bool:
        return any(layer.has_state for layer in self.layers)

    @cached_property
    def mixers(self) -> tuple[Mixer, ...]:
        """Every layer's sequence mixers, in layer order."""
        return tuple(m for layer in self.layers for m in layer.mixers)

    @cached_property
    def matmul_params(self) -> tuple[int, ...]:
        """Weights every token goes through, one entry per mixer and per MLP in layer order (a
        mixer's projections, an MLP's active part): a round's matmul FLOPs are 2·Σ·tokens."""
        out: list[int] = []
        for layer in self.layers:
            out.extend(m.params(self.hidden) for m in layer.mixers)
            if layer.mlp is not None:
                out.append(layer.mlp.active_params(self.hidden))
        return tuple(out)

    def mixer_params(self) -> int:
        return self._mixer_params

    @cached_property
    def _mixer_params(self) -> int:
        return sum(m.params(self.hidden) for m in self.mixers)

    def active_params(self) -> int:
        """Weights touched per token (embedding lookup excluded, output projection included)."""
        mlp = sum(layer.mlp.active_params(self.hidden) for layer in self.layers if layer.mlp)
        return self.mixer_params() + mlp + self.hidden * self.vocab_size

    def total_params(self) -> int:
        return self._total_params

    @cached_property
    def _total_params(self) -> int:
        mlp = sum(layer.mlp.total_params(self.hidden) for layer in self.layers if layer.mlp)
        embeddings = self.hidden * self.vocab_size * (1 if self.tied_embeddings else 2)
        return self.mixer_params() + mlp + embeddings

    def layer_calls(self, chunks: Sequence[ChunkShape]) -> int:
        """Layers a worker call runs: the decoder layers, and every layer with recurrent state once
        more per later wave (`ChunkShape.wave`), so a per-layer overhead is charged per run."""
        extra = max((c.wave for c in chunks), default=0)
        return self.decoder_layers + extra * self._stateful_layers

    @cached_property
    def _stateful_layers(self) -> int:
        return sum(layer.has_state for layer in self.layers)

    @cached_property
    def _moe_layers(self) -> tuple[Mlp, ...]:
        return tuple(layer.mlp for layer in self.layers if layer.mlp is not None and layer.mlp.experts)

    @cached_property
    def decoder_layers(self) -> int:
        """Layers as a decoder counts them, a sequence mixer and the MLP after it: an MLP-only
        block (Nemotron-H's "-") that follows a mixer without an MLP belongs to that mixer's layer,
        so a model's count does not depend on how its blocks are labelled."""
        count, open_mlp = 0, False
        for layer in self.layers:
            if layer.mixers:
                count, open_mlp = count + 1, layer.mlp is None
            elif open_mlp:
                open_mlp = False
            else:
                count += 1
        return count

    def touched_params(self, tokens: int) -> float:
        """`total_params` with each MoE layer's weights cut to the experts ``tokens`` tokens touch."""
        untouched = sum(
            (mlp.experts - mlp.touched_experts(tokens)) * mlp.expert_params(self.hidden)
            for mlp in self._moe_layers
        )
        return self.total_params() - untouched

    def read_params(self, tokens: int, logits: bool) -> float:
        """Weights a worker call of ``tokens`` tokens reads: every layer's (of an MoE, the experts
        the tokens touch), the output head where it computes any ``logits``, and the embedding
        table's rows the tokens look up (never the whole table: a row read once however many
        of the tokens look it up)."""
        tables = self.hidden * self.vocab_size * (1 if self.tied_embeddings else 2)
        head = self.hidden * self.vocab_size if logits else 0
        return self.touched_params(tokens) - tables + head + min(tokens, self.vocab_size) * self.hidden

    def state_bytes(self) -> int:
        """One full checkpoint: every recurrent layer's state for one sequence."""
        return self._state_bytes

    @cached_property
    def _state_bytes(self) -> int:
        return sum(m.state_bytes() for m in self.mixers)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return sum(m.kv_bytes_per_token(dtype_bytes) for m in self.mixers)

    def cache_bytes_per_token(self, dtype_bytes: int) -> int:
        """What one cached position occupies: its KV, and its hidden state where it is kept."""
        hidden = self.hidden * dtype_bytes if self.cached_hidden else 0
        return self.kv_bytes_per_token(dtype_bytes) + hidden
