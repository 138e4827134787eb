"""Which kernels a round's recurrent steps run: the eager torch ops or the native (C) library.

A `Kernels` backend runs the one-token decode steps that are not GEMMs (the conv window step,
the gated delta rule step, the Mamba2 step from its projection to the D skip, decode attention
over the paged KV pool), the small per-layer ops around them (norms, the rotary embedding, the
KV write), the Gated DeltaNet prefill's conv and delta rule over a round's segments, the
Mamba2 and short-conv prefill's conv (one call per layer and wave) and the Mamba2 prefill's scan
over a wave's segments.
`TorchKernels` is the eager reference (`torch_kernels`: `kernels.step`, `kernels.ssd`, one fused
SDPA call over a gathered context, the packed conv, one ``conv1d`` over a packed wave, the
chunked delta rule, the chunked SSD per segment); `NativeKernels`
(`native_kernels`) runs `native/steps.c`, built at first use, which passes over each row's state
once or twice while it is in cache, reads the KV and a prefill's conv inputs where they lie, and
runs a prefill's delta rule and Mamba2 scan token by token with each head's state in cache (on a
CPU cheaper than the chunked forms at every length: no padding or small-matmul dispatch, and per
token the Mamba2 recurrence's 3 P N multiply-adds a head are at most 1.5x the chunked SSD's 2 P N
+ Q (P + N G / H), against a measured 1.6-2.7x more multiply-adds a second; docs/real-models.md).
The runner resolves the engine option (``auto``, ``native``, ``torch``) once (`resolve_kernels`)
and every `ForwardBatch` carries the result.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from radixflow.models.kernels import ssd
from radixflow.models.kernels.delta_rule import Segments
from radixflow.models.kernels.native.build import Built, build, find_compiler
from radixflow.models.kernels.native_kernels import NativeKernels
from radixflow.models.kernels.step import NormSpec
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS, TorchKernels

log = logging.getLogger("radixflow.kernels")

# (cache, pool slots, 0 for K / 1 for V) -> the rows at those slots, as `KVPool.gather` returns them
Gather = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
# (sequence, tokens) -> that sequence's conv state after its first `tokens` inputs, [C, K-1]
WindowAfter = Callable[[int, int], torch.Tensor]


class PagedContext(Protocol):
    """Decode rows' KV slots, padded to the longest row (`models.decode_rows.DecodeContext`)."""

    slots: torch.Tensor  # [G, width] long
    valid: torch.Tensor  # [G, width] bool: position < the row's end
    ends: torch.Tensor  # [G] long: each row's context length
    ragged: bool  # some row is shorter than width


