"""The torch runner's thread count when none is given: torch's own, at most this machine's CPUs."""

from __future__ import annotations

import pytest
import torch

from radixflow.generation import LLM
from radixflow.options import torch_choice


@pytest.mark.parametrize(("torch_own", "cpus", "runs_on"), [(2, 1, 1), (1, 2, 1)])
def test_torch_threads_left_out_run_torch_own_count_at_most_the_cpus(
    zoo, monkeypatch, torch_own, cpus, runs_on
):
    # in a container whose CPU quota is below its affinity mask, torch's own count (a thread per
    # CPU of the mask) ran that many threads on the few CPUs the quota gives, every round many
    # times slower; a count within the CPUs is left as it is (never raised to them)
    monkeypatch.setattr(torch_choice, "cpu_count", lambda: cpus, raising=False)
    torch.set_num_threads(torch_own)  # conftest puts one thread back after the test
    LLM("qwen3-tiny", kv_blocks=64).close()
    assert torch.get_num_threads() == runs_on
