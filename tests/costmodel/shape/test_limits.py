"""`limits.shape_problem`: the sizes a shape may have to be costed."""

from __future__ import annotations

import pytest

from radixflow.costmodel.shape.limits import layer_count_problem, shape_problem
from radixflow.costmodel.shape.mixer_shapes import Attention, GatedDeltaNet, Mamba2, Mixer
from radixflow.costmodel.shape.model_shape import Layer, Mlp, ModelShape


def _shape(mixer: Mixer) -> ModelShape:
    return ModelShape("m", hidden=64, vocab_size=100, layers=(Layer((mixer,), Mlp(128)),))


# More KV heads than query heads (or a count that does not divide them) was costed without a
# word: the KV pool and its reads priced at 8 heads for a model whose 4 query heads transformers
# cannot group over them, and which the torch runner refuses ("must divide num_attention_heads")
@pytest.mark.parametrize("kv_heads", [8, 3])
def test_kv_heads_that_do_not_divide_the_query_heads_are_a_problem(kv_heads):
    problem = shape_problem(_shape(Attention(heads=4, kv_heads=kv_heads, head_dim=16)))
    assert problem == f"gives layer 0's attention kv_heads {kv_heads} (must divide its heads, 4)"


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_kv_heads_that_divide_the_query_heads_are_no_problem(kv_heads):
    assert shape_problem(_shape(Attention(heads=4, kv_heads=kv_heads, head_dim=16))) is None


# A negative count built no layers and was refused as "has 0 layers", or (a Qwen hybrid) as
# "layer_types has 0 entries, but num_hidden_layers is -4" of a config that gives no layer_types
@pytest.mark.parametrize("count", [0, -4, "-4"])
def test_a_layer_count_below_one_is_named_as_given(count):
    assert (
        layer_count_problem({"num_hidden_layers": count})
        == f"num_hidden_layers must be at least 1, got {count}"
    )


@pytest.mark.parametrize("count", [None, 1, 65536, "12"])
def test_a_layer_count_from_one_to_the_limit_or_none_is_no_problem(count):
    assert layer_count_problem({"num_hidden_layers": count}) is None


# The same for a Gated DeltaNet's key heads (each serves a group of value heads) and a Mamba2's
# groups (each serves a group of heads): costed silently, refused by transformers and the torch runner
@pytest.mark.parametrize(
    ("mixer", "words"),
    [
        (
            GatedDeltaNet(k_heads=4, v_heads=6, k_dim=16, v_dim=16),
            "gdn k_heads 4 (must divide its v_heads, 6)",
        ),
        (Mamba2(heads=6, head_dim=16, d_state=16, groups=4), "mamba2 groups 4 (must divide its heads, 6)"),
    ],
)
def test_grouped_recurrent_heads_that_do_not_divide_the_heads_they_serve_are_a_problem(mixer, words):
    assert shape_problem(_shape(mixer)) == f"gives layer 0's {words}"


@pytest.mark.parametrize(
    "mixer",
    [
        GatedDeltaNet(k_heads=2, v_heads=6, k_dim=16, v_dim=16),
        Mamba2(heads=6, head_dim=16, d_state=16, groups=3),
    ],
)
def test_grouped_recurrent_heads_that_divide_the_heads_they_serve_are_no_problem(mixer):
    assert shape_problem(_shape(mixer)) is None
