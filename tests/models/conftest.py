"""Fixtures shared by the model tests."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from radixflow.models.kernels.backend import Kernels, resolve_kernels
from radixflow.models.kernels.native import build
from radixflow.models.kernels.native.build import find_compiler
from radixflow.models.kernels.native_kernels import NativeKernels
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS


@pytest.fixture(scope="session", params=["torch", "native", "AVX2"])
def kernels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    """Each kernels backend (`models.kernels.backend`: the decode steps, the Gated DeltaNet
    prefill, the Mamba2 and short-conv prefill conv): the eager reference, then the native
    library, built once per test process (skipped where there is no C compiler), then its AVX2
    build where this CPU has AVX-512 (users' machines may lack it: every family's model tests
    hold for that build too)."""
    if request.param == "torch":
        return TORCH_KERNELS
    if request.param == "AVX2":
        return _native_build(tmp_path_factory.getbasetemp(), portable=True)
    if find_compiler() is None:
        pytest.skip("no C compiler: the native kernels cannot be built here")
    return resolve_kernels("native", "cpu", torch.float32, tmp_path_factory.getbasetemp() / "kernels")


# This CPU's build (-march=native), then an AVX2 build (x86-64-v3: AVX2 + FMA, no AVX-512) of the
# same source: machines of this kind differ in CPU, and on an AVX-512 machine the AVX2 code paths
# (the kernels' 256-bit fallbacks) would otherwise never run under test.
PORTABLE_MARCH = "-march=x86-64-v3"


def _has_avx512() -> bool:
    return platform.machine() in ("x86_64", "AMD64") and "avx512f" in build._cpu_flags().split()


def _native_build(base: Path, portable: bool) -> NativeKernels:
    """The native kernels built into ``base / "kernels"`` (skipped without a C compiler: the eager
    kernels are what runs there, and the fallback tests cover that): for this CPU, or, with
    ``portable``, for an AVX2 machine (skipped where this CPU lacks AVX-512: its own build is that)."""
    if find_compiler() is None:
        pytest.skip("no C compiler: the native kernels cannot be built here")
    cache = base / "kernels"
    with pytest.MonkeyPatch.context() as patch:
        if portable:
            if not _has_avx512():
                pytest.skip("this CPU has no AVX-512: its own build is the AVX2 one")
            flags = tuple(PORTABLE_MARCH if f == "-march=native" else f for f in build.FLAGS)
            patch.setattr(build, "FLAGS", flags)
            cache = cache / "avx2"
        kernels = resolve_kernels("native", "cpu", torch.float32, cache)
    assert isinstance(kernels, NativeKernels)
    return kernels


@pytest.fixture(scope="session", params=["this CPU", "AVX2"])
def native(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> NativeKernels:
    """The native kernels alone, built once per test process into a temporary cache: this CPU's
    build, then an AVX2 build where this CPU has AVX-512."""
    return _native_build(tmp_path_factory.getbasetemp(), portable=request.param == "AVX2")


@pytest.fixture(scope="session")
def native_here(tmp_path_factory: pytest.TempPathFactory) -> NativeKernels:
    """This CPU's native build alone (the one a run here loads)."""
    return _native_build(tmp_path_factory.getbasetemp(), portable=False)
