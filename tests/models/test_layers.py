"""The layer pieces every family shares (`radixflow.models.layers`)."""

from __future__ import annotations

import copy
import importlib
import json
import pickle

import pytest
import torch
from model_utils import Pools, check, prompt, reference, run

from radixflow.models.families.llama import PRESETS_LLAMA, LlamaForCausalLM
from radixflow.models.io.loader import load_model, save_model
from radixflow.models.layers import Config
from radixflow.models.registry import model_class
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo_catalogue import FAMILY_SOURCES, preset_config


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


# rope_scaling (transformers 4's spelling) read with a theta of its own: transformers 5.24 takes it
# over rope_parameters whole (Llama's read rope_parameters first; the hybrids and LFM2 ignored it)
SCALING = {"rope_type": "default", "rope_theta": 321.0}


@pytest.mark.parametrize("with_parameters", [False, True], ids=["rope_scaling", "both"])
@pytest.mark.parametrize("preset", ["llama-tiny", "qwen3_5-tiny", "lfm2-tiny"])
def test_rope_scaling_is_read_as_transformers_reads_it(tmp_path, preset: str, with_parameters: bool) -> None:
    transformers = pytest.importorskip("transformers")
    config = preset_config(preset)
    model = model_class(config["model_type"])(Config(config))
    family = importlib.import_module(FAMILY_SOURCES[preset.removesuffix("-tiny")][0])
    family.init_weights(model, torch.Generator().manual_seed(3))
    save_model(model, tmp_path)
    if not with_parameters:
        config.pop("rope_parameters", None)
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_scaling": SCALING}))
    ours = load_model(tmp_path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    assert ref.config.rope_parameters["rope_theta"] == SCALING["rope_theta"]  # what transformers read
    ids = prompt(4, 40)
    pools = Pools(ours)
    (got,) = run(ours, pools, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    check(got, reference(ref, ids))
