"""Fixtures shared by the model tests."""

from __future__ import annotations

import pytest
import torch

from radixflow.models.kernels.backend import TORCH_KERNELS, Kernels, NativeKernels, resolve_kernels
from radixflow.models.kernels.native.build import find_compiler


@pytest.fixture(scope="session", params=["torch", "native"])
def kernels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    """Each kernels backend (`models.kernels.backend`: the decode steps, and the Gated DeltaNet
    prefill): the eager reference, then the native library, built once per test process
    (skipped where there is no C compiler)."""
    if request.param == "torch":
        return TORCH_KERNELS
    if find_compiler() is None:
        pytest.skip("no C compiler: the native kernels cannot be built here")
    return resolve_kernels("native", "cpu", torch.float32, tmp_path_factory.getbasetemp() / "kernels")


@pytest.fixture(scope="session")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeKernels:
    """The native kernels alone, built once per test process into a temporary cache (skipped
    where there is no C compiler: the eager kernels are what runs there, and the fallback tests
    cover that)."""
    if find_compiler() is None:
        pytest.skip("no C compiler: the native kernels cannot be built here")
    kernels = resolve_kernels("native", "cpu", torch.float32, tmp_path_factory.getbasetemp() / "kernels")
    assert isinstance(kernels, NativeKernels)
    return kernels
