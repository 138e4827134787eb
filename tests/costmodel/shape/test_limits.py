"""`limits.shape_problem`: the sizes a shape may have to be costed."""

from __future__ import annotations

import pytest

from radixflow.costmodel.shape.limits import shape_problem
from radixflow.costmodel.shape.mixer_shapes import Attention
from radixflow.costmodel.shape.model_shape import Layer, Mlp, ModelShape


def _shape(attention: Attention) -> ModelShape:
    return ModelShape("m", hidden=64, vocab_size=100, layers=(Layer((attention,), Mlp(128)),))


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
