"""The cost-model readers are read as the package is imported (the sim's zoo shapes), so a read
of them imports no plugin: a model_type they miss imports RADIXFLOW_PLUGINS' modules then, as
docs/extending.md says the first read of a registry does."""

from __future__ import annotations

import sys

import pytest

from radixflow.costmodel.shape.config_readers import READERS
from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.plugins import PLUGINS_ENV, forget_plugins

PLUGIN = """
from radixflow.costmodel.shape.config_readers import READERS

READERS.register("late_llama", READERS["llama"])
"""
CONFIG = {"model_type": "late_llama", "hidden_size": 256, "num_hidden_layers": 4, "vocab_size": 1000}
CONFIG |= {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512}


@pytest.fixture
def reader_plugin(tmp_path, monkeypatch):
    """RADIXFLOW_PLUGINS naming a module registering the `late_llama` reader, not imported yet."""
    (tmp_path / "late_reader.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_reader", raising=False)
    monkeypatch.setenv(PLUGINS_ENV, "late_reader")
    forget_plugins()
    try:
        yield
    finally:
        dict.pop(READERS, "late_llama", None)
        sys.modules.pop("late_reader", None)
        forget_plugins()


def test_a_model_type_the_readers_miss_imports_the_plugins_first(reader_plugin):
    # was `no cost-model reader for model_type 'late_llama'` unless another registry was read first
    shape = shape_from_config("late", CONFIG)
    assert shape.layers == shape_from_config("llama", {**CONFIG, "model_type": "llama"}).layers
