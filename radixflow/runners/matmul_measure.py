"""Measuring a `MatmulPlan` at startup: every usable backend timed on the model's dominant weight
shape (`dominant_weight`), for the classes "auto" measures (`AUTO_MEASURED`).

Exactness decides what "auto" may measure. Both libraries compute IEEE float32 (oneDNN is
refused when torch's float32 matmul precision is lowered, or when its probe result disagrees
with MKL's beyond float noise), but in another summation order: through SmolLM2-135M's 30 layers
that moved prompt logprobs up to 1.45e-4 from transformers' (which uses MKL; our MKL path matches
it bit for bit there), past the 1e-4 parity bar, while decode-round logprobs stayed within 6e-5
(rechecked on 6 Dec: 1.14e-4 on 1,500 random token ids; docs/real-models.md).
So "auto" measures only the decode classes and keeps prefill rounds (which produce prompt
logprobs) on MKL; a given plan (``"mkl"``, ``"onednn"``, ``"native"`` or
``"single=native,decode=onednn,prefill=onednn"``) may put any class anywhere.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.problems import Problem
from radixflow.runners.linear_backends import BACKENDS, LinearBackend
from radixflow.runners.matmul import MatmulPlan, unusable
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
    usable = [b for b in BACKENDS.values() if b.problem() is None]
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


def calibrated_plan(routes: str | None) -> MatmulPlan | None:
    """The plan a stored profile was timed on (``routes`` as `MatmulPlan.routes` writes them),
    where "auto" may run it instead of measuring: it parses, its backends run here and the classes
    "auto" does not measure keep MKL (a hand-edited file cannot move prefill off it); else None."""
    choices = None if routes is None else parse_choices(routes)
    if choices is None or isinstance(choices, Problem):
        return None
    plan = MatmulPlan(choices, "calibrated")
    kept = all(n == "mkl" for c, n in zip(SHAPE_CLASSES, choices, strict=True) if c.name not in AUTO_MEASURED)
    return plan if kept and not unusable(plan) else None


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
