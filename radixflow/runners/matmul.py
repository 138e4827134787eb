"""Which CPU GEMM library runs the model's ``nn.Linear`` layers, chosen by measurement.

PyTorch reaches float32 GEMM on x86 CPUs two ways: MKL (``F.linear``) and oneDNN
(``torch.ops.mkldnn._linear_pointwise`` on a weight pre-packed into oneDNN's blocked layout); the
native kernels add a third for a few rows (``rf_linear_rows``: each weight row read once, as one
stream, where both libraries read the weights of a 1-row call at a fraction of the memory's
speed). Which is faster depends on the CPU, the thread count and the number of rows (on the
machine this was written on, oneDNN won at a few rows, MKL at one, and they tied at prefill
sizes; the native rows beat both at one row). So
the runner routes every Linear call by its shape class
(`SHAPE_CLASSES`: decode rounds of a few rows, decode rounds of a batch, anything with a prefill
chunk) through a `MatmulPlan`, measured once at startup on the model's own dominant weight shape.

Exactness decides what "auto" may measure. Both libraries compute IEEE float32 (oneDNN is
refused when torch's float32 matmul precision is lowered, or when its probe result disagrees
with MKL's beyond float noise), but in another summation order: through SmolLM2-135M's 30 layers
that moved prompt logprobs up to 1.45e-4 from transformers' (which uses MKL; our MKL path matches
it bit for bit there), past the 1e-4 parity bar, while decode-round logprobs stayed within 6e-5.
So "auto" measures only the decode classes and keeps prefill rounds (which produce prompt
logprobs) on MKL; a given plan (``"mkl"``, ``"onednn"``, ``"native"`` or
``"single=native,decode=onednn,prefill=onednn"``) may put any class anywhere.

A oneDNN-packed weight is a second copy of that weight, kept for the runner's lifetime; a plan
without oneDNN packs nothing. The native rows read the weight where it lies.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.kernels.backend import native_library
from radixflow.models.kernels.native.build import find_compiler
from radixflow.models.kernels.native.layer_ops import linear_rows
from radixflow.models.zoo import default_cache_dir
from radixflow.problems import Problem
from radixflow.runners.matmul_plan import SHAPE_CLASSES, parse_choices

AUTO_MEASURED = ("single", "decode")
# The probe weight is the dominant shape, or a slice of it for a large model: at most this many
# output rows, and few enough that one probe call stays near PROBE_FLOPS (a whole measurement
# takes 0.1-0.2 s on one core whatever the model size). The whole weight of a small model, not a
# slice: on 1024-row slices oneDNN's lead at 16 rows was 4-30% and fell under MARGIN in 2 of 24
# runner starts (decode then ran on MKL, 40% slower); on whole weights it was 28-50% (the -small
# zoo models, one thread of a 2-core AMD EPYC Zen 4 VM, 5 Dec; docs/real-models.md).
PROBE_MAX_OUT, PROBE_MIN_OUT, PROBE_FLOPS = 4096, 64, 80e6
MARGIN = 0.05  # a backend that packs a copy of the weights must be this much faster to be chosen
AGREE_RTOL = 1e-4  # probe outputs of two backends must agree this closely (float32 noise)
# Bytes written between cold probe calls: twice the last-level cache where sysfs gives its size
# (32 MiB per CCD on the EPYC this was written on), else this; never more than EVICT_MAX_BYTES
# (a CPU with a stacked cache of hundreds of MiB gets a partly warm probe, not a huge buffer).
EVICT_BYTES, EVICT_MAX_BYTES = 64 << 20, 256 << 20


class LinearBackend(Protocol):
    name: str
    packs: bool  # whether `prepare` makes a copy of the weight (kept for the runner's lifetime)

    def usable(self) -> bool:
        """Whether this backend computes IEEE float32 here (checked once, at plan time)."""
        ...

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight in this backend's layout (may be ``weight`` itself; never mutates it)."""
        ...

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ weight.T + bias`` with ``weight`` as returned by `prepare`."""
        ...


class MklLinear:
    name = "mkl"
    packs = False

    def usable(self) -> bool:
        return True

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, weight, bias)


class OneDnnLinear:
    """oneDNN's linear is reachable only through torch's private mkldnn ops (the ones inductor's
    CPU code generation calls), hence the ``noqa: SLF001`` below."""

    name = "onednn"
    packs = True

    def usable(self) -> bool:
        mkldnn = torch.backends.mkldnn
        if not mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
            return False
        # a lowered precision lets oneDNN compute float32 GEMMs in bf16 or tf32
        precision = getattr(getattr(mkldnn, "matmul", None), "fp32_precision", "none")
        return precision in ("none", "ieee") and torch.get_float32_matmul_precision() == "highest"

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)  # noqa: SLF001

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")  # noqa: SLF001


class NativeLinear:
    """The native kernels' ``rf_linear_rows`` (`models.kernels.native`), built on first use like
    the decode steps' (a machine without a C compiler has no such backend)."""

    name = "native"
    packs = False

    def usable(self) -> bool:
        return _native_lib() is not None

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        lib = _native_lib()
        if lib is None:  # only a given plan gets here; the runner refuses it first (`unusable`)
            raise RuntimeError("the native kernels are not built on this machine")
        return linear_rows(lib, x, weight, bias)


