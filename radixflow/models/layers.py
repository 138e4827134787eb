"""Layer pieces shared by several model families (names follow Hugging Face parameter names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.batch import ForwardBatch
from radixflow.models.config_view import Config as Config
from radixflow.models.config_view import rope_parameters as rope_parameters
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.step import NormSpec
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS


class CausalLM(Protocol):
    """What the torch runner needs from every model family."""

    config: Config

    def __call__(self, batch: ForwardBatch) -> torch.Tensor:
        """Same as `forward` (nn.Module call)."""
        ...

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        """Attention layer index -> (num_kv_heads, head_dim)."""
        ...

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        """Recurrent layer index -> shapes of the tensors that make up its state."""
        ...

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Hidden states after the final norm, ``[T, hidden]``; mutates the batch's pools."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, hidden] -> [N, vocab]`` in float32."""
        ...


def attention_heads(config: Config) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) with Hugging Face's defaults for absent fields."""
    heads = int(config.num_attention_heads)
    return (
        heads,
        int(config.get("num_key_value_heads", heads)),
        int(config.get("head_dim", config.hidden_size // heads)),
    )


def lm_head(config: Config, embedding: nn.Embedding, tie: bool) -> nn.Linear:
    """Output projection; ``tie`` shares the embedding's Parameter (one tensor in checkpoints)."""
    head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
    if tie:
        head.weight = embedding.weight
    return head


class RunByKernels(nn.Module):
    """A module whose work has no batch to carry the kernels: run by ``kernels``
    (`models.kernels.backend`; eager unless `use_kernels` says otherwise)."""

    kernels: Kernels = TORCH_KERNELS


class RMSNorm(RunByKernels):
    """RMSNorm computed in float32. ``offset=1.0`` gives the zero-centred ``(1 + w)`` variant.

    ``cast_first``: the family's transformers module casts the normed value to the input's dtype
    before the weight multiply (`step.NormSpec`); each family says, as transformers' families
    differ and a wrong choice shows only below float32.
    """

    def __init__(self, dim: int, eps: float = 1e-6, offset: float = 0.0, *, cast_first: bool) -> None:
        super().__init__()
        self.spec = NormSpec(eps, offset, cast_first)
        self.weight = nn.Parameter(torch.zeros(dim) if offset else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the weight from the module's own dict, where `nn.Module.__getattr__` finds it too (it
        # costs ~0.7 us a name, and every layer of every round runs a norm)
        return self.kernels.rms_norm(x, self._parameters["weight"], self.spec)

    def residual(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x + delta, self(x + delta))``: a block's residual add and the norm after it, one
        kernel call where the kernels fuse them (equal to the bit to the two steps)."""
        return self.kernels.add_rms_norm(x, delta, self._parameters["weight"], self.spec)

    def residual_(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`residual` for a caller that owns ``x`` and ``delta`` (a running sum and a block's
        fresh output): the results may be written into them, no new tensors."""
        return self.kernels.add_rms_norm_(x, delta, self._parameters["weight"], self.spec)

    def rotated(self, x: torch.Tensor, rotary: Rotary, batch: ForwardBatch) -> torch.Tensor:
        """``rotary(self(x), batch)``: a per-head q/k norm and the rotation after it, one kernel
        call where the norm's kernels are the batch's (equal to the bit to the two steps)."""
        cos, sin = rotary.tables(batch, x.dtype)
        if self.kernels is not batch.kernels:  # each step by its own kernels, as chosen
            return batch.kernels.rotary(self(x), cos, sin)
        return self.kernels.rms_norm_rotary(x, self._parameters["weight"], self.spec, cos, sin)


def use_kernels(net: nn.Module, kernels: Kernels) -> None:
    """Run every `RunByKernels` module of ``net`` (the norms, Nemotron-H's MLPs) with ``kernels``
    (mutates the modules): they have no batch to carry the choice, so the runner sets it once,
    as it builds the model."""
    for module in net.modules():
        if isinstance(module, RunByKernels):
            module.kernels = kernels


class Rotary:
    """Rotary position embedding (rotate-half convention) over the first ``rot_dim`` dims."""

    def __init__(self, head_dim: int, theta: float, partial: float = 1.0) -> None:
        self.rot_dim = int(head_dim * partial)
        self.inv_freq = 1.0 / (
            theta ** (torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim)
        )
        self._key: tuple[torch.Tensor, bytes] | None = None  # (inv_freq, its bytes): `_freq_key`

    def __call__(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """``x [T, heads, head_dim]`` rotated at the batch's positions, by the batch's kernels."""
        cos, sin = self.tables(batch, x.dtype)
        return batch.kernels.rotary(x, cos, sin)

    def tables(self, batch: ForwardBatch, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` of the batch's positions, ``[T, 1, rot_dim]`` in ``dtype``: computed
        once per round for every layer with these frequencies (kept in `ForwardBatch.memo`)."""
        key = ("rotary", self._freq_key(), dtype)
        found = batch.memo.get(key)
        if found is None:
            positions = batch.positions
            freqs = positions.float().unsqueeze(-1) * self.inv_freq.to(positions.device)
            emb = torch.cat([freqs, freqs], dim=-1)
            found = batch.memo[key] = (emb.cos().unsqueeze(1).to(dtype), emb.sin().unsqueeze(1).to(dtype))
        return found

    def _freq_key(self) -> bytes:
        # the frequencies' bytes, recomputed only when `inv_freq` is replaced (scaled variants
        # replace it once, as they are built)
        if self._key is None or self._key[0] is not self.inv_freq:
            self._key = (self.inv_freq, self.inv_freq.cpu().numpy().tobytes())
        return self._key[1]


class GatedMLP(nn.Module):
    """SwiGLU MLP: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, intermediate: int, bias: bool = False, act: str = "silu") -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = ACTIVATIONS_IN_PLACE[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the projections' outputs are this call's own: activation and product written into them
        return self.down_proj(self.act(self.gate_proj(x)).mul_(self.up_proj(x)))


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "relu": F.relu,
    "relu2": lambda x: F.relu(x).square(),
}

# The same activations written into their input, for a fresh tensor (a projection's output) that
# nothing else reads: no output allocation (at prefill sizes a new multi-megabyte tensor per
# layer), the same arithmetic. GELU has no in-place form: it allocates as before.
ACTIVATIONS_IN_PLACE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": lambda x: F.silu(x, inplace=True),
    "swish": lambda x: F.silu(x, inplace=True),
    "gelu": F.gelu,
    "relu": F.relu_,
    "relu2": lambda x: F.relu_(x).square_(),
}


def run_layers(x: torch.Tensor, layers: nn.ModuleList, norm: nn.Module, batch: ForwardBatch) -> torch.Tensor:
    """Decoder loop shared by every family: each layer maps ``(hidden, batch)`` to hidden; then ``norm``."""
    for layer in layers:
        x = layer(x, batch)
    return norm(x)
