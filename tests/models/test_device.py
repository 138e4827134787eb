"""Device names checked up front: torch's own names, usable here, or a DeviceError naming what is."""

from __future__ import annotations

import pytest
import torch

from radixflow.models.device import DeviceError, available_devices, check_device


def test_cpu_is_always_available():
    assert available_devices()[0] == "cpu"
    assert check_device("cpu") == torch.device("cpu")
    assert check_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("name", ["tpu", "", "CPU", "cuda:-1", "cpu:x"])
def test_a_name_torch_does_not_know_is_refused(name):
    with pytest.raises(DeviceError, match=rf"unknown device '{name}' \(available here: cpu"):
        check_device(name)


def test_a_torch_device_type_the_runner_cannot_compute_on_is_refused():
    with pytest.raises(DeviceError, match="'meta' is not supported"):
        check_device("meta")


def test_an_accelerator_index_past_the_last_device_is_refused():
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(DeviceError, match="not available" if n == 0 else "does not exist"):
        check_device(f"cuda:{n}")


def test_dtype_auto_is_float32_on_a_cpu_and_names_are_torch_dtypes():
    from radixflow.models.device import resolve_dtype

    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("float32", "cpu") == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16  # allowed on a CPU (documented)


def test_float16_off_cuda_and_unknown_dtypes_are_refused():
    from radixflow.models.device import resolve_dtype

    with pytest.raises(DeviceError, match="float16 runs on cuda only, not on cpu"):
        resolve_dtype("float16", "cpu")
    with pytest.raises(DeviceError, match="'int8' is not one of"):
        resolve_dtype("int8", "cpu")
