"""Which CPU GEMM library runs the model's ``nn.Linear`` layers, chosen by measurement.

PyTorch reaches float32 GEMM on x86 CPUs two ways: MKL (``F.linear``) and oneDNN
(``torch.ops.mkldnn._linear_pointwise`` on a weight pre-packed into oneDNN's blocked layout); the
native kernels add a third for a few rows (``rf_linear_rows``: each weight row read once, as one
stream, where both libraries read the weights of a 1-row call at a fraction of the memory's
speed). Which is faster depends on the CPU, the thread count and the number of rows (on the
machine this was written on, oneDNN won at a few rows, MKL at one, and they tied at prefill sizes;
the native rows beat both at one row). So the runner routes every Linear call by its shape class
(`SHAPE_CLASSES`: decode rounds of a few rows, decode rounds of a batch, anything with a prefill
chunk) through a `MatmulPlan`, measured once at startup on the model's own dominant weight shape.
Measuring it is `matmul_measure`; the backends are `linear_backends`.

A oneDNN-packed weight is a second copy of that weight, kept for the runner's lifetime; a plan
without oneDNN packs nothing. The native rows read the weight where it lies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from radixflow.problems import Problem
from radixflow.runners.linear_backends import BACKENDS, LinearBackend
from radixflow.runners.matmul_plan import SHAPE_CLASSES, parse_choices


def unusable(plan: MatmulPlan) -> list[str]:
    """Each backend ``plan`` names that cannot run here, with why (``native cannot run on this
    machine: ...``), in class order (a given plan is not measured, so nothing else catches one)."""
    names = dict.fromkeys(plan.choices)
    why = {name: BACKENDS[name].problem() for name in names}
    return [f"{name} cannot run on this machine: {why[name]}" for name in names if why[name] is not None]


@dataclass(frozen=True)
class MatmulPlan:
    """Backend name per shape class (in `SHAPE_CLASSES` order), and how it was chosen."""

    choices: tuple[str, ...]
    source: str  # "measured", "given" or "calibrated" (a stored profile's, `matmul_measure`)
    # seconds per probe call, per measured class and backend (measured plans only)
    timings: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    def backend_for(self, rows: int, decode_only: bool) -> LinearBackend:
        for cls, name in zip(SHAPE_CLASSES, self.choices, strict=True):
            if cls.decode_only == decode_only and rows <= cls.max_rows:
                return BACKENDS[name]
        return BACKENDS[self.choices[-1]]  # large decode rounds count as prefill

    def routes(self) -> str:
        """The backend of each class as ``--matmul`` takes it, e.g. ``single=mkl,decode=onednn,
        prefill=mkl``: what a round's cost depends on, however the plan was chosen."""
        return ",".join(f"{c.name}={n}" for c, n in zip(SHAPE_CLASSES, self.choices, strict=True))

    def describe(self) -> str:
        """One line, e.g. ``single=mkl decode=onednn prefill=mkl (measured)``."""
        return f"{self.routes().replace(',', ' ')} ({self.source})"


def parse_plan(spec: str) -> MatmulPlan | Problem | None:
    """``"auto"`` (None: measure), one backend name for every class, or ``class=backend`` pairs
    separated by commas (classes not named keep MKL). A bad spec is a `Problem` on ``matmul``
    (`matmul_plan.parse_choices`)."""
    choices = parse_choices(spec)
    return choices if choices is None or isinstance(choices, Problem) else MatmulPlan(choices, "given")


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
        # the module's parameter dict, not the module: the module holds this as its ``forward``,
        # and holding the module back would be a cycle that keeps a dropped model's weights alive
        # until the cycle collector runs. `nn.Module.__getattr__` reads the same dict (at ~0.7 us
        # a name: two names on every Linear call of every round), so a parameter set later is seen.
        self.params = module._parameters  # noqa: SLF001
        self.router, self.prepared = router, prepared

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(x.shape[-1], 1)
        backend = self.router.plan.backend_for(rows, self.router.decode_only)
        params = self.params
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
