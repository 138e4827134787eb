"""The layer pieces every family shares (`radixflow.models.layers`)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from radixflow.models.families.llama import PRESETS_LLAMA, LlamaForCausalLM
from radixflow.models.layers import Config


def test_a_config_copies_and_pickles() -> None:
    config = Config({"hidden_size": 8, "rope_parameters": {"rope_theta": 1e4}})
    for twin in (copy.copy(config), copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert twin.to_dict() == config.to_dict() and twin.hidden_size == 8
    with pytest.raises(AttributeError, match="'vocab_size'"):
        _ = config.vocab_size


def test_a_model_deep_copies() -> None:
    """A model holds its Config: copying the model (e.g. a float64 twin to check against) works."""
    model = LlamaForCausalLM(Config(PRESETS_LLAMA["tiny"]))
    twin = copy.deepcopy(model)
    assert twin.config.to_dict() == model.config.to_dict() and twin.config is not model.config
    assert all(torch.equal(a, b) for a, b in zip(twin.parameters(), model.parameters(), strict=True))