@functools.cache
def _native_lib() -> ctypes.CDLL | None:
    """The native kernels' library where they build here: looked up once per process (a routed
    call must not search PATH for a compiler), built once (`native_library`)."""
    return native_library(default_cache_dir() / "kernels", find_compiler()).library


BACKENDS: dict[str, LinearBackend] = {b.name: b for b in (MklLinear(), OneDnnLinear(), NativeLinear())}


def unusable(plan: MatmulPlan) -> list[str]:
    """The backends ``plan`` names that cannot run here, in class order (a given plan is not
    measured, so nothing else catches one)."""
    names = dict.fromkeys(plan.choices)
    return [name for name in names if not BACKENDS[name].usable()]


@dataclass(frozen=True)
class MatmulPlan:
    """Backend name per shape class (in `SHAPE_CLASSES` order), and how it was chosen."""

    choices: tuple[str, ...]
    source: str  # "measured" or "given"
    # seconds per probe call, per measured class and backend (measured plans only)
    timings: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    def backend_for(self, rows: int, decode_only: bool) -> LinearBackend:
        for cls, name in zip(SHAPE_CLASSES, self.choices, strict=True):
            if cls.decode_only == decode_only and rows <= cls.max_rows:
                return BACKENDS[name]
        return BACKENDS[self.choices[-1]]  # large decode rounds count as prefill

    def describe(self) -> str:
        """One line, e.g. ``single=mkl decode=onednn prefill=mkl (measured)``."""
        parts = " ".join(f"{c.name}={n}" for c, n in zip(SHAPE_CLASSES, self.choices, strict=True))
        return f"{parts} ({self.source})"


def parse_plan(spec: str) -> MatmulPlan | Problem | None:
    """``"auto"`` (None: measure), one backend name for every class, or ``class=backend`` pairs
    separated by commas (classes not named keep MKL). A bad spec is a `Problem` on ``matmul``
    (`matmul_plan.parse_choices`)."""
    choices = parse_choices(spec)
    return choices if choices is None or isinstance(choices, Problem) else MatmulPlan(choices, "given")


def dominant_weight(net: nn.Module) -> torch.Tensor | None:
    """The weight whose shape carries the most Linear parameters in ``net`` (None: no Linear)."""
    total: dict[tuple[int, ...], int] = {}
    example: dict[tuple[int, ...], torch.Tensor] = {}
    for module in net.modules():
        if isinstance(module, nn.Linear):
            shape = tuple(module.weight.shape)
            total[shape] = total.get(shape, 0) + module.weight.numel()
            example.setdefault(shape, module.weight)
    if not total:
        return None
    return example[max(total, key=lambda s: total[s])]


def measure_plan(weight: torch.Tensor, repeats: int = 9) -> MatmulPlan:
    """Time every usable backend on ``weight`` (a slice, past `PROBE_FLOPS`) for each class in
    `AUTO_MEASURED`: interleaved repeats, medians of the calls' thread CPU time (a call preempted
    on a shared machine does not decide), a cold class with the caches emptied before each call.
    The other classes keep MKL. A backend that packs a copy must win by `MARGIN`; ties go to the
    earlier in `BACKENDS` (MKL first); a backend whose probe result disagrees with MKL's is out."""
    probe_rows = max(c.probe_rows for c in SHAPE_CLASSES if c.name in AUTO_MEASURED)
    out_rows = int(PROBE_FLOPS / (2 * probe_rows * weight.shape[1]))
    probe = weight.detach()[: max(PROBE_MIN_OUT, min(PROBE_MAX_OUT, out_rows))].contiguous()
    usable = [b for b in BACKENDS.values() if b.usable()]
    prepared = {b.name: b.prepare(probe) for b in usable}
    g = torch.Generator().manual_seed(0)
    choices, timings = [], []
    for cls in SHAPE_CLASSES:
        if cls.name not in AUTO_MEASURED:
            choices.append("mkl")
            continue
        x = torch.randn(cls.probe_rows, probe.shape[1], generator=g, dtype=probe.dtype)
        with torch.inference_mode():
            ref = F.linear(x, probe)
            ok = [b for b in usable if _agrees(b.linear(x, prepared[b.name], None), ref)]
            calls = {b.name: _call(b, x, prepared[b.name]) for b in ok}
            times = _interleaved(calls, repeats, _evictor() if cls.cold else None)
        choices.append(min(times, key=lambda n: times[n] * (1.0 + MARGIN if BACKENDS[n].packs else 1.0)))
        timings.append((cls.name, tuple(sorted(times.items()))))
    return MatmulPlan(tuple(choices), "measured", tuple(timings))


