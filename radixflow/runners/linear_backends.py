"""The CPU GEMM libraries a `MatmulPlan` routes an ``nn.Linear`` call to, by name (`BACKENDS`):
MKL (``F.linear``), oneDNN on a weight pre-packed into its blocked layout, and the native
kernels' few-row product (``rf_linear_rows``)."""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F

from radixflow.models.kernels.backend import native_library
from radixflow.models.kernels.native.build import Built, find_compiler
from radixflow.models.kernels.native.layer_ops import linear_rows
from radixflow.models.zoo import default_cache_dir


class LinearBackend(Protocol):
    name: str
    packs: bool  # whether `prepare` makes a copy of the weight (kept for the runner's lifetime)

    def problem(self) -> str | None:
        """Why this backend cannot compute IEEE float32 here (None: it can); checked at plan time."""
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

    def problem(self) -> str | None:
        return None

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, weight, bias)


class OneDnnLinear:
    """oneDNN's linear is reachable only through torch's private mkldnn ops (the ones inductor's
    CPU code generation calls), hence the ``noqa: SLF001`` below."""

    name = "onednn"
    packs = True

    def problem(self) -> str | None:
        mkldnn = torch.backends.mkldnn
        if not mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
            return "this torch build has no oneDNN float32 linear"
        # a lowered precision lets oneDNN compute float32 GEMMs in bf16 or tf32
        precision = getattr(getattr(mkldnn, "matmul", None), "fp32_precision", "none")
        if precision not in ("none", "ieee"):
            return f"float32 matmuls run at a lowered precision here (oneDNN: {precision})"
        if (torch_precision := torch.get_float32_matmul_precision()) != "highest":
            return f"float32 matmuls run at a lowered precision here (torch: {torch_precision})"
        return None

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

    def problem(self) -> str | None:
        built = _native_built()
        return None if built.library is not None else f"native kernels could not be built: {built.problem}"

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        lib = _native_built().library
        if lib is None:  # only a given plan gets here; the runner refuses it first (`unusable`)
            raise RuntimeError("the native kernels are not built on this machine")
        return linear_rows(lib, x, weight, bias)


@functools.cache
def _native_built() -> Built:
    """The native kernels' library where they build here, or why not: looked up once per process
    (a routed call must not search PATH for a compiler), built once (`native_library`)."""
    return native_library(default_cache_dir() / "kernels", find_compiler())


BACKENDS: dict[str, LinearBackend] = {b.name: b for b in (MklLinear(), OneDnnLinear(), NativeLinear())}