class Kernels(Protocol):
    name: str

    def conv_step(
        self, x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.conv_step`, the window shifted in place."""
        ...

    def gated_delta_step(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.gated_delta_step`, the state updated in place."""
        ...

    def deltanet_decode(
        self,
        qkv: torch.Tensor,
        window: torch.Tensor,
        weight: torch.Tensor,
        key_heads: int,
        dk: int,
        gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.deltanet_decode`: conv, silu, heads, gates from ``(b, a, a_log, dt_bias)`` and
        delta rule, window and state in place."""
        ...

    def prefill_conv_silu(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        lengths: list[int],
        windows: torch.Tensor,
        weight: torch.Tensor,
    ) -> tuple[torch.Tensor, WindowAfter]:
        """``silu(causal depthwise conv)`` of a wave's prefill tokens (the Gated DeltaNet front
        end): token p reads row ``rows[p]`` of ``x [*, C]``, sequence b's tokens consecutive,
        ``lengths[b]`` of them, behind its window ``windows[b] [C, K-1]``; ``weight [C, K]``.
        Returns ``([tokens, C], window_after)``."""
        ...

    def prefill_conv(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        lengths: list[int],
        windows: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        silu: bool,
    ) -> tuple[torch.Tensor, WindowAfter]:
        """The causal depthwise conv (+ ``bias [C]``, then silu when ``silu``) of a wave's
        prefill tokens, laid out as `prefill_conv_silu`'s (the Mamba2 and short-conv front end;
        the eager reference is each sequence's ``conv1d``). Returns ``([tokens, C],
        window_after)``."""
        ...

    def delta_rule_prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        states: torch.Tensor,
        segs: Segments,
        on_save: Callable[[int, torch.Tensor], None],
    ) -> torch.Tensor:
        """`delta_rule.gated_delta_rule_segments`: the delta rule over a round's prefill
        segments (key heads not repeated), ``states`` the call's own."""
        ...

    def mamba2_prefill(
        self,
        conv: torch.Tensor,
        dt: torch.Tensor,
        params: ssd.Mamba2Step,
        starts: list[torch.Tensor | None],
        segs: Segments,
        on_save: Callable[[int, torch.Tensor], None],
        chunk: int,
    ) -> torch.Tensor:
        """`ssd.mamba2_segments`: the Mamba2 scan (dt softplus and clamp, D skip) over a wave's
        prefill segments, each sequence from its state in ``starts`` (read where it lies, never
        written); ``chunk`` the eager form's chunk length."""
        ...

    def gated_rms_norm(
        self, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> torch.Tensor:
        """`step.gated_rms_norm`: the Gated DeltaNet output norm, per head."""
        ...

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, spec: NormSpec) -> torch.Tensor:
        """`step.rms_norm`."""
        ...

    def add_rms_norm(
        self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, spec: NormSpec
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x + delta, step.rms_norm(x + delta))``: a residual add and the next norm."""
        ...

    def add_rms_norm_(
        self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, spec: NormSpec
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`add_rms_norm` for a caller that owns ``x`` and ``delta``: the results may be written
        into them (no new tensors) and are returned."""
        ...

    def relu2_(self, x: torch.Tensor) -> torch.Tensor:
        """``relu(x) ** 2`` written into ``x`` (Nemotron-H's MLP activation); returns ``x``."""
        ...

    def ssd_step(
        self,
        x: torch.Tensor,
        dt: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        c: torch.Tensor,
        h: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`ssd.ssd_step`, the state updated in place."""
        ...

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`step.rotary`: ``x [T, heads, dim]`` rotated by the tables -> a new tensor."""
        ...

    def rms_norm_rotary(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        spec: NormSpec,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """``rotary(rms_norm(x, ...), cos, sin)``: a per-head q/k norm and the rotation after it."""
        ...

    def kv_write(
        self, kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """`step.kv_write`: mutates ``kc``, ``vc`` (a layer's K and V pool) at rows ``slots``."""
        ...

    def mamba2_decode(
        self,
        xbc: torch.Tensor,
        dt: torch.Tensor,
        window: torch.Tensor,
        params: ssd.Mamba2Step,
        h: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`ssd.mamba2_decode`: ``(y [S, heads * head_dim], h)``; mutates ``window`` and ``h``
        (the rows' conv window and state, stepped where they lie)."""
        ...

    def group_gated_rms_norm(
        self, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, groups: int, eps: float, before: bool
    ) -> torch.Tensor:
        """`ssd.gated_rms_norm` (``before``: the norm before the gate)."""
        ...

    def decode_attention(
        self,
        q: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
        context: PagedContext,
        scale: float,
        gather: Gather,
    ) -> torch.Tensor:
        """One query token per row ``q [G, heads, dim]`` over the rows' contexts in the pool's
        ``kc``/``vc [slots, kv_heads, dim]`` -> ``[G, heads, dim]``."""
        ...


# the backends by name; the option's third value, "auto", picks native where it runs, else torch
KERNELS: dict[str, Callable[..., Kernels]] = {"native": NativeKernels, "torch": TorchKernels}
CHOICES = ("auto", *KERNELS)


class KernelsError(ValueError):
    """The kernels asked for cannot run here (one line: why)."""


@functools.cache
def native_library(cache_dir: Path, compiler: str | None) -> Built:
    """The native library, built (or found on disk) once per process, cache directory and compiler."""
    return build(cache_dir, compiler)


def native_fits(device: str, dtype: torch.dtype) -> bool:
    """Whether the native kernels can run on ``device`` in ``dtype`` (a CPU in float32). Pure."""
    return torch.device(device).type == "cpu" and dtype == torch.float32


def kernels_refusal(name: str, device: str, dtype: torch.dtype) -> str | None:
    """Why option ``kernels`` = ``name`` cannot run on ``device`` in ``dtype``, short of building
    the native library (None: it may). Pure: a fleet's ingress checks it before any replica."""
    if name not in CHOICES:
        return f"unknown kernels {name!r} (known: {', '.join(CHOICES)})"
    if name == "native" and not native_fits(device, dtype):
        named = str(dtype).removeprefix("torch.")  # as users write it: bfloat16
        return f"native kernels run on a CPU in float32, not {device} in {named}"
    return None


def resolve_kernels(
    name: str, device: str, dtype: torch.dtype, cache_dir: str | Path, compiler: str | None = None
) -> Kernels:
    """The backend for option value ``name`` on ``device`` in ``dtype``. ``auto``: native on a
    CPU in float32 when the library builds (else torch, with one log line saying why), torch
    elsewhere; ``native`` raises `KernelsError` where it cannot run. ``compiler``: a path (None:
    the system's, `find_compiler`); ``cache_dir``: where the library is built, a str or a Path."""
    refused = kernels_refusal(name, device, dtype)
    if refused is not None:
        raise KernelsError(refused)
    if name == "torch" or not native_fits(device, dtype):
        return TORCH_KERNELS
    # one Path for the per-process cache: "x" and Path("x") are the same library
    compiler = compiler if compiler is not None else find_compiler()
    built = native_library(Path(cache_dir).expanduser(), compiler)
    if built.library is not None:
        return NativeKernels(built.library)
    if name == "native":
        raise KernelsError(f"native kernels could not be built: {built.problem}")
    _log_fallback(str(built.problem))
    return TORCH_KERNELS


@functools.cache
def _log_fallback(problem: str) -> None:
    """One log line per process and cause, however many runners fall back."""
    log.warning("radixflow: warning: native kernels unavailable (%s): running the torch kernels", problem)