def _evictor() -> Callable[[], object]:
    """A call that pushes the probe out of every cache: it writes twice the last-level cache's
    size (`EVICT_BYTES` where sysfs does not say)."""
    buf = torch.empty(min(2 * _last_level_cache_bytes(), EVICT_MAX_BYTES) // 4)
    return lambda: buf.fill_(1.0)


def _last_level_cache_bytes() -> int:
    """The largest cache sysfs lists for CPU 0 (Linux), else half of `EVICT_BYTES`."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text(encoding="ascii").strip()
        except OSError:  # unreadable here: the default
            continue
        if text[:-1].isdigit() and text[-1] in "KM":
            sizes.append(int(text[:-1]) << (10 if text[-1] == "K" else 20))
    return max(sizes, default=EVICT_BYTES // 2)


def _call(backend: LinearBackend, x: torch.Tensor, weight: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: backend.linear(x, weight, None)


def _agrees(got: torch.Tensor, ref: torch.Tensor) -> bool:
    scale = ref.abs().max().item() or 1.0
    return (got - ref).abs().max().item() <= AGREE_RTOL * scale


def _interleaved(
    calls: dict[str, Callable[[], torch.Tensor]], repeats: int, before: Callable[[], object] | None = None
) -> dict[str, float]:
    """Median seconds of each call over ``repeats`` rounds that take the calls in turn; ``before``
    (untimed) runs ahead of every timed call."""
    for call in calls.values():  # warm-up: lazy kernel setup is not the steady state
        call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            if before is not None:
                before()
            t0 = time.thread_time()
            call()
            samples[name].append(time.thread_time() - t0)
    return {name: statistics.median(ts) for name, ts in samples.items()}


class MatmulRouter:
    """The plan plus the kind of round being computed, shared by every routed Linear.

    The runner marks decode-only rounds with `round`; any other forward (prefill, warm-up,
    reference, scoring) takes the non-decode classes.
    """

    def __init__(self, plan: MatmulPlan) -> None:
        self.plan = plan
        self.decode_only = False

    @contextmanager
    def round(self, decode_only: bool) -> Iterator[None]:
        """Route the Linear calls inside the block as a decode-only round or not (mutates
        `decode_only` for the block's duration)."""
        previous, self.decode_only = self.decode_only, decode_only
        try:
            yield
        finally:
            self.decode_only = previous


class PlannedLinear:
    """Replaces one ``nn.Linear``'s ``forward``: routes each call by its shape class."""

    def __init__(self, module: nn.Linear, router: MatmulRouter, prepared: dict[str, torch.Tensor]) -> None:
        self.module, self.router, self.prepared = module, router, prepared

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(x.shape[-1], 1)
        backend = self.router.plan.backend_for(rows, self.router.decode_only)
        # the module's parameters from its own dict, where `nn.Module.__getattr__` finds them too
        # (it costs ~0.7 us a name: two names on every Linear call of every round)
        params = self.module._parameters  # noqa: SLF001
        weight = self.prepared.get(backend.name)
        if weight is None:
            weight = params["weight"]
        return backend.linear(x, weight, params["bias"])


def install(net: nn.Module, plan: MatmulPlan) -> MatmulRouter:
    """Route every CPU float32 ``nn.Linear`` of ``net`` through ``plan`` (mutates the modules'
    ``forward``; parameters and their names are untouched). Packs each distinct weight once for
    every non-MKL backend in the plan, so call it after the weights are loaded."""
    router = MatmulRouter(plan)
    packed: dict[tuple[str, int], torch.Tensor] = {}  # tied weights share one packed copy
    for module in net.modules():
        if not isinstance(module, nn.Linear):
            continue
        weight = module.weight
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            continue
        prepared = {}
        for name in set(plan.choices) - {"mkl"}:
            key = (name, weight.data_ptr())
            if key not in packed:
                packed[key] = BACKENDS[name].prepare(weight)
            prepared[name] = packed[key]
        module.forward = PlannedLinear(module, router, prepared)
    return router
