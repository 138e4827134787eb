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
